// softmax.cu: softmax over TR_N elements along one axis, input TR_T, output TR_OUT, computed in
// float32. Four implementations (TR_IMPL_*):
//   warp:    contiguous rows (inner == 1) of TR_N <= 1024: a warp per row, in registers;
//   block:   contiguous rows: a block per row, the row in registers;
//   looped:  contiguous rows of any length: an online max and sum, then a second read;
//   strided: any inner stride (the axis is not the last): a thread per (outer, inner) column.
// Entry: tr_softmax(const T *x, O *y, i64 outer, i64 inner): x is [outer, TR_N, inner].
typedef TR_T T;
typedef TR_OUT O;

#define NEG_INF (-__int_as_float(0x7f800000))

template <int THREADS>
__device__ __forceinline__ float group_sum(float v, float *scratch) {
  if (THREADS == 32) return warp_sum(v);
  return block_sum<THREADS>(v, scratch);
}
template <int THREADS>
__device__ __forceinline__ float group_max(float v, float *scratch) {
  if (THREADS == 32) return warp_max(v);
  return block_max<THREADS>(v, scratch);
}

template <int THREADS, int V>
__device__ __forceinline__ void softmax_row_regs(const T *x, O *y, int tid, float *scratch) {
  constexpr int NV = TR_N / V;
  constexpr int PER = (NV + THREADS - 1) / THREADS;
  float v[PER][V];
  float m = NEG_INF;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * THREADS;
    if (i < NV) {
      load_f32<T, V>(x + (i64)i * V, v[p]);
#pragma unroll
      for (int k = 0; k < V; k++) m = fmaxf(m, v[p][k]);
    }
  }
  m = group_max<THREADS>(m, scratch);
  float s = 0.f;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    if (tid + p * THREADS < NV) {
#pragma unroll
      for (int k = 0; k < V; k++) {
        v[p][k] = expf(v[p][k] - m);
        s += v[p][k];
      }
    }
  }
  const float inv = 1.f / group_sum<THREADS>(s, scratch);
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * THREADS;
    if (i >= NV) continue;
    float o[V];
#pragma unroll
    for (int k = 0; k < V; k++) o[k] = v[p][k] * inv;
    store_f32<O, V>(y + (i64)i * V, o);
  }
}

// Online max and sum per thread, merged across the block; then one more read to write.
template <int V>
__device__ __forceinline__ void softmax_row_looped(const T *x, O *y, float *scratch) {
  constexpr int NV = TR_N / V;
  const int tid = threadIdx.x;
  float m = NEG_INF, s = 0.f;
  for (int i = tid; i < NV; i += TR_BLOCK) {
    float v[V];
    load_f32<T, V>(x + (i64)i * V, v);
    float lm = v[0];
#pragma unroll
    for (int k = 1; k < V; k++) lm = fmaxf(lm, v[k]);
    if (lm > m) {
      s *= expf(m - lm);
      m = lm;
    }
    if (m == NEG_INF) continue;  // all -inf so far: nothing to add (and -inf - -inf is NaN)
#pragma unroll
    for (int k = 0; k < V; k++) s += expf(v[k] - m);
  }
  const float bm = block_max<TR_BLOCK>(m, scratch);
  s = m == NEG_INF ? 0.f : s * expf(m - bm);
  const float inv = 1.f / block_sum<TR_BLOCK>(s, scratch);
  for (int i = tid; i < NV; i += TR_BLOCK) {
    float v[V];
    load_f32<T, V>(x + (i64)i * V, v);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = expf(v[k] - bm) * inv;
    store_f32<O, V>(y + (i64)i * V, v);
  }
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_softmax(const T *x, O *y, i64 outer, i64 inner) {
  __shared__ float scratch[32];
  // a vector must fit both types' 16-byte accesses
  constexpr int VT = vec_width<T>::value, VO = vec_width<O>::value;
  constexpr int V = VT < VO ? VT : VO;
  const bool vec = V > 1 && aligned16(x) && aligned16(y);
#if defined(TR_IMPL_STRIDED)
  (void)scratch;
  (void)vec;
  const i64 col = (i64)blockIdx.x * TR_BLOCK + threadIdx.x;
  if (col >= outer * inner) return;
  const i64 o = col / inner, in = col % inner;
  const T *xr = x + o * (i64)TR_N * inner + in;
  O *yr = y + o * (i64)TR_N * inner + in;
  float m = NEG_INF;
  for (int k = 0; k < TR_N; k++) m = fmaxf(m, to_f32(xr[(i64)k * inner]));
  float s = 0.f;
  for (int k = 0; k < TR_N; k++) s += expf(to_f32(xr[(i64)k * inner]) - m);
  const float inv = 1.f / s;
  for (int k = 0; k < TR_N; k++) yr[(i64)k * inner] = from_f32<O>(expf(to_f32(xr[(i64)k * inner]) - m) * inv);
#elif defined(TR_IMPL_WARP)
  const i64 row = (i64)blockIdx.x * (TR_BLOCK / 32) + (threadIdx.x >> 5);
  if (row >= outer) return;
  const int lane = threadIdx.x & 31;
  if (vec) softmax_row_regs<32, V>(x + row * TR_N, y + row * TR_N, lane, scratch);
  else softmax_row_regs<32, 1>(x + row * TR_N, y + row * TR_N, lane, scratch);
#else
  const i64 row = (i64)blockIdx.x + (i64)blockIdx.y * gridDim.x;
  if (row >= outer) return;
#if defined(TR_IMPL_BLOCK)
  if (vec) softmax_row_regs<TR_BLOCK, V>(x + row * TR_N, y + row * TR_N, threadIdx.x, scratch);
  else softmax_row_regs<TR_BLOCK, 1>(x + row * TR_N, y + row * TR_N, threadIdx.x, scratch);
#else
  if (vec) softmax_row_looped<V>(x + row * TR_N, y + row * TR_N, scratch);
  else softmax_row_looped<1>(x + row * TR_N, y + row * TR_N, scratch);
#endif
#endif
}
