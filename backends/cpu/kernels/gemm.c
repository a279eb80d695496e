/* gemm.c: d = op(a) @ op(b), blocked: float32 panels packed per tile, float32 sums in k order. */
#include <stdlib.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

/* Tile of d a work item computes (TR__GEMM_MB rows, TR__GEMM_NB columns), and the depth of the
 * packed panels (TR__GEMM_KB). The packed b panel (KB * NB floats, 128 KiB) stays in L2 while the
 * tile's rows stream through it; a row of the accumulator (1 KiB) stays in L1. */
#define TR__GEMM_MB 32
#define TR__GEMM_NB 256
#define TR__GEMM_KB 128

typedef struct tr__gemm_ctx {
  const void *a, *b;
  void *d;
  int64_t M, N, K, m_blocks;
  int trans_a, trans_b;
  tr__cpu_kind kind;
} tr__gemm_ctx;

/* Copies n elements of src from `offset`, converted to float, into dst. */
static void tr__gemm_load_into(const void *src, tr__cpu_kind kind, int64_t offset, int64_t n,
                               float *dst) {
  const float *f = tr__cpu_load(src, kind, offset, n, dst);
  if (f != dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = f[i];
  }
}

/* ap[i * KB + k] = op(a)[i0 + i, k0 + k]. */
static void tr__gemm_pack_a(const tr__gemm_ctx *ctx, int64_t i0, int64_t mlen, int64_t k0,
                            int64_t klen, float *ap, float *tmp) {
  if (!ctx->trans_a) {
    for (int64_t i = 0; i < mlen; i++) {
      tr__gemm_load_into(ctx->a, ctx->kind, (i0 + i) * ctx->K + k0, klen, ap + i * TR__GEMM_KB);
    }
    return;
  }
  for (int64_t k = 0; k < klen; k++) { /* a is [K, M]: row k0 + k holds the column */
    const float *col = tr__cpu_load(ctx->a, ctx->kind, (k0 + k) * ctx->M + i0, mlen, tmp);
    for (int64_t i = 0; i < mlen; i++) ap[i * TR__GEMM_KB + k] = col[i];
  }
}

/* bp[k * NB + j] = op(b)[k0 + k, j0 + j]. */
static void tr__gemm_pack_b(const tr__gemm_ctx *ctx, int64_t k0, int64_t klen, int64_t j0,
                            int64_t nlen, float *bp, float *tmp) {
  if (!ctx->trans_b) {
    for (int64_t k = 0; k < klen; k++) {
      tr__gemm_load_into(ctx->b, ctx->kind, (k0 + k) * ctx->N + j0, nlen, bp + k * TR__GEMM_NB);
    }
    return;
  }
  for (int64_t j = 0; j < nlen; j++) { /* b is [N, K]: row j0 + j holds the column */
    const float *col = tr__cpu_load(ctx->b, ctx->kind, (j0 + j) * ctx->K + k0, klen, tmp);
    for (int64_t k = 0; k < klen; k++) bp[k * TR__GEMM_NB + j] = col[k];
  }
}

/* acc[i, :nlen] += sum over k < klen of ap[i, k] * bp[k, :nlen], each element in k order. Four
 * rows at a time share each load of bp. */
static void tr__gemm_tile(float *acc, const float *ap, const float *bp, int64_t mlen,
                          int64_t klen, int64_t nlen) {
  int64_t i = 0;
  for (; i + 4 <= mlen; i += 4) {
    float *restrict c0 = acc + (i + 0) * TR__GEMM_NB;
    float *restrict c1 = acc + (i + 1) * TR__GEMM_NB;
    float *restrict c2 = acc + (i + 2) * TR__GEMM_NB;
    float *restrict c3 = acc + (i + 3) * TR__GEMM_NB;
    for (int64_t k = 0; k < klen; k++) {
      const float a0 = ap[(i + 0) * TR__GEMM_KB + k], a1 = ap[(i + 1) * TR__GEMM_KB + k];
      const float a2 = ap[(i + 2) * TR__GEMM_KB + k], a3 = ap[(i + 3) * TR__GEMM_KB + k];
      const float *restrict bk = bp + k * TR__GEMM_NB;
      for (int64_t j = 0; j < nlen; j++) {
        const float bv = bk[j];
        c0[j] += a0 * bv;
        c1[j] += a1 * bv;
        c2[j] += a2 * bv;
        c3[j] += a3 * bv;
      }
    }
  }
  for (; i < mlen; i++) {
    float *restrict c0 = acc + i * TR__GEMM_NB;
    for (int64_t k = 0; k < klen; k++) {
      const float a0 = ap[i * TR__GEMM_KB + k];
      const float *restrict bk = bp + k * TR__GEMM_NB;
      for (int64_t j = 0; j < nlen; j++) c0[j] += a0 * bk[j];
    }
  }
}

/* Items are tiles of d, t = n_block * m_blocks + m_block. */
static tr_status *tr__gemm_tiles(void *vctx, int64_t begin, int64_t end) {
  const tr__gemm_ctx *ctx = vctx;
  const size_t floats = TR__GEMM_MB * TR__GEMM_NB + TR__GEMM_KB * TR__GEMM_NB +
                        TR__GEMM_MB * TR__GEMM_KB + TR__GEMM_NB;
  float *scratch = malloc(floats * sizeof(float));
  if (scratch == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "gemm: cannot allocate %zu bytes of scratch",
                     floats * sizeof(float));
  }
  float *acc = scratch;
  float *bp = acc + TR__GEMM_MB * TR__GEMM_NB;
  float *ap = bp + TR__GEMM_KB * TR__GEMM_NB;
  float *tmp = ap + TR__GEMM_MB * TR__GEMM_KB; /* one row or column being packed */
  for (int64_t t = begin; t < end; t++) {
    const int64_t i0 = t % ctx->m_blocks * TR__GEMM_MB, j0 = t / ctx->m_blocks * TR__GEMM_NB;
    const int64_t mlen = ctx->M - i0 < TR__GEMM_MB ? ctx->M - i0 : TR__GEMM_MB;
    const int64_t nlen = ctx->N - j0 < TR__GEMM_NB ? ctx->N - j0 : TR__GEMM_NB;
    for (int64_t i = 0; i < mlen * TR__GEMM_NB; i++) acc[i] = 0.0f;
    for (int64_t k0 = 0; k0 < ctx->K; k0 += TR__GEMM_KB) {
      const int64_t klen = ctx->K - k0 < TR__GEMM_KB ? ctx->K - k0 : TR__GEMM_KB;
      tr__gemm_pack_a(ctx, i0, mlen, k0, klen, ap, tmp);
      tr__gemm_pack_b(ctx, k0, klen, j0, nlen, bp, tmp);
      tr__gemm_tile(acc, ap, bp, mlen, klen, nlen);
    }
    for (int64_t i = 0; i < mlen; i++) {
      tr__cpu_store(ctx->d, ctx->kind, (i0 + i) * ctx->N + j0, nlen, acc + i * TR__GEMM_NB);
    }
  }
  free(scratch);
  return NULL;
}

tr_status *tr_cpu_gemm(const void *a, const void *b, void *d, int64_t M, int64_t N, int64_t K,
                       int trans_a, int trans_b, tr_dtype dtype, int threads) {
  static const char op[] = "gemm";
  tr__cpu_kind kind;
  TR_RETURN_IF_ERROR(tr__cpu_check_threads(op, threads));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(op, "dtype", dtype, TR__CPU_HALVES_F32, &kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "M", M));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "N", N));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "K", K));
  int64_t a_numel, b_numel, d_numel;
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "M * K", M, K, &a_numel));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "K * N", K, N, &b_numel));
  TR_RETURN_IF_ERROR(tr__cpu_mul(op, "M * N", M, N, &d_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "a", a, a_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "b", b, b_numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "d", d, d_numel));
  if (d_numel == 0) return NULL;
  tr__gemm_ctx ctx = {a, b, d, M, N, K, 0, trans_a != 0, trans_b != 0, kind};
  ctx.m_blocks = (M + TR__GEMM_MB - 1) / TR__GEMM_MB;
  const int64_t n_blocks = (N + TR__GEMM_NB - 1) / TR__GEMM_NB;
  const int64_t work = K * TR__GEMM_MB * TR__GEMM_NB; /* multiply-adds in a full tile */
  return tr__cpu_parallel_for(threads, ctx.m_blocks * n_blocks, work > 0 ? work : 1,
                              tr__gemm_tiles, &ctx);
}
