/* build.c: the build component's adapter: decode, build the in-tree artifacts, encode. */
#include "components/build/build.h"

#include <pb_decode.h>
#include <pb_encode.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/intree/intree.h"
#include "proto/codec.h"
#include "proto/wire.h"

/* The encoded artifacts a reply carries. */
typedef struct blobs {
  size_t n;
  uint8_t *data[2];
  size_t size[2];
} blobs;

static bool encode_blobs(pb_ostream_t *stream, const pb_field_iter_t *field, void *const *arg) {
  const blobs *b = *arg;
  for (size_t i = 0; i < b->n; i++) {
    if (!pb_encode_tag_for_field(stream, field) || !pb_encode_string(stream, b->data[i], b->size[i])) return false;
  }
  return true;
}

/* Decoding: up to two artifacts, each read into its own buffer and decoded. */
typedef struct received {
  size_t n;
  tr_artifact *out;
  tr_status *error;
} received;

static bool decode_blob(pb_istream_t *stream, const pb_field_iter_t *field, void **arg) {
  (void)field;
  received *r = *arg;
  if (r->n >= 2) {
    if (r->error == NULL) r->error = TR_STATUS(TR_TRANSPORT, "a BuildReply carries more than 2 artifacts");
    return false;
  }
  size_t size = stream->bytes_left;
  uint8_t *buf = malloc(size ? size : 1);
  if (buf == NULL) {
    r->error = TR_STATUS(TR_OUT_OF_MEMORY, "an artifact of %zu bytes", size);
    return false;
  }
  if (!pb_read(stream, buf, size)) {
    free(buf);
    return false;
  }
  tr_status *status = tr_artifact_decode(buf, size, &r->out[r->n]);
  free(buf);
  if (status != NULL) {
    if (r->error == NULL) r->error = status;
    else tr_status_destroy(&status);
    return false;
  }
  r->n++;
  return true;
}

/* Builds for a decoded request. */
static tr_status *build(const tr_select_table *table, const tilerun_BuildRequest *rq, tr_artifact arts[2],
                        size_t *n) {
  *n = 0;
  if (rq->key[0] == '\0') {
    return TR_STATUS(TR_OP_NOT_AVAILABLE, "%s: a backend target's kernel ('%s') is built in the process that "
                     "launches it; this build component builds in-tree kernels (name one by key)", rq->op, rq->target);
  }
  const tr_select_entry *entry = NULL;
  const tr_kernel_interface *iface = NULL;
  tr_call_spec call;
  TR_RETURN_IF_ERROR(tr_select_call_of(table, rq->op, rq->interface, rq->call_type, rq->fields, rq->fields_count,
                                       rq->device, &entry, &iface, &call));
  const tr_kernel_type *type = tr_selector_type(entry->selector, iface->name, rq->key);
  tr_status *status = type ? tr_intree_build(type, &call, rq->arch, arts, n)
                           : TR_STATUS(TR_SELECTION, "%s: %s has no implementation '%s'", rq->op, iface->name, rq->key);
  tr_call_spec_clear(&call);
  return status;
}

tr_status *tr_build_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply, size_t reply_cap,
                           size_t *reply_size) {
  tilerun_BuildRequest *rq = calloc(1, sizeof(*rq));
  if (rq == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a BuildRequest");
  tr_status *bad = tr_codec_decode(tilerun_BuildRequest_fields, request, request_size, rq, "a BuildRequest");
  if (bad != NULL) {
    free(rq);
    return bad;
  }
  tr_artifact arts[2];
  size_t n = 0;
  blobs b = {0, {NULL, NULL}, {0, 0}};
  tr_status *answer = build((const tr_select_table *)ctx, rq, arts, &n);
  for (size_t i = 0; i < n && answer == NULL; i++) {
    answer = tr_artifact_encode(&arts[i], &b.data[i], &b.size[i]);
    if (answer == NULL) b.n = i + 1;
  }
  for (size_t i = 0; i < n; i++) tr_artifact_clear(&arts[i]);
  tilerun_BuildReply rp = tilerun_BuildReply_init_zero;
  if (answer == NULL) {
    rp.artifacts.funcs.encode = encode_blobs;
    rp.artifacts.arg = &b;
  }
  tr_wire_reply_envelope(&rq->envelope, "build", answer, &rp.envelope);
  rp.has_envelope = true;
  tr_status_destroy(&answer);
  tr_status *status = tr_codec_encode(tilerun_BuildReply_fields, &rp, reply, reply_cap, reply_size, "a BuildReply");
  for (size_t i = 0; i < b.n; i++) free(b.data[i]);
  free(rq);
  return status;
}

tr_status *tr_build_encode(const char *op, const char *interface, const char *key, const tr_call_spec *call,
                           const char *arch, uint8_t *buf, size_t size, size_t *out_size) {
  tilerun_BuildRequest *rq = calloc(1, sizeof(*rq));
  if (rq == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a BuildRequest");
  const size_t cap = sizeof(rq->fields) / sizeof(rq->fields[0]);
  tr_status *status = NULL;
  if (call->type->n_fields > cap) {
    status = TR_STATUS(TR_VALUE, "a %s call spec has %zu fields; a BuildRequest carries at most %zu", call->type->name,
                       call->type->n_fields, cap);
  }
  if (status == NULL) {
    tr_wire_request_envelope("build", 0, &rq->envelope);
    rq->has_envelope = true;
    snprintf(rq->op, sizeof(rq->op), "%s", op);
    snprintf(rq->interface, sizeof(rq->interface), "%s", interface);
    snprintf(rq->key, sizeof(rq->key), "%s", key);
    snprintf(rq->call_type, sizeof(rq->call_type), "%s", call->type->name);
    snprintf(rq->arch, sizeof(rq->arch), "%s", arch);
    tr_device_format(&call->device, rq->device, sizeof(rq->device));
  }
  for (size_t i = 0; status == NULL && i < call->type->n_fields; i++) {
    snprintf(rq->fields[i].name, sizeof(rq->fields[i].name), "%s", call->type->fields[i].name);
    rq->fields[i].has_value = true;
    status = tr_codec_value_to(&call->values[i], &rq->fields[i].value);
    rq->fields_count = (pb_size_t)(i + 1);
  }
  if (status == NULL) status = tr_codec_encode(tilerun_BuildRequest_fields, rq, buf, size, out_size, "a BuildRequest");
  free(rq);
  return status;
}

tr_status *tr_build_decode(const uint8_t *reply, size_t size, tr_artifact out[2], size_t *n_out) {
  *n_out = 0;
  memset(out, 0, 2 * sizeof(tr_artifact));
  received r = {0, out, NULL};
  tilerun_BuildReply rp = tilerun_BuildReply_init_zero;
  rp.artifacts.funcs.decode = decode_blob;
  rp.artifacts.arg = &r;
  tr_status *status = tr_codec_decode(tilerun_BuildReply_fields, reply, size, &rp, "a BuildReply");
  if (r.error != NULL) { /* the artifact's own reason says more than nanopb's */
    tr_status_destroy(&status);
    status = r.error;
  }
  if (status == NULL) status = tr_wire_reply_error(&rp.envelope);
  if (status == NULL && r.n == 0) status = TR_STATUS(TR_TRANSPORT, "a BuildReply without an error carries no artifact");
  if (status != NULL) {
    for (size_t i = 0; i < r.n; i++) tr_artifact_clear(&out[i]);
    return status;
  }
  *n_out = r.n;
  return NULL;
}
