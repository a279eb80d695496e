/* validate_client.c: a validate request encoded, sent through the pipeline, its reply decoded. */
#include "components/validate/validate_client.h"

#include <stdlib.h>
#include <string.h>

tr_status *tr_validate_call(tr_pipeline *pipeline, const tr_validate_request *req, tr_validated *out) {
  memset(out, 0, sizeof(*out));
  uint8_t *request = malloc(2 * (size_t)TR_VALIDATE_MAX), *reply = request + TR_VALIDATE_MAX;
  if (request == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: a validate request", req->op);
  size_t request_size = 0, reply_size = 0;
  tr_status *status = tr_validate_encode(req->op, req->params, req->n_params, req->inputs, req->n_inputs, request,
                                         TR_VALIDATE_MAX, &request_size);
  if (status == NULL) {
    status = tr_pipeline_call(pipeline, TR_COMPONENT_VALIDATE, request, request_size, reply, TR_VALIDATE_MAX,
                              &reply_size);
  }
  if (status == NULL) status = tr_validate_decode(reply, reply_size, out);
  free(request);
  return status;
}
