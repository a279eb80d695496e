/* tensor_spec.c: tensor descriptions (device, dtype, shape), built directly or from DLTensors. */
#include "tilerun/tensor_spec.h"

#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "tilerun/hash.h"

tr_status *tr_tensor_spec_make(const tr_device *device, tr_dtype dtype, int32_t rank,
                               const int64_t *shape, tr_tensor_spec *out) {
  if (rank < 0 || rank > TR_MAX_RANK) {
    return TR_STATUS(TR_SIGNATURE_SHAPE, "tensor rank %d is out of range: tilerun handles ranks 0 to %d",
                     (int)rank, TR_MAX_RANK);
  }
  if (rank > 0 && shape == NULL) {
    return TR_STATUS(TR_VALUE, "tensor of rank %d has a NULL shape", (int)rank);
  }
  for (int32_t axis = 0; axis < rank; axis++) {
    if (shape[axis] < 0) {
      char text[256];
      tr_shape_format(rank, shape, text, sizeof(text));
      return TR_STATUS(TR_SIGNATURE_SHAPE, "tensor shape %s: axis %d has extent %lld, which is negative",
                       text, (int)axis, (long long)shape[axis]);
    }
  }
  tr_tensor_spec spec;
  memset(&spec, 0, sizeof(spec));
  spec.device = *device;
  spec.dtype = dtype;
  spec.rank = rank;
  if (rank > 0) memcpy(spec.shape, shape, (size_t)rank * sizeof(int64_t));
  *out = spec;
  return NULL;
}

tr_status *tr_tensor_spec_from_dl(const DLTensor *tensor, tr_tensor_spec *out) {
  if (tensor == NULL) return TR_STATUS(TR_VALUE, "tensor is NULL");
  tr_device device;
  TR_RETURN_IF_ERROR(tr_device_from_dl(tensor->device, &device));
  return tr_tensor_spec_make(&device, tensor->dtype, tensor->ndim, tensor->shape, out);
}

size_t tr_shape_format(int32_t rank, const int64_t *shape, char *buf, size_t size) {
  size_t used = 0;
  if (size > 0) buf[0] = '\0';
  tr__appendf(buf, size, &used, "(");
  for (int32_t axis = 0; axis < rank; axis++) {
    tr__appendf(buf, size, &used, axis ? ", %lld" : "%lld", (long long)shape[axis]);
  }
  tr__appendf(buf, size, &used, rank == 1 ? ",)" : ")");
  return used;
}

size_t tr_tensor_spec_format(const tr_tensor_spec *spec, char *buf, size_t size) {
  char dtype[TR_DTYPE_FORMAT_MAX];
  char device[TR_DEVICE_FORMAT_MAX];
  tr_dtype_format(spec->dtype, dtype, sizeof(dtype));
  tr_device_format(&spec->device, device, sizeof(device));
  size_t used = 0;
  if (size > 0) buf[0] = '\0';
  tr__appendf(buf, size, &used, "%s[", dtype);
  for (int32_t axis = 0; axis < spec->rank && axis < TR_MAX_RANK; axis++) {
    tr__appendf(buf, size, &used, axis ? ", %lld" : "%lld", (long long)spec->shape[axis]);
  }
  tr__appendf(buf, size, &used, "] on %s", device);
  return used;
}

int tr_tensor_spec_equal(const tr_tensor_spec *a, const tr_tensor_spec *b) {
  if (a->rank != b->rank || !tr_dtype_equal(a->dtype, b->dtype)) return 0;
  if (!tr_device_equal(&a->device, &b->device)) return 0;
  return memcmp(a->shape, b->shape, (size_t)a->rank * sizeof(int64_t)) == 0;
}

uint64_t tr_tensor_spec_hash(const tr_tensor_spec *spec) {
  uint64_t h = tr_device_hash(&spec->device);
  h = tr_hash_u64(h, ((uint64_t)spec->dtype.code << 24) | ((uint64_t)spec->dtype.bits << 16) |
                         spec->dtype.lanes);
  h = tr_hash_u64(h, (uint64_t)spec->rank);
  for (int32_t axis = 0; axis < spec->rank; axis++) h = tr_hash_u64(h, (uint64_t)spec->shape[axis]);
  return h;
}

int64_t tr_tensor_spec_numel(const tr_tensor_spec *spec) {
  int64_t n = 1;
  for (int32_t axis = 0; axis < spec->rank; axis++) {
    int64_t extent = spec->shape[axis];
    if (extent == 0) return 0;
    if (n > INT64_MAX / extent) n = INT64_MAX;
    else n *= extent;
  }
  return n;
}

int64_t tr_dl_tensor_repeat_period(const DLTensor *tensor) {
  if (tensor->strides == NULL || tensor->ndim < 1) return 0;
  int32_t axis = tensor->ndim - 1;
  int64_t expected = 1;
  for (; axis >= 0; axis--) { /* the contiguous trailing block */
    int64_t extent = tensor->shape[axis];
    if (extent == 0) return 0;
    if (extent != 1 && tensor->strides[axis] != expected) break;
    expected *= extent;
  }
  if (axis < 0) return 0; /* contiguous throughout: nothing repeats */
  int zero_stride = 0;
  for (int32_t lead = axis; lead >= 0; lead--) { /* the rest: each axis broadcast (stride 0) */
    if (tensor->shape[lead] == 0) return 0;
    if (tensor->shape[lead] != 1 && tensor->strides[lead] != 0) return 0;
    zero_stride |= tensor->shape[lead] != 1;
  }
  return zero_stride ? expected : 0;
}

int tr_dl_tensor_span(const DLTensor *tensor, int64_t *lo, int64_t *hi) {
  int64_t elem = (int64_t)tr_dtype_bytes(tensor->dtype), min = 0, max = 0, step = 1;
  *lo = *hi = 0;
  if (tensor->byte_offset > (uint64_t)INT64_MAX) return 0;
  for (int32_t d = 0; d < tensor->ndim; d++) {
    if (tensor->shape[d] < 0) return 0; /* no tensor has such a shape */
    if (tensor->shape[d] == 0) { /* no element: no byte */
      *lo = *hi = (int64_t)tensor->byte_offset;
      return 1;
    }
  }
  for (int32_t d = tensor->ndim - 1; d >= 0; d--) {
    int64_t stride = tensor->strides ? tensor->strides[d] : step, reach = 0;
    if (__builtin_mul_overflow(tensor->shape[d] - 1, stride, &reach)) return 0;
    if (reach < 0 ? __builtin_add_overflow(min, reach, &min) : __builtin_add_overflow(max, reach, &max)) return 0;
    if (tensor->strides == NULL && __builtin_mul_overflow(step, tensor->shape[d], &step)) return 0;
  }
  int64_t a = 0, b = 0;
  if (__builtin_mul_overflow(min, elem, &a) || __builtin_add_overflow(max, 1, &b) ||
      __builtin_mul_overflow(b, elem, &b) || __builtin_add_overflow(a, (int64_t)tensor->byte_offset, lo) ||
      __builtin_add_overflow(b, (int64_t)tensor->byte_offset, hi)) {
    *lo = *hi = 0;
    return 0;
  }
  return 1;
}

int tr_dl_tensor_is_contiguous(const DLTensor *tensor) {
  if (tensor->strides == NULL) return 1;
  for (int32_t axis = 0; axis < tensor->ndim; axis++) {
    if (tensor->shape[axis] == 0) return 1; /* no elements: any strides will do */
  }
  int64_t expected = 1;
  for (int32_t axis = tensor->ndim - 1; axis >= 0; axis--) {
    int64_t extent = tensor->shape[axis];
    if (extent != 1 && tensor->strides[axis] != expected) return 0;
    expected *= extent;
  }
  return 1;
}
