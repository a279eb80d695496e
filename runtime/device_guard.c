/* device_guard.c: the call's device made current while a kernel is built or tuned, and the
 * caller's restored after, through the CUDA driver (kernels/cuda/driver.h: one loader for the
 * process; a builder using the CUDA runtime sees the device current, since the runtime follows
 * the driver's current context). Only `cuda` has a current device (the spec: a device not of the
 * process's accelerator type is left alone); the driver is loaded when a cuda kernel is first
 * built, so the runtime builds and runs where CUDA is absent. */
#include <string.h>

#include "kernels/cuda/driver.h"
#include "runtime/internal.h"

/* The driver's failure, with what was being done to which device in front; the code kept. */
static tr_status *in_words(tr_status *status, const char *fmt, const tr_device *device) {
  char dev[TR_DEVICE_FORMAT_MAX];
  tr_device_format(device, dev, sizeof(dev));
  tr_status *worded = tr_status_make(tr_status_code(status), __FILE__, __LINE__, fmt, dev, tr_status_message(status));
  tr_status_destroy(&status);
  return worded;
}

tr_status *tr__device_enter(const tr_device *device, tr_device_guard *guard) {
  guard->active = 0;
  if (strcmp(device->type, "cuda") != 0) return NULL;
  tr_cu_ctx ctx = NULL, previous = NULL;
  tr_status *status = tr_cu_enter_device(device->index < 0 ? 0 : device->index, &ctx, &previous);
  if (status != NULL) return in_words(status, "making %s current: %s", device);
  guard->ctx = ctx;
  guard->previous = previous;
  guard->active = 1;
  return NULL;
}

void tr__device_leave(tr_device_guard *guard) {
  if (guard->active) tr_cu_restore_context(guard->ctx, guard->previous);
  guard->active = 0;
}

tr_status *tr__cuda_facts(const tr_device *device, tr_device_facts *out) {
  int32_t arch = -1, sms = 0;
  int64_t smem = 0;
  tr_status *status = tr_cu_device_facts(device->index < 0 ? 0 : device->index, &arch, &sms, &smem);
  if (status != NULL && strncmp(tr_status_message(status), "reading the facts of", 20) != 0) {
    return in_words(status, "reading the facts of %s: %s", device);
  }
  if (status != NULL) return status;
  out->arch = arch;
  out->calibration = NULL;
  out->sm_count = sms;
  out->smem_budget = smem;
  return NULL;
}
