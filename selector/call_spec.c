/* call_spec.c: call specs: typed, immutable records of a call's facts, hashable and printable. */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "selector/selector.h"
#include "tilerun/hash.h"

void tr_call_spec_clear(tr_call_spec *spec) {
  if (spec->type != NULL) {
    for (size_t i = 0; i < spec->type->n_fields && i < TR_CALL_MAX_FIELDS; i++) tr_value_clear(&spec->values[i]);
  }
  memset(spec, 0, sizeof(*spec));
}

static int field_index(const tr_call_spec_type *type, const char *name) {
  for (size_t i = 0; i < type->n_fields; i++) {
    if (strcmp(type->fields[i].name, name) == 0) return (int)i;
  }
  return -1;
}

tr_status *tr_call_spec_init(tr_call_spec *out, const tr_call_spec_type *type, const tr_device *device,
                             const tr_named_value *values, size_t n_values) {
  memset(out, 0, sizeof(*out));
  if (type->n_fields > TR_CALL_MAX_FIELDS) {
    return TR_STATUS(TR_VALUE, "%s has %zu fields, at most %d", type->name, type->n_fields, TR_CALL_MAX_FIELDS);
  }
  out->type = type;
  out->device = *device;
  uint8_t given[TR_CALL_MAX_FIELDS] = {0};
  tr_status *status = NULL;
  for (size_t i = 0; i < n_values && status == NULL; i++) {
    int f = field_index(type, values[i].name);
    if (f < 0) {
      status = TR_STATUS(TR_VALUE, "%s has no field '%s'", type->name, values[i].name);
      break;
    }
    const tr_call_field *field = &type->fields[f];
    tr_value v = values[i].value;
    if (v.kind == TR_VALUE_INT && field->kind == TR_VALUE_FLOAT) v = tr_value_float((double)v.as.i);
    if (v.kind != field->kind) {
      char text[128];
      tr_value_format(&v, text, sizeof(text));
      status = TR_STATUS(TR_VALUE, "%s.%s is %s, got %s (%s)", type->name, field->name,
                         tr_value_kind_name(field->kind), text, tr_value_kind_name(v.kind));
      break;
    }
    tr_value_clear(&out->values[f]);
    status = tr_value_copy(&v, &out->values[f]);
    given[f] = 1;
  }
  for (size_t f = 0; f < type->n_fields && status == NULL; f++) {
    if (given[f]) continue;
    if (!type->fields[f].has_default) {
      status = TR_STATUS(TR_VALUE, "%s.%s (%s) is required", type->name, type->fields[f].name,
                         tr_value_kind_name(type->fields[f].kind));
      break;
    }
    out->values[f] = type->fields[f].default_value;
  }
  if (status != NULL) tr_call_spec_clear(out);
  return status;
}

void tr_call_spec_state_facts(tr_call_spec *spec, uint32_t which, const tr_device_facts *facts) {
  spec->stated_facts |= which;
  if (which & TR_FACT_ARCH) spec->facts.arch = facts->arch;
  if (which & TR_FACT_CALIBRATION) spec->facts.calibration = facts->calibration;
  if (which & TR_FACT_SM_COUNT) spec->facts.sm_count = facts->sm_count;
  if (which & TR_FACT_SMEM_BUDGET) spec->facts.smem_budget = facts->smem_budget;
}

/* tr_call_spec_get, _int and _float are inline in tilerun/kernel_type.h. */

uint64_t tr_call_spec_hash(const tr_call_spec *spec) {
  uint64_t h = tr_hash_u64(TR_HASH_SEED, (uint64_t)(uintptr_t)spec->type);
  h = tr_hash_u64(h, tr_device_hash(&spec->device));
  for (size_t i = 0; i < spec->type->n_fields; i++) h = tr_hash_u64(h, tr_value_hash(&spec->values[i]));
  h = tr_hash_u64(h, spec->stated_facts);
  if (spec->stated_facts & TR_FACT_ARCH) h = tr_hash_u64(h, (uint64_t)spec->facts.arch);
  if (spec->stated_facts & TR_FACT_SM_COUNT) h = tr_hash_u64(h, (uint64_t)spec->facts.sm_count);
  if (spec->stated_facts & TR_FACT_SMEM_BUDGET) h = tr_hash_u64(h, (uint64_t)spec->facts.smem_budget);
  return h;
}

int tr_call_spec_equal(const tr_call_spec *a, const tr_call_spec *b) {
  if (a->type != b->type || !tr_device_equal(&a->device, &b->device)) return 0;
  if (a->stated_facts != b->stated_facts) return 0;
  if ((a->stated_facts & TR_FACT_ARCH) && a->facts.arch != b->facts.arch) return 0;
  if ((a->stated_facts & TR_FACT_SM_COUNT) && a->facts.sm_count != b->facts.sm_count) return 0;
  if ((a->stated_facts & TR_FACT_SMEM_BUDGET) && a->facts.smem_budget != b->facts.smem_budget) return 0;
  if ((a->stated_facts & TR_FACT_CALIBRATION) && a->facts.calibration != b->facts.calibration) return 0;
  for (size_t i = 0; i < a->type->n_fields; i++) {
    if (!tr_value_equal(&a->values[i], &b->values[i])) return 0;
  }
  return 1;
}

size_t tr_call_spec_format(const tr_call_spec *spec, char *buf, size_t size) {
  size_t used = 0;
  if (size > 0) buf[0] = '\0';
  tr__appendf(buf, size, &used, "%s(", spec->type->name);
  for (size_t i = 0; i < spec->type->n_fields; i++) {
    char text[256];
    tr_value_format(&spec->values[i], text, sizeof(text));
    tr__appendf(buf, size, &used, "%s=%s, ", spec->type->fields[i].name, text);
  }
  if (spec->stated_facts & TR_FACT_ARCH) tr__appendf(buf, size, &used, "arch=%d, ", (int)spec->facts.arch);
  if (spec->stated_facts & TR_FACT_SM_COUNT) tr__appendf(buf, size, &used, "sm_count=%d, ", (int)spec->facts.sm_count);
  char dev[TR_DEVICE_FORMAT_MAX];
  tr_device_format(&spec->device, dev, sizeof(dev));
  tr__appendf(buf, size, &used, "device=%s)", dev);
  return used;
}

tr_status *tr_call_spec_copy(const tr_call_spec *src, tr_call_spec *dst) {
  *dst = *src;
  memset(dst->values, 0, sizeof(dst->values));
  for (size_t i = 0; i < src->type->n_fields; i++) {
    tr_status *status = tr_value_copy(&src->values[i], &dst->values[i]);
    if (status != NULL) {
      tr_call_spec_clear(dst);
      return status;
    }
  }
  return NULL;
}
