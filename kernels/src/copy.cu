// copy.cu: a strided tensor of TR_ES-byte elements gathered into a contiguous one (scatter = 0),
// or a contiguous one scattered back into a strided one (scatter = 1). Rank up to 8, strides in
// elements, possibly negative or zero. Entry: tr_copy(const void *src, void *dst, i64 n,
// layout_t layout, int scatter).
#if TR_ES == 1
typedef unsigned char E;
#elif TR_ES == 2
typedef unsigned short E;
#elif TR_ES == 4
typedef unsigned int E;
#else
typedef u64 E;
#endif

struct layout_t {
  i64 rank;
  i64 shape[8];
  i64 strides[8];
};

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_copy(const E *src, E *dst, i64 n, layout_t layout,
                                                               int scatter) {
  await_previous_kernel();
  const i64 stride = (i64)gridDim.x * TR_BLOCK;
  for (i64 j = (i64)blockIdx.x * TR_BLOCK + threadIdx.x; j < n; j += stride) {
    i64 rest = j, off = 0;
    for (int d = (int)layout.rank - 1; d >= 0; d--) {
      const i64 coord = rest % layout.shape[d];
      rest /= layout.shape[d];
      off += coord * layout.strides[d];
    }
    if (scatter) dst[off] = src[j];
    else dst[j] = src[off];
  }
}
