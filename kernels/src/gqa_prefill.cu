// gqa_prefill.cu: causal GQA attention over a prompt, flash-attention-2 style. q and o
// [B, L, heads, DIM], k and v [B, L, heads_kv, DIM]; query head h reads KV head h / group; query
// row i attends to keys 0..i. No L x L matrix exists anywhere: the scores of a tile of 64 queries
// against a tile of 64 keys live in registers, through an online softmax in base 2.
//
// tr_gqa_prefill: a CTA of 4 warps per (tile of 64 query rows, batch row, query head); a warp owns
// 16 query rows, its Q fragments read from shared memory (ldmatrix) at each key tile (held in
// registers instead, the kernel was 5-12% slower on the H200: bench_prefill.py, 2026-12-02). The
// key tiles of the causal triangle (diagonal first, then back to 0; the tiles above the diagonal
// are never touched) pass through shared memory by cp.async, K's next tile loading under softmax and P.V,
// V's under Q.K^T. Shared rows are 16-byte chunks XOR-swizzled by row % 8, so ldmatrix of 8 rows
// at one chunk hits 8 distinct bank groups. S = Q.K^T and O += P.V on the tensor cores
// (mma.m16n8k16, float32 accumulators); P goes from S's accumulator fragments to the A
// fragments of P.V in registers. Only the diagonal tile is masked. With a positive scale (FOLD)
// the scores stay unscaled until their exponent, exp2(s * scale - max * scale), one FFMA each;
// the exponent is ex2.approx.ftz (weights below 2^-126 of the row's largest flush to zero).
// Grid: x = batch row * heads + head (a KV head's query heads adjacent, so they share its tiles
// in L2), y = query tiles, the last (longest) first.
// Entry: tr_gqa_prefill(const T *q, const T *k, const T *v, T *o, int L, int heads, int heads_kv,
//                       float scale)
// Pointers 16-byte aligned take cp.async and 16-byte stores; others (2-byte aligned) go through
// registers.
typedef TR_T T;

constexpr int DIM = TR_DIM;
constexpr int BLOCK = TR_BLOCK;  // 128: 4 warps
constexpr int WARPS = BLOCK / 32;
constexpr int BM = 16 * WARPS;   // query rows a CTA
constexpr int BN = 64;           // keys a tile
constexpr int CHUNKS = DIM / 8;  // 16-byte chunks a row
constexpr int NT = BN / 8;       // n8 tiles of S
constexpr int DT = DIM / 8;      // n8 tiles of O
constexpr float LOG2E = 1.4426950408889634f;
#define NEG_INF (-__int_as_float(0x7f800000))

// 2^x on the special-function unit, subnormal results flushed to zero (a weight below 2^-126 of
// the row's largest adds nothing a 16-bit output can hold): one instruction, where exp2f adds the
// subnormal range's scaling around it.
__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
static_assert(DIM == 64 || DIM == 128, "head dims 64 and 128");
static_assert(BM == BN, "the diagonal tile is the one key tile with the query tile's index");
static_assert(sizeof(T) == 2, "16-bit elements");

// Element offset of (row, chunk) in a swizzled [rows][DIM] tile.
__device__ __forceinline__ int swz(int row, int chunk) { return row * DIM + ((chunk ^ (row & 7)) << 3); }

// Copies rows [row0, row0 + 64) of a [L][stride] matrix (its row 0 at `g`) into a swizzled tile;
// rows at or past L are zeros (their source address is row 0, never read). ALIGNED: by cp.async
// (`g` 16-byte aligned); otherwise through registers, 16 bits at a time.
template <bool ALIGNED>
__device__ __forceinline__ void load_tile(T *tile, const T *g, i64 stride, int row0, int L) {
#pragma unroll
  for (int it = 0; it < BN * CHUNKS / BLOCK; it++) {
    const int i = threadIdx.x + it * BLOCK;
    const int r = i / CHUNKS, c = i % CHUNKS;
    const bool valid = row0 + r < L;
    const T *src = g + (valid ? (i64)(row0 + r) * stride : 0) + c * 8;
    if constexpr (ALIGNED) {
      cp_async16(smem_addr(tile + swz(r, c)), src, valid);
    } else {
      const unsigned short *h = reinterpret_cast<const unsigned short *>(src);
      unsigned *d = reinterpret_cast<unsigned *>(tile + swz(r, c));
#pragma unroll
      for (int j = 0; j < 4; j++) d[j] = valid ? (unsigned)h[2 * j] | ((unsigned)h[2 * j + 1] << 16) : 0u;
    }
  }
}

// The kernel's work. ALIGNED: q, k, v and o 16-byte aligned (cp.async loads, 16-byte stores);
// otherwise loads and stores through registers, 16 bits at a time (a view starting mid-vector).
template <bool ALIGNED, bool FOLD>
__device__ __forceinline__ void prefill(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                        T *__restrict__ o, int L, int heads, int heads_kv, float scale, T *sq, T *sk,
                                        T *sv) {

  const int mt = gridDim.y - 1 - blockIdx.y;  // query tile: the longest first
  const int bh = blockIdx.x;
  const int h = bh % heads, b = bh / heads;
  const int g = h / (heads / heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 q_stride = (i64)heads * DIM, kv_stride = (i64)heads_kv * DIM;
  const T *qg = q + ((i64)b * L * heads + h) * DIM;
  const T *kg = k + ((i64)b * L * heads_kv + g) * DIM;
  const T *vg = v + ((i64)b * L * heads_kv + g) * DIM;
  const int m0 = mt * BM;
  const float scale_log2 = scale * LOG2E;

  load_tile<ALIGNED>(sq, qg, q_stride, m0, L);
  load_tile<ALIGNED>(sk, kg, kv_stride, mt * BN, L);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // FOLD (scale > 0): scores stay raw until exp2(s * scale - max * scale), one FFMA each
  const float sl = FOLD ? scale_log2 : 1.f;

  float acc[DT][4];
#pragma unroll
  for (int j = 0; j < DT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  float mx[2] = {NEG_INF, NEG_INF}, sum[2] = {0.f, 0.f};  // rows lane / 4 and lane / 4 + 8

  for (int nt = mt; nt >= 0; nt--) {
    load_tile<ALIGNED>(sv, vg, kv_stride, nt * BN, L);
    cp_async_commit();

    // S = Q.K^T: lane l gives key row (l % 8) + 8 * (l / 16) of the pair of n8 tiles at chunk
    // 2 * step + (l / 8) % 2, so registers 0, 1 are the first tile's B fragment, 2, 3 the second's.
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int st = 0; st < DIM / 16; st++) {
      // Q's A fragment of this k16 step: lane l gives row l % 16 of the warp's 16 at chunk
      // 2 * st + l / 16 (matrices: rows 0-7 | rows 8-15) x (columns 0-7 | 8-15)
      unsigned qf[4];
      ldmatrix_x4(qf, smem_addr(sq + swz(warp * 16 + (lane & 15), 2 * st + (lane >> 4))));
#pragma unroll
      for (int np = 0; np < NT / 2; np++) {
        unsigned kf[4];
        ldmatrix_x4(kf, smem_addr(sk + swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), 2 * st + ((lane >> 3) & 1))));
        mma16816<T>(s[2 * np], qf[0], qf[1], qf[2], qf[3], kf[0], kf[1]);
        mma16816<T>(s[2 * np + 1], qf[0], qf[1], qf[2], qf[3], kf[2], kf[3]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // V's tile is in; every warp is done with K's
    if (nt > 0) {
      load_tile<ALIGNED>(sk, kg, kv_stride, (nt - 1) * BN, L);
      cp_async_commit();
    }

    // Online softmax in base 2. s[j][e]: row lane / 4 + 8 * (e / 2), key 8 * j + 2 * (lane % 4) + e % 2.
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float x = FOLD ? s[j][e] : s[j][e] * scale_log2;
        if (nt == mt && 8 * j + 2 * (lane % 4) + (e & 1) > warp * 16 + lane / 4 + 8 * (e >> 1)) x = NEG_INF;
        s[j][e] = x;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float m = mx[r];
#pragma unroll
      for (int j = 0; j < NT; j++) m = fmaxf(m, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const float alpha = m == NEG_INF ? 1.f : ex2((mx[r] - m) * sl);  // mx[r] = -inf: 0
      const float base = m == NEG_INF ? 0.f : m * sl;
      float rs = 0.f;
#pragma unroll
      for (int j = 0; j < NT; j++) {
        s[j][2 * r] = ex2(fmaf(s[j][2 * r], sl, -base));
        s[j][2 * r + 1] = ex2(fmaf(s[j][2 * r + 1], sl, -base));
        rs += s[j][2 * r] + s[j][2 * r + 1];
      }
      sum[r] = sum[r] * alpha + rs;  // this lane's part of the row; the quad's summed at the end
      mx[r] = m;
#pragma unroll
      for (int j = 0; j < DT; j++) {
        acc[j][2 * r] *= alpha;
        acc[j][2 * r + 1] *= alpha;
      }
    }

    // O += P.V. The C fragments of S's n8 tiles 2t and 2t + 1 are the A fragment of k16 step t.
    // V by ldmatrix.trans: lane l gives key row 16 t + l % 16 at chunk 2 * pair + l / 16, so
    // registers 0, 1 are dim tile 2 * pair's B fragment, 2, 3 the next one's.
#pragma unroll
    for (int t = 0; t < BN / 16; t++) {
      const unsigned a0 = pack2<T>(s[2 * t][0], s[2 * t][1]), a1 = pack2<T>(s[2 * t][2], s[2 * t][3]);
      const unsigned a2 = pack2<T>(s[2 * t + 1][0], s[2 * t + 1][1]), a3 = pack2<T>(s[2 * t + 1][2], s[2 * t + 1][3]);
#pragma unroll
      for (int dp = 0; dp < DT / 2; dp++) {
        unsigned vf[4];
        ldmatrix_x4<true>(vf, smem_addr(sv + swz(t * 16 + (lane & 15), 2 * dp + (lane >> 4))));
        mma16816<T>(acc[2 * dp], a0, a1, a2, a3, vf[0], vf[1]);
        mma16816<T>(acc[2 * dp + 1], a0, a1, a2, a3, vf[2], vf[3]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // K's next tile is in; every warp is done with V's
  }

  // Normalise, stage the warp's 16 rows in its own rows of sq (no other warp reads them), and
  // store them as 16-byte chunks, rows at or past L left out.
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float l = sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = warp * 16 + lane / 4 + 8 * r;
#pragma unroll
    for (int j = 0; j < DT; j++) {
      *reinterpret_cast<unsigned *>(sq + swz(row, j) + 2 * (lane % 4)) =
          pack2<T>(acc[j][2 * r] * inv, acc[j][2 * r + 1] * inv);
    }
  }
  __syncwarp();
  T *og = o + ((i64)b * L * heads + h) * DIM;
#pragma unroll
  for (int it = 0; it < 16 * CHUNKS / 32; it++) {
    const int i = lane + it * 32;
    const int row = warp * 16 + i / CHUNKS, c = i % CHUNKS;
    if (m0 + row < L) {
      const uint4 w = *reinterpret_cast<const uint4 *>(sq + swz(row, c));
      T *dst = og + (i64)(m0 + row) * q_stride + c * 8;
      if constexpr (ALIGNED) {
        *reinterpret_cast<uint4 *>(dst) = w;
      } else {
        unsigned short *d = reinterpret_cast<unsigned short *>(dst);
        const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
          d[2 * j] = (unsigned short)(u[j] & 0xffffu);
          d[2 * j + 1] = (unsigned short)(u[j] >> 16);
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(BLOCK) tr_gqa_prefill(const T *__restrict__ q, const T *__restrict__ k,
                                                                      const T *__restrict__ v, T *__restrict__ o, int L,
                                                                      int heads, int heads_kv, float scale) {
  await_previous_kernel();
  __shared__ __align__(128) T sq[BM * DIM];  // Q, then the warps' output rows
  __shared__ __align__(128) T sk[BN * DIM];
  __shared__ __align__(128) T sv[BN * DIM];
  const bool aligned = aligned16(q) && aligned16(k) && aligned16(v) && aligned16(o);
  if (scale > 0.f) {  // the same arithmetic either way of loading: aligned and not give the same bits
    if (aligned) prefill<true, true>(q, k, v, o, L, heads, heads_kv, scale, sq, sk, sv);
    else prefill<false, true>(q, k, v, o, L, heads, heads_kv, scale, sq, sk, sv);
  } else {
    if (aligned) prefill<true, false>(q, k, v, o, L, heads, heads_kv, scale, sq, sk, sv);
    else prefill<false, false>(q, k, v, o, L, heads, heads_kv, scale, sq, sk, sv);
  }
}
