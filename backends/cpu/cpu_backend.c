/* cpu_backend.c: the CPU backend, the embedded default: target "cpu" claims every cpu device and
 * builds a kernel for every op in the manifest that builds kernels (all but the composite
 * LinearFwdOp), on the plain C11 kernels of backends/cpu/kernels. A plugin like any other. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "tilerun/backend.h"

#define TARGET "cpu"

typedef enum op_kind {
  OP_RMS_NORM, OP_LAYER_NORM, OP_GROUP_NORM, OP_BATCH_NORM, OP_SOFTMAX, OP_ADD, OP_GEMM, OP_ROPE,
  OP_GQA_DECODE, OP_GQA_PREFILL,
} op_kind;

/* A built kernel: the op, its dtype and the params it was built with (compile-time facts only;
 * batch and sequence sizes are read from the tensors at each call). */
typedef struct cpu_kernel {
  op_kind kind;
  tr_dtype dtype;
  int64_t n;        /* RMSNorm/LayerNorm: elements per normalized row */
  int64_t groups;   /* GroupNorm */
  int64_t dim;      /* Softmax: the axis (may be negative); GQA: head dim */
  int64_t heads, heads_kv;
  int flag_a, flag_b; /* Gemm trans_a/trans_b; BatchNorm training; RoPE is_neox */
  double eps, momentum, alpha, softcap, scale;
} cpu_kernel;

static int64_t numel(const DLTensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

static const void *data_or_null(const DLTensor *t) { return t ? (const char *)t->data + t->byte_offset : NULL; }

static void *out_data(const DLTensor *t) { return t ? (char *)t->data + t->byte_offset : NULL; }

static tr_status *call(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out, size_t n_out) {
  (void)n_in;
  (void)n_out;
  const cpu_kernel *k = self;
  const DLTensor *x = in[0];
  switch (k->kind) {
    case OP_RMS_NORM:
      return tr_cpu_rms_norm(data_or_null(x), data_or_null(in[1]), out_data(out[0]),
                             k->n ? numel(x) / k->n : 0, k->n, k->dtype, k->eps, 0);
    case OP_LAYER_NORM:
      return tr_cpu_layer_norm(data_or_null(x), data_or_null(in[1]), data_or_null(in[2]), out_data(out[0]),
                               k->n ? numel(x) / k->n : 0, k->n, k->dtype, k->eps, 0);
    case OP_GROUP_NORM:
    case OP_BATCH_NORM: {
      int64_t N = x->shape[0], C = x->shape[1], spatial = 1;
      for (int32_t d = 2; d < x->ndim; d++) spatial *= x->shape[d];
      if (k->kind == OP_GROUP_NORM) {
        return tr_cpu_group_norm(data_or_null(x), data_or_null(in[1]), data_or_null(in[2]), out_data(out[0]),
                                 N, C, spatial, k->groups, k->dtype, k->eps, 0);
      }
      return tr_cpu_batch_norm(data_or_null(x), out_data(in[1]), out_data(in[2]), data_or_null(in[3]),
                               data_or_null(in[4]), out_data(out[0]), out_data(out[1]), out_data(out[2]),
                               N, C, spatial, k->flag_a, k->momentum, k->eps, k->dtype, 0);
    }
    case OP_SOFTMAX: {
      int64_t axis = k->dim < 0 ? k->dim + x->ndim : k->dim, outer = 1, inner = 1;
      int64_t size = x->ndim ? x->shape[axis] : 1;
      for (int64_t d = 0; d < axis; d++) outer *= x->shape[d];
      for (int64_t d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
      return tr_cpu_softmax(data_or_null(x), out_data(out[0]), outer, size, inner, k->dtype,
                            out[0]->dtype, 0);
    }
    case OP_ADD:
      return tr_cpu_add(data_or_null(x), data_or_null(in[1]), out_data(out[0]), numel(x), k->dtype, k->alpha, 0);
    case OP_GEMM: {
      int64_t M = k->flag_a ? x->shape[1] : x->shape[0], K = k->flag_a ? x->shape[0] : x->shape[1];
      int64_t N = k->flag_b ? in[1]->shape[0] : in[1]->shape[1];
      return tr_cpu_gemm(data_or_null(x), data_or_null(in[1]), out_data(out[0]), M, N, K, k->flag_a,
                         k->flag_b, k->dtype, 0);
    }
    case OP_ROPE: { /* positions [*B], x [*B, H, D], cache [P, D] */
      const DLTensor *pos = in[0], *xs = in[1], *cache = in[2];
      return tr_cpu_rope(data_or_null(pos), pos->dtype, data_or_null(xs), data_or_null(cache),
                         out_data(out[0]), numel(pos), xs->shape[xs->ndim - 2], xs->shape[xs->ndim - 1],
                         cache->shape[0], k->flag_a, k->dtype, 0);
    }
    case OP_GQA_DECODE: /* q [B, heads, dim], k/v [B, S, heads_kv, dim], seqlens [B] */
      return tr_cpu_gqa_decode(data_or_null(x), data_or_null(in[1]), data_or_null(in[2]),
                               (const int32_t *)data_or_null(in[3]), out_data(out[0]), x->shape[0],
                               k->heads, k->heads_kv, k->dim, in[1]->shape[1], k->softcap, k->scale,
                               k->dtype, 0);
    case OP_GQA_PREFILL: /* q [B, L, heads, dim], k/v [B, L, heads_kv, dim] */
      return tr_cpu_gqa_prefill(data_or_null(x), data_or_null(in[1]), data_or_null(in[2]),
                                out_data(out[0]), x->shape[0], x->shape[1], k->heads, k->heads_kv,
                                k->dim, k->scale, k->dtype, 0);
  }
  return TR_STATUS(TR_INTERNAL, TARGET ": unknown kernel kind %d", (int)k->kind);
}

static void release(void *self) { free(self); }

/* torch.finfo(dtype).eps: what a None eps means in the reference API. */
static double finfo_eps(tr_dtype dtype) {
  if (dtype.code == kDLFloat && dtype.bits == 16) return 0.0009765625;
  if (dtype.code == kDLBfloat) return 0.0078125;
  if (dtype.code == kDLFloat && dtype.bits == 64) return 2.220446049250313e-16;
  return 1.1920928955078125e-07;
}

static double float_param(const tr_build_request *req, const char *name, double if_none) {
  const tr_value *v = tr_build_param(req, name);
  if (v == NULL || v->kind == TR_VALUE_NONE) return if_none;
  return v->kind == TR_VALUE_INT ? (double)v->as.i : v->as.f;
}

static int64_t int_param(const tr_build_request *req, const char *name) {
  const tr_value *v = tr_build_param(req, name);
  return v && v->kind == TR_VALUE_INT ? v->as.i : 0;
}

static int bool_param(const tr_build_request *req, const char *name) {
  const tr_value *v = tr_build_param(req, name);
  return v && v->kind == TR_VALUE_BOOL && v->as.b;
}

static int64_t list_product(const tr_build_request *req, const char *name) {
  const tr_value *v = tr_build_param(req, name);
  int64_t n = 1;
  for (size_t i = 0; v && v->kind == TR_VALUE_INT_LIST && i < v->as.list.len; i++) n *= v->as.list.items[i];
  return n;
}

/* ---- What the builder refuses ----
 *
 * The spec's second layer of checks: whether this target serves the call's dtypes, shapes and
 * params is answered here, by build_kernel, so that a combination the kernels refuse is refused
 * before anything is built or memoised (a kernel that failed at its first call would have its memo
 * dropped and be built again, to fail again, at every call). Most checks repeat one the kernel
 * makes (the kernels are also called directly and stay safe on their own); two guard what the
 * kernel's call takes for granted (Softmax's dim, GQA's seqlens dtype). Most of them the
 * manifest's signature already guarantees; the builder repeats them, and checks the rank it
 * indexes, so that a changed manifest gives a refusal here rather than a wrong read. What depends
 * on tensor values (RoPE's positions, GQA's seqlens) stays in the kernel. A refusal is the
 * kernel's code, a ValueError. */

/* The dtypes the kernels serve, as a set of bits. */
enum {
  DT_F16 = 1 << 0, DT_BF16 = 1 << 1, DT_F32 = 1 << 2, DT_F64 = 1 << 3, DT_I32 = 1 << 4,
  DT_I64 = 1 << 5,
  DT_HALVES_F32 = DT_F16 | DT_BF16 | DT_F32,
};

static const struct {
  unsigned bit;
  tr_dtype dtype;
} kDtypes[] = {
    {DT_F16, {kDLFloat, 16, 1}}, {DT_BF16, {kDLBfloat, 16, 1}}, {DT_F32, {kDLFloat, 32, 1}},
    {DT_F64, {kDLFloat, 64, 1}}, {DT_I32, {kDLInt, 32, 1}},     {DT_I64, {kDLInt, 64, 1}},
};

/* Per kind: the input that carries the op's dtype (manifest name and position) and the dtypes
 * its kernel serves. */
static const struct {
  const char *input;
  size_t index;
  unsigned dtypes;
} kServes[] = {
    [OP_RMS_NORM] = {"x", 0, DT_HALVES_F32},
    [OP_LAYER_NORM] = {"x", 0, DT_HALVES_F32},
    [OP_GROUP_NORM] = {"x", 0, DT_HALVES_F32},
    [OP_BATCH_NORM] = {"x", 0, DT_HALVES_F32},
    [OP_SOFTMAX] = {"x", 0, DT_HALVES_F32},
    [OP_ADD] = {"a", 0, DT_HALVES_F32 | DT_F64 | DT_I32 | DT_I64},
    [OP_GEMM] = {"a", 0, DT_HALVES_F32},
    [OP_ROPE] = {"x", 1, DT_HALVES_F32},
    [OP_GQA_DECODE] = {"q", 0, DT_F16 | DT_BF16},
    [OP_GQA_PREFILL] = {"q", 0, DT_F16 | DT_BF16},
};

/* NULL when dtype is in `served`; else "cpu SoftmaxFwdOp: param 'dtype' is int32; the cpu target
 * serves float16 | bfloat16 | float32 | float64" (`item` names it, `tail` is appended). */
static tr_status *need_dtype(const tr_build_request *req, const char *item, tr_dtype dtype,
                             unsigned served, const char *tail) {
  const size_t count = sizeof(kDtypes) / sizeof(kDtypes[0]);
  for (size_t i = 0; i < count; i++) {
    if ((served & kDtypes[i].bit) && tr_dtype_equal(dtype, kDtypes[i].dtype)) return NULL;
  }
  char names[128] = "", got[TR_DTYPE_FORMAT_MAX];
  size_t used = 0;
  for (size_t i = 0; i < count && used < sizeof(names); i++) {
    if (!(served & kDtypes[i].bit)) continue;
    int n = snprintf(names + used, sizeof(names) - used, "%s%s", used ? " | " : "",
                     tr_dtype_name(kDtypes[i].dtype));
    if (n > 0) used += (size_t)n;
  }
  tr_dtype_format(dtype, got, sizeof(got));
  return TR_STATUS(TR_VALUE, TARGET " %s: %s is %s; the " TARGET " target serves %s%s", req->op,
                   item, got, names, tail);
}

/* The param as the caller reads it (Python's form, as tilerun prints params). */
static const char *param_text(const tr_build_request *req, const char *name, char *buf,
                              size_t size) {
  const tr_value *v = tr_build_param(req, name);
  tr_value none = tr_value_none();
  tr_value_format(v ? v : &none, buf, size);
  return buf;
}

/* GroupNorm's and BatchNorm's x: [N, C, *S], so at least rank 2. */
static tr_status *need_channels(const tr_build_request *req, const tr_tensor_spec *x) {
  if (x->rank >= 2) return NULL;
  return TR_STATUS(TR_VALUE, TARGET " %s: input 'x' has rank %d; the " TARGET " target needs [N, C, ...]", req->op,
                   (int)x->rank);
}

/* Refuses what the kernel `k` (its params resolved from req) would refuse at every call. */
static tr_status *check_served(const tr_build_request *req, const cpu_kernel *k) {
  const tr_tensor_spec *x = req->inputs[kServes[k->kind].index];
  char item[64], text[64];
  snprintf(item, sizeof(item), "input '%s' dtype", kServes[k->kind].input);
  TR_RETURN_IF_ERROR(need_dtype(req, item, x->dtype, kServes[k->kind].dtypes, ""));
  switch (k->kind) {
    case OP_RMS_NORM:
    case OP_LAYER_NORM:
    case OP_GEMM:
      break;
    case OP_GROUP_NORM: /* x [N, C, *S] */
      TR_RETURN_IF_ERROR(need_channels(req, x));
      if (k->groups <= 0 || x->shape[1] % k->groups != 0) {
        return TR_STATUS(TR_VALUE, TARGET " %s: param 'num_groups' is %s; the " TARGET " target "
                         "needs num_groups > 0 dividing C = %lld (input 'x' dim 1)", req->op,
                         param_text(req, "num_groups", text, sizeof(text)), (long long)x->shape[1]);
      }
      break;
    case OP_BATCH_NORM: { /* x [N, C, *S]; running_mean, running_var: inputs 1 and 2 */
      TR_RETURN_IF_ERROR(need_channels(req, x));
      /* N * prod(S), as far as telling whether it is more than 1 (so it cannot overflow) */
      int64_t count = x->shape[0];
      for (int32_t d = 2; d < x->rank && count <= 1; d++) count *= x->shape[d];
      if (k->flag_a && count <= 1) {
        return TR_STATUS(TR_VALUE, TARGET " %s: input 'x' has N * prod(S) = %lld values per "
                         "channel; training=True needs more than 1", req->op, (long long)count);
      }
      const char *absent = req->inputs[1] == NULL   ? "running_mean"
                           : req->inputs[2] == NULL ? "running_var"
                                                    : NULL;
      if (!k->flag_a && absent != NULL && x->shape[1] > 0) {
        return TR_STATUS(TR_VALUE, TARGET " %s: input '%s' is absent; training=False needs "
                         "running_mean and running_var", req->op, absent);
      }
      break;
    }
    case OP_SOFTMAX: {
      /* call() reads x's shape at dim */
      if (k->dim < -(int64_t)x->rank || k->dim >= (int64_t)x->rank) {
        return TR_STATUS(TR_VALUE, TARGET " %s: param 'dim' is %lld; input 'x' has rank %d, so "
                         "dim must be in [%d, %d)", req->op, (long long)k->dim, (int)x->rank,
                         -(int)x->rank, (int)x->rank);
      }
      const tr_value *dtype = tr_build_param(req, "dtype"); /* the output's; None: x's */
      if (dtype != NULL && dtype->kind == TR_VALUE_DTYPE) {
        TR_RETURN_IF_ERROR(need_dtype(req, "param 'dtype'", dtype->as.dtype,
                                      DT_HALVES_F32 | DT_F64, ", or None (x's dtype)"));
      }
      break;
    }
    case OP_ADD: /* torch.add: an integer dtype takes an integral alpha that fits it */
      if (x->dtype.code == kDLInt) {
        const double lo = x->dtype.bits == 32 ? -2147483648.0 : -9223372036854775808.0;
        if (!(k->alpha == floor(k->alpha) && k->alpha >= lo && k->alpha < -lo)) { /* nan fails */
          char dtype[TR_DTYPE_FORMAT_MAX];
          tr_dtype_format(x->dtype, dtype, sizeof(dtype));
          return TR_STATUS(TR_VALUE, TARGET " %s: param 'alpha' is %s; with input dtype %s the "
                           TARGET " target needs an integral alpha in [%s, %s]", req->op,
                           param_text(req, "alpha", text, sizeof(text)), dtype,
                           x->dtype.bits == 32 ? "-2147483648" : "-9223372036854775808",
                           x->dtype.bits == 32 ? "2147483647" : "9223372036854775807");
        }
      }
      break;
    case OP_ROPE: /* positions [*B], x [*B, H, D] */
      TR_RETURN_IF_ERROR(need_dtype(req, "input 'positions' dtype", req->inputs[0]->dtype,
                                    DT_I32 | DT_I64, ""));
      if (x->rank < 1) {
        return TR_STATUS(TR_VALUE, TARGET " %s: input 'x' is a scalar; the " TARGET " target needs [..., H, D]",
                         req->op);
      }
      if (x->shape[x->rank - 1] % 2 != 0) {
        return TR_STATUS(TR_VALUE, TARGET " %s: input 'x' head dim D is %lld; the " TARGET
                         " target needs it even", req->op, (long long)x->shape[x->rank - 1]);
      }
      break;
    case OP_GQA_DECODE: /* seqlens: input 3 */
      TR_RETURN_IF_ERROR(
          need_dtype(req, "input 'seqlens' dtype", req->inputs[3]->dtype, DT_I32, ""));
      if (k->heads_kv <= 0 || k->heads % k->heads_kv != 0) {
        return TR_STATUS(TR_VALUE, TARGET " %s: param 'heads_kv' is %lld; the " TARGET " target "
                         "needs heads_kv > 0 dividing heads = %lld", req->op,
                         (long long)k->heads_kv, (long long)k->heads);
      }
      break;
    case OP_GQA_PREFILL: /* call() reads q's B and L */
      if (x->rank != 4) {
        return TR_STATUS(TR_VALUE, TARGET " %s: input 'q' has rank %d; the " TARGET " target needs "
                         "[B, L, heads, dim]", req->op, (int)x->rank);
      }
      if (k->heads_kv <= 0 || k->heads % k->heads_kv != 0) {
        return TR_STATUS(TR_VALUE, TARGET " %s: param 'heads_kv' is %lld; the " TARGET " target "
                         "needs heads_kv > 0 dividing heads = %lld", req->op,
                         (long long)k->heads_kv, (long long)k->heads);
      }
      break;
  }
  return NULL;
}

/* Resolves the params, refuses what the kernel would refuse at every call, and only then
 * allocates the kernel. */
static tr_status *build(void *ctx, const tr_build_request *req, tr_kernel *out) {
  op_kind kind = (op_kind)(intptr_t)ctx;
  cpu_kernel resolved = {.kind = kind};
  cpu_kernel *k = &resolved;
  k->dtype = req->inputs[kServes[kind].index]->dtype;
  switch (kind) {
    case OP_RMS_NORM:
      k->n = list_product(req, "normalized_shape");
      k->eps = float_param(req, "eps", finfo_eps(k->dtype));
      break;
    case OP_LAYER_NORM:
      k->n = list_product(req, "normalized_shape");
      k->eps = float_param(req, "eps", 1e-5);
      break;
    case OP_GROUP_NORM:
      k->groups = int_param(req, "num_groups");
      k->eps = float_param(req, "eps", 1e-5);
      break;
    case OP_BATCH_NORM:
      k->flag_a = bool_param(req, "training");
      k->momentum = float_param(req, "momentum", 0.1);
      k->eps = float_param(req, "eps", 1e-5);
      break;
    case OP_SOFTMAX:
      k->dim = int_param(req, "dim");
      break;
    case OP_ADD:
      k->alpha = float_param(req, "alpha", 1.0);
      break;
    case OP_GEMM:
      k->flag_a = bool_param(req, "trans_a");
      k->flag_b = bool_param(req, "trans_b");
      break;
    case OP_ROPE:
      k->flag_a = bool_param(req, "is_neox");
      break;
    case OP_GQA_DECODE:
      k->heads = int_param(req, "heads");
      k->heads_kv = int_param(req, "heads_kv");
      k->dim = int_param(req, "dim");
      k->softcap = float_param(req, "softcap", 0.0);
      k->scale = float_param(req, "scale", 1.0 / sqrt((double)(k->dim > 0 ? k->dim : 1)));
      break;
    case OP_GQA_PREFILL:
      k->heads = int_param(req, "heads");
      k->heads_kv = int_param(req, "heads_kv");
      k->dim = int_param(req, "dim");
      k->scale = float_param(req, "scale", 1.0 / sqrt((double)(k->dim > 0 ? k->dim : 1)));
      break;
  }
  TR_RETURN_IF_ERROR(check_served(req, k));
  k = malloc(sizeof(*k));
  if (k == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, TARGET ": building %s", req->op);
  *k = resolved;
  out->self = k;
  out->call = call;
  out->release = release;
  return NULL;
}

static tr_status *detect(void *ctx, const tr_device *device, int *claims) {
  (void)ctx;
  *claims = strcmp(device->type, "cpu") == 0;
  return NULL;
}

const uint32_t tilerun_backend_abi = TR_BACKEND_ABI;

tr_status *tilerun_backend_init(const tr_backend_api *api) {
  static const struct {
    const char *op;
    op_kind kind;
  } kOps[] = {
      {"RMSNormFwdOp", OP_RMS_NORM}, {"LayerNormFwdOp", OP_LAYER_NORM},
      {"GroupNormFwdOp", OP_GROUP_NORM}, {"BatchNormFwdOp", OP_BATCH_NORM},
      {"SoftmaxFwdOp", OP_SOFTMAX}, {"AddFwdOp", OP_ADD}, {"GemmFwdOp", OP_GEMM},
      {"RoPEFwdOp", OP_ROPE}, {"GQADecodeFwdOp", OP_GQA_DECODE},
      {"GQAPrefillFwdOp", OP_GQA_PREFILL},
  };
  TR_RETURN_IF_ERROR(api->register_detector(api->host, TARGET, detect, NULL));
  for (size_t i = 0; i < sizeof(kOps) / sizeof(kOps[0]); i++) {
    TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, kOps[i].op, TARGET, build,
                                                    (void *)(intptr_t)kOps[i].kind));
  }
  return NULL;
}
