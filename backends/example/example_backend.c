/* example_backend.c: the template backend a vendor copies. Target "example", on a made-up device
 * type "acme" (its tensors are DLPack kDLExtDev; here they live in host memory, so it runs on any
 * machine). It registers a detector, an allocator and copy for "acme", and builders for two ops:
 * RMSNormFwdOp and AddFwdOp. Its kernels support request_tune and report a config: "tile", and
 * "tunes", how many times request_tune reached that kernel (so a test sees a request arrive).
 *
 * To make it yours: rename the target and the device type, claim your device in detect, put
 * your runtime's allocator and copy in acme_alloc/acme_free/acme_copy, and replace the kernels
 * (compile in the builder, launch in call). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tilerun/backend.h"

#define TARGET "example"
#define DEVICE_TYPE "acme"

/* ---- the device: detect, facts, memory ---- */

static tr_status *detect(void *ctx, const tr_device *device, int *claims) {
  (void)ctx;
  *claims = strcmp(device->type, DEVICE_TYPE) == 0;
  return NULL;
}

static void *acme_alloc(void *ctx, const tr_device *device, size_t bytes) {
  (void)ctx;
  (void)device;
  return malloc(bytes);
}

static void acme_free(void *ctx, const tr_device *device, void *ptr) {
  (void)ctx;
  (void)device;
  free(ptr);
}

/* Copies between two layouts of one shape (strides in elements; NULL: compact). */
static tr_status *acme_copy(void *ctx, const DLTensor *src, DLTensor *dst) {
  (void)ctx;
  size_t elem = (size_t)(src->dtype.bits * src->dtype.lanes + 7) / 8;
  int64_t numel = 1, compact[TR_MAX_RANK], index[TR_MAX_RANK] = {0};
  for (int32_t d = src->ndim - 1; d >= 0; d--) {
    compact[d] = numel;
    numel *= src->shape[d];
  }
  const int64_t *ss = src->strides ? src->strides : compact, *ds = dst->strides ? dst->strides : compact;
  for (int64_t n = 0; n < numel; n++) {
    int64_t so = 0, dof = 0;
    for (int32_t d = 0; d < src->ndim; d++) {
      so += index[d] * ss[d];
      dof += index[d] * ds[d];
    }
    memcpy((char *)dst->data + dst->byte_offset + dof * (int64_t)elem,
           (const char *)src->data + src->byte_offset + so * (int64_t)elem, elem);
    for (int32_t d = src->ndim - 1; d >= 0; d--) {
      if (++index[d] < src->shape[d]) break;
      index[d] = 0;
    }
  }
  return NULL;
}

/* ---- kernels ---- */

typedef struct example_kernel {
  int tune_count;      /* how many times request_tune ran */
  int64_t n;           /* RMSNorm: the row length, a compile-time constant of the build */
  double eps, alpha;
  tr_named_value config[2]; /* "tile", then "tunes": tune_count, as reported */
} example_kernel;

static tr_status *tune(void *self, const tr_device *device) {
  (void)device;
  example_kernel *k = self;
  k->tune_count++;
  k->config[1].value = tr_value_int(k->tune_count);
  return NULL;
}

static size_t config(void *self, const tr_named_value **out) {
  *out = ((example_kernel *)self)->config;
  return 2;
}

static void release(void *self) { free(self); }

static tr_status *call_rms_norm(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                                size_t n_out) {
  (void)n_in;
  (void)n_out;
  const example_kernel *k = self;
  const float *x = in[0]->data, *w = in[1] ? in[1]->data : NULL;
  float *y = out[0]->data;
  int64_t rows = 1;
  for (int32_t d = 0; d < in[0]->ndim; d++) rows *= in[0]->shape[d];
  rows /= k->n;
  for (int64_t r = 0; r < rows; r++) {
    double sum = 0;
    for (int64_t i = 0; i < k->n; i++) sum += (double)x[r * k->n + i] * x[r * k->n + i];
    double scale = 1.0 / sqrt(sum / (double)k->n + k->eps);
    for (int64_t i = 0; i < k->n; i++) {
      y[r * k->n + i] = (float)(x[r * k->n + i] * scale * (w ? w[i] : 1.0f));
    }
  }
  return NULL;
}

static tr_status *call_add(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                           size_t n_out) {
  (void)n_in;
  (void)n_out;
  const example_kernel *k = self;
  const float *a = in[0]->data, *b = in[1]->data;
  float *c = out[0]->data;
  int64_t numel = 1;
  for (int32_t d = 0; d < in[0]->ndim; d++) numel *= in[0]->shape[d];
  for (int64_t i = 0; i < numel; i++) c[i] = a[i] + (float)k->alpha * b[i];
  return NULL;
}

static tr_status *new_kernel(tr_kernel *out, tr_status *(*call)(void *, DLTensor *const *, size_t,
                                                                 DLTensor *const *, size_t),
                             example_kernel **k) {
  *k = calloc(1, sizeof(**k));
  if (*k == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, TARGET ": a kernel");
  (*k)->config[0].name = "tile";
  (*k)->config[0].value = tr_value_int(128);
  (*k)->config[1].name = "tunes";
  (*k)->config[1].value = tr_value_int(0);
  out->self = *k;
  out->call = call;
  out->request_tune = tune;
  out->config = config;
  out->release = release;
  return NULL;
}

/* The builders: the item the target cannot serve is named with the value received. */
static tr_status *need_float32(const tr_build_request *req) {
  if (req->inputs[0]->dtype.code == kDLFloat && req->inputs[0]->dtype.bits == 32) return NULL;
  char got[TR_DTYPE_FORMAT_MAX];
  tr_dtype_format(req->inputs[0]->dtype, got, sizeof(got));
  return TR_STATUS(TR_VALUE, TARGET " %s needs dtype float32, got %s", req->op, got);
}

static tr_status *build_rms_norm(void *ctx, const tr_build_request *req, tr_kernel *out) {
  (void)ctx;
  TR_RETURN_IF_ERROR(need_float32(req));
  const tr_value *shape = tr_build_param(req, "normalized_shape");
  const tr_value *eps = tr_build_param(req, "eps");
  example_kernel *k;
  TR_RETURN_IF_ERROR(new_kernel(out, call_rms_norm, &k));
  k->n = 1;
  for (size_t i = 0; i < shape->as.list.len; i++) k->n *= shape->as.list.items[i];
  /* eps None: torch.finfo(x.dtype).eps, as the manifest says (norm.yaml). need_float32 above
   * refused every dtype but float32, so that is float32's epsilon here; a copy of this template
   * that serves float16 or bfloat16 must take the epsilon of the input's dtype instead, as the
   * cpu backend does (2^-10 and 2^-7). */
  k->eps = eps->kind == TR_VALUE_FLOAT ? eps->as.f : 1.1920928955078125e-07;
  return NULL;
}

static tr_status *build_add(void *ctx, const tr_build_request *req, tr_kernel *out) {
  (void)ctx;
  TR_RETURN_IF_ERROR(need_float32(req));
  example_kernel *k;
  TR_RETURN_IF_ERROR(new_kernel(out, call_add, &k));
  k->alpha = tr_build_param(req, "alpha")->as.f;
  return NULL;
}

/* ---- registration ---- */

const uint32_t tilerun_backend_abi = TR_BACKEND_ABI;

tr_status *tilerun_backend_init(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, TARGET, detect, NULL));
  TR_RETURN_IF_ERROR(api->register_device_type(api->host, DEVICE_TYPE, kDLExtDev));
  TR_RETURN_IF_ERROR(api->register_allocator(api->host, DEVICE_TYPE, acme_alloc, acme_free, acme_copy, NULL));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "RMSNormFwdOp", TARGET, build_rms_norm, NULL));
  return api->register_kernel_builder(api->host, "AddFwdOp", TARGET, build_add, NULL);
}
