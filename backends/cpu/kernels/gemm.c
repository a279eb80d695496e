/* gemm.c: d = op(a) @ op(b) through OpenBLAS's sgemm; float16 and bfloat16 by float32 blocks, or, for
 * an op(a) of a few rows (a decode step), by streaming b once (the skinny path). */
#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

/* The largest size or leading dimension the BLAS's int (blasint) holds. */
#define TR__GEMM_BLAS_MAX (sizeof(blasint) >= 8 ? (int64_t)INT64_MAX : (int64_t)INT32_MAX)

/* Rows, columns and depth of the blocks the block path converts to float32 (64 MiB each at most,
 * 192 MiB of scratch), so that a huge operand is never converted whole. Measured on the 2-core
 * machine (bench_cpu_gemm.py --main-job, bfloat16, 2026-12-06, alternating builds): 4096 against
 * 1024 took the 2048x4096x4096 row from 505 ms to 429 and 4096^3 from 964 to 850 (one sgemm
 * where there were 16 or 64, each converting its blocks again). */
#ifndef TR__GEMM_BLOCK
#define TR__GEMM_BLOCK 4096
#endif

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

/* The skinny path (its rule: tr__gemm_skinny_path, internal.h): float16 and bfloat16 with op(a) of
 * at most TR__GEMM_SKINNY_ROWS rows (a decode step's projections), or TR__GEMM_SKINNY_WIDE_ROWS
 * where b is [N, K] (trans_b) of at least TR__GEMM_SKINNY_WIDE_B elements, and op(a) in float32 of
 * at most TR__GEMM_SKINNY_BYTES. Measured on the 2-core machine (bench_cpu_gemm.py --main-job,
 * bfloat16, 2026-12-06): the block path, which converted b's blocks to float32 in memory and ran
 * sgemm on each, took 10.1 ms on the 1x4096x4096 row, 50 on 1x14336x4096 and 13.6 on
 * 16x4096x4096, against numpy.matmul's 1.6, 8.1 and 8.7 in float32; the skinny path 1.8, 5.8 and
 * 7.9 (numpy 1.7, 7.6 and 9.5 in that run). At 16 rows the skinny path as first written (its sums
 * in an array the compiler kept in memory) ran as fast as the block path (22.2 ms both, five runs
 * alternating), and the current one twice as fast as that first one (9.3 ms against 19.4-20.4,
 * four runs alternating).
 * Above 16 rows (python/bench/cpu_gemm_paths.py, bfloat16 unless said, a build with the skinny
 * path up to 256 rows against one with 16, two rounds alternating, 2026-12-06, the 2-core
 * machine): where b is [N, K] and holds at least 8Mi elements, the block path's float32 copy of b
 * goes through memory, not the caches (4096x2048 and 2048x4096: 22-37 ms at 24-64 rows, where
 * 2048x2048 takes 4-6), and the skinny path was faster up to 48 rows at least: 24 rows 1.8-4.1x
 * (4096x2048, 2048x4096, 3072x3072, 4096x4096, 14336x4096 and 4096x14336 as N x K), 48 rows
 * 1.2-2.8x, 64 rows 1.0-2.0x, 128 rows 0.7-1.0x (float16: 32 rows 1.5-2.6x, 64 rows 1.0-2.1x).
 * Below that size (2048x2048, 1536x1536, 1024x1024) the block path was faster from 32 rows on (the
 * skinny path 0.4-0.97x), and where b is [K, N] the skinny path's column ranges were slower from
 * 24 rows on (0.25-0.8x on all but 4096x4096). The build that keeps this rule against the one
 * before it: docs/performance.md ("Few rows"). */
/* op(b)'s columns a range of the skinny path takes at a time where b is not transposed (its
 * accumulators: rows x this many floats) */
#define TR__GEMM_SKINNY_COLS 256

typedef struct tr__gemm_skinny {
  const float *x; /* op(a) in float32, [M, K] */
  const void *b;
  void *d;
  tr__cpu_kind kind;
  int64_t M, N, K;
} tr__gemm_skinny;

/* Eight floats, and eight 16-bit and 32-bit lanes: GCC's vector extensions (two SSE registers in
 * the baseline build, one AVX register in the AVX2 one). */
typedef float tr__gemm_v8f __attribute__((vector_size(32)));
typedef uint16_t tr__gemm_v8h __attribute__((vector_size(16)));
typedef uint32_t tr__gemm_v8u __attribute__((vector_size(32)));

/* `rows` (1 to 4) rows of x (x, x + ldx, ...; K floats each) dotted with a row of b: float32
 * (`y`), or bfloat16 converted as it is read (`h`, with `bf16`). Each dot is summed in eight lanes
 * (k mod 8), then lane by lane, then the tail past a multiple of 8: the same order whatever the
 * thread. Inlined with `rows` and `bf16` constants (tr__gemm_dot), so the unused rows vanish and
 * the sums stay in registers. */
static inline __attribute__((always_inline)) void tr__gemm_dot_n(const float *x, int64_t ldx, int64_t K, int rows,
                                                                 int bf16, const float *y, const uint16_t *h,
                                                                 float *out) {
  tr__gemm_v8f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}; /* named, not an array: kept in registers */
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    tr__gemm_v8f v, x0, x1, x2, x3;
    if (bf16) {
      tr__gemm_v8h hv;
      memcpy(&hv, h + k, sizeof(hv));
      const tr__gemm_v8u u = __builtin_convertvector(hv, tr__gemm_v8u) << 16; /* the float's top half */
      memcpy(&v, &u, sizeof(v));
    } else {
      memcpy(&v, y + k, sizeof(v));
    }
    memcpy(&x0, x + k, sizeof(x0));
    s0 += x0 * v;
    if (rows > 1) {
      memcpy(&x1, x + ldx + k, sizeof(x1));
      s1 += x1 * v;
    }
    if (rows > 2) {
      memcpy(&x2, x + 2 * ldx + k, sizeof(x2));
      s2 += x2 * v;
    }
    if (rows > 3) {
      memcpy(&x3, x + 3 * ldx + k, sizeof(x3));
      s3 += x3 * v;
    }
  }
  const tr__gemm_v8f sums[4] = {s0, s1, s2, s3};
  for (int r = 0; r < rows; r++) {
    float t = 0.f;
    for (int j = 0; j < 8; j++) t += sums[r][j];
    for (int64_t q = k; q < K; q++) t += x[r * ldx + q] * (bf16 ? tr__cpu_bf16_to_f32(h[q]) : y[q]);
    out[r] = t;
  }
}

/* Dispatches to tr__gemm_dot_n with constants. */
static inline __attribute__((always_inline)) void tr__gemm_dot(const float *x, int64_t ldx, int64_t K, int64_t rows,
                                                               int bf16, const float *y, const uint16_t *h,
                                                               float *out) {
#define TR__GEMM_DOT(R) \
  (bf16 ? tr__gemm_dot_n(x, ldx, K, R, 1, y, h, out) : tr__gemm_dot_n(x, ldx, K, R, 0, y, h, out))
  switch (rows) {
    case 1: TR__GEMM_DOT(1); break;
    case 2: TR__GEMM_DOT(2); break;
    case 3: TR__GEMM_DOT(3); break;
    default: TR__GEMM_DOT(4); break;
  }
#undef TR__GEMM_DOT
}

/* b [N, K] (transposed): items are b's rows; each is dotted with every row of x, four rows of x
 * at a time (a bfloat16 row converted as it is read, a float16 one into a float32 buffer first). */
static inline __attribute__((always_inline)) tr_status *tr__gemm_skinny_rows_body(void *vctx, int64_t begin,
                                                                                  int64_t end) {
  const tr__gemm_skinny *c = vctx;
  float *buf = c->kind == TR__CPU_F16 ? malloc((size_t)c->K * sizeof(float)) : NULL;
  if (c->kind == TR__CPU_F16 && buf == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "gemm: cannot allocate %lld bytes for a row of b in float32",
                     (long long)(c->K * 4));
  }
  for (int64_t n = begin; n < end; n++) {
    const float *y = c->kind == TR__CPU_BF16 ? NULL : tr__cpu_load(c->b, c->kind, n * c->K, c->K, buf);
    const uint16_t *h = (const uint16_t *)c->b + n * c->K; /* read where y is NULL: bfloat16 */
    for (int64_t m = 0; m < c->M; m += 4) {
      float out[4];
      const int64_t rows = c->M - m < 4 ? c->M - m : 4;
      tr__gemm_dot(c->x + m * c->K, c->K, c->K, rows, c->kind == TR__CPU_BF16, y, h, out);
      for (int64_t r = 0; r < rows; r++) tr__cpu_store1(c->d, c->kind, (m + r) * c->N + n, out[r]);
    }
  }
  free(buf);
  return NULL;
}

static tr_status *tr__gemm_skinny_rows(void *vctx, int64_t begin, int64_t end) {
  return tr__gemm_skinny_rows_body(vctx, begin, end);
}

#if defined(__GNUC__) && defined(__x86_64__)
/* The same built for AVX2, chosen at run time where the processor has it (tr__gemm_skinny_rows_fn):
 * a vector of eight floats is one register. The build's -std=c11 leaves products and sums unfused,
 * so both builds give the same bits. */
__attribute__((target("avx2"))) static tr_status *tr__gemm_skinny_rows_avx2(void *vctx, int64_t begin, int64_t end) {
  return tr__gemm_skinny_rows_body(vctx, begin, end);
}
#endif

static tr__cpu_range_fn tr__gemm_skinny_rows_fn(void) {
#if defined(__GNUC__) && defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) return tr__gemm_skinny_rows_avx2;
#endif
  return tr__gemm_skinny_rows;
}

/* b [K, N]: items are ranges of TR__GEMM_SKINNY_COLS of b's columns; each range's rows of b are
 * converted and added, scaled by x's column, into every row's accumulators. */
static tr_status *tr__gemm_skinny_cols(void *vctx, int64_t begin, int64_t end) {
  const tr__gemm_skinny *c = vctx;
  float *acc = malloc((size_t)(c->M + 1) * TR__GEMM_SKINNY_COLS * sizeof(float));
  if (acc == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "gemm: cannot allocate %lld bytes for the sums of b's columns",
                     (long long)((c->M + 1) * TR__GEMM_SKINNY_COLS * 4));
  }
  float *buf = acc + c->M * TR__GEMM_SKINNY_COLS;
  for (int64_t r = begin; r < end; r++) {
    const int64_t n0 = r * TR__GEMM_SKINNY_COLS;
    const int64_t w = c->N - n0 < TR__GEMM_SKINNY_COLS ? c->N - n0 : TR__GEMM_SKINNY_COLS;
    memset(acc, 0, (size_t)(c->M * TR__GEMM_SKINNY_COLS) * sizeof(float));
    for (int64_t k = 0; k < c->K; k++) {
      const float *y = tr__cpu_load(c->b, c->kind, k * c->N + n0, w, buf);
      for (int64_t m = 0; m < c->M; m++) {
        const float xv = c->x[m * c->K + k];
        float *am = acc + m * TR__GEMM_SKINNY_COLS;
        for (int64_t j = 0; j < w; j++) am[j] += xv * y[j];
      }
    }
    for (int64_t m = 0; m < c->M; m++) tr__cpu_store(c->d, c->kind, m * c->N + n0, w, acc + m * TR__GEMM_SKINNY_COLS);
  }
  free(acc);
  return NULL;
}

/* d = op(a) @ op(b) with op(a) small: op(a) converted to float32 once, b streamed once (converted
 * as it is read, or a row or a range of columns at a time into a small buffer), accumulated in
 * float32 and rounded to d's kind once; each element of d is computed by one thread in a fixed
 * order, so the result does not depend on the thread count. */
static tr_status *tr__gemm_skinny_run(const void *a, const void *b, void *d, int64_t M, int64_t N,
                                      int64_t K, int ta, int tb, tr__cpu_kind kind, int threads) {
  float *x = malloc((size_t)(M * K) * sizeof(float));
  if (x == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "gemm: cannot allocate %lld bytes for a in float32", (long long)(M * K * 4));
  }
  tr_status *status = NULL;
  if (!ta) { /* a [M, K] as is: the block path's copy */
    status = tr__gemm_copy(a, kind, K, 0, 0, M, K, x, 1, threads);
  } else { /* a [K, M]: transposed as it is converted */
    for (int64_t m = 0; m < M; m++) {
      for (int64_t k = 0; k < K; k++) x[m * K + k] = tr__cpu_load1(a, kind, k * M + m);
    }
  }
  tr__gemm_skinny c = {x, b, d, kind, M, N, K};
  if (status == NULL) {
    status = tb ? tr__cpu_parallel_for(threads, N, M * K, tr__gemm_skinny_rows_fn(), &c)
                : tr__cpu_parallel_for(threads, (N + TR__GEMM_SKINNY_COLS - 1) / TR__GEMM_SKINNY_COLS,
                                       M * K * TR__GEMM_SKINNY_COLS, tr__gemm_skinny_cols, &c);
  }
  free(x);
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
  if (tr__gemm_skinny_path(kind, M, K, b_numel, tb)) {
    return tr__gemm_skinny_run(a, b, d, M, N, K, ta, tb, kind, threads);
  }
  return tr__gemm_blocks(a, b, d, M, N, K, ta, tb, kind, threads);
}
