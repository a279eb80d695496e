/* launch.c: the launch component's adapter: decode, rebuild the DLTensors, run the kernel,
 * encode. */
#include "components/launch/launch.h"

#include <stdio.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/wire.h"

#define MAX_IN (sizeof(((tilerun_LaunchRequest *)0)->inputs) / sizeof(tilerun_Tensor))
#define MAX_OUT (sizeof(((tilerun_LaunchRequest *)0)->outputs) / sizeof(tilerun_Tensor))

/* A DLTensor and the storage its shape and strides point into. */
typedef struct slot {
  DLTensor t;
  int64_t shape[TR_MAX_RANK];
  int64_t strides[TR_MAX_RANK];
} slot;

static tr_status *tensor_from(const tr_registry *reg, const tilerun_Tensor *msg, const char *role, size_t i,
                              slot *s, DLTensor **out) {
  *out = NULL;
  tr_tensor_spec spec;
  int present = 0;
  DLDevice device = {kDLCPU, 0};
  if (!msg->has_spec) return NULL; /* absent */
  tr_status *bad = tr_codec_spec_from(&msg->spec, &spec, &present);
  if (bad == NULL && present) bad = tr_registry_device_to_dl(reg, &spec.device, &device);
  if (bad != NULL) {
    tr_status *named = TR_STATUS(TR_VALUE, "launch: %s %zu: %s", role, i, tr_status_message(bad));
    tr_status_destroy(&bad);
    return named;
  }
  if (!present) return NULL;
  if (msg->data == 0) return TR_STATUS(TR_VALUE, "launch: %s %zu is present but its data address is 0", role, i);
  if (msg->strides_count != 0 && msg->strides_count != (pb_size_t)spec.rank) {
    return TR_STATUS(TR_VALUE, "launch: %s %zu has rank %d but %u strides", role, i, (int)spec.rank,
                     (unsigned)msg->strides_count);
  }
  memset(s, 0, sizeof(*s));
  s->t.device = device;
  memcpy(s->shape, spec.shape, sizeof(s->shape));
  s->t.data = (void *)(uintptr_t)msg->data;
  s->t.ndim = spec.rank;
  s->t.dtype = spec.dtype;
  s->t.shape = s->shape;
  if (msg->strides_count != 0) {
    memcpy(s->strides, msg->strides, sizeof(int64_t) * msg->strides_count);
    s->t.strides = s->strides;
  }
  s->t.byte_offset = msg->byte_offset;
  *out = &s->t;
  return NULL;
}

static tr_status *launch(const tr_registry *reg, const tilerun_LaunchRequest *rq) {
  if (rq->kernel == 0) return TR_STATUS(TR_VALUE, "launch: the request names no kernel (address 0)");
  const tr_kernel *kernel = (const tr_kernel *)(uintptr_t)rq->kernel;
  slot in_slots[MAX_IN], out_slots[MAX_OUT];
  DLTensor *in[MAX_IN], *out[MAX_OUT];
  for (size_t i = 0; i < rq->inputs_count; i++) {
    TR_RETURN_IF_ERROR(tensor_from(reg, &rq->inputs[i], "input", i, &in_slots[i], &in[i]));
  }
  for (size_t i = 0; i < rq->outputs_count; i++) {
    TR_RETURN_IF_ERROR(tensor_from(reg, &rq->outputs[i], "output", i, &out_slots[i], &out[i]));
  }
  return kernel->call(kernel->self, in, rq->inputs_count, out, rq->outputs_count);
}

tr_status *tr_launch_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size) {
  tilerun_LaunchRequest rq = tilerun_LaunchRequest_init_zero;
  tilerun_LaunchReply rp = tilerun_LaunchReply_init_zero;
  TR_RETURN_IF_ERROR(tr_codec_decode(tilerun_LaunchRequest_fields, request, request_size, &rq, "a LaunchRequest"));
  tr_status *answer = launch((const tr_registry *)ctx, &rq);
  tr_wire_reply_envelope(&rq.envelope, "launch", answer, &rp.envelope);
  rp.has_envelope = true;
  tr_status_destroy(&answer);
  return tr_codec_encode(tilerun_LaunchReply_fields, &rp, reply, reply_cap, reply_size, "a LaunchReply");
}

static tr_status *tensor_to(const tr_registry *reg, const DLTensor *t, const char *role, size_t i,
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
  return NULL;
}

tr_status *tr_launch_encode(const tr_registry *registry, const tr_kernel *kernel, DLTensor *const *inputs,
                            size_t n_inputs, DLTensor *const *outputs, size_t n_outputs, uint8_t *buf,
                            size_t size, size_t *out_size) {
  if (n_inputs > MAX_IN || n_outputs > MAX_OUT) {
    return TR_STATUS(TR_VALUE, "launch: %zu inputs and %zu outputs; a LaunchRequest carries at most %zu and %zu",
                     n_inputs, n_outputs, (size_t)MAX_IN, (size_t)MAX_OUT);
  }
  tilerun_LaunchRequest rq = tilerun_LaunchRequest_init_zero;
  tr_wire_request_envelope("launch", 0, &rq.envelope);
  rq.has_envelope = true;
  rq.kernel = (uint64_t)(uintptr_t)kernel;
  for (size_t i = 0; i < n_inputs; i++) TR_RETURN_IF_ERROR(tensor_to(registry, inputs[i], "input", i, &rq.inputs[i]));
  for (size_t i = 0; i < n_outputs; i++) {
    TR_RETURN_IF_ERROR(tensor_to(registry, outputs[i], "output", i, &rq.outputs[i]));
  }
  rq.inputs_count = (pb_size_t)n_inputs;
  rq.outputs_count = (pb_size_t)n_outputs;
  return tr_codec_encode(tilerun_LaunchRequest_fields, &rq, buf, size, out_size, "a LaunchRequest");
}

tr_status *tr_launch_decode(const uint8_t *reply, size_t size) {
  tilerun_LaunchReply rp = tilerun_LaunchReply_init_zero;
  TR_RETURN_IF_ERROR(tr_codec_decode(tilerun_LaunchReply_fields, reply, size, &rp, "a LaunchReply"));
  return tr_wire_reply_error(&rp.envelope);
}
