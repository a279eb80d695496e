/* elementwise.c: the elementwise family: Add (c = a + alpha * b, kernels/src/add.cu), 16-byte
 * vectors a thread over a grid of at most 16 blocks per SM. */
#include <stdio.h>
#include "kernels/cuda/launch.h"
#include "kernels/intree/family.h"

static const tr_call_field kElementwiseFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"alpha", TR_VALUE_FLOAT, 0, 1, {.kind = TR_VALUE_FLOAT, .as.f = 1.0}},
};
static const tr_call_spec_type kElementwiseCall = {"ElementwiseCall", 2, kElementwiseFields};

static const char *const kAddArgs[] = {"a", "b", NULL};
static const char *const kC[] = {"c"};

static const tr_kernel_interface kAddIface = {
    "AddElementwiseFwdInterface", &kElementwiseCall, 2, kAddArgs, 1, kC,
    "a and b of one shape and dtype on one cuda device, a contiguous, b contiguous or a contiguous block "
    "repeated over stride-0 leading axes (a bias expanded over rows); returns c = a + alpha * b; nothing "
    "written in place"};

enum { ADD };
static const tr_intree_impl kImpls[] = {{&tr_intree_elementwise_family, ADD, 0}};

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  tr_dtype d = tr_call_spec_get(call, "dtype")->as.dtype;
  if (tr_intree_is_float16ish(d) || tr_dtype_equal(d, TR_FLOAT64) || tr_dtype_equal(d, TR_INT32) ||
      tr_dtype_equal(d, TR_INT64)) {
    return NULL;
  }
  snprintf(buf, size, "adds float16, bfloat16, float32, float64, int32 and int64; got %s", tr_dtype_name(d));
  return buf;
}

TR_INTREE_TYPE(kAdd, "add_elementwise", kAddIface, kImpls[ADD], 1, NULL, refusal);

static tr_status *add_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params, size_t n_params,
                           const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kAddIface.name;
  const tr_value *alpha = tr_intree_param(params, n_params, "alpha");
  if (n_in < 2 || in[0] == NULL) return TR_STATUS(TR_VALUE, "AddFwdOp: the in-tree kernels need a and b");
  double a = alpha == NULL ? 1.0 : alpha->kind == TR_VALUE_INT ? (double)alpha->as.i : alpha->as.f;
  tr_named_value v[2] = {{"dtype", tr_value_dtype(in[0]->dtype)}, {"alpha", tr_value_float(a)}};
  return tr_call_spec_init(out, &kElementwiseCall, device, v, 2);
}

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                             tr_intree_source *out) {
  (void)arch; /* one source for every architecture */
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  const char *t = tr_intree_c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  out->source = tr_src_add;
  out->entry = "tr_add";
  out->block = TR_INTREE_ELEMENTWISE_BLOCK;
  tr_intree_add_text(out, "-DTR_T=%s", t);
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  return NULL;
}

/* reals[0]: alpha. */
static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  k->reals[0] = tr_call_spec_float(call, "alpha");
  return NULL;
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  (void)n_in;
  void *a = tr_intree_data(in[0]), *b = tr_intree_data(in[1]), *c = tr_intree_data(out[0]);
  int64_t n = tr_intree_numel(in[0]);
  int64_t period = tr_dl_tensor_repeat_period(in[1]); /* b broadcast over a's leading axes: read in place */
  if (period <= 0) period = n;
  double alpha = k->reals[0];
  void *args[] = {&a, &b, &c, &n, &alpha, &period};
  int64_t per_block = (int64_t)k->block * (int64_t)(16 / (in[0]->dtype.bits / 8));
  uint32_t blocks = tr_cuda_elements_grid(n, per_block, (int64_t)k->sm_count * 16);
  return blocks == 0 ? NULL : tr_cu_launch_ex(k->narrow.function, k->key, blocks, 1, k->block, 0, stream, args, k->overlap);
}

static const tr_kernel_interface *const kIfaces[] = {&kAddIface};
static const tr_kernel_type *const kTypes[] = {&kAdd};
static const tr_intree_op kOps[] = {{"AddFwdOp", 1, kIfaces, 1, kTypes, add_spec, 1u << 1}};

const tr_intree_family tr_intree_elementwise_family = {"elementwise", 1, kOps, 0, source_for, prepare, launch, NULL, NULL, NULL, NULL};
