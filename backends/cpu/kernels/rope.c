/* rope.c: rotary position embedding with vLLM's cos/sin cache layout, NeoX or GPT-J style. */
#include <stddef.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

typedef struct tr__rope_ctx {
  const void *positions, *x, *cache;
  void *y;
  int64_t heads, head_dim;
  int pos_is_64, is_neox;
  tr__cpu_kind kind;
} tr__rope_ctx;

static inline int64_t tr__rope_position(const void *positions, int pos_is_64, int64_t t) {
  return pos_is_64 ? ((const int64_t *)positions)[t] : ((const int32_t *)positions)[t];
}

/* Items are tokens. The rotation frequencies are taken TR__CPU_CHUNK at a time: their cos and
 * sin are converted once and applied to every head. */
static tr_status *tr__rope_tokens(void *vctx, int64_t begin, int64_t end) {
  const tr__rope_ctx *ctx = vctx;
  const int64_t D = ctx->head_dim, half = D / 2;
  const tr__cpu_kind kind = ctx->kind;
  float cbuf[TR__CPU_CHUNK], sbuf[TR__CPU_CHUNK];
  float x1buf[2 * TR__CPU_CHUNK], x2buf[TR__CPU_CHUNK];
  float out1[2 * TR__CPU_CHUNK], out2[TR__CPU_CHUNK];
  for (int64_t t = begin; t < end; t++) {
    const int64_t row = tr__rope_position(ctx->positions, ctx->pos_is_64, t) * D;
    for (int64_t i0 = 0; i0 < half; i0 += TR__CPU_CHUNK) {
      const int64_t m = half - i0 < TR__CPU_CHUNK ? half - i0 : TR__CPU_CHUNK;
      const float *cs = tr__cpu_load(ctx->cache, kind, row + i0, m, cbuf);
      const float *sn = tr__cpu_load(ctx->cache, kind, row + half + i0, m, sbuf);
      for (int64_t h = 0; h < ctx->heads; h++) {
        const int64_t off = (t * ctx->heads + h) * D;
        if (ctx->is_neox) { /* x1 = x[i], x2 = x[i + D/2] */
          const float *x1 = tr__cpu_load(ctx->x, kind, off + i0, m, x1buf);
          const float *x2 = tr__cpu_load(ctx->x, kind, off + half + i0, m, x2buf);
          for (int64_t i = 0; i < m; i++) {
            out1[i] = x1[i] * cs[i] - x2[i] * sn[i];
            out2[i] = x2[i] * cs[i] + x1[i] * sn[i];
          }
          tr__cpu_store(ctx->y, kind, off + i0, m, out1);
          tr__cpu_store(ctx->y, kind, off + half + i0, m, out2);
        } else { /* x1 = x[2i], x2 = x[2i + 1] */
          const float *xp = tr__cpu_load(ctx->x, kind, off + 2 * i0, 2 * m, x1buf);
          for (int64_t i = 0; i < m; i++) {
            const float x1 = xp[2 * i], x2 = xp[2 * i + 1];
            out1[2 * i] = x1 * cs[i] - x2 * sn[i];
            out1[2 * i + 1] = x2 * cs[i] + x1 * sn[i];
          }
          tr__cpu_store(ctx->y, kind, off + 2 * i0, 2 * m, out1);
        }
      }
    }
  }
  return NULL;
}

tr_status *tr_cpu_rope(const void *positions, tr_dtype pos_dtype, const void *x,
                       const void *cache, void *y, int64_t tokens, int64_t heads,
                       int64_t head_dim, int64_t cache_rows, int is_neox, tr_dtype dtype,
                       int threads) {
  static const char op[] = "rope";
  tr__cpu_kind kind, pos_kind;
  TR_RETURN_IF_ERROR(tr__cpu_check_threads(op, threads));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(op, "dtype", dtype, TR__CPU_HALVES_F32, &kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(op, "pos_dtype", pos_dtype,
                                         TR__CPU_SET(TR__CPU_I32) | TR__CPU_SET(TR__CPU_I64),
                                         &pos_kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "tokens", tokens));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "heads", heads));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "head_dim", head_dim));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "cache_rows", cache_rows));
  if (head_dim % 2 != 0) {
    return TR_STATUS(TR_VALUE, "rope: head_dim must be even, got %lld", (long long)head_dim);
  }
  int64_t row, numel, cache_numel;
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "heads * head_dim", heads, head_dim, &row));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "tokens * heads * head_dim", tokens, row, &numel));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "cache_rows * head_dim", cache_rows, head_dim, &cache_numel));
  if (numel == 0) return NULL; /* nothing reads a position */
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "positions", positions, tokens));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "x", x, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "y", y, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "cache", cache, cache_numel));
  const int pos_is_64 = pos_kind == TR__CPU_I64;
  for (int64_t t = 0; t < tokens; t++) {
    const int64_t p = tr__rope_position(positions, pos_is_64, t);
    if (p < 0 || p >= cache_rows) {
      return TR_STATUS(TR_VALUE, "rope: token %lld has position %lld, out of range [0, %lld) "
                       "of the cache's rows", (long long)t, (long long)p, (long long)cache_rows);
    }
  }
  tr__rope_ctx ctx = {positions, x, cache, y, heads, head_dim, pos_is_64, is_neox != 0, kind};
  return tr__cpu_parallel_for(threads, tokens, row, tr__rope_tokens, &ctx);
}
