/* norm.c: the norm family: RMSNorm and LayerNorm over rows (kernels/src/norm.cu), a warp per row
 * up to 1024 elements, else the looped kernel. */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/launch.h"
#include "kernels/intree/family.h"
#include "platform/platform.h"

static const tr_call_field kNormFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"row", TR_VALUE_INT, 0, 0, {0}},
    {"weight", TR_VALUE_BOOL, 0, 1, {.kind = TR_VALUE_BOOL, .as.b = false}},
    {"bias", TR_VALUE_BOOL, 0, 1, {.kind = TR_VALUE_BOOL, .as.b = false}},
    {"eps", TR_VALUE_FLOAT, 0, 1, {.kind = TR_VALUE_FLOAT, .as.f = 1e-5}},
};
static const tr_call_spec_type kNormCall = {"NormCall", 5, kNormFields};

static const char *const kRmsArgs[] = {"x", "weight", NULL};
static const char *const kLayerArgs[] = {"x", "weight", "bias", NULL};
static const char *const kY[] = {"y"};

static const tr_kernel_interface kRmsIface = {
    "RMSNormRowFwdInterface", &kNormCall, 2, kRmsArgs, 1, kY,
    "x [rows, row] contiguous, weight [row] or absent, same dtype, on one cuda device; returns y like x; "
    "nothing written in place"};
static const tr_kernel_interface kLayerIface = {
    "LayerNormRowFwdInterface", &kNormCall, 3, kLayerArgs, 1, kY,
    "x [rows, row] contiguous, weight and bias [row] or absent, same dtype, on one cuda device; returns y like "
    "x; nothing written in place"};

enum { WARP_MAX_ROW = 1024, WARP_BLOCK = 128, LOOPED_BLOCK = 1024 };

/* The implementations: which op (kind / 2: RMS, Layer) and which kernel (kind % 2). */
enum { RMS_WARP, RMS_LOOPED, LAYER_WARP, LAYER_LOOPED };
#define IS_RMS(kind) ((kind) < LAYER_WARP)
#define IS_WARP(kind) ((kind) % 2 == 0)

static const tr_intree_impl kImpls[] = {
    {&tr_intree_norm_family, RMS_WARP, 0},
    {&tr_intree_norm_family, RMS_LOOPED, 0},
    {&tr_intree_norm_family, LAYER_WARP, 0},
    {&tr_intree_norm_family, LAYER_LOOPED, 0},
};

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  const tr_intree_impl *impl = self->ctx;
  tr_dtype d = tr_call_spec_get(call, "dtype")->as.dtype;
  if (!tr_intree_is_float16ish(d)) {
    snprintf(buf, size, "dtype must be float16, bfloat16 or float32; got %s", tr_dtype_name(d));
    return buf;
  }
  int64_t row = tr_call_spec_int(call, "row");
  const char *refused = tr_intree_row_refusal(row, buf, size);
  if (refused != NULL) return refused;
  if (IS_WARP(impl->kind) && row > WARP_MAX_ROW) {
    snprintf(buf, size, "a warp holds rows of at most %d elements; got row %lld", WARP_MAX_ROW, (long long)row);
    return buf;
  }
  return NULL;
}

/* A warp per row up to 1024 elements, else the looped kernel (general), which holds a row of up
 * to four 16-byte vectors per thread in registers (packed, read once) and loops over longer ones:
 * one implementation, since the held path is the looped kernel's own for every row that fits. */
TR_INTREE_TYPE(kRmsWarp, "rms_norm_warp", kRmsIface, kImpls[RMS_WARP], 0, NULL, refusal);
TR_INTREE_TYPE(kRmsLooped, "rms_norm_looped", kRmsIface, kImpls[RMS_LOOPED], 1, NULL, refusal);
TR_INTREE_TYPE(kLayerWarp, "layer_norm_warp", kLayerIface, kImpls[LAYER_WARP], 0, NULL, refusal);
TR_INTREE_TYPE(kLayerLooped, "layer_norm_looped", kLayerIface, kImpls[LAYER_LOOPED], 1, NULL, refusal);

/* torch.finfo(dtype).eps: RMSNorm's eps when none is given. */
static double finfo_eps(tr_dtype d) {
  if (tr_dtype_equal(d, TR_FLOAT16)) return 0.0009765625;
  if (tr_dtype_equal(d, TR_BFLOAT16)) return 0.0078125;
  if (tr_dtype_equal(d, TR_FLOAT64)) return 2.220446049250313e-16;
  return 1.1920928955078125e-07;
}

static tr_status *norm_spec(const char *op, int rms, const tr_tensor_spec *const *in, size_t n_in,
                            const tr_named_value *params, size_t n_params, const tr_device *device,
                            tr_call_spec *out) {
  const tr_value *shape = tr_intree_param(params, n_params, "normalized_shape");
  const tr_value *eps = tr_intree_param(params, n_params, "eps");
  if (shape == NULL || shape->kind != TR_VALUE_INT_LIST || n_in < 1 || in[0] == NULL) {
    return TR_STATUS(TR_VALUE, "%s: the in-tree kernels need normalized_shape and x", op);
  }
  const tr_tensor_spec *x = in[0];
  int32_t k = (int32_t)shape->as.list.len;
  double e = eps != NULL && eps->kind == TR_VALUE_FLOAT ? eps->as.f : rms ? finfo_eps(x->dtype) : 1e-5;
  tr_named_value v[5] = {
      {"dtype", tr_value_dtype(x->dtype)},
      {"row", tr_value_int(tr_intree_spec_numel(x, x->rank - k, x->rank))},
      {"weight", tr_value_bool(n_in > 1 && in[1] != NULL)},
      {"bias", tr_value_bool(!rms && n_in > 2 && in[2] != NULL)},
      {"eps", tr_value_float(e)},
  };
  return tr_call_spec_init(out, &kNormCall, device, v, 5);
}

static tr_status *rms_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params, size_t n_params,
                           const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kRmsIface.name;
  return norm_spec("RMSNormFwdOp", 1, in, n_in, params, n_params, device, out);
}

static tr_status *layer_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params,
                             size_t n_params, const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kLayerIface.name;
  return norm_spec("LayerNormFwdOp", 0, in, n_in, params, n_params, device, out);
}

/* LayerNorm's weight and bias loaded with an L2 evict_last policy, unless TILERUN_CUDA_L2_KEEP=0. */
static int l2_keep_enabled(void) {
  const char *v = tr_plat_getenv("TILERUN_CUDA_L2_KEEP");
  return v == NULL || strcmp(v, "0") != 0;
}

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                             tr_intree_source *out) {
  (void)arch; /* one source for every architecture */
  const tr_intree_impl *impl = type->ctx;
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  const char *t = tr_intree_c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  int has_w = tr_call_spec_get(call, "weight")->as.b, has_b = tr_call_spec_get(call, "bias")->as.b;
  int64_t row = tr_intree_compiled_row(tr_call_spec_int(call, "row"));
  out->source = tr_src_norm;
  out->entry = "tr_norm";
  tr_intree_add_text(out, "-DTR_T=%s", t);
  tr_intree_add_int(out, "-DTR_N=%lld", (long long)row);
  tr_intree_add_text(out, "%s", IS_WARP(impl->kind) ? "-DTR_IMPL_WARP" : "-DTR_IMPL_LOOPED");
  out->block = IS_WARP(impl->kind) ? WARP_BLOCK : LOOPED_BLOCK;
  if (!IS_WARP(impl->kind)) {
    int64_t v = 16 / (int64_t)tr_dtype_bytes(dt), nv = row % v == 0 ? row / v : row;
    /* many rows: four vectors per thread, registers capped so that 1536 threads fit an SM
     * (measured best on the H200); few rows: two vectors per thread, no cap */
    out->block = tr_intree_clamp_threads((nv + 3) / 4);
    tr_intree_add_int(out, "-DTR_MINB=%lld", (long long)(1536 / out->block));
    out->wide_block = tr_intree_clamp_threads((nv + 1) / 2);
    if (out->wide_block == out->block) out->wide_block = 0;
  }
  tr_intree_add_int(out, "-DTR_RMS=%lld", IS_RMS(impl->kind));
  tr_intree_add_int(out, "-DTR_HAS_W=%lld", has_w);
  tr_intree_add_int(out, "-DTR_HAS_B=%lld", has_b);
  /* LayerNorm's many-row build keeps weight and bias in L2 (norm.cu: load_in_order<KEEP>) unless
   * TILERUN_CUDA_L2_KEEP=0 (read when a kernel is made) */
  if (impl->kind == LAYER_LOOPED && has_w && has_b && !l2_keep_enabled()) tr_intree_add_int(out, "-DTR_KEEP_WB=%lld", 0);
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  return NULL;
}

/* ints[0]: the row length; reals[0]: eps. tr_norm takes 16-byte aligned pointers only, so every
 * build needs its tr_norm_any too. */
static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  if (k->narrow.any == NULL || (k->wide.function != NULL && k->wide.any == NULL)) {
    return TR_STATUS(TR_BACKEND, "kernel '%s' has no entry 'tr_norm_any' for unaligned tensors", k->key);
  }
  k->ints[0] = tr_call_spec_int(call, "row");
  k->reals[0] = tr_call_spec_float(call, "eps");
  return NULL;
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  int rms = IS_RMS(k->impl->kind);
  void *x = tr_intree_data(in[0]), *w = n_in > 1 ? tr_intree_data(in[1]) : NULL, *y = tr_intree_data(out[0]);
  void *b = !rms && n_in > 2 ? tr_intree_data(in[2]) : NULL;
  int64_t rows = tr_intree_numel(in[0]) / k->ints[0];
  float eps = (float)k->reals[0];
  void *args[] = {&x, &w, &b, &y, &rows, &eps};
  int aligned = (((uintptr_t)x | (uintptr_t)w | (uintptr_t)b | (uintptr_t)y) & 15) == 0;
  if (IS_WARP(k->impl->kind)) {
    return tr_cuda_launch_rows(aligned ? k->narrow.function : k->narrow.any, k->key, rows, k->block / 32, k->block,
                               stream, args, k->overlap);
  }
  /* few rows: the wide build (latency); many: the narrow one (bandwidth) */
  const tr_cuda_loaded *build = rows < k->sm_count && k->wide.function != NULL ? &k->wide : &k->narrow;
  return tr_cuda_launch_rows(aligned ? build->function : build->any, k->key, rows, 1,
                             build == &k->wide ? k->wide_threads : k->block, stream, args, k->overlap);
}

static const tr_kernel_interface *const kRmsIfaces[] = {&kRmsIface};
static const tr_kernel_interface *const kLayerIfaces[] = {&kLayerIface};
static const tr_kernel_type *const kRmsTypes[] = {&kRmsWarp, &kRmsLooped};
static const tr_kernel_type *const kLayerTypes[] = {&kLayerWarp, &kLayerLooped};

static const tr_intree_op kOps[] = {
    {"RMSNormFwdOp", 1, kRmsIfaces, 2, kRmsTypes, rms_spec, 0},
    {"LayerNormFwdOp", 1, kLayerIfaces, 2, kLayerTypes, layer_spec, 0},
};

const tr_intree_family tr_intree_norm_family = {"norm", 2, kOps, 1, source_for, prepare, launch, NULL, NULL, NULL, NULL};
