/* device.c: devices (type name + index), their text form and their DLPack mapping. */
#include "tilerun/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tilerun/hash.h"

/* The DLPack device types tilerun names. kDLOneAPI is 14 in DLPack 0.6+. */
static const struct {
  int dl_type;
  const char *name;
  int has_index;
} kDlDevices[] = {
    {kDLCPU, "cpu", 0},          {kDLCUDA, "cuda", 1},     {kDLCUDAHost, "cuda_host", 0},
    {kDLOpenCL, "opencl", 1},    {kDLVulkan, "vulkan", 1}, {kDLMetal, "mps", 1},
    {kDLVPI, "vpi", 1},          {kDLROCM, "rocm", 1},     {kDLExtDev, "ext_dev", 1},
    {kDLCUDAManaged, "cuda_managed", 0}, {14, "xpu", 1},
};
#define DL_DEVICE_COUNT (sizeof(kDlDevices) / sizeof(kDlDevices[0]))

/* Checks a type name of `len` characters; NULL when it is valid. `text` is what the user wrote,
 * quoted in the message. */
static tr_status *check_type(const char *type, size_t len, const char *text) {
  if (len == 0) return TR_STATUS(TR_VALUE, "device '%s': the device type is empty", text);
  if (len > TR_DEVICE_TYPE_MAX) {
    return TR_STATUS(TR_VALUE, "device '%.40s%s': the device type is %zu characters long, at most %d",
                     text, strlen(text) > 40 ? "..." : "", len, TR_DEVICE_TYPE_MAX);
  }
  for (size_t i = 0; i < len; i++) {
    char c = type[i];
    int ok = (c >= 'a' && c <= 'z') || (i > 0 && ((c >= '0' && c <= '9') || c == '_'));
    if (!ok) {
      return TR_STATUS(TR_VALUE,
                       "device '%s': character %zu of the device type is '%c'; a device type is "
                       "a lowercase letter followed by lowercase letters, digits or '_'",
                       text, i + 1, c);
    }
  }
  return NULL;
}

tr_status *tr_device_make(const char *type, int64_t index, tr_device *out) {
  if (type == NULL) return TR_STATUS(TR_VALUE, "device type is NULL");
  TR_RETURN_IF_ERROR(check_type(type, strlen(type), type));
  if (index < TR_DEVICE_NO_INDEX) {
    return TR_STATUS(TR_VALUE, "device '%s': index %lld is negative", type, (long long)index);
  }
  if (index > INT32_MAX) {
    return TR_STATUS(TR_VALUE, "device '%s': index %lld is above %d", type, (long long)index,
                     INT32_MAX);
  }
  tr_device device;
  memset(&device, 0, sizeof(device));
  memcpy(device.type, type, strlen(type));
  device.index = (int32_t)index;
  *out = device;
  return NULL;
}

tr_status *tr_device_parse(const char *text, tr_device *out) {
  if (text == NULL) return TR_STATUS(TR_VALUE, "device text is NULL");
  const char *colon = strchr(text, ':');
  size_t type_len = colon ? (size_t)(colon - text) : strlen(text);
  TR_RETURN_IF_ERROR(check_type(text, type_len, text));
  int64_t index = TR_DEVICE_NO_INDEX;
  if (colon != NULL) {
    const char *digits = colon + 1;
    if (*digits == '-') {
      return TR_STATUS(TR_VALUE, "device '%s': index %s is negative", text, digits);
    }
    char *end = NULL;
    errno = 0;
    long long parsed = strtoll(digits, &end, 10);
    if (*digits < '0' || *digits > '9' || *end != '\0' || errno == ERANGE || parsed > INT32_MAX) {
      return TR_STATUS(TR_VALUE,
                       "device '%s': index '%s' is not a number from 0 to %d", text, digits,
                       INT32_MAX);
    }
    index = parsed;
  }
  tr_device device;
  memset(&device, 0, sizeof(device));
  memcpy(device.type, text, type_len);
  device.index = (int32_t)index;
  *out = device;
  return NULL;
}

size_t tr_device_format(const tr_device *device, char *buf, size_t size) {
  int n = device->index == TR_DEVICE_NO_INDEX
              ? snprintf(buf, size, "%s", device->type)
              : snprintf(buf, size, "%s:%d", device->type, (int)device->index);
  return n < 0 ? 0 : (size_t)n;
}

int tr_device_equal(const tr_device *a, const tr_device *b) {
  return a->index == b->index && strcmp(a->type, b->type) == 0;
}

uint64_t tr_device_hash(const tr_device *device) {
  uint64_t h = tr_hash_bytes(TR_HASH_SEED, device->type, strlen(device->type));
  return tr_hash_u64(h, (uint64_t)(int64_t)device->index);
}

tr_status *tr_device_from_dl(DLDevice dl, tr_device *out) {
  for (size_t i = 0; i < DL_DEVICE_COUNT; i++) {
    if ((int)dl.device_type != kDlDevices[i].dl_type) continue;
    if (dl.device_id < 0) {
      return TR_STATUS(TR_VALUE, "DLDevice(device_type=%d, device_id=%d): device_id is negative",
                       (int)dl.device_type, (int)dl.device_id);
    }
    return tr_device_make(kDlDevices[i].name,
                          kDlDevices[i].has_index ? dl.device_id : TR_DEVICE_NO_INDEX, out);
  }
  return TR_STATUS(TR_VALUE, "DLDevice(device_type=%d, device_id=%d): tilerun has no name for "
                   "DLPack device type %d", (int)dl.device_type, (int)dl.device_id,
                   (int)dl.device_type);
}

tr_status *tr_device_to_dl(const tr_device *device, DLDevice *out) {
  for (size_t i = 0; i < DL_DEVICE_COUNT; i++) {
    if (strcmp(device->type, kDlDevices[i].name) != 0) continue;
    DLDevice dl;
    dl.device_type = (DLDeviceType)kDlDevices[i].dl_type;
    dl.device_id = device->index == TR_DEVICE_NO_INDEX ? 0 : device->index;
    *out = dl;
    return NULL;
  }
  char text[TR_DEVICE_FORMAT_MAX];
  tr_device_format(device, text, sizeof(text));
  return TR_STATUS(TR_VALUE, "device '%s': DLPack has no device type for '%s'", text,
                   device->type);
}
