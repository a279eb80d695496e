/* value.c: typed param values: construction, copies, equality, hashing and Python-like text. */
#include "tilerun/value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tilerun/hash.h"
#include "tilerun/tensor_spec.h"

const char *tr_value_kind_name(tr_value_kind kind) {
  switch (kind) {
    case TR_VALUE_NONE: return "none";
    case TR_VALUE_INT: return "int";
    case TR_VALUE_FLOAT: return "float";
    case TR_VALUE_BOOL: return "bool";
    case TR_VALUE_STR: return "str";
    case TR_VALUE_DTYPE: return "dtype";
    case TR_VALUE_INT_LIST: return "list[int]";
  }
  return "unknown";
}

tr_value tr_value_none(void) {
  tr_value v;
  memset(&v, 0, sizeof(v));
  return v;
}

tr_value tr_value_int(int64_t i) {
  tr_value v = tr_value_none();
  v.kind = TR_VALUE_INT;
  v.as.i = i;
  return v;
}

tr_value tr_value_float(double f) {
  tr_value v = tr_value_none();
  v.kind = TR_VALUE_FLOAT;
  v.as.f = f;
  return v;
}

tr_value tr_value_bool(bool b) {
  tr_value v = tr_value_none();
  v.kind = TR_VALUE_BOOL;
  v.as.b = b;
  return v;
}

tr_value tr_value_dtype(tr_dtype dtype) {
  tr_value v = tr_value_none();
  v.kind = TR_VALUE_DTYPE;
  v.as.dtype = dtype;
  return v;
}

tr_status *tr_value_str(const char *s, tr_value *out) {
  if (s == NULL) return TR_STATUS(TR_VALUE, "string value is NULL");
  size_t len = strlen(s);
  if (len > TR_VALUE_STR_MAX) {
    return TR_STATUS(TR_VALUE, "string value '%.32s...' is %zu bytes long, at most %d", s, len,
                     TR_VALUE_STR_MAX);
  }
  char *copy = malloc(len + 1);
  if (copy == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "copying a string value of %zu bytes", len);
  memcpy(copy, s, len + 1);
  tr_value v = tr_value_none();
  v.kind = TR_VALUE_STR;
  v.as.str.data = copy;
  v.as.str.len = len;
  *out = v;
  return NULL;
}

tr_status *tr_value_int_list(const int64_t *items, size_t n, tr_value *out) {
  if (n > TR_VALUE_LIST_MAX) {
    return TR_STATUS(TR_VALUE, "int list value has %zu items, at most %d", n, TR_VALUE_LIST_MAX);
  }
  if (n > 0 && items == NULL) return TR_STATUS(TR_VALUE, "int list of %zu items is NULL", n);
  /* One spare slot so an empty list still owns a distinct allocation. */
  int64_t *copy = malloc((n + 1) * sizeof(int64_t));
  if (copy == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "copying an int list of %zu items", n);
  if (n > 0) memcpy(copy, items, n * sizeof(int64_t));
  tr_value v = tr_value_none();
  v.kind = TR_VALUE_INT_LIST;
  v.as.list.items = copy;
  v.as.list.len = n;
  *out = v;
  return NULL;
}

tr_status *tr_value_copy(const tr_value *src, tr_value *dst) {
  switch (src->kind) {
    case TR_VALUE_STR: return tr_value_str(src->as.str.data, dst);
    case TR_VALUE_INT_LIST: return tr_value_int_list(src->as.list.items, src->as.list.len, dst);
    default: *dst = *src; return NULL;
  }
}

void tr_value_clear(tr_value *value) {
  if (value == NULL) return;
  if (value->kind == TR_VALUE_STR) free(value->as.str.data);
  if (value->kind == TR_VALUE_INT_LIST) free(value->as.list.items);
  *value = tr_value_none();
}

int tr_value_equal(const tr_value *a, const tr_value *b) {
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
    case TR_VALUE_NONE: return 1;
    case TR_VALUE_INT: return a->as.i == b->as.i;
    case TR_VALUE_FLOAT:
      return a->as.f == b->as.f || (isnan(a->as.f) && isnan(b->as.f));
    case TR_VALUE_BOOL: return a->as.b == b->as.b;
    case TR_VALUE_DTYPE: return tr_dtype_equal(a->as.dtype, b->as.dtype);
    case TR_VALUE_STR:
      return a->as.str.len == b->as.str.len &&
             memcmp(a->as.str.data, b->as.str.data, a->as.str.len) == 0;
    case TR_VALUE_INT_LIST:
      return a->as.list.len == b->as.list.len &&
             (a->as.list.len == 0 ||
              memcmp(a->as.list.items, b->as.list.items, a->as.list.len * sizeof(int64_t)) == 0);
  }
  return 0;
}

uint64_t tr_value_hash(const tr_value *value) {
  uint64_t h = tr_hash_u64(TR_HASH_SEED, (uint64_t)value->kind);
  switch (value->kind) {
    case TR_VALUE_NONE: return h;
    case TR_VALUE_INT: return tr_hash_u64(h, (uint64_t)value->as.i);
    case TR_VALUE_FLOAT: {
      double f = value->as.f;
      if (f == 0.0) f = 0.0;     /* -0.0 hashes as 0.0 */
      if (isnan(f)) f = NAN;     /* every NaN alike */
      uint64_t bits;
      memcpy(&bits, &f, sizeof(bits));
      return tr_hash_u64(h, bits);
    }
    case TR_VALUE_BOOL: return tr_hash_u64(h, value->as.b ? 1u : 0u);
    case TR_VALUE_DTYPE:
      return tr_hash_u64(h, ((uint64_t)value->as.dtype.code << 24) |
                                ((uint64_t)value->as.dtype.bits << 16) | value->as.dtype.lanes);
    case TR_VALUE_STR:
      return tr_hash_u64(h, tr_hash_bytes(TR_HASH_SEED, value->as.str.data, value->as.str.len));
    case TR_VALUE_INT_LIST:
      h = tr_hash_u64(h, value->as.list.len);
      for (size_t i = 0; i < value->as.list.len; i++) {
        h = tr_hash_u64(h, (uint64_t)value->as.list.items[i]);
      }
      return h;
  }
  return h;
}

/* The shortest %g form of f that reads back as f, with Python's look (1.0, 1e-05, inf). */
static void format_float(double f, char *out, size_t size) {
  if (isnan(f)) { snprintf(out, size, "nan"); return; }
  if (isinf(f)) { snprintf(out, size, f < 0 ? "-inf" : "inf"); return; }
  char text[40];
  for (int precision = 1; precision <= 17; precision++) {
    snprintf(text, sizeof(text), "%.*g", precision, f);
    if (strtod(text, NULL) == f) break;
  }
  /* A float always shows it is one: 1 -> 1.0, but not 1e+20 or 1e-05. */
  if (strpbrk(text, ".en") == NULL) strncat(text, ".0", sizeof(text) - strlen(text) - 1);
  snprintf(out, size, "%s", text);
}

size_t tr_value_format(const tr_value *value, char *buf, size_t size) {
  char text[48];
  size_t used = 0;
  if (size > 0) buf[0] = '\0';
  switch (value->kind) {
    case TR_VALUE_NONE: tr__appendf(buf, size, &used, "None"); break;
    case TR_VALUE_INT: tr__appendf(buf, size, &used, "%lld", (long long)value->as.i); break;
    case TR_VALUE_FLOAT:
      format_float(value->as.f, text, sizeof(text));
      tr__appendf(buf, size, &used, "%s", text);
      break;
    case TR_VALUE_BOOL: tr__appendf(buf, size, &used, value->as.b ? "True" : "False"); break;
    case TR_VALUE_DTYPE: return tr_dtype_format(value->as.dtype, buf, size);
    case TR_VALUE_STR: tr__appendf(buf, size, &used, "'%s'", value->as.str.data); break;
    case TR_VALUE_INT_LIST:
      /* An int list prints as a shape does: (4096,), (1, 2), (). */
      return tr_shape_format((int32_t)value->as.list.len, value->as.list.items, buf, size);
  }
  return used;
}
