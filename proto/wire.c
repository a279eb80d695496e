/* wire.c: nanopb encoding of statuses and envelopes, translating nanopb's errors once. */
#include "proto/wire.h"

#include "proto/codec.h"

#include <stdio.h>
#include <string.h>

void tr_wire_status_from(const tr_status *status, tilerun_Status *out) {
  memset(out, 0, sizeof(*out));
  out->code = (uint32_t)tr_status_code(status);
  snprintf(out->code_name, sizeof(out->code_name), "%s", tr_code_name(tr_status_code(status)));
  const char *message = tr_status_message(status);
  size_t len = strlen(message);
  if (len < sizeof(out->message)) {
    memcpy(out->message, message, len + 1);
  } else {
    size_t keep = sizeof(out->message) - 4;
    memcpy(out->message, message, keep);
    memcpy(out->message + keep, "...", 4);
  }
}

tr_status *tr_wire_status_to(const tilerun_Status *msg) {
  if (msg->code == TR_OK) return NULL;
  if (msg->code >= TR_CODE_COUNT) {
    return TR_STATUS(TR_TRANSPORT, "peer sent status code %u (%s), unknown here: %s",
                     (unsigned)msg->code, msg->code_name, msg->message);
  }
  return TR_STATUS((tr_code)msg->code, "%s", msg->message);
}

tr_status *tr_wire_encode_envelope(const tilerun_Envelope *env, uint8_t *buf, size_t size,
                                   size_t *out_size) {
  return tr_codec_encode(tilerun_Envelope_fields, env, buf, size, out_size, "an envelope");
}

tr_status *tr_wire_decode_envelope(const uint8_t *buf, size_t size, tilerun_Envelope *out) {
  memset(out, 0, sizeof(*out));
  tr_status *status = tr_codec_decode(tilerun_Envelope_fields, buf, size, out, "an envelope");
  if (status != NULL) memset(out, 0, sizeof(*out));
  return status;
}

void tr_wire_reply_envelope(const tilerun_Envelope *request, const char *component,
                            const tr_status *status, tilerun_Envelope *reply) {
  memset(reply, 0, sizeof(*reply));
  reply->request_id = request->request_id;
  reply->trace_id = request->trace_id;
  snprintf(reply->component, sizeof(reply->component), "%s", component);
  if (status != NULL) {
    reply->has_status = true;
    tr_wire_status_from(status, &reply->status);
  }
}

void tr_wire_request_envelope(const char *component, uint64_t deadline_unix_ns, tilerun_Envelope *out) {
  static _Atomic uint64_t next_id = 1;
  memset(out, 0, sizeof(*out));
  out->request_id = next_id++;
  out->trace_id = out->request_id;
  out->deadline_unix_ns = deadline_unix_ns;
  snprintf(out->component, sizeof(out->component), "%s", component);
}

tr_status *tr_wire_reply_error(const tilerun_Envelope *reply) {
  return reply->has_status ? tr_wire_status_to(&reply->status) : NULL;
}
