/* settle.c: the settle component's adapter: decode, settle through the registry, encode. */
#include "components/settle/settle.h"

#include <stdio.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/wire.h"

tr_status *tr_settle_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size) {
  tilerun_SettleRequest rq = tilerun_SettleRequest_init_zero;
  tilerun_SettleReply rp = tilerun_SettleReply_init_zero;
  TR_RETURN_IF_ERROR(tr_codec_decode(tilerun_SettleRequest_fields, request, request_size, &rq, "a SettleRequest"));
  tr_device device;
  const char *target = NULL;
  tr_status *answer = tr_device_parse(rq.device, &device);
  if (answer == NULL) {
    answer = tr_registry_settle((const tr_registry *)ctx, rq.requested[0] ? rq.requested : NULL,
                                rq.default_target[0] ? rq.default_target : NULL, &device, &target);
  }
  if (answer == NULL) snprintf(rp.target, sizeof(rp.target), "%s", target);
  tr_wire_reply_envelope(&rq.envelope, "settle", answer, &rp.envelope);
  rp.has_envelope = true;
  tr_status_destroy(&answer);
  return tr_codec_encode(tilerun_SettleReply_fields, &rp, reply, reply_cap, reply_size, "a SettleReply");
}

tr_status *tr_settle_encode(const char *op, const char *requested, const char *default_target,
                            const tr_device *device, uint8_t *buf, size_t size, size_t *out_size) {
  tilerun_SettleRequest rq = tilerun_SettleRequest_init_zero;
  tr_wire_request_envelope("settle", 0, &rq.envelope);
  rq.has_envelope = true;
  snprintf(rq.op, sizeof(rq.op), "%s", op);
  snprintf(rq.requested, sizeof(rq.requested), "%s", requested ? requested : "");
  snprintf(rq.default_target, sizeof(rq.default_target), "%s", default_target ? default_target : "");
  tr_device_format(device, rq.device, sizeof(rq.device));
  return tr_codec_encode(tilerun_SettleRequest_fields, &rq, buf, size, out_size, "a SettleRequest");
}

tr_status *tr_settle_decode(const uint8_t *reply, size_t size, char target[32]) {
  tilerun_SettleReply rp = tilerun_SettleReply_init_zero;
  TR_RETURN_IF_ERROR(tr_codec_decode(tilerun_SettleReply_fields, reply, size, &rp, "a SettleReply"));
  TR_RETURN_IF_ERROR(tr_wire_reply_error(&rp.envelope));
  snprintf(target, 32, "%s", rp.target);
  return NULL;
}
