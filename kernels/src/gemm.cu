// gemm.cu: the skinny GEMM for decode: y[s, l] = sum_k x[s, k] * w[l, k] for at most 64 rows of x
// (the activations) and many rows of w (the weight, K-contiguous), in float32 accumulation.
// The weight streams once from memory straight into tensor-core fragments (mma.sync m16n8k16),
// with no shared-memory round trip: each lane loads 16 contiguous bytes of a row, and the same
// permutation of k within a 32-wide chunk is applied to x, so the dot products are unchanged.
// A CTA of TR_BLOCK / 32 warps takes 16 * TR_RT rows of w; its warps take every WARPS-th chunk
// of k (two batches of TR_U chunks in flight each) and sum their partials in shared memory in a fixed order. The split build (-DTR_SPLIT,
// sm_90 on) also splits k over the CTAs of a thread-block cluster (the split count is the launch's
// cluster size, chosen at run time) and sums the CTAs' partials through distributed shared
// memory, in rank order, four partials a load with every rank's loads in flight at once: the
// result does not depend on timing (deterministic), and no workspace or second kernel is needed.
//
// The wgmma build (the split build with -DTR_WGMMA, compiled for sm_90a: x K-contiguous) computes
// the transposed product y^T = w . x^T on Hopper's warpgroup MMA instead: a CTA takes TR_WG_ROWS (64 or 128) rows of
// w and its cluster rank's share of the 64-wide k tiles; a producer warp copies each k tile of w
// (TR_WG_ROWS rows) and of x (S rows, zero-padded to N = SP, the wgmma's N) with the TMA unit into a ring
// of TR_STAGES stages (full/empty mbarriers, 128-byte swizzle), and one consumer warpgroup runs
// wgmma m64nNk16 with both operands read from shared memory by descriptor (w as A, x as B, both
// K-major), float32 accumulators in registers. So x is read once a 64- or 128-row tile (the mma.sync
// kernel reads it once a warp's 16 or 32 rows), and the copies need no registers. Rows of w past
// L, k past K and rows of x past S arrive as zeros (the maps' bounds); the partials are summed
// over the cluster as above. Swapped (-DTR_WG_SWAP, x of more than 32 rows on a large weight), x
// is the wgmma's A (64 rows, zero-padded past S) and w its B (N = the CTA's rows of w, any multiple
// of 8 up to 256, in n64 parts and a narrower one), so the tile count can match the SM count.
// Its module's tr_gemm_skinny_any is the mma.sync split kernel (any
// alignment, and the fallback where the maps cannot be made). For other architectures the same
// options build the mma.sync split kernel.
//
// Macros: TR_T (f16 or bf16), TR_S (rows of x, 1..64), TR_K (the reduction length, a multiple of
// 8), TR_RT (16-row tiles of w per warp, 1 or 2), TR_U (chunks loaded ahead per warp), TR_XK
// (1: x is K-contiguous, rows xs apart; 0: x[s, k] at x + s * xs + k * xk), TR_WGMMA and
// TR_STAGES (the wgmma build and its ring's stages; TR_BLOCK is then 160), TR_BLOCK.
// Entries: tr_gemm_skinny (16-byte aligned pointers and row strides) and tr_gemm_skinny_any
// (any alignment), both (const T *w, const T *x, T *y, i64 L, i64 xs, i64 xk, i64 ys, i64 yl):
// y[s, l] is at y + s * ys + l * yl. The wgmma build's tr_gemm_skinny takes two tensor maps
// more (see its entry below).
typedef TR_T T;

constexpr int S = TR_S, K = TR_K, RT = TR_RT, U = TR_U, WARPS = TR_BLOCK / 32;
constexpr int NT = (S + 7) / 8, SP = NT * 8, BR = 16 * RT, CHUNKS = (K + 31) / 32;
static_assert(S >= 1 && S <= 64, "x has 1 to 64 rows");
static_assert(K % 8 == 0, "k spans whole 16-byte vectors");
#if defined(TR_SPLIT) && defined(TR_WGMMA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the wgmma build is compiled for sm_90a"
#endif
#define TR_WG 1
#else
#define TR_WG 0
#endif
#ifndef TR_WG_MCAST
#define TR_WG_MCAST 0
#endif
#ifndef TR_WG_MCAST_SYNC
#define TR_WG_MCAST_SYNC 0
#endif
// TR_WG_MCAST (the swapped wgmma build only): a cluster's two CTAs take neighbouring tiles of w,
// not shares of k, and each copies half of x's tile into both (a TMA multicast): x is read from
// L2 once for two tiles.
constexpr bool MCAST = TR_WG && TR_WG_MCAST != 0;

// Eight elements of T at p as four 32-bit words; zeros where !valid. STREAM: the weight, read
// once (no L1 allocation; the L2 fetches the whole 256-byte segment, which the CTA's other warps
// read next); otherwise x, read by every CTA of the same k range (kept in L1).
template <bool ALIGNED, bool STREAM>
__device__ __forceinline__ void load8(const T *p, bool valid, unsigned (&u)[4]) {
  if (!valid) {
    u[0] = u[1] = u[2] = u[3] = 0u;
    return;
  }
  if constexpr (ALIGNED) {
    if constexpr (STREAM) {
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3])
                   : "l"(p));
    } else {
      asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p));
    }
  } else {
    const unsigned short *h = reinterpret_cast<const unsigned short *>(p);
#pragma unroll
    for (int i = 0; i < 4; i++) u[i] = (unsigned)h[2 * i] | ((unsigned)h[2 * i + 1] << 16);
  }
}

// Eight elements of x's row at k..k+7 (x K-strided: one at a time).
template <bool ALIGNED>
__device__ __forceinline__ void load_x(const T *row, i64 k, i64 xk, bool valid, unsigned (&u)[4]) {
#if TR_XK
  (void)xk;
  load8<ALIGNED, false>(row + k, valid, u);
#else
  if (!valid) {
    u[0] = u[1] = u[2] = u[3] = 0u;
    return;
  }
  const unsigned short *h = reinterpret_cast<const unsigned short *>(row);
#pragma unroll
  for (int i = 0; i < 4; i++) u[i] = (unsigned)h[(k + 2 * i) * xk] | ((unsigned)h[(k + 2 * i + 1) * xk] << 16);
#endif
}

// The weight's U chunks from chunk c on (every WARPS-th), for this lane's rows.
template <bool ALIGNED>
__device__ __forceinline__ void load_batch(unsigned (&wa)[U][RT][2][4], const T *const (&wr)[RT][2],
                                           const bool (&wv)[RT][2], int c, int c1, int t) {
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int cc = c + u * WARPS;
    const i64 k = (i64)cc * 32 + 8 * t;
    const bool ok = cc < c1 && k < K;
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
      for (int h = 0; h < 2; h++) load8<ALIGNED, true>(wr[r][h] + k, ok && wv[r][h], wa[u][r][h]);
  }
}

// Multiplies the batch loaded from chunk c on into acc, loading x's matching fragments.
template <bool ALIGNED>
__device__ __forceinline__ void mma_batch(float (&acc)[RT][NT][4], const unsigned (&wa)[U][RT][2][4],
                                          const T *const (&xr)[NT], const bool (&xv)[NT], i64 xk, int c, int c1,
                                          int t) {
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int cc = c + u * WARPS;
    const i64 k = (i64)cc * 32 + 8 * t;
    const bool ok = cc < c1 && k < K;
    unsigned xb[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) load_x<ALIGNED>(xr[j], k, xk, ok && xv[j], xb[j]);
#pragma unroll
    for (int step = 0; step < 2; step++)
#pragma unroll
      for (int r = 0; r < RT; r++)
#pragma unroll
        for (int j = 0; j < NT; j++)
          mma16816<T>(acc[r][j], wa[u][r][0][2 * step], wa[u][r][1][2 * step], wa[u][r][0][2 * step + 1],
              wa[u][r][1][2 * step + 1], xb[j][2 * step], xb[j][2 * step + 1]);
  }
}

// The CTA's partials red[s * ROWS + row] (ROWS rows of w from lc, SP columns of x; every
// thread's written, not yet synchronised) to y. The split build sums the cluster's CTAs' partials
// in rank order (deterministic), each CTA a share of them, four at a time with every rank's
// load in flight at once (a chain of remote loads a sum costs microseconds).
template <int ROWS>
__device__ __forceinline__ void store_partials(float *red, T *y, i64 lc, i64 L, i64 ys, i64 yl) {
  static_assert(ROWS % 4 == 0, "partials are read four at a time");
  constexpr int QUADS = SP * ROWS / 4;
#if defined(TR_SPLIT)
  constexpr unsigned MAX_SPLIT = 8; /* the portable cluster size */
  // the CTAs whose partials are summed: ranks first.. of the cluster (MCAST: this one alone)
  const unsigned rank = MCAST ? 0u : cluster_rank(), splits = MCAST ? 1u : cluster_ctas();
  const unsigned first = MCAST ? cluster_rank() : 0u;
  cluster_arrive();
  cluster_wait();
  const int share = (QUADS + (int)splits - 1) / (int)splits, e0 = (int)rank * share;
  const int e1 = QUADS < e0 + share ? QUADS : e0 + share;
  for (int e = e0 + threadIdx.x; e < e1; e += TR_BLOCK) {
    const int s = 4 * e / ROWS, row = 4 * e % ROWS;
    float4 part[MAX_SPLIT];
#pragma unroll
    for (unsigned q = 0; q < MAX_SPLIT; q++)
      if (q < splits) part[q] = load_cluster4(&red[s * ROWS + row], first + q);
    float4 v = part[0];
#pragma unroll
    for (unsigned q = 1; q < MAX_SPLIT; q++) {
      if (q < splits) {
        v.x += part[q].x;
        v.y += part[q].y;
        v.z += part[q].z;
        v.w += part[q].w;
      }
    }
#else
  __syncthreads();
  for (int e = threadIdx.x; e < QUADS; e += TR_BLOCK) {
    const int s = 4 * e / ROWS, row = 4 * e % ROWS;
    const float4 v = *reinterpret_cast<const float4 *>(&red[s * ROWS + row]);
#endif
    const float vs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const i64 l = lc + row + i;
      if (s < S && l < L) y[(i64)s * ys + l * yl] = from_f32<T>(vs[i]);
    }
  }
#if defined(TR_SPLIT)
  cluster_arrive(); /* no CTA leaves while another still reads its shared memory */
  cluster_wait();
#endif
}

// The warps' partials, [warp][column][row]; then the CTA's sum in red[0] (the entry's).
typedef float Partials[WARPS][SP * BR];

template <bool ALIGNED>
__device__ __forceinline__ void skinny(const T *w, const T *x, T *y, i64 L, i64 xs, i64 xk, i64 ys, i64 yl,
                                       Partials &red) {
  await_previous_kernel();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
#if defined(TR_SPLIT)
  const unsigned rank = cluster_rank(), splits = cluster_ctas();
  const i64 tile = (i64)cluster_index();
#else
  const unsigned rank = 0, splits = 1;
  const i64 tile = (i64)blockIdx.x;
#endif
  const i64 l0 = tile * BR;
  const int per = (int)((CHUNKS + splits - 1) / splits);
  const int c0 = (int)rank * per, c1 = CHUNKS < c0 + per ? CHUNKS : c0 + per;

  const T *wr[RT][2];
  bool wv[RT][2];
#pragma unroll
  for (int r = 0; r < RT; r++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const i64 l = l0 + 16 * r + g + 8 * h;
      wv[r][h] = l < L;
      wr[r][h] = w + (wv[r][h] ? l : 0) * (i64)K;
    }
  }
  const T *xr[NT];
  bool xv[NT];
#pragma unroll
  for (int j = 0; j < NT; j++) {
    const int s = 8 * j + g;
    xv[j] = s < S;
    xr[j] = x + (xv[j] ? s : 0) * xs;
  }

  float acc[RT][NT][4];
#pragma unroll
  for (int r = 0; r < RT; r++)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[r][j][q] = 0.f;

  // Two batches of U chunks in flight a warp: the next batch's loads are issued before this
  // batch is multiplied, so the weight streams while the tensor cores work.
  unsigned wa[U][RT][2][4], wb[U][RT][2][4];
  constexpr int STEP = WARPS * U;
  int c = c0 + warp;
  load_batch<ALIGNED>(wa, wr, wv, c, c1, t);
  for (;;) {
    if (c >= c1) break;
    const int cb = c + STEP;
    load_batch<ALIGNED>(wb, wr, wv, cb, c1, t);
    mma_batch<ALIGNED>(acc, wa, xr, xv, xk, c, c1, t);
    if (cb >= c1) break;
    c = cb + STEP;
    load_batch<ALIGNED>(wa, wr, wv, c, c1, t);
    mma_batch<ALIGNED>(acc, wb, xr, xv, xk, cb, c1, t);
  }

  // acc[r][j]: rows 16r + g (+8), columns 8j + 2t (+1)
#pragma unroll
  for (int r = 0; r < RT; r++)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const int row = 16 * r + g + (q >= 2 ? 8 : 0), col = 8 * j + 2 * t + (q & 1);
        red[warp][col * BR + row] = acc[r][j][q];
      }
  __syncthreads();
  for (int e = threadIdx.x; e < SP * BR; e += TR_BLOCK) {
    float v = red[0][e];
#pragma unroll
    for (int q = 1; q < WARPS; q++) v += red[q][e];
    red[0][e] = v;
  }
  store_partials<BR>(red[0], y, l0, L, ys, yl);
}

#if TR_WG
// ---- the wgmma build ----

// d (a 64 x N tile of float32 accumulators, N / 2 a thread) += A (64 x 16, the descriptor a) times
// B (16 x N, the descriptor b), both K-major in shared memory: wgmma.mma_async m64nNk16 (scale-d
// 1: accumulate; A and B unscaled and not transposed). Warp q of the warpgroup holds rows 16q..;
// its lane l, register i: row 16q + l / 4 + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (l % 4) +
// i % 2 (PTX ISA, "Register Fragments: wgmma .m64nNk16", accumulator D).
#define WG_ASM(N, REGS, IA, IB, IS)                                                                        \
  "{ .reg .pred p; setp.ne.b32 p, %" IS ", 0; wgmma.mma_async.sync.aligned.m64n" N "k16.f32." WG_T "." WG_T \
  " {" REGS "}, %" IA ", %" IB ", p, 1, 1, 0, 0; }"
#define F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
template <int N> __device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], u64 a, u64 b);
template <> __device__ __forceinline__ void wgmma_m64k16<8>(float (&d)[4], u64 a, u64 b) {
  asm volatile(WG_ASM("8", "%0, %1, %2, %3", "4", "5", "6") : F4(0) : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_m64k16<16>(float (&d)[8], u64 a, u64 b) {
  asm volatile(WG_ASM("16", "%0, %1, %2, %3, %4, %5, %6, %7", "8", "9", "10") : F4(0), F4(4) : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_m64k16<24>(float (&d)[12], u64 a, u64 b) {
  asm volatile(WG_ASM("24", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11", "12", "13", "14") : F4(0), F4(4), F4(8) : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_m64k16<32>(float (&d)[16], u64 a, u64 b) {
  asm volatile(WG_ASM("32", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15", "16", "17", "18") : F4(0), F4(4), F4(8), F4(12) : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_m64k16<40>(float (&d)[20], u64 a, u64 b) {
  asm volatile(WG_ASM("40", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19", "20", "21", "22") : F4(0), F4(4), F4(8), F4(12), F4(16) : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_m64k16<48>(float (&d)[24], u64 a, u64 b) {
  asm volatile(WG_ASM("48", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23", "24", "25", "26") : F4(0), F4(4), F4(8), F4(12), F4(16), F4(20) : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_m64k16<56>(float (&d)[28], u64 a, u64 b) {
  asm volatile(WG_ASM("56", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27", "28", "29", "30") : F4(0), F4(4), F4(8), F4(12), F4(16), F4(20), F4(24) : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_m64k16<64>(float (&d)[32], u64 a, u64 b) {
  asm volatile(WG_ASM("64", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31", "32", "33", "34") : F4(0), F4(4), F4(8), F4(12), F4(16), F4(20), F4(24), F4(28) : "l"(a), "l"(b), "r"(1));
}
#undef F4
#undef WG_ASM

#ifndef TR_WG_ROWS
#define TR_WG_ROWS 128
#endif
#ifndef TR_WG_SWAP
#define TR_WG_SWAP 0
#endif
// TR_WG_SWAP: x is the wgmma's A (its 64 rows, zero-padded past S: M = 64) and w its B, N = the
// CTA's rows of w, any multiple of 8 up to 256 (in n64 parts and one narrower), so that a tile
// count near the SM count needs no split of k (x of more than 32 rows, where x's 64-row A costs
// little more than its real rows). Else w is A (64 or 128 rows: one m64 wgmma each 64) and x B.
constexpr bool WG_SWAP = TR_WG_SWAP != 0;
constexpr int WG_ROWS = TR_WG_ROWS;                // rows of w a CTA
constexpr int WG_H = WG_SWAP ? 1 : WG_ROWS / 64;
static_assert(WG_SWAP ? (WG_ROWS % 8 == 0 && WG_ROWS >= 8 && WG_ROWS <= 256) : (WG_ROWS == 64 || WG_ROWS == 128),
              "a CTA takes 64 or 128 rows of w (swapped: a multiple of 8 up to 256)");
constexpr int WG_N = WG_SWAP ? 64 : SP;            // x's rows in a tile: rounded up to 8 (swapped: 64)
constexpr int WG_NF = WG_ROWS / 64, WG_NR = WG_ROWS % 64;  // swapped: n64 parts of w's rows, and the rest
constexpr int WG_KT = (K + 63) / 64;               // k tiles of 64 (a 128-byte row each)
constexpr int WG_STAGES = TR_STAGES;
constexpr int W_TILE = WG_ROWS * 128, X_TILE = WG_N * 128;  // bytes
constexpr int STAGE_BYTES = W_TILE + X_TILE;                // a multiple of 1024: every tile aligned
constexpr int RING_BYTES = WG_STAGES * STAGE_BYTES;
constexpr int CONSUMERS = 128;  // the warpgroup; the fifth warp produces
static_assert(TR_BLOCK == CONSUMERS + 32, "a consumer warpgroup and a producer warp");
static_assert(WG_STAGES >= 2, "a ring of at least two stages");
static_assert(WG_ROWS * SP * 4 <= RING_BYTES, "the partials fit in the ring");

// y[s, l0 + row] for the CTA's WG_ROWS rows of w, its share of k: the producer warp's lane 0 copies
// k tile after k tile of w (WG_ROWS rows x 64 k) and of x (WG_N rows x 64 k) into the ring's stages
// (rows and k past the tensors arrive as zeros), each stage's bytes counted on its full mbarrier;
// the warpgroup waits for a stage, issues its 8 wgmmas (4 k16 steps x 2 halves of the rows) and
// hands the stage before back on its empty mbarrier once those products are done (one group in
// flight while the next stage is waited for). Then the accumulators go to the ring's memory as
// partials [column][row] and store_partials sums the cluster's in rank order.
// (A template on SW, WG_SWAP, so that the build's other branch is not instantiated.)
template <bool SW>
__device__ __forceinline__ void skinny_wgmma(T *y, i64 L, i64 ys, i64 yl, const tensor_map *wm, const tensor_map *xm,
                                             char *smem) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  static_assert(!MCAST || SW, "x is multicast in the swapped build only");
  // MCAST: the cluster's CTAs take tiles side by side, each the whole of k
  const unsigned rank = MCAST ? 0u : cluster_rank(), splits = MCAST ? 1u : cluster_ctas();
  const i64 l0 = (i64)(MCAST ? blockIdx.x : cluster_index()) * WG_ROWS;
  const int per = (WG_KT + (int)splits - 1) / (int)splits, t0 = (int)rank * per;
  const int n = WG_KT - t0 < per ? (WG_KT - t0 > 0 ? WG_KT - t0 : 0) : per;  // this CTA's k tiles
  // the ring 1024-byte aligned (the swizzle's period; the host gives 1 KiB more): the same offset
  // in every CTA of the cluster, as store_partials reads the others' partials at its own
  const unsigned base = smem_addr(smem), ring = (base + 1023u) & ~1023u;
  const unsigned full = ring + RING_BYTES, empty = full + 8 * WG_STAGES;
  float *const red = reinterpret_cast<float *>(smem + (ring - base));
  if (threadIdx.x == 0) {
    for (int s = 0; s < WG_STAGES; s++) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, (MCAST ? 2 : 1) * CONSUMERS / 32);  // a consumer warp's lane 0 each (of both CTAs)
    }
    mbar_init_fence();
  }
  __syncthreads();
  if constexpr (MCAST) {  // the other CTA's barriers are ready before this one's copies count on them
    cluster_arrive();
    cluster_wait();
  }

  // swapped: acc[j] the n64 part j of w's rows (WG_NF of them), rest the last WG_NR rows
  constexpr int AH = SW ? (WG_NF > 0 ? WG_NF : 1) : WG_H, AN = SW ? 64 : WG_N, AR = SW && WG_NR > 0 ? WG_NR : 2;
  float acc[AH][AN / 2];
  float rest[AR / 2];
#pragma unroll
  for (int h = 0; h < AH; h++)
#pragma unroll
    for (int i = 0; i < AN / 2; i++) acc[h][i] = 0.f;
#pragma unroll
  for (int i = 0; i < AR / 2; i++) rest[i] = 0.f;

  if (warp == CONSUMERS / 32) {  // the producer
    if (lane == 0) {
      const u64 stream = l2_policy_stream(), keep = l2_policy_keep();
      // MCAST: a tile past w (the grid's CTA count made even) copies no w, only its half of x
      const bool has_w = !MCAST || l0 < L;
      const unsigned me = MCAST ? cluster_rank() : 0u;
      for (int it = 0; it < n; it++) {
        const int s = it % WG_STAGES;
        if (it >= WG_STAGES) {  // MCAST: both CTAs' consumers are done with the stage
          if constexpr (MCAST && TR_WG_MCAST_SYNC == 0) mbar_wait_cluster(empty + 8 * s, ((it / WG_STAGES) & 1) ^ 1);
          else mbar_wait(empty + 8 * s, ((it / WG_STAGES) & 1) ^ 1);
        }
        mbar_expect_arrive(full + 8 * s, has_w ? STAGE_BYTES : X_TILE);
        const unsigned st = ring + s * STAGE_BYTES;
        const int k0 = (t0 + it) * 64;
        if (has_w) tensor_copy_2d(st, wm, k0, (int)l0, full + 8 * s, stream);
        if constexpr (MCAST) {  // x's rows 32 me.. into both CTAs, counted on both's barrier
          tensor_copy_2d_multicast(st + W_TILE + me * (X_TILE / 2), xm, k0, (int)me * (WG_N / 2), full + 8 * s, 0x3,
                                   keep);
        } else {
          tensor_copy_2d(st + W_TILE, xm, k0, 0, full + 8 * s, keep);
        }
      }
    }
    __syncwarp();
  } else {
    for (int it = 0; it < n; it++) {
      const int s = it % WG_STAGES;
      mbar_wait(full + 8 * s, (it / WG_STAGES) & 1);
      const unsigned st = ring + s * STAGE_BYTES;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {
        if constexpr (SW) {
          const u64 a = wgmma_desc_sw128(st + W_TILE + 32 * kk);
#pragma unroll
          for (int j = 0; j < WG_NF; j++) wgmma_m64k16<64>(acc[j], a, wgmma_desc_sw128(st + j * 64 * 128 + 32 * kk));
          if constexpr (SW && WG_NR > 0) wgmma_m64k16<AR>(rest, a, wgmma_desc_sw128(st + WG_NF * 64 * 128 + 32 * kk));
        } else {
          const u64 b = wgmma_desc_sw128(st + W_TILE + 32 * kk);
#pragma unroll
          for (int h = 0; h < WG_H; h++) wgmma_m64k16<WG_N>(acc[h], wgmma_desc_sw128(st + h * 64 * 128 + 32 * kk), b);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();  // the stage before is read: back to the producer
      if (it > 0) {
        __syncwarp();
        const unsigned e = empty + 8 * ((it - 1) % WG_STAGES);
        if (lane == 0) {
          if constexpr (MCAST && TR_WG_MCAST_SYNC == 1) {
            mbar_arrive(e);
            mbar_arrive_remote(cluster_addr(e, cluster_rank() ^ 1u));
          } else if constexpr (MCAST) {  // both CTAs' producers write the stage
            mbar_arrive_cluster(cluster_addr(e, 0));
            mbar_arrive_cluster(cluster_addr(e, 1));
          } else {
            mbar_arrive(e);
          }
        }
      }
    }
    wgmma_wait<0>();
  }
  fence_proxy_async();  // the products' reads of the ring before the partials' writes there
  __syncthreads();
  if constexpr (SW) {  // D[s][l]: x's row s (those past SP are padding), w's row l
    const int s0 = 16 * warp + lane / 4;
#pragma unroll
    for (int j = 0; j < WG_NF; j++)
#pragma unroll
      for (int i = 0; i < 32; i++) {
        const int sr = s0 + 8 * ((i / 2) % 2), l = 64 * j + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        if (sr < SP && warp < CONSUMERS / 32) red[sr * WG_ROWS + l] = acc[j][i];
      }
#pragma unroll
    for (int i = 0; i < (WG_NR > 0 ? AR / 2 : 0); i++) {
      const int sr = s0 + 8 * ((i / 2) % 2), l = 64 * WG_NF + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
      if (sr < SP && warp < CONSUMERS / 32) red[sr * WG_ROWS + l] = rest[i];
    }
  } else if (warp < CONSUMERS / 32) {  // D[l][s]: w's row l, x's row s
#pragma unroll
    for (int h = 0; h < WG_H; h++)
#pragma unroll
      for (int i = 0; i < WG_N / 2; i++) {
        const int row = 64 * h + 16 * warp + lane / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        red[col * WG_ROWS + row] = acc[h][i];
      }
  }
  store_partials<WG_ROWS>(red, y, l0, L, ys, yl);
}

// The wgmma build's entries: tr_gemm_skinny (w and x 16-byte aligned, their maps wm: [L][K], box
// 64 k x WG_ROWS rows; xm: [S][K], box 64 k x WG_N rows; both swizzled by 128 bytes; launched in
// clusters of the split count, with RING_BYTES + 1024 + 16 * WG_STAGES bytes of dynamic shared
// memory) and tr_gemm_skinny_any (the mma.sync split kernel, any alignment).
extern "C" __global__ void __launch_bounds__(TR_BLOCK)
    tr_gemm_skinny(const T *w, const T *x, T *y, i64 L, i64 xs, i64 xk, i64 ys, i64 yl,
                   const __grid_constant__ tensor_map wm, const __grid_constant__ tensor_map xm) {
  (void)w;
  (void)x;
  (void)xs;
  (void)xk;
  if (threadIdx.x == CONSUMERS) {  // the producer's lane 0: its maps fetched while the kernel before runs
    prefetch_tensor_map(&wm);
    prefetch_tensor_map(&xm);
  }
  await_previous_kernel();
  extern __shared__ __align__(1024) char smem[];
  skinny_wgmma<WG_SWAP>(y, L, ys, yl, &wm, &xm, smem);
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_gemm_skinny_any(const T *w, const T *x, T *y, i64 L,
                                                                          i64 xs, i64 xk, i64 ys, i64 yl) {
  __shared__ Partials red;
  if (aligned16(w) && aligned16(x)) {
    skinny<true>(w, x, y, L, xs, xk, ys, yl, red);
  } else {
    skinny<false>(w, x, y, L, xs, xk, ys, yl, red);
  }
}
#else
extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_gemm_skinny(const T *w, const T *x, T *y, i64 L, i64 xs,
                                                                      i64 xk, i64 ys, i64 yl) {
  __shared__ Partials red;
  skinny<true>(w, x, y, L, xs, xk, ys, yl, red);
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_gemm_skinny_any(const T *w, const T *x, T *y, i64 L,
                                                                          i64 xs, i64 xk, i64 ys, i64 yl) {
  __shared__ Partials red;
  skinny<false>(w, x, y, L, xs, xk, ys, yl, red);
}
#endif
