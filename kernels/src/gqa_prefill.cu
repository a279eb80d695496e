// gqa_prefill.cu: causal GQA attention over a prompt, flash-attention-2 style. q and o
// [B, L, heads, DIM], k and v [B, L, heads_kv, DIM]; query head h reads KV head h / group; query
// row i attends to keys 0..i. No L x L matrix exists anywhere: the scores of a tile of queries
// against a tile of 64 keys live in registers, through an online softmax in base 2.
//
// A CTA of 4 warps per (tile of 64 * WM query rows, batch row, query head); a warp owns WM m16
// tiles of rows, 64 rows apart (rows 16 * warp + 64 * i), so the causal triangle's work is even
// across the warps. Each ldmatrix of K or V feeds 2 * WM tensor-core ops (WM = 2: half the
// shared-memory reads of one m16 tile a warp, 0.90-0.92x sdpa at batch 4 against 0.86-0.89x, at
// the cost of some spilled registers at DIM 128; bench_prefill.py, H200, 2026-12-03). Q's
// fragments are read from shared memory (ldmatrix) at each key tile (held in registers instead,
// the kernel was 5-12% slower). The key tiles a query tile reaches (the last one first, then back
// to 0; the tiles past its last row are never touched) pass through shared memory by cp.async,
// K's next tile loading under softmax and P.V, V's under Q.K^T. Shared rows are 16-byte chunks
// XOR-swizzled by row % 8, so ldmatrix of 8 rows at one chunk hits 8 distinct bank groups.
// S = Q.K^T and O += P.V on the tensor cores (mma.m16n8k16, float32 accumulators); P goes from
// S's accumulator fragments to the A fragments of P.V in registers. An m16 tile is masked only
// in the key tiles reaching past its first row. With a positive scale (FOLD) the scores stay
// unscaled until their exponent, exp2(s * scale - max * scale), one FFMA each; the exponent is
// ex2.approx.ftz (weights below 2^-126 of the row's largest flush to zero).
// Grid: x = batch row * heads + head (a KV head's query heads adjacent, so they share its tiles
// in L2), y = query tiles, the last (longest) first. Dynamic shared memory: (64 * WM + 128) rows
// of DIM elements.
// Entries: tr_gqa_prefill (q, k, v and o 16-byte aligned: cp.async and 16-byte stores) and
// tr_gqa_prefill_any (2-byte aligned: loads and stores through registers), both
// (const T *q, const T *k, const T *v, T *o, int L, int heads, int heads_kv, float scale).
typedef TR_T T;

constexpr int DIM = TR_DIM;
constexpr int BLOCK = TR_BLOCK;  // 128: 4 warps
constexpr int WARPS = BLOCK / 32;
constexpr int WM = TR_WM;                // m16 tiles a warp: rows 16 * WARPS * i + 16 * warp, i < WM
constexpr int MSTRIDE = 16 * WARPS;      // rows between a warp's m16 tiles
constexpr int BM = MSTRIDE * WM;         // query rows a CTA
constexpr int BN = 64;                   // keys a tile
constexpr int CHUNKS = DIM / 8;          // 16-byte chunks a row
constexpr int NT = BN / 8;               // n8 tiles of S
constexpr int DT = DIM / 8;              // n8 tiles of O
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
static_assert(WM == 1 || WM == 2, "one or two m16 tiles a warp");
static_assert(BM % BN == 0, "a query tile starts at a key tile's start");
static_assert(sizeof(T) == 2, "16-bit elements");

// Element offset of (row, chunk) in a swizzled [rows][DIM] tile.
__device__ __forceinline__ int swz(int row, int chunk) { return row * DIM + ((chunk ^ (row & 7)) << 3); }

// Copies rows [row0, row0 + ROWS) of a [L][stride] matrix (its row 0 at `g`) into a swizzled tile;
// rows at or past L are zeros (their source address is row 0, never read). ALIGNED: by cp.async
// (`g` 16-byte aligned); otherwise through registers, 16 bits at a time.
template <bool ALIGNED, int ROWS>
__device__ __forceinline__ void load_tile(T *tile, const T *g, i64 stride, int row0, int L) {
#pragma unroll
  for (int it = 0; it < ROWS * CHUNKS / BLOCK; it++) {
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
  // the last key tile a row of this query tile reaches (row m0 + BM - 1, or L - 1)
  const int last = min(m0 + BM, L) - 1;
  const int nt_last = last / BN;

  load_tile<ALIGNED, BM>(sq, qg, q_stride, m0, L);
  load_tile<ALIGNED, BN>(sk, kg, kv_stride, nt_last * BN, L);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // FOLD (scale > 0): scores stay raw until exp2(s * scale - max * scale), one FFMA each
  const float sl = FOLD ? scale_log2 : 1.f;

  float acc[WM][DT][4];
#pragma unroll
  for (int i = 0; i < WM; i++)
#pragma unroll
    for (int j = 0; j < DT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
  float mx[WM][2], sum[WM][2];  // rows lane / 4 and lane / 4 + 8 of each m16 tile
#pragma unroll
  for (int i = 0; i < WM; i++) mx[i][0] = mx[i][1] = NEG_INF, sum[i][0] = sum[i][1] = 0.f;

  for (int nt = nt_last; nt >= 0; nt--) {
    load_tile<ALIGNED, BN>(sv, vg, kv_stride, nt * BN, L);
    cp_async_commit();
    // m16 tile i is `masked` when a key of this tile is past its first row (warp-uniform). A tile
    // of keys all past an m16 tile's rows is computed all the same and masked whole: skipping its
    // tensor-core ops behind a branch made the kernel 10-28% slower (bench_prefill.py, H200).
    bool masked[WM];
#pragma unroll
    for (int i = 0; i < WM; i++) masked[i] = nt * BN + BN - 1 > m0 + MSTRIDE * i + 16 * warp;

    // S = Q.K^T: lane l gives key row (l % 8) + 8 * (l / 16) of the pair of n8 tiles at chunk
    // 2 * step + (l / 8) % 2, so registers 0, 1 are the first tile's B fragment, 2, 3 the second's.
    float s[WM][NT][4];
#pragma unroll
    for (int i = 0; i < WM; i++)
#pragma unroll
      for (int j = 0; j < NT; j++) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.f;
#pragma unroll
    for (int st = 0; st < DIM / 16; st++) {
      // Q's A fragment of this k16 step: lane l gives row l % 16 of the m16 tile at chunk
      // 2 * st + l / 16 (matrices: rows 0-7 | rows 8-15) x (columns 0-7 | 8-15)
      unsigned qf[WM][4];
#pragma unroll
      for (int i = 0; i < WM; i++)
        ldmatrix_x4(qf[i], smem_addr(sq + swz(MSTRIDE * i + warp * 16 + (lane & 15), 2 * st + (lane >> 4))));
#pragma unroll
      for (int np = 0; np < NT / 2; np++) {
        unsigned kf[4];
        ldmatrix_x4(kf, smem_addr(sk + swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), 2 * st + ((lane >> 3) & 1))));
#pragma unroll
        for (int i = 0; i < WM; i++) {
          mma16816<T>(s[i][2 * np], qf[i][0], qf[i][1], qf[i][2], qf[i][3], kf[0], kf[1]);
          mma16816<T>(s[i][2 * np + 1], qf[i][0], qf[i][1], qf[i][2], qf[i][3], kf[2], kf[3]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // V's tile is in; every warp is done with K's
    if (nt > 0) {
      load_tile<ALIGNED, BN>(sk, kg, kv_stride, (nt - 1) * BN, L);
      cp_async_commit();
    }

    // Online softmax in base 2. s[i][j][e]: row lane / 4 + 8 * (e / 2) of m16 tile i, key
    // 8 * j + 2 * (lane % 4) + e % 2. A row with every key masked keeps weights 0.
#pragma unroll
    for (int i = 0; i < WM; i++) {
      const int row0 = MSTRIDE * i + 16 * warp + lane / 4;  // in the query tile
#pragma unroll
      for (int j = 0; j < NT; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float x = FOLD ? s[i][j][e] : s[i][j][e] * scale_log2;
          if (masked[i] && nt * BN + 8 * j + 2 * (lane % 4) + (e & 1) > m0 + row0 + 8 * (e >> 1)) x = NEG_INF;
          s[i][j][e] = x;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; r++) {
        float m = mx[i][r];
#pragma unroll
        for (int j = 0; j < NT; j++) m = fmaxf(m, fmaxf(s[i][j][2 * r], s[i][j][2 * r + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float alpha = m == NEG_INF ? 1.f : ex2((mx[i][r] - m) * sl);  // mx = -inf: 0
        const float base = m == NEG_INF ? 0.f : m * sl;
        float rs = 0.f;
#pragma unroll
        for (int j = 0; j < NT; j++) {
          s[i][j][2 * r] = ex2(fmaf(s[i][j][2 * r], sl, -base));
          s[i][j][2 * r + 1] = ex2(fmaf(s[i][j][2 * r + 1], sl, -base));
          rs += s[i][j][2 * r] + s[i][j][2 * r + 1];
        }
        sum[i][r] = sum[i][r] * alpha + rs;  // this lane's part of the row; the quad's summed at the end
        mx[i][r] = m;
#pragma unroll
        for (int j = 0; j < DT; j++) {
          acc[i][j][2 * r] *= alpha;
          acc[i][j][2 * r + 1] *= alpha;
        }
      }
    }

    // O += P.V. The C fragments of S's n8 tiles 2t and 2t + 1 are the A fragment of k16 step t.
    // V by ldmatrix.trans: lane l gives key row 16 t + l % 16 at chunk 2 * pair + l / 16, so
    // registers 0, 1 are dim tile 2 * pair's B fragment, 2, 3 the next one's.
#pragma unroll
    for (int t = 0; t < BN / 16; t++) {
      unsigned a[WM][4];
#pragma unroll
      for (int i = 0; i < WM; i++) {
        a[i][0] = pack2<T>(s[i][2 * t][0], s[i][2 * t][1]);
        a[i][1] = pack2<T>(s[i][2 * t][2], s[i][2 * t][3]);
        a[i][2] = pack2<T>(s[i][2 * t + 1][0], s[i][2 * t + 1][1]);
        a[i][3] = pack2<T>(s[i][2 * t + 1][2], s[i][2 * t + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < DT / 2; dp++) {
        unsigned vf[4];
        ldmatrix_x4<true>(vf, smem_addr(sv + swz(t * 16 + (lane & 15), 2 * dp + (lane >> 4))));
#pragma unroll
        for (int i = 0; i < WM; i++) {
          mma16816<T>(acc[i][2 * dp], a[i][0], a[i][1], a[i][2], a[i][3], vf[0], vf[1]);
          mma16816<T>(acc[i][2 * dp + 1], a[i][0], a[i][1], a[i][2], a[i][3], vf[2], vf[3]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // K's next tile is in; every warp is done with V's
  }

  // Normalise, stage the warp's rows in its own rows of sq (no other warp reads them), and store
  // them as 16-byte chunks, rows at or past L left out.
#pragma unroll
  for (int i = 0; i < WM; i++) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float l = sum[i][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = MSTRIDE * i + warp * 16 + lane / 4 + 8 * r;
#pragma unroll
      for (int j = 0; j < DT; j++) {
        *reinterpret_cast<unsigned *>(sq + swz(row, j) + 2 * (lane % 4)) =
            pack2<T>(acc[i][j][2 * r] * inv, acc[i][j][2 * r + 1] * inv);
      }
    }
  }
  __syncwarp();
  T *og = o + ((i64)b * L * heads + h) * DIM;
#pragma unroll
  for (int it = 0; it < WM * 16 * CHUNKS / 32; it++) {
    const int i = lane + it * 32;
    const int rw = i / CHUNKS, c = i % CHUNKS;  // the warp's row rw: m16 tile rw / 16
    const int row = MSTRIDE * (rw / 16) + warp * 16 + rw % 16;
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

// Dynamic shared memory: Q [BM][DIM] (then the warps' output rows), K and V [BN][DIM] each; the
// runtime raises the kernel's limit to that (attention_prefill.c, prepare).
template <bool ALIGNED>
__device__ __forceinline__ void entry(const T *q, const T *k, const T *v, T *o, int L, int heads, int heads_kv,
                                      float scale) {
  await_previous_kernel();
  extern __shared__ __align__(128) unsigned char smem[];
  T *sq = reinterpret_cast<T *>(smem);
  T *sk = sq + BM * DIM;
  T *sv = sk + BN * DIM;
  // the same arithmetic either way of loading: aligned and not give the same bits
  if (scale > 0.f) prefill<ALIGNED, true>(q, k, v, o, L, heads, heads_kv, scale, sq, sk, sv);
  else prefill<ALIGNED, false>(q, k, v, o, L, heads, heads_kv, scale, sq, sk, sv);
}

// Two entries, so the rare path's registers never crowd the common one's (spills at two m16 tiles
// a warp when one kernel held both): q, k, v and o 16-byte aligned, and any alignment.
extern "C" __global__ void __launch_bounds__(BLOCK) tr_gqa_prefill(const T *__restrict__ q, const T *__restrict__ k,
                                                                      const T *__restrict__ v, T *__restrict__ o, int L,
                                                                      int heads, int heads_kv, float scale) {
  entry<true>(q, k, v, o, L, heads, heads_kv, scale);
}
extern "C" __global__ void __launch_bounds__(BLOCK) tr_gqa_prefill_any(const T *__restrict__ q, const T *__restrict__ k,
                                                                          const T *__restrict__ v, T *__restrict__ o,
                                                                          int L, int heads, int heads_kv, float scale) {
  entry<false>(q, k, v, o, L, heads, heads_kv, scale);
}
