/* gemm_call_bench.c (needs a GPU): the host cost of a GEMM memo hit against a bare
 * cublasLtMatmul with the same descriptors, in one process: GemmFwdOp on a bfloat16 shape that
 * cuBLASLt serves (m above the skinny kernel's 64), tr_op_call_into and tr_op_call against
 * tr_lt_gemm_run of a GEMM made for the same shape (the same heuristic algorithm), on the same
 * stream, interleaved in rounds of BATCH calls a path, the stream drained between rounds.
 * Prints a table of medians (microseconds of host time per call), each path against the bare call
 * as the median of the per-round differences (a round's paths share the host's pace).
 *
 *   bazel build -c opt //runtime:gemm_call_bench && bazel-bin/runtime/gemm_call_bench [ROUNDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/driver.h"
#include "platform/platform.h"
#include "tilerun/tilerun.h"

#define BATCH 100
enum { M = 128, N = 4096, K = 4096 };

static int fail(tr_status *status) {
  fprintf(stderr, "gemm_call_bench: %s\n", tr_status_message(status));
  tr_status_destroy(&status);
  return 1;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static DLTensor tensor(tr_cu_ptr p, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.data = (void *)(uintptr_t)p;
  t.device.device_type = kDLCUDA;
  t.ndim = 2;
  t.dtype.code = kDLBfloat;
  t.dtype.bits = 16;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: gemm_call_bench [ROUNDS]\n  host time per memo-hit GemmFwdOp call (%dx%dx%d bfloat16, trans_b, "
           "cuBLASLt) vs a bare cublasLtMatmul with the same descriptors on cuda:0, ROUNDS rounds of %d calls per "
           "path (default 40)\n", M, N, K, BATCH);
    return 0;
  }
  int rounds = argc > 1 ? atoi(argv[1]) : 40;
  if (rounds < 1) rounds = 40;
  tr_runtime *rt = NULL;
  tr_status *status = tr_runtime_new(NULL, &rt);
  if (status != NULL) return fail(status);
  tr_named_value params[2] = {{"trans_a", tr_value_bool(false)}, {"trans_b", tr_value_bool(true)}};
  tr_op *op = NULL;
  if ((status = tr_op_new(rt, "GemmFwdOp", params, 2, TR_BUILTIN, &op)) != NULL) return fail(status);
  tr_cu_ctx ctx = NULL, previous = NULL;
  if ((status = tr_cu_enter_device(0, &ctx, &previous)) != NULL) return fail(status);
  tr_cu_ptr a = 0, b = 0, d = 0;
  if ((status = tr_cu_alloc((size_t)M * K * 2, &a)) != NULL) return fail(status);
  if ((status = tr_cu_alloc((size_t)N * K * 2, &b)) != NULL) return fail(status);
  if ((status = tr_cu_alloc((size_t)M * N * 2, &d)) != NULL) return fail(status);
  tr_cu_stream stream = tr_cu_current_stream(0);
  if ((status = tr_cu_memset_async(a, 0, (size_t)M * K * 2, stream)) != NULL) return fail(status);
  if ((status = tr_cu_memset_async(b, 0, (size_t)N * K * 2, stream)) != NULL) return fail(status);
  int64_t sa[2] = {M, K}, sb[2] = {N, K}, sd[2] = {M, N};
  DLTensor ta = tensor(a, sa), tb = tensor(b, sb), td = tensor(d, sd);
  const DLTensor *in[2] = {&ta, &tb};
  DLTensor *out[1] = {&td};
  if ((status = tr_op_call_into(op, in, 2, out, 1)) != NULL) return fail(status); /* the miss: built once */
  const tr_named_value *config = NULL;
  size_t n_config = tr_op_kernel_config(op, &config);
  const char *impl = n_config > 0 && config[0].value.kind == TR_VALUE_STR ? config[0].value.as.str.data : "?";
  tr_lt_shape shape = {TR_LT_BFLOAT16, 0, 1, M, N, K};
  tr_lt_gemm *bare = NULL;
  if ((status = tr_lt_gemm_new(0, &shape, &bare)) != NULL) return fail(status);
  enum { P_BARE, P_INTO, P_CALL, N_PATHS };
  double *samples = calloc((size_t)rounds * N_PATHS, sizeof(double));
  if (samples == NULL) return 1;
  for (int r = 0; r < rounds; r++) {
    for (int j = 0; j < N_PATHS; j++) {
      int p = (j + r) % N_PATHS; /* each path first in a round as often as the others */
      if ((status = tr_cu_stream_sync(stream)) != NULL) return fail(status);
      uint64_t t0 = tr_plat_now_ns();
      for (int i = 0; i < BATCH && status == NULL; i++) {
        if (p == P_BARE) status = tr_lt_gemm_run(bare, (void *)(uintptr_t)a, (void *)(uintptr_t)b, (void *)(uintptr_t)d, stream);
        else if (p == P_INTO) status = tr_op_call_into(op, in, 2, out, 1);
        else {
          DLManagedTensor *o[1] = {NULL};
          status = tr_op_call(op, in, 2, o, 1);
          if (o[0] != NULL) o[0]->deleter(o[0]);
        }
      }
      if (status != NULL) return fail(status);
      samples[p * rounds + r] = (double)(tr_plat_now_ns() - t0) / 1e3 / BATCH;
    }
    fprintf(stderr, "\rround %d/%d", r + 1, rounds);
  }
  fprintf(stderr, "\n");
  /* Each path's median, and the median of its per-round difference to the bare call: the host's
   * pace drifts between rounds more than the paths differ, and a round's paths share its pace. */
  double med[N_PATHS], over[N_PATHS] = {0};
  double *diff = calloc((size_t)rounds, sizeof(double));
  if (diff == NULL) return 1;
  for (int p = 0; p < N_PATHS; p++) {
    for (int r = 0; r < rounds; r++) diff[r] = samples[p * rounds + r] - samples[P_BARE * rounds + r];
    qsort(diff, (size_t)rounds, sizeof(double), compare);
    over[p] = diff[rounds / 2];
  }
  free(diff);
  for (int p = 0; p < N_PATHS; p++) {
    qsort(samples + p * rounds, (size_t)rounds, sizeof(double), compare);
    med[p] = samples[p * rounds + rounds / 2];
  }
  printf("host time per call, GemmFwdOp %dx%dx%d bfloat16 trans_b on cuda:0 (kernel %s; cuBLASLt %zu), median of %d "
         "rounds of %d calls\n", M, N, K, impl, tr_lt_version(), rounds, BATCH);
  printf("| path | us/call | over bare cublasLtMatmul (median of the rounds' differences) |\n| --- | --- | --- |\n");
  printf("| bare cublasLtMatmul (same shape, descriptors and heuristic algorithm) | %.2f | - |\n", med[P_BARE]);
  printf("| tr_op_call_into (memo hit) | %.2f | %+.2f us |\n", med[P_INTO], over[P_INTO]);
  printf("| tr_op_call (memo hit, output allocated and freed) | %.2f | %+.2f us |\n", med[P_CALL], over[P_CALL]);
  printf("goal: a memo hit at most 0.5 us over the bare call: tr_op_call_into %s (%+.2f us), tr_op_call %s (%+.2f us)\n",
         over[P_INTO] <= 0.5 ? "met" : "NOT met", over[P_INTO], over[P_CALL] <= 0.5 ? "met" : "NOT met", over[P_CALL]);
  free(samples);
  tr_lt_gemm_destroy(bare);
  tr_cu_free(a);
  tr_cu_free(b);
  tr_cu_free(d);
  tr_cu_restore_context(ctx, previous);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
  return strcmp(impl, "gemm_cublaslt") == 0 ? 0 : 2;
}
