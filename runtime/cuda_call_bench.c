/* cuda_call_bench.c (needs a GPU): the hot path's host cost on CUDA, measured in one process:
 * a memo-hit tr_op_call_into and tr_op_call of RMSNorm (1 x 4096, float32 or bfloat16) against a bare
 * cuLaunchKernel of the very artifact the op built (and a bare overlapped cuLaunchKernelEx, the
 * way the op launches on sm_90), on the same stream, interleaved in rounds so that drift hits
 * all alike. Each round launches a batch per path onto an idle stream, so the GPU's pace never
 * holds the host back. Prints a table of medians (microseconds of host time per call). Then the
 * host time of a memo miss whose build identity the runtime kept (a new batch size) against the
 * same miss in a fresh runtime, which asks the build component.
 *
 *   bazel build -c opt //runtime:cuda_call_bench && bazel-bin/runtime/cuda_call_bench [--dtype D] [ROUNDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/artifact.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/pool.h"
#include "kernels/intree/intree.h"
#include "platform/platform.h"
#include "tilerun/tilerun.h"

#define BATCH 200

static int fail(tr_status *status) {
  fprintf(stderr, "cuda_call_bench: %s\n", tr_status_message(status));
  tr_status_destroy(&status);
  return 1;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The op's kernel config says whether it launches overlapped. */
static int overlapped(tr_op *op) {
  const tr_named_value *config = NULL;
  size_t n = tr_op_kernel_config(op, &config);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(config[i].name, "overlap") == 0) return config[i].value.kind == TR_VALUE_BOOL && config[i].value.as.b;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: cuda_call_bench [--dtype float32|bfloat16] [ROUNDS]\n  host time per memo-hit call vs a bare "
           "cuLaunchKernel (RMSNorm 1x4096 on cuda:0, float32 by default), ROUNDS rounds of %d calls per path onto an "
           "idle stream (default 60)\n", BATCH);
    return 0;
  }
  DLDataType dt = {kDLFloat, 32, 1};
  const char *dt_name = "float32";
  if (argc > 2 && strcmp(argv[1], "--dtype") == 0) {
    if (strcmp(argv[2], "bfloat16") == 0) dt = (DLDataType){kDLBfloat, 16, 1};
    else if (strcmp(argv[2], "float32") != 0) {
      fprintf(stderr, "cuda_call_bench: --dtype is float32 or bfloat16, got '%s'\n", argv[2]);
      return 2;
    }
    dt_name = argv[2];
    argc -= 2;
    argv += 2;
  }
  size_t row_bytes = 4096 * (size_t)(dt.bits / 8);
  int rounds = argc > 1 ? atoi(argv[1]) : 60;
  if (rounds < 1) rounds = 60;
  tr_runtime *rt = NULL;
  tr_status *status = tr_runtime_new(NULL, &rt);
  if (status != NULL) return fail(status);
  int64_t row = 4096;
  tr_value shape;
  if ((status = tr_value_int_list(&row, 1, &shape)) != NULL) return fail(status);
  tr_named_value params[2] = {{"normalized_shape", shape}, {"eps", tr_value_float(1e-6)}};
  tr_op *op = NULL;
  if ((status = tr_op_new(rt, "RMSNormFwdOp", params, 2, NULL, &op)) != NULL) return fail(status);
  tr_value_clear(&shape);

  /* inputs and an output on cuda:0, through the in-tree allocator */
  void *x = NULL, *w = NULL, *y = NULL;
  if ((status = tr_cu_load()) != NULL) return fail(status);
  tr_cu_ctx ctx = NULL, previous = NULL;
  if ((status = tr_cu_device_context(0, &ctx)) != NULL) return fail(status);
  if ((status = tr_cu_enter_context(ctx, &previous)) != NULL) return fail(status);
  tr_cuda_pool *pool = NULL; /* the bench's own blocks; the ops' outputs come from the runtime's */
  if ((status = tr_cuda_pool_new(&pool)) != NULL) return fail(status);
  tr_cuda_origin reuse_x, reuse_w, reuse_y;
  if ((status = tr_cuda_pool_alloc(pool, 0, row_bytes, &x, &reuse_x)) != NULL ||
      (status = tr_cuda_pool_alloc(pool, 0, row_bytes, &w, &reuse_w)) != NULL ||
      (status = tr_cuda_pool_alloc(pool, 0, row_bytes, &y, &reuse_y)) != NULL) {
    return fail(status);
  }
  int64_t xs[2] = {1, 4096}, ws[1] = {4096};
  DLTensor tx = {x, {kDLCUDA, 0}, 2, dt, xs, NULL, 0};
  DLTensor tw = {w, {kDLCUDA, 0}, 1, dt, ws, NULL, 0};
  DLTensor ty = tx;
  ty.data = y;
  const DLTensor *in[2] = {&tx, &tw};
  DLTensor *out[1] = {&ty};
  if ((status = tr_op_call_into(op, in, 2, out, 1)) != NULL) return fail(status); /* builds */

  /* the same artifact, loaded and launched by hand */
  const tr_intree_op *fam = tr_intree_find("RMSNormFwdOp");
  tr_device dev = {"cuda", 0};
  tr_device_facts facts;
  if ((status = tr_device_facts_of(rt, &dev, &facts)) != NULL) return fail(status);
  const tr_tensor_spec sx = {{"cuda", 0}, dt, 2, {1, 4096}}, sw = {{"cuda", 0}, dt, 1, {4096}};
  const tr_tensor_spec *specs[2] = {&sx, &sw};
  const char *iface = NULL;
  tr_call_spec call;
  if ((status = fam->call_spec(specs, 2, params, 2, &dev, &iface, &call)) != NULL) return fail(status);
  const tr_kernel_type *type = fam->types[1]; /* rms_norm_looped: what the selector picks for 4096 */
  tr_intree_source src;
  if ((status = tr_intree_source_for(type, &call, facts.arch, &src)) != NULL) return fail(status);
  char arch[16];
  tr_intree_arch_name(facts.arch, arch, sizeof(arch));
  uint32_t threads = src.block;
  if (src.wide_block > 0) { /* one row: the op launches the wide build */
    tr_intree_source narrow = src;
    tr_intree_wide_source(&narrow, &src);
    threads = src.wide_block;
  }
  tr_artifact_cache cache;
  tr_artifact_cache_default(&cache);
  tr_artifact_source as = {src.name, src.source, arch, src.options, src.n_options, src.entry};
  tr_artifact art;
  if ((status = tr_artifact_build(&as, &cache, &art, NULL, NULL)) != NULL) return fail(status);
  tr_cu_module module;
  tr_cu_function fn;
  if ((status = tr_cu_module_load(art.cubin, src.name, src.entry, &module, &fn)) != NULL) return fail(status);
  tr_cu_stream stream = tr_cu_current_stream(0);
  void *b = NULL;
  int64_t rows = 1;
  float eps = 1e-6f;
  void *args[] = {&x, &w, &b, &y, &rows, &eps};

  /* Each path launches BATCH calls onto an idle stream (synchronised before, outside the timing), so
   * that the queue never fills and the time is the host's alone, not the GPU's pace. */
  enum { P_BARE, P_BARE_EX, P_INTO, P_CALL, P_CAPT, P_POOL, N_PATHS };
  double *t[N_PATHS];
  for (int p = 0; p < N_PATHS; p++) t[p] = calloc((size_t)rounds, sizeof(double));
  volatile int sink = 0;
  for (int r = 0; r < rounds && status == NULL; r++) {
    for (int p = 0; p < N_PATHS && status == NULL; p++) {
      status = tr_cu_stream_sync(stream);
      uint64_t t0 = tr_plat_now_ns();
      for (int i = 0; i < BATCH && status == NULL; i++) {
        if (p == P_BARE) status = tr_cu_launch(fn, "bare", 1, 1, threads, 0, stream, args);
        else if (p == P_BARE_EX) status = tr_cu_launch_ex(fn, "bare", 1, 1, threads, 0, stream, args, 1);
        else if (p == P_INTO) status = tr_op_call_into(op, in, 2, out, 1);
        else if (p == P_CAPT) sink += tr_cu_stream_capturing(stream);
        else if (p == P_POOL) { /* the output's block: from the pool and back */
          void *block = NULL;
          tr_cuda_origin reusable;
          status = tr_cuda_pool_alloc(pool, 0, row_bytes, &block, &reusable);
          tr_cuda_pool_free(0, block, row_bytes, &reusable);
        }
        else {
          DLManagedTensor *o = NULL;
          status = tr_op_call(op, in, 2, &o, 1);
          if (o != NULL) o->deleter(o);
        }
      }
      t[p][r] = (double)(tr_plat_now_ns() - t0) / BATCH / 1e3;
    }
    fprintf(stderr, "\rround %d/%d", r + 1, rounds);
  }
  fprintf(stderr, "\n");
  if (status == NULL) status = tr_cu_stream_sync(stream);
  if (status != NULL) return fail(status);
  double med[N_PATHS];
  for (int p = 0; p < N_PATHS; p++) {
    qsort(t[p], (size_t)rounds, sizeof(double), compare);
    med[p] = t[p][rounds / 2];
  }
  double bare = med[P_BARE];
  printf("host time per call, RMSNorm 1x4096 %s on cuda:0 (%s, kernel %s, overlap %s), median of %d rounds of "
         "%d calls onto an idle stream\n", dt_name, arch, src.name, overlapped(op) ? "on" : "off", rounds, BATCH);
  printf("| path | us/call | over bare cuLaunchKernel |\n| --- | --- | --- |\n");
  printf("| bare cuLaunchKernel (same artifact) | %.2f | - |\n", bare);
  printf("| bare cuLaunchKernelEx, overlapped (programmatic dependent launch, as the op launches on sm_90) | %.2f | %+.2f us |\n",
         med[P_BARE_EX], med[P_BARE_EX] - bare);
  printf("| tr_op_call_into (memo hit) | %.2f | %+.2f us |\n", med[P_INTO], med[P_INTO] - bare);
  printf("| tr_op_call (memo hit, output allocated and freed) | %.2f | %+.2f us |\n", med[P_CALL], med[P_CALL] - bare);
  printf("| (part of tr_op_call: the output's block from the pool and back, tr_cuda_pool_alloc + tr_cuda_pool_free) | %.3f | - |\n",
         med[P_POOL]);
  printf("| (part of that: one cuStreamIsCapturing, asked at allocation and again at free) | %.3f | - |\n", med[P_CAPT]);
  printf("goal: tr_op_call at most 0.5 us over the bare launch: %s (%+.2f us); over the bare launch made the same way "
         "as the op's: %+.2f us\n", med[P_CALL] - bare <= 0.5 ? "met" : "NOT met", med[P_CALL] - bare,
         med[P_CALL] - med[P_BARE_EX]);

  /* Memo misses: a new batch size of a build identity this runtime built (its artifacts kept, so
   * loaded again), against the same call in a fresh runtime (the build component asked: the disk
   * cache's file read, or NVRTC where the cache is off). Host time of the one call each. */
  enum { MISSES = 48, FRESH = 8 };
  void *xb = NULL, *yb = NULL;
  tr_cuda_origin reuse_xb, reuse_yb;
  if ((status = tr_cuda_pool_alloc(pool, 0, (size_t)(MISSES + 1) * row_bytes, &xb, &reuse_xb)) != NULL ||
      (status = tr_cuda_pool_alloc(pool, 0, (size_t)(MISSES + 1) * row_bytes, &yb, &reuse_yb)) != NULL) {
    return fail(status);
  }
  double kept[MISSES], fresh[FRESH];
  for (int i = 0; i < MISSES && status == NULL; i++) {
    int64_t bs[2] = {2 + i, 4096}; /* batch 1 is memoised already */
    DLTensor bx = {xb, {kDLCUDA, 0}, 2, dt, bs, NULL, 0}, by = bx;
    by.data = yb;
    const DLTensor *bin[2] = {&bx, &tw};
    DLTensor *bout[1] = {&by};
    uint64_t t0 = tr_plat_now_ns();
    status = tr_op_call_into(op, bin, 2, bout, 1);
    kept[i] = (double)(tr_plat_now_ns() - t0) / 1e3;
  }
  for (int i = 0; i < FRESH && status == NULL; i++) {
    tr_runtime *rt2 = NULL;
    tr_op *op2 = NULL;
    status = tr_runtime_new(NULL, &rt2);
    if (status == NULL) status = tr_value_int_list(&row, 1, &shape);
    tr_named_value params2[2] = {{"normalized_shape", shape}, {"eps", tr_value_float(1e-6)}};
    if (status == NULL) status = tr_op_new(rt2, "RMSNormFwdOp", params2, 2, NULL, &op2);
    tr_value_clear(&shape);
    int64_t bs[2] = {2 + i, 4096};
    DLTensor bx = {xb, {kDLCUDA, 0}, 2, dt, bs, NULL, 0}, by = bx;
    by.data = yb;
    const DLTensor *bin[2] = {&bx, &tw};
    DLTensor *bout[1] = {&by};
    uint64_t t0 = tr_plat_now_ns();
    if (status == NULL) status = tr_op_call_into(op2, bin, 2, bout, 1);
    fresh[i] = (double)(tr_plat_now_ns() - t0) / 1e3;
    if (status == NULL) status = tr_cu_stream_sync(stream); /* before its runtime goes */
    tr_op_destroy(&op2);
    tr_runtime_destroy(&rt2);
  }
  if (status == NULL) status = tr_cu_stream_sync(stream);
  if (status != NULL) return fail(status);
  qsort(kept, MISSES, sizeof(double), compare);
  qsort(fresh, FRESH, sizeof(double), compare);
  printf("\nmemo misses of RMSNorm 4096 %s on cuda:0 (host time of one tr_op_call_into, median):\n", dt_name);
  printf("| miss | us | calls |\n| --- | --- | --- |\n");
  printf("| a new batch size, its build identity built by this runtime (artifacts kept) | %.1f | %d |\n",
         kept[MISSES / 2], MISSES);
  printf("| the same in a fresh runtime (the build component asked: disk cache %s) | %.1f | %d |\n",
         cache.enabled ? "on" : "off", fresh[FRESH / 2], FRESH);
  tr_cuda_pool_free(0, xb, (size_t)(MISSES + 1) * row_bytes, &reuse_xb);
  tr_cuda_pool_free(0, yb, (size_t)(MISSES + 1) * row_bytes, &reuse_yb);

  tr_artifact_clear(&art);
  tr_call_spec_clear(&call);
  tr_cuda_pool_free(0, x, row_bytes, &reuse_x);
  tr_cuda_pool_free(0, w, row_bytes, &reuse_w);
  tr_cuda_pool_free(0, y, row_bytes, &reuse_y);
  tr_cuda_pool_destroy(&pool);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
  for (int p = 0; p < N_PATHS; p++) free(t[p]);
  return 0;
}
