// softmax.cu: softmax over TR_N elements along one axis, input TR_T, output TR_OUT, computed in
// float32. Four implementations (TR_IMPL_*):
//   warp:    contiguous rows (inner == 1) of TR_N <= 1024: a warp per row, in registers;
//   block:   contiguous rows: a block per row, the row in registers (about four 16-byte vectors
//            per thread), one merge of per-thread (max, sum) pairs;
//   looped:  contiguous rows of any length: an online max and sum, then a second read;
//   strided: any inner stride (the axis is not the last): a thread per (outer, inner) column.
// The block and looped implementations are built again with TR_SPLIT for long rows on sm_90 and
// later: a row over the CTAs of a cluster, launched for calls of few rows.
// Entry: tr_softmax(const T *x, O *y, i64 outer, i64 inner): x is [outer, TR_N, inner].
// Edge values as torch.nn.functional.softmax (manifest/spec/softmax.yaml): a row whose max is
// -inf (all -inf) is NaN, a NaN anywhere in a row makes the whole row NaN, and a +inf makes it
// NaN (inf - inf). Each implementation decides this where the row's max is known, once per row,
// outside the loops over elements.
typedef TR_T T;
typedef TR_OUT O;

#define NEG_INF (-__int_as_float(0x7f800000))
#define QNAN __int_as_float(0x7fc00000)

// What a run of values that are all -inf or NaN adds to a row's sum while its max is still -inf:
// NaN when any is NaN (the row is NaN, as torch's), else 0 (exp(-inf - m) for the later max m).
__device__ __forceinline__ float nan_of(float v) { return v == NEG_INF ? 0.f : v; }

// s * exp(from - to) for to >= from; 0 when s is 0 (also when both are -inf).
__device__ __forceinline__ float rescale(float s, float from, float to) { return s == 0.f ? 0.f : s * expf(from - to); }

// (max, sum) pairs merged over a warp: every lane gets the warp's max and the sum rescaled to it.
__device__ __forceinline__ void warp_merge(float &m, float &s) {
  const float mw = warp_max(m);
  s = warp_sum(rescale(s, m, mw));
  m = mw;
}

// (max, sum) pairs merged over THREADS threads (a warp, or the block; tid in 0..THREADS-1): every
// thread gets the merged pair. One exchange through `scratch` (64 floats, not read before).
template <int THREADS>
__device__ __forceinline__ void block_merge(float &m, float &s, int tid, float *scratch) {
  warp_merge(m, s);
  if (THREADS > 32) {
    const int lane = tid & 31, warp = tid >> 5;
    if (lane == 0) {
      scratch[warp] = m;
      scratch[32 + warp] = s;
    }
    __syncthreads();
    m = lane < THREADS / 32 ? scratch[lane] : NEG_INF;
    s = lane < THREADS / 32 ? scratch[32 + lane] : 0.f;
    warp_merge(m, s);
  }
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
  block_merge<THREADS>(M, S, tid, scratch);
  /* a row max of -inf: every element -inf (or NaN), the row NaN as torch's; a thread whose values
   * all gave exp 0 (-inf ones) still takes a NaN row's NaN (a row holding +inf: inf - inf) */
  const float f = M == NEG_INF || S != S ? QNAN : s == 0.f ? 0.f : expf(m - M) / S;
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
    if (m == NEG_INF) {  // all -inf or NaN so far: a NaN is kept (and -inf - -inf would be NaN)
#pragma unroll
      for (int k = 0; k < V; k++) s += nan_of(v[k]);
      continue;
    }
#pragma unroll
    for (int k = 0; k < V; k++) s += expf(v[k] - m);
  }
  const float bm = block_max<TR_BLOCK>(m, scratch);
  s = rescale(s, m, bm);
  const float sum = block_sum<TR_BLOCK>(s, scratch);
  const float inv = bm == NEG_INF ? QNAN : 1.f / sum; /* an all -inf row is NaN, as torch's */
  for (int i = tid; i < NV; i += TR_BLOCK) {
    float v[V];
    load_f32<T, V>(x + (i64)i * V, v);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = expf(v[k] - bm) * inv;
    store_f32<O, V>(y + (i64)i * V, v);
  }
}

#if defined(TR_SPLIT)
// e^d for d <= 0 (d = x - max) as 2^(d log2 e) by the approximate exp2 instruction (2 ulp;
// results below float32's normal range are 0): three instructions against expf's eight, where
// only a few SMs work on a row.
__device__ __forceinline__ float exp_neg(float d) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d * 1.4426950408889634f));
  return r;
}

// A row split over the C CTAs of a thread-block cluster (sm_90 on; C from the launch, at most 8):
// CTA r takes the r-th of C equal runs of the row's vectors. Each thread keeps an online (max,
// sum) over its vectors, U loads in flight at once; the block merges them, then every CTA reads
// the C merged pairs from the cluster's shared memory and merges them alike (the same result in
// every CTA), and writes its run with a second read (from L2). Exponentials by exp_neg. For few
// long rows (a logits row of 128256): one block per row would leave all but a few SMs idle.
template <int V>
__device__ __forceinline__ void softmax_row_split(const T *x, O *y, float *scratch, float *part) {
  constexpr int NV = TR_N / V, U = 8;
  const int tid = threadIdx.x;
  const unsigned rank = cluster_rank(), ctas = cluster_ctas();
  const int run = (int)((NV + ctas - 1) / ctas), lo = (int)rank * run, hi = NV - lo < run ? NV : lo + run;
  float m = NEG_INF, s = 0.f;
  for (int i0 = lo + tid; i0 < hi; i0 += U * TR_BLOCK) {
    float v[U][V];
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (i0 + u * TR_BLOCK < hi) load_f32<T, V>(x + (i64)(i0 + u * TR_BLOCK) * V, v[u]);
    }
    float lm = NEG_INF;
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (i0 + u * TR_BLOCK < hi) {
#pragma unroll
        for (int k = 0; k < V; k++) lm = fmaxf(lm, v[u][k]);
      }
    }
    if (lm > m) {
      s = rescale(s, m, lm);
      m = lm;
    }
    if (m == NEG_INF) { /* all -inf or NaN so far: a NaN is kept (and -inf - -inf would be NaN) */
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (i0 + u * TR_BLOCK < hi) {
#pragma unroll
          for (int k = 0; k < V; k++) s += nan_of(v[u][k]);
        }
      }
      continue;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (i0 + u * TR_BLOCK < hi) {
#pragma unroll
        for (int k = 0; k < V; k++) s += exp_neg(v[u][k] - m);
      }
    }
  }
  block_merge<TR_BLOCK>(m, s, tid, scratch);
  if (tid == 0) {
    part[0] = m;
    part[1] = s;
  }
  cluster_arrive();
  cluster_wait();
  /* lane r reads CTA r's pair (all at once); a warp merge gives every lane of every CTA the same
   * (M, S): each merge step adds two values that both partners add alike */
  const unsigned lane = tid & 31;
  float M = lane < ctas ? load_cluster(&part[0], lane) : NEG_INF;
  float S = lane < ctas ? load_cluster(&part[1], lane) : 0.f;
  warp_merge(M, S);
  cluster_arrive(); /* done with the other CTAs' parts: they may exit after their last wait */
  const float inv = M == NEG_INF ? QNAN : 1.f / S; /* an all -inf row is NaN, as torch's */
  for (int i0 = lo + tid; i0 < hi; i0 += U * TR_BLOCK) {
    float v[U][V];
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (i0 + u * TR_BLOCK < hi) load_f32<T, V>(x + (i64)(i0 + u * TR_BLOCK) * V, v[u]);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (i0 + u * TR_BLOCK < hi) {
#pragma unroll
        for (int k = 0; k < V; k++) v[u][k] = exp_neg(v[u][k] - M) * inv;
        if constexpr (V * sizeof(O) == 16) store16_f32<O, V>(y + (i64)(i0 + u * TR_BLOCK) * V, v[u]);
        else store_f32<O, V>(y + (i64)(i0 + u * TR_BLOCK) * V, v[u]);
      }
    }
  }
  cluster_wait(); /* this CTA's part stays until every CTA has read it */
}
#endif

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_softmax(const T *__restrict__ x, O *__restrict__ y, i64 outer,
                                                                  i64 inner) {
  await_previous_kernel();
  __shared__ float scratch[64];
  // a vector must fit both types' 16-byte accesses
  constexpr int VT = vec_width<T>::value, VO = vec_width<O>::value;
  constexpr int V = VT < VO ? VT : VO;
  const bool vec = V > 1 && aligned16(x) && aligned16(y);
#if defined(TR_IMPL_STRIDED) && !defined(TR_SPLIT)
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
  const float inv = m == NEG_INF ? QNAN : 1.f / s; /* an all -inf column is NaN, as torch's */
  for (int k = 0; k < TR_N; k++) yr[(i64)k * inner] = from_f32<O>(expf(to_f32(xr[(i64)k * inner]) - m) * inv);
#elif defined(TR_IMPL_WARP) && !defined(TR_SPLIT)
  const i64 row = (i64)blockIdx.x * (TR_BLOCK / 32) + (threadIdx.x >> 5);
  if (row >= outer) return;
  const int lane = threadIdx.x & 31;
  if (vec) softmax_row_regs<32, V>(x + row * TR_N, y + row * TR_N, lane, scratch);
  else softmax_row_regs<32, 1>(x + row * TR_N, y + row * TR_N, lane, scratch);
#elif defined(TR_SPLIT)
  (void)outer;
  (void)inner;
  __shared__ float part[2];
  const i64 row = cluster_index(); /* the grid is outer clusters exactly: no CTA returns early */
  if (vec) softmax_row_split<V>(x + row * TR_N, y + row * TR_N, scratch, part);
  else softmax_row_split<1>(x + row * TR_N, y + row * TR_N, scratch, part);
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
