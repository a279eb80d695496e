/* routed.c: kernels launched through the pipeline's launch component when it is not inline:
 * on a thread, by address (the kernel built here); in another process, by descriptor (the op,
 * its params and target: that process builds its own kernel) with each tensor's memory shared.
 * By descriptor, tuning and the kernel config are asked of that process too. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "components/launch/launch_client.h"
#include "runtime/internal.h"

typedef struct routed {
  tr_runtime *rt;
  const tr_op *op;
  char target[64];
  tr_kernel inner; /* thread: the kernel built here */
  int by_descriptor;
  atomic_int tuned; /* by descriptor: the op is in tuned mode; each call says so */
} routed;

/* Where it happened: the other process answers for the whole call there (its build, its
 * launch, its kernel), and cannot tell them apart, so every error from there says so, the
 * kernel's own included (the one place an error is not passed on exactly as the kernel gave it). */
static tr_status *from_there(tr_status *status, const char *name) {
  return status != NULL ? tr_status_append(status, " (%s, launched in another process)", name) : NULL;
}

/* A tune or config ask of the launch process for the op (target: its settled one). */
static tr_status *ask(tr_runtime *rt, const tr_op *op, const char *target, tr_launch_action action,
                      tr_launch_config *config) {
  const char *name = tr_op_def_name(op->def);
  tr_launch_descriptor d = {name, target, op->named, op->n_params, 0};
  tr_launch_request req = {name, NULL, NULL, &d, (int)action, NULL, 0, NULL, 0};
  return from_there(tr_launch_call(rt->pipeline, &req, config), name);
}

static tr_status *routed_call(void *self, DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                              size_t n_outputs) {
  routed *r = self;
  const char *name = tr_op_def_name(r->op->def);
  tr_launch_descriptor d = {name, r->target, r->op->named, r->op->n_params, atomic_load(&r->tuned)};
  tr_launch_request req = {name, r->rt->registry, r->by_descriptor ? NULL : &r->inner, r->by_descriptor ? &d : NULL,
                           0, inputs, n_inputs, outputs, n_outputs};
  tr_status *status = tr_launch_call(r->rt->pipeline, &req, NULL);
  return r->by_descriptor ? from_there(status, name) : status;
}

static tr_status *routed_tune(void *self, const tr_device *device) {
  routed *r = self;
  if (r->by_descriptor) { /* the launch process tunes its own: told by tr__route_tune, then by each call */
    atomic_store(&r->tuned, 1);
    return NULL;
  }
  return r->inner.request_tune ? r->inner.request_tune(r->inner.self, device) : NULL;
}

/* By descriptor the kernel is the launch process's: the op asks for its config once
 * (tr__route_config), not each of its kernels. */
static size_t routed_config(void *self, const tr_named_value **out) {
  routed *r = self;
  return !r->by_descriptor && r->inner.config ? r->inner.config(r->inner.self, out) : 0;
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
  atomic_init(&r->tuned, 0);
  if (!by_descriptor) r->inner = *kernel;
  memset(kernel, 0, sizeof(*kernel));
  kernel->struct_size = sizeof(*kernel);
  kernel->self = r;
  kernel->call = routed_call;
  kernel->request_tune = by_descriptor || r->inner.request_tune ? routed_tune : NULL;
  kernel->config = routed_config;
  kernel->release = routed_release;
  return NULL;
}

tr_status *tr__route_tune(tr_op *op, const char *target) {
  return ask(op->rt, op, target, TR_LAUNCH_TUNE, NULL);
}

tr_status *tr__route_config(tr_op *op, const char *target, tr_launch_config *out) {
  return ask(op->rt, op, target, TR_LAUNCH_CONFIG, out);
}
