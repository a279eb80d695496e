/* tunable_backend.c: a test backend, target "tunable", whose AddFwdOp kernel on cpu tensors
 * supports request_tune and reports a config ("tunes": how many times request_tune reached it;
 * "variant": a string; "note": a string of 300 bytes, more than a message carries), so that the
 * launch tests see a tuning request and a config cross to a launch process and back. It claims
 * no device: an op names it as its target. */
#include <stdlib.h>
#include <string.h>

#include "tilerun/backend.h"

#define TARGET "tunable"

typedef struct tunable_kernel {
  double alpha;
  tr_named_value config[3]; /* "tunes", "variant", "note" */
} tunable_kernel;

static tr_status *detect(void *ctx, const tr_device *device, int *claims) {
  (void)ctx, (void)device;
  *claims = 0;
  return NULL;
}

static tr_status *tune(void *self, const tr_device *device) {
  (void)device;
  tunable_kernel *k = self;
  k->config[0].value.as.i++;
  return NULL;
}

static size_t config(void *self, const tr_named_value **out) {
  *out = ((tunable_kernel *)self)->config;
  return 3;
}

static void release(void *self) {
  tunable_kernel *k = self;
  tr_value_clear(&k->config[1].value);
  tr_value_clear(&k->config[2].value);
  free(k);
}

/* c = a + alpha * b, float32, contiguous (the op makes its inputs so). */
static tr_status *call_add(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out, size_t n_out) {
  (void)n_in, (void)n_out;
  const tunable_kernel *k = self;
  const float *a = in[0]->data, *b = in[1]->data;
  float *c = out[0]->data;
  int64_t numel = 1;
  for (int32_t d = 0; d < in[0]->ndim; d++) numel *= in[0]->shape[d];
  for (int64_t i = 0; i < numel; i++) c[i] = a[i] + (float)k->alpha * b[i];
  return NULL;
}

static tr_status *build_add(void *ctx, const tr_build_request *req, tr_kernel *out) {
  (void)ctx;
  const DLDataType t = req->inputs[0]->dtype;
  if (t.code != kDLFloat || t.bits != 32) return TR_STATUS(TR_VALUE, TARGET " %s needs float32", req->op);
  tunable_kernel *k = calloc(1, sizeof(*k));
  if (k == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, TARGET ": a kernel");
  k->alpha = tr_build_param(req, "alpha")->as.f;
  k->config[0].name = "tunes";
  k->config[0].value = tr_value_int(0);
  k->config[1].name = "variant";
  k->config[2].name = "note";
  char note[301];
  memset(note, 'n', 300);
  note[300] = '\0';
  tr_status *status = tr_value_str("tunable-add", &k->config[1].value);
  if (status == NULL) status = tr_value_str(note, &k->config[2].value);
  if (status != NULL) {
    release(k);
    return status;
  }
  out->self = k;
  out->call = call_add;
  out->request_tune = tune;
  out->config = config;
  out->release = release;
  return NULL;
}

const uint32_t tilerun_backend_abi = TR_BACKEND_ABI;

tr_status *tilerun_backend_init(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, TARGET, detect, NULL));
  return api->register_kernel_builder(api->host, "AddFwdOp", TARGET, build_add, NULL);
}
