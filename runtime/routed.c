/* routed.c: kernels launched through the pipeline's launch component when it is not inline:
 * on a thread, by address (the kernel built here); in another process, by descriptor (the op,
 * its params and target: that process builds its own kernel) with each tensor's memory shared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "components/launch/launch.h"
#include "runtime/internal.h"

typedef struct routed {
  tr_runtime *rt;
  const tr_op *op;
  char target[64];
  tr_kernel inner; /* thread: the kernel built here */
  int by_descriptor;
} routed;

enum { REPLY_MAX = 4096 };

static tr_status *routed_call(void *self, DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                              size_t n_outputs) {
  routed *r = self;
  uint8_t *request = malloc(TR_LAUNCH_REQUEST_MAX + REPLY_MAX), *reply = request + TR_LAUNCH_REQUEST_MAX;
  const char *name = tr_op_def_name(r->op->def);
  if (request == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: a launch request", name);
  size_t request_size = 0, reply_size = 0;
  tr_status *status;
  if (r->by_descriptor) {
    tr_launch_descriptor d = {name, r->target, r->op->named, r->op->n_params};
    status = tr_launch_encode_shared(r->rt->registry, &d, inputs, n_inputs, outputs, n_outputs, request,
                                     TR_LAUNCH_REQUEST_MAX, &request_size);
    /* the other process reads the inputs once the work queued on them here is done */
    if (status == NULL) status = tr_share_finish_cuda(inputs, n_inputs, outputs, n_outputs);
  } else {
    status = tr_launch_encode(r->rt->registry, &r->inner, inputs, n_inputs, outputs, n_outputs, request,
                              TR_LAUNCH_REQUEST_MAX, &request_size);
  }
  if (status == NULL) {
    status = tr_pipeline_call(r->rt->pipeline, TR_COMPONENT_LAUNCH, request, request_size, reply, REPLY_MAX,
                              &reply_size);
  }
  if (status == NULL) status = tr_launch_decode(reply, reply_size);
  free(request);
  /* where it happened: the other process answers for the whole call there (its build, its
   * launch, its kernel), and cannot tell them apart, so every error from there says so, the
   * kernel's own included (the one place an error is not passed on exactly as the kernel gave it) */
  if (status != NULL && r->by_descriptor) status = tr_status_append(status, " (%s, launched in another process)", name);
  return status;
}

static tr_status *routed_tune(void *self, const tr_device *device) {
  routed *r = self;
  return r->inner.request_tune ? r->inner.request_tune(r->inner.self, device) : NULL;
}

static size_t routed_config(void *self, const tr_named_value **out) {
  routed *r = self;
  return r->inner.config ? r->inner.config(r->inner.self, out) : 0;
}

static void routed_release(void *self) {
  routed *r = self;
  if (r->inner.release != NULL) r->inner.release(r->inner.self);
  free(r);
}

tr_status *tr__route_kernel(tr_op *op, int by_descriptor, tr_kernel *kernel) {
  routed *r = calloc(1, sizeof(*r));
  if (r == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: a routed kernel", tr_op_def_name(op->def));
  r->rt = op->rt;
  r->op = op;
  snprintf(r->target, sizeof(r->target), "%s", op->target ? op->target : "");
  r->by_descriptor = by_descriptor;
  if (!by_descriptor) r->inner = *kernel;
  memset(kernel, 0, sizeof(*kernel));
  kernel->struct_size = sizeof(*kernel);
  kernel->self = r;
  kernel->call = routed_call;
  kernel->request_tune = !by_descriptor && r->inner.request_tune ? routed_tune : NULL;
  kernel->config = routed_config;
  kernel->release = routed_release;
  return NULL;
}
