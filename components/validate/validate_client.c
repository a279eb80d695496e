/* validate_client.c: a validate request through the pipeline: inline with the builtin handler
 * the structs go straight to tr_validate_run; otherwise encoded, sent, and the reply decoded. */
#include "components/validate/validate_client.h"

#include <stdlib.h>
#include <string.h>

#include "proto/components.pb.h"

/* Whether a value travels in a message as it is (else the message says why not). */
static int travels(const tr_value *v) {
  const tilerun_Value *msg = NULL;
  if (v->kind == TR_VALUE_STR) return v->as.str.len < sizeof(msg->kind.s);
  if (v->kind == TR_VALUE_INT_LIST) return v->as.list.len <= sizeof(msg->kind.list.items) / sizeof(int64_t);
  return 1;
}

static int names_travel(const tr_named_value *values, size_t n) {
  const tilerun_NamedValue *msg = NULL;
  for (size_t i = 0; i < n; i++) {
    if (strlen(values[i].name) >= sizeof(msg->name) || !travels(&values[i].value)) return 0;
  }
  return 1;
}

/* The answer with no message made, where a message would carry the request and its answer
 * unchanged: 1 and *status then; 0 where the message way must run (it names what does not fit). */
static int directly(const tr_manifest *manifest, const tr_validate_request *req, tr_validated *out,
                    tr_status **status) {
  const tilerun_ValidateRequest *msg = NULL;
  size_t max_params = sizeof(msg->params) / sizeof(msg->params[0]);
  size_t max_inputs = sizeof(msg->inputs) / sizeof(msg->inputs[0]);
  if (strlen(req->op) >= sizeof(msg->op) || req->n_params > max_params || req->n_inputs > max_inputs ||
      !names_travel(req->params, req->n_params)) {
    return 0;
  }
  *status = tr_validate_run(manifest, req->op, req->params, req->n_params, req->inputs, req->n_inputs, out);
  if (*status == NULL && !names_travel(out->settled, out->n_settled)) {
    tr_validated_clear(out);
    return 0;
  }
  *status = tr_pipeline_as_replied(*status);
  return 1;
}

tr_status *tr_validate_call(tr_pipeline *pipeline, const tr_validate_request *req, tr_validated *out) {
  memset(out, 0, sizeof(*out));
  tr_component_handler handler = NULL;
  void *ctx = NULL;
  tr_status *status = NULL;
  if (tr_pipeline_inline_handler(pipeline, TR_COMPONENT_VALIDATE, &handler, &ctx) && handler == tr_validate_handle &&
      directly(ctx, req, out, &status)) {
    return status;
  }
  uint8_t *request = malloc(2 * (size_t)TR_VALIDATE_MAX), *reply = request + TR_VALIDATE_MAX;
  if (request == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: a validate request", req->op);
  size_t request_size = 0, reply_size = 0;
  status = tr_validate_encode(req->op, req->params, req->n_params, req->inputs, req->n_inputs, request,
                              TR_VALIDATE_MAX, &request_size);
  if (status == NULL) {
    status = tr_pipeline_call(pipeline, TR_COMPONENT_VALIDATE, request, request_size, reply, TR_VALIDATE_MAX,
                              &reply_size);
  }
  if (status == NULL) status = tr_validate_decode(reply, reply_size, out);
  free(request);
  return status;
}
