/* launch_client.c: a launch request encoded (by address, by descriptor, or an ask), sent through
 * the pipeline, its reply decoded. */
#include "components/launch/launch_client.h"

#include <stdlib.h>

static tr_status *encode(const tr_launch_request *req, uint8_t *buf, size_t *size) {
  if (req->kernel != NULL) {
    return tr_launch_encode(req->registry, req->kernel, req->inputs, req->n_inputs, req->outputs, req->n_outputs, buf,
                            TR_LAUNCH_REQUEST_MAX, size);
  }
  if (req->action != 0) return tr_launch_encode_ask(req->descriptor, (tr_launch_action)req->action, buf,
                                                    TR_LAUNCH_REQUEST_MAX, size);
  TR_RETURN_IF_ERROR(tr_launch_encode_shared(req->registry, req->descriptor, req->inputs, req->n_inputs, req->outputs,
                                             req->n_outputs, buf, TR_LAUNCH_REQUEST_MAX, size));
  /* the other process reads the inputs once the work queued on them here is done */
  return tr_share_finish_cuda(req->inputs, req->n_inputs, req->outputs, req->n_outputs);
}

tr_status *tr_launch_call(tr_pipeline *pipeline, const tr_launch_request *req, tr_launch_config *config) {
  uint8_t *request = malloc(TR_LAUNCH_REQUEST_MAX + TR_LAUNCH_REPLY_MAX), *reply = request + TR_LAUNCH_REQUEST_MAX;
  if (request == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: a launch request", req->op);
  size_t request_size = 0, reply_size = 0;
  tr_status *status = encode(req, request, &request_size);
  if (status == NULL) {
    status = tr_pipeline_call(pipeline, TR_COMPONENT_LAUNCH, request, request_size, reply, TR_LAUNCH_REPLY_MAX,
                              &reply_size);
  }
  if (status == NULL) status = tr_launch_decode(reply, reply_size, config);
  free(request);
  return status;
}
