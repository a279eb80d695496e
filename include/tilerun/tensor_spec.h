/* tensor_spec.h: tr_tensor_spec, the description of a tensor (device, dtype, shape) that
 * validation, settlement and builders work from; it never holds data. Tensors themselves are
 * DLPack DLTensors. */
#ifndef TILERUN_TENSOR_SPEC_H_
#define TILERUN_TENSOR_SPEC_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "tilerun/device.h"
#include "tilerun/dtype.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The highest rank a tensor may have in tilerun. */
#define TR_MAX_RANK 8

/* A plain value (no pointers): copy it freely. */
typedef struct tr_tensor_spec {
  tr_device device;
  tr_dtype dtype;
  int32_t rank;
  int64_t shape[TR_MAX_RANK]; /* shape[rank..] are 0 */
} tr_tensor_spec;

/* Makes a spec. On failure returns a SignatureError(shape) naming the rank (negative or above
 * TR_MAX_RANK) or the axis and the negative extent received, or a ValueError for a NULL shape of
 * a rank above 0; *out is untouched. */
tr_status *tr_tensor_spec_make(const tr_device *device, tr_dtype dtype, int32_t rank,
                               const int64_t *shape, tr_tensor_spec *out) TR_MUST_USE;

/* Describes a DLTensor (its strides and data are not looked at). Fails as tr_tensor_spec_make
 * and tr_device_from_dl do, or with a ValueError for a NULL tensor. */
tr_status *tr_tensor_spec_from_dl(const DLTensor *tensor, tr_tensor_spec *out) TR_MUST_USE;

/* Writes "float16[4, 4096] on cuda:0" (a rank-0 spec prints "float16[] on cpu"); returns the
 * length needed, as snprintf does. Cannot fail. */
size_t tr_tensor_spec_format(const tr_tensor_spec *spec, char *buf, size_t size);

/* Writes the shape alone as the manifest's messages show it: "(4096,)", "(2, 3)", "()". */
size_t tr_shape_format(int32_t rank, const int64_t *shape, char *buf, size_t size);

/* 1 when device, dtype and shape all match. */
int tr_tensor_spec_equal(const tr_tensor_spec *a, const tr_tensor_spec *b);

/* A hash consistent with tr_tensor_spec_equal. */
uint64_t tr_tensor_spec_hash(const tr_tensor_spec *spec);

/* The element count (1 for rank 0). Saturates at INT64_MAX instead of overflowing. */
int64_t tr_tensor_spec_numel(const tr_tensor_spec *spec);

/* 1 when a DLTensor's elements are laid out row-major with no gaps (NULL strides, or strides
 * equal to the compact ones; axes of extent 1 may have any stride), 0 otherwise. */
int tr_dl_tensor_is_contiguous(const DLTensor *tensor);

/* For a tensor whose trailing axes are contiguous and whose leading axes all have stride 0 (a
 * row broadcast over them, as torch's expand makes of a bias): the element count of the
 * contiguous trailing block, which repeats over the leading axes. 0 for any other layout (a
 * contiguous tensor included) and for a tensor of no elements. */
int64_t tr_dl_tensor_repeat_period(const DLTensor *tensor);

/* The bytes a DLTensor's elements reach, relative to its data address (byte_offset included):
 * [*lo, *hi), from its shape, strides (NULL: compact; negative ones reach below) and element
 * size. A tensor of no elements reaches none (*lo == *hi). Returns 1, or 0 where the span cannot
 * be counted in 64 bits (an extent times its stride overflows: no memory holds such a tensor) or
 * an extent is negative. */
int tr_dl_tensor_span(const DLTensor *tensor, int64_t *lo, int64_t *hi);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TENSOR_SPEC_H_ */
