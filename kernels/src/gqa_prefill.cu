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
// With -DTR_WGMMA (sm_90a) tr_gqa_prefill is the warpgroup kernel described at its build below
// (two warpgroups, 256 threads; macros TR_WG_OWN, TR_WG_CTAS); tr_gqa_prefill_any stays this one.
typedef TR_T T;
#ifndef TR_WGMMA
#define TR_WGMMA 0
#endif

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

#if TR_WGMMA
// ---- the wgmma build (-DTR_WGMMA, sm_90a: the implementation gqa_prefill_wgmma) ----
//
// tr_gqa_prefill becomes Hopper's warpgroup kernel: a CTA of two warpgroups (256 threads) per
// (tile of 128 query rows, batch row, query head), warpgroup w owning rows 64w.. of the tile. The
// tensor cores take whole warpgroup products (wgmma, asynchronous): S = Q.K^T as m64n64k16 with
// both operands read from shared memory by descriptor, then O += P.V as m64nDIMk16 with P's A
// fragments in registers (S's float32 accumulators converted in place: the accumulator layout of
// two n8 tiles is the A layout of one k16 step) and V read N-major (transposed by the unit, no
// ldmatrix). Tiles sit in shared memory as the 128-byte swizzle lays them (rows of 64 dims, 128
// bytes, 16-byte chunks XORed by the row mod 8; boxes of 64 dims one after the other), written by
// cp.async: K and V double-buffered, the next tile of each loading under the current one's
// products and softmax. With TR_WG_OWN (the default) each warpgroup has its own K and V buffers,
// loads them itself and waits on its own named barrier, so the two run apart and one's softmax
// hides under the other's products (otherwise the CTA's 256 threads load shared tiles between
// __syncthreads). The key tiles run from the last (the diagonal's, masked) down to 0, as the
// other build; with TR_WG_OWN a warpgroup's tiles start at its own diagonal. tr_gqa_prefill_any
// (unaligned tensors) is the other build's. Dynamic shared memory: Q's two tiles of 64 rows, K's
// and V's two each (with TR_WG_OWN: each warpgroup's), 1 KiB to align them (attention_prefill.c's
// wgmma_smem). TR_WG_CTAS: the CTAs an SM the registers are bounded for (1).
constexpr int WG_THREADS = 256;  // two warpgroups
constexpr int WG_BM = 128;       // query rows a CTA
constexpr int BOXES = DIM / 64;  // 64-dim boxes a row
constexpr int BOX = 64 * 128;    // bytes of a box of 64 rows
constexpr int TILE = BOXES * BOX;  // a 64-row tile of Q, K or V
static_assert(WG_BM == 2 * BN, "a warpgroup's rows are one key tile");

// S (64 x 64 float32, 32 a thread) = or += Q (descriptor a) . K^T (descriptor b), both K-major:
// wgmma m64n64k16, `acc` 0 for the first k16 step (S = Q.K^T), 1 after.
__device__ __forceinline__ void wg_ss_n64(float (&d)[32], u64 a, u64 b, int acc) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0; wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0; }"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(a), "l"(b), "r"(acc));
}
// O (64 x 64 float32, 32 a thread) += P (A fragments in registers, 16 keys) . V (descriptor b,
// N-major: the tile's rows are keys, dims contiguous): wgmma m64n64k16 with B transposed.
__device__ __forceinline__ void wg_rs_n64(float (&d)[32], const unsigned (&a)[4], u64 b) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %37, 0; wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1; }"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
// O (64 x 128 float32, 64 a thread) += P (A fragments in registers, 16 keys) . V (descriptor b,
// N-major: the tile's rows are keys, dims contiguous): wgmma m64n128k16 with B transposed.
__device__ __forceinline__ void wg_rs_n128(float (&d)[64], const unsigned (&a)[4], u64 b) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_T "." WG_T
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1; }"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// The descriptor of a tile read N-major (V as P.V's B: rows are keys, 64 dims a 128-byte row):
// 8 key rows 1024 bytes apart (stride byte offset), the next 64 dims one box on (leading byte
// offset), 128-byte swizzle; the k16 step t starts 16 rows (2048 bytes) in.
__device__ __forceinline__ u64 wgmma_desc_sw128_n(unsigned addr) {
  return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(BOX >> 4) << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

// Rows row0.. row0 + 63 of a [L][stride] matrix (row 0 at g) into the tile at shared `base`
// (1024-byte aligned), swizzled as above, by the LOADERS threads from `tid` (0 ..); rows at or past
// L are zeros (nothing read).
#ifndef TR_WG_OWN
#define TR_WG_OWN 1
#endif
constexpr int LOADERS = TR_WG_OWN ? 128 : WG_THREADS;  // own: each warpgroup loads its own tiles
__device__ __forceinline__ void load_tile_sw128(unsigned base, const T *g, i64 stride, int row0, int L, int tid) {
#pragma unroll
  for (int it = 0; it < 64 * CHUNKS / LOADERS; it++) {
    const int i = tid + it * LOADERS;
    const int r = i / CHUNKS, c = i % CHUNKS;
    const bool valid = row0 + r < L;
    const T *src = g + (valid ? (i64)(row0 + r) * stride : 0) + c * 8;
    cp_async16(base + (c >> 3) * BOX + r * 128 + (((c & 7) ^ (r & 7)) << 4), src, valid);
  }
}

// This thread's copies but the last group's landed, seen by the tensor cores' reads, and so for
// every loader (own: the warpgroup's, on its named barrier 1 + wg).
__device__ __forceinline__ void wg_ready(int wg) {
  cp_async_wait<1>();
  fence_proxy_async();
#if TR_WG_OWN
  asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");
#else
  (void)wg;
  __syncthreads();
#endif
}

// S (the 64 x 64 scores of the warpgroup's rows and a key tile at kt) = Q (at qw) . K^T, issued and
// committed as one group of wgmma (not waited for).
__device__ __forceinline__ void wg_scores(float (&s)[32], unsigned qw, unsigned kt) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < DIM / 16; kk++) {
    const unsigned off = (kk >> 2) * BOX + (kk & 3) * 32;
    wg_ss_n64(s, wgmma_desc_sw128(qw + off), wgmma_desc_sw128(kt + off), kk > 0);
  }
  wgmma_commit();
}

// The online softmax in base 2 over one tile's scores s (s[4j + 2 * half + e]: row row_l + 8 * half
// of the warpgroup's, key 8j + 2 (lane % 4) + e of the tile; `masked`: the diagonal tile, keys past
// the row masked): s becomes the weights, the rows' max and sum move on, O is rescaled.
template <bool FOLD>
__device__ __forceinline__ void wg_softmax(float (&s)[32], float (&acc)[DIM / 2], float (&mx)[2], float (&sum)[2],
                                           bool masked, int row_l, int lane, float sl, float scale_log2) {
#pragma unroll
  for (int i = 0; i < 32; i++) {
    float x = FOLD ? s[i] : s[i] * scale_log2;
    if (masked && 8 * (i / 4) + 2 * (lane % 4) + (i & 1) > row_l + 8 * ((i >> 1) & 1)) x = NEG_INF;
    s[i] = x;
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float m = mx[r];
#pragma unroll
    for (int j = 0; j < 8; j++) m = fmaxf(m, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const float alpha = m == NEG_INF ? 1.f : ex2((mx[r] - m) * sl);
    const float base = m == NEG_INF ? 0.f : m * sl;
    float rs = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      s[4 * j + 2 * r] = ex2(fmaf(s[4 * j + 2 * r], sl, -base));
      s[4 * j + 2 * r + 1] = ex2(fmaf(s[4 * j + 2 * r + 1], sl, -base));
      rs += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
    }
    sum[r] = sum[r] * alpha + rs;
    mx[r] = m;
#pragma unroll
    for (int j = 0; j < DIM / 8; j++) {
      acc[4 * j + 2 * r] *= alpha;
      acc[4 * j + 2 * r + 1] *= alpha;
    }
  }
}

// O += P (the weights s, rounded to T: S's n8 tiles 2t and 2t + 1 are k16 step t's A fragment) . V
// (the tile at vt), issued and committed as one group of wgmma (not waited for).
__device__ __forceinline__ void wg_values(float (&acc)[DIM / 2], const float (&s)[32], unsigned vt) {
  unsigned pa[4][4];
#pragma unroll
  for (int t = 0; t < 4; t++) {
    pa[t][0] = pack2<T>(s[8 * t + 0], s[8 * t + 1]);
    pa[t][1] = pack2<T>(s[8 * t + 2], s[8 * t + 3]);
    pa[t][2] = pack2<T>(s[8 * t + 4], s[8 * t + 5]);
    pa[t][3] = pack2<T>(s[8 * t + 6], s[8 * t + 7]);
  }
  wgmma_fence();
#pragma unroll
  for (int t = 0; t < 4; t++) {
#if TR_DIM == 128
    wg_rs_n128(acc, pa[t], wgmma_desc_sw128_n(vt + t * 2048));
#else
    wg_rs_n64(acc, pa[t], wgmma_desc_sw128_n(vt + t * 2048));
#endif
  }
  wgmma_commit();
}

template <bool FOLD>
__device__ __forceinline__ void prefill_wgmma(const T *__restrict__ q, const T *__restrict__ k,
                                              const T *__restrict__ v, T *__restrict__ o, int L, int heads,
                                              int heads_kv, float scale, unsigned sm) {
  const int mt = gridDim.y - 1 - blockIdx.y;  // query tile: the longest first
  const int bh = blockIdx.x;
  const int h = bh % heads, b = bh / heads;
  const int g = h / (heads / heads_kv);
  const int wg = threadIdx.x / 128, wq = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const i64 q_stride = (i64)heads * DIM, kv_stride = (i64)heads_kv * DIM;
  const T *qg = q + ((i64)b * L * heads + h) * DIM;
  const T *kg = k + ((i64)b * L * heads_kv + g) * DIM;
  const T *vg = v + ((i64)b * L * heads_kv + g) * DIM;
  const int m0 = mt * WG_BM;
  const int last = min(m0 + WG_BM, L) - 1, nt_last = last / BN;
  const int diag = m0 / BN + wg;  // this warpgroup's diagonal key tile; tiles past it: all masked
  // Q's two tiles, then K's two buffers and V's (own: each warpgroup's)
  const unsigned sq = sm, sk = sm + 2 * TILE + (TR_WG_OWN ? wg * 4 * TILE : 0), sv = sk + 2 * TILE;
  const float sl = FOLD ? scale * LOG2E : 1.f, scale_log2 = scale * LOG2E;
#if TR_WG_OWN
  const int tid = threadIdx.x % 128, first = min(nt_last, diag);  // tiles past the diagonal: never visited
  load_tile_sw128(sq + wg * TILE, qg, q_stride, m0 + 64 * wg, L, tid);
#else
  const int tid = threadIdx.x, first = nt_last;
  load_tile_sw128(sq, qg, q_stride, m0, L, tid);
  load_tile_sw128(sq + TILE, qg, q_stride, m0 + 64, L, tid);
#endif
  load_tile_sw128(sk, kg, kv_stride, first * BN, L, tid);
  cp_async_commit();

  float acc[DIM / 2];  // O: row r = 16 wq + lane / 4 (+ 8), n8 tile j: acc[4j + 2 * half + e]
#pragma unroll
  for (int i = 0; i < DIM / 2; i++) acc[i] = 0.f;
  float mx[2] = {NEG_INF, NEG_INF}, sum[2] = {0.f, 0.f};
  const unsigned qw = sq + wg * TILE;
  const int row_l = 16 * wq + lane / 4;  // this thread's first row in the warpgroup's 64

  load_tile_sw128(sv, vg, kv_stride, first * BN, L, tid);
  cp_async_commit();
  for (int nt = first, it = 0; nt >= 0; nt--, it++) {
    const unsigned kt = sk + (it & 1) * TILE, vt = sv + (it & 1) * TILE;
    wg_ready(wg);  // K's tile nt is in (and Q)
    if (nt > 0) load_tile_sw128(sk + ((it + 1) & 1) * TILE, kg, kv_stride, (nt - 1) * BN, L, tid);
    cp_async_commit();
    const bool active = nt <= diag;  // warpgroup-uniform
    float s[32];
    if (active) {
      wg_scores(s, qw, kt);
      wgmma_wait<0>();
      wg_softmax<FOLD>(s, acc, mx, sum, nt == diag, row_l, lane, sl, scale_log2);
    }
    wg_ready(wg);  // V's tile nt is in; every loader is done with K's
    if (nt > 0) load_tile_sw128(sv + ((it + 1) & 1) * TILE, vg, kv_stride, (nt - 1) * BN, L, tid);
    cp_async_commit();
    if (active) {
      wg_values(acc, s, vt);
      wgmma_wait<0>();
    }
  }
  cp_async_wait<0>();

  T *og = o + ((i64)b * L * heads + h) * DIM;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float l = sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = m0 + 64 * wg + row_l + 8 * r;
    if (row < L) {
      T *dst = og + (i64)row * q_stride + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < DIM / 8; j++) {
        *reinterpret_cast<unsigned *>(dst + 8 * j) = pack2<T>(acc[4 * j + 2 * r] * inv, acc[4 * j + 2 * r + 1] * inv);
      }
    }
  }
}

#ifndef TR_WG_CTAS
#define TR_WG_CTAS 1
#endif
extern "C" __global__ void __launch_bounds__(WG_THREADS, TR_WG_CTAS) tr_gqa_prefill(const T *__restrict__ q,
                                                                           const T *__restrict__ k,
                                                                           const T *__restrict__ v, T *__restrict__ o,
                                                                           int L, int heads, int heads_kv,
                                                                           float scale) {
  await_previous_kernel();
  extern __shared__ __align__(1024) unsigned char wg_smem[];
  const unsigned sm = (smem_addr(wg_smem) + 1023u) & ~1023u;
  if (scale > 0.f) prefill_wgmma<true>(q, k, v, o, L, heads, heads_kv, scale, sm);
  else prefill_wgmma<false>(q, k, v, o, L, heads, heads_kv, scale, sm);
}
#else
// Two entries, so the rare path's registers never crowd the common one's (spills at two m16 tiles
// a warp when one kernel held both): q, k, v and o 16-byte aligned, and any alignment.
extern "C" __global__ void __launch_bounds__(BLOCK) tr_gqa_prefill(const T *__restrict__ q, const T *__restrict__ k,
                                                                      const T *__restrict__ v, T *__restrict__ o, int L,
                                                                      int heads, int heads_kv, float scale) {
  entry<true>(q, k, v, o, L, heads, heads_kv, scale);
}
#endif
extern "C" __global__ void __launch_bounds__(BLOCK) tr_gqa_prefill_any(const T *__restrict__ q, const T *__restrict__ k,
                                                                          const T *__restrict__ v, T *__restrict__ o,
                                                                          int L, int heads, int heads_kv, float scale) {
  entry<false>(q, k, v, o, L, heads, heads_kv, scale);
}
