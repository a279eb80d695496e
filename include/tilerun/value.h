/* value.h: tr_value, a typed param value (none, int, float, bool, string, dtype, int list):
 * printable, comparable and hashable, since params key builds and show in error messages. */
#ifndef TILERUN_VALUE_H_
#define TILERUN_VALUE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tilerun/dtype.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest string value, in bytes (NUL excluded), and longest int list. */
#define TR_VALUE_STR_MAX 1024
#define TR_VALUE_LIST_MAX 64

typedef enum tr_value_kind {
  TR_VALUE_NONE = 0,
  TR_VALUE_INT,
  TR_VALUE_FLOAT,
  TR_VALUE_BOOL,
  TR_VALUE_STR,
  TR_VALUE_DTYPE,
  TR_VALUE_INT_LIST,
} tr_value_kind;

/* A value owns its string or list storage: release it with tr_value_clear, duplicate it with
 * tr_value_copy. A zero-initialised tr_value is none. */
typedef struct tr_value {
  tr_value_kind kind;
  union {
    int64_t i;
    double f;
    bool b;
    tr_dtype dtype;
    struct {
      char *data; /* NUL-terminated */
      size_t len;
    } str;
    struct {
      int64_t *items;
      size_t len;
    } list;
  } as;
} tr_value;

/* A param given by name, as callers pass params and builders receive them. The name is not owned
 * by the struct; the value is owned as a tr_value is. */
typedef struct tr_named_value {
  const char *name;
  tr_value value;
} tr_named_value;

/* The kind's name: "none", "int", "float", "bool", "str", "dtype", "list[int]". */
const char *tr_value_kind_name(tr_value_kind kind);

/* Constructors of the kinds that need no storage. Cannot fail. */
tr_value tr_value_none(void);
tr_value tr_value_int(int64_t i);
tr_value tr_value_float(double f);
tr_value tr_value_bool(bool b);
tr_value tr_value_dtype(tr_dtype dtype);

/* A string value (copied). A string over TR_VALUE_STR_MAX bytes is a ValueError giving its
 * length, the limit and its first characters; NULL is a ValueError; out of memory is
 * OutOfMemoryError. On failure *out is untouched. The caller clears *out. */
tr_status *tr_value_str(const char *s, tr_value *out) TR_MUST_USE;

/* An int-list value (copied; n may be 0). More than TR_VALUE_LIST_MAX items is a ValueError
 * giving the count and the limit. On failure *out is untouched. The caller clears *out. */
tr_status *tr_value_int_list(const int64_t *items, size_t n, tr_value *out) TR_MUST_USE;

/* Deep-copies src into *dst (which must not hold storage). Fails only on OutOfMemoryError,
 * leaving *dst untouched. */
tr_status *tr_value_copy(const tr_value *src, tr_value *dst) TR_MUST_USE;

/* Frees the value's storage and makes it none. NULL allowed. */
void tr_value_clear(tr_value *value);

/* Typed equality: values of different kinds are never equal (int 1 is not float 1.0). Floats
 * compare by value, with NaN equal to NaN, so that a value can key a table. */
int tr_value_equal(const tr_value *a, const tr_value *b);

/* A hash consistent with tr_value_equal (0.0 and -0.0 hash alike, every NaN alike). */
uint64_t tr_value_hash(const tr_value *value);

/* Writes the value as Python would print it: None, 3, 1e-05, True, 'text', float16, (4096,),
 * (1, 2). Floats print the shortest form that reads back exactly. Returns the length needed, as
 * snprintf does. Cannot fail. */
size_t tr_value_format(const tr_value *value, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_VALUE_H_ */
