/* settle_client.c: a settle request encoded, sent through the pipeline (alone or beside a
 * validate request), its reply decoded. */
#include "components/settle/settle_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/components.pb.h"

enum { SETTLE_REQUEST_MAX = tilerun_SettleRequest_size, SETTLE_REPLY_MAX = tilerun_SettleReply_size };

static tr_status *encode(const tr_settle_request *req, uint8_t *buf, size_t *size) {
  return tr_settle_encode(req->op, req->requested, req->default_target, &req->device, buf, SETTLE_REQUEST_MAX, size);
}

static int fits(const char *text, size_t size) { return text == NULL || strlen(text) < size; }

/* This process's registry's answer to the request (an empty name: none given). */
static tr_status *settle_here(const tr_registry *registry, const tr_settle_request *req, const char **target) {
  return tr_registry_settle(registry, req->requested && req->requested[0] ? req->requested : NULL,
                            req->default_target && req->default_target[0] ? req->default_target : NULL,
                            &req->device, target);
}

/* The answer with no message made, where a message would carry the request unchanged: 1 and
 * *status then (the registry's error as a reply carries it); else 0. */
static int directly(const tr_registry *registry, const tr_settle_request *req, tr_settled *out, tr_status **status) {
  const tilerun_SettleRequest *msg = NULL;
  if (!fits(req->op, sizeof(msg->op)) || !fits(req->requested, sizeof(msg->requested)) ||
      !fits(req->default_target, sizeof(msg->default_target))) {
    return 0;
  }
  const char *target = NULL;
  *status = settle_here(registry, req, &target);
  if (*status == NULL) snprintf(out->target, sizeof(out->target), "%s", target);
  *status = tr_pipeline_as_replied(*status);
  return 1;
}

tr_status *tr_settle_call(tr_pipeline *pipeline, const tr_settle_request *req, tr_settled *out) {
  out->target[0] = '\0';
  tr_component_handler handler = NULL;
  void *ctx = NULL;
  tr_status *direct = NULL;
  if (tr_pipeline_inline_handler(pipeline, TR_COMPONENT_SETTLE, &handler, &ctx) && handler == tr_settle_handle &&
      directly(ctx, req, out, &direct)) {
    return direct;
  }
  uint8_t request[SETTLE_REQUEST_MAX], reply[SETTLE_REPLY_MAX];
  size_t request_size = 0, reply_size = 0;
  TR_RETURN_IF_ERROR(encode(req, request, &request_size));
  TR_RETURN_IF_ERROR(tr_pipeline_call(pipeline, TR_COMPONENT_SETTLE, request, request_size, reply, sizeof(reply),
                                      &reply_size));
  tr_status *status = tr_settle_decode(reply, reply_size, out->target);
  if (status != NULL) out->target[0] = '\0';
  return status;
}

tr_status *tr_settle_call_with_validate(tr_pipeline *pipeline, const tr_validate_request *vreq,
                                        const tr_settle_request *sreq, tr_validated *vout, tr_settled *sout) {
  memset(vout, 0, sizeof(*vout));
  sout->target[0] = '\0';
  if (tr_pipeline_placement(pipeline, TR_COMPONENT_VALIDATE) == TR_PLACE_INLINE &&
      tr_pipeline_placement(pipeline, TR_COMPONENT_SETTLE) == TR_PLACE_INLINE) {
    /* both in this thread: nothing to overlap; settle asked once validate has passed */
    TR_RETURN_IF_ERROR(tr_validate_call(pipeline, vreq, vout));
    tr_settle_request asked = *sreq;
    asked.device = vout->device;
    tr_status *status = tr_settle_call(pipeline, &asked, sout);
    if (status != NULL) tr_validated_clear(vout);
    return status;
  }
  uint8_t *request = malloc(2 * (size_t)TR_VALIDATE_MAX), *reply = request + TR_VALIDATE_MAX;
  if (request == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: a validate request", vreq->op);
  uint8_t settle_req[SETTLE_REQUEST_MAX], settle_reply[SETTLE_REPLY_MAX];
  tr_pipeline_exchange x[2] = {{TR_COMPONENT_VALIDATE, request, 0, reply, TR_VALIDATE_MAX, 0, NULL, 0},
                               {TR_COMPONENT_SETTLE, settle_req, 0, settle_reply, sizeof(settle_reply), 0, NULL, 0}};
  tr_status *status = tr_validate_encode(vreq->op, vreq->params, vreq->n_params, vreq->inputs, vreq->n_inputs,
                                         request, TR_VALIDATE_MAX, &x[0].request_size);
  tr_status *encoded = status == NULL ? encode(sreq, settle_req, &x[1].request_size) : NULL;
  int together = encoded == NULL; /* else asked alone after validate, which says why first */
  tr_status_destroy(&encoded);
  if (status == NULL) {
    /* a call validate refuses waits for no settle reply (nor asks an inline settle) */
    tr_pipeline_call_each(pipeline, x, together ? 2 : 1, 1);
    status = x[0].status;
    x[0].status = NULL;
  }
  if (status == NULL) status = tr_validate_decode(reply, x[0].reply_size, vout);
  if (status == NULL) {
    if (!together || !tr_device_equal(&sreq->device, &vout->device)) {
      tr_settle_request again = *sreq;
      again.device = vout->device;
      status = tr_settle_call(pipeline, &again, sout);
    } else {
      status = x[1].status;
      x[1].status = NULL;
      if (status == NULL) status = tr_settle_decode(settle_reply, x[1].reply_size, sout->target);
    }
    if (status != NULL) {
      tr_validated_clear(vout);
      sout->target[0] = '\0';
    }
  }
  tr_status_destroy(&x[1].status);
  free(request);
  return status;
}

tr_status *tr_settle_check_builtin(const tr_pipeline *pipeline, const tr_registry *registry,
                                   const tr_settle_request *req) {
  const char *endpoint = tr_pipeline_endpoint(pipeline, TR_COMPONENT_SETTLE);
  if (endpoint == NULL) return NULL; /* settled in this process: one registry, no disagreement */
  const char *here = NULL;
  tr_status *status = settle_here(registry, req, &here);
  if (status != NULL || strcmp(here, TR_BUILTIN) == 0) {
    tr_status_destroy(&status);
    return NULL;
  }
  char dev[TR_DEVICE_FORMAT_MAX];
  tr_device_format(&req->device, dev, sizeof(dev));
  return TR_STATUS(TR_OP_NOT_AVAILABLE, "%s on %s: the settle component served at %s knows no target for %s and "
                   "answered the in-tree kernels, which do not run there; in this process target '%s' serves it "
                   "(the settle server lacks that backend: see its TILERUN_BACKEND_PATH)", req->op, dev, endpoint,
                   dev, here);
}
