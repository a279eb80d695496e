/* cpu_backend.c: the CPU backend, the embedded default: target "cpu" claims every cpu device and
 * builds a kernel for every op in the manifest that builds kernels (all but the composite
 * LinearFwdOp), on the plain C11 kernels of backends/cpu/kernels. A plugin like any other. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "tilerun/backend.h"

#define TARGET "cpu"

typedef enum op_kind {
  OP_RMS_NORM, OP_LAYER_NORM, OP_GROUP_NORM, OP_BATCH_NORM, OP_SOFTMAX, OP_ADD, OP_GEMM, OP_ROPE,
  OP_GQA_DECODE,
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

static tr_status *build(void *ctx, const tr_build_request *req, tr_kernel *out) {
  op_kind kind = (op_kind)(intptr_t)ctx;
  cpu_kernel *k = calloc(1, sizeof(*k));
  if (k == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, TARGET ": building %s", req->op);
  k->kind = kind;
  k->dtype = req->inputs[kind == OP_ROPE ? 1 : 0]->dtype;
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
  }
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
  };
  TR_RETURN_IF_ERROR(api->register_detector(api->host, TARGET, detect, NULL));
  for (size_t i = 0; i < sizeof(kOps) / sizeof(kOps[0]); i++) {
    TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, kOps[i].op, TARGET, build,
                                                    (void *)(intptr_t)kOps[i].kind));
  }
  return NULL;
}
