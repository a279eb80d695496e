/* gemm.c: d = op(a) @ op(b) through OpenBLAS's sgemm; float16 and bfloat16 by float32 blocks. */
#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

/* The largest size or leading dimension the BLAS's int (blasint) holds. */
#define TR__GEMM_BLAS_MAX (sizeof(blasint) >= 8 ? (int64_t)INT64_MAX : (int64_t)INT32_MAX)

/* Rows, columns and depth of the blocks the block path converts to float32 (4 MiB each at most),
 * so that a huge operand is never converted whole. */
#define TR__GEMM_BLOCK 1024

/* A rows x cols sub-block of a row-major matrix (leading dimension ld) of `kind`, at (row0,
 * col0), and its float32 copy (leading dimension cols); `to_f32` says which way the copy goes. */
typedef struct tr__gemm_block_copy {
  void *matrix;
  tr__cpu_kind kind;
  int64_t ld, row0, col0, cols;
  float *block;
  int to_f32;
} tr__gemm_block_copy;

/* Items are rows of the sub-block. */
static tr_status *tr__gemm_copy_rows(void *vctx, int64_t begin, int64_t end) {
  const tr__gemm_block_copy *c = vctx;
  for (int64_t r = begin; r < end; r++) {
    const int64_t at = (c->row0 + r) * c->ld + c->col0;
    float *row = c->block + r * c->cols;
    if (!c->to_f32) {
      tr__cpu_store(c->matrix, c->kind, at, c->cols, row);
      continue;
    }
    const float *f = tr__cpu_load(c->matrix, c->kind, at, c->cols, row);
    if (f != row) memcpy(row, f, (size_t)c->cols * sizeof(float)); /* float32 is not converted */
  }
  return NULL;
}

static tr_status *tr__gemm_copy(const void *matrix, tr__cpu_kind kind, int64_t ld, int64_t row0,
                                int64_t col0, int64_t rows, int64_t cols, float *block,
                                int to_f32, int threads) {
  tr__gemm_block_copy c = {(void *)matrix, kind, ld, row0, col0, cols, block, to_f32};
  return tr__cpu_parallel_for(threads, rows, cols, tr__gemm_copy_rows, &c);
}

static int64_t tr__gemm_min(int64_t x, int64_t y) { return x < y ? x : y; }

/* d by blocks of at most TR__GEMM_BLOCK rows and columns: each block of d accumulates in float32
 * over depth blocks of op(a) and op(b), each converted to float32 before its sgemm, and is
 * rounded to d's kind once, at the end. */
static tr_status *tr__gemm_blocks(const void *a, const void *b, void *d, int64_t M, int64_t N,
                                  int64_t K, int ta, int tb, tr__cpu_kind kind, int threads) {
  const int64_t MB = tr__gemm_min(M, TR__GEMM_BLOCK), NB = tr__gemm_min(N, TR__GEMM_BLOCK);
  const int64_t KB = tr__gemm_min(K, TR__GEMM_BLOCK);
  const size_t floats = (size_t)(MB * KB + KB * NB + MB * NB);
  float *scratch = malloc(floats * sizeof(float));
  if (scratch == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "gemm: cannot allocate %zu bytes of scratch",
                     floats * sizeof(float));
  }
  float *ap = scratch, *bp = ap + MB * KB, *cp = bp + KB * NB;
  tr_status *status = NULL;
  for (int64_t i0 = 0; i0 < M && status == NULL; i0 += MB) {
    const int64_t mlen = tr__gemm_min(MB, M - i0);
    for (int64_t j0 = 0; j0 < N && status == NULL; j0 += NB) {
      const int64_t nlen = tr__gemm_min(NB, N - j0);
      for (int64_t k0 = 0; k0 < K && status == NULL; k0 += KB) {
        const int64_t klen = tr__gemm_min(KB, K - k0);
        /* The blocks keep a's and b's layouts: a [K, M] gives ap [klen, mlen], and so on. */
        status = ta ? tr__gemm_copy(a, kind, M, k0, i0, klen, mlen, ap, 1, threads)
                    : tr__gemm_copy(a, kind, K, i0, k0, mlen, klen, ap, 1, threads);
        if (status != NULL) break;
        status = tb ? tr__gemm_copy(b, kind, K, j0, k0, nlen, klen, bp, 1, threads)
                    : tr__gemm_copy(b, kind, N, k0, j0, klen, nlen, bp, 1, threads);
        if (status != NULL) break;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (blasint)mlen, (blasint)nlen, (blasint)klen, 1.0f, ap,
                    (blasint)(ta ? mlen : klen), bp, (blasint)(tb ? klen : nlen),
                    k0 == 0 ? 0.0f : 1.0f, cp, (blasint)nlen);
      }
      if (status == NULL) status = tr__gemm_copy(d, kind, N, i0, j0, mlen, nlen, cp, 0, threads);
    }
  }
  free(scratch);
  return status;
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
  if (K == 0) { /* all-zero bits are +0 in every kind */
    memset(d, 0, (size_t)d_numel * (size_t)tr__cpu_kind_bytes(kind));
    return NULL;
  }
  const int ta = trans_a != 0, tb = trans_b != 0;
  if (kind == TR__CPU_F32 && M <= TR__GEMM_BLAS_MAX && N <= TR__GEMM_BLAS_MAX &&
      K <= TR__GEMM_BLAS_MAX) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, 1.0f, a, (blasint)(ta ? M : K), b,
                (blasint)(tb ? K : N), 0.0f, d, (blasint)N);
    return NULL;
  }
  return tr__gemm_blocks(a, b, d, M, N, K, ta, tb, kind, threads);
}
