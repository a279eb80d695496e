// add.cu: c = a + alpha * b over n contiguous elements of TR_T, b repeating every `period`
// elements (period == n: b as long as a; less: b broadcast over a's leading axes, as a bias is,
// read in place rather than copied out to a's size). 16-bit floats and float32 compute in
// float32, float64 in float64, integers in int64 (alpha integral), as torch.add does. 16-byte
// accesses when every pointer is aligned (and the period a whole number of vectors); a
// grid-stride loop.
// Entry: tr_add(const T *a, const T *b, T *c, i64 n, double alpha, i64 period).
typedef TR_T T;

template <class U> struct math { typedef float type; };
template <> struct math<double> { typedef double type; };
template <> struct math<int> { typedef i64 type; };
template <> struct math<i64> { typedef i64 type; };

template <class U> __device__ __forceinline__ typename math<U>::type up(U v) { return (typename math<U>::type)v; }
__device__ __forceinline__ float up(f16 v) { return to_f32(v); }
__device__ __forceinline__ float up(bf16 v) { return to_f32(v); }
template <class U> __device__ __forceinline__ U down(typename math<U>::type v) { return (U)v; }
template <> __device__ __forceinline__ f16 down<f16>(float v) { return from_f32<f16>(v); }
template <> __device__ __forceinline__ bf16 down<bf16>(float v) { return from_f32<bf16>(v); }

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_add(const T *a, const T *b, T *c, i64 n, double alpha,
                                                           i64 period) {
  await_previous_kernel();
  typedef typename math<T>::type M;
  const M al = (M)alpha;
  constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
  const i64 stride = (i64)gridDim.x * TR_BLOCK;
  i64 start = 0;
  const bool repeats = period != n;
  if (aligned16(a) && aligned16(b) && aligned16(c) && (!repeats || period % V == 0)) {
    const i64 nv = n / V, pv = period / V;
    for (i64 i = (i64)blockIdx.x * TR_BLOCK + threadIdx.x; i < nv; i += stride) {
      vec_t<T, V> va = reinterpret_cast<const vec_t<T, V> *>(a)[i];
      vec_t<T, V> vb = reinterpret_cast<const vec_t<T, V> *>(b)[repeats ? i % pv : i];
      vec_t<T, V> vc;
#pragma unroll
      for (int k = 0; k < V; k++) vc.v[k] = down<T>(up(va.v[k]) + al * up(vb.v[k]));
      reinterpret_cast<vec_t<T, V> *>(c)[i] = vc;
    }
    start = nv * V;
  }
  for (i64 i = start + (i64)blockIdx.x * TR_BLOCK + threadIdx.x; i < n; i += stride) {
    c[i] = down<T>(up(a[i]) + al * up(b[repeats ? i % period : i]));
  }
}
