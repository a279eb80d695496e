/* attention.c: one GQA decode step over a padded KV cache (online softmax, tanh softcap), and
 * causal GQA attention over a prompt (prefill). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

/* Cache entries whose logits are computed before the running softmax is updated. */
#define TR__GQA_CHUNK 64

typedef struct tr__gqa_ctx {
  const void *q, *k, *v;
  const int32_t *seqlens;
  void *o;
  int64_t heads, heads_kv, dim, S;
  float softcap, scale;
  tr__cpu_kind kind;
} tr__gqa_ctx;

/* Items are (batch, KV head) pairs, b * heads_kv + kvh: the group of query heads reading one KV
 * head shares every load of its cache rows. Each query head keeps a running max m, a running
 * sum l of exp(logit - m) and an accumulator of exp(logit - m) * v, rescaled when m grows. */
static tr_status *tr__gqa_groups(void *vctx, int64_t begin, int64_t end) {
  const tr__gqa_ctx *ctx = vctx;
  const int64_t dim = ctx->dim, g = ctx->heads / ctx->heads_kv, hkv = ctx->heads_kv;
  const size_t floats = (size_t)(2 * g * dim + g * TR__GQA_CHUNK + 2 * dim + 2 * g);
  float *scratch = malloc(floats * sizeof(float));
  if (scratch == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "gqa_decode: cannot allocate %zu bytes of scratch",
                     floats * sizeof(float));
  }
  float *qf = scratch;                     /* [g, dim] */
  float *acc = qf + g * dim;               /* [g, dim] */
  float *logits = acc + g * dim;           /* [g, TR__GQA_CHUNK] */
  float *kv = logits + g * TR__GQA_CHUNK;  /* [dim]: one cache row */
  float *obuf = kv + dim;                  /* [dim] */
  float *mx = obuf + dim;                  /* [g] */
  float *sum = mx + g;                     /* [g] */
  for (int64_t item = begin; item < end; item++) {
    const int64_t b = item / hkv, kvh = item % hkv;
    const int64_t L = ctx->seqlens[b];
    const int64_t q_off = (b * ctx->heads + kvh * g) * dim; /* the group's heads are adjacent */
    for (int64_t r = 0; r < g; r++) {
      const float *qr = tr__cpu_load(ctx->q, ctx->kind, q_off + r * dim, dim, kv);
      for (int64_t d = 0; d < dim; d++) {
        qf[r * dim + d] = qr[d];
        acc[r * dim + d] = 0.0f;
      }
      mx[r] = -INFINITY;
      sum[r] = 0.0f;
    }
    for (int64_t s0 = 0; s0 < L; s0 += TR__GQA_CHUNK) {
      const int64_t n = L - s0 < TR__GQA_CHUNK ? L - s0 : TR__GQA_CHUNK;
      for (int64_t s = 0; s < n; s++) {
        const int64_t row = ((b * ctx->S + s0 + s) * hkv + kvh) * dim;
        const float *kf = tr__cpu_load(ctx->k, ctx->kind, row, dim, kv);
        for (int64_t r = 0; r < g; r++) {
          float logit = tr__cpu_dot(qf + r * dim, kf, dim) * ctx->scale;
          if (ctx->softcap > 0.0f) logit = ctx->softcap * tanhf(logit / ctx->softcap);
          logits[r * TR__GQA_CHUNK + s] = logit;
        }
      }
      for (int64_t r = 0; r < g; r++) {
        float *lr = logits + r * TR__GQA_CHUNK;
        float m = mx[r];
        for (int64_t s = 0; s < n; s++) m = (lr[s] > m || lr[s] != lr[s]) ? lr[s] : m;
        if (m != mx[r]) {
          const float corr = expf(mx[r] - m); /* 0 on the first chunk (mx = -inf) */
          sum[r] *= corr;
          for (int64_t d = 0; d < dim; d++) acc[r * dim + d] *= corr;
          mx[r] = m;
        }
        for (int64_t s = 0; s < n; s++) lr[s] = expf(lr[s] - m);
        sum[r] += tr__cpu_sum(lr, n);
      }
      for (int64_t s = 0; s < n; s++) {
        const int64_t row = ((b * ctx->S + s0 + s) * hkv + kvh) * dim;
        const float *vf = tr__cpu_load(ctx->v, ctx->kind, row, dim, kv);
        for (int64_t r = 0; r < g; r++) {
          const float p = logits[r * TR__GQA_CHUNK + s];
          float *restrict ar = acc + r * dim;
          for (int64_t d = 0; d < dim; d++) ar[d] += p * vf[d];
        }
      }
    }
    for (int64_t r = 0; r < g; r++) {
      const float inv = L > 0 ? 1.0f / sum[r] : 0.0f; /* no entries: zeros */
      for (int64_t d = 0; d < dim; d++) obuf[d] = acc[r * dim + d] * inv;
      tr__cpu_store(ctx->o, ctx->kind, q_off + r * dim, dim, obuf);
    }
  }
  free(scratch);
  return NULL;
}

/* heads_kv positive and dividing heads. */
static tr_status *check_heads(const char *op, int64_t heads, int64_t heads_kv) {
  if (heads_kv <= 0) return TR_STATUS(TR_VALUE, "%s: heads_kv must be > 0, got %lld", op, (long long)heads_kv);
  if (heads % heads_kv != 0) {
    return TR_STATUS(TR_VALUE, "%s: heads %lld is not divisible by heads_kv %lld", op, (long long)heads,
                     (long long)heads_kv);
  }
  return NULL;
}

tr_status *tr_cpu_gqa_decode(const void *q, const void *k_cache, const void *v_cache,
                             const int32_t *seqlens, void *o, int64_t B, int64_t heads,
                             int64_t heads_kv, int64_t dim, int64_t S, double softcap,
                             double scale, tr_dtype dtype, int threads) {
  static const char op[] = "gqa_decode";
  tr__cpu_kind kind;
  TR_RETURN_IF_ERROR(tr__cpu_check_threads(op, threads));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(
      op, "dtype", dtype, TR__CPU_SET(TR__CPU_F16) | TR__CPU_SET(TR__CPU_BF16), &kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "B", B));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "heads", heads));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "dim", dim));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "S", S));
  TR_RETURN_IF_ERROR(check_heads(op, heads, heads_kv));
  int64_t q_row, q_numel, kv_row, kv_rows, kv_numel;
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "heads * dim", heads, dim, &q_row));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "B * heads * dim", B, q_row, &q_numel));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "heads_kv * dim", heads_kv, dim, &kv_row));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "B * S", B, S, &kv_rows));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "B * S * heads_kv * dim", kv_rows, kv_row, &kv_numel));
  if (q_numel == 0) return NULL; /* nothing reads a seqlens value */
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "q", q, q_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "o", o, q_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "seqlens", seqlens, B));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "k_cache", k_cache, kv_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "v_cache", v_cache, kv_numel));
  for (int64_t b = 0; b < B; b++) {
    if (seqlens[b] < 0 || seqlens[b] > S) {
      return TR_STATUS(TR_VALUE, "gqa_decode: seqlens[%lld] is %d, out of range [0, S = %lld]",
                       (long long)b, (int)seqlens[b], (long long)S);
    }
  }
  tr__gqa_ctx ctx = {.q = q, .k = k_cache, .v = v_cache, .seqlens = seqlens, .o = o,
                     .heads = heads, .heads_kv = heads_kv, .dim = dim, .S = S,
                     .softcap = (float)softcap, .scale = (float)scale, .kind = kind};
  const int64_t g = heads / heads_kv;
  return tr__cpu_parallel_for(threads, B * heads_kv, g * (S > 0 ? S : 1) * dim, tr__gqa_groups,
                              &ctx);
}

typedef struct tr__prefill_ctx {
  const void *q, *k, *v;
  void *o;
  int64_t L, heads, heads_kv, dim;
  float scale;
  tr__cpu_kind kind;
} tr__prefill_ctx;

/* Items are query rows, ((b * heads + h) * L + i): row i's logits against keys 0..i, a softmax
 * over them (max first, so exp never overflows), then sum p * v, all in float32. */
static tr_status *tr__prefill_rows(void *vctx, int64_t begin, int64_t end) {
  const tr__prefill_ctx *ctx = vctx;
  const int64_t dim = ctx->dim, L = ctx->L, heads = ctx->heads, hkv = ctx->heads_kv;
  const int64_t g = heads / hkv;
  const size_t floats = (size_t)(L + 3 * dim);
  float *scratch = malloc(floats * sizeof(float));
  if (scratch == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "gqa_prefill: cannot allocate %zu bytes of scratch",
                     floats * sizeof(float));
  }
  float *logits = scratch;     /* [L] */
  float *qf = logits + L;      /* [dim] */
  float *acc = qf + dim;       /* [dim] */
  float *row = acc + dim;      /* [dim]: one k or v row */
  for (int64_t item = begin; item < end; item++) {
    const int64_t i = item % L, bh = item / L, h = bh % heads, b = bh / heads, kvh = h / g;
    const int64_t q_off = ((b * L + i) * heads + h) * dim;
    const float *qr = tr__cpu_load(ctx->q, ctx->kind, q_off, dim, row);
    for (int64_t d = 0; d < dim; d++) qf[d] = qr[d];
    float m = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
      const float *kf = tr__cpu_load(ctx->k, ctx->kind, ((b * L + j) * hkv + kvh) * dim, dim, row);
      logits[j] = tr__cpu_dot(qf, kf, dim) * ctx->scale;
      m = (logits[j] > m || logits[j] != logits[j]) ? logits[j] : m;
    }
    for (int64_t j = 0; j <= i; j++) logits[j] = expf(logits[j] - m);
    const float inv = 1.0f / tr__cpu_sum(logits, i + 1);
    for (int64_t d = 0; d < dim; d++) acc[d] = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
      const float *vf = tr__cpu_load(ctx->v, ctx->kind, ((b * L + j) * hkv + kvh) * dim, dim, row);
      const float p = logits[j];
      for (int64_t d = 0; d < dim; d++) acc[d] += p * vf[d];
    }
    for (int64_t d = 0; d < dim; d++) acc[d] *= inv;
    tr__cpu_store(ctx->o, ctx->kind, q_off, dim, acc);
  }
  free(scratch);
  return NULL;
}

tr_status *tr_cpu_gqa_prefill(const void *q, const void *k, const void *v, void *o, int64_t B,
                              int64_t L, int64_t heads, int64_t heads_kv, int64_t dim,
                              double scale, tr_dtype dtype, int threads) {
  static const char op[] = "gqa_prefill";
  tr__cpu_kind kind;
  TR_RETURN_IF_ERROR(tr__cpu_check_threads(op, threads));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(
      op, "dtype", dtype, TR__CPU_SET(TR__CPU_F16) | TR__CPU_SET(TR__CPU_BF16), &kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "B", B));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "L", L));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "heads", heads));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "dim", dim));
  TR_RETURN_IF_ERROR(check_heads(op, heads, heads_kv));
  int64_t rows, q_row, q_numel, kv_row, kv_numel, items;
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "B * L", B, L, &rows));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "heads * dim", heads, dim, &q_row));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "B * L * heads * dim", rows, q_row, &q_numel));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "heads_kv * dim", heads_kv, dim, &kv_row));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "B * L * heads_kv * dim", rows, kv_row, &kv_numel));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "B * L * heads", rows, heads, &items));
  if (q_numel == 0) return NULL;
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "q", q, q_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "o", o, q_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "k", k, kv_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "v", v, kv_numel));
  if ((uint64_t)L + 3 * (uint64_t)dim > SIZE_MAX / sizeof(float)) {
    return TR_STATUS(TR_VALUE, "gqa_prefill: L = %lld and dim = %lld need more scratch than memory "
                     "addresses", (long long)L, (long long)dim);
  }
  tr__prefill_ctx ctx = {.q = q, .k = k, .v = v, .o = o, .L = L, .heads = heads,
                         .heads_kv = heads_kv, .dim = dim, .scale = (float)scale, .kind = kind};
  /* a row reads (i + 1) keys: L / 2 on average, twice (k and v) */
  return tr__cpu_parallel_for(threads, items, (L > 0 ? L : 1) * dim, tr__prefill_rows, &ctx);
}
