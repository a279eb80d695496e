/* softmax.c: softmax along the middle axis of [outer, dim_size, inner], max-subtracted. */
#include <math.h>
#include <stddef.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

/* Inner columns handled together when the softmax axis is not the last one. */
#define TR__SOFTMAX_COLS 64

typedef struct tr__softmax_ctx {
  const void *x;
  void *y;
  int64_t dim, inner, col_blocks;
  tr__cpu_kind in_kind, out_kind;
  int round_input; /* x converts to a narrower out dtype first (as torch's dtype= does) */
} tr__softmax_ctx;

/* m elements of x from `off` as float, converted to the out dtype first when torch would. */
static const float *tr__softmax_load(const tr__softmax_ctx *ctx, int64_t off, int64_t m,
                                     float *buf) {
  const float *xf = tr__cpu_load(ctx->x, ctx->in_kind, off, m, buf);
  if (!ctx->round_input) return xf;
  if (xf != buf) {
    for (int64_t i = 0; i < m; i++) buf[i] = xf[i];
  }
  tr__cpu_round(buf, ctx->out_kind, m);
  return buf;
}

/* The larger of m and v, nan winning (as torch's max reduction propagates nan). */
static inline float tr__max_nan(float m, float v) { return (v > m || v != v) ? v : m; }

/* inner == 1: items are rows, each contiguous. */
static tr_status *tr__softmax_rows(void *vctx, int64_t begin, int64_t end) {
  const tr__softmax_ctx *ctx = vctx;
  const int64_t dim = ctx->dim;
  float buf[TR__CPU_CHUNK], e[TR__CPU_CHUNK];
  for (int64_t r = begin; r < end; r++) {
    const int64_t off = r * dim;
    float max = -INFINITY;
    for (int64_t c = 0; c < dim; c += TR__CPU_CHUNK) {
      int64_t m = dim - c < TR__CPU_CHUNK ? dim - c : TR__CPU_CHUNK;
      const float *xf = tr__softmax_load(ctx, off + c, m, buf);
      for (int64_t i = 0; i < m; i++) max = tr__max_nan(max, xf[i]);
    }
    double sum = 0.0;
    for (int64_t c = 0; c < dim; c += TR__CPU_CHUNK) {
      int64_t m = dim - c < TR__CPU_CHUNK ? dim - c : TR__CPU_CHUNK;
      const float *xf = tr__softmax_load(ctx, off + c, m, buf);
      for (int64_t i = 0; i < m; i++) e[i] = expf(xf[i] - max);
      sum += tr__cpu_sum(e, m);
    }
    const float inv = 1.0f / (float)sum;
    for (int64_t c = 0; c < dim; c += TR__CPU_CHUNK) {
      int64_t m = dim - c < TR__CPU_CHUNK ? dim - c : TR__CPU_CHUNK;
      const float *xf = tr__softmax_load(ctx, off + c, m, buf);
      for (int64_t i = 0; i < m; i++) e[i] = expf(xf[i] - max) * inv;
      tr__cpu_store(ctx->y, ctx->out_kind, off + c, m, e);
    }
  }
  return NULL;
}

/* inner > 1: items are (outer row, block of TR__SOFTMAX_COLS inner columns); each of the dim
 * steps reads one contiguous run of the block's columns. */
static tr_status *tr__softmax_cols(void *vctx, int64_t begin, int64_t end) {
  const tr__softmax_ctx *ctx = vctx;
  const int64_t dim = ctx->dim, inner = ctx->inner;
  float buf[TR__SOFTMAX_COLS], e[TR__SOFTMAX_COLS], max[TR__SOFTMAX_COLS];
  float inv[TR__SOFTMAX_COLS];
  double sum[TR__SOFTMAX_COLS];
  for (int64_t item = begin; item < end; item++) {
    const int64_t o = item / ctx->col_blocks;
    const int64_t j0 = item % ctx->col_blocks * TR__SOFTMAX_COLS;
    const int64_t m = inner - j0 < TR__SOFTMAX_COLS ? inner - j0 : TR__SOFTMAX_COLS;
    const int64_t base = o * dim * inner + j0;
    for (int64_t j = 0; j < m; j++) {
      max[j] = -INFINITY;
      sum[j] = 0.0;
    }
    for (int64_t d = 0; d < dim; d++) {
      const float *xf = tr__softmax_load(ctx, base + d * inner, m, buf);
      for (int64_t j = 0; j < m; j++) max[j] = tr__max_nan(max[j], xf[j]);
    }
    for (int64_t d = 0; d < dim; d++) {
      const float *xf = tr__softmax_load(ctx, base + d * inner, m, buf);
      for (int64_t j = 0; j < m; j++) sum[j] += expf(xf[j] - max[j]);
    }
    for (int64_t j = 0; j < m; j++) inv[j] = 1.0f / (float)sum[j];
    for (int64_t d = 0; d < dim; d++) {
      const float *xf = tr__softmax_load(ctx, base + d * inner, m, buf);
      for (int64_t j = 0; j < m; j++) e[j] = expf(xf[j] - max[j]) * inv[j];
      tr__cpu_store(ctx->y, ctx->out_kind, base + d * inner, m, e);
    }
  }
  return NULL;
}

/* out dtype float64: arithmetic in double; items are (outer, inner) columns, read strided. */
static tr_status *tr__softmax_f64(void *vctx, int64_t begin, int64_t end) {
  const tr__softmax_ctx *ctx = vctx;
  const int64_t dim = ctx->dim, inner = ctx->inner;
  double *y = ctx->y;
  for (int64_t item = begin; item < end; item++) {
    const int64_t base = item / inner * dim * inner + item % inner;
    double max = -INFINITY;
    for (int64_t d = 0; d < dim; d++) {
      double v = tr__cpu_load1(ctx->x, ctx->in_kind, base + d * inner);
      max = (v > max || v != v) ? v : max;
    }
    double sum = 0.0;
    for (int64_t d = 0; d < dim; d++) {
      sum += exp((double)tr__cpu_load1(ctx->x, ctx->in_kind, base + d * inner) - max);
    }
    const double inv = 1.0 / sum;
    for (int64_t d = 0; d < dim; d++) {
      const int64_t i = base + d * inner;
      y[i] = exp((double)tr__cpu_load1(ctx->x, ctx->in_kind, i) - max) * inv;
    }
  }
  return NULL;
}

tr_status *tr_cpu_softmax(const void *x, void *y, int64_t outer, int64_t dim_size, int64_t inner,
                          tr_dtype in_dtype, tr_dtype out_dtype, int threads) {
  static const char op[] = "softmax";
  tr__cpu_kind in_kind, out_kind;
  TR_RETURN_IF_ERROR(tr__cpu_check_threads(op, threads));
  TR_RETURN_IF_ERROR(
      tr__cpu_check_dtype(op, "in_dtype", in_dtype, TR__CPU_HALVES_F32, &in_kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(op, "out_dtype", out_dtype,
                                         TR__CPU_HALVES_F32 | TR__CPU_SET(TR__CPU_F64),
                                         &out_kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "outer", outer));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "dim_size", dim_size));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "inner", inner));
  int64_t rows, numel;
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "outer * dim_size", outer, dim_size, &rows));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "outer * dim_size * inner", rows, inner, &numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "x", x, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "y", y, numel));
  if (numel == 0) return NULL;

  tr__softmax_ctx ctx = {x, y, dim_size, inner, 0, in_kind, out_kind, 0};
  ctx.round_input = in_kind != out_kind && (out_kind == TR__CPU_F16 || out_kind == TR__CPU_BF16);
  if (out_kind == TR__CPU_F64) {
    return tr__cpu_parallel_for(threads, outer * inner, dim_size, tr__softmax_f64, &ctx);
  }
  if (inner == 1) return tr__cpu_parallel_for(threads, outer, dim_size, tr__softmax_rows, &ctx);
  ctx.col_blocks = (inner + TR__SOFTMAX_COLS - 1) / TR__SOFTMAX_COLS;
  return tr__cpu_parallel_for(threads, outer * ctx.col_blocks, dim_size * TR__SOFTMAX_COLS,
                              tr__softmax_cols, &ctx);
}
