/* alloc_pair_bench.c (needs a GPU): the host cost of a cuda output's allocation and release, the
 * part tr_op_call adds to tr_op_call_into: the output tensor (tr__alloc_tensor and its deleter),
 * its block alone (tr_cuda_pool_alloc + tr_cuda_pool_free, a pool hit), the block on the legacy
 * stream (whose capture is never asked), and the driver calls the pair makes (cuStreamIsCapturing)
 * or a launch makes (cuCtxGetCurrent), each alone. Prints a table of medians (nanoseconds of host time per pair).
 *
 *   bazel build -c opt //runtime:alloc_pair_bench && bazel-bin/runtime/alloc_pair_bench [ROUNDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/pool.h"
#include "platform/platform.h"
#include "runtime/internal.h"

#define BATCH 1000
/* 128 x 4096 bfloat16: gemm_call_bench's output */
#define ROWS 128
#define COLS 4096
#define BYTES ((size_t)ROWS * COLS * 2)

static int fail(tr_status *status) {
  fprintf(stderr, "alloc_pair_bench: %s\n", tr_status_message(status));
  tr_status_destroy(&status);
  return 1;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { P_TENSOR, P_BLOCK, P_LEGACY, P_CAPTURING, P_CTX, N_PATHS };

static const char *const kRows[N_PATHS] = {
    "output tensor: tr__alloc_tensor + its deleter (what tr_op_call adds), per-thread stream",
    "its block alone: tr_cuda_pool_alloc + tr_cuda_pool_free (a pool hit), per-thread stream",
    "the block on the legacy stream (capture never asked)",
    "cuStreamIsCapturing(per-thread stream) alone (the pair asks it at alloc and at free)",
    "cuCtxGetCurrent alone (tr_cu_enter_context, context current: each launch asks it)",
};

/* One pair (or one driver call) of path p. */
static tr_status *one(int p, tr_runtime *rt, tr_cuda_pool *pool, const tr_tensor_spec *spec, const DLDevice *dl,
                      tr_cu_ctx ctx, volatile int *sink) {
  if (p == P_TENSOR) {
    DLManagedTensor *t = NULL;
    TR_RETURN_IF_ERROR(tr__alloc_tensor(rt, spec, dl, &t));
    t->deleter(t);
    return NULL;
  }
  if (p == P_CAPTURING) {
    *sink += tr_cu_stream_capturing(TR_CU_PER_THREAD_STREAM);
    return NULL;
  }
  if (p == P_CTX) {
    tr_cu_ctx previous = NULL;
    TR_RETURN_IF_ERROR(tr_cu_enter_context(ctx, &previous));
    tr_cu_restore_context(ctx, previous);
    return NULL;
  }
  void *block = NULL;
  tr_cuda_origin origin;
  TR_RETURN_IF_ERROR(tr_cuda_pool_alloc(pool, 0, BYTES, &block, &origin));
  tr_cuda_pool_free(0, block, BYTES, &origin);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: alloc_pair_bench [ROUNDS]\n  host time per allocation and release of a cuda output (%dx%d bfloat16 "
           "on cuda:0) and its parts, ROUNDS rounds of %d pairs per path (default 50)\n", ROWS, COLS, BATCH);
    return 0;
  }
  int rounds = argc > 1 ? atoi(argv[1]) : 50;
  if (rounds < 1) rounds = 50;
  tr_runtime *rt = NULL;
  tr_status *status = tr_runtime_new(NULL, &rt);
  if (status != NULL) return fail(status);
  tr_cu_ctx ctx = NULL, previous = NULL;
  if ((status = tr_cu_enter_device(0, &ctx, &previous)) != NULL) return fail(status);
  tr_cuda_pool *pool = NULL; /* the block rows' own; the tensor row's is the runtime's */
  if ((status = tr_cuda_pool_new(&pool)) != NULL) return fail(status);
  const tr_tensor_spec spec = {{"cuda", 0}, {kDLBfloat, 16, 1}, 2, {ROWS, COLS}};
  const DLDevice dl = {kDLCUDA, 0};
  double *samples = calloc((size_t)rounds * N_PATHS, sizeof(double));
  if (samples == NULL) return 1;
  volatile int sink = 0;
  for (int r = 0; r < rounds; r++) {
    for (int p = 0; p < N_PATHS; p++) {
      if ((status = tr_cu_set_stream(0, p == P_LEGACY ? (tr_cu_stream)0x1 : NULL)) != NULL) return fail(status);
      if ((status = one(p, rt, pool, &spec, &dl, ctx, &sink)) != NULL) return fail(status); /* the first: a miss */
      uint64_t t0 = tr_plat_now_ns();
      for (int i = 0; i < BATCH && status == NULL; i++) status = one(p, rt, pool, &spec, &dl, ctx, &sink);
      uint64_t t1 = tr_plat_now_ns();
      if (status != NULL) return fail(status);
      samples[p * rounds + r] = (double)(t1 - t0) / BATCH;
    }
    if ((status = tr_cu_set_stream(0, NULL)) != NULL) return fail(status);
  }
  if ((status = tr_cu_stream_sync(TR_CU_PER_THREAD_STREAM)) != NULL) return fail(status);
  printf("host time per pair, a %dx%d bfloat16 cuda output on cuda:0, median of %d rounds of %d pairs\n", ROWS, COLS,
         rounds, BATCH);
  printf("| pair | ns |\n| --- | --- |\n");
  for (int p = 0; p < N_PATHS; p++) {
    qsort(samples + p * rounds, (size_t)rounds, sizeof(double), compare);
    printf("| %s | %.1f |\n", kRows[p], samples[p * rounds + rounds / 2]);
  }
  free(samples);
  tr_cuda_pool_destroy(&pool);
  tr_cu_restore_context(ctx, previous);
  tr_runtime_destroy(&rt);
  return 0;
}
