// rope.cu: rotary position embedding, vLLM's layout: y[t, h] is x[t, h] rotated by the angles of
// cos_sin_cache row positions[t] (cos in its first D/2 elements, sin in the last D/2). TR_NEOX 1
// rotates the halves of a head (x[i], x[i + D/2]), 0 interleaved pairs (x[2i], x[2i + 1]). 16-bit
// floats compute in float32. A thread takes one chunk (PAIRS pairs) of one head of a token,
// loading 16 bytes at a time when every pointer is aligned. (Several heads a thread, sharing one
// load of the cache row, measured slower on the H200: 2 heads 54% of copy on the prefill queries,
// 4 heads 56%, 8 heads 43%, against 69% for one.)
//
// A position outside [0, rows) is never read: that token's heads are written as zeros, and the
// smallest such token index goes to *bad (atomicMin; the host sets it to all ones before and
// reads it after, when not capturing; `bad` NULL: not recorded).
// Entry: tr_rope(const TR_P *positions, const T *x, const T *cache, T *y, i64 tokens, i64 heads,
//                i64 rows, u64 *bad). TR_D: the head dim (even).
typedef TR_T T;
typedef TR_P P;

constexpr int D = TR_D;
constexpr int HALF = D / 2;
// pairs a chunk: 16 bytes of each half (neox) or of the head (interleaved), when they divide it
constexpr int VEC = TR_NEOX ? 16 / (int)sizeof(T) : 8 / (int)sizeof(T);
constexpr int PAIRS = (HALF % VEC == 0) ? VEC : 1;
constexpr int CHUNKS = HALF / PAIRS;
constexpr int XN = TR_NEOX ? PAIRS : 2 * PAIRS;  // x elements a thread reads per half (neox) or head

// N elements at p, as they are in memory (16-bit floats stay packed: half the registers).
template <int N> __device__ __forceinline__ vec_t<T, N> load_raw(const T *p, bool vec) {
  vec_t<T, N> r;
  if (vec && N * sizeof(T) >= 4) {
    r = *reinterpret_cast<const vec_t<T, N> *>(p);
  } else {
#pragma unroll
    for (int k = 0; k < N; k++) r.v[k] = p[k];
  }
  return r;
}

template <int N> __device__ __forceinline__ void load_n(const T *p, bool vec, float (&out)[N]) {
  vec_t<T, N> r = load_raw<N>(p, vec);
#pragma unroll
  for (int k = 0; k < N; k++) out[k] = to_f32(r.v[k]);
}

template <int N> __device__ __forceinline__ void store_n(T *p, bool vec, const float (&in)[N]) {
  vec_t<T, N> r;
#pragma unroll
  for (int k = 0; k < N; k++) r.v[k] = from_f32<T>(in[k]);
  if (vec && N * sizeof(T) >= 4) {
    *reinterpret_cast<vec_t<T, N> *>(p) = r;
  } else {
#pragma unroll
    for (int k = 0; k < N; k++) p[k] = r.v[k];
  }
}

// One chunk of one head of one token: its x is loaded first (it does not depend on the
// position), then the position and the cache row's chunk, so the two loads overlap.
template <class I>
__device__ __forceinline__ void rotate(I u, const P *__restrict__ positions, const T *__restrict__ x,
                                       const T *__restrict__ cache, T *__restrict__ y, I heads, i64 rows, u64 *bad,
                                       bool vec) {
  const int chunk = (int)(u % (I)CHUNKS);
  const I th = u / (I)CHUNKS;  // token * heads + head
  const I t = th / heads;
  const i64 base = (i64)th * D;
  const int j = chunk * PAIRS;  // the first pair's frequency index
  const vec_t<T, XN> a = load_raw<XN>(x + base + (TR_NEOX ? j : 2 * j), vec);
  vec_t<T, XN> b;
  if (TR_NEOX) b = load_raw<XN>(x + base + HALF + j, vec);
  const i64 p = (i64)positions[t];
  float c[PAIRS], s[PAIRS];
  if (p >= 0 && p < rows) {
    const T *row = cache + p * D;
    load_n<PAIRS>(row + j, vec, c);
    load_n<PAIRS>(row + HALF + j, vec, s);
  } else {  // never read: this token's heads come out as zeros
    if (bad != nullptr && chunk == 0) atomicMin(bad, (u64)t);
#pragma unroll
    for (int k = 0; k < PAIRS; k++) c[k] = s[k] = 0.f;
  }
  if (TR_NEOX) {
    float o1[XN], o2[XN];
#pragma unroll
    for (int k = 0; k < PAIRS; k++) {
      const float x1 = to_f32(a.v[k]), x2 = to_f32(b.v[k]);
      o1[k] = x1 * c[k] - x2 * s[k];
      o2[k] = x2 * c[k] + x1 * s[k];
    }
    store_n<XN>(y + base + j, vec, o1);
    store_n<XN>(y + base + HALF + j, vec, o2);
  } else {
    float o[XN];
#pragma unroll
    for (int k = 0; k < PAIRS; k++) {
      const float x1 = to_f32(a.v[2 * k]), x2 = to_f32(a.v[2 * k + 1]);
      o[2 * k] = x1 * c[k] - x2 * s[k];
      o[2 * k + 1] = x2 * c[k] + x1 * s[k];
    }
    store_n<XN>(y + base + 2 * j, vec, o);
  }
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_rope(const P *__restrict__ positions, const T *__restrict__ x,
                                                            const T *__restrict__ cache, T *__restrict__ y,
                                                            i64 tokens, i64 heads, i64 rows, u64 *bad) {
  await_previous_kernel();
  const bool vec = aligned16(x) && aligned16(y) && aligned16(cache);
  const i64 units = tokens * heads * CHUNKS;
  if (units <= 0x7fffffffLL) {  // 32-bit index arithmetic: the divisions are a third of 64-bit ones
    const unsigned n = (unsigned)units, stride = gridDim.x * TR_BLOCK;
    for (unsigned u = blockIdx.x * TR_BLOCK + threadIdx.x; u < n; u += stride) {
      rotate<unsigned>(u, positions, x, cache, y, (unsigned)heads, rows, bad, vec);
    }
  } else {
    const i64 stride = (i64)gridDim.x * TR_BLOCK;
    for (i64 u = (i64)blockIdx.x * TR_BLOCK + threadIdx.x; u < units; u += stride) {
      rotate<i64>(u, positions, x, cache, y, heads, rows, bad, vec);
    }
  }
}
