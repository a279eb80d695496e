/* build_client.c: a build request encoded, sent through the pipeline, its artifacts decoded. */
#include "components/build/build_client.h"

#include <stdlib.h>

#include "proto/components.pb.h"

/* The request's room from nanopb; the reply's artifacts are callbacks, so its room is ours. */
enum { BUILD_REQUEST_MAX = tilerun_BuildRequest_size };

tr_status *tr_build_call(tr_pipeline *pipeline, const tr_build_artifacts_request *req, tr_built_artifacts *out) {
  out->n = 0;
  uint8_t *request = malloc(BUILD_REQUEST_MAX + TR_BUILD_REPLY_MAX), *reply = request + BUILD_REQUEST_MAX;
  if (request == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a build request of %s", req->op);
  size_t request_size = 0, reply_size = 0;
  tr_status *status = tr_build_encode(req->op, req->interface, req->key, req->call, req->arch, request,
                                      BUILD_REQUEST_MAX, &request_size);
  if (status == NULL) {
    status = tr_pipeline_call(pipeline, TR_COMPONENT_BUILD, request, request_size, reply, TR_BUILD_REPLY_MAX,
                              &reply_size);
  }
  if (status == NULL) status = tr_build_decode(reply, reply_size, out->artifacts, &out->n);
  free(request);
  return status;
}

void tr_built_artifacts_clear(tr_built_artifacts *built) {
  for (size_t i = 0; i < built->n; i++) tr_artifact_clear(&built->artifacts[i]);
  built->n = 0;
}
