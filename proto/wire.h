/* wire.h: statuses and envelopes to and from bytes; nanopb's errors become tr_status here, once. */
#ifndef TILERUN_PROTO_WIRE_H_
#define TILERUN_PROTO_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "proto/envelope.pb.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies a status into its message form (NULL becomes code 0, "Ok"). A message longer than the
 * field holds is cut, ending in "...". Cannot fail. */
void tr_wire_status_from(const tr_status *status, tilerun_Status *out);

/* Turns a received status message back into a tr_status (NULL for code 0). An unknown code
 * number becomes a TransportError that keeps the peer's code name and message. */
tr_status *tr_wire_status_to(const tilerun_Status *msg) TR_MUST_USE;

/* The error a decoded reply's envelope carries, or NULL when it carries none (or success). */
tr_status *tr_wire_reply_error(const tilerun_Envelope *reply) TR_MUST_USE;

/* Encodes an envelope into buf; sets *out_size. A buffer too small is a TransportError naming
 * the size needed. Thread-safe. */
tr_status *tr_wire_encode_envelope(const tilerun_Envelope *env, uint8_t *buf, size_t size,
                                   size_t *out_size) TR_MUST_USE;

/* Decodes bytes into *out. Malformed or truncated bytes are a TransportError carrying nanopb's
 * reason and the byte count; *out is then left zeroed. Thread-safe. */
tr_status *tr_wire_decode_envelope(const uint8_t *buf, size_t size,
                                   tilerun_Envelope *out) TR_MUST_USE;

/* A reply's envelope from its request's: the same request and trace ids, the component's name,
 * and `status` (NULL: success) carried in it. Cannot fail. */
void tr_wire_reply_envelope(const tilerun_Envelope *request, const char *component,
                            const tr_status *status, tilerun_Envelope *reply);

/* A request's envelope: a fresh request id, the component, the deadline (0: none). */
void tr_wire_request_envelope(const char *component, uint64_t deadline_unix_ns,
                              tilerun_Envelope *out);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_PROTO_WIRE_H_ */
