/* check_bench.c: the benchmark of checking one call against the manifest (RMSNormFwdOp and
 * GQADecodeFwdOp, the two rows): prints a table of nanoseconds per check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/manifest.h"
#include "platform/platform.h"

static void die(tr_status *status) {
  char text[1024];
  tr_status_format(status, text, sizeof(text));
  fprintf(stderr, "check_bench: %s\n", text);
  exit(1);
}

#define CHECKED(expr)               \
  do {                              \
    tr_status *s_ = (expr);         \
    if (s_ != NULL) die(s_);        \
  } while (0)

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct row {
  const char *label;
  const tr_op_def *op;
  tr_value settled[TR_SIG_MAX_PARAMS];
  const tr_tensor_spec *inputs[TR_SIG_MAX_INPUTS];
  size_t n_inputs;
  const tr_named_value *params;
  size_t n_params;
} row;

/* Nanoseconds per iteration of `what` (0: check a call, 1: settle params), best and median of
 * `reps` runs of `iters` iterations. */
static void measure(row *r, int what, long iters, int reps, double *best, double *median) {
  double *ns = calloc((size_t)reps, sizeof(double));
  tr_call_check out;
  volatile int32_t sink = 0;
  for (int rep = 0; rep < reps; rep++) {
    uint64_t start = tr_plat_now_ns();
    for (long i = 0; i < iters; i++) {
      if (what == 0) {
        tr_status *s = tr_op_def_check(r->op, r->settled, r->inputs, r->n_inputs, &out);
        if (s != NULL) die(s);
        sink += out.outputs[0].rank;
      } else {
        tr_value settled[TR_SIG_MAX_PARAMS];
        tr_status *s = tr_op_def_bind_params(r->op, r->params, r->n_params, settled);
        if (s != NULL) die(s);
        sink += settled[0].kind;
        tr_op_params_clear(r->op, settled);
      }
    }
    ns[rep] = (double)(tr_plat_now_ns() - start) / (double)iters;
  }
  qsort(ns, (size_t)reps, sizeof(double), compare_double);
  *best = ns[0];
  *median = ns[reps / 2];
  free(ns);
  (void)sink;
}

int main(int argc, char **argv) {
  const char *dir = "manifest/spec";
  long iters = 1000000;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: check_bench [--manifest DIR] [--iters N]\n"
             "Times checking one call against the manifest (RMSNormFwdOp, GQADecodeFwdOp) and\n"
             "settling an op instance's params; prints ns per operation (best and median of 9\n"
             "runs of N iterations, default 1000000). Goal: a check under 1000 ns.\n");
      return 0;
    } else if (strcmp(argv[i], "--manifest") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = atol(argv[++i]);
      if (iters <= 0) {
        fprintf(stderr, "check_bench: --iters needs a positive number, got '%s'\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "check_bench: unknown argument '%s' (try --help)\n", argv[i]);
      return 2;
    }
  }
  tr_manifest *m = NULL;
  CHECKED(tr_manifest_load_dir(dir, &m));
  if (tr_manifest_find(m, "RMSNormFwdOp") == NULL || tr_manifest_find(m, "GQADecodeFwdOp") == NULL) {
    fprintf(stderr, "check_bench: the manifest in %s lacks RMSNormFwdOp or GQADecodeFwdOp\n", dir);
    return 1;
  }
  tr_device cuda0;
  CHECKED(tr_device_parse("cuda:0", &cuda0));

  /* RMSNorm, Llama 3.1 8B prefill: x [2048, 4096] bf16, weight [4096]. */
  row rms, gqa;
  memset(&rms, 0, sizeof(rms));
  memset(&gqa, 0, sizeof(gqa));
  rms.label = "RMSNormFwdOp  x[2048,4096] w[4096] bf16";
  rms.op = tr_manifest_find(m, "RMSNormFwdOp");
  int64_t xs[] = {2048, 4096}, ws[] = {4096};
  tr_tensor_spec x, w;
  CHECKED(tr_tensor_spec_make(&cuda0, TR_BFLOAT16, 2, xs, &x));
  CHECKED(tr_tensor_spec_make(&cuda0, TR_BFLOAT16, 1, ws, &w));
  int64_t shape4096[] = {4096};
  tr_named_value rms_params[1];
  rms_params[0].name = "normalized_shape";
  CHECKED(tr_value_int_list(shape4096, 1, &rms_params[0].value));
  rms.params = rms_params;
  rms.n_params = 1;
  CHECKED(tr_op_def_bind_params(rms.op, rms.params, rms.n_params, rms.settled));
  rms.inputs[0] = &x;
  rms.inputs[1] = &w;
  rms.n_inputs = 2;

  /* GQA decode, Llama 3.1 8B batch 16, KV 4096. */
  gqa.label = "GQADecodeFwdOp q[16,32,128] kv[16,4096,8,128]";
  gqa.op = tr_manifest_find(m, "GQADecodeFwdOp");
  int64_t qs[] = {16, 32, 128}, ks[] = {16, 4096, 8, 128}, ls[] = {16};
  tr_tensor_spec q, k, v, lens;
  CHECKED(tr_tensor_spec_make(&cuda0, TR_BFLOAT16, 3, qs, &q));
  CHECKED(tr_tensor_spec_make(&cuda0, TR_BFLOAT16, 4, ks, &k));
  CHECKED(tr_tensor_spec_make(&cuda0, TR_BFLOAT16, 4, ks, &v));
  CHECKED(tr_tensor_spec_make(&cuda0, TR_INT32, 1, ls, &lens));
  tr_named_value gqa_params[3] = {{"heads", tr_value_int(32)}, {"heads_kv", tr_value_int(8)},
                                  {"dim", tr_value_int(128)}};
  gqa.params = gqa_params;
  gqa.n_params = 3;
  CHECKED(tr_op_def_bind_params(gqa.op, gqa.params, gqa.n_params, gqa.settled));
  gqa.inputs[0] = &q;
  gqa.inputs[1] = &k;
  gqa.inputs[2] = &v;
  gqa.inputs[3] = &lens;
  gqa.n_inputs = 4;

  row *rows[] = {&rms, &gqa};
  printf("manifest check benchmark: %ld iterations x 9 runs per cell, ns per operation\n", iters);
  printf("%-48s %-14s %10s %10s %8s\n", "call", "operation", "best ns", "median ns", "goal");
  for (int r = 0; r < 2; r++) {
    double best, median;
    measure(rows[r], 0, iters, 9, &best, &median);
    printf("%-48s %-14s %10.1f %10.1f %8s\n", rows[r]->label, "check call", best, median,
           median < 1000 ? "< 1000 ok" : "MISSED");
    measure(rows[r], 1, iters / 4 > 0 ? iters / 4 : 1, 9, &best, &median);
    printf("%-48s %-14s %10.1f %10.1f %8s\n", "", "settle params", best, median, "-");
  }
  tr_op_params_clear(rms.op, rms.settled);
  tr_op_params_clear(gqa.op, gqa.settled);
  tr_value_clear(&rms_params[0].value);
  tr_manifest_destroy(&m);
  return 0;
}
