/* device.h: a device is a type name plus an index ("cuda:0", "cpu", "acme:3"), and its mapping
 * to and from DLPack's DLDevice. */
#ifndef TILERUN_DEVICE_H_
#define TILERUN_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest device type name, in characters (a name is [a-z][a-z0-9_]*). */
#define TR_DEVICE_TYPE_MAX 31
/* The index of a device that has none, such as "cpu". */
#define TR_DEVICE_NO_INDEX (-1)
/* Room for any formatted device, NUL included: type, ':', a 10-digit index. */
#define TR_DEVICE_FORMAT_MAX (TR_DEVICE_TYPE_MAX + 12)

/* A plain value: copy it, compare it with tr_device_equal. Zero-initialised it is invalid. */
typedef struct tr_device {
  char type[TR_DEVICE_TYPE_MAX + 1];
  int32_t index; /* >= 0, or TR_DEVICE_NO_INDEX */
} tr_device;

/* Makes a device from a type name and an index (>= 0 or TR_DEVICE_NO_INDEX). On failure returns
 * a ValueError naming the bad type name or index and leaves *out untouched. Thread-safe. */
tr_status *tr_device_make(const char *type, int64_t index, tr_device *out) TR_MUST_USE;

/* Parses "type" or "type:index". On failure returns a ValueError quoting the text and naming
 * what is wrong (empty, too long, bad character, negative or non-numeric index); *out is
 * untouched. Thread-safe. */
tr_status *tr_device_parse(const char *text, tr_device *out) TR_MUST_USE;

/* Writes "type" or "type:index" (NUL-terminated when size > 0); returns the length needed, as
 * snprintf does. Cannot fail. */
size_t tr_device_format(const tr_device *device, char *buf, size_t size);

/* 1 when both name the same device, 0 otherwise. */
int tr_device_equal(const tr_device *a, const tr_device *b);

/* A hash consistent with tr_device_equal. */
uint64_t tr_device_hash(const tr_device *device);

/* DLPack: kDLCPU <-> "cpu" (no index; DLPack's device_id 0), kDLCUDA <-> "cuda:N",
 * kDLCUDAHost <-> "cuda_host", kDLCUDAManaged <-> "cuda_managed", kDLROCM <-> "rocm:N",
 * kDLMetal <-> "mps:N", kDLVulkan <-> "vulkan:N", kDLOpenCL <-> "opencl:N",
 * kDLVPI <-> "vpi:N", kDLExtDev <-> "ext_dev:N", kDLOneAPI (14) <-> "xpu:N".
 * A DLDevice of another type, or a negative device_id, is a ValueError naming it; a device type
 * DLPack has no code for (a backend's own name) is a ValueError naming the type. */
tr_status *tr_device_from_dl(DLDevice dl, tr_device *out) TR_MUST_USE;
tr_status *tr_device_to_dl(const tr_device *device, DLDevice *out) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_DEVICE_H_ */
