/* internal.h: what the CPU kernels share: element kinds, conversions, checks, parallel loops. */
#ifndef TILERUN_BACKENDS_CPU_KERNELS_INTERNAL_H_
#define TILERUN_BACKENDS_CPU_KERNELS_INTERNAL_H_

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "tilerun/dtype.h"
#include "tilerun/status.h"

/* The element types the kernels handle, as a small enum to switch on. */
typedef enum tr__cpu_kind {
  TR__CPU_F16 = 0,
  TR__CPU_BF16,
  TR__CPU_F32,
  TR__CPU_F64,
  TR__CPU_I32,
  TR__CPU_I64,
  TR__CPU_KIND_COUNT,
} tr__cpu_kind;

/* Sets of kinds, for the dtype checks (the names are listed in enum order). */
#define TR__CPU_SET(kind) (1u << (kind))
#define TR__CPU_HALVES_F32 \
  (TR__CPU_SET(TR__CPU_F16) | TR__CPU_SET(TR__CPU_BF16) | TR__CPU_SET(TR__CPU_F32))

/* Floats a chunk buffer holds: rows are converted and reduced this many elements at a time, so
 * that no kernel allocates for a row of any length. */
#define TR__CPU_CHUNK 512

/* ---- Scalar conversions ------------------------------------------------------------------- */

static inline uint32_t tr__cpu_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float tr__cpu_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The conversions are written without branches (every case computed, one selected) so that
 * loops over them vectorise. */

static inline float tr__cpu_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t normal = (em << 13) + 0x38000000u; /* rebias the exponent by 127 - 15 */
  const uint32_t inf_nan = (em << 13) | 0x7f800000u;  /* payload kept */
  const uint32_t subnormal = tr__cpu_f32_bits((float)em * 0x1p-24f); /* exact; zero too */
  const uint32_t bits = em >= 0x7c00u ? inf_nan : em >= 0x0400u ? normal : subnormal;
  return tr__cpu_bits_f32(bits | sign);
}

/* Rounds to nearest, ties to even, with float32 arithmetic doing the rounding (the method of
 * Maratyszcza's FP16 library, which PyTorch's c10::Half uses): scaling |f| by 2^112 * 2^-110
 * makes values past float16's range inf; adding 2^(e + 13) (at least 2^-1, for results in the
 * subnormal range) rounds away the bits float16 has no room for. Needs float32 arithmetic in
 * round-to-nearest without flush-to-zero, as C11 on x86-64 and AArch64 has by default. */
#if FLT_EVAL_METHOD != 0
#error "tr__cpu_f32_to_f16 needs float arithmetic evaluated in float (x87: use -mfpmath=sse)"
#endif
static inline uint16_t tr__cpu_f32_to_f16(float f) {
  const uint32_t w = tr__cpu_f32_bits(f);
  const uint32_t shl1_w = w + w; /* drops the sign */
  const uint32_t sign = (w >> 16) & 0x8000u;
  float base = ((f < 0 ? -f : f) * 0x1p+112f) * 0x1p-110f;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = tr__cpu_bits_f32((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = tr__cpu_f32_bits(base);
  const uint32_t finite = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
  const uint32_t payload = (w >> 13) & 0x3ffu;
  const uint32_t nan = 0x7c00u | (payload != 0 ? payload : 0x200u); /* keep it a nan */
  return (uint16_t)(sign | (shl1_w > 0xff000000u ? nan : finite));
}

static inline float tr__cpu_bf16_to_f32(uint16_t h) { return tr__cpu_bits_f32((uint32_t)h << 16); }

static inline uint16_t tr__cpu_f32_to_bf16(float f) {
  const uint32_t x = tr__cpu_f32_bits(f);
  /* ties to even; a carry bumps the exponent, up to inf */
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t top = x >> 16;
  const uint32_t nan = (top & 0x7fu) != 0 ? top : top | 0x40u; /* keep it a nan */
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* ---- Rows: load into float32, store from float32 ------------------------------------------ */

/* The n floats of src (kind F16, BF16 or F32) from element `offset`: a pointer into src itself
 * for F32, else `buf` (room for n) filled with the converted elements. */
static inline const float *tr__cpu_load(const void *src, tr__cpu_kind kind, int64_t offset,
                                        int64_t n, float *buf) {
  if (kind == TR__CPU_F32) return (const float *)src + offset;
  const uint16_t *h = (const uint16_t *)src + offset;
  if (kind == TR__CPU_BF16) {
    for (int64_t i = 0; i < n; i++) buf[i] = tr__cpu_bf16_to_f32(h[i]);
  } else {
    for (int64_t i = 0; i < n; i++) buf[i] = tr__cpu_f16_to_f32(h[i]);
  }
  return buf;
}

/* Writes n floats into dst (kind F16, BF16 or F32) from element `offset`, rounding. */
static inline void tr__cpu_store(void *dst, tr__cpu_kind kind, int64_t offset, int64_t n,
                                 const float *src) {
  if (kind == TR__CPU_F32) {
    float *f = (float *)dst + offset;
    for (int64_t i = 0; i < n; i++) f[i] = src[i];
    return;
  }
  uint16_t *h = (uint16_t *)dst + offset;
  if (kind == TR__CPU_BF16) {
    for (int64_t i = 0; i < n; i++) h[i] = tr__cpu_f32_to_bf16(src[i]);
  } else {
    for (int64_t i = 0; i < n; i++) h[i] = tr__cpu_f32_to_f16(src[i]);
  }
}

/* One element as float (kinds F16, BF16, F32). */
static inline float tr__cpu_load1(const void *src, tr__cpu_kind kind, int64_t i) {
  switch (kind) {
    case TR__CPU_F16: return tr__cpu_f16_to_f32(((const uint16_t *)src)[i]);
    case TR__CPU_BF16: return tr__cpu_bf16_to_f32(((const uint16_t *)src)[i]);
    default: return ((const float *)src)[i];
  }
}

/* Stores one float as kind (F16, BF16, F32), rounding. */
static inline void tr__cpu_store1(void *dst, tr__cpu_kind kind, int64_t i, float v) {
  switch (kind) {
    case TR__CPU_F16: ((uint16_t *)dst)[i] = tr__cpu_f32_to_f16(v); break;
    case TR__CPU_BF16: ((uint16_t *)dst)[i] = tr__cpu_f32_to_bf16(v); break;
    default: ((float *)dst)[i] = v; break;
  }
}

/* Rounds n floats in place to the precision of kind (nothing for F32). */
static inline void tr__cpu_round(float *v, tr__cpu_kind kind, int64_t n) {
  if (kind == TR__CPU_BF16) {
    for (int64_t i = 0; i < n; i++) v[i] = tr__cpu_bf16_to_f32(tr__cpu_f32_to_bf16(v[i]));
  } else if (kind == TR__CPU_F16) {
    for (int64_t i = 0; i < n; i++) v[i] = tr__cpu_f16_to_f32(tr__cpu_f32_to_f16(v[i]));
  }
}

/* The element size in bytes of kind. */
static inline int64_t tr__cpu_kind_bytes(tr__cpu_kind kind) {
  static const int64_t bytes[TR__CPU_KIND_COUNT] = {2, 2, 4, 8, 4, 8};
  return bytes[kind];
}

/* ---- Reductions over float rows (eight float lanes, summed pairwise at the end) ------------ */

static inline float tr__cpu_sum(const float *x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; l++) acc[l] += x[i + l];
  }
  float tail = 0.0f;
  for (; i < n; i++) tail += x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

/* sum((x - c)^2); c = 0 gives the sum of squares. */
static inline float tr__cpu_sum_sq_dev(const float *x, int64_t n, float c) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; l++) {
      float d = x[i + l] - c;
      acc[l] += d * d;
    }
  }
  float tail = 0.0f;
  for (; i < n; i++) {
    float d = x[i] - c;
    tail += d * d;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

static inline float tr__cpu_dot(const float *a, const float *b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; i++) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

/* ---- Argument checks: each returns NULL or a ValueError "<op>: ..." ------------------------ */

/* dtype must be one of the kinds in `allowed` (a TR__CPU_SET union); sets *out.
 * "rms_norm: dtype int32 is not supported (float16, bfloat16, float32)". */
tr_status *tr__cpu_check_dtype(const char *op, const char *item, tr_dtype dtype,
                               unsigned allowed, tr__cpu_kind *out) TR_MUST_USE;

/* "rms_norm: rows must be >= 0, got -1". */
tr_status *tr__cpu_check_size(const char *op, const char *item, int64_t value) TR_MUST_USE;

/* "rms_norm: threads must be >= 0, got -1". */
tr_status *tr__cpu_check_threads(const char *op, int threads) TR_MUST_USE;

/* A buffer needed when it has elements: "rms_norm: x is NULL (it holds 4096 elements)". */
tr_status *tr__cpu_check_ptr(const char *op, const char *item, const void *p,
                             int64_t numel) TR_MUST_USE;

/* *out = a * b (both >= 0); "gemm: M * K = 3037000500 * 3037000500 overflows int64". */
tr_status *tr__cpu_mul(const char *op, const char *what, int64_t a, int64_t b,
                       int64_t *out) TR_MUST_USE;

/* ---- Parallel loops ------------------------------------------------------------------------- */

/* Runs items [begin, end); returns NULL or an error (OutOfMemoryError for scratch). */
typedef tr_status *(*tr__cpu_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Splits items [0, items) into min(threads, items, TR_CPU_MAX_THREADS) contiguous ranges and
 * runs fn on each: on the calling thread alone when items * work_per_item <=
 * TR_CPU_PARALLEL_MIN or threads resolves to 1, else on the pool's workers and the caller, each
 * taking the next range until none is left (see common.c). A call made while another holds the
 * pool (another thread's, or a nested call from inside fn) runs its ranges inline, in order.
 * Returns the first range's error, freeing the others. `threads` is 0 (the default) or
 * positive. Thread-safe. */
tr_status *tr__cpu_parallel_for(int threads, int64_t items, int64_t work_per_item,
                                tr__cpu_range_fn fn, void *ctx) TR_MUST_USE;

/* ---- GEMM's choice of path (gemm.c, which has the measurements) ------------------------------ */

/* Rows of op(a) the skinny path takes: at most TR__GEMM_SKINNY_ROWS, or TR__GEMM_SKINNY_WIDE_ROWS
 * where b is [N, K] (trans_b) of at least TR__GEMM_SKINNY_WIDE_B elements. */
#ifndef TR__GEMM_SKINNY_ROWS
#define TR__GEMM_SKINNY_ROWS 16
#endif
#ifndef TR__GEMM_SKINNY_WIDE_ROWS
#define TR__GEMM_SKINNY_WIDE_ROWS 48
#endif
#if TR__GEMM_SKINNY_WIDE_ROWS < TR__GEMM_SKINNY_ROWS
#error "TR__GEMM_SKINNY_WIDE_ROWS is at least TR__GEMM_SKINNY_ROWS (set both to raise the limit)"
#endif
#define TR__GEMM_SKINNY_WIDE_B ((int64_t)8 << 20)
/* At most this many bytes of op(a) in float32 (and a sixteenth of it, 4 MiB, for a float16 row of
 * b converted by each range) on the skinny path; larger calls take the block path. */
#define TR__GEMM_SKINNY_BYTES ((int64_t)64 << 20)

/* 1 where tr_cpu_gemm takes the skinny path (b streamed once) for op(a) of M rows and K columns
 * and b of b_numel elements, [N, K] where tb; 0 for the block path (float32: always sgemm). */
static inline int tr__gemm_skinny_path(tr__cpu_kind kind, int64_t M, int64_t K, int64_t b_numel, int tb) {
  const int64_t rows = tb && b_numel >= TR__GEMM_SKINNY_WIDE_B ? TR__GEMM_SKINNY_WIDE_ROWS : TR__GEMM_SKINNY_ROWS;
  return (kind == TR__CPU_F16 || kind == TR__CPU_BF16) && M >= 1 && M <= rows && K >= 0 &&
         K <= TR__GEMM_SKINNY_BYTES / 4 / M && (kind != TR__CPU_F16 || K <= TR__GEMM_SKINNY_BYTES / 64);
}

#endif /* TILERUN_BACKENDS_CPU_KERNELS_INTERNAL_H_ */
