/* select.c: the select component's adapter: decode, select through the op's selector, encode. */
#include "components/select/select.h"

#include <stdio.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/wire.h"

const tr_select_entry *tr_select_table_find(const tr_select_table *table, const char *op) {
  for (size_t i = 0; i < table->n_entries; i++) {
    if (strcmp(table->entries[i].op, op) == 0) return &table->entries[i];
  }
  return NULL;
}

tr_status *tr_select_call_of(const tr_select_table *table, const char *op, const char *interface,
                             const char *call_type, const tilerun_NamedValue *fields, size_t n_fields,
                             const char *device_text, const tr_select_entry **entry_out,
                             const tr_kernel_interface **iface_out, tr_call_spec *call) {
  const tr_select_entry *entry = tr_select_table_find(table, op);
  if (entry == NULL) return TR_STATUS(TR_OP_NOT_AVAILABLE, "no in-tree kernels are registered for op '%s'", op);
  const tr_kernel_interface *iface = NULL;
  for (size_t i = 0; i < entry->n_interfaces && iface == NULL; i++) {
    if (strcmp(entry->interfaces[i]->name, interface) == 0) iface = entry->interfaces[i];
  }
  if (iface == NULL) return TR_STATUS(TR_SELECTION, "%s: no kernel interface '%s'", op, interface);
  if (strcmp(iface->request->name, call_type) != 0) {
    return TR_STATUS(TR_SELECTION, "%s: %s takes a %s call spec, got a %s", op, iface->name, iface->request->name,
                     call_type);
  }
  tr_device device;
  TR_RETURN_IF_ERROR(tr_device_parse(device_text, &device));
  tr_named_value given[TR_CALL_MAX_FIELDS];
  size_t n_given = 0;
  tr_status *status = NULL;
  for (; n_given < n_fields && n_given < TR_CALL_MAX_FIELDS; n_given++) {
    given[n_given].name = fields[n_given].name;
    status = tr_codec_value_from(&fields[n_given].value, &given[n_given].value);
    if (status != NULL) break;
  }
  if (status == NULL) status = tr_call_spec_init(call, iface->request, &device, given, n_given);
  for (size_t i = 0; i < n_given; i++) tr_value_clear(&given[i].value);
  if (status == NULL) {
    *entry_out = entry;
    *iface_out = iface;
  }
  return status;
}

/* Selects for a decoded request; on success *key is the selector's (it outlives the call). */
static tr_status *select_key(const tr_select_table *table, const tilerun_SelectRequest *rq, const char **key) {
  const tr_select_entry *entry = NULL;
  const tr_kernel_interface *iface = NULL;
  tr_call_spec call;
  TR_RETURN_IF_ERROR(tr_select_call_of(table, rq->op, rq->interface, rq->call_type, rq->fields, rq->fields_count,
                                       rq->device, &entry, &iface, &call));
  tr_status *status = tr_selector_key_for(entry->selector, iface->name, &call, key);
  tr_call_spec_clear(&call);
  return status;
}

tr_status *tr_select_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size) {
  tilerun_SelectRequest rq = tilerun_SelectRequest_init_zero;
  tilerun_SelectReply rp = tilerun_SelectReply_init_zero;
  TR_RETURN_IF_ERROR(tr_codec_decode(tilerun_SelectRequest_fields, request, request_size, &rq, "a SelectRequest"));
  const char *key = NULL;
  tr_status *answer = select_key((const tr_select_table *)ctx, &rq, &key);
  if (answer == NULL) snprintf(rp.key, sizeof(rp.key), "%s", key);
  tr_wire_reply_envelope(&rq.envelope, "select", answer, &rp.envelope);
  rp.has_envelope = true;
  tr_status_destroy(&answer);
  return tr_codec_encode(tilerun_SelectReply_fields, &rp, reply, reply_cap, reply_size, "a SelectReply");
}

tr_status *tr_select_encode(const char *op, const char *interface, const tr_call_spec *call, uint8_t *buf,
                            size_t size, size_t *out_size) {
  tilerun_SelectRequest rq = tilerun_SelectRequest_init_zero;
  const size_t cap = sizeof(rq.fields) / sizeof(rq.fields[0]);
  if (call->type->n_fields > cap) {
    return TR_STATUS(TR_VALUE, "a %s call spec has %zu fields; a SelectRequest carries at most %zu",
                     call->type->name, call->type->n_fields, cap);
  }
  tr_wire_request_envelope("select", 0, &rq.envelope);
  rq.has_envelope = true;
  snprintf(rq.op, sizeof(rq.op), "%s", op);
  snprintf(rq.interface, sizeof(rq.interface), "%s", interface);
  snprintf(rq.call_type, sizeof(rq.call_type), "%s", call->type->name);
  tr_device_format(&call->device, rq.device, sizeof(rq.device));
  for (size_t i = 0; i < call->type->n_fields; i++) {
    snprintf(rq.fields[i].name, sizeof(rq.fields[i].name), "%s", call->type->fields[i].name);
    rq.fields[i].has_value = true;
    TR_RETURN_IF_ERROR(tr_codec_value_to(&call->values[i], &rq.fields[i].value));
  }
  rq.fields_count = (pb_size_t)call->type->n_fields;
  return tr_codec_encode(tilerun_SelectRequest_fields, &rq, buf, size, out_size, "a SelectRequest");
}

tr_status *tr_select_decode(const uint8_t *reply, size_t size, char key[64]) {
  tilerun_SelectReply rp = tilerun_SelectReply_init_zero;
  TR_RETURN_IF_ERROR(tr_codec_decode(tilerun_SelectReply_fields, reply, size, &rp, "a SelectReply"));
  TR_RETURN_IF_ERROR(tr_wire_reply_error(&rp.envelope));
  snprintf(key, 64, "%s", rp.key);
  return NULL;
}
