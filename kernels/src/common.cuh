// common.cuh: what every in-tree kernel source shares (compiled by NVRTC, no CUDA header):
// 16-bit float storage and conversions, vector access, warp and block reductions, tensor-core
// and asynchronous-copy instructions, cluster helpers.
// The build passes the specialisation as macros: TR_T (the element type: f16, bf16, float,
// double, int, i64), TR_N (the row length), TR_BLOCK (threads per block) and per-kernel ones.
typedef long long i64;
typedef unsigned long long u64;

struct __align__(2) f16 { unsigned short bits; };
struct __align__(2) bf16 { unsigned short bits; };

__device__ __forceinline__ float to_f32(f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ float to_f32(bf16 x) { return __uint_as_float(((unsigned)x.bits) << 16); }
__device__ __forceinline__ float to_f32(float x) { return x; }

template <class T> __device__ __forceinline__ T from_f32(float f);
template <> __device__ __forceinline__ f16 from_f32<f16>(float f) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
  return r;
}
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float f) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
  return r;
}
template <> __device__ __forceinline__ float from_f32<float>(float f) { return f; }

// Programmatic dependent launch (sm_90 and later). A kernel the runtime launches with it may be
// started while the kernel before it on the stream still runs; it waits here, before its first
// access to global memory, until that kernel has completed and its writes are visible, then lets
// the next kernel start launching. So calls back to back overlap only a launch with the end of
// the call before. Launched without it, or before sm_90, both instructions are nothing.
__device__ __forceinline__ void await_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Marks a module whose kernels begin with await_previous_kernel: the runtime launches only
// those overlapped. Every source that includes this file is such a module, so every kernel entry
// added here must begin with await_previous_kernel().
extern "C" __global__ void tr_awaits_previous_kernel() {}

// V elements of T loaded or stored at once (16 bytes when V * sizeof(T) == 16).
template <class T, int V> struct __align__(sizeof(T) * V) vec_t { T v[V]; };

template <class T, int V>
__device__ __forceinline__ void load_f32(const T *p, float (&out)[V]) {
  vec_t<T, V> r = *reinterpret_cast<const vec_t<T, V> *>(p);
#pragma unroll
  for (int i = 0; i < V; i++) out[i] = to_f32(r.v[i]);
}

template <class T, int V>
__device__ __forceinline__ void to_f32(const vec_t<T, V> &r, float (&out)[V]) {
#pragma unroll
  for (int i = 0; i < V; i++) out[i] = to_f32(r.v[i]);
}

template <class T, int V>
__device__ __forceinline__ void store_f32(T *p, const float (&in)[V]) {
  vec_t<T, V> r;
#pragma unroll
  for (int i = 0; i < V; i++) r.v[i] = from_f32<T>(in[i]);
  *reinterpret_cast<vec_t<T, V> *>(p) = r;
}

// Two floats as one 32-bit word of two 16-bit values (round to nearest even), the first in the low
// half; for 32-bit types a word per float.
template <class T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<bf16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ unsigned pack2<f16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// V floats stored as 16 bytes of T (V * sizeof(T) == 16) with one vector store (STREAM:
// st.global.cs), 16-bit types converted two at a time.
template <class T, int V, bool STREAM = false>
__device__ __forceinline__ void store16_f32(T *p, const float (&in)[V]) {
  static_assert(V * sizeof(T) == 16 && (sizeof(T) == 2 || sizeof(T) == 4), "16 bytes of 16- or 32-bit values");
  unsigned u[4];
  if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int j = 0; j < 4; j++) u[j] = pack2<T>(in[2 * j], in[2 * j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; j++) u[j] = __float_as_uint(in[j]);
  }
  if constexpr (STREAM) { /* evict first: written once, not read again by this kernel */
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3])
                 : "memory");
  } else {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3])
                 : "memory");
  }
}
template <class A, class B> struct same_type { static constexpr bool value = false; };
template <class A> struct same_type<A, A> { static constexpr bool value = true; };

// Four 32-bit words (16 bytes of T) as V floats: bf16 by shifts and masks, f16 by conversions,
// float as is.
template <class T, int V>
__device__ __forceinline__ void words_f32(const unsigned (&u)[4], float (&out)[V]) {
  static_assert(V * sizeof(T) == 16, "16 bytes");
  if constexpr (same_type<T, bf16>::value) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      out[2 * j] = __uint_as_float(u[j] << 16);
      out[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
    }
  } else if constexpr (same_type<T, f16>::value) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      unsigned short lo, hi;
      asm("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(u[j]));
      asm("cvt.f32.f16 %0, %1;" : "=f"(out[2 * j]) : "h"(lo));
      asm("cvt.f32.f16 %0, %1;" : "=f"(out[2 * j + 1]) : "h"(hi));
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; j++) out[j] = __uint_as_float(u[j]);
  }
}

#ifdef TR_N
// Elements per 16-byte access when the row length allows it.
template <class T> struct vec_width {
  static constexpr int full = 16 / sizeof(T);
  static constexpr int value = (TR_N % full == 0) ? full : 1;
};
#endif

__device__ __forceinline__ bool aligned16(const void *p) { return (reinterpret_cast<u64>(p) & 15) == 0; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (every thread gets it). `scratch` holds 32 floats; reusable after return.
template <int BLOCK>
__device__ __forceinline__ float block_sum(float v, float *scratch) {
  v = warp_sum(v);
  if (BLOCK <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? scratch[lane] : 0.f;
  return warp_sum(v);
}
// Two sums over the block at once (one exchange through `scratch`, which holds 64 floats).
// FRESH: nothing read `scratch` before in this block (no barrier first); ONLY_B: `a` is not
// wanted (left as the thread's own).
template <int BLOCK, bool FRESH = false, bool ONLY_B = false>
__device__ __forceinline__ void block_sum2(float &a, float &b, float *scratch) {
  if (!ONLY_B) a = warp_sum(a);
  b = warp_sum(b);
  if (BLOCK <= 32) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (!FRESH) __syncthreads();
  if (lane == 0) {
    scratch[warp] = a;
    scratch[32 + warp] = b;
  }
  __syncthreads();
  if (!ONLY_B) a = warp_sum(lane < BLOCK / 32 ? scratch[lane] : 0.f);
  b = warp_sum(lane < BLOCK / 32 ? scratch[32 + lane] : 0.f);
}

template <int BLOCK>
__device__ __forceinline__ float block_max(float v, float *scratch) {
  v = warp_max(v);
  if (BLOCK <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? scratch[lane] : -__int_as_float(0x7f800000);
  return warp_max(v);
}

// Thread-block clusters (sm_90 and later; used only by builds for those): this CTA's rank and
// the cluster's CTA count and index.
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_ctas() {
  unsigned r;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_index() {
  unsigned r;
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
// Every thread of the cluster's CTAs: writes to shared memory before are seen by reads after.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
// An arrival that orders nothing (with a wait later: every CTA of the cluster has started, so its
// shared memory may be written).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
// The shared-memory address `local` (this CTA's) as the same place in CTA `rank`'s shared memory.
__device__ __forceinline__ unsigned cluster_addr(unsigned local, unsigned rank) {
  unsigned remote;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
// The same for `p`, a pointer into this CTA's shared memory.
__device__ __forceinline__ unsigned cluster_ptr(const void *p, unsigned rank) {
  unsigned local;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(local) : "l"(p));
  return cluster_addr(local, rank);
}
// `f` stored at `p` (this CTA's shared memory) in CTA `rank`'s shared memory without waiting, its
// 4 bytes counted on the mbarrier at `bar` (this CTA's shared-memory address) of that CTA.
__device__ __forceinline__ void store_async_cluster(float *p, unsigned bar, unsigned rank, float f) {
  const unsigned at = cluster_ptr(p, rank), counted_on = cluster_addr(bar, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(at),
               "r"(__float_as_uint(f)), "r"(counted_on)
               : "memory");
}
// The float at `p` (this CTA's shared memory) in CTA `rank`'s shared memory.
__device__ __forceinline__ float load_cluster(const float *p, unsigned rank) {
  float f;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(f) : "r"(cluster_ptr(p, rank)) : "memory");
  return f;
}

// Four floats at p (16-byte aligned) in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ float4 load_cluster4(const float *p, unsigned rank) {
  float4 f;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(f.x), "=f"(f.y), "=f"(f.z), "=f"(f.w)
               : "r"(cluster_ptr(p, rank)) : "memory");
  return f;
}

// ---- Tensor cores and asynchronous copies (sm_80 and later) ----

// d += a * b on the tensor cores: mma.sync m16n8k16, a 16x16 tile of A (row-major fragment: four
// 32-bit words of two T each) times a 16x8 tile of B (column fragment: two words), float32
// accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16"). Lane l holds A rows l/4 and
// l/4 + 8, B column l/4, D rows l/4 and l/4 + 8 at columns 2 * (l % 4) and the one after.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<bf16>(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                               unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<f16>(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                              unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The shared-memory address (32 bits) of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void *p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// ldmatrix: four (x4) or two (x2) 8x8 matrices of 16-bit elements from shared memory; lane l
// gives the address of row l % 8 of matrix l / 8 (16 contiguous bytes). TRANS: each matrix
// transposed (a row-major [k][n] tile read as B's column fragment).
template <bool TRANS = false>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
}
template <bool TRANS = false>
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], unsigned addr) {
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  }
}

// cp.async: 16 bytes from global `src` to shared `dst` without a register round trip (cached in
// L2 only); !valid writes 16 zero bytes and reads nothing. Completed in groups: commit closes the
// group of the copies issued since the last, wait<N> returns once at most N groups are pending.
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ---- Hopper's bulk tensor copies (TMA), mbarriers and warpgroup MMA (sm_90 and later) ----

// A TMA tensor map (CUtensorMap, the host's tr_cu_tensor_map), passed to a kernel by value
// (__grid_constant__, so its address is the parameter's own).
struct __align__(64) tensor_map {
  u64 opaque[16];
};

// The map fetched into the copy unit's descriptor cache ahead of its first copy (a generic
// address: a __grid_constant__ parameter's own).
__device__ __forceinline__ void prefetch_tensor_map(const tensor_map *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// mbarriers in shared memory (shared addresses): init with the arrivals a phase counts; an
// arrival that also expects `bytes` of copies (the phase completes when both are in); a wait for
// the phase of parity `parity` to complete (a fresh barrier's phase 0 is incomplete, and a wait
// for parity 1 returns at once).
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_arrive(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  }
}
// An arrival on the mbarrier at `bar`, a shared::cluster address (cluster_addr: another CTA's),
// ordering this thread's earlier accesses before it for the whole cluster.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_remote(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
// As mbar_wait, with the cluster's scope: what other CTAs wrote and counted on it is seen after.
__device__ __forceinline__ void mbar_wait_cluster(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, "
        "p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}
// The barriers' initialisation made visible to the other threads and to the copy unit (then a
// barrier of the threads that use them).
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// The box at (c0, c1, c2) of the map (innermost first) to shared `dst`, counted on `bar`
// (elements outside the tensor arrive as zeros, and count).
__device__ __forceinline__ void tensor_copy(unsigned dst, const tensor_map *map, int c0, int c1, int c2, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// The same with an L2 eviction policy (l2_policy_*).
__device__ __forceinline__ void tensor_copy_hint(unsigned dst, const tensor_map *map, int c0, int c1, int c2,
                                                 unsigned bar, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%2, %3, %4}], [%5], %6;" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(policy)
      : "memory");
}
// The same for a map of rank 2, with an L2 eviction policy (l2_policy_*).
__device__ __forceinline__ void tensor_copy_2d(unsigned dst, const tensor_map *map, int c0, int c1, unsigned bar,
                                               u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
      : "memory");
}
// The same into the shared memory of each CTA of the cluster in `ctas` (a bit a rank), at the
// same offset as `dst`, each CTA's bytes counted on its own mbarrier at `bar`'s offset.
__device__ __forceinline__ void tensor_copy_2d_multicast(unsigned dst, const tensor_map *map, int c0, int c1,
                                                         unsigned bar, unsigned short ctas, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster.L2::"
      "cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(ctas), "l"(policy)
      : "memory");
}
// L2 policies for copies: data read once (evicted first), data many CTAs read (evicted last).
__device__ __forceinline__ u64 l2_policy_stream() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ u64 l2_policy_keep() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// Generic-proxy accesses to shared memory ordered with the async proxy's (tensor copies, wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// wgmma (sm_90a): the shared-memory matrix descriptor of a K-major tile laid out as a tensor copy
// with the 128-byte swizzle writes it: rows of 128 bytes (64 16-bit elements of k), 16-byte chunks
// XORed by the row (mod 8), groups of 8 rows 1024 bytes apart, the tile 1024-byte aligned. Bits
// (PTX ISA, "Matrix Descriptor Format"): 0-13 the start address >> 4; 16-29 the leading byte
// offset >> 4 (unused by swizzled K-major layouts: 1); 32-45 the stride byte offset >> 4 (1024:
// the next 8 rows); 49-51 the base offset (0: the tile is 1024-byte aligned); 62-63 the swizzle
// (1: 128 bytes). The k16 step kk of a row starts kk * 32 bytes in: `addr` may be such an address.
__device__ __forceinline__ u64 wgmma_desc_sw128(unsigned addr) {
  return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
// The element type's name in wgmma's type suffix (TR_T, where defined, is the token bf16 or f16).
#define WG_NAME_bf16 "bf16"
#define WG_NAME_f16 "f16"
#define WG_NAME_OF(t) WG_NAME_OF2(t)
#define WG_NAME_OF2(t) WG_NAME_##t
#define WG_T WG_NAME_OF(TR_T)

// Orders register accesses before the wgmma that follow (their accumulators included).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Closes the group of the wgmma issued since the last; wait<N>: at most N groups still pending.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
