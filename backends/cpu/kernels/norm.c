/* norm.c: RMS, layer, group and batch normalization kernels (forward), float32 arithmetic. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

/* ---- Spans: contiguous runs of elements, handled a chunk at a time ------------------------ */

static double tr__span_sum(const void *x, tr__cpu_kind kind, int64_t off, int64_t len) {
  float buf[TR__CPU_CHUNK];
  double total = 0.0;
  for (int64_t c = 0; c < len; c += TR__CPU_CHUNK) {
    int64_t m = len - c < TR__CPU_CHUNK ? len - c : TR__CPU_CHUNK;
    total += tr__cpu_sum(tr__cpu_load(x, kind, off + c, m, buf), m);
  }
  return total;
}

/* sum((x - center)^2) over the span. */
static double tr__span_sq_dev(const void *x, tr__cpu_kind kind, int64_t off, int64_t len,
                              float center) {
  float buf[TR__CPU_CHUNK];
  double total = 0.0;
  for (int64_t c = 0; c < len; c += TR__CPU_CHUNK) {
    int64_t m = len - c < TR__CPU_CHUNK ? len - c : TR__CPU_CHUNK;
    total += tr__cpu_sum_sq_dev(tr__cpu_load(x, kind, off + c, m, buf), m, center);
  }
  return total;
}

/* y = x * scale + shift over the span. */
static void tr__span_affine(const void *x, void *y, tr__cpu_kind kind, int64_t off, int64_t len,
                            float scale, float shift) {
  float buf[TR__CPU_CHUNK], out[TR__CPU_CHUNK];
  for (int64_t c = 0; c < len; c += TR__CPU_CHUNK) {
    int64_t m = len - c < TR__CPU_CHUNK ? len - c : TR__CPU_CHUNK;
    const float *xf = tr__cpu_load(x, kind, off + c, m, buf);
    for (int64_t i = 0; i < m; i++) out[i] = xf[i] * scale + shift;
    tr__cpu_store(y, kind, off + c, m, out);
  }
}

/* The checks every norm shares: threads, the dtype, and the sizes with their product (an
 * overflow names the product so far: "N * C * spatial"). */
static tr_status *tr__norm_check(const char *op, int threads, tr_dtype dtype, tr__cpu_kind *kind,
                                 int count, const char *const *names, const int64_t *sizes,
                                 int64_t *numel) {
  TR_RETURN_IF_ERROR(tr__cpu_check_threads(op, threads));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(op, "dtype", dtype, TR__CPU_HALVES_F32, kind));
  for (int i = 0; i < count; i++) TR_RETURN_IF_ERROR(tr__cpu_check_size(op, names[i], sizes[i]));
  char what[64];
  snprintf(what, sizeof what, "%s", names[0]);
  int64_t total = sizes[0];
  for (int i = 1; i < count; i++) {
    size_t used = strlen(what);
    snprintf(what + used, sizeof what - used, " * %s", names[i]);
    TR_RETURN_IF_ERROR(tr__cpu_mul(op, what, total, sizes[i], &total));
  }
  *numel = total;
  return NULL;
}

/* ---- RMSNorm ---------------------------------------------------------------------------- */

typedef struct tr__rms_ctx {
  const void *x, *w;
  void *y;
  int64_t n;
  tr__cpu_kind kind;
  float eps;
} tr__rms_ctx;

static tr_status *tr__rms_rows(void *vctx, int64_t begin, int64_t end) {
  const tr__rms_ctx *ctx = vctx;
  const int64_t n = ctx->n;
  float buf[TR__CPU_CHUNK], wbuf[TR__CPU_CHUNK], out[TR__CPU_CHUNK];
  for (int64_t r = begin; r < end; r++) {
    const int64_t off = r * n;
    float mean_sq = (float)(tr__span_sq_dev(ctx->x, ctx->kind, off, n, 0.0f) / (double)n);
    float rstd = 1.0f / sqrtf(mean_sq + ctx->eps);
    for (int64_t c = 0; c < n; c += TR__CPU_CHUNK) {
      int64_t m = n - c < TR__CPU_CHUNK ? n - c : TR__CPU_CHUNK;
      const float *xf = tr__cpu_load(ctx->x, ctx->kind, off + c, m, buf);
      for (int64_t i = 0; i < m; i++) out[i] = xf[i] * rstd;
      if (ctx->w != NULL) {
        /* torch rounds x * rstd to the dtype, then multiplies by the weight in the dtype */
        tr__cpu_round(out, ctx->kind, m);
        const float *wf = tr__cpu_load(ctx->w, ctx->kind, c, m, wbuf);
        for (int64_t i = 0; i < m; i++) out[i] *= wf[i];
      }
      tr__cpu_store(ctx->y, ctx->kind, off + c, m, out);
    }
  }
  return NULL;
}

tr_status *tr_cpu_rms_norm(const void *x, const void *weight, void *y, int64_t rows, int64_t n,
                           tr_dtype dtype, double eps, int threads) {
  static const char *const names[] = {"rows", "n"};
  const int64_t sizes[] = {rows, n};
  tr__cpu_kind kind;
  int64_t numel;
  TR_RETURN_IF_ERROR(tr__norm_check("rms_norm", threads, dtype, &kind, 2, names, sizes, &numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("rms_norm", "x", x, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("rms_norm", "y", y, numel));
  tr__rms_ctx ctx = {x, weight, y, n, kind, (float)eps};
  return tr__cpu_parallel_for(threads, numel == 0 ? 0 : rows, n, tr__rms_rows, &ctx);
}

/* ---- LayerNorm -------------------------------------------------------------------------- */

typedef struct tr__ln_ctx {
  const void *x, *w, *b;
  void *y;
  int64_t n;
  tr__cpu_kind kind;
  float eps;
} tr__ln_ctx;

static tr_status *tr__ln_rows(void *vctx, int64_t begin, int64_t end) {
  const tr__ln_ctx *ctx = vctx;
  const int64_t n = ctx->n;
  float buf[TR__CPU_CHUNK], wbuf[TR__CPU_CHUNK], bbuf[TR__CPU_CHUNK], out[TR__CPU_CHUNK];
  for (int64_t r = begin; r < end; r++) {
    const int64_t off = r * n;
    float mean = (float)(tr__span_sum(ctx->x, ctx->kind, off, n) / (double)n);
    float var = (float)(tr__span_sq_dev(ctx->x, ctx->kind, off, n, mean) / (double)n);
    float rstd = 1.0f / sqrtf(var + ctx->eps);
    float shift = -mean * rstd;
    for (int64_t c = 0; c < n; c += TR__CPU_CHUNK) {
      int64_t m = n - c < TR__CPU_CHUNK ? n - c : TR__CPU_CHUNK;
      const float *xf = tr__cpu_load(ctx->x, ctx->kind, off + c, m, buf);
      for (int64_t i = 0; i < m; i++) out[i] = xf[i] * rstd + shift;
      if (ctx->w != NULL) {
        const float *wf = tr__cpu_load(ctx->w, ctx->kind, c, m, wbuf);
        for (int64_t i = 0; i < m; i++) out[i] *= wf[i];
      }
      if (ctx->b != NULL) {
        const float *bf = tr__cpu_load(ctx->b, ctx->kind, c, m, bbuf);
        for (int64_t i = 0; i < m; i++) out[i] += bf[i];
      }
      tr__cpu_store(ctx->y, ctx->kind, off + c, m, out);
    }
  }
  return NULL;
}

tr_status *tr_cpu_layer_norm(const void *x, const void *weight, const void *bias, void *y,
                             int64_t rows, int64_t n, tr_dtype dtype, double eps, int threads) {
  static const char *const names[] = {"rows", "n"};
  const int64_t sizes[] = {rows, n};
  tr__cpu_kind kind;
  int64_t numel;
  TR_RETURN_IF_ERROR(
      tr__norm_check("layer_norm", threads, dtype, &kind, 2, names, sizes, &numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("layer_norm", "x", x, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("layer_norm", "y", y, numel));
  tr__ln_ctx ctx = {x, weight, bias, y, n, kind, (float)eps};
  return tr__cpu_parallel_for(threads, numel == 0 ? 0 : rows, n, tr__ln_rows, &ctx);
}

/* ---- GroupNorm -------------------------------------------------------------------------- */

typedef struct tr__gn_ctx {
  const void *x, *w, *b;
  void *y;
  int64_t C, spatial, groups;
  tr__cpu_kind kind;
  float eps;
} tr__gn_ctx;

/* Items are (sample, group) pairs, n * groups + g; a group is one contiguous block. */
static tr_status *tr__gn_groups(void *vctx, int64_t begin, int64_t end) {
  const tr__gn_ctx *ctx = vctx;
  const int64_t cpg = ctx->C / ctx->groups, spatial = ctx->spatial;
  const int64_t size = cpg * spatial;
  for (int64_t item = begin; item < end; item++) {
    const int64_t n = item / ctx->groups, g = item % ctx->groups;
    const int64_t off = (n * ctx->C + g * cpg) * spatial;
    float mean = (float)(tr__span_sum(ctx->x, ctx->kind, off, size) / (double)size);
    float var = (float)(tr__span_sq_dev(ctx->x, ctx->kind, off, size, mean) / (double)size);
    float rstd = 1.0f / sqrtf(var + ctx->eps);
    for (int64_t k = 0; k < cpg; k++) {
      const int64_t c = g * cpg + k;
      float scale = rstd * (ctx->w != NULL ? tr__cpu_load1(ctx->w, ctx->kind, c) : 1.0f);
      float shift = (ctx->b != NULL ? tr__cpu_load1(ctx->b, ctx->kind, c) : 0.0f) - mean * scale;
      tr__span_affine(ctx->x, ctx->y, ctx->kind, off + k * spatial, spatial, scale, shift);
    }
  }
  return NULL;
}

tr_status *tr_cpu_group_norm(const void *x, const void *weight, const void *bias, void *y,
                             int64_t N, int64_t C, int64_t spatial, int64_t groups,
                             tr_dtype dtype, double eps, int threads) {
  static const char *const names[] = {"N", "C", "spatial"};
  const int64_t sizes[] = {N, C, spatial};
  tr__cpu_kind kind;
  int64_t numel;
  TR_RETURN_IF_ERROR(
      tr__norm_check("group_norm", threads, dtype, &kind, 3, names, sizes, &numel));
  if (groups <= 0) {
    return TR_STATUS(TR_VALUE, "group_norm: groups must be > 0, got %lld", (long long)groups);
  }
  if (C % groups != 0) {
    return TR_STATUS(TR_VALUE, "group_norm: C %lld is not divisible by groups %lld",
                     (long long)C, (long long)groups);
  }
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("group_norm", "x", x, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("group_norm", "y", y, numel));
  if (numel == 0) return NULL;
  tr__gn_ctx ctx = {x, weight, bias, y, C, spatial, groups, kind, (float)eps};
  return tr__cpu_parallel_for(threads, N * groups, (C / groups) * spatial, tr__gn_groups, &ctx);
}

/* ---- BatchNorm -------------------------------------------------------------------------- */

typedef struct tr__bn_ctx {
  const void *x, *w, *b;
  void *rm, *rv, *y;
  float *mean_out, *rstd_out;
  int64_t N, C, spatial;
  int training;
  double momentum;
  tr__cpu_kind kind;
  float eps;
} tr__bn_ctx;

/* Items are channels; channel c is N blocks of `spatial` elements, C * spatial apart. */
static tr_status *tr__bn_channels(void *vctx, int64_t begin, int64_t end) {
  const tr__bn_ctx *ctx = vctx;
  const int64_t N = ctx->N, C = ctx->C, spatial = ctx->spatial;
  const int64_t count = N * spatial;
  for (int64_t c = begin; c < end; c++) {
    float mean, rstd;
    if (ctx->training) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; n++) {
        sum += tr__span_sum(ctx->x, ctx->kind, (n * C + c) * spatial, spatial);
      }
      mean = (float)(sum / (double)count);
      double sq = 0.0;
      for (int64_t n = 0; n < N; n++) {
        sq += tr__span_sq_dev(ctx->x, ctx->kind, (n * C + c) * spatial, spatial, mean);
      }
      float var = (float)(sq / (double)count);
      rstd = 1.0f / sqrtf(var + ctx->eps);
      if (ctx->mean_out != NULL) ctx->mean_out[c] = mean;
      if (ctx->rstd_out != NULL) ctx->rstd_out[c] = rstd;
      const double mom = ctx->momentum;
      if (ctx->rm != NULL) {
        double old = tr__cpu_load1(ctx->rm, ctx->kind, c);
        tr__cpu_store1(ctx->rm, ctx->kind, c, (float)(mom * mean + (1.0 - mom) * old));
      }
      if (ctx->rv != NULL) {
        double old = tr__cpu_load1(ctx->rv, ctx->kind, c);
        double unbiased = sq / (double)(count - 1);
        tr__cpu_store1(ctx->rv, ctx->kind, c, (float)(mom * unbiased + (1.0 - mom) * old));
      }
    } else {
      mean = tr__cpu_load1(ctx->rm, ctx->kind, c);
      rstd = 1.0f / sqrtf(tr__cpu_load1(ctx->rv, ctx->kind, c) + ctx->eps);
    }
    float scale = rstd * (ctx->w != NULL ? tr__cpu_load1(ctx->w, ctx->kind, c) : 1.0f);
    float shift = (ctx->b != NULL ? tr__cpu_load1(ctx->b, ctx->kind, c) : 0.0f) - mean * scale;
    for (int64_t n = 0; n < N; n++) {
      tr__span_affine(ctx->x, ctx->y, ctx->kind, (n * C + c) * spatial, spatial, scale, shift);
    }
  }
  return NULL;
}

tr_status *tr_cpu_batch_norm(const void *x, void *running_mean, void *running_var,
                             const void *weight, const void *bias, void *y, float *mean_out,
                             float *rstd_out, int64_t N, int64_t C, int64_t spatial,
                             int training, double momentum, double eps, tr_dtype dtype,
                             int threads) {
  static const char *const names[] = {"N", "C", "spatial"};
  const int64_t sizes[] = {N, C, spatial};
  tr__cpu_kind kind;
  int64_t numel;
  TR_RETURN_IF_ERROR(
      tr__norm_check("batch_norm", threads, dtype, &kind, 3, names, sizes, &numel));
  int64_t count; /* values per channel */
  if (C > 0) {
    count = numel / C;
  } else {
    TR_RETURN_IF_ERROR(tr__cpu_mul("batch_norm", "N * spatial", N, spatial, &count));
  }
  if (training && count <= 1) {
    return TR_STATUS(TR_VALUE,
                     "batch_norm: training needs more than 1 value per channel, got N * spatial "
                     "= %lld (N %lld, spatial %lld)",
                     (long long)count, (long long)N, (long long)spatial);
  }
  if (!training) {
    if (running_mean == NULL && C > 0) {
      return TR_STATUS(TR_VALUE,
                       "batch_norm: running_mean is required when not training, got NULL");
    }
    if (running_var == NULL && C > 0) {
      return TR_STATUS(TR_VALUE,
                       "batch_norm: running_var is required when not training, got NULL");
    }
  }
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("batch_norm", "x", x, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr("batch_norm", "y", y, numel));
  if (C == 0) return NULL;
  tr__bn_ctx ctx = {.x = x, .w = weight, .b = bias, .rm = running_mean, .rv = running_var,
                    .y = y, .mean_out = mean_out, .rstd_out = rstd_out, .N = N, .C = C,
                    .spatial = spatial, .training = training != 0, .momentum = momentum,
                    .kind = kind, .eps = (float)eps};
  return tr__cpu_parallel_for(threads, C, count == 0 ? 1 : count, tr__bn_channels, &ctx);
}
