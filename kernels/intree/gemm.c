/* gemm.c: the GEMM family: d [m, n] = op(a) @ op(b), row-major, float32 accumulation. Two
 * implementations of GemmFwdInterface:
 *   gemm_cublaslt  the general one: cuBLASLt (kernels/cuda/cublaslt.h), every dtype, both
 *                  transposes, any m, n, k; descriptors, algorithm and workspace made when the
 *                  kernel is made; request_tune times the top heuristic algorithms.
 *   gemm_skinny    decode (kernels/src/gemm.cu): m, or n, at most 64, float16 and bfloat16; the
 *                  large operand (the weight) streamed once into tensor-core fragments, k split
 *                  over the CTAs of a cluster on sm_90 (the split count a run-time choice that
 *                  request_tune times); preferred over gemm_cublaslt where both apply. On sm_90
 *                  its split build is the wgmma one (TMA copies into a shared-memory ring,
 *                  warpgroup MMA) where x is K-contiguous with at least TR_SKINNY_WGMMA_MIN_ROWS
 *                  rows; the mma.sync kernels serve the rest, and unaligned operands, and devices
 *                  or drivers without clusters or tensor maps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/map_cache.h"
#include "kernels/cuda/timing.h"
#include "kernels/intree/family.h"

static const tr_call_field kGemmFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"trans_a", TR_VALUE_BOOL, 0, 1, {.kind = TR_VALUE_BOOL, .as.b = false}},
    {"trans_b", TR_VALUE_BOOL, 0, 1, {.kind = TR_VALUE_BOOL, .as.b = false}},
    {"m", TR_VALUE_INT, 0, 0, {0}},
    {"n", TR_VALUE_INT, 0, 0, {0}},
    {"k", TR_VALUE_INT, 0, 0, {0}},
};
static const tr_call_spec_type kGemmCall = {"GemmCall", 6, kGemmFields};

static const char *const kGemmArgs[] = {"a", "b", NULL};
static const char *const kD[] = {"d"};

static const tr_kernel_interface kGemmIface = {
    "GemmFwdInterface", &kGemmCall, 2, kGemmArgs, 1, kD,
    "a [m, k] ([k, m] with trans_a) and b [k, n] ([n, k] with trans_b), contiguous, of one dtype on one cuda "
    "device; returns d = op(a) @ op(b) [m, n] in that dtype, accumulated in float32 (float32 inputs without "
    "TF32); nothing written in place. A result of an input holding NaN or infinity is undefined beyond what "
    "the IEEE products give."};

enum { CUBLASLT, SKINNY };
static const tr_intree_impl kImpls[] = {
    {&tr_intree_gemm_family, CUBLASLT, 1},
    {&tr_intree_gemm_family, SKINNY, 0},
};

/* The skinny kernel: at most this many rows of the small operand; CTAs of SKINNY_BLOCK threads;
 * at most SKINNY_MAX_SPLIT CTAs a cluster (the portable cluster size). The wgmma build: CTAs of
 * SKINNY_WG_BLOCK threads (a consumer warpgroup and a producer warp) taking 64 or 128 rows
 * of w, a ring of stages in shared memory (skinny_wg_shape_of), on sm_90. */
enum {
  SKINNY_MAX_ROWS = 64,
  SKINNY_BLOCK = 128,
  SKINNY_MAX_SPLIT = 8,
  SKINNY_SPLIT_MIN_ARCH = 90,
  SKINNY_WG_BLOCK = 160,
  SKINNY_WG_SMEM = 112 * 1024,
  SKINNY_WG_ARCH = 90,
};

/* Rows of x from which the wgmma build serves a call (where x is K-contiguous): the A/B switch
 * (-DTR_SKINNY_WGMMA_MIN_ROWS=65 turns it off). From one row: x's rows are padded to 8 by the
 * TMA copy's zero fill. Measured on the H200 (bench_gemm.py --rows "decode m=1", 2026-12-03,
 * tuned): at m = 1 the wgmma build streams the weight at 73%, 92% and 92% of copy on the
 * 4096x4096, 14336x4096 and 4096x14336 rows, against 68%, 87% and 87% for the mma.sync kernel
 * (one 16-row tile a warp, 8 chunks ahead), which keeps 1 to 8 rows where -DTR_SKINNY_WGMMA_MIN_ROWS=9. */
#ifndef TR_SKINNY_WGMMA_MIN_ROWS
#define TR_SKINNY_WGMMA_MIN_ROWS 1
#endif

static int call_bool(const tr_call_spec *call, const char *name) {
  const tr_value *v = tr_call_spec_get(call, name);
  return v != NULL && v->kind == TR_VALUE_BOOL && v->as.b;
}

/* How the skinny kernel sees a call: w [L, K] K-contiguous streamed, x [S, K] small (x[s, k] at
 * x + s * xs + k * xk), y[s, l] at d + s * ys + l * yl; `x_is_a`: x is the operand a. */
typedef struct skinny_view {
  int x_is_a;
  int64_t S, L, xs, xk, ys, yl;
} skinny_view;

/* 0 where neither operand can be streamed K-contiguous with the other at most 64 rows. */
static int skinny_view_of(const tr_call_spec *call, skinny_view *v) {
  int ta = call_bool(call, "trans_a"), tb = call_bool(call, "trans_b");
  int64_t m = tr_call_spec_int(call, "m"), n = tr_call_spec_int(call, "n"), k = tr_call_spec_int(call, "k");
  if (m <= SKINNY_MAX_ROWS && tb) { /* w = b [n, k]; x = op(a) */
    *v = (skinny_view){1, m, n, ta ? 1 : k, ta ? m : 1, n, 1};
    return 1;
  }
  if (n <= SKINNY_MAX_ROWS && !ta) { /* w = a [m, k]; x = op(b)^T */
    *v = (skinny_view){0, n, m, tb ? k : 1, tb ? 1 : n, 1, n};
    return 1;
  }
  return 0;
}

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  const tr_intree_impl *impl = self->ctx;
  tr_dtype d = tr_call_spec_get(call, "dtype")->as.dtype;
  int64_t m = tr_call_spec_int(call, "m"), n = tr_call_spec_int(call, "n"), k = tr_call_spec_int(call, "k");
  if (m < 0 || n < 0 || k < 0) {
    snprintf(buf, size, "m, n and k are counts; got m=%lld, n=%lld, k=%lld", (long long)m, (long long)n, (long long)k);
    return buf;
  }
  if (impl->kind == CUBLASLT) {
    if (!tr_intree_is_float16ish(d)) {
      snprintf(buf, size, "multiplies float16, bfloat16 and float32; got %s", tr_dtype_name(d));
      return buf;
    }
    return NULL;
  }
  if (!tr_dtype_equal(d, TR_FLOAT16) && !tr_dtype_equal(d, TR_BFLOAT16)) {
    snprintf(buf, size, "multiplies float16 and bfloat16 on the tensor cores; got %s", tr_dtype_name(d));
    return buf;
  }
  size_t elem = tr_dtype_bytes(d);
  if (k * (int64_t)elem < 16) {
    snprintf(buf, size, "k must span at least one 16-byte vector (%zu elements of %zu bytes), got k=%lld", 16 / elem,
             elem, (long long)k);
    return buf;
  }
  if (k % (int64_t)(16 / elem) != 0) {
    snprintf(buf, size, "k must be a whole number of 16-byte vectors (a multiple of %zu), got k=%lld", 16 / elem,
             (long long)k);
    return buf;
  }
  if (k > INT32_MAX / 2) {
    snprintf(buf, size, "k must be at most %d, got k=%lld", INT32_MAX / 2, (long long)k);
    return buf;
  }
  if (m > SKINNY_MAX_ROWS && n > SKINNY_MAX_ROWS) {
    snprintf(buf, size, "serves m or n of at most %d (decode), got m=%lld, n=%lld", SKINNY_MAX_ROWS, (long long)m,
             (long long)n);
    return buf;
  }
  skinny_view v;
  if (!skinny_view_of(call, &v)) {
    snprintf(buf, size, "streams a k-contiguous weight: m <= %d needs trans_b (b [n, k]), n <= %d needs trans_a false "
             "(a [m, k]); got m=%lld, n=%lld, trans_a=%s, trans_b=%s", SKINNY_MAX_ROWS, SKINNY_MAX_ROWS, (long long)m,
             (long long)n, call_bool(call, "trans_a") ? "true" : "false", call_bool(call, "trans_b") ? "true" : "false");
    return buf;
  }
  return NULL;
}

static const char *const kSkinnyOver[] = {"gemm_cublaslt", NULL};

TR_INTREE_TYPE(kCublasLt, "gemm_cublaslt", kGemmIface, kImpls[CUBLASLT], 1, NULL, refusal);
TR_INTREE_TYPE(kSkinny, "gemm_skinny", kGemmIface, kImpls[SKINNY], 0, kSkinnyOver, refusal);

static tr_status *gemm_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params, size_t n_params,
                            const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kGemmIface.name;
  if (n_in < 2 || in[0] == NULL || in[1] == NULL) return TR_STATUS(TR_VALUE, "GemmFwdOp: the in-tree kernels need a and b");
  const tr_tensor_spec *a = in[0], *b = in[1];
  if (a->rank != 2 || b->rank != 2) {
    return TR_STATUS(TR_VALUE, "GemmFwdOp: the in-tree kernels multiply matrices; got a of rank %d, b of rank %d",
                     a->rank, b->rank);
  }
  const tr_value *pa = tr_intree_param(params, n_params, "trans_a"), *pb = tr_intree_param(params, n_params, "trans_b");
  bool ta = pa != NULL && pa->kind == TR_VALUE_BOOL && pa->as.b, tb = pb != NULL && pb->kind == TR_VALUE_BOOL && pb->as.b;
  tr_named_value v[6] = {
      {"dtype", tr_value_dtype(a->dtype)},
      {"trans_a", tr_value_bool(ta)},
      {"trans_b", tr_value_bool(tb)},
      {"m", tr_value_int(ta ? a->shape[1] : a->shape[0])},
      {"n", tr_value_int(tb ? b->shape[0] : b->shape[1])},
      {"k", tr_value_int(ta ? a->shape[0] : a->shape[1])},
  };
  return tr_call_spec_init(out, &kGemmCall, device, v, 6);
}

/* ---- the skinny kernel ---- */

/* 1 where the split build is the wgmma one (on sm_90; x K-contiguous, enough rows). */
static int skinny_wgmma_build(const skinny_view *v) {
  return v->xk == 1 && v->S >= 1 && v->S >= (int64_t)TR_SKINNY_WGMMA_MIN_ROWS;
}

/* The wgmma build's state on a device (k->ints[7]): none (the split build is mma.sync), off (its
 * module's split kernel is the wgmma one, but no maps: the driver has none, or the ring does not
 * fit), on. */
enum { SKINNY_WG_NONE, SKINNY_WG_OFF, SKINNY_WG_ON };

/* The wgmma build's shape for a call of L rows of w and S rows of x: the rows of w a CTA takes
 * (64 or 128: one or two m64 wgmmas a k16 step) and the shared memory its ring may take. It
 * depends on L and S only (the build step compiles without the device's SM count; the kernel's
 * compiled shape and its launch must agree, or the ring's byte counts never complete). A weight
 * of at most 8192 rows takes TR_SKINNY_WG_SMALL_ROWS rows and a ring of at most
 * TR_SKINNY_WG_SMALL_RING_KIB (64 rows and 200 KiB; its split makes a grid of at most one CTA an
 * SM, clusters of 2, one wave); others 128 rows and 112 KiB. Either ring has at most
 * TR_SKINNY_WG_MAX_STAGES stages, so with the default 8 the 64-row tiles' ring is 72 KiB at m = 1,
 * 80 KiB at m = 16 and 128 KiB at m = 64 (a stage: 64 rows of w and x's rows rounded up to 8, 64 k
 * each), not 200: two or three CTAs fit an SM, which lets the next kernel's CTAs in. Measured on
 * the H200 (bench_gemm.py 2026-12-03, tuned): 64 rows took m = 64 on 4096x4096 from 16.7 to 12.8 us and on
 * 4096x14336 from 43.6 to 32.8; m = 16 from 12.5 to 11.2 and 33.6 to 30.7; 128 rows with a ring of
 * 192 KiB (8 stages) gave 15.2 and 37.2 at m = 64, so the smaller tile is the gain (with 128 rows,
 * clusters of 4 put two CTAs on some SMs and none on others). A deeper ring on the small weights
 * (-DTR_SKINNY_WG_MAX_STAGES=32: up to 22 stages; at m = 1 on 4096x4096, split 2, 22 of a CTA's 32
 * k tiles in flight at once, against 8; it also takes a CTA's shared memory to 200 KiB, one CTA
 * an SM) was slower on every decode row in an A/B on an H100 (2026-12-05, with
 * TR_SKINNY_TUNE_EVERY_SPLIT=1, two rounds each): 4096x4096 at m = 1 15.0 us against 14.5, m = 16
 * 15.3-15.4 against 14.8-14.9, the large weights 0-3% slower; so 8 stays. A device copy of the
 * same bytes takes 13.3-13.7 us there: the 4096x4096 rows are 1.09-1.10x of it at m = 1 and 16,
 * 1.17x at m = 64. */
#ifndef TR_SKINNY_WG_SMALL_ROWS
#define TR_SKINNY_WG_SMALL_ROWS 64
#endif
#ifndef TR_SKINNY_WG_SMALL_RING_KIB
#define TR_SKINNY_WG_SMALL_RING_KIB 200
#endif
#ifndef TR_SKINNY_WG_MAX_STAGES
#define TR_SKINNY_WG_MAX_STAGES 8
#endif
#if TR_SKINNY_WG_MAX_STAGES < 2
#error "TR_SKINNY_WG_MAX_STAGES: the ring needs at least two stages"
#endif
/* Tried and not kept: the split builds' partials stored into the shared memory of the CTA that
 * sums them, one cluster barrier after (as GQA decode's cluster build merges), instead of read
 * from the others' with a barrier before and after: no change on an H100 (bench_gemm.py --rows
 * "decode m=", two rounds, 2026-12-06; 4096x4096 at m = 1 14.21-14.22 us against 14.23, at m = 16
 * 14.24-14.82 against 14.63; the other rows moved with the machine between runs, up to 6%, not
 * with the build). A 14 us kernel's merge is not its cost.
 * Also tried for m = 64, where the wgmma build stays at 0.90-0.93x torch on the 4096x4096 and
 * 14336x4096 weights (H100, bench_gemm.py --rows "decode m=", `tools/gpu.sh ab --rounds 2`,
 * 2026-12-06; the wgmma build as it is, run alongside, 16.1-16.3 us and 46.1-46.9 us there),
 * none kept, each within 1% or slower: 64-row tiles on the large weight (mlp up m = 64 47.7 us; m = 1 on it 45.3, split 4);
 * a ring of 200 KiB for the 128-row tiles (8 stages at m = 64: 48.8; m = 1 and 16 2-4% slower);
 * at most 6 stages for x of more than 32 rows (two CTAs an SM; the tuner kept split 2: no change);
 * 256-row tiles for m = 64 (x read from L2 once for 32 KB of w, not 16; 20.1-21.0 and 48.4-50.2,
 * with one, two or four consumer warpgroups); two consumer warpgroups on 128-row tiles, each one
 * m64 half (45.6-45.8 against 46.1-46.2: within the spread); each stage handed back as soon as
 * its own products are done (wgmma wait 0, the consumer then holds one stage, not two; alone, with
 * two warpgroups, with a 160 KiB ring: 46.0-46.2, 45.8-46.1, 49.3-49.7). ncu on the 14336x4096
 * weight (one cold launch) shows DRAM at 70% at m = 64 against 76% at m = 16, the SMs' compute at
 * 18% and the L2 at 76%: neither the tensor cores nor the x tile's L2 traffic is the limit; a
 * deeper ring is slower on every row. */
#ifndef TR_SKINNY_WG_LARGE_ROWS
#define TR_SKINNY_WG_LARGE_ROWS 128
#endif
/* The swapped wgmma build (kernels/src/gemm.cu's TR_WG_SWAP: x the wgmma's A, 64 rows, w its B)
 * for x of more than TR_SKINNY_WG_SWAP_MIN_ROWS rows on a weight of more than 8192 rows: a CTA
 * takes the rows of w that make about one tile an SM of TR_SKINNY_WG_SWAP_SMS (rounded up to 8,
 * 64 to 256), so one wave covers w with no split of k, and a ring of at most
 * TR_SKINNY_WG_SWAP_RING_KIB. (As cuBLAS does at m = 64 on 14336x4096: ncu on an H100,
 * 2026-12-06, shows its kernel nvjet_sm90_tst_112x64_64x9 in 128 CTAs of 112 rows, 9 stages, at
 * 82% of DRAM; the 128-row tiles here make 112 CTAs, 20 SMs idle, and 64-row ones 1.7 waves.)
 * Measured on an H100 (`tools/gpu.sh ab`, bench_gemm.py --rows "decode m=", 2026-12-06, three
 * rounds against -DTR_SKINNY_WG_SWAP_MIN_ROWS=64, which turns it off): m = 64 on 14336x4096
 * (112 rows a CTA, 8 stages) 47.00-47.21 us against 47.73-48.33, 0.93-0.94x torch against 0.92;
 * the other rows do not take it and stayed within 1%. So filling the SMs is worth 1.5-2%, not the
 * 8% cuBLAS is ahead: ncu (one cold launch each) shows cuBLAS's kernel at an L2 hit rate of 17%
 * against 35-45% here, its clusters of two sharing x (one load of x for two tiles: half the L2
 * traffic of x, which here is 64 MB a call against 117 MB of w); the next step is x multicast
 * over a cluster of two tiles. */
#ifndef TR_SKINNY_WG_SWAP_MIN_ROWS
#define TR_SKINNY_WG_SWAP_MIN_ROWS 32
#endif
#ifndef TR_SKINNY_WG_SWAP_SMS
#define TR_SKINNY_WG_SWAP_SMS 132
#endif
#ifndef TR_SKINNY_WG_SWAP_RING_KIB
#define TR_SKINNY_WG_SWAP_RING_KIB 200
#endif
/* Candidates, off until measured (tools/gpu.sh ab): TR_SKINNY_WG_MCAST=1, the swapped build in
 * clusters of two CTAs on neighbouring tiles, each copying half of x into both (kernels/src/gemm.cu's
 * TR_WG_MCAST: x read from L2 once for two tiles, as cuBLAS's m = 64 kernels do);
 * TR_SKINNY_WG_SWAP_SMALL=1, the swapped build on weights of at most 8192 rows too (32 rows a CTA
 * at 4096: cuBLAS's nvjet_sm90_tst_64x32_64x16_1x2 on 64x4096x4096 is 128 CTAs of 32 rows in
 * clusters of two, 16 stages); TR_SKINNY_WG_SWAP_MAX_STAGES, the swapped build's deepest ring.
 * Both together on an H100 (2026-12-06, bench_gemm.py --rows "decode m=64", one round): correct
 * (test_gemm_gpu.py's 134 wgmma cases) but 76.4 us on 64x4096x4096 against 16.1, 113.5 on
 * 64x14336x4096 against 46.4 and 260.3 on 64x4096x14336 against 43.4: about 1.2 us a k tile, as
 * if each stage waited out a round trip. With TR_SKINNY_WG_MCAST_SYNC=1 too (CUTLASS's form of the
 * remote arrivals and the producer's wait; an A/B on an H100, 2026-12-06, `tools/gpu.sh ab --rounds
 * 1 mcs1 -- python3 python/bench/bench_gemm.py --rows "decode m="`, 138 wgmma cases of
 * test_gemm_gpu.py passed): 17.73 us against 16.06 on 64x4096x4096, 46.05 against 47.03 on
 * 64x14336x4096 (torch 44.1-44.3), 50.05 against 44.18 on 64x4096x14336; the m = 1 and 16 rows
 * unchanged. The multicast gains 2% where the default already swaps (14336 rows) and the swapped
 * build loses 10-13% on the 4096-row weights; neither reaches cuBLAS, so both stay off. */
#ifndef TR_SKINNY_WG_MCAST
#define TR_SKINNY_WG_MCAST 0
#endif
#ifndef TR_SKINNY_WG_SWAP_SMALL
#define TR_SKINNY_WG_SWAP_SMALL 0
#endif
#ifndef TR_SKINNY_WG_SWAP_MAX_STAGES
#define TR_SKINNY_WG_SWAP_MAX_STAGES TR_SKINNY_WG_MAX_STAGES
#endif
typedef struct skinny_wg_shape {
  int64_t rows;   /* rows of w a CTA */
  int64_t x_rows; /* rows of x's tile: S rounded up to 8 (swapped: 64) */
  int64_t stages; /* the ring's stages */
  int64_t smem;   /* dynamic shared memory a CTA */
  int small;      /* a weight of at most 8192 rows */
  int swap;       /* the swapped build */
  int mcast;      /* the swapped build in clusters of two tiles sharing x's copies */
} skinny_wg_shape;

/* bytes a stage: `rows` rows of w and x's rows rounded up to 8, 64 k of 2 bytes each; the dynamic
 * shared memory: the ring, 1 KiB to align it, a full and an empty mbarrier a stage
 * (kernels/src/gemm.cu's RING_BYTES + 1024 + 16 * WG_STAGES) */
static skinny_wg_shape skinny_wg_shape_of(int64_t L, int64_t S) {
  skinny_wg_shape w;
  if (S < 1) S = 1; /* as source_for compiles it */
  w.small = L <= 8192;
  w.swap = (!w.small || TR_SKINNY_WG_SWAP_SMALL) && S > TR_SKINNY_WG_SWAP_MIN_ROWS;
  w.mcast = w.swap && TR_SKINNY_WG_MCAST;
  w.rows = w.small ? TR_SKINNY_WG_SMALL_ROWS : TR_SKINNY_WG_LARGE_ROWS;
  w.x_rows = (S + 7) / 8 * 8;
  int64_t ring = (w.small ? TR_SKINNY_WG_SMALL_RING_KIB : SKINNY_WG_SMEM / 1024) * 1024;
  int64_t max_stages = TR_SKINNY_WG_MAX_STAGES;
  if (w.swap) {
    int64_t per = (L + TR_SKINNY_WG_SWAP_SMS - 1) / TR_SKINNY_WG_SWAP_SMS, least = w.small ? 32 : 64;
    w.rows = per < least ? least : per > 256 ? 256 : (per + 7) / 8 * 8;
    w.x_rows = 64;
    ring = (int64_t)TR_SKINNY_WG_SWAP_RING_KIB * 1024;
    max_stages = TR_SKINNY_WG_SWAP_MAX_STAGES;
  }
  int64_t stage = w.rows * 128 + w.x_rows * 128;
  int64_t stages = (ring - 2048) / stage;
  w.stages = stages > max_stages ? max_stages : stages < 2 ? 2 : stages;
  w.smem = w.stages * stage + 1024 + 16 * w.stages;
  return w;
}

/* rows of w per CTA: 16 per warp tile, two tiles a warp where x has more than 8 rows (x's
 * fragments then serve twice the weight; measured on the H200, bench_gemm.py 2026-12-01: m = 16
 * on the 14336x4096 and 4096x14336 rows went from 66-73% of copy to 75-77%; one tile for m = 64
 * fell from 42-55% to 37-44%) */
static int skinny_tiles(int64_t S) { return S > 8 ? 2 : 1; }

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                             tr_intree_source *out) {
  (void)arch; /* one source for every architecture */
  const tr_intree_impl *impl = type->ctx;
  if (impl->kind == CUBLASLT) return NULL; /* no source: cuBLASLt's kernels */
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  skinny_view v;
  if (!skinny_view_of(call, &v)) {
    return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for this layout", type->key);
  }
  int64_t S = v.S < 1 ? 1 : v.S;
  out->source = tr_src_gemm;
  out->entry = "tr_gemm_skinny";
  out->block = SKINNY_BLOCK;
  tr_intree_add_text(out, "-DTR_T=%s", tr_intree_c_type(dt));
  tr_intree_add_int(out, "-DTR_S=%lld", (long long)S);
  tr_intree_add_int(out, "-DTR_K=%lld", (long long)tr_call_spec_int(call, "k"));
  tr_intree_add_int(out, "-DTR_RT=%lld", skinny_tiles(S));
  /* chunks a batch: measured on the H200 (bench_gemm.py, 2026-12-01), 8 for x of one row took the
   * 4096x4096 and 14336x4096 rows from 64-80% of copy to 68-88%, but 16 rows from 58-66% to 51-62%;
   * two tiles a warp (above 8 rows) hold two chunks a batch in their registers */
  tr_intree_add_int(out, "-DTR_U=%lld", S <= 8 ? 8 : 2);
  tr_intree_add_int(out, "-DTR_XK=%lld", v.xk == 1 ? 1 : 0);
  out->wide_block = SKINNY_BLOCK; /* the split build: k over a cluster's CTAs */
  if (skinny_wgmma_build(&v)) { /* the split build on sm_90a: wgmma (gemm.cu) */
    tr_intree_add_int(out, "-DTR_WGMMA=%lld", 1);
    const skinny_wg_shape w = skinny_wg_shape_of(v.L, S);
    tr_intree_add_int(out, "-DTR_STAGES=%lld", (long long)w.stages);
    tr_intree_add_int(out, "-DTR_WG_ROWS=%lld", (long long)w.rows);
    tr_intree_add_int(out, "-DTR_WG_SWAP=%lld", (long long)w.swap);
    tr_intree_add_int(out, "-DTR_WG_MCAST=%lld", (long long)w.mcast);
#ifdef TR_SKINNY_WG_MCAST_SYNC
    tr_intree_add_int(out, "-DTR_WG_MCAST_SYNC=%lld", (long long)TR_SKINNY_WG_MCAST_SYNC);
#endif
    out->wide_block = SKINNY_WG_BLOCK;
  }
  out->wide_split = 1;
  out->wide_min_arch = SKINNY_SPLIT_MIN_ARCH;
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  return NULL;
}

/* The wgmma build's split before tuning: the fewest CTAs a cluster (a power of two, at most
 * SKINNY_MAX_SPLIT) that put a CTA on four SMs in five (on two in five for x of at most 32 rows,
 * where less compute hides under the stream), each with at least two 64-wide k tiles. That is
 * the choice tuning made on all six m = 16 and m = 64 Llama rows on the H200 (bench_gemm.py
 * 2026-12-02: 2, 1, 2 at m = 16 and 4, 1, 4 at m = 64 for q/o, mlp up, mlp down); the first guess
 * (nine SMs in ten for every x) was 3-21% slower untuned at m = 16. */
static int64_t skinny_wg_default_split(int64_t L, int64_t S, int64_t k, int32_t sms) {
  const skinny_wg_shape w = skinny_wg_shape_of(L, S);
  int64_t tiles = (L + w.rows - 1) / w.rows, k_tiles = (k + 63) / 64, split = 1;
  if (w.swap) return 1; /* its tiles are about one an SM already */
  if (w.small && (w.rows != 128 || w.smem * 2 > 227 * 1024)) { /* a CTA an SM: one wave, clusters of at most 2 at 128 rows */
    while (split < SKINNY_MAX_SPLIT && tiles * split * 2 <= (int64_t)sms && k_tiles / (split * 2) >= 2 &&
           (w.rows != 128 || split < 2)) {
      split *= 2;
    }
    return split;
  }
  int64_t fifths = S > 32 ? 4 : 2;
  while (split < SKINNY_MAX_SPLIT && tiles * split * 5 < fifths * (int64_t)sms && k_tiles / (split * 2) >= 2) {
    split *= 2;
  }
  return split;
}

/* The split count before tuning. */
static int64_t skinny_default_split(int64_t L, int64_t S, int64_t k, int32_t sms, int have_split) {
  if (!have_split) return 1;
  int64_t rows = 16 * (int64_t)skinny_tiles(S), tiles = (L + rows - 1) / rows, chunks = (k + 31) / 32;
  int64_t split = 1;
  if (skinny_tiles(S) == 2) {
    /* two tiles a warp (x of more than 8 rows): a split of 2 where k allows, but none for more
     * than 32 rows with two CTAs an SM already (measured on the H200, bench_gemm.py 2026-12-02:
     * tuning picked 2 on five of the six m = 16 and m = 64 rows, where the rule below asked for 4
     * at n = 4096 and 1 at n = 14336 and was 18-55% slower; on mlp up at m = 64, 14336 rows, it
     * picked 1: 59.4 us against 63.5 at 2) */
    if (S > 32 && tiles >= 2 * (int64_t)sms) return 1;
    return chunks / 4 >= 8 ? 2 : 1;
  }
  /* about two CTAs an SM (measured on the H200: tuning picked 1 or 2 at n = 4096, where four
   * an SM asked for 4), each warp (4 a CTA) with at least two 32-wide chunks of k */
  while (split < SKINNY_MAX_SPLIT && tiles * split < 2 * (int64_t)sms && chunks / (split * 2) >= 8) split *= 2;
  return split;
}

/* ---- cuBLASLt ---- */

static tr_lt_type lt_type_of(tr_dtype d) {
  return tr_dtype_equal(d, TR_FLOAT16) ? TR_LT_FLOAT16 : tr_dtype_equal(d, TR_BFLOAT16) ? TR_LT_BFLOAT16 : TR_LT_FLOAT32;
}

static void set_config_int(tr_intree_built *k, size_t i, const char *name, int64_t value) {
  k->config[i].name = name;
  k->config[i].value = tr_value_int(value);
}

/* The family's config after the common four: what runs (updated by tuning). */
static size_t describe(tr_intree_built *k) {
  if (k->impl->kind == SKINNY) {
    set_config_int(k, 4, "split", k->ints[3]);
    k->config[5].name = "tuned";
    k->config[5].value = tr_value_bool(k->ints[4] != 0);
    k->config[6].name = "wgmma"; /* the wgmma build runs (16-byte aligned operands); else mma.sync */
    k->config[6].value = tr_value_bool(k->ints[7] == SKINNY_WG_ON);
    return 3;
  }
  tr_lt_gemm *g = k->state;
  tr_lt_choice c = g != NULL ? tr_lt_gemm_choice(g) : (tr_lt_choice){0, 0, 0, 0, 0.f};
  set_config_int(k, 4, "algorithm", c.index);
  set_config_int(k, 5, "algorithms_offered", c.offered);
  set_config_int(k, 6, "workspace", (int64_t)c.workspace);
  k->config[7].name = "tuned";
  k->config[7].value = tr_value_bool(c.tuned != 0);
  return 4;
}

/* The skinny kernel's launch values: ints[0] x_is_a, [1] S, [2] L, [3] the split count, [4]
 * tuned, [5] k, [6] the tr_lt_type of the dtype (tuning's data), [7] the wgmma build's state
 * (SKINNY_WG_*); reals[0..3] xs, xk, ys, yl (exact: strides below 2^53); with the wgmma build on,
 * k->state is the cache of its last two tensor maps (w's, x's). cuBLASLt's: ints[0..2] m, n, k
 * and its GEMM in k->state (none where m, n or k is 0). */
static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  int64_t m = tr_call_spec_int(call, "m"), n = tr_call_spec_int(call, "n"), kk = tr_call_spec_int(call, "k");
  if (k->impl->kind == SKINNY) {
    skinny_view v;
    if (!skinny_view_of(call, &v)) return TR_STATUS(TR_BACKEND, "kernel '%s': no skinny layout", k->key);
    k->ints[0] = v.x_is_a;
    k->ints[1] = v.S;
    k->ints[2] = v.L;
    k->ints[3] = skinny_default_split(v.L, v.S, kk, k->sm_count, k->wide.function != NULL);
    k->ints[4] = 0;
    k->ints[5] = kk;
    k->ints[6] = lt_type_of(tr_call_spec_get(call, "dtype")->as.dtype);
    k->ints[7] = SKINNY_WG_NONE;
    k->reals[0] = (double)v.xs;
    k->reals[1] = (double)v.xk;
    k->reals[2] = (double)v.ys;
    k->reals[3] = (double)v.yl;
    if (skinny_wgmma_build(&v) && call->facts.arch == SKINNY_WG_ARCH && k->wide.function != NULL) {
      k->ints[7] = SKINNY_WG_OFF; /* wide.function is the wgmma kernel: never launched without maps */
      int64_t smem = skinny_wg_shape_of(v.L, v.S).smem, budget = call->facts.smem_budget;
      if (tr_cu_has_tensor_maps() && (budget <= 0 || smem <= budget)) {
        tr_cuda_map_cache *maps = NULL;
        TR_RETURN_IF_ERROR(tr_cuda_map_cache_new(&maps));
        k->state = maps;
        TR_RETURN_IF_ERROR(tr_cu_function_set_smem(k->wide.function, (int)smem));
        k->ints[7] = SKINNY_WG_ON;
        k->ints[3] = skinny_wg_default_split(v.L, v.S, kk, k->sm_count);
      }
    }
    return NULL;
  }
  k->ints[0] = m;
  k->ints[1] = n;
  k->ints[2] = kk;
  if (m < 1 || n < 1 || kk < 1) return NULL; /* nothing to multiply: the launch writes zeros, or nothing */
  tr_lt_shape shape = {lt_type_of(tr_call_spec_get(call, "dtype")->as.dtype), call_bool(call, "trans_a"),
                       call_bool(call, "trans_b"), m, n, kk};
  tr_lt_gemm *g = NULL;
  TR_RETURN_IF_ERROR(tr_lt_gemm_new(k->index, &shape, &g));
  k->state = g;
  return NULL;
}

/* The wgmma build's maps for w [L][K] (box 64 k x the shape's rows) and x [S][K] (box 64 k x the rows
 * rounded up to 8), both swizzled by 128 bytes: the kernel's last ones where its operands are
 * these (k->state; the key's dims are K, L, S and its strides w's and x's rows), else encoded
 * and kept. The driver's refusal as its status. */
static tr_cuda_map_key skinny_map_key(const tr_intree_built *k, const void *w, const void *x) {
  uint64_t K = (uint64_t)k->ints[5], L = (uint64_t)k->ints[2], S = (uint64_t)k->ints[1];
  const tr_cuda_map_key key = {{w, x}, {K, L, S}, {K * 2, (uint64_t)k->reals[0] * 2}};
  return key;
}
static tr_status *skinny_encode(const void *ctx, const tr_cuda_map_key *key, tr_cu_tensor_map maps[2]) {
  const tr_intree_built *k = ctx;
  const uint64_t w_dims[2] = {key->dims[0], key->dims[1]}, x_dims[2] = {key->dims[0], key->dims[2]};
  const skinny_wg_shape shape = skinny_wg_shape_of(k->ints[2], k->ints[1]);
  /* multicast: each CTA of the two copies half of x's rows */
  const uint32_t w_box[2] = {64, (uint32_t)shape.rows}, x_box[2] = {64, (uint32_t)(shape.x_rows >> shape.mcast)};
  TR_RETURN_IF_ERROR(tr_cu_tensor_map_u16(&maps[0], key->base[0], 2, w_dims, &key->strides[0], w_box, 1));
  return tr_cu_tensor_map_u16(&maps[1], key->base[1], 2, x_dims, &key->strides[1], x_box, 1);
}
static tr_status *skinny_maps(const tr_intree_built *k, const void *w, const void *x, tr_cu_tensor_map maps[2]) {
  const tr_cuda_map_key key = skinny_map_key(k, w, x);
  return tr_cuda_map_cache_fetch(k->state, &key, skinny_encode, k, maps);
}

/* One skinny launch at `split` CTAs a cluster: the wgmma build where it is on and w and x are
 * 16-byte aligned (`given`: their maps, else skinny_maps'), else the mma.sync kernels (split
 * where split > 1; in a wgmma build's module its "any" entry, which checks the alignment itself).
 * A layout the driver encodes no map of, and a device that launches no clusters, take the
 * mma.sync path. */
static tr_status *skinny_launch(const tr_intree_built *k, const void *w, const void *x, void *y, int64_t split,
                                const tr_cu_tensor_map *given, tr_cu_stream stream) {
  int64_t L = k->ints[2], S = k->ints[1];
  int64_t xs = (int64_t)k->reals[0], xk = (int64_t)k->reals[1], ys = (int64_t)k->reals[2], yl = (int64_t)k->reals[3];
  int aligned = ((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0;
  tr_cu_tensor_map maps[2];
  void *args[] = {(void *)&w, (void *)&x, &y, &L, &xs, &xk, &ys, &yl, &maps[0], &maps[1]};
  if (k->ints[7] == SKINNY_WG_ON && aligned && L <= INT32_MAX) {
    tr_status *status = NULL;
    if (given != NULL) memcpy(maps, given, sizeof(maps));
    else status = skinny_maps(k, w, x, maps);
    if (status == NULL) {
      const skinny_wg_shape wg = skinny_wg_shape_of(L, S);
      int64_t tiles = (L + wg.rows - 1) / wg.rows;
      /* multicast: clusters of two tiles (an even count: the last may be past w), k unsplit */
      int64_t grid = wg.mcast ? (tiles + 1) / 2 * 2 : tiles * split, cluster = wg.mcast ? 2 : split;
      status = tr_cu_launch_cluster(k->wide.function, k->key, (uint32_t)grid, (uint32_t)cluster, k->wide_threads,
                                    (uint32_t)wg.smem, stream, args, k->overlap);
      if (status == NULL) return NULL;
    }
    tr_status_destroy(&status); /* no map of this layout, or no clusters here: mma.sync */
  }
  int64_t rows = 16 * (int64_t)skinny_tiles(S), tiles = (L + rows - 1) / rows;
  if (split > 1 && k->wide.function != NULL) {
    tr_cu_function f = k->ints[7] != SKINNY_WG_NONE ? k->wide.any : aligned ? k->wide.function : k->wide.any;
    tr_status *clustered = tr_cu_launch_cluster(f, k->key, (uint32_t)(tiles * split), (uint32_t)split, k->wide_threads,
                                                0, stream, args, k->overlap);
    if (clustered == NULL) return NULL;
    tr_status_destroy(&clustered); /* no clusters here (MPS, a partitioned GPU): unsplit */
  }
  tr_cu_function f = aligned ? k->narrow.function : k->narrow.any;
  return tr_cu_launch_ex(f, k->key, (uint32_t)tiles, 1, k->block, 0, stream, args, k->overlap);
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  (void)n_in;
  void *a = tr_intree_data(in[0]), *b = tr_intree_data(in[1]), *d = tr_intree_data(out[0]);
  if (k->impl->kind == SKINNY) {
    return k->ints[0] ? skinny_launch(k, b, a, d, k->ints[3], NULL, stream)
                      : skinny_launch(k, a, b, d, k->ints[3], NULL, stream);
  }
  if (k->state == NULL) { /* k = 0: d is zeros (m or n of 0: no elements, never launched) */
    size_t bytes = (size_t)tr_intree_numel(out[0]) * (size_t)(out[0]->dtype.bits / 8);
    return tr_cu_memset_async((tr_cu_ptr)(uintptr_t)d, 0, bytes, stream);
  }
  return tr_lt_gemm_run(k->state, a, b, d, stream);
}

/* One timed run of the skinny kernel at a split count: weight set `rep % sets` (with the wgmma
 * build, its maps: maps[2 * set], or NULL where none were made). */
typedef struct timed_split {
  const tr_intree_built *k;
  const tr_cu_ptr *w;
  tr_cu_ptr x, y;
  int64_t split;
  int sets;
  const tr_cu_tensor_map *maps;
} timed_split;

static tr_status *run_split(void *ctx, int rep, tr_cu_stream stream) {
  const timed_split *t = ctx;
  int set = rep % t->sets;
  return skinny_launch(t->k, (void *)(uintptr_t)t->w[set], (void *)(uintptr_t)t->x, (void *)(uintptr_t)t->y,
                       t->split, t->maps != NULL ? &t->maps[2 * set] : NULL, stream);
}

/* Times each split count (1, 2, 4, 8 where the split build loaded; every count from 1 to 8 with
 * -DTR_SKINNY_TUNE_EVERY_SPLIT=1: on m = 64 14336x4096, 112 tiles, a split of 7 would make
 * nearly three full waves of two CTAs an SM, but on an H100 the tuner still chose 1 there and 2 or
 * 1 elsewhere, as with the powers of two, 2026-12-05) on buffers of the kernel's own (values
 * spread over [-1, 1), weights in up to 8 sets rotated so that about 128 MB are read: a model's
 * layers each bring their own), keeping the fastest. */
#ifndef TR_SKINNY_TUNE_EVERY_SPLIT
#define TR_SKINNY_TUNE_EVERY_SPLIT 0
#endif
static tr_status *tune_skinny(tr_intree_built *k, tr_cu_stream stream, tr_lt_type type) {
  enum { SETS = 8, REPS = 24 };
  int64_t S = k->ints[1], L = k->ints[2], kk = k->ints[5];
  const size_t elem = 2; /* float16 or bfloat16 */
  size_t w_count = (size_t)(L * kk), x_count = (size_t)(S * kk);
  size_t w_bytes = w_count * elem, x_bytes = x_count * elem, y_bytes = (size_t)(S * L) * elem;
  int sets = (int)((((size_t)128 << 20) + w_bytes - 1) / w_bytes);
  sets = sets < 1 ? 1 : sets > SETS ? SETS : sets;
  tr_cu_ptr w[SETS] = {0}, x = 0, y = 0;
  tr_cu_event start = NULL, end = NULL;
  tr_status *status = NULL;
  for (int j = 0; j < sets && status == NULL; j++) {
    status = tr_cu_alloc(w_bytes, &w[j]);
    if (status == NULL) status = tr_lt_fill_random(w[j], w_count, type);
  }
  if (status == NULL) status = tr_cu_alloc(x_bytes, &x);
  if (status == NULL) status = tr_lt_fill_random(x, x_count, type);
  if (status == NULL) status = tr_cu_alloc(y_bytes, &y);
  if (status == NULL) status = tr_cu_event_new(&start);
  if (status == NULL) status = tr_cu_event_new(&end);
  /* the wgmma build's maps, made before the timing (the launches then encode none) */
  tr_cu_tensor_map maps[2 * SETS];
  int have_maps = status == NULL && k->ints[7] == SKINNY_WG_ON;
  for (int j = 0; j < sets && have_maps; j++) {
    const tr_cuda_map_key key = skinny_map_key(k, (void *)(uintptr_t)w[j], (void *)(uintptr_t)x);
    tr_status *made = skinny_encode(k, &key, &maps[2 * j]);
    have_maps = made == NULL; /* else each launch tries, and takes the mma.sync path */
    tr_status_destroy(&made);
  }
  int64_t best = k->ints[3];
  float best_us = 0.f;
  /* x's strides as the call has them: the buffer is laid out alike (S * K elements) */
  /* the multicast build's clusters are two tiles, never a split of k */
  int64_t most = k->wide.function == NULL || (k->ints[7] == SKINNY_WG_ON && skinny_wg_shape_of(L, S).mcast)
                     ? 1
                     : SKINNY_MAX_SPLIT;
  for (int64_t split = 1; split <= most && status == NULL;
       split = TR_SKINNY_TUNE_EVERY_SPLIT ? split + 1 : split * 2) {
    timed_split t = {k, w, x, y, split, sets, have_maps ? maps : NULL};
    float us = 0.f;
    status = tr_cuda_time_runs(run_split, &t, TR_CUDA_TUNE_WARMUPS, REPS, stream, start, end, &us);
    if (status == NULL && (best_us == 0.f || us < best_us)) {
      best_us = us;
      best = split;
    }
  }
  tr_cu_event_destroy(start);
  tr_cu_event_destroy(end);
  for (int j = 0; j < sets; j++) {
    if (w[j]) tr_cu_free(w[j]);
  }
  if (x) tr_cu_free(x);
  if (y) tr_cu_free(y);
  if (status != NULL) return status;
  k->ints[3] = best;
  k->ints[4] = 1;
  return NULL;
}

static tr_status *tune(tr_intree_built *k) {
  tr_cu_stream stream = tr_cu_current_stream(k->index);
  if (k->impl->kind == SKINNY) {
    if (k->ints[4]) return NULL;
    if (tr_cu_stream_capturing(stream)) {
      return TR_STATUS(TR_VALUE, "tuning kernel '%s': the stream is being captured into a graph; tune before capturing",
                       k->key);
    }
    return tune_skinny(k, stream, (tr_lt_type)k->ints[6]);
  }
  if (k->state == NULL) return NULL; /* k = 0: nothing runs */
  return tr_lt_gemm_tune(k->state, 8, 20, stream);
}

static void destroy_lt(tr_intree_built *k) { tr_lt_gemm_destroy(k->state); }

static void release(tr_intree_built *k) {
  if (k->impl->kind == CUBLASLT && k->state != NULL) {
    tr__intree_with_context(k, destroy_lt); /* no context to free it in: the workspace stays */
    k->state = NULL;
  }
  if (k->impl->kind == SKINNY) { /* the wgmma build's maps (or NULL) */
    tr_cuda_map_cache *maps = k->state;
    tr_cuda_map_cache_destroy(&maps);
    k->state = NULL;
  }
}

static const tr_kernel_interface *const kIfaces[] = {&kGemmIface};
static const tr_kernel_type *const kTypes[] = {&kCublasLt, &kSkinny};
static const tr_intree_op kOps[] = {{"GemmFwdOp", 1, kIfaces, 2, kTypes, gemm_spec, 0}};

const tr_intree_family tr_intree_gemm_family = {"gemm", 1, kOps, 1, source_for, prepare, launch,
                                                tune, describe, release, NULL};
