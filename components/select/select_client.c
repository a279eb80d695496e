/* select_client.c: a select request encoded, sent through the pipeline, its reply decoded. */
#include "components/select/select_client.h"

#include <stdlib.h>

enum { SELECT_REQUEST_MAX = tilerun_SelectRequest_size, SELECT_REPLY_MAX = tilerun_SelectReply_size };

tr_status *tr_select_call(tr_pipeline *pipeline, const tr_select_request *req, tr_selected_key *out) {
  out->key[0] = '\0';
  uint8_t *request = malloc(SELECT_REQUEST_MAX + SELECT_REPLY_MAX), *reply = request + SELECT_REQUEST_MAX;
  if (request == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: a select request", req->op);
  size_t request_size = 0, reply_size = 0;
  tr_status *status = tr_select_encode(req->op, req->interface, req->call, request, SELECT_REQUEST_MAX, &request_size);
  if (status == NULL) {
    status = tr_pipeline_call(pipeline, TR_COMPONENT_SELECT, request, request_size, reply, SELECT_REPLY_MAX,
                              &reply_size);
  }
  if (status == NULL) status = tr_select_decode(reply, reply_size, out->key);
  if (status != NULL) out->key[0] = '\0';
  free(request);
  return status;
}
