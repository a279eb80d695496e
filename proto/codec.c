/* codec.c: conversions between the core types and the component messages, and nanopb's byte
 * codec with its errors translated once. */
#include "proto/codec.h"

#include <pb_decode.h>
#include <pb_encode.h>
#include <stdio.h>
#include <string.h>

void tr_codec_spec_to(const tr_tensor_spec *spec, tilerun_Spec *out) {
  memset(out, 0, sizeof(*out));
  if (spec == NULL) return;
  out->present = true;
  tr_device_format(&spec->device, out->device, sizeof(out->device));
  out->dtype_code = spec->dtype.code;
  out->dtype_bits = spec->dtype.bits;
  out->dtype_lanes = spec->dtype.lanes;
  out->shape_count = (pb_size_t)spec->rank;
  memcpy(out->shape, spec->shape, (size_t)spec->rank * sizeof(int64_t));
}

tr_status *tr_codec_spec_from(const tilerun_Spec *msg, tr_tensor_spec *out, int *present) {
  *present = msg->present;
  if (!msg->present) return NULL;
  tr_device device;
  TR_RETURN_IF_ERROR(tr_device_parse(msg->device, &device));
  tr_dtype dtype = {(uint8_t)msg->dtype_code, (uint8_t)msg->dtype_bits, (uint16_t)msg->dtype_lanes};
  return tr_tensor_spec_make(&device, dtype, (int32_t)msg->shape_count, msg->shape, out);
}

tr_status *tr_codec_value_to(const tr_value *value, tilerun_Value *out) {
  memset(out, 0, sizeof(*out));
  switch (value->kind) {
    case TR_VALUE_NONE: out->which_kind = tilerun_Value_none_tag; out->kind.none = true; break;
    case TR_VALUE_INT: out->which_kind = tilerun_Value_i_tag; out->kind.i = value->as.i; break;
    case TR_VALUE_FLOAT: out->which_kind = tilerun_Value_f_tag; out->kind.f = value->as.f; break;
    case TR_VALUE_BOOL: out->which_kind = tilerun_Value_b_tag; out->kind.b = value->as.b; break;
    case TR_VALUE_DTYPE:
      out->which_kind = tilerun_Value_dtype_tag;
      out->kind.dtype = ((uint32_t)value->as.dtype.code << 24) | ((uint32_t)value->as.dtype.bits << 16) |
                        value->as.dtype.lanes;
      break;
    case TR_VALUE_STR:
      if (value->as.str.len >= sizeof(out->kind.s)) {
        return TR_STATUS(TR_VALUE, "string value of %zu bytes does not fit a message (at most %zu)",
                         value->as.str.len, sizeof(out->kind.s) - 1);
      }
      out->which_kind = tilerun_Value_s_tag;
      memcpy(out->kind.s, value->as.str.data, value->as.str.len + 1);
      break;
    case TR_VALUE_INT_LIST:
      out->which_kind = tilerun_Value_list_tag;
      out->kind.list.items_count = (pb_size_t)value->as.list.len;
      memcpy(out->kind.list.items, value->as.list.items, value->as.list.len * sizeof(int64_t));
      break;
  }
  return NULL;
}

tr_status *tr_codec_value_from(const tilerun_Value *msg, tr_value *out) {
  switch (msg->which_kind) {
    case tilerun_Value_i_tag: *out = tr_value_int(msg->kind.i); return NULL;
    case tilerun_Value_f_tag: *out = tr_value_float(msg->kind.f); return NULL;
    case tilerun_Value_b_tag: *out = tr_value_bool(msg->kind.b); return NULL;
    case tilerun_Value_dtype_tag: {
      tr_dtype dt = {(uint8_t)(msg->kind.dtype >> 24), (uint8_t)(msg->kind.dtype >> 16),
                     (uint16_t)(msg->kind.dtype & 0xffff)};
      *out = tr_value_dtype(dt);
      return NULL;
    }
    case tilerun_Value_s_tag: return tr_value_str(msg->kind.s, out);
    case tilerun_Value_list_tag: return tr_value_int_list(msg->kind.list.items, msg->kind.list.items_count, out);
    default: *out = tr_value_none(); return NULL; /* none, or a value with no kind */
  }
}

tr_status *tr_codec_encode(const pb_msgdesc_t *fields, const void *msg, uint8_t *buf, size_t size,
                           size_t *out_size, const char *what) {
  pb_ostream_t stream = pb_ostream_from_buffer(buf, size);
  if (!pb_encode(&stream, fields, msg)) {
    size_t needed = 0;
    pb_get_encoded_size(&needed, fields, msg);
    return TR_STATUS(TR_TRANSPORT, "encoding %s: %s (buffer %zu bytes, needs %zu)", what,
                     PB_GET_ERROR(&stream), size, needed);
  }
  *out_size = stream.bytes_written;
  return NULL;
}

tr_status *tr_codec_decode(const pb_msgdesc_t *fields, const uint8_t *buf, size_t size, void *msg,
                           const char *what) {
  pb_istream_t stream = pb_istream_from_buffer(buf, size);
  if (!pb_decode(&stream, fields, msg)) {
    return TR_STATUS(TR_TRANSPORT, "decoding %s of %zu bytes: %s", what, size, PB_GET_ERROR(&stream));
  }
  return NULL;
}
