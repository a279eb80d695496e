// norm.cu: RMSNorm (TR_RMS=1) and LayerNorm (TR_RMS=0) over rows of TR_N elements, one of three
// implementations chosen by the build (TR_IMPL_WARP, TR_IMPL_BLOCK, TR_IMPL_LOOPED):
//   warp:   a warp per row, the row in registers (TR_N <= 1024), TR_BLOCK / 32 rows per block;
//   block:  a block per row, the row in registers (TR_N / TR_BLOCK <= 32 elements per thread);
//   looped: a block per row for any TR_N, reading the row again per pass.
// Statistics in float32; TR_HAS_W / TR_HAS_B say whether weight and bias are given.
// Entry: tr_norm(const T *x, const T *w, const T *b, T *y, i64 rows, float eps).
typedef TR_T T;

template <int THREADS>
__device__ __forceinline__ float group_sum(float v, float *scratch) {
  if (THREADS == 32) return warp_sum(v);
  return block_sum<THREADS>(v, scratch);
}

// One row held in registers, THREADS threads cooperating (tid in 0..THREADS-1).
template <int THREADS, int V>
__device__ __forceinline__ void norm_row_regs(const T *x, const T *w, const T *b, T *y, float eps, int tid,
                                              float *scratch) {
  constexpr int NV = TR_N / V;
  constexpr int PER = (NV + THREADS - 1) / THREADS;
  float v[PER][V];
  float s = 0.f;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * THREADS;
    if (i < NV) {
      load_f32<T, V>(x + (i64)i * V, v[p]);
#pragma unroll
      for (int k = 0; k < V; k++) s += TR_RMS ? v[p][k] * v[p][k] : v[p][k];
    } else {
#pragma unroll
      for (int k = 0; k < V; k++) v[p][k] = 0.f;
    }
  }
  s = group_sum<THREADS>(s, scratch);
  float mean = 0.f, rstd;
  if (TR_RMS) {
    rstd = rsqrtf(s / (float)TR_N + eps);
  } else {
    mean = s / (float)TR_N;
    float d = 0.f;
#pragma unroll
    for (int p = 0; p < PER; p++) {
      if (tid + p * THREADS < NV) {
#pragma unroll
        for (int k = 0; k < V; k++) d += (v[p][k] - mean) * (v[p][k] - mean);
      }
    }
    d = group_sum<THREADS>(d, scratch);
    rstd = rsqrtf(d / (float)TR_N + eps);
  }
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * THREADS;
    if (i >= NV) continue;
    float o[V], wv[V], bv[V];
    if (TR_HAS_W) load_f32<T, V>(w + (i64)i * V, wv);
    if (TR_HAS_B) load_f32<T, V>(b + (i64)i * V, bv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float r = (v[p][k] - mean) * rstd;
      if (TR_HAS_W) r *= wv[k];
      if (TR_HAS_B) r += bv[k];
      o[k] = r;
    }
    store_f32<T, V>(y + (i64)i * V, o);
  }
}

// One row of any length, re-read per pass (a block per row).
template <int V>
__device__ __forceinline__ void norm_row_looped(const T *x, const T *w, const T *b, T *y, float eps,
                                                float *scratch) {
  constexpr int NV = TR_N / V;
  const int tid = threadIdx.x;
  float s = 0.f;
  for (int i = tid; i < NV; i += TR_BLOCK) {
    float v[V];
    load_f32<T, V>(x + (i64)i * V, v);
#pragma unroll
    for (int k = 0; k < V; k++) s += TR_RMS ? v[k] * v[k] : v[k];
  }
  s = block_sum<TR_BLOCK>(s, scratch);
  float mean = 0.f, rstd;
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
  for (int i = tid; i < NV; i += TR_BLOCK) {
    float v[V], wv[V], bv[V];
    load_f32<T, V>(x + (i64)i * V, v);
    if (TR_HAS_W) load_f32<T, V>(w + (i64)i * V, wv);
    if (TR_HAS_B) load_f32<T, V>(b + (i64)i * V, bv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float r = (v[k] - mean) * rstd;
      if (TR_HAS_W) r *= wv[k];
      if (TR_HAS_B) r += bv[k];
      v[k] = r;
    }
    store_f32<T, V>(y + (i64)i * V, v);
  }
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_norm(const T *x, const T *w, const T *b, T *y, i64 rows,
                                                               float eps) {
  __shared__ float scratch[32];
  constexpr int V = vec_width<T>::value;
  const bool vec = V > 1 && aligned16(x) && aligned16(y) && (!TR_HAS_W || aligned16(w)) && (!TR_HAS_B || aligned16(b));
#if defined(TR_IMPL_WARP)
  const i64 row = (i64)blockIdx.x * (TR_BLOCK / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const i64 off = row * (i64)TR_N;
  if (vec) norm_row_regs<32, V>(x + off, w, b, y + off, eps, lane, scratch);
  else norm_row_regs<32, 1>(x + off, w, b, y + off, eps, lane, scratch);
#else
  const i64 row = (i64)blockIdx.x + (i64)blockIdx.y * gridDim.x;
  if (row >= rows) return;
  const i64 off = row * (i64)TR_N;
#if defined(TR_IMPL_BLOCK)
  if (vec) norm_row_regs<TR_BLOCK, V>(x + off, w, b, y + off, eps, threadIdx.x, scratch);
  else norm_row_regs<TR_BLOCK, 1>(x + off, w, b, y + off, eps, threadIdx.x, scratch);
#else
  if (vec) norm_row_looped<V>(x + off, w, b, y + off, eps, scratch);
  else norm_row_looped<1>(x + off, w, b, y + off, eps, scratch);
#endif
#endif
}
