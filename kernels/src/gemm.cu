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
// Macros: TR_T (f16 or bf16), TR_S (rows of x, 1..64), TR_K (the reduction length, a multiple of
// 8), TR_RT (16-row tiles of w per warp, 1 or 2), TR_U (chunks loaded ahead per warp), TR_XK
// (1: x is K-contiguous, rows xs apart; 0: x[s, k] at x + s * xs + k * xk), TR_BLOCK.
// Entries: tr_gemm_skinny (16-byte aligned pointers and row strides) and tr_gemm_skinny_any
// (any alignment), both (const T *w, const T *x, T *y, i64 L, i64 xs, i64 xk, i64 ys, i64 yl):
// y[s, l] is at y + s * ys + l * yl.
typedef TR_T T;

constexpr int S = TR_S, K = TR_K, RT = TR_RT, U = TR_U, WARPS = TR_BLOCK / 32;
constexpr int NT = (S + 7) / 8, SP = NT * 8, BR = 16 * RT, CHUNKS = (K + 31) / 32;
static_assert(S >= 1 && S <= 64, "x has 1 to 64 rows");
static_assert(K % 8 == 0, "k spans whole 16-byte vectors");

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
  const unsigned rank = cluster_rank(), splits = cluster_ctas();
  cluster_arrive();
  cluster_wait();
  const int share = (QUADS + (int)splits - 1) / (int)splits, e0 = (int)rank * share;
  const int e1 = QUADS < e0 + share ? QUADS : e0 + share;
  for (int e = e0 + threadIdx.x; e < e1; e += TR_BLOCK) {
    const int s = 4 * e / ROWS, row = 4 * e % ROWS;
    float4 part[MAX_SPLIT];
#pragma unroll
    for (unsigned q = 0; q < MAX_SPLIT; q++)
      if (q < splits) part[q] = load_cluster4(&red[s * ROWS + row], q);
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

template <bool ALIGNED>
__device__ __forceinline__ void skinny(const T *w, const T *x, T *y, i64 L, i64 xs, i64 xk, i64 ys, i64 yl) {
  // the warps' partials, [warp][column][row]; then the CTA's sum in red[0]
  __shared__ float red[WARPS][SP * BR];
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

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_gemm_skinny(const T *w, const T *x, T *y, i64 L, i64 xs,
                                                                      i64 xk, i64 ys, i64 yl) {
  skinny<true>(w, x, y, L, xs, xk, ys, yl);
}

extern "C" __global__ void __launch_bounds__(TR_BLOCK) tr_gemm_skinny_any(const T *w, const T *x, T *y, i64 L,
                                                                          i64 xs, i64 xk, i64 ys, i64 yl) {
  skinny<false>(w, x, y, L, xs, xk, ys, yl);
}
