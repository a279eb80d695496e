/* attention.c: the attention family: GQADecodeFwdOp on cuda (kernels/src/gqa_decode.cu), its
 * general implementation `gqa_dense_decode`: split-KV, a KV head's query heads packed into one
 * pass over its cache, float32 partials merged by a second kernel. The split count is chosen at
 * launch from the batch, the KV heads, the cache length and the SM count, never compiled in; the
 * partials live in stream-ordered memory taken and given back on the call's stream (inside a
 * graph capture: the graph's own allocation nodes), so one build serves every batch and length.
 *
 * seqlens are values: a row's length is clamped to [0, S] (nothing past S is read; a negative or
 * zero length gives zeros), not checked. */
#include <math.h>
#include <stdio.h>

#include "kernels/cuda/launch.h"
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

enum { DENSE };
enum { DECODE_BLOCK = 128, DECODE_MAX_QT = 8, DECODE_MAX_SPLITS = 128, DECODE_MIN_ROWS_A_SPLIT = 128 };
static const tr_intree_impl kImpls[] = {{&tr_intree_attention_family, DENSE, 0}};

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
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
  int64_t heads = tr_call_spec_int(call, "heads"), kv = tr_call_spec_int(call, "heads_kv");
  if (kv <= 0 || heads % kv != 0 || heads / kv > 256) {
    snprintf(buf, size, "needs heads a multiple of heads_kv, at most 256 query heads a KV head; got heads=%lld, "
             "heads_kv=%lld", (long long)heads, (long long)kv);
    return buf;
  }
  return NULL;
}

TR_INTREE_TYPE(kDense, "gqa_dense_decode", kDecodeIface, kImpls[DENSE], 1, NULL, refusal);

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

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, tr_intree_source *out) {
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  const char *t = tr_intree_c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  int64_t gq = tr_call_spec_int(call, "heads") / tr_call_spec_int(call, "heads_kv");
  out->source = tr_src_gqa_decode;
  out->entry = "tr_gqa";
  out->block = DECODE_BLOCK;
  tr_intree_add_text(out, "-DTR_T=%s", t);
  tr_intree_add_int(out, "-DTR_DIM=%lld", (long long)tr_call_spec_int(call, "dim"));
  tr_intree_add_int(out, "-DTR_GQ=%lld", (long long)gq);
  tr_intree_add_int(out, "-DTR_QT=%lld", (long long)(gq < DECODE_MAX_QT ? gq : DECODE_MAX_QT));
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  return NULL;
}

/* ints[0]: dim; ints[1]: heads_kv; ints[2]: query-head tiles a KV head; reals[0]: scale;
 * reals[1]: softcap. */
static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  int64_t gq = tr_call_spec_int(call, "heads") / tr_call_spec_int(call, "heads_kv");
  k->ints[0] = tr_call_spec_int(call, "dim");
  k->ints[1] = tr_call_spec_int(call, "heads_kv");
  k->ints[2] = (gq + DECODE_MAX_QT - 1) / DECODE_MAX_QT;
  k->reals[0] = tr_call_spec_float(call, "scale");
  k->reals[1] = tr_call_spec_float(call, "softcap");
  if (k->narrow.companion == NULL) return TR_STATUS(TR_BACKEND, "kernel '%s' has no merge entry", k->key);
  return NULL;
}

/* Splits of the KV length: enough CTAs for two waves of the card, each split at least
 * DECODE_MIN_ROWS_A_SPLIT rows, at most DECODE_MAX_SPLITS. */
static int64_t split_count(int64_t units, int64_t S, int32_t sms) {
  int64_t want = (2 * (int64_t)sms + units - 1) / units;
  int64_t most = (S + DECODE_MIN_ROWS_A_SPLIT - 1) / DECODE_MIN_ROWS_A_SPLIT;
  if (want > most) want = most;
  if (want > DECODE_MAX_SPLITS) want = DECODE_MAX_SPLITS;
  return want < 1 ? 1 : want;
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  (void)n_in;
  void *q = tr_intree_data(in[0]), *kc = tr_intree_data(in[1]), *vc = tr_intree_data(in[2]);
  void *seqlens = tr_intree_data(in[3]), *o = tr_intree_data(out[0]);
  int64_t B = in[0]->shape[0], heads = in[0]->shape[1], S = in[1]->shape[1];
  int64_t dim = k->ints[0], heads_kv = k->ints[1], qtiles = k->ints[2];
  int64_t units = B * heads_kv * qtiles;
  if (units > 0x7fffffffLL || B * heads > 0x7fffffffLL) {
    return TR_STATUS(TR_VALUE, "GQADecodeFwdOp: %lld batch rows of %lld heads are more than one launch covers",
                     (long long)B, (long long)heads);
  }
  int64_t splits = S == 0 ? 1 : split_count(units, S, k->sm_count);
  int64_t chunk = S == 0 ? 1 : (S + splits - 1) / splits;
  chunk = (chunk + 31) / 32 * 32;
  if (S > 0) splits = (S + chunk - 1) / chunk;
  size_t part_bytes = (size_t)(B * heads * splits) * (size_t)(dim + 2) * sizeof(float);
  tr_cu_ptr part = 0;
  TR_RETURN_IF_ERROR(tr_cu_alloc_async(part_bytes, stream, &part));
  float *part_o = (float *)(uintptr_t)part;
  float *part_ml = part_o + (size_t)(B * heads * splits) * (size_t)dim;
  int heads_kv_i = (int)heads_kv, splits_i = (int)splits;
  float scale = (float)k->reals[0], softcap = (float)k->reals[1];
  void *split_args[] = {&q, &kc, &vc, &seqlens, &part_o, &part_ml, &S, &heads_kv_i, &splits_i, &chunk, &scale, &softcap};
  tr_status *status = tr_cu_launch_ex(k->narrow.function, k->key, (uint32_t)units, (uint32_t)splits, k->block, 0, stream,
                                      split_args, k->overlap);
  if (status == NULL) {
    void *merge_args[] = {&part_o, &part_ml, &o, &splits_i};
    status = tr_cu_launch_ex(k->narrow.companion, k->key, (uint32_t)(B * heads), 1, (uint32_t)dim, 0, stream,
                             merge_args, k->overlap);
  }
  tr_cu_free_async(part, stream);
  return status;
}

static const tr_kernel_interface *const kIfaces[] = {&kDecodeIface};
static const tr_kernel_type *const kTypes[] = {&kDense};
static const tr_intree_op kOps[] = {{"GQADecodeFwdOp", 1, kIfaces, 1, kTypes, decode_spec, 0}};

const tr_intree_family tr_intree_attention_family = {"attention", 1, kOps, 0, source_for, prepare, launch,
                                                     NULL, NULL, NULL, "_merge"};
