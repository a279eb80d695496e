/* call_bench.c: the hot path's benchmark: host time of one memo-hit call through tr_op_call (and
 * tr_op_call_into) on a CPU target whose kernel does nothing, against calling that kernel's
 * function pointer directly, measured side by side in one run. Goal: under 150 ns overhead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"
#include "tilerun/tilerun.h"

static volatile long g_calls;

static tr_status *noop_call(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                            size_t n_out) {
  (void)self;
  (void)in;
  (void)n_in;
  (void)out;
  (void)n_out;
  g_calls++;
  return NULL;
}

static tr_status *build_noop(void *ctx, const tr_build_request *req, tr_kernel *out) {
  (void)ctx;
  (void)req;
  out->call = noop_call;
  return NULL;
}

static tr_status *claim_cpu(void *ctx, const tr_device *device, int *claims) {
  (void)ctx;
  *claims = strcmp(device->type, "cpu") == 0;
  return NULL;
}

static tr_status *init_noop(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "noop", claim_cpu, NULL));
  return api->register_kernel_builder(api->host, "AddFwdOp", "noop", build_noop, NULL);
}

static void die(tr_status *s) {
  char text[1024];
  tr_status_format(s, text, sizeof(text));
  fprintf(stderr, "call_bench: %s\n", text);
  exit(1);
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { DIRECT, CALL_INTO, CALL };

int main(int argc, char **argv) {
  long iters = 2000000;
  const char *manifest = "manifest/spec";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: call_bench [--manifest DIR] [--iters N]\n"
             "Times a memo-hit AddFwdOp call (1-element float32 tensors on cpu) through tr_op_call\n"
             "and tr_op_call_into on a target whose kernel does nothing, against calling the\n"
             "kernel's function pointer directly; 9 interleaved runs, median ns per call.\n");
      return 0;
    } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--manifest") && i + 1 < argc) {
      manifest = argv[++i];
    } else {
      fprintf(stderr, "call_bench: unknown argument '%s' (try --help)\n", argv[i]);
      return 2;
    }
  }
  const char *names[] = {"noop"};
  const tr_backend_init_fn inits[] = {init_noop};
  const char *no_dirs[] = {"/nonexistent"};
  tr_runtime_options o;
  memset(&o, 0, sizeof(o));
  o.manifest_dir = manifest;
  o.backend_dirs = no_dirs;
  o.n_backend_dirs = 1;
  o.builtin_names = names;
  o.builtin_inits = inits;
  o.n_builtins = 1;
  tr_runtime *rt = NULL;
  tr_status *s = tr_runtime_new(&o, &rt);
  if (s) die(s);
  tr_op *op = NULL;
  if ((s = tr_op_new(rt, "AddFwdOp", NULL, 0, NULL, &op))) die(s);
  float a = 1, b = 2, c = 0;
  int64_t shape[1] = {1};
  DLTensor ta = {&a, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0}, tb = ta, tc = ta;
  tb.data = &b;
  tc.data = &c;
  const DLTensor *in[2] = {&ta, &tb};
  DLTensor *outs[1] = {&tc};
  DLManagedTensor *managed[1];
  if ((s = tr_op_call(op, in, 2, managed, 1))) die(s); /* the miss: builds */
  managed[0]->deleter(managed[0]);
  tr_kernel direct = {sizeof(tr_kernel), NULL, noop_call, NULL, NULL, NULL};
  DLTensor *args[2] = {&ta, &tb};
  double ns[3][9];
  for (int run = 0; run < 9; run++) {
    for (int mode = 0; mode < 3; mode++) {
      uint64_t start = tr_plat_now_ns();
      for (long i = 0; i < iters; i++) {
        if (mode == DIRECT) {
          s = direct.call(direct.self, args, 2, outs, 1);
        } else if (mode == CALL_INTO) {
          s = tr_op_call_into(op, in, 2, outs, 1);
        } else {
          s = tr_op_call(op, in, 2, managed, 1);
          if (s == NULL) managed[0]->deleter(managed[0]);
        }
        if (s) die(s);
      }
      ns[mode][run] = (double)(tr_plat_now_ns() - start) / (double)iters;
    }
  }
  for (int mode = 0; mode < 3; mode++) qsort(ns[mode], 9, sizeof(double), compare);
  double direct_ns = ns[DIRECT][4];
  printf("hot path benchmark: memo-hit AddFwdOp on cpu, a kernel that does nothing; %ld calls x 9 "
         "runs, median\n", iters);
  printf("%-44s %10s %14s %10s\n", "call", "ns/call", "overhead ns", "goal");
  printf("%-44s %10.1f %14s %10s\n", "kernel function pointer, directly", direct_ns, "-", "-");
  printf("%-44s %10.1f %14.1f %10s\n", "tr_op_call_into (caller's output)", ns[CALL_INTO][4],
         ns[CALL_INTO][4] - direct_ns, ns[CALL_INTO][4] - direct_ns < 150 ? "< 150 ok" : "MISSED");
  printf("%-44s %10.1f %14.1f %10s\n", "tr_op_call (allocates and frees the output)", ns[CALL][4],
         ns[CALL][4] - direct_ns, ns[CALL][4] - direct_ns < 150 ? "< 150 ok" : "MISSED");
  printf("memo entries: %zu (one build), kernel calls: %ld\n", tr_op_memo_count(op), (long)g_calls);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
  return 0;
}
