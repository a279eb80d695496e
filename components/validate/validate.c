/* validate.c: the validate component's adapter: decode, check against the manifest, encode. */
#include "components/validate/validate.h"

#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/wire.h"

static tr_status *unknown_op(const char *op) {
  return TR_STATUS(TR_OP_NOT_AVAILABLE, "no op '%s' in the manifest", op);
}

tr_status *tr_validate_run(const tr_manifest *manifest, const char *op, const tr_named_value *params,
                           size_t n_params, const tr_tensor_spec *const *inputs, size_t n_inputs, tr_validated *out) {
  memset(out, 0, sizeof(*out));
  const tr_op_def *def = tr_manifest_find(manifest, op);
  if (def == NULL) return unknown_op(op);
  tr_value settled[TR_SIG_MAX_PARAMS];
  TR_RETURN_IF_ERROR(tr_op_def_bind_params(def, params, n_params, settled)); /* cleared on failure */
  tr_call_check check;
  tr_status *status = tr_op_def_check(def, settled, inputs, n_inputs, &check);
  if (status != NULL) {
    tr_op_params_clear(def, settled);
    return status;
  }
  out->device = check.device;
  out->n_outputs = (size_t)check.n_outputs;
  for (int32_t o = 0; o < check.n_outputs; o++) {
    out->output_present[o] = check.output_present[o];
    if (check.output_present[o]) out->outputs[o] = check.outputs[o];
  }
  out->n_settled = tr_op_def_param_count(def);
  for (size_t p = 0; p < out->n_settled; p++) { /* the values move into `out` */
    strncpy(out->names[p], tr_op_def_param_name(def, p), sizeof(out->names[p]) - 1);
    out->settled[p].name = out->names[p];
    out->settled[p].value = settled[p];
  }
  return NULL;
}

/* Validates a decoded request and fills the reply (an unknown op named before anything of the
 * request is decoded). */
static tr_status *validate(const tr_manifest *m, const tilerun_ValidateRequest *rq, tilerun_ValidateReply *rp) {
  if (tr_manifest_find(m, rq->op) == NULL) return unknown_op(rq->op);
  tr_named_value given[TR_SIG_MAX_PARAMS];
  size_t n_given = 0;
  tr_status *status = NULL;
  for (; n_given < rq->params_count && status == NULL; n_given++) {
    given[n_given].name = rq->params[n_given].name;
    status = tr_codec_value_from(&rq->params[n_given].value, &given[n_given].value);
    if (status != NULL) break;
  }
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS] = {0};
  for (size_t i = 0; status == NULL && i < rq->inputs_count; i++) {
    int present = 0;
    status = tr_codec_spec_from(&rq->inputs[i], &specs[i], &present);
    if (present) ptrs[i] = &specs[i];
  }
  tr_validated answer, *v = &answer;
  if (status == NULL) status = tr_validate_run(m, rq->op, given, n_given, ptrs, rq->inputs_count, v);
  if (status == NULL) {
    tr_device_format(&v->device, rp->device, sizeof(rp->device));
    rp->outputs_count = (pb_size_t)v->n_outputs;
    for (size_t o = 0; o < v->n_outputs; o++) {
      tr_codec_spec_to(v->output_present[o] ? &v->outputs[o] : NULL, &rp->outputs[o]);
    }
    rp->settled_count = (pb_size_t)v->n_settled;
    for (size_t p = 0; p < v->n_settled && status == NULL; p++) {
      strncpy(rp->settled[p].name, v->settled[p].name, sizeof(rp->settled[p].name) - 1);
      rp->settled[p].has_value = true;
      status = tr_codec_value_to(&v->settled[p].value, &rp->settled[p].value);
    }
    tr_validated_clear(v);
  }
  for (size_t i = 0; i < n_given; i++) tr_value_clear(&given[i].value);
  return status;
}

tr_status *tr_validate_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                              size_t reply_cap, size_t *reply_size) {
  tilerun_ValidateRequest *rq = calloc(1, sizeof(*rq));
  tilerun_ValidateReply *rp = calloc(1, sizeof(*rp));
  tr_status *status = (rq && rp) ? NULL : TR_STATUS(TR_OUT_OF_MEMORY, "validate: message buffers");
  if (status == NULL) status = tr_codec_decode(tilerun_ValidateRequest_fields, request, request_size, rq, "a ValidateRequest");
  if (status == NULL) {
    tr_status *answer = validate((const tr_manifest *)ctx, rq, rp);
    if (answer != NULL) { /* the reply carries it; the outputs mean nothing then */
      rp->outputs_count = 0;
      rp->settled_count = 0;
    }
    tr_wire_reply_envelope(&rq->envelope, "validate", answer, &rp->envelope);
    rp->has_envelope = true;
    tr_status_destroy(&answer);
    status = tr_codec_encode(tilerun_ValidateReply_fields, rp, reply, reply_cap, reply_size, "a ValidateReply");
  }
  free(rq);
  free(rp);
  return status;
}

tr_status *tr_validate_encode(const char *op, const tr_named_value *params, size_t n_params,
                              const tr_tensor_spec *const *inputs, size_t n_inputs, uint8_t *buf,
                              size_t size, size_t *out_size) {
  if (n_params > TR_SIG_MAX_PARAMS || n_inputs > TR_SIG_MAX_INPUTS) {
    return TR_STATUS(TR_SIGNATURE_PARAM, "%s: %zu params and %zu inputs do not fit a ValidateRequest "
                     "(at most %d and %d)", op, n_params, n_inputs, TR_SIG_MAX_PARAMS, TR_SIG_MAX_INPUTS);
  }
  tilerun_ValidateRequest *rq = calloc(1, sizeof(*rq));
  if (rq == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "validate: a request");
  tr_wire_request_envelope("validate", 0, &rq->envelope);
  rq->has_envelope = true;
  strncpy(rq->op, op, sizeof(rq->op) - 1);
  tr_status *status = NULL;
  rq->params_count = (pb_size_t)n_params;
  for (size_t i = 0; i < n_params && status == NULL; i++) {
    strncpy(rq->params[i].name, params[i].name, sizeof(rq->params[i].name) - 1);
    rq->params[i].has_value = true;
    status = tr_codec_value_to(&params[i].value, &rq->params[i].value);
  }
  rq->inputs_count = (pb_size_t)n_inputs;
  for (size_t i = 0; i < n_inputs; i++) tr_codec_spec_to(inputs[i], &rq->inputs[i]);
  if (status == NULL) status = tr_codec_encode(tilerun_ValidateRequest_fields, rq, buf, size, out_size, "a ValidateRequest");
  free(rq);
  return status;
}

tr_status *tr_validate_decode(const uint8_t *reply, size_t size, tr_validated *out) {
  memset(out, 0, sizeof(*out));
  tilerun_ValidateReply *rp = calloc(1, sizeof(*rp));
  if (rp == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "validate: a reply");
  tr_status *status = tr_codec_decode(tilerun_ValidateReply_fields, reply, size, rp, "a ValidateReply");
  if (status == NULL) status = tr_wire_reply_error(&rp->envelope);
  if (status == NULL) status = tr_device_parse(rp->device, &out->device);
  out->n_outputs = rp->outputs_count;
  for (size_t o = 0; status == NULL && o < rp->outputs_count; o++) {
    int present = 0;
    status = tr_codec_spec_from(&rp->outputs[o], &out->outputs[o], &present);
    out->output_present[o] = (uint8_t)present;
  }
  for (size_t p = 0; status == NULL && p < rp->settled_count; p++) {
    strncpy(out->names[p], rp->settled[p].name, sizeof(out->names[p]) - 1);
    out->settled[p].name = out->names[p];
    status = tr_codec_value_from(&rp->settled[p].value, &out->settled[p].value);
    if (status == NULL) out->n_settled = p + 1;
  }
  free(rp);
  if (status != NULL) tr_validated_clear(out);
  return status;
}

void tr_validated_clear(tr_validated *validated) {
  for (size_t p = 0; p < validated->n_settled; p++) tr_value_clear(&validated->settled[p].value);
  validated->n_settled = 0;
}
