/* dtype.c: the names of the dtypes tilerun knows, over DLPack's DLDataType. */
#include "tilerun/dtype.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  tr_dtype dtype;
} kDtypes[] = {
    {"float16", {kDLFloat, 16, 1}},   {"bfloat16", {kDLBfloat, 16, 1}},
    {"float32", {kDLFloat, 32, 1}},   {"float64", {kDLFloat, 64, 1}},
    {"int8", {kDLInt, 8, 1}},         {"int16", {kDLInt, 16, 1}},
    {"int32", {kDLInt, 32, 1}},       {"int64", {kDLInt, 64, 1}},
    {"uint8", {kDLUInt, 8, 1}},       {"bool", {TR_DL_BOOL, 8, 1}},
    {"float8_e4m3", {TR_DL_FLOAT8_E4M3FN, 8, 1}},
    {"float8_e5m2", {TR_DL_FLOAT8_E5M2, 8, 1}},
};
#define DTYPE_COUNT (sizeof(kDtypes) / sizeof(kDtypes[0]))

tr_status *tr_dtype_parse(const char *name, tr_dtype *out) {
  if (name == NULL) return TR_STATUS(TR_VALUE, "dtype name is NULL");
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (strcmp(kDtypes[i].name, name) == 0) {
      *out = kDtypes[i].dtype;
      return NULL;
    }
  }
  char known[256];
  size_t used = 0;
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    int n = snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", kDtypes[i].name);
    if (n > 0) used += (size_t)n;
    if (used >= sizeof(known)) break;
  }
  size_t len = strlen(name);
  return TR_STATUS(TR_VALUE, "unknown dtype '%.64s%s'; known dtypes: %s", name,
                   len > 64 ? "..." : "", known);
}

const char *tr_dtype_name(tr_dtype dtype) {
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (tr_dtype_equal(kDtypes[i].dtype, dtype)) return kDtypes[i].name;
  }
  return NULL;
}

size_t tr_dtype_format(tr_dtype dtype, char *buf, size_t size) {
  const char *name = tr_dtype_name(dtype);
  int n = name != NULL ? snprintf(buf, size, "%s", name)
                       : snprintf(buf, size, "dtype(code=%u, bits=%u, lanes=%u)",
                                  (unsigned)dtype.code, (unsigned)dtype.bits,
                                  (unsigned)dtype.lanes);
  return n < 0 ? 0 : (size_t)n;
}

int tr_dtype_equal(tr_dtype a, tr_dtype b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

size_t tr_dtype_bytes(tr_dtype dtype) {
  return ((size_t)dtype.bits * (size_t)dtype.lanes + 7) / 8;
}

int tr_dtype_is_floating(tr_dtype dtype) {
  return dtype.code == kDLFloat || dtype.code == kDLBfloat ||
         dtype.code == TR_DL_FLOAT8_E4M3FN || dtype.code == TR_DL_FLOAT8_E5M2;
}

size_t tr_dtype_count(void) { return DTYPE_COUNT; }

tr_dtype tr_dtype_at(size_t i) { return kDtypes[i < DTYPE_COUNT ? i : 0].dtype; }
