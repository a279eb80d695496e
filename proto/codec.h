/* codec.h: the core types to and from their messages (specs, values, named values), and any
 * message to and from bytes; nanopb's errors become a TransportError here, once. */
#ifndef TILERUN_PROTO_CODEC_H_
#define TILERUN_PROTO_CODEC_H_

#include <stddef.h>
#include <stdint.h>

#include <pb.h>

#include "proto/components.pb.h"
#include "tilerun/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A spec into its message (absent: `present` false), and back (a bad device or shape is the
 * error tr_device_parse / tr_tensor_spec_make gives). */
void tr_codec_spec_to(const tr_tensor_spec *spec, tilerun_Spec *out);
tr_status *tr_codec_spec_from(const tilerun_Spec *msg, tr_tensor_spec *out, int *present) TR_MUST_USE;

/* A value into its message (a string longer than the field is a ValueError naming it), and
 * back (copied: the caller clears it). */
tr_status *tr_codec_value_to(const tr_value *value, tilerun_Value *out) TR_MUST_USE;
tr_status *tr_codec_value_from(const tilerun_Value *msg, tr_value *out) TR_MUST_USE;

/* Any message to bytes (a buffer too small is a TransportError naming the size needed) and back
 * (malformed bytes are a TransportError with nanopb's reason; never a crash). `what` names the
 * message in errors ("a ValidateRequest"). */
tr_status *tr_codec_encode(const pb_msgdesc_t *fields, const void *msg, uint8_t *buf, size_t size,
                           size_t *out_size, const char *what) TR_MUST_USE;
tr_status *tr_codec_decode(const pb_msgdesc_t *fields, const uint8_t *buf, size_t size, void *msg,
                           const char *what) TR_MUST_USE;

/* The largest encoded message of any component (for reply buffers). */
#define TR_CODEC_MAX_MESSAGE (64 * 1024)

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_PROTO_CODEC_H_ */
