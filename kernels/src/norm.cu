// norm.cu: RMSNorm (TR_RMS=1) and LayerNorm (TR_RMS=0) over rows of TR_N elements, one of two
// implementations chosen by the build (TR_IMPL_WARP or TR_IMPL_LOOPED):
//   warp:   a warp per row, the row held in registers (TR_N <= 1024), TR_BLOCK / 32 rows per
//           block;
//   looped: a block per row for any TR_N. A row of at most four 16-byte vectors per thread is
//           held in registers as loaded (16-bit rows packed: half the registers of their
//           floats), read once, with one reduction of both sums; longer rows are read once for
//           the statistics and again (from L2) to write y. Built twice: about four vectors per
//           thread with weight and bias read one or two vectors ahead of the stores and the registers capped by
//           TR_MINB blocks per SM (bandwidth, for many rows), and one or two vectors per thread
//           with weight and bias loaded with x (latency, for fewer rows than SMs); the launch
//           picks by the row count.
// Statistics in float32. LayerNorm's come from the sums of d = x - x[0] and d * d in one
// reduction: shifting by a value of the row keeps the variance exact where the mean is large
// against the spread. TR_HAS_W / TR_HAS_B say whether weight and bias are given; TR_KEEP_WB=0
// loads LayerNorm's without the L2 evict_last policy (TILERUN_CUDA_L2_KEEP=0).
// Entries: tr_norm(const T *x, const T *w, const T *b, T *y, i64 rows, float eps) for 16-byte
// aligned pointers, tr_norm_any for any (the launch picks).
#ifndef TR_MINB
#define TR_MINB 1
#endif
#ifndef TR_KEEP_WB /* 0: LayerNorm's weight and bias loaded without the L2 evict_last policy */
#define TR_KEEP_WB 1
#endif
typedef TR_T T;

// mean and rstd from the shifted sums.
__device__ __forceinline__ void stats(float s1, float s2, float shift, float eps, float &mean, float &rstd) {
  if (TR_RMS) {
    mean = 0.f;
    rstd = rsqrtf(s2 / (float)TR_N + eps);
  } else {
    const float m = s1 / (float)TR_N;
    mean = shift + m;
    const float var = s2 / (float)TR_N - m * m; /* clamped at 0, a NaN kept (an inf in the row: NaN, as torch) */
    rstd = rsqrtf((var < 0.f ? 0.f : var) + eps);
  }
}

template <int V>
__device__ __forceinline__ void accumulate(const vec_t<T, V> &r, float shift, float &s1, float &s2) {
  float v[V];
  to_f32<T, V>(r, v);
#pragma unroll
  for (int k = 0; k < V; k++) {
    const float d = v[k] - shift;
    s1 += d;
    s2 += d * d;
  }
}

template <int V>
__device__ __forceinline__ void write(const vec_t<T, V> &r, const T *w, const T *b, T *y, int i, float mean,
                                      float rstd) {
  float v[V], wv[V], bv[V];
  to_f32<T, V>(r, v);
  if (TR_HAS_W) load_f32<T, V>(w + (i64)i * V, wv);
  if (TR_HAS_B) load_f32<T, V>(b + (i64)i * V, bv);
#pragma unroll
  for (int k = 0; k < V; k++) {
    float o = (v[k] - mean) * rstd;
    if (TR_HAS_W) o *= wv[k];
    if (TR_HAS_B) o += bv[k];
    v[k] = o;
  }
  store_f32<T, V>(y + (i64)i * V, v);
}

// 16 bytes as four words: x (STREAM: past L1, ld.global.nc.L1::no_allocate: this kernel never
// writes x); weight and bias with x (read-only path), or a vector at a time in order with the
// stores ("memory": at most two vectors' weight and bias live at once, so the register cap holds
// without spilling).
struct w4 {
  unsigned u[4];
};
template <bool STREAM>
__device__ __forceinline__ w4 load_x(const void *p) {
  w4 r;
  if constexpr (STREAM) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3]) : "l"(p));
  } else {
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3]) : "l"(p));
  }
  return r;
}
__device__ __forceinline__ w4 load_ro(const void *p) {
  w4 r;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3]) : "l"(p));
  return r;
}
// KEEP: with an L2 evict_last policy, so that the lines stay in L2 while x and y stream through
// it, for the next call with the same weight and bias (the policy made in the same asm: no
// register held for it; sm_80 and later, a plain load before).
template <bool KEEP = false>
__device__ __forceinline__ w4 load_in_order(const void *p) {
  w4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr bool HINT = KEEP;
#else
  constexpr bool HINT = false;
#endif
  if constexpr (HINT) {
    asm volatile("{\n\t.reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                 "ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;\n\t}"
                 : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3]) : "l"(p) : "memory");
  } else {
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3]) : "l"(p) : "memory");
  }
  return r;
}
// x[0] as a float, with an ordered read-only load (H: bf16 or f16).
template <class H>
__device__ __forceinline__ float load_first(const H *p) {
  H t;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(t.bits) : "l"(p));
  return to_f32(t);
}
__device__ __forceinline__ float load_first(const float *p) {
  float f;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(f) : "l"(p));
  return f;
}
template <int V>
__device__ __forceinline__ void w4_f32(const w4 &w, float (&out)[V]) {
  words_f32<T, V>(w.u, out);
}

// One row held in the registers of TR_BLOCK threads, PER 16-byte vectors each (V elements), read
// once; one reduction of both sums. EARLY: weight and bias loaded with x (one memory latency for
// a short row), else a vector ahead of the stores: each thread's first vector's with x, each next
// one's before the store of the one before, so that no store waits for its weight and bias
// (measured on the H200: 0.15-0.57 us at 2048 rows against loading each after the store before).
// Two vectors ahead (AHEAD2) where only one of weight and bias is given and the registers allow
// it without spilling (RMSNorm, three runs alternating in one visit: 2048x4096 10.53-10.65 ->
// 10.21-10.34 us, 2048x8192 18.35-18.43 -> 18.21-18.33 us); LayerNorm with both spilled at the
// register cap two ahead and ran 40% slower. x and y streamed past the caches (2-3 points of copy
// bandwidth at 2048 rows). `zero` is 0, from a kernel argument: XOR-ing the held words with it
// keeps them packed across the reduction (unpacked early, they would be kept as floats: twice the
// registers).
template <int V, int PER, bool EARLY>
__device__ __forceinline__ void norm_row_held(const T *x, const T *w, const T *b, T *y, float eps, float *scratch,
                                              unsigned zero) {
  static_assert(V * sizeof(T) == 16, "16-byte vectors");
  constexpr int NV = TR_N / V;
  constexpr bool FULL = NV % TR_BLOCK == 0;
  /* two ahead only where measured and checked free of spills (ptxas, every dtype and row length
   * of the sweep): one of weight and bias, 16-bit rows of exactly four vectors per thread of a
   * power-of-two block */
  constexpr bool AHEAD2 = !EARLY && (TR_HAS_W != TR_HAS_B) && sizeof(T) == 2 && PER == 4 && FULL &&
                          (TR_BLOCK & (TR_BLOCK - 1)) == 0;
  /* both weight and bias (one vector ahead): kept in L2 across calls (load_in_order<true>). On
   * the H200 (standalone benchmark, bf16, weight and bias new each call from the sets rotating
   * with the inputs: eight at 2048x8192, four at 2048x16384; the current kernel, then this, in one
   * visit): LayerNorm 2048x8192 18.31-18.35 us against 18.53-18.59 (five runs), 2048x16384
   * 34.91-34.99 against 35.17-35.23 (three), 16384x8192 131.30-131.47 against 131.57-131.93 (two),
   * 2048x4096 the same.
   * With the policy on RMSNorm's weight too, RMSNorm was mixed (2048x16384 0.1 us faster, 2048x4096
   * 10.35 against 10.19 us), so it is left without. Not measured: f16 and float rows, other row
   * lengths, sm_80. */
  constexpr bool KEEP = TR_KEEP_WB && !EARLY && TR_HAS_W && TR_HAS_B;
  const int tid = threadIdx.x;
  /* LayerNorm's shift x[0], loaded first and in order (a plain load placed after the vector
   * loads cost 0.15 us at 2048x8192 on the H200) */
  const float shift = TR_RMS ? 0.f : load_first(x);
  w4 xr[PER], wr[EARLY ? PER : 1], br[EARLY ? PER : 1];
  /* not EARLY: the next vector's weight and bias (wn, bn), and with AHEAD2 the one after (wn2,
   * bn2), loaded before the store of the vector before */
  w4 wn, bn, wn2, bn2;
  if (!EARLY && (FULL || tid < NV)) {
    if (TR_HAS_W) wn = load_in_order<KEEP>(w + (i64)tid * V);
    if (TR_HAS_B) bn = load_in_order<KEEP>(b + (i64)tid * V);
  }
  if (AHEAD2) {
    if (TR_HAS_W) wn2 = load_in_order<KEEP>(w + (i64)(tid + TR_BLOCK) * V);
    if (TR_HAS_B) bn2 = load_in_order<KEEP>(b + (i64)(tid + TR_BLOCK) * V);
  }
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * TR_BLOCK;
    if (FULL || i < NV) {
      xr[p] = load_x<!EARLY>(x + (i64)i * V);
      if (EARLY && TR_HAS_W) wr[p] = load_ro(w + (i64)i * V);
      if (EARLY && TR_HAS_B) br[p] = load_ro(b + (i64)i * V);
    }
  }
  float s1 = 0.f, s2 = 0.f;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    if (FULL || tid + p * TR_BLOCK < NV) {
      float v[V];
      w4_f32<V>(xr[p], v);
#pragma unroll
      for (int k = 0; k < V; k++) {
        const float d = v[k] - shift;
        if (!TR_RMS) s1 += d;
        s2 += d * d;
      }
    }
  }
  block_sum2<TR_BLOCK, true, TR_RMS>(s1, s2, scratch); /* scratch's first use: one barrier */
#pragma unroll
  for (int p = 0; p < PER; p++) {
#pragma unroll
    for (int j = 0; j < 4; j++) asm volatile("xor.b32 %0, %0, %1;" : "+r"(xr[p].u[j]) : "r"(zero));
  }
  float mean, rstd;
  stats(s1, s2, shift, eps, mean, rstd);
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * TR_BLOCK;
    if (!FULL && i >= NV) continue;
    w4 wq, bq;
    if (TR_HAS_W) wq = EARLY ? wr[p] : wn;
    if (TR_HAS_B) bq = EARLY ? br[p] : bn;
    if (AHEAD2) {
      if (TR_HAS_W) wn = wn2;
      if (TR_HAS_B) bn = bn2;
      if (p + 2 < PER) {
        if (TR_HAS_W) wn2 = load_in_order<KEEP>(w + (i64)(i + 2 * TR_BLOCK) * V);
        if (TR_HAS_B) bn2 = load_in_order<KEEP>(b + (i64)(i + 2 * TR_BLOCK) * V);
      }
    } else if (!EARLY && p + 1 < PER && (FULL || i + TR_BLOCK < NV)) {
      if (TR_HAS_W) wn = load_in_order<KEEP>(w + (i64)(i + TR_BLOCK) * V);
      if (TR_HAS_B) bn = load_in_order<KEEP>(b + (i64)(i + TR_BLOCK) * V);
    }
    float v[V], wv[V], bv[V];
    w4_f32<V>(xr[p], v);
    if (TR_HAS_W) w4_f32<V>(wq, wv);
    if (TR_HAS_B) w4_f32<V>(bq, bv);
    /* 16-bit outputs: (v - mean) * rstd as one fma, v * rstd - mean * rstd (its rounding is far
     * below the output's); float32 keeps the subtraction first */
    const float nmr = -mean * rstd;
#pragma unroll
    for (int k = 0; k < V; k++) {
      float o = sizeof(T) == 2 ? fmaf(v[k], rstd, nmr) : (v[k] - mean) * rstd;
      if (TR_HAS_W && TR_HAS_B) o = fmaf(o, wv[k], bv[k]);
      else if (TR_HAS_W) o *= wv[k];
      else if (TR_HAS_B) o += bv[k];
      v[k] = o;
    }
    store16_f32<T, V, !EARLY>(y + (i64)i * V, v);
  }
}

// The warp kernel's row (TR_N <= 1024), in the registers of one warp.
template <int V>
__device__ __forceinline__ void norm_row_warp(const T *x, const T *w, const T *b, T *y, float eps, int lane) {
  constexpr int NV = TR_N / V;
  constexpr int PER = (NV + 31) / 32;
  vec_t<T, V> xr[PER], wr[PER], br[PER];
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = lane + p * 32;
    if (i < NV) {
      xr[p] = reinterpret_cast<const vec_t<T, V> *>(x)[i];
      if (TR_HAS_W) wr[p] = reinterpret_cast<const vec_t<T, V> *>(w)[i];
      if (TR_HAS_B) br[p] = reinterpret_cast<const vec_t<T, V> *>(b)[i];
    }
  }
  const float shift = TR_RMS ? 0.f : to_f32(x[0]);
  float s1 = 0.f, s2 = 0.f;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    if (lane + p * 32 < NV) accumulate<V>(xr[p], shift, s1, s2);
  }
  s1 = warp_sum(s1);
  s2 = warp_sum(s2);
  float mean, rstd;
  stats(s1, s2, shift, eps, mean, rstd);
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = lane + p * 32;
    if (i >= NV) continue;
    float v[V], wv[V], bv[V];
    to_f32<T, V>(xr[p], v);
    if (TR_HAS_W) to_f32<T, V>(wr[p], wv);
    if (TR_HAS_B) to_f32<T, V>(br[p], bv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float o = (v[k] - mean) * rstd;
      if (TR_HAS_W) o *= wv[k];
      if (TR_HAS_B) o += bv[k];
      v[k] = o;
    }
    store_f32<T, V>(y + (i64)i * V, v);
  }
}

// One row of any length by the block (TR_BLOCK threads): the statistics from a first read (for
// up to eight vectors per thread all loaded at once and kept for LayerNorm's variance around the
// mean; longer rows loop and read again), then y from a second read (from L2, where the first
// left the row). Measured on the H200: loading at once gives 1-3 points of copy bandwidth over a
// loop; asking the compiler for full occupancy (32 registers) made LayerNorm slower.
template <int V>
__device__ __forceinline__ void norm_row_looped(const T *x, const T *w, const T *b, T *y, float eps,
                                                float *scratch) {
  constexpr int NV = TR_N / V;
  const int tid = threadIdx.x;
  float s = 0.f, mean = 0.f, rstd;
  constexpr int TRIPS = (NV + TR_BLOCK - 1) / TR_BLOCK;
  if (TRIPS <= 8) {  // every load of the first read in flight at once, kept for the variance
    const vec_t<T, V> *xv0 = reinterpret_cast<const vec_t<T, V> *>(x);
    vec_t<T, V> r[TRIPS];
#pragma unroll
    for (int p = 0; p < TRIPS; p++) {
      const int i = tid + p * TR_BLOCK;
      if (NV % TR_BLOCK == 0 || i < NV) r[p] = xv0[i];
    }
#pragma unroll
    for (int p = 0; p < TRIPS; p++) {
      if (NV % TR_BLOCK == 0 || tid + p * TR_BLOCK < NV) {
        float v[V];
        to_f32<T, V>(r[p], v);
#pragma unroll
        for (int k = 0; k < V; k++) s += TR_RMS ? v[k] * v[k] : v[k];
      }
    }
    s = block_sum<TR_BLOCK>(s, scratch);
    if (TR_RMS) {
      rstd = rsqrtf(s / (float)TR_N + eps);
    } else {
      mean = s / (float)TR_N;
      float d = 0.f;
#pragma unroll
      for (int p = 0; p < TRIPS; p++) {
        if (NV % TR_BLOCK == 0 || tid + p * TR_BLOCK < NV) {
          float v[V];
          to_f32<T, V>(r[p], v);
#pragma unroll
          for (int k = 0; k < V; k++) d += (v[k] - mean) * (v[k] - mean);
        }
      }
      d = block_sum<TR_BLOCK>(d, scratch);
      rstd = rsqrtf(d / (float)TR_N + eps);
    }
  } else {  // long rows: a loop over the row
  for (int i = tid; i < NV; i += TR_BLOCK) {
    float v[V];
    load_f32<T, V>(x + (i64)i * V, v);
#pragma unroll
    for (int k = 0; k < V; k++) s += TR_RMS ? v[k] * v[k] : v[k];
  }
  s = block_sum<TR_BLOCK>(s, scratch);
  if (TR_RMS) {
    rstd = rsqrtf(s / (float)TR_N + eps);
  } else {
    mean = s / (float)TR_N;
    float d = 0.f;
    for (int i = tid; i < NV; i += TR_BLOCK) {
      float v[V];
      load_f32<T, V>(x + (i64)i * V, v);
#pragma unroll
      for (int k = 0; k < V; k++) d += (v[k] - mean) * (v[k] - mean);
    }
    d = block_sum<TR_BLOCK>(d, scratch);
    rstd = rsqrtf(d / (float)TR_N + eps);
  }
  }
  const vec_t<T, V> *xv = reinterpret_cast<const vec_t<T, V> *>(x);
  for (int i = tid; i < NV; i += TR_BLOCK) write<V>(xv[i], w, b, y, i, mean, rstd);
}

// The kernel. ALIGNED: every pointer is 16-byte aligned (the launch checks it and picks
// tr_norm, else tr_norm_any), so the vector paths need no test of their own.
template <bool ALIGNED>
__device__ __forceinline__ void norm_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                                            T *__restrict__ y, i64 rows, float eps) {
  await_previous_kernel();
  constexpr int V = vec_width<T>::value;
  const bool vec = V > 1 && (ALIGNED || (aligned16(x) && aligned16(y) && (!TR_HAS_W || aligned16(w)) &&
                                         (!TR_HAS_B || aligned16(b))));
#if defined(TR_IMPL_WARP)
  const i64 row = (i64)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const i64 off = row * (i64)TR_N;
  if (vec) norm_row_warp<V>(x + off, w, b, y + off, eps, lane);
  else norm_row_warp<1>(x + off, w, b, y + off, eps, lane);
#else
  __shared__ float scratch[64];
  const i64 row = (i64)blockIdx.x + (i64)blockIdx.y * gridDim.x;
  if (row >= rows) return;
  const i64 off = row * (i64)TR_N;
  /* the held kernels take 16-byte vectors (VH elements); rows that allow them have V == VH */
  constexpr int VH = 16 / sizeof(T), NV = TR_N / VH, PER = (NV + TR_BLOCK - 1) / TR_BLOCK;
  const unsigned zero = (unsigned)((unsigned long long)rows >> 63); /* rows >= 0 */
  if (V == VH && PER >= 1 && PER <= 2 && vec) { /* the wide build (few rows): weight and bias with x */
    norm_row_held<VH, (PER >= 1 && PER <= 2) ? PER : 1, true>(x + off, w, b, y + off, eps, scratch, zero);
  } else if (V == VH && PER <= 4 && vec) {
    norm_row_held<VH, (PER >= 1 && PER <= 4) ? PER : 1, false>(x + off, w, b, y + off, eps, scratch, zero);
  } else if (vec) {
    norm_row_looped<V>(x + off, w, b, y + off, eps, scratch);
  } else {
    norm_row_looped<1>(x + off, w, b, y + off, eps, scratch);
  }
#endif
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK, TR_MINB)
    tr_norm(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, T *__restrict__ y, i64 rows,
            float eps) {
  norm_kernel<true>(x, w, b, y, rows, eps);
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK, TR_MINB)
    tr_norm_any(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, T *__restrict__ y, i64 rows,
                float eps) {
  norm_kernel<false>(x, w, b, y, rows, eps);
}
