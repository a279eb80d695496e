/* attention_prefill.c: the attention_prefill family: GQAPrefillFwdOp on cuda
 * (kernels/src/gqa_prefill.cu): causal GQA over a prompt, flash-attention style (online softmax
 * over tiles of keys, tensor cores, the tiles above the diagonal skipped). Two implementations:
 * the general `gqa_prefill_flash` (mma.sync, SM80 on) and `gqa_prefill_wgmma` (SM90 only,
 * preferred over it: Hopper's warpgroup products). The dtype, head dim and tile shape are
 * compiled in; the batch, the length, the heads and the group size are launch values, so one
 * build serves every prompt. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/cuda/launch.h"
#include "kernels/intree/family.h"

static const tr_call_field kPrefillFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"heads", TR_VALUE_INT, 0, 0, {0}},
    {"heads_kv", TR_VALUE_INT, 0, 0, {0}},
    {"dim", TR_VALUE_INT, 0, 0, {0}},
    {"scale", TR_VALUE_FLOAT, 0, 0, {0}},
};
static const tr_call_spec_type kPrefillCall = {"AttentionPrefillCall", 5, kPrefillFields};

static const char *const kPrefillArgs[] = {"q", "k", "v", NULL};
static const char *const kO[] = {"o"};

static const tr_kernel_interface kPrefillIface = {
    "GQAPrefillFwdInterface", &kPrefillCall, 3, kPrefillArgs, 1, kO,
    "q [B, L, heads, dim], k and v [B, L, heads_kv, dim] contiguous, on one cuda device; "
    "returns o [B, L, heads, dim]; query row i attends causally to keys 0..i, query head h to KV head "
    "h / (heads / heads_kv); nothing written in place"};

/* FLASH `gqa_prefill_flash`, general (SM80 on): mma.sync, warps of m16 tiles; WGMMA
 * `gqa_prefill_wgmma`, SM90 only, preferred over it: Hopper's warpgroup products (wgmma), the
 * same kernel file's -DTR_WGMMA build, whose unaligned entry is the general kernel's. */
enum { FLASH, WGMMA };
enum { PREFILL_BLOCK = 128 }; /* 4 warps */
/* Query rows a CTA: 64 * PREFILL_WM (gqa_prefill.cu's TR_WM, m16 tiles a warp); keys a tile: 64.
 * Two m16 tiles a warp halve the shared-memory reads a tensor-core op takes: 0.90-0.92x sdpa at
 * batch 4 where one tile a warp gave 0.86-0.89x (bench_prefill.py, H200, 2026-12-03). */
#ifndef PREFILL_WM
#define PREFILL_WM 2
#endif
enum { PREFILL_BN = 64 };
enum { WGMMA_BLOCK = 256 }; /* two warpgroups */
static const tr_intree_impl kImpls[] = {{&tr_intree_attention_prefill_family, FLASH, 0},
                                        {&tr_intree_attention_prefill_family, WGMMA, 0}};

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  const char *why = tr_intree_attention_refusal(call, buf, size);
  if (why != NULL) return why;
  int64_t heads = tr_call_spec_int(call, "heads"), kv = tr_call_spec_int(call, "heads_kv");
  if (kv <= 0 || heads <= 0 || heads % kv != 0) {
    snprintf(buf, size, "needs heads a positive multiple of heads_kv; got heads=%lld, heads_kv=%lld",
             (long long)heads, (long long)kv);
    return buf;
  }
  return NULL;
}

static const int32_t kSm90[] = {90};
static const char *const kWgmmaWins[] = {"gqa_prefill_flash", NULL};

TR_INTREE_TYPE(kFlash, "gqa_prefill_flash", kPrefillIface, kImpls[FLASH], 1, NULL, refusal);
TR_INTREE_TYPE_ARCHS(kWgmma, "gqa_prefill_wgmma", kPrefillIface, kImpls[WGMMA], 0, kWgmmaWins, refusal, kSm90, 1);

static tr_status *prefill_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params,
                               size_t n_params, const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kPrefillIface.name;
  if (n_in < 3 || in[0] == NULL || in[0]->rank != 4 || in[1] == NULL || in[1]->rank != 4) {
    return TR_STATUS(TR_VALUE, "GQAPrefillFwdOp: the in-tree kernels need q [B, L, heads, dim], k and v "
                               "[B, L, heads_kv, dim]");
  }
  const tr_value *h = tr_intree_param(params, n_params, "heads"), *kv = tr_intree_param(params, n_params, "heads_kv");
  const tr_value *dim = tr_intree_param(params, n_params, "dim"), *scale = tr_intree_param(params, n_params, "scale");
  if (h == NULL || kv == NULL || dim == NULL) {
    return TR_STATUS(TR_VALUE, "GQAPrefillFwdOp: the in-tree kernels need the params heads, heads_kv and dim");
  }
  double s = scale == NULL || scale->kind == TR_VALUE_NONE ? 1.0 / sqrt((double)(dim->as.i > 0 ? dim->as.i : 1))
             : scale->kind == TR_VALUE_INT ? (double)scale->as.i : scale->as.f;
  tr_named_value v[5] = {{"dtype", tr_value_dtype(in[0]->dtype)}, {"heads", tr_value_int(h->as.i)},
                         {"heads_kv", tr_value_int(kv->as.i)},     {"dim", tr_value_int(dim->as.i)},
                         {"scale", tr_value_float(s)}};
  return tr_call_spec_init(out, &kPrefillCall, device, v, 5);
}

/* The wgmma build's shared memory: tiles of 64 rows (Q's two, K's and V's two each, or with
 * TR_WG_OWN two each a warpgroup), 1 KiB to align them. TR_WG_OWN 1: each warpgroup loads and
 * waits for its own K and V tiles (named barriers), so the two drift apart and one's softmax runs
 * under the other's tensor-core products: 284-287 TFLOPS -> 292-298 at batch 4 and 274-281 ->
 * 294-298 at batch 1 against the CTA's shared tiles; shared tiles with registers bounded for two
 * CTAs an SM (TR_WG_CTAS 2, spilling) gave 245-265; issuing the next tile's Q.K^T before the
 * current tile's softmax (FA3's intra-warpgroup overlap: 254 registers) 282-284 against 301-302
 * (bench_prefill.py, H200, 2026-12-03). */
#ifndef TR_WG_OWN
#define TR_WG_OWN 1
#endif
#ifndef TR_WG_CTAS
#define TR_WG_CTAS 1 /* CTAs an SM the kernel's registers are bounded for */
#endif
static int64_t wgmma_smem(int64_t dim) { return (TR_WG_OWN ? 10 : 6) * 64 * dim * 2 + 1024; }

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                             tr_intree_source *out) {
  (void)arch; /* one source for every architecture */
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  const char *t = tr_intree_c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  int wgmma = ((const tr_intree_impl *)type->ctx)->kind == WGMMA;
  out->source = tr_src_gqa_prefill;
  out->entry = "tr_gqa_prefill";
  out->block = wgmma ? WGMMA_BLOCK : PREFILL_BLOCK; /* the aligned entry's; the unaligned one's: PREFILL_BLOCK */
  tr_intree_add_text(out, "-DTR_T=%s", t);
  tr_intree_add_int(out, "-DTR_DIM=%lld", (long long)tr_call_spec_int(call, "dim"));
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)PREFILL_BLOCK);
  tr_intree_add_int(out, "-DTR_WM=%lld", (long long)PREFILL_WM);
  if (wgmma) {
    tr_intree_add_int(out, "-DTR_WGMMA=%lld", 1);
    tr_intree_add_int(out, "-DTR_WG_OWN=%lld", TR_WG_OWN);
    tr_intree_add_int(out, "-DTR_WG_CTAS=%lld", TR_WG_CTAS);
  }
  return NULL;
}

/* Where prepare keeps the launch values. ROWS: query rows a CTA (both entries: 128); SMEM: the
 * aligned entry's dynamic shared memory, ANY_SMEM the unaligned one's (the general kernel's: Q's
 * rows, then a tile of K and one of V). */
enum { DIM_AT, HEADS_AT, HEADS_KV_AT, ROWS_AT, SMEM_AT, ANY_SMEM_AT }; /* k->ints */
enum { SCALE_AT };                                                     /* k->reals */


static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  int64_t dim = tr_call_spec_int(call, "dim"), rows = 64 * (int64_t)PREFILL_WM;
  int64_t any_smem = (rows + 2 * PREFILL_BN) * dim * 2; /* 16-bit elements */
  int64_t smem = k->impl->kind == WGMMA ? wgmma_smem(dim) : any_smem;
  k->ints[DIM_AT] = dim;
  k->ints[HEADS_AT] = tr_call_spec_int(call, "heads");
  k->ints[HEADS_KV_AT] = tr_call_spec_int(call, "heads_kv");
  k->ints[ROWS_AT] = rows; /* the wgmma build's too: two warpgroups of 64 */
  k->ints[SMEM_AT] = smem;
  k->ints[ANY_SMEM_AT] = any_smem;
  k->reals[SCALE_AT] = tr_call_spec_float(call, "scale");
  if (k->narrow.any == NULL) {
    return TR_STATUS(TR_BACKEND, "kernel '%s' has no entry 'tr_gqa_prefill_any' for unaligned tensors", k->key);
  }
  TR_RETURN_IF_ERROR(tr_intree_smem_fits(k, call, smem > any_smem ? smem : any_smem));
  TR_RETURN_IF_ERROR(tr_cu_function_set_smem(k->narrow.function, (int)smem));
  return tr_cu_function_set_smem(k->narrow.any, (int)any_smem);
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  (void)n_in;
  void *q = tr_intree_data(in[0]), *kk = tr_intree_data(in[1]), *v = tr_intree_data(in[2]);
  void *o = tr_intree_data(out[0]);
  int64_t B = in[0]->shape[0], L = in[0]->shape[1], heads = k->ints[HEADS_AT], heads_kv = k->ints[HEADS_KV_AT];
  int64_t rows = k->ints[ROWS_AT], tiles = (L + rows - 1) / rows;
  /* grid x: batch rows x heads (at most 2^31 - 1); y: query tiles (at most 65535); L an int */
  if (B * heads > 0x7fffffffLL || tiles > 65535) {
    return TR_STATUS(TR_VALUE, "GQAPrefillFwdOp: %lld batch rows of %lld heads and %lld tokens are more than one "
                     "launch covers (at most 2^31 - 1 rows x heads, %d tokens)",
                     (long long)B, (long long)heads, (long long)L, (int)(65535 * rows));
  }
  int L_i = (int)L, heads_i = (int)heads, heads_kv_i = (int)heads_kv;
  float scale = (float)k->reals[SCALE_AT];
  void *args[] = {&q, &kk, &v, &o, &L_i, &heads_i, &heads_kv_i, &scale};
  int aligned = (((uintptr_t)q | (uintptr_t)kk | (uintptr_t)v | (uintptr_t)o) & 15) == 0;
  if (aligned) {
    return tr_cu_launch_ex(k->narrow.function, k->key, (uint32_t)(B * heads), (uint32_t)tiles, k->block,
                           (uint32_t)k->ints[SMEM_AT], stream, args, k->overlap);
  }
  return tr_cu_launch_ex(k->narrow.any, k->key, (uint32_t)(B * heads), (uint32_t)tiles, PREFILL_BLOCK,
                         (uint32_t)k->ints[ANY_SMEM_AT], stream, args, k->overlap);
}

static const tr_kernel_interface *const kIfaces[] = {&kPrefillIface};
static const tr_kernel_type *const kTypes[] = {&kFlash, &kWgmma};
static const tr_intree_op kOps[] = {{"GQAPrefillFwdOp", 1, kIfaces, 2, kTypes, prefill_spec, 0}};

const tr_intree_family tr_intree_attention_prefill_family = {"attention_prefill", 1, kOps, 1, source_for, prepare,
                                                             launch, NULL, NULL, NULL, NULL};
