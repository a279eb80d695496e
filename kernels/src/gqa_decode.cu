// gqa_decode.cu: one GQA decode step, split over the KV length. q [B, heads, DIM]; the caches
// [B, S, heads_kv, DIM]; row b attends to its first seqlens[b] entries (clamped to [0, S]: no
// entry past S is read; a row of length 0 gives zeros). Query head h reads KV head h / GQ.
//
// tr_gqa (the split step): a CTA per (batch row, KV head, tile of up to QT of that head's GQ query heads)
// and split of the KV length; the query heads of the tile share each K and V byte read (packed
// into one pass). Its warps take 32 cache rows at a time, a lane a row for the scores (q in
// shared memory, scaled), an online softmax per head in base 2, then P.V with a lane owning
// DIM/32 dims; the warps' (max, sum, o) are merged in shared memory and written as the split's
// float32 partials. tr_gqa_merge: a CTA per (batch row, query head), a thread a dim, merges the
// splits' partials and writes o. The split count and its chunk are launch values: one build
// serves every batch and length.
// Entries: tr_gqa(const T *q, const T *k, const T *v, const int *seqlens, float *part_o,
//                       float *part_ml, i64 S, int heads_kv, int splits, i64 chunk, float scale,
//                       float softcap)
//          tr_gqa_merge(const float *part_o, const float *part_ml, T *o, int splits)
typedef TR_T T;

constexpr int DIM = TR_DIM;
constexpr int GQ = TR_GQ;  // query heads a KV head
constexpr int QT = TR_QT;  // query heads a CTA
constexpr int QTILES = (GQ + QT - 1) / QT;
constexpr int BLOCK = TR_BLOCK;
constexpr int WARPS = BLOCK / 32;
constexpr int DV = DIM / 32;  // dims a lane owns in P.V
constexpr float LOG2E = 1.4426950408889634f;
#define NEG_INF (-__int_as_float(0x7f800000))

template <int N> __device__ __forceinline__ void load_f32n(const T *p, bool vec, float (&out)[N]) {
  if (vec) {
    vec_t<T, N> r = *reinterpret_cast<const vec_t<T, N> *>(p);
#pragma unroll
    for (int e = 0; e < N; e++) out[e] = to_f32(r.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < N; e++) out[e] = to_f32(p[e]);
  }
}

extern "C" __global__ void __launch_bounds__(BLOCK) tr_gqa(const T *__restrict__ q, const T *__restrict__ k,
                                                              const T *__restrict__ v, const int *__restrict__ seqlens,
                                                              float *__restrict__ part_o, float *__restrict__ part_ml,
                                                              i64 S, int heads_kv, int splits, i64 chunk, float scale,
                                                              float softcap) {
  await_previous_kernel();
  const int sp = blockIdx.y;
  const int unit = blockIdx.x;  // (b * heads_kv + g) * QTILES + qt
  const int qt = unit % QTILES;
  const int bg = unit / QTILES;
  const int g = bg % heads_kv;
  const int b = bg / heads_kv;
  const int heads = heads_kv * GQ;
  const int h0 = g * GQ + qt * QT;  // the tile's first query head
  const int nq = GQ - qt * QT < QT ? GQ - qt * QT : QT;
  __shared__ float qs[QT][DIM];
  __shared__ float red_m[WARPS][QT], red_l[WARPS][QT];
  __shared__ float red_o[WARPS][QT][DIM];
  for (int i = threadIdx.x; i < QT * DIM; i += BLOCK) {
    const int h = i / DIM, d = i % DIM;
    qs[h][d] = h < nq ? to_f32(q[((i64)b * heads + h0 + h) * DIM + d]) * scale : 0.f;
  }
  __syncthreads();
  i64 len = seqlens[b];
  len = len < 0 ? 0 : (len > S ? S : len);
  const i64 start = (i64)sp * chunk;
  const i64 end = len < start + chunk ? len : start + chunk;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 row_stride = (i64)heads_kv * DIM;  // elements from one position to the next
  const T *kb = k + ((i64)b * S * heads_kv + g) * DIM;
  const T *vb = v + ((i64)b * S * heads_kv + g) * DIM;
  const bool vec = aligned16(k) && aligned16(v);
  float m[QT], l[QT], o[QT][DV];
#pragma unroll
  for (int h = 0; h < QT; h++) {
    m[h] = NEG_INF;
    l[h] = 0.f;
#pragma unroll
    for (int e = 0; e < DV; e++) o[h][e] = 0.f;
  }
  for (i64 base = start + warp * 32; base < end; base += WARPS * 32) {
    const i64 r = base + lane;
    const bool valid = r < end;
    float s[QT];
#pragma unroll
    for (int h = 0; h < QT; h++) s[h] = 0.f;
    if (valid) {
      const T *kr = kb + r * row_stride;
      constexpr int KB = DIM / 8 < 8 ? DIM / 8 : 8;  // 16-byte loads in flight together
#pragma unroll
      for (int c0 = 0; c0 < DIM; c0 += 8 * KB) {
        float kf[KB][8];
#pragma unroll
        for (int u = 0; u < KB; u++) load_f32n<8>(kr + c0 + 8 * u, vec, kf[u]);
#pragma unroll
        for (int u = 0; u < KB; u++) {
#pragma unroll
          for (int h = 0; h < QT; h++) {
#pragma unroll
            for (int e = 0; e < 8; e++) s[h] = fmaf(qs[h][c0 + 8 * u + e], kf[u][e], s[h]);
          }
        }
      }
    }
    float p[QT];
#pragma unroll
    for (int h = 0; h < QT; h++) {
      float x = s[h];
      if (softcap > 0.f) x = softcap * tanhf(x / softcap);
      x = valid ? x * LOG2E : NEG_INF;
      const float m_new = fmaxf(m[h], warp_max(x));  // finite: the tile has a valid row
      const float alpha = exp2f(m[h] - m_new);       // m[h] = -inf: 0
      p[h] = valid ? exp2f(x - m_new) : 0.f;
      l[h] = l[h] * alpha + warp_sum(p[h]);
#pragma unroll
      for (int e = 0; e < DV; e++) o[h][e] *= alpha;
      m[h] = m_new;
    }
    // P.V, eight V rows' loads in flight at a time (a row past the tile's last valid one is read as
    // that one again: its p is 0)
    const int rows = end - base < 32 ? (int)(end - base) : 32;
#pragma unroll
    for (int j0 = 0; j0 < 32; j0 += 8) {
      if (j0 >= rows) break;
      float vf[8][DV];
#pragma unroll
      for (int jj = 0; jj < 8; jj++) {
        const int j = j0 + jj < rows ? j0 + jj : rows - 1;
        load_f32n<DV>(vb + (base + j) * row_stride + lane * DV, vec, vf[jj]);
      }
#pragma unroll
      for (int jj = 0; jj < 8; jj++) {
#pragma unroll
        for (int h = 0; h < QT; h++) {
          const float pj = __shfl_sync(0xffffffffu, p[h], j0 + jj);
#pragma unroll
          for (int e = 0; e < DV; e++) o[h][e] = fmaf(pj, vf[jj][e], o[h][e]);
        }
      }
    }
  }
#pragma unroll
  for (int h = 0; h < QT; h++) {
    if (lane == 0) {
      red_m[warp][h] = m[h];
      red_l[warp][h] = l[h];
    }
#pragma unroll
    for (int e = 0; e < DV; e++) red_o[warp][h][lane * DV + e] = o[h][e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nq * DIM; i += BLOCK) {
    const int h = i / DIM, d = i % DIM;
    float M = NEG_INF;
#pragma unroll
    for (int w = 0; w < WARPS; w++) M = fmaxf(M, red_m[w][h]);
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
      const float f = red_m[w][h] == NEG_INF ? 0.f : exp2f(red_m[w][h] - M);
      L = fmaf(red_l[w][h], f, L);
      O = fmaf(red_o[w][h][d], f, O);
    }
    const i64 idx = ((i64)b * heads + h0 + h) * splits + sp;
    part_o[idx * DIM + d] = O;
    if (d == 0) {
      part_ml[idx * 2] = M;
      part_ml[idx * 2 + 1] = L;
    }
  }
}

extern "C" __global__ void __launch_bounds__(DIM) tr_gqa_merge(const float *__restrict__ part_o,
                                                            const float *__restrict__ part_ml, T *__restrict__ o,
                                                            int splits) {
  await_previous_kernel();
  const i64 bh = blockIdx.x;  // b * heads + h
  const int d = threadIdx.x;
  const float *ml = part_ml + bh * splits * 2;
  float M = NEG_INF;
  for (int s = 0; s < splits; s++) M = fmaxf(M, ml[2 * s]);
  float L = 0.f, O = 0.f;
  for (int s = 0; s < splits; s++) {
    const float f = ml[2 * s] == NEG_INF ? 0.f : exp2f(ml[2 * s] - M);
    L = fmaf(ml[2 * s + 1], f, L);
    O = fmaf(part_o[(bh * splits + s) * DIM + d], f, O);
  }
  o[bh * DIM + d] = from_f32<T>(L > 0.f ? O / L : 0.f);
}
