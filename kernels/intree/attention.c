/* attention.c: the attention family: GQADecodeFwdOp on cuda (kernels/src/gqa_decode.cu), the
 * three implementations of the kernel-selection spec's worked example (below). Each splits the
 * KV length, packs a KV head's query heads into one pass over its cache on the tensor cores, and
 * writes float32 partials merged by a second kernel (bs1's bulk build, and long-context's on SM90
 * (TR_GQA_LONG_BULK), on caches of at most TR_GQA_CLUSTER_MAX_S rows: one kernel, the splits a
 * cluster's CTAs merged through its shared memory). The split count is chosen at launch from
 * the batch, the KV heads, the cache length and the SM count, never compiled in; the partials
 * live in stream-ordered memory taken and given back on the call's stream (inside a graph
 * capture: the graph's own allocation nodes), so one build serves every batch and length.
 *
 * seqlens are values: a row's length is clamped to [0, S] (nothing past S is read; a negative or
 * zero length gives zeros), not checked. */
#include <math.h>
#include <stdio.h>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/map_cache.h"
#include "kernels/intree/family.h"

/* The spec's AttentionCall (its worked example's fields: batch and seqlen_kv are what its batch-1
 * and long-context implementations refuse by); the build reads neither, so their artifacts are
 * shared by every batch and length. */
static const tr_call_field kDecodeFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"batch", TR_VALUE_INT, 0, 0, {0}},
    {"seqlen_kv", TR_VALUE_INT, 0, 0, {0}},
    {"heads", TR_VALUE_INT, 0, 0, {0}},
    {"heads_kv", TR_VALUE_INT, 0, 0, {0}},
    {"dim", TR_VALUE_INT, 0, 0, {0}},
    {"softcap", TR_VALUE_FLOAT, 0, 1, {.kind = TR_VALUE_FLOAT, .as.f = 0.0}},
    {"scale", TR_VALUE_FLOAT, 0, 0, {0}},
};
static const tr_call_spec_type kDecodeCall = {"AttentionCall", 8, kDecodeFields};

static const char *const kDecodeArgs[] = {"q", "k_cache", "v_cache", "seqlens", NULL};
static const char *const kO[] = {"o"};

static const tr_kernel_interface kDecodeIface = {
    "GQADecodeDenseFwdInterface", &kDecodeCall, 4, kDecodeArgs, 1, kO,
    "q [B, heads, dim], k_cache and v_cache [B, S, heads_kv, dim] contiguous, seqlens [B] int32, on one cuda "
    "device; returns o [B, heads, dim]; row b attends to its first seqlens[b] entries (clamped to [0, S]); "
    "nothing written in place"};

/* The three implementations of the spec's worked example (kernel-selection, table 2):
 * - DENSE `gqa_dense_decode`, general, SM80 on: cp.async rings a warp, tensor cores;
 * - BS1 `gqa_dense_decode_bs1`, SM90 only, batch 1: a producer warp feeds the consumer warps'
 *   tensor cores through Hopper's bulk copies (TMA) into a ring of slots with mbarriers;
 * - LONG `gqa_dense_decode_long_context`, SM80 on, the spec's long-context range (batch 1, KV of
 *   1024 and more, heads 32/4, dim 128, float16, no softcap), preferred over bs1: the spec's
 *   long-context class is a subclass of the general one that changes only which calls it serves,
 *   and on every arch but SM90 it runs the general kernel. Every call it serves is batch 1, so on SM90
 *   it runs bs1's bulk build (the cluster build on caches of at most TR_GQA_CLUSTER_MAX_S rows;
 *   -DTR_GQA_LONG_BULK=0: the general kernel there too). Measured on an H100 (bench_attention.py
 *   --rows kernel-selection, 2026-12-06, five rounds alternating with the general kernel over two
 *   visits): kv 4096 10.53-10.84 us against 11.47-11.69 (0.91-0.92x sdpa's speed, against 0.84),
 *   kv 131072 93.65-95.72 against 94.71-97.37, kv 1024 6.66-6.95 against 6.54-6.81 (about 0.1 us
 *   slower, with 32 MB of caches in rotation, so partly L2-warm: 4 KV heads give the cluster
 *   build 32 CTAs; without the cluster build,
 *   -DTR_GQA_CLUSTER_MAX_S=-1, kv 1024 was 6.71-6.74 and kv 4096 11.69-11.73). The GPU tests pass
 *   with it. */
enum { DENSE, BS1, LONG };
/* Whether a build of `kind` for `arch` is the bulk one (TMA copies, a producer warp; sm_90a's). */
#ifndef TR_GQA_LONG_BULK
#define TR_GQA_LONG_BULK 1
#endif
static int bulk_build(int kind, int32_t arch) {
  return kind == BS1 || (kind == LONG && arch == 90 && TR_GQA_LONG_BULK);
}
enum {
  DECODE_BLOCK = 128,        /* the consumer warps (4); the bulk build adds a producer warp */
  DECODE_MAX_SPLITS = 256,
  DECODE_MIN_ROWS_A_SPLIT = 64, /* a slot (16 rows) for each of the 4 warps */
  MERGE_GROUPS = 4,             /* the merge's groups of dim threads (gqa_decode.cu's MG; its
                                   MERGE_MAX_SPLITS is DECODE_MAX_SPLITS) */
};
/* The bulk build's cluster build serves caches of at most TR_GQA_CLUSTER_MAX_S rows in one kernel: the
 * splits are the CTAs of a cluster of at most TR_GQA_CLUSTER_MAX (above 8 where the driver allows
 * clusters past the portable size), merged through the cluster's shared memory. Measured on the
 * H200 (bench_attention.py, batch 1, 32/8 heads, dim 128, bf16, 2026-12-03): clusters of 8 took
 * kv 1024 from 7.9 us (two kernels) to 7.0-7.1 and kv 4096 from 12.7-12.8 to 10.7-10.9; clusters
 * of 16 were slower than two kernels (8.4 and 12.9), and so was a ring of twice the slots in the
 * cluster build (7.3 and 12.1). With the split's first copies issued before seqlens is read
 * (gqa_decode.cu's bulk_ring), 6.5-6.7 and 10.0-10.3. A CTA streams its split at about 45 GB/s
 * there, so past 4096 rows (8 CTAs a KV head) the two kernels' many splits are the faster
 * choice. Clusters of up to 12 (-DTR_GQA_CLUSTER_MAX=12: kv 4096 as 11 CTAs a KV head) were
 * slower in an A/B on an H100 (2026-12-05, two rounds): kv 4096 13.5 us against 11.4, kv 1024
 * unchanged at 7.2-7.3; so 8 stays. */
#ifndef TR_GQA_CLUSTER_MAX
#define TR_GQA_CLUSTER_MAX 8
#endif
#ifndef TR_GQA_CLUSTER_MAX_S
#define TR_GQA_CLUSTER_MAX_S 4096
#endif
/* A cache short enough for one CTA a KV head (64 rows or fewer) gives clusters of one CTA,
 * launched without the cluster attribute (the kernel writes a cluster of one's o from the CTA's own
 * shared memory, with or without the attribute). An A/B on an H100 (decode_lengths.py 16 64 256, cold L2,
 * 2026-12-06): 16 rows 6.93 us against 7.67 with the attribute, 64 rows 6.99 against 7.70, 256
 * rows (clusters of four) 5.82 against 5.86 (both before the merge changes below);
 * -DTR_GQA_SINGLE_PLAIN=0 turns it off. */
#ifndef TR_GQA_SINGLE_PLAIN
#define TR_GQA_SINGLE_PLAIN 1
#endif
/* The cluster build's merge. A cluster of one writes o from its own shared memory: 16 rows 3.85 us
 * against 6.89 with the cluster's merge (the same launch), 64 rows 3.88 against 7.02 (an A/B on an
 * H100, 2026-12-06, decode_lengths.py). Larger clusters: each CTA stores its parts into the CTA
 * that merges them (push), where each CTA read the others' parts from their shared memory before
 * (pull: two barriers after the work, two round trips a merged element). Two rounds, H100,
 * 2026-12-06 (decode_lengths.py, push against pull): 128 rows 5.37-5.48 us against 6.52-6.56, 256
 * 5.27-5.28 against 5.84-5.88, 512 5.71-5.72 against 6.20-6.25, 1024 6.71-6.74 against 7.17-7.25,
 * 2048 8.07-8.09 against 8.59-8.61, 4096 10.75-10.84 against 11.27-11.34. Tried and not kept:
 * launches asking the whole shared-memory budget, so that no SM holds two of the cluster build's
 * CTAs, were slower (two rounds, H100: kv 512 6.55 us against 6.15, 1024 7.38 against 7.14, 4096
 * 12.63 against 11.17; ncu shows the clusters spread over the SMs already), and so were clusters
 * of 16 that way (kv 1024 12.87 against 7.30). Then (an A/B on an H100, 2026-12-06, one round,
 * decode_lengths.py): the pushes as st.async counted on the receiving CTA's mbarrier, which it
 * waits on, instead of plain stores and a second cluster barrier: 512 rows 5.02 us against 5.64,
 * 1024 6.12 against 6.64, 4096 10.57 against 10.97; and each head's weights in the warps' merge
 * computed once, not at every dim (gqa_decode.cu's merge_warps): 64 rows 3.68 against 3.84, 512
 * 5.51 against 5.67, 1024 6.54 against 6.63, 4096 10.93 against 11.09. Both kept;
 * test_gqa_decode_gpu.py passed with that build (its PTX, compiled here with nvcc, is the one
 * these sources give). */
static const tr_intree_impl kImpls[] = {
    {&tr_intree_attention_family, DENSE, 0},
    {&tr_intree_attention_family, BS1, 0},
    {&tr_intree_attention_family, LONG, 0},
};

/* What every implementation of the interface needs (the general one's refusal; the others end
 * with it, as the spec's overrides end with super().refusal). */
const char *tr_intree_attention_refusal(const tr_call_spec *call, char *buf, size_t size) {
  tr_dtype d = tr_call_spec_get(call, "dtype")->as.dtype;
  if (!tr_dtype_equal(d, TR_FLOAT16) && !tr_dtype_equal(d, TR_BFLOAT16)) {
    snprintf(buf, size, "attends in float16 and bfloat16; got %s", tr_dtype_name(d));
    return buf;
  }
  int64_t dim = tr_call_spec_int(call, "dim");
  if (dim != 64 && dim != 128) {
    snprintf(buf, size, "serves head dims 64 and 128; got dim=%lld", (long long)dim);
    return buf;
  }
  return NULL;
}

static const char *base_refusal(const tr_call_spec *call, char *buf, size_t size) {
  const char *why = tr_intree_attention_refusal(call, buf, size);
  if (why != NULL) return why;
  int64_t heads = tr_call_spec_int(call, "heads"), kv = tr_call_spec_int(call, "heads_kv");
  if (kv <= 0 || heads % kv != 0 || heads / kv > 256) {
    snprintf(buf, size, "needs heads a multiple of heads_kv, at most 256 query heads a KV head; got heads=%lld, "
             "heads_kv=%lld", (long long)heads, (long long)kv);
    return buf;
  }
  return NULL;
}

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  return base_refusal(call, buf, size);
}

static const char *bs1_refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  int64_t batch = tr_call_spec_int(call, "batch");
  if (batch != 1) {
    snprintf(buf, size, "serves batch 1; got batch=%lld", (long long)batch);
    return buf;
  }
  return base_refusal(call, buf, size);
}

/* The spec's GQADecodeLongContextKernel.refusal, word for word where it refuses. Its
 * dense_decode_region and fuse_rope terms have no counterpart here: every GQADecodeFwdOp call is a
 * dense decode, and none fuses RoPE. */
static const char *long_refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  int served = tr_call_spec_int(call, "seqlen_kv") >= 1024 && tr_call_spec_int(call, "batch") == 1 &&
               tr_call_spec_int(call, "heads") == 32 && tr_call_spec_int(call, "heads_kv") == 4 &&
               tr_call_spec_int(call, "dim") == 128 &&
               tr_dtype_equal(tr_call_spec_get(call, "dtype")->as.dtype, TR_FLOAT16) &&
               tr_call_spec_float(call, "softcap") == 0.0;
  if (!served) return "does not serve this call";
  return base_refusal(call, buf, size);
}

static const int32_t kSm90[] = {90};
static const char *const kLongWins[] = {"gqa_dense_decode_bs1", NULL};

TR_INTREE_TYPE(kDense, "gqa_dense_decode", kDecodeIface, kImpls[DENSE], 1, NULL, refusal);
TR_INTREE_TYPE_ARCHS(kBs1, "gqa_dense_decode_bs1", kDecodeIface, kImpls[BS1], 0, NULL, bs1_refusal, kSm90, 1);
TR_INTREE_TYPE(kLong, "gqa_dense_decode_long_context", kDecodeIface, kImpls[LONG], 0, kLongWins, long_refusal);

static tr_status *decode_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params,
                              size_t n_params, const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kDecodeIface.name;
  if (n_in < 4 || in[0] == NULL || in[0]->rank != 3 || in[1] == NULL || in[1]->rank != 4) {
    return TR_STATUS(TR_VALUE, "GQADecodeFwdOp: the in-tree kernels need q [B, heads, dim], the caches and seqlens");
  }
  const tr_value *h = tr_intree_param(params, n_params, "heads"), *kv = tr_intree_param(params, n_params, "heads_kv");
  const tr_value *dim = tr_intree_param(params, n_params, "dim"), *cap = tr_intree_param(params, n_params, "softcap");
  const tr_value *scale = tr_intree_param(params, n_params, "scale");
  if (h == NULL || kv == NULL || dim == NULL) {
    return TR_STATUS(TR_VALUE, "GQADecodeFwdOp: the in-tree kernels need the params heads, heads_kv and dim");
  }
  double s = scale == NULL || scale->kind == TR_VALUE_NONE ? 1.0 / sqrt((double)dim->as.i)
             : scale->kind == TR_VALUE_INT ? (double)scale->as.i : scale->as.f;
  double c = cap == NULL ? 0.0 : cap->kind == TR_VALUE_INT ? (double)cap->as.i : cap->as.f;
  tr_named_value v[8] = {{"dtype", tr_value_dtype(in[0]->dtype)},   {"batch", tr_value_int(in[0]->shape[0])},
                         {"seqlen_kv", tr_value_int(in[1]->shape[1])}, {"heads", tr_value_int(h->as.i)},
                         {"heads_kv", tr_value_int(kv->as.i)},         {"dim", tr_value_int(dim->as.i)},
                         {"softcap", tr_value_float(c)},                {"scale", tr_value_float(s)}};
  return tr_call_spec_init(out, &kDecodeCall, device, v, 8);
}

/* The ring's slots a warp (the general build) or a CTA (the bulk build), and the dynamic shared
 * memory of a build: the rings, or the warps' merge buffers where larger (kernels/src/gqa_decode.cu). */
/* the bulk build's ring slots at dim 128 (32 KiB each); 2, 4 and 5 measured slower on the H200 */
#ifndef TR_GQA_BS1_STAGES
#define TR_GQA_BS1_STAGES 3
#endif
/* the bulk build's copies evict the cache from L2 first: 3.92 -> 3.97 TB/s at kv 131072 */
#ifndef TR_GQA_BS1_EVICT_FIRST
#define TR_GQA_BS1_EVICT_FIRST 1
#endif
/* Not in its cluster build (caches of at most TR_GQA_CLUSTER_MAX_S rows; gqa_decode.cu keeps it off
 * there), as the kv 1024 and 4096 figures above were measured: with it on there, an A/B on an H100
 * (2026-12-06) moved neither by more than 0.1 us (kv 1024 7.36 us against 7.26, kv 4096 11.38
 * against 11.36). */
/* Tried and not kept (an A/B on an H100, 2026-12-06, batch 1, 32/8 heads): q.K^T's k steps summed
 * in two independent accumulators, a tile's chain of dependent products half as long, changed
 * nothing (kv 1024 7.29 us against 7.30, kv 4096 11.44 against 11.42, kv 131072 179.89 against
 * 179.88); eight consumer warps in the cluster build (slots of 128 rows, each warp half the tiles)
 * were slower (kv 1024 8.70 against 7.26, kv 4096 13.83 against 11.36). The consumers' work is not
 * what sets the short rows' time. */
static int64_t ring_stages(int bulk, int64_t dim) {
  return bulk ? (dim == 128 ? TR_GQA_BS1_STAGES : 5) : (dim == 128 ? 3 : 4);
}
static int64_t smem_bytes(int bulk, int64_t dim) {
  const int64_t warps = DECODE_BLOCK / 32, stages = ring_stages(bulk, dim);
  int64_t ring = warps * stages * 2 * 16 * dim * 2; /* bulk: the CTA's slots of 16 rows a warp, as many bytes */
  int64_t merge = (warps * 16 * (dim + 3) + 2 * 16) * 4; /* gqa_decode.cu's MERGE_FLOATS */
  int64_t bytes = ring > merge ? ring : merge;
  return bulk ? bytes + 2 * stages * 8 + 1024 : bytes; /* bulk: the mbarriers, 1 KiB to align the ring */
}

/* The cluster build's receive area (gqa_decode.cu): a max and a sum of
 * each of 16 heads from each of at most 16 CTAs, o of 16 heads' dims and 16 more floats, and an
 * mbarrier. */
static int64_t cluster_recv_bytes(int64_t dim) { return (2 * 16 * 16 + 16 * dim + 16) * 4 + 16; }

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                             tr_intree_source *out) {
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  const char *t = tr_intree_c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  const int bulk = bulk_build(((const tr_intree_impl *)type->ctx)->kind, arch);
  int64_t gq = tr_call_spec_int(call, "heads") / tr_call_spec_int(call, "heads_kv");
  int64_t dim = tr_call_spec_int(call, "dim");
  out->source = tr_src_gqa_decode;
  out->entry = "tr_gqa";
  out->block = DECODE_BLOCK + (bulk ? 32 : 0);
  tr_intree_add_text(out, "-DTR_T=%s", t);
  tr_intree_add_int(out, "-DTR_DIM=%lld", (long long)dim);
  tr_intree_add_int(out, "-DTR_GQ=%lld", (long long)gq);
  tr_intree_add_int(out, "-DTR_STAGES=%lld", (long long)ring_stages(bulk, dim));
  if (bulk) {
    tr_intree_add_int(out, "-DTR_BULK=%lld", 1);
    out->wide_block = out->block; /* the cluster build (-DTR_SPLIT): short caches, one kernel */
    out->wide_split = 1;
    out->wide_min_arch = 90;
  }
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  if (bulk) tr_intree_add_int(out, "-DTR_EVICT_FIRST=%lld", (long long)TR_GQA_BS1_EVICT_FIRST);
  return NULL;
}

/* Where prepare keeps the launch values (the implementation is k->impl->kind). QTILES: tiles of
 * up to 16 query heads a KV head; WAVE_CTAS: the CTAs the card holds at once (its SMs times the
 * CTAs an SM fits), which the split count fills. */
enum { DIM_AT, HEADS_KV_AT, QTILES_AT, SMEM_AT, WAVE_CTAS_AT, CLUSTER_AT, BULK_AT, WIDE_SMEM_AT }; /* k->ints;
    SMEM: dynamic, bytes a CTA (both builds); CLUSTER: the bulk build's most CTAs a cluster (0: no cluster
    build); BULK: bulk_build; WIDE_SMEM: the cluster build's clusters of more than one CTA (SMEM and
    the receive area) */
enum { SCALE_AT, SOFTCAP_AT };                                 /* k->reals */

static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  int64_t gq = tr_call_spec_int(call, "heads") / tr_call_spec_int(call, "heads_kv");
  const int bulk = bulk_build(k->impl->kind, call->facts.arch);
  int64_t smem = smem_bytes(bulk, tr_call_spec_int(call, "dim"));
  k->ints[BULK_AT] = bulk;
  k->ints[DIM_AT] = tr_call_spec_int(call, "dim");
  k->ints[HEADS_KV_AT] = tr_call_spec_int(call, "heads_kv");
  k->ints[QTILES_AT] = (gq + 15) / 16;
  k->ints[SMEM_AT] = smem;
  k->reals[SCALE_AT] = tr_call_spec_float(call, "scale");
  k->reals[SOFTCAP_AT] = tr_call_spec_float(call, "softcap");
  if (k->narrow.companion == NULL) return TR_STATUS(TR_BACKEND, "kernel '%s' has no merge entry", k->key);
  if (bulk) {
    if (!tr_cu_has_tensor_maps()) {
      return TR_STATUS(TR_BACKEND, "kernel '%s' copies through TMA tensor maps; the CUDA driver has no "
                       "cuTensorMapEncodeTiled (a driver older than CUDA 12.0)", k->key);
    }
    tr_cuda_map_cache *maps = NULL; /* the last maps bs1_maps made, k->state */
    TR_RETURN_IF_ERROR(tr_cuda_map_cache_new(&maps));
    k->state = maps;
  }
  TR_RETURN_IF_ERROR(tr_intree_smem_fits(k, call, smem));
  int64_t budget = call->facts.smem_budget;
  /* an SM's shared memory is about the opt-in limit a block and 1 KiB (227 + 1 on sm_90) */
  int64_t per_sm = budget > 0 ? (budget + 1024) / (smem + 1024) : 1;
  k->ints[WAVE_CTAS_AT] = (int64_t)k->sm_count * (per_sm < 1 ? 1 : per_sm);
  k->ints[CLUSTER_AT] = 0;
  if (bulk && k->wide.function != NULL) {
    int64_t wide_smem = smem + cluster_recv_bytes(k->ints[DIM_AT]);
    if (budget <= 0 || wide_smem <= budget) { /* else (a ring of many stages) the two kernels only */
      TR_RETURN_IF_ERROR(tr_cu_function_set_smem(k->wide.function, (int)wide_smem));
      k->ints[WIDE_SMEM_AT] = wide_smem;
      int64_t most = TR_GQA_CLUSTER_MAX;
      if (most > 8 && !tr_cu_function_allow_wide_clusters(k->wide.function)) most = 8;
      k->ints[CLUSTER_AT] = most;
    }
  }
  return tr_cu_function_set_smem(k->narrow.function, (int)smem);
}

static void release(tr_intree_built *k) {
  tr_cuda_map_cache *maps = k->state;
  tr_cuda_map_cache_destroy(&maps);
  k->state = NULL;
}

/* Splits of the KV length: as many as fill one wave of CTAs on the card and no more (a second,
 * partial wave would leave SMs idle while it runs), each split at least DECODE_MIN_ROWS_A_SPLIT
 * rows, at most DECODE_MAX_SPLITS. */
static int64_t split_count(int64_t units, int64_t S, int64_t wave_ctas) {
  int64_t want = wave_ctas / units;
  int64_t most = (S + DECODE_MIN_ROWS_A_SPLIT - 1) / DECODE_MIN_ROWS_A_SPLIT;
  if (want > most) want = most;
  if (want > DECODE_MAX_SPLITS) want = DECODE_MAX_SPLITS;
  return want < 1 ? 1 : want;
}

/* S rows in at most `want` splits of a whole number of DECODE_MIN_ROWS_A_SPLIT rows each (a slot
 * for each consumer warp): the rows a split in *chunk, and the count (an empty cache: one split,
 * which reads nothing). */
static int64_t split_rows(int64_t S, int64_t want, int64_t *chunk) {
  const int64_t rows = S == 0 ? 1 : (S + want - 1) / want;
  *chunk = (rows + DECODE_MIN_ROWS_A_SPLIT - 1) / DECODE_MIN_ROWS_A_SPLIT * DECODE_MIN_ROWS_A_SPLIT;
  return S == 0 ? 1 : (S + *chunk - 1) / *chunk;
}

/* The bulk build's tensor map of one cache (`which`: "k_cache" or "v_cache"): [S][heads_kv][dim] of batch
 * row 0 (dims innermost first), boxes of 64 dims x one head x 64 rows, swizzled by 128 bytes. An
 * encoding the driver refuses keeps its code, named with the kernel, the cache and the dims. */
static tr_status *cache_map(const tr_intree_built *k, const char *which, const void *base, const uint64_t dims[3],
                            const uint64_t strides[2], tr_cu_tensor_map *out) {
  static const uint32_t box[3] = {64, 1, 64};
  tr_status *made = tr_cu_tensor_map_u16(out, base, 3, dims, strides, box, 1);
  if (made == NULL) return NULL;
  tr_status *named = TR_STATUS(tr_status_code(made), "kernel '%s': the tensor map of %s (dims %llu x %llu x %llu, "
                               "box 64 x 1 x 64): %s", k->key, which, (unsigned long long)dims[0],
                               (unsigned long long)dims[1], (unsigned long long)dims[2], tr_status_message(made));
  tr_status_destroy(&made);
  return named;
}

/* Both caches' maps for the map cache (`ctx`: the kernel). */
static tr_status *bs1_encode(const void *ctx, const tr_cuda_map_key *key, tr_cu_tensor_map maps[2]) {
  const tr_intree_built *k = ctx;
  TR_RETURN_IF_ERROR(cache_map(k, "k_cache", key->base[0], key->dims, key->strides, &maps[0]));
  return cache_map(k, "v_cache", key->base[1], key->dims, key->strides, &maps[1]);
}

/* The bulk build's checks and its caches' two maps, made before the launch allocates anything: the maps of
 * the kernel's last call where its caches were these (pointers, length, layout: k->state, shared
 * by the threads calling the kernel), else encoded and kept. maps is left as given (zeros: the
 * kernel reads none) where the kernel takes no tensor copies: an empty cache (S = 0 gives zeros;
 * a map cannot have an empty dimension) and caches not both 16-byte aligned (read through
 * registers, as by the general kernel). */
static tr_status *bs1_maps(const tr_intree_built *k, int64_t B, int64_t S, const void *kc, const void *vc,
                           tr_cu_tensor_map maps[2]) {
  if (S == 0 || ((uintptr_t)kc & 15) != 0 || ((uintptr_t)vc & 15) != 0) return NULL;
  if (B != 1) { /* the refusal keeps it so: the maps cover batch row 0 */
    return TR_STATUS(TR_BACKEND, "kernel '%s' serves batch 1; launched with batch %lld", k->key, (long long)B);
  }
  if (S > 0x7fffffffLL) {
    return TR_STATUS(TR_VALUE, "GQADecodeFwdOp: kernel '%s' indexes caches of at most 2^31 - 1 rows; got %lld", k->key,
                     (long long)S);
  }
  uint64_t dim = (uint64_t)k->ints[DIM_AT], heads_kv = (uint64_t)k->ints[HEADS_KV_AT];
  const tr_cuda_map_key key = {{kc, vc}, {dim, heads_kv, (uint64_t)S}, {dim * 2, heads_kv * dim * 2}};
  return tr_cuda_map_cache_fetch(k->state, &key, bs1_encode, k, maps);
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  (void)n_in;
  void *q = tr_intree_data(in[0]), *kc = tr_intree_data(in[1]), *vc = tr_intree_data(in[2]);
  void *seqlens = tr_intree_data(in[3]), *o = tr_intree_data(out[0]);
  int64_t B = in[0]->shape[0], heads = in[0]->shape[1], S = in[1]->shape[1];
  int64_t dim = k->ints[DIM_AT], heads_kv = k->ints[HEADS_KV_AT], qtiles = k->ints[QTILES_AT];
  int64_t units = B * heads_kv * qtiles;
  if (units > 0x7fffffffLL || B * heads > 0x7fffffffLL) {
    return TR_STATUS(TR_VALUE, "GQADecodeFwdOp: %lld batch rows of %lld heads are more than one launch covers",
                     (long long)B, (long long)heads);
  }
  tr_cu_tensor_map maps[2] = {{{0}}, {{0}}}; /* k_cache's, v_cache's: the bulk build's only */
  if (k->ints[BULK_AT]) TR_RETURN_IF_ERROR(bs1_maps(k, B, S, kc, vc, maps));
  float scale = (float)k->reals[SCALE_AT], softcap = (float)k->reals[SOFTCAP_AT];
  int heads_kv_i = (int)heads_kv;
  if (k->ints[CLUSTER_AT] > 0 && S <= TR_GQA_CLUSTER_MAX_S) { /* the bulk build, a short cache: one kernel */
    int64_t chunk, ctas = split_rows(S, k->ints[CLUSTER_AT], &chunk);
    void *args[] = {&q, &kc, &vc, &seqlens, &o, &S, &heads_kv_i, &chunk, &scale, &softcap, &maps[0], &maps[1]};
    tr_status *status =
        TR_GQA_SINGLE_PLAIN && ctas == 1
            ? tr_cu_launch_ex(k->wide.function, k->key, (uint32_t)units, 1, k->wide_threads,
                              (uint32_t)k->ints[SMEM_AT], stream, args, k->overlap) /* no receive area */
            : tr_cu_launch_cluster(k->wide.function, k->key, (uint32_t)(units * ctas), (uint32_t)ctas,
                                   k->wide_threads, (uint32_t)k->ints[WIDE_SMEM_AT], stream, args, k->overlap);
    if (status == NULL) return NULL;
    tr_status_destroy(&status); /* no clusters here (MPS, a partitioned GPU): the two kernels */
  }
  int64_t chunk, splits = split_rows(S, S == 0 ? 1 : split_count(units, S, k->ints[WAVE_CTAS_AT]), &chunk);
  size_t part_bytes = (size_t)(B * heads * splits) * (size_t)(dim + 2) * sizeof(float);
  tr_cu_ptr part = 0;
  TR_RETURN_IF_ERROR(tr_cu_alloc_async(part_bytes, stream, &part));
  float *part_o = (float *)(uintptr_t)part;
  float *part_ml = part_o + (size_t)(B * heads * splits) * (size_t)dim;
  int splits_i = (int)splits;
  void *split_args[] = {&q,        &kc,    &vc,    &seqlens, &part_o,  &part_ml, &S,       &heads_kv_i,
                        &splits_i, &chunk, &scale, &softcap, &maps[0], &maps[1]};
  tr_status *status = tr_cu_launch_ex(k->narrow.function, k->key, (uint32_t)units, (uint32_t)splits, k->block,
                                      (uint32_t)k->ints[SMEM_AT], stream, split_args, k->overlap);
  if (status == NULL) {
    void *merge_args[] = {&part_o, &part_ml, &o, &splits_i};
    status = tr_cu_launch_ex(k->narrow.companion, k->key, (uint32_t)(B * heads), 1, (uint32_t)(dim * MERGE_GROUPS), 0,
                             stream, merge_args, k->overlap);
  }
  tr_cu_free_async(part, stream);
  return status;
}

static const tr_kernel_interface *const kIfaces[] = {&kDecodeIface};
static const tr_kernel_type *const kTypes[] = {&kDense, &kBs1, &kLong};
static const tr_intree_op kOps[] = {{"GQADecodeFwdOp", 1, kIfaces, 3, kTypes, decode_spec, 0}};

const tr_intree_family tr_intree_attention_family = {"attention", 1, kOps, 0, source_for, prepare, launch,
                                                     NULL, NULL, release, "_merge"};
