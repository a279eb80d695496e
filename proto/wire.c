/* wire.c: nanopb encoding of statuses and envelopes, translating nanopb's errors once. */
#include "proto/wire.h"

#include <pb_decode.h>
#include <pb_encode.h>
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
  pb_ostream_t stream = pb_ostream_from_buffer(buf, size);
  if (!pb_encode(&stream, tilerun_Envelope_fields, env)) {
    size_t needed = 0;
    pb_get_encoded_size(&needed, tilerun_Envelope_fields, env);
    return TR_STATUS(TR_TRANSPORT, "encoding an envelope: %s (buffer %zu bytes, needs %zu)",
                     PB_GET_ERROR(&stream), size, needed);
  }
  *out_size = stream.bytes_written;
  return NULL;
}

tr_status *tr_wire_decode_envelope(const uint8_t *buf, size_t size, tilerun_Envelope *out) {
  pb_istream_t stream = pb_istream_from_buffer(buf, size);
  memset(out, 0, sizeof(*out));
  if (!pb_decode(&stream, tilerun_Envelope_fields, out)) {
    tr_status *status = TR_STATUS(TR_TRANSPORT, "decoding an envelope of %zu bytes: %s", size,
                                  PB_GET_ERROR(&stream));
    memset(out, 0, sizeof(*out));
    return status;
  }
  return NULL;
}
