/* dtype.h: element types are DLPack's DLDataType, with tilerun's names for them. */
#ifndef TILERUN_DTYPE_H_
#define TILERUN_DTYPE_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef DLDataType tr_dtype;

/* DLPack type codes newer than some installed headers (DLPack 0.8 / 1.0 values). */
#define TR_DL_BOOL 6
#define TR_DL_FLOAT8_E4M3FN 10
#define TR_DL_FLOAT8_E5M2 12

/* Longest dtype name tilerun knows ("float8_e4m3" and "float8_e5m2": 11 characters). */
#define TR_DTYPE_NAME_MAX 16
/* Room for any formatted dtype, NUL included (unnamed ones print their three numbers). */
#define TR_DTYPE_FORMAT_MAX 48

/* The named dtypes, as constants. */
#define TR_FLOAT16 ((tr_dtype){kDLFloat, 16, 1})
#define TR_BFLOAT16 ((tr_dtype){kDLBfloat, 16, 1})
#define TR_FLOAT32 ((tr_dtype){kDLFloat, 32, 1})
#define TR_FLOAT64 ((tr_dtype){kDLFloat, 64, 1})
#define TR_INT8 ((tr_dtype){kDLInt, 8, 1})
#define TR_INT16 ((tr_dtype){kDLInt, 16, 1})
#define TR_INT32 ((tr_dtype){kDLInt, 32, 1})
#define TR_INT64 ((tr_dtype){kDLInt, 64, 1})
#define TR_UINT8 ((tr_dtype){kDLUInt, 8, 1})
#define TR_BOOL ((tr_dtype){TR_DL_BOOL, 8, 1})
#define TR_FLOAT8_E4M3 ((tr_dtype){TR_DL_FLOAT8_E4M3FN, 8, 1})
#define TR_FLOAT8_E5M2 ((tr_dtype){TR_DL_FLOAT8_E5M2, 8, 1})

/* Parses a dtype name: float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8,
 * bool, float8_e4m3, float8_e5m2. On failure returns a ValueError quoting the name received and
 * listing the known names; *out is untouched. Thread-safe. */
tr_status *tr_dtype_parse(const char *name, tr_dtype *out) TR_MUST_USE;

/* The name of a dtype, or NULL when it has none (another DLPack type). Static string. */
const char *tr_dtype_name(tr_dtype dtype);

/* Writes the name, or "dtype(code=C, bits=B, lanes=L)" for an unnamed one; returns the length
 * needed, as snprintf does. Cannot fail. */
size_t tr_dtype_format(tr_dtype dtype, char *buf, size_t size);

/* 1 when code, bits and lanes all match. */
int tr_dtype_equal(tr_dtype a, tr_dtype b);

/* The bytes one element takes (bits * lanes, rounded up to whole bytes). */
size_t tr_dtype_bytes(tr_dtype dtype);

/* 1 for the floating-point dtypes (float*, bfloat16, float8_*), 0 otherwise. */
int tr_dtype_is_floating(tr_dtype dtype);

/* The number of named dtypes, and the i-th of them (0 <= i < count), for listings. */
size_t tr_dtype_count(void);
tr_dtype tr_dtype_at(size_t i);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_DTYPE_H_ */
