// softmax.cu: softmax over TR_N elements along one axis, input TR_T, output TR_OUT, computed in
// float32. Four implementations (TR_IMPL_*):
//   warp:    contiguous rows (inner == 1) of TR_N <= 1024: a warp per row, in registers;
//   block:   contiguous rows: a block per row, the row in registers (about four 16-byte vectors
//            per thread), one merge of per-thread (max, sum) pairs;
//   looped:  contiguous rows of any length: an online max and sum, then a second read;
//   strided: any inner stride (the axis is not the last): a thread per (outer, inner) column.
// Entry: tr_softmax(const T *x, O *y, i64 outer, i64 inner): x is [outer, TR_N, inner].
typedef TR_T T;
typedef TR_OUT O;

#define NEG_INF (-__int_as_float(0x7f800000))

// s * exp(from - to) for to >= from; 0 when s is 0 (also when both are -inf).
__device__ __forceinline__ float rescale(float s, float from, float to) { return s == 0.f ? 0.f : s * expf(from - to); }

// (max, sum) pairs merged over a warp: every lane gets the warp's max and the sum rescaled to it.
__device__ __forceinline__ void warp_merge(float &m, float &s) {
  const float mw = warp_max(m);
  s = warp_sum(rescale(s, m, mw));
  m = mw;
}

// One row held in the registers of THREADS threads (a warp, or the block), tid in 0..THREADS-1:
// each thread takes the max m of its values and e = exp(x - m) once, with their sum; one merge of
// the (max, sum) pairs over the threads (one exchange through shared memory) gives the row's
// (M, S); y = e * exp(m - M) / S. One exp per element and one barrier pair.
template <int THREADS, int V>
__device__ __forceinline__ void softmax_row_regs(const T *x, O *y, int tid, float *scratch) {
  constexpr int NV = TR_N / V;
  constexpr int PER = (NV + THREADS - 1) / THREADS;
  constexpr bool FULL = NV % THREADS == 0; /* every thread's PER vectors exist: no test per load */
  float e[PER][V];
  float m = NEG_INF;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * THREADS;
    if (FULL || i < NV) {
      load_f32<T, V>(x + (i64)i * V, e[p]);
#pragma unroll
      for (int k = 0; k < V; k++) m = fmaxf(m, e[p][k]);
    }
  }
  const float base = m == NEG_INF ? 0.f : m; /* all -inf (or none): every e is 0 */
  float s = 0.f;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    if (FULL || tid + p * THREADS < NV) {
#pragma unroll
      for (int k = 0; k < V; k++) {
        e[p][k] = expf(e[p][k] - base);
        s += e[p][k];
      }
    }
  }
  float M = m, S = s;
  warp_merge(M, S);
  if (THREADS > 32) {
    const int lane = tid & 31, warp = tid >> 5;
    if (lane == 0) {
      scratch[warp] = M;
      scratch[32 + warp] = S;
    }
    __syncthreads();
    M = lane < THREADS / 32 ? scratch[lane] : NEG_INF;
    S = lane < THREADS / 32 ? scratch[32 + lane] : 0.f;
    warp_merge(M, S);
  }
  const float f = s == 0.f ? 0.f : expf(m - M) / S;
#pragma unroll
  for (int p = 0; p < PER; p++) {
    const int i = tid + p * THREADS;
    if (!FULL && i >= NV) continue;
    float o[V];
#pragma unroll
    for (int k = 0; k < V; k++) o[k] = e[p][k] * f;
    if constexpr (V * sizeof(O) == 16) store16_f32<O, V>(y + (i64)i * V, o);
    else store_f32<O, V>(y + (i64)i * V, o);
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

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_softmax(const T *__restrict__ x, O *__restrict__ y, i64 outer,
                                                                  i64 inner) {
  await_previous_kernel();
  __shared__ float scratch[64];
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
