/* launch.c: the launch component's adapter: decode, rebuild the DLTensors (by address, or by
 * mapping shared references), run the kernel or the named op, encode. */
#include "components/launch/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/wire.h"
#include "tilerun/tensor_spec.h"

#define MAX_IN (sizeof(((tilerun_LaunchRequest *)0)->inputs) / sizeof(tilerun_Tensor))
#define MAX_OUT (sizeof(((tilerun_LaunchRequest *)0)->outputs) / sizeof(tilerun_Tensor))
#define MAX_PARAMS (sizeof(((tilerun_LaunchRequest *)0)->params) / sizeof(tilerun_NamedValue))

/* A DLTensor and the storage its shape and strides point into. */
typedef struct slot {
  DLTensor t;
  int64_t shape[TR_MAX_RANK];
  int64_t strides[TR_MAX_RANK];
} slot;

/* `bad` named with the tensor: a ValueError, or (keep_code) of bad's own code. */
static tr_status *named(tr_status *bad, const char *role, size_t i, int keep_code) {
  tr_status *out = TR_STATUS(keep_code ? tr_status_code(bad) : TR_VALUE, "launch: %s %zu: %s", role, i,
                             tr_status_message(bad));
  tr_status_destroy(&bad);
  return out;
}

static tr_status *tensor_from(const tr_launch_context *c, int by_descriptor, const tilerun_Tensor *msg,
                              const char *role, size_t i, slot *s, DLTensor **out) {
  *out = NULL;
  tr_tensor_spec spec;
  int present = 0;
  DLDevice device = {kDLCPU, 0};
  if (!msg->has_spec) return NULL; /* absent */
  tr_status *bad = tr_codec_spec_from(&msg->spec, &spec, &present);
  if (bad == NULL && present) bad = tr_registry_device_to_dl(c->registry, &spec.device, &device);
  if (bad != NULL) return named(bad, role, i, 0);
  if (!present) return NULL;
  if (msg->strides_count != 0 && msg->strides_count != (pb_size_t)spec.rank) {
    return TR_STATUS(TR_VALUE, "launch: %s %zu has rank %d but %u strides", role, i, (int)spec.rank,
                     (unsigned)msg->strides_count);
  }
  memset(s, 0, sizeof(*s));
  s->t.device = device;
  memcpy(s->shape, spec.shape, sizeof(s->shape));
  s->t.ndim = spec.rank;
  s->t.dtype = spec.dtype;
  s->t.shape = s->shape;
  if (msg->strides_count != 0) {
    memcpy(s->strides, msg->strides, sizeof(int64_t) * msg->strides_count);
    s->t.strides = s->strides;
  }
  s->t.byte_offset = msg->byte_offset;
  int shared = msg->shm[0] != '\0' || msg->cuda_ipc.size > 0;
  if (c->in_process && msg->data != 0) { /* the caller's own address, in its own process */
    s->t.data = (void *)(uintptr_t)msg->data;
  } else if (by_descriptor && shared && c->maps != NULL) {
    tr_share_ref ref;
    memset(&ref, 0, sizeof(ref));
    if (msg->shm[0] != '\0') {
      ref.kind = TR_SHARE_SHM;
      snprintf(ref.name, sizeof(ref.name), "%s", msg->shm);
    } else if (msg->cuda_ipc.size == sizeof(ref.handle)) {
      ref.kind = TR_SHARE_CUDA_IPC;
      memcpy(ref.handle, msg->cuda_ipc.bytes, sizeof(ref.handle));
    } else {
      return TR_STATUS(TR_VALUE, "launch: %s %zu: a CUDA IPC handle is 64 bytes, got %u", role, i,
                       (unsigned)msg->cuda_ipc.size);
    }
    ref.offset = msg->shared_offset;
    ref.size = msg->shared_size;
    int64_t lo = 0, hi = 0;
    if (!tr_dl_tensor_span(&s->t, &lo, &hi)) {
      return TR_STATUS(TR_VALUE, "launch: %s %zu reaches more bytes than 64 bits count (shape and strides)", role, i);
    }
    bad = tr_share_map(c->maps, device, &ref, lo, hi, &s->t.data);
    if (bad != NULL) return named(bad, role, i, 1);
  } else if (!c->in_process) {
    return TR_STATUS(TR_VALUE, "launch: %s %zu carries no shared memory reference; a launch component in "
                     "another process reaches only cpu tensors from tilerun's shared-memory allocator "
                     "and cuda device memory (CUDA IPC)", role, i);
  } else {
    return TR_STATUS(TR_VALUE, "launch: %s %zu is present but its data address is 0", role, i);
  }
  *out = &s->t;
  return NULL;
}

tr_status *tr_launch_config_set(tr_launch_config *out, const tr_named_value *values, size_t n) {
  tr_launch_config_clear(out);
  for (size_t i = 0; i < n && out->n < TR_LAUNCH_CONFIG_MAX; i++) {
    if (values[i].name == NULL) continue;
    size_t k = out->n;
    snprintf(out->names[k], sizeof(out->names[k]), "%s", values[i].name);
    out->values[k].name = out->names[k];
    TR_RETURN_IF_ERROR(tr_value_copy(&values[i].value, &out->values[k].value));
    out->n = k + 1;
  }
  return NULL;
}

void tr_launch_config_clear(tr_launch_config *c) {
  for (size_t i = 0; i < c->n; i++) tr_value_clear(&c->values[i].value);
  c->n = 0;
}

_Static_assert(tilerun_LaunchReply_size <= TR_LAUNCH_REPLY_MAX, "a LaunchReply fits TR_LAUNCH_REPLY_MAX");

/* The op's config into the reply (the values encoded, so `config` may be cleared after); a
 * string longer than the message holds is cut to fit, as names are. */
static tr_status *config_to(const tr_launch_config *config, tilerun_LaunchReply *rp) {
  for (size_t i = 0; i < config->n; i++) {
    snprintf(rp->config[i].name, sizeof(rp->config[i].name), "%s", config->values[i].name);
    rp->config[i].has_value = true;
    const tr_value *v = &config->values[i].value;
    if (v->kind == TR_VALUE_STR && v->as.str.len >= sizeof(rp->config[i].value.kind.s)) {
      rp->config[i].value.which_kind = tilerun_Value_s_tag;
      snprintf(rp->config[i].value.kind.s, sizeof(rp->config[i].value.kind.s), "%s", v->as.str.data);
    } else {
      TR_RETURN_IF_ERROR(tr_codec_value_to(v, &rp->config[i].value));
    }
    rp->config_count = (pb_size_t)(i + 1);
  }
  return NULL;
}

static const char *action_name(tilerun_LaunchRequest_Action a) {
  return a == tilerun_LaunchRequest_Action_TUNE ? "tune" : a == tilerun_LaunchRequest_Action_CONFIG ? "config" : "call";
}

static tr_status *launch(const tr_launch_context *c, const tilerun_LaunchRequest *rq, tilerun_LaunchReply *rp) {
  int by_descriptor = rq->op[0] != '\0';
  int ask = rq->action != tilerun_LaunchRequest_Action_CALL;
  if (ask && rq->action != tilerun_LaunchRequest_Action_TUNE && rq->action != tilerun_LaunchRequest_Action_CONFIG) {
    return TR_STATUS(TR_VALUE, "launch: action %d is none this launch component knows (0 call, 1 tune, 2 config)",
                     (int)rq->action);
  }
  if (ask && (!by_descriptor || rq->inputs_count != 0 || rq->outputs_count != 0)) {
    return TR_STATUS(TR_VALUE, "launch: a %s request names an op and carries no tensors (op '%s', %u inputs, %u "
                     "outputs)", action_name(rq->action), rq->op, (unsigned)rq->inputs_count,
                     (unsigned)rq->outputs_count);
  }
  if (!by_descriptor && rq->kernel == 0) {
    return TR_STATUS(TR_VALUE, "launch: the request names neither a kernel nor an op");
  }
  if (!by_descriptor && !c->in_process) {
    return TR_STATUS(TR_VALUE, "launch: a kernel address means something only in the process that built it, and "
                     "this launch component is in another process; name the op instead (by descriptor)");
  }
  if (by_descriptor && c->ops == NULL) {
    return TR_STATUS(TR_VALUE, "launch: this launch component runs no op by descriptor (asked for %s)", rq->op);
  }
  slot *slots = malloc((MAX_IN + MAX_OUT) * sizeof(slot));
  if (slots == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "launch: tensors");
  DLTensor *in[MAX_IN], *out[MAX_OUT];
  tr_named_value params[MAX_PARAMS];
  size_t n_params = 0;
  tr_status *status = NULL;
  if (c->maps != NULL) tr_share_maps_lock(c->maps); /* mappings stay while the kernel runs */
  for (size_t i = 0; i < rq->inputs_count && status == NULL; i++) {
    status = tensor_from(c, by_descriptor, &rq->inputs[i], "input", i, &slots[i], &in[i]);
  }
  for (size_t i = 0; i < rq->outputs_count && status == NULL; i++) {
    status = tensor_from(c, by_descriptor, &rq->outputs[i], "output", i, &slots[MAX_IN + i], &out[i]);
  }
  if (status == NULL && !by_descriptor) {
    const tr_kernel *kernel = (const tr_kernel *)(uintptr_t)rq->kernel;
    status = kernel->call(kernel->self, in, rq->inputs_count, out, rq->outputs_count);
  } else if (status == NULL) {
    while (n_params < rq->params_count && status == NULL) {
      params[n_params].name = rq->params[n_params].name;
      status = tr_codec_value_from(&rq->params[n_params].value, &params[n_params].value);
      if (status != NULL) status = named(status, "param", n_params, 0);
      else n_params++; /* only values made are cleared below */
    }
    tr_launch_descriptor d = {rq->op, rq->target, params, n_params, rq->tuned};
    if (status == NULL && rq->action == tilerun_LaunchRequest_Action_TUNE) {
      status = c->ops->tune(c->ops_ctx, &d);
    } else if (status == NULL && rq->action == tilerun_LaunchRequest_Action_CONFIG) {
      tr_launch_config *config = calloc(1, sizeof(*config));
      status = config ? c->ops->config(c->ops_ctx, &d, config) : TR_STATUS(TR_OUT_OF_MEMORY, "launch: a config");
      if (status == NULL) status = config_to(config, rp);
      if (config != NULL) tr_launch_config_clear(config);
      free(config);
    } else if (status == NULL) {
      status = c->ops->call(c->ops_ctx, &d, in, rq->inputs_count, out, rq->outputs_count);
      /* cuda work finished before the reply, whatever the op answered: the caller may free its
       * memory once answered */
      tr_status *finished = tr_share_finish_cuda(in, rq->inputs_count, out, rq->outputs_count);
      if (status == NULL) status = finished;
      else tr_status_destroy(&finished);
    }
  }
  if (c->maps != NULL) tr_share_maps_unlock(c->maps);
  for (size_t i = 0; i < n_params; i++) tr_value_clear(&params[i].value);
  free(slots);
  return status;
}

tr_status *tr_launch_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size) {
  tilerun_LaunchRequest *rq = calloc(1, sizeof(*rq));
  tilerun_LaunchReply *rp = calloc(1, sizeof(*rp));
  if (rq == NULL || rp == NULL) {
    free(rq);
    free(rp);
    return TR_STATUS(TR_OUT_OF_MEMORY, "launch: a request");
  }
  tr_status *status = tr_codec_decode(tilerun_LaunchRequest_fields, request, request_size, rq, "a LaunchRequest");
  if (status == NULL) {
    tr_status *answer = launch((const tr_launch_context *)ctx, rq, rp);
    if (answer != NULL) rp->config_count = 0; /* an error answers nothing else */
    tr_wire_reply_envelope(&rq->envelope, "launch", answer, &rp->envelope);
    rp->has_envelope = true;
    tr_status_destroy(&answer);
    status = tr_codec_encode(tilerun_LaunchReply_fields, rp, reply, reply_cap, reply_size, "a LaunchReply");
  }
  free(rq);
  free(rp);
  return status;
}

static tr_status *tensor_to(const tr_registry *reg, const DLTensor *t, int shared, const char *role, size_t i,
                            tilerun_Tensor *out) {
  if (t == NULL) return NULL; /* absent: no spec */
  if (t->ndim < 0 || t->ndim > TR_MAX_RANK) {
    return TR_STATUS(TR_VALUE, "launch: %s %zu has rank %d; at most %d travel", role, i, (int)t->ndim, TR_MAX_RANK);
  }
  tr_tensor_spec spec;
  TR_RETURN_IF_ERROR(tr_registry_spec_from_dl(reg, t, &spec));
  tr_codec_spec_to(&spec, &out->spec);
  out->has_spec = true;
  out->data = (uint64_t)(uintptr_t)t->data;
  out->byte_offset = t->byte_offset;
  if (t->strides != NULL) {
    out->strides_count = (pb_size_t)t->ndim;
    memcpy(out->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  }
  if (!shared) return NULL;
  tr_share_ref ref;
  tr_status *bad = tr_share_ref_of(t->device, t->data, &ref);
  if (bad != NULL) return named(bad, role, i, 1);
  if (ref.kind == TR_SHARE_SHM) {
    snprintf(out->shm, sizeof(out->shm), "%s", ref.name);
  } else {
    out->cuda_ipc.size = sizeof(ref.handle);
    memcpy(out->cuda_ipc.bytes, ref.handle, sizeof(ref.handle));
  }
  out->shared_offset = ref.offset;
  out->shared_size = ref.size;
  return NULL;
}

/* The op, its target and params, and its tuned mode into a request. */
static tr_status *descriptor_to(const tr_launch_descriptor *d, tilerun_LaunchRequest *rq) {
  if (d->n_params > MAX_PARAMS) {
    return TR_STATUS(TR_VALUE, "launch: %zu params; a LaunchRequest carries at most %zu", d->n_params,
                     (size_t)MAX_PARAMS);
  }
  if (strlen(d->op) >= sizeof(rq->op) || strlen(d->target) >= sizeof(rq->target)) {
    return TR_STATUS(TR_VALUE, "launch: op '%s' or target '%s' is too long for a LaunchRequest", d->op, d->target);
  }
  strcpy(rq->op, d->op);
  strcpy(rq->target, d->target);
  rq->tuned = d->tuned != 0;
  rq->params_count = (pb_size_t)d->n_params;
  for (size_t i = 0; i < d->n_params; i++) {
    snprintf(rq->params[i].name, sizeof(rq->params[i].name), "%s", d->params[i].name);
    rq->params[i].has_value = true;
    TR_RETURN_IF_ERROR(tr_codec_value_to(&d->params[i].value, &rq->params[i].value));
  }
  return NULL;
}

static tr_status *encode(const tr_registry *registry, const tr_kernel *kernel, const tr_launch_descriptor *d,
                         DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs, size_t n_outputs,
                         uint8_t *buf, size_t size, size_t *out_size) {
  if (n_inputs > MAX_IN || n_outputs > MAX_OUT || (d != NULL && d->n_params > MAX_PARAMS)) {
    return TR_STATUS(TR_VALUE, "launch: %zu inputs, %zu outputs and %zu params; a LaunchRequest carries at most %zu, "
                     "%zu and %zu", n_inputs, n_outputs, d ? d->n_params : 0, (size_t)MAX_IN, (size_t)MAX_OUT,
                     (size_t)MAX_PARAMS);
  }
  tilerun_LaunchRequest *rq = calloc(1, sizeof(*rq));
  if (rq == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "launch: a request");
  tr_wire_request_envelope("launch", 0, &rq->envelope);
  rq->has_envelope = true;
  rq->kernel = (uint64_t)(uintptr_t)kernel;
  tr_status *status = d != NULL ? descriptor_to(d, rq) : NULL;
  for (size_t i = 0; i < n_inputs && status == NULL; i++) {
    status = tensor_to(registry, inputs[i], d != NULL, "input", i, &rq->inputs[i]);
  }
  for (size_t i = 0; i < n_outputs && status == NULL; i++) {
    status = tensor_to(registry, outputs[i], d != NULL, "output", i, &rq->outputs[i]);
  }
  rq->inputs_count = (pb_size_t)n_inputs;
  rq->outputs_count = (pb_size_t)n_outputs;
  if (status == NULL) status = tr_codec_encode(tilerun_LaunchRequest_fields, rq, buf, size, out_size, "a LaunchRequest");
  free(rq);
  return status;
}

tr_status *tr_launch_encode(const tr_registry *registry, const tr_kernel *kernel, DLTensor *const *inputs,
                            size_t n_inputs, DLTensor *const *outputs, size_t n_outputs, uint8_t *buf,
                            size_t size, size_t *out_size) {
  return encode(registry, kernel, NULL, inputs, n_inputs, outputs, n_outputs, buf, size, out_size);
}

tr_status *tr_launch_encode_shared(const tr_registry *registry, const tr_launch_descriptor *descriptor,
                                   DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                                   size_t n_outputs, uint8_t *buf, size_t size, size_t *out_size) {
  return encode(registry, NULL, descriptor, inputs, n_inputs, outputs, n_outputs, buf, size, out_size);
}

tr_status *tr_launch_encode_ask(const tr_launch_descriptor *descriptor, tr_launch_action action, uint8_t *buf,
                                size_t size, size_t *out_size) {
  if (action != TR_LAUNCH_TUNE && action != TR_LAUNCH_CONFIG) {
    return TR_STATUS(TR_VALUE, "launch: ask %d is neither tune (1) nor config (2)", (int)action);
  }
  tilerun_LaunchRequest *rq = calloc(1, sizeof(*rq));
  if (rq == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "launch: a request");
  tr_wire_request_envelope("launch", 0, &rq->envelope);
  rq->has_envelope = true;
  tr_status *status = descriptor_to(descriptor, rq);
  rq->action = action == TR_LAUNCH_TUNE ? tilerun_LaunchRequest_Action_TUNE : tilerun_LaunchRequest_Action_CONFIG;
  if (status == NULL) status = tr_codec_encode(tilerun_LaunchRequest_fields, rq, buf, size, out_size, "a LaunchRequest");
  free(rq);
  return status;
}

tr_status *tr_launch_decode(const uint8_t *reply, size_t size, tr_launch_config *config) {
  tilerun_LaunchReply *rp = calloc(1, sizeof(*rp));
  if (rp == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "launch: a reply");
  tr_status *status = tr_codec_decode(tilerun_LaunchReply_fields, reply, size, rp, "a LaunchReply");
  if (status == NULL) status = tr_wire_reply_error(&rp->envelope);
  if (config != NULL) tr_launch_config_clear(config);
  if (status == NULL && config != NULL) {
    for (size_t i = 0; i < rp->config_count && i < TR_LAUNCH_CONFIG_MAX && status == NULL; i++) {
      snprintf(config->names[i], sizeof(config->names[i]), "%s", rp->config[i].name);
      config->values[i].name = config->names[i];
      status = tr_codec_value_from(&rp->config[i].value, &config->values[i].value);
      if (status == NULL) config->n = i + 1;
    }
    if (status != NULL) tr_launch_config_clear(config);
  }
  free(rp);
  return status;
}
