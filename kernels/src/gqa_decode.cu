// gqa_decode.cu: one GQA decode step, split over the KV length. q [B, heads, DIM]; the caches
// [B, S, heads_kv, DIM]; row b attends to its first seqlens[b] entries (clamped to [0, S]: no
// entry past S is read; a row of length 0 gives zeros). Query head h reads KV head h / GQ.
//
// tr_gqa (the split step): a CTA per (batch row, KV head, tile of up to 16 of that head's GQ query
// heads) and split of the KV length, so each K and V byte of a split is read once for all the
// tile's heads. The tile's heads are the 16 rows of the tensor cores' A operand (mma.sync
// m16n8k16, float32 accumulation; rows past GQ are zeros, computed and dropped). Each warp runs
// its own pipeline: it takes 16 cache rows at a time (every WARPS-th group of 16 of the split),
// copied from global to its shared-memory ring of STAGES slots by cp.async (no register round
// trip, 16-byte chunks XOR-swizzled against bank conflicts), so STAGES - 1 slots stream in while
// one is computed: S = q.K^T (K read by ldmatrix), an online softmax in base 2 on the
// accumulators, then o += P.V with P converted in registers to the A operand and V read by
// ldmatrix.trans. The warps' (max, sum, o) are merged in shared memory and written as the split's
// float32 partials. tr_gqa_merge: a CTA per (batch row, query head), four groups of a thread a
// dim, merges the splits' partials and writes o. The split count and its chunk are launch values:
// one build serves every batch and length.
//
// The bulk build (-DTR_BULK, sm_90: the batch-1 implementations, bs1 and long-context) loads
// differently: a fifth, producer warp fills a ring of STAGES slots shared by the CTA, 16 rows for
// each of the four consumer warps a slot, with Hopper's tensor copies (cp.async.bulk.tensor, the
// TMA unit, through tensor maps the host encodes for the call's caches: boxes of 64 rows x 64
// dims, swizzled by the unit), each slot's arrival counted in bytes on its "full" mbarrier; the
// consumers wait on it, compute as above, and release the slot on its "empty" mbarrier. The
// producer fetches the maps into the copy unit while the kernel waits for the one before, and
// issues the split's first slots before it reads seqlens (at batch 1 the launch's fixed cost is
// most of a short cache's time: this took 0.45 us off 6.9 at kv 1024 and 0.55 off 10.6 at kv 4096
// on the H200). A cache that is not 16-byte aligned takes the register path of the other build in
// either.
//
// Macros: TR_T (f16, bf16), TR_DIM (64, 128), TR_GQ (query heads a KV head), TR_STAGES (the ring's
// slots: a warp's, or with TR_BULK the CTA's), TR_BULK, TR_EVICT_FIRST (with TR_BULK: the tensor
// copies mark the cache's lines evict-first in L2; not in the cluster build), TR_SPLIT (with
// TR_BULK: the cluster build, below), TR_BLOCK (threads a CTA: four consumer warps, and the
// producer warp with TR_BULK).
// Dynamic shared memory: the larger of the rings and the merge buffers, with TR_BULK the mbarriers,
// and in the cluster build its receive area (kernels/intree/attention.c's smem_bytes and
// cluster_recv_bytes).
// Entries: tr_gqa(const T *q, const T *k, const T *v, const int *seqlens, float *part_o,
//                 float *part_ml, i64 S, int heads_kv, int splits, i64 chunk, float scale,
//                 float softcap, tensor_map km, tensor_map vm)   (the maps read with TR_BULK only;
//                 the cluster build's tr_gqa: below)
//          tr_gqa_merge(const float *part_o, const float *part_ml, T *o, int splits), 4 * DIM
//          threads, splits <= 256
typedef TR_T T;

constexpr int DIM = TR_DIM;
constexpr int GQ = TR_GQ;  // query heads a KV head
constexpr int QT = 16;     // query heads a CTA (the mma's rows)
constexpr int QTILES = (GQ + QT - 1) / QT;
#ifndef TR_BULK
#define TR_BULK 0
#endif
#ifndef TR_EVICT_FIRST
#define TR_EVICT_FIRST 0
#endif
#if defined(TR_SPLIT)  // the cluster build: never (attention.c has the measurements)
#define EVICT_FIRST 0
#else
#define EVICT_FIRST TR_EVICT_FIRST
#endif
constexpr int BLOCK = TR_BLOCK;
constexpr int WARPS = BLOCK / 32 - (TR_BULK ? 1 : 0);  // the consumer warps
constexpr int STAGES = TR_STAGES;
constexpr int KW = 16;            // cache rows a warp's slot
constexpr int CH = DIM / 8;       // 16-byte chunks a row
constexpr int KSTEPS = DIM / 16;  // k steps of q.K^T
constexpr int NT = DIM / 8;       // 8-wide n tiles of o
constexpr int SLOT_BYTES = 2 * KW * DIM * (int)sizeof(T);  // K then V
constexpr float LOG2E = 1.4426950408889634f;
#define NEG_INF (-__int_as_float(0x7f800000))
static_assert(DIM == 64 || DIM == 128, "head dims 64 and 128");
static_assert(sizeof(T) == 2, "16-bit elements");
static_assert(STAGES >= 2, "a ring of at least two slots");

// The byte offset of (row, 16-byte chunk) in a K or V tile of a slot: chunks XORed with the row
// (mod 8), so the eight rows an ldmatrix reads at one chunk fall on eight different bank groups.
__device__ __forceinline__ unsigned swz(int row, int chunk) { return (unsigned)(row * CH + (chunk ^ (row & 7))) * 16u; }

// Rows key0.. key0 + KW - 1 of the (b, g) cache into the slot at `slot` (shared address); rows at
// or past `end` are zeros (nothing read). key0 < end. ALIGNED: cp.async; otherwise loads of
// 16-bit elements through registers (a cache not 16-byte aligned).
template <bool ALIGNED>
__device__ __forceinline__ void load_slot(unsigned slot, T *slot_ptr, const T *kb, const T *vb, i64 key0, i64 end,
                                          i64 row_stride, int lane) {
  constexpr int PER = KW * CH / 32;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const int idx = lane + 32 * i, row = idx / CH, ch = idx % CH;
    const i64 key = key0 + row;
    const bool valid = key < end;
    const i64 off = (valid ? key : key0) * row_stride + ch * 8;
    const unsigned at = swz(row, ch);
    if constexpr (ALIGNED) {
      cp_async16(slot + at, kb + off, valid);
      cp_async16(slot + KW * DIM * 2 + at, vb + off, valid);
    } else {
      unsigned uk[4], uv[4];
      const unsigned short *hk = reinterpret_cast<const unsigned short *>(kb + off);
      const unsigned short *hv = reinterpret_cast<const unsigned short *>(vb + off);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        uk[j] = valid ? (unsigned)hk[2 * j] | ((unsigned)hk[2 * j + 1] << 16) : 0u;
        uv[j] = valid ? (unsigned)hv[2 * j] | ((unsigned)hv[2 * j + 1] << 16) : 0u;
      }
      unsigned *dk = reinterpret_cast<unsigned *>(reinterpret_cast<char *>(slot_ptr) + at);
      unsigned *dv = reinterpret_cast<unsigned *>(reinterpret_cast<char *>(slot_ptr) + KW * DIM * 2 + at);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        dk[j] = uk[j];
        dv[j] = uv[j];
      }
    }
  }
}

// A warp's online softmax over its 16 rows of query heads: o (the accumulator fragments), and
// the max and sum of rows r and r + 8 (l: this lane's columns until `finish` sums the quad).
struct Acc {
  float o[NT][4];
  float m[2], l[2];
};

// Byte offsets in a K or V tile of the warps' rings.
struct Swizzled {
  static __device__ __forceinline__ unsigned at(int row, int chunk) { return swz(row, chunk); }
};

// One 16-row tile of the cache (key0 < end; rows at or past `end` are masked, and their V rows
// must be finite): K at shared address kt, V at vt, laid out by L.
template <class L>
__device__ __forceinline__ void attend16(Acc &a, const unsigned (&qa)[KSTEPS][4], unsigned kt, unsigned vt, i64 key0,
                                         i64 end, float qk_scale, float softcap, int lane) {
  const int t = lane % 4;
  // each lane's ldmatrix row: K (non-transposed) matrices (keys 0-7 | 8-15) x (dims lo | hi);
  // V (transposed) matrices (keys 0-7, 8-15) x (dims lo | hi)
  const int mat = lane / 8, mrow = lane % 8;
  const int k_row = (mat >> 1) * 8 + mrow, k_chunk = mat & 1;
  const int v_row = (mat & 1) * 8 + mrow, v_chunk = mat >> 1;
  float sc[2][4];  // keys 0-7 and 8-15 of the tile
#pragma unroll
  for (int j = 0; j < 2; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++) {
    unsigned kf[4];
    ldmatrix_x4<false>(kf, kt + L::at(k_row, 2 * kk + k_chunk));
    mma16816<T>(sc[0], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], kf[0], kf[1]);
    mma16816<T>(sc[1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], kf[2], kf[3]);
  }
  float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
  for (int j = 0; j < 2; j++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float x = sc[j][e] * qk_scale;
      if (softcap > 0.f) x = softcap * tanhf(x / softcap) * LOG2E;
      const i64 key = key0 + j * 8 + 2 * t + (e & 1);
      x = key < end ? x : NEG_INF;
      sc[j][e] = x;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
  }
  float alpha[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    const float m_new = fmaxf(a.m[h], mx[h]);  // finite: key0 < end
    alpha[h] = exp2f(a.m[h] - m_new);          // a.m[h] = -inf: 0
    a.m[h] = m_new;
  }
  float p[2][4];
#pragma unroll
  for (int j = 0; j < 2; j++) {
#pragma unroll
    for (int e = 0; e < 4; e++) p[j][e] = exp2f(sc[j][e] - a.m[e >> 1]);
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    a.l[h] = a.l[h] * alpha[h] + (p[0][2 * h] + p[0][2 * h + 1] + p[1][2 * h] + p[1][2 * h + 1]);
  }
#pragma unroll
  for (int n = 0; n < NT; n++) {
    a.o[n][0] *= alpha[0];
    a.o[n][1] *= alpha[0];
    a.o[n][2] *= alpha[1];
    a.o[n][3] *= alpha[1];
  }
  // P as the A operand: the two 8-key accumulator tiles side by side are one 16-key k step
  const unsigned pa0 = pack2<T>(p[0][0], p[0][1]), pa1 = pack2<T>(p[0][2], p[0][3]);
  const unsigned pa2 = pack2<T>(p[1][0], p[1][1]), pa3 = pack2<T>(p[1][2], p[1][3]);
#pragma unroll
  for (int dn = 0; dn < NT / 2; dn++) {
    unsigned vf[4];
    ldmatrix_x4<true>(vf, vt + L::at(v_row, 2 * dn + v_chunk));
    mma16816<T>(a.o[2 * dn], pa0, pa1, pa2, pa3, vf[0], vf[1]);
    mma16816<T>(a.o[2 * dn + 1], pa0, pa1, pa2, pa3, vf[2], vf[3]);
  }
}

// What a CTA works on: its batch row, KV head, query heads and split, and where they are. cap:
// the end of the split's rows in the cache (start + chunk, at most S), known without seqlens;
// end: the end of the rows it attends to (at most cap), from seqlens (with_length).
struct Unit {
  int b, g, heads, h0, nq, sp;
  i64 start, cap, end, row_stride;
  const T *kb, *vb;
};

// `unit`: (b * heads_kv + g) * QTILES + qt; `sp`: the split. u.end is left to with_length.
__device__ __forceinline__ Unit unit_of(const T *k, const T *v, i64 S, int heads_kv, i64 chunk, int unit, int sp) {
  Unit u;
  u.sp = sp;
  const int qt = unit % QTILES;
  const int bg = unit / QTILES;
  const int g = bg % heads_kv;
  u.g = g;
  u.b = bg / heads_kv;
  u.heads = heads_kv * GQ;
  u.h0 = g * GQ + qt * QT;  // the tile's first query head
  u.nq = GQ - qt * QT < QT ? GQ - qt * QT : QT;
  u.start = (i64)u.sp * chunk;
  u.cap = S < u.start + chunk ? S : u.start + chunk;
  u.end = u.start;
  u.row_stride = (i64)heads_kv * DIM;  // elements from one position to the next
  u.kb = k + ((i64)u.b * S * heads_kv + g) * DIM;
  u.vb = v + ((i64)u.b * S * heads_kv + g) * DIM;
  return u;
}

// u.end from the row's length (clamped to [0, S]: never past cap).
__device__ __forceinline__ void with_length(Unit &u, const int *__restrict__ seqlens) {
  const i64 len = seqlens[u.b];
  u.end = len < u.start ? u.start : (len > u.cap ? u.cap : len);
}

// q's A fragments for every k step (rows past the tile's heads: zeros) and a fresh accumulator.
__device__ __forceinline__ void begin(const T *__restrict__ q, const Unit &u, int lane, unsigned (&qa)[KSTEPS][4],
                                      Acc &a) {
  const int r = lane / 4, t = lane % 4;
  const T *qt = q + ((i64)u.b * u.heads + u.h0) * DIM;
  const unsigned short *qh = reinterpret_cast<const unsigned short *>(qt);
  const bool words = (reinterpret_cast<u64>(qt) & 3) == 0;  // pairs as 32-bit loads
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int row = r + (j & 1) * 8, col = kk * 16 + (j >> 1) * 8 + 2 * t;
      unsigned w = 0u;
      if (row < u.nq) {
        w = words ? *reinterpret_cast<const unsigned *>(qh + row * DIM + col)
                  : (unsigned)qh[row * DIM + col] | ((unsigned)qh[row * DIM + col + 1] << 16);
      }
      qa[kk][j] = w;
    }
  }
#pragma unroll
  for (int n = 0; n < NT; n++) a.o[n][0] = a.o[n][1] = a.o[n][2] = a.o[n][3] = 0.f;
  a.m[0] = a.m[1] = NEG_INF;
  a.l[0] = a.l[1] = 0.f;
}

// The warps' accumulators merged in shared memory (every thread of the CTA calls it; only the
// consumer warps' are merged): red_o [WARPS][QT][DIM], then red_m and red_l [WARPS][QT], then each
// warp's weight of each head (exp2 of its max less the CTA's) wt [WARPS][QT] and the CTA's max and
// sum of each head, cta_m and cta_l [QT], at smem (MERGE_FLOATS floats; cta_part reads them).
constexpr int MERGE_FLOATS = WARPS * QT * (DIM + 3) + 2 * QT;
__device__ __forceinline__ void merge_warps(Acc &a, char *smem) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    a.l[h] += __shfl_xor_sync(0xffffffffu, a.l[h], 1);
    a.l[h] += __shfl_xor_sync(0xffffffffu, a.l[h], 2);
  }
  __syncthreads();  // every warp is done with the rings: the memory is the merge's now
  float *red_o = reinterpret_cast<float *>(smem);
  float *red_m = red_o + WARPS * QT * DIM, *red_l = red_m + WARPS * QT;
  float *wt = red_l + WARPS * QT, *cta_m = wt + WARPS * QT, *cta_l = cta_m + QT;
  if (warp < WARPS) {
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
      for (int e = 0; e < 4; e++) red_o[(warp * QT + r + (e >> 1) * 8) * DIM + n * 8 + 2 * t + (e & 1)] = a.o[n][e];
    }
    if (t == 0) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        red_m[warp * QT + r + 8 * h] = a.m[h];
        red_l[warp * QT + r + 8 * h] = a.l[h];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < QT) {  // a head each: its warps' weights, once rather than at every dim
    const int h = threadIdx.x;
    float m = NEG_INF, l = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) m = fmaxf(m, red_m[w * QT + h]);
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
      const float mw = red_m[w * QT + h];
      const float f = mw == NEG_INF ? 0.f : exp2f(mw - m);
      wt[w * QT + h] = f;
      l = fmaf(red_l[w * QT + h], f, l);
    }
    cta_m[h] = m;
    cta_l[h] = l;
  }
  __syncthreads();
}

// The CTA's (max, sum, o) of query head h (of the tile) at dim d, from merge_warps' buffers.
struct Part {
  float m, l, o;
};
__device__ __forceinline__ Part cta_part(const char *smem, int h, int d) {
  const float *red_o = reinterpret_cast<const float *>(smem);
  const float *wt = red_o + WARPS * QT * (DIM + 2), *cta_m = wt + WARPS * QT, *cta_l = cta_m + QT;
  Part p = {cta_m[h], cta_l[h], 0.f};
#pragma unroll
  for (int w = 0; w < WARPS; w++) p.o = fmaf(red_o[(w * QT + h) * DIM + d], wt[w * QT + h], p.o);
  return p;
}

// The CTA's partials written as the split's (the general build).
__device__ __forceinline__ void finish(Acc &a, const Unit &u, float *__restrict__ part_o, float *__restrict__ part_ml,
                                       int splits, char *smem) {
  merge_warps(a, smem);
  for (int i = threadIdx.x; i < u.nq * DIM; i += BLOCK) {
    const int h = i / DIM, d = i % DIM;
    const Part p = cta_part(smem, h, d);
    const i64 idx = ((i64)u.b * u.heads + u.h0 + h) * splits + u.sp;
    part_o[idx * DIM + d] = p.o;
    if (d == 0) {
      part_ml[idx * 2] = p.m;
      part_ml[idx * 2 + 1] = p.l;
    }
  }
}

// The warps' own rings (cp.async, or through registers where !ALIGNED). With TR_BULK the producer
// warp takes no rows here.
template <bool ALIGNED>
__device__ __forceinline__ void warp_rings(const Unit &u, const unsigned (&qa)[KSTEPS][4], Acc &a, float qk_scale,
                                           float softcap, char *smem) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp >= WARPS) return;
  const i64 first = u.start + (i64)warp * KW, step = (i64)WARPS * KW;
  const int n_steps = u.end > first ? (int)((u.end - first + step - 1) / step) : 0;
  T *ring = reinterpret_cast<T *>(smem) + (size_t)warp * STAGES * SLOT_BYTES / sizeof(T);
  const unsigned ring_at = smem_addr(ring);
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < n_steps) {
      load_slot<ALIGNED>(ring_at + s * SLOT_BYTES, ring + s * SLOT_BYTES / 2, u.kb, u.vb, first + s * step, u.end,
                         u.row_stride, lane);
    }
    if constexpr (ALIGNED) cp_async_commit();
  }
  for (int it = 0; it < n_steps; it++) {
    const int nx = it + STAGES - 1;
    if (nx < n_steps) {
      const int s = nx % STAGES;
      load_slot<ALIGNED>(ring_at + s * SLOT_BYTES, ring + s * SLOT_BYTES / 2, u.kb, u.vb, first + nx * step, u.end,
                         u.row_stride, lane);
    }
    if constexpr (ALIGNED) {
      cp_async_commit();
      cp_async_wait<STAGES - 1>();
    }
    __syncwarp();
    const unsigned kt = ring_at + (it % STAGES) * SLOT_BYTES;
    attend16<Swizzled>(a, qa, kt, kt + KW * DIM * 2, first + (i64)it * step, u.end, qk_scale, softcap, lane);
    __syncwarp();  // the slot is refilled next
  }
  if constexpr (ALIGNED) cp_async_wait<0>();
}

#if TR_BULK
constexpr int SLOT_ROWS = WARPS * KW;  // cache rows a slot: 16 for each consumer warp
constexpr int BOXES = DIM / 64;        // 64-dim boxes a row (128 bytes each)
constexpr int BOX_BYTES = SLOT_ROWS * 128;
constexpr int TILE_BYTES = BOXES * BOX_BYTES;  // one of K or V
constexpr int BULK_RING_BYTES = STAGES * 2 * TILE_BYTES;
// The ring's shared-memory address: 1024-byte aligned in the dynamic shared memory (the swizzle's
// period; the host gives 1 KiB more). Its STAGES full and STAGES empty mbarriers follow it (at
// FULL_AT and EMPTY_AT from the ring), then, in the cluster build, the receive area (RECV_AT).
constexpr int FULL_AT = BULK_RING_BYTES, EMPTY_AT = FULL_AT + 8 * STAGES, RECV_AT = EMPTY_AT + 8 * STAGES;
__device__ __forceinline__ unsigned ring_addr(const char *smem) { return (smem_addr(smem) + 1023u) & ~1023u; }

// Byte offsets in a K or V tile as the tensor copies lay it: a box of 64 dims after another, each
// row 128 bytes with its 16-byte chunks XORed by the row (mod 8) (the map's 128-byte swizzle).
struct Boxed {
  static __device__ __forceinline__ unsigned at(int row, int chunk) {
    return (unsigned)((chunk >> 3) * BOX_BYTES + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
  }
};

// A box of a cache to shared `dst`, counted on `bar`; with EVICT_FIRST under the L2 policy
// `once`.
__device__ __forceinline__ void copy_box(unsigned dst, const tensor_map *map, int c0, int c1, int c2, unsigned bar,
                                         u64 once) {
#if EVICT_FIRST
  tensor_copy_hint(dst, map, c0, c1, c2, bar, once);
#else
  (void)once;
  tensor_copy(dst, map, c0, c1, c2, bar);
#endif
}

// The CTA's ring of slots filled by the producer warp's tensor copies (batch 1: the maps view
// the caches as [S][heads_kv][DIM], boxes of 64 rows x 64 dims of one KV head; rows past S are
// zeros). The first slots of the split (up to STAGES, rows of the split below S) are issued before
// seqlens is read, so the row's length and the first rows arrive together rather than one after
// the other; slots that turn out to lie past the length arrive all the same, and are skipped.
__device__ __forceinline__ void bulk_ring(Unit u, const int *__restrict__ seqlens, const unsigned (&qa)[KSTEPS][4],
                                          Acc &a, float qk_scale, float softcap, char *smem, const tensor_map *km,
                                          const tensor_map *vm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned ring = ring_addr(smem);
  char *const ring_ptr = smem + (ring - smem_addr(smem));
  const unsigned full = ring + FULL_AT, empty = ring + EMPTY_AT;  // STAGES mbarriers each
  const int most = u.cap > u.start ? (int)((u.cap - u.start + SLOT_ROWS - 1) / SLOT_ROWS) : 0;
  const int early = most < STAGES ? most : STAGES;  // slots issued before the length is known
  const u64 once = EVICT_FIRST ? l2_policy_stream() : 0;  // the cache is read once a step: evicted first
  auto issue = [&](int it) {  // slot `it` of the split, by the producer's lane 0
    const int s = it % STAGES;
    const int key0 = (int)(u.start + (i64)it * SLOT_ROWS);
    mbar_expect_arrive(full + 8 * s, 2 * TILE_BYTES);
    const unsigned kt = ring + s * 2 * TILE_BYTES, vt = kt + TILE_BYTES;
#pragma unroll
    for (int bx = 0; bx < BOXES; bx++) {
      copy_box(kt + bx * BOX_BYTES, km, 64 * bx, u.g, key0, full + 8 * s, once);
      copy_box(vt + bx * BOX_BYTES, vm, 64 * bx, u.g, key0, full + 8 * s, once);
    }
  };
  if (threadIdx.x == WARPS * 32) {  // the producer's lane 0 sets the barriers up and issues
    for (int s = 0; s < STAGES; s++) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, WARPS);
    }
    mbar_init_fence();
    for (int it = 0; it < early; it++) issue(it);
  }
  with_length(u, seqlens);
  const int n_steps = u.end > u.start ? (int)((u.end - u.start + SLOT_ROWS - 1) / SLOT_ROWS) : 0;
  const int slots = n_steps > early ? n_steps : early;  // every slot issued is waited for
  __syncthreads();  // the barriers are set up
  if (warp == WARPS) {  // the producer: one lane issues the rest
    if (lane == 0) {
      for (int it = early; it < slots; it++) {
        if (it >= STAGES) mbar_wait(empty + 8 * (it % STAGES), ((it / STAGES) & 1) ^ 1);
        issue(it);
      }
    }
    __syncwarp();  // the warp reconverged before finish's (or merge_warps') barriers
    return;
  }
  for (int it = 0; it < slots; it++) {
    const int s = it % STAGES;
    mbar_wait(full + 8 * s, (it / STAGES) & 1);
    const i64 key0 = u.start + (i64)it * SLOT_ROWS + warp * KW;
    const unsigned kt = ring + s * 2 * TILE_BYTES + warp * KW * 128, vt = kt + TILE_BYTES;
    if (key0 < u.end) {
      if (key0 + KW > u.end) {  // the split's last rows: V past them zeroed (the cache may hold NaN there)
        for (int i = lane; i < KW * CH; i += 32) {
          const int row = i / CH, ch = i % CH;
          if (key0 + row >= u.end) {
            unsigned *w = reinterpret_cast<unsigned *>(ring_ptr + (vt - ring) + Boxed::at(row, ch));
            w[0] = w[1] = w[2] = w[3] = 0u;
          }
        }
        fence_proxy_async();  // before the next tensor copy there
        __syncwarp();
      }
      attend16<Boxed>(a, qa, kt, vt, key0, u.end, qk_scale, softcap, lane);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * s);
  }
}
#endif

// A split's (max, sum, o) over its cache rows, in the thread's accumulator (u.end from seqlens,
// read here: the bulk ring reads it once its first copies are issued).
__device__ __forceinline__ void attend_split(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                             const int *__restrict__ seqlens, Unit u, Acc &a, float scale,
                                             float softcap, char *smem, const tensor_map *km, const tensor_map *vm) {
  const float qk_scale = softcap > 0.f ? scale : scale * LOG2E;
  unsigned qa[KSTEPS][4];
  begin(q, u, threadIdx.x % 32, qa, a);
  if (aligned16(k) && aligned16(v)) {
#if TR_BULK
    bulk_ring(u, seqlens, qa, a, qk_scale, softcap, smem, km, vm);
#else
    (void)km;
    (void)vm;
    with_length(u, seqlens);
    warp_rings<true>(u, qa, a, qk_scale, softcap, smem);
#endif
  } else {  // (with TR_BULK the maps were not made: the host checks the same alignment)
    with_length(u, seqlens);
    warp_rings<false>(u, qa, a, qk_scale, softcap, smem);
  }
}

// With TR_BULK: the tensor maps fetched into the copy unit's cache by the producer's lane 0 while
// the kernel waits for the one before it (the maps are launch values, never its output), where
// the host made them (both caches 16-byte aligned).
__device__ __forceinline__ void prefetch_maps(const T *k, const T *v, const tensor_map *km, const tensor_map *vm) {
#if TR_BULK
  if (threadIdx.x == WARPS * 32 && aligned16(k) && aligned16(v)) {
    prefetch_tensor_map(km);
    prefetch_tensor_map(vm);
  }
#else
  (void)k;
  (void)v;
  (void)km;
  (void)vm;
#endif
}

#ifdef TR_SPLIT
// The cluster build (-DTR_SPLIT, with TR_BULK: sm_90, short caches): the C CTAs of a cluster (C
// from the launch, at most CLUSTER_MAX; 1-D clusters of consecutive blocks) are the C splits of
// one unit, the CTA's cluster rank its split. The unit's (head, dim) elements are shared out among
// the CTAs; each CTA stores its o of an element into the shared memory of the CTA that merges it
// (and its max and sum of each head into every CTA's) by st.async, counted in bytes on that CTA's
// mbarrier; once its own has counted them all, each merges its elements' C values in rank order
// (the same result wherever the CTAs ran) and writes o. No remote loads; one cluster barrier,
// arrived at when the kernel starts and waited for before the first store (kernels/intree/
// attention.c has the measurements). A cluster of one writes o directly.
// No partials in global memory, no second kernel.
// Entry: tr_gqa(q, k, v, seqlens, T *o, i64 S, int heads_kv, i64 chunk, float scale, float softcap,
//               tensor_map km, tensor_map vm), grid (units x C) in clusters of C.
static_assert(TR_BULK, "the cluster build is the bulk one");
static_assert(MERGE_FLOATS * 4 <= BULK_RING_BYTES, "merge_warps' buffers end before the receive area");
constexpr int CLUSTER_MAX = 16;  // attention.c's TR_GQA_CLUSTER_MAX at most
extern "C" __global__ void __launch_bounds__(BLOCK)
    tr_gqa(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, const int *__restrict__ seqlens,
           T *__restrict__ o, i64 S, int heads_kv, i64 chunk, float scale, float softcap,
           const __grid_constant__ tensor_map km, const __grid_constant__ tensor_map vm) {
  prefetch_maps(k, v, &km, &vm);
  await_previous_kernel();
  extern __shared__ __align__(1024) char smem[];
  const unsigned rank = cluster_rank(), ctas = cluster_ctas();
  const Unit u = unit_of(k, v, S, heads_kv, chunk, (int)(blockIdx.x / ctas), (int)rank);
  // The receive area, past the ring and its mbarriers (attention.c's cluster_recv_bytes): recv_m
  // and recv_l [CLUSTER_MAX][QT], then recv_o [C][per] (C * per < QT * DIM + CLUSTER_MAX), then
  // the mbarrier that counts the bytes stored there.
  const int n = u.nq * DIM, per = (n + (int)ctas - 1) / (int)ctas;
  float *recv_m = reinterpret_cast<float *>(smem + (ring_addr(smem) - smem_addr(smem)) + RECV_AT);
  float *recv_l = recv_m + CLUSTER_MAX * QT, *recv_o = recv_l + CLUSTER_MAX * QT;
  const unsigned recv_bar = smem_addr(recv_o + QT * DIM + CLUSTER_MAX);
  if (ctas > 1 && threadIdx.x == 0) {  // every CTA's o of its elements and (max, sum) of each head
    const int mine = n - (int)rank * per < per ? (n - (int)rank * per > 0 ? n - (int)rank * per : 0) : per;
    mbar_init(recv_bar, 1);
    mbar_expect_arrive(recv_bar, (unsigned)(ctas * (mine + 2 * u.nq) * 4));
    mbar_init_fence();
  }
  if (ctas > 1) cluster_arrive_relaxed();  // waited for before the first store to another CTA
  Acc a;
  attend_split(q, k, v, seqlens, u, a, scale, softcap, smem, &km, &vm);
  merge_warps(a, smem);
  if (ctas == 1) {  // a cluster of one (attention.c launches it plainly): the CTA's result is o
    for (int i = threadIdx.x; i < u.nq * DIM; i += BLOCK) {
      const int h = i / DIM, d = i % DIM;
      const Part p = cta_part(smem, h, d);
      o[((i64)u.b * u.heads + u.h0 + h) * DIM + d] = from_f32<T>(p.l > 0.f ? p.o / p.l : 0.f);
    }
    return;
  }
  // Each CTA merges `per` of the unit's elements: every CTA stores its o of those elements into
  // that CTA's receive area, and its (max, sum) of each head into every CTA's (stores, no round
  // trips: st.async, each counted in bytes on the receiving CTA's mbarrier); once its mbarrier has
  // counted them all, each merges its elements from its own shared memory in rank order and
  // writes o.
  cluster_wait();  // every CTA has started: its receive area may be written (ctas > 1 here)
  for (int i = threadIdx.x; i < n; i += BLOCK) {
    const int h = i / DIM, d = i % DIM;
    const Part p = cta_part(smem, h, d);
    const unsigned owner = (unsigned)(i / per);
    store_async_cluster(&recv_o[(int)rank * per + i - (int)owner * per], recv_bar, owner, p.o);
    if (d == 0) {
      for (unsigned c = 0; c < ctas; c++) {
        store_async_cluster(&recv_m[rank * QT + h], recv_bar, c, p.m);
        store_async_cluster(&recv_l[rank * QT + h], recv_bar, c, p.l);
      }
    }
  }
  mbar_wait_cluster(recv_bar, 0);  // every CTA's stores to this one have landed
  for (int e = threadIdx.x; e < per && (int)rank * per + e < n; e += BLOCK) {
    const int i = (int)rank * per + e, h = i / DIM, d = i % DIM;
    float M = NEG_INF, L = 0.f, O = 0.f;
    for (int c = 0; c < (int)ctas; c++) M = fmaxf(M, recv_m[c * QT + h]);
    for (int c = 0; c < (int)ctas; c++) {
      const float mc = recv_m[c * QT + h], w = mc == NEG_INF ? 0.f : exp2f(mc - M);
      L = fmaf(recv_l[c * QT + h], w, L);
      O = fmaf(recv_o[c * per + e], w, O);
    }
    o[((i64)u.b * u.heads + u.h0 + h) * DIM + d] = from_f32<T>(L > 0.f ? O / L : 0.f);
  }
}
#else
extern "C" __global__ void __launch_bounds__(BLOCK)
    tr_gqa(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, const int *__restrict__ seqlens,
           float *__restrict__ part_o, float *__restrict__ part_ml, i64 S, int heads_kv, int splits, i64 chunk,
           float scale, float softcap, const __grid_constant__ tensor_map km, const __grid_constant__ tensor_map vm) {
  prefetch_maps(k, v, &km, &vm);
  await_previous_kernel();
  extern __shared__ __align__(1024) char smem[];
  const Unit u = unit_of(k, v, S, heads_kv, chunk, (int)blockIdx.x, (int)blockIdx.y);
  Acc a;
  attend_split(q, k, v, seqlens, u, a, scale, softcap, smem, &km, &vm);
  finish(a, u, part_o, part_ml, splits, smem);
}
#endif

// The splits' partials of one (batch row, query head) merged: MG groups of DIM threads each take
// every MG-th split (eight loads in flight a thread), then sum the groups in shared memory.
constexpr int MG = 4;
constexpr int MERGE_MAX_SPLITS = 256;  // attention.c's DECODE_MAX_SPLITS
static_assert(MERGE_MAX_SPLITS <= MG * DIM, "a thread a split's (max, sum)");
extern "C" __global__ void __launch_bounds__(DIM * MG) tr_gqa_merge(const float *__restrict__ part_o,
                                                                 const float *__restrict__ part_ml,
                                                                 T *__restrict__ o, int splits) {
  await_previous_kernel();
  __shared__ float w[MERGE_MAX_SPLITS];
  __shared__ float sum_o[MG][DIM];
  __shared__ float red[2][MG * DIM / 32];
  const i64 bh = blockIdx.x;  // b * heads + h
  const int tid = threadIdx.x, d = tid % DIM, grp = tid / DIM;
  const float *ml = part_ml + bh * splits * 2;
  const float m_s = tid < splits ? ml[2 * tid] : NEG_INF;
  const float l_s = tid < splits ? ml[2 * tid + 1] : 0.f;
  // the max of the splits' maxima, then their sums weighed by it, over the block
  float M = warp_max(m_s);
  if (tid % 32 == 0) red[0][tid / 32] = M;
  __syncthreads();
  M = NEG_INF;
#pragma unroll
  for (int i = 0; i < MG * DIM / 32; i++) M = fmaxf(M, red[0][i]);
  const float f = m_s == NEG_INF ? 0.f : exp2f(m_s - M);
  float L = warp_sum(l_s * f);
  if (tid % 32 == 0) red[1][tid / 32] = L;
  if (tid < splits) w[tid] = f;
  __syncthreads();
  L = 0.f;
#pragma unroll
  for (int i = 0; i < MG * DIM / 32; i++) L += red[1][i];
  const float inv = L > 0.f ? 1.f / L : 0.f;
  float O = 0.f;
  const float *po = part_o + bh * splits * DIM + d;
  int s = grp;
  for (; s + 7 * MG < splits; s += 8 * MG) {
    float x[8];
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] = po[(i64)(s + j * MG) * DIM];
#pragma unroll
    for (int j = 0; j < 8; j++) O = fmaf(x[j], w[s + j * MG], O);
  }
  for (; s < splits; s += MG) O = fmaf(po[(i64)s * DIM], w[s], O);
  sum_o[grp][d] = O;
  __syncthreads();
  if (grp == 0) {
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < MG; i++) total += sum_o[i][d];
    o[bh * DIM + d] = from_f32<T>(total * inv);
  }
}
