/* device_guard.c: the call's device made current while a kernel is built or tuned, and the
 * caller's restored after. Only `cuda` has a current device (the spec: a device not of the
 * process's accelerator type is left alone); the CUDA runtime is found through the platform
 * layer when a cuda kernel is first built, so the runtime builds and runs where CUDA is absent. */
#include <string.h>

#include "runtime/internal.h"

typedef int (*cuda_get_fn)(int *device);
typedef int (*cuda_set_fn)(int device);
typedef int (*cuda_attr_fn)(int *value, int attr, int device);

/* cudaDeviceAttr values (driver_types.h, CUDA 12 and 13). */
enum {
  kAttrSharedMemoryPerBlockOptin = 97,
  kAttrMultiProcessorCount = 16,
  kAttrComputeCapabilityMajor = 75,
  kAttrComputeCapabilityMinor = 76,
};

static tr_plat_once g_once = TR_PLAT_ONCE_INIT;
static tr_plat_lib *g_cudart;
static cuda_get_fn g_get;
static cuda_set_fn g_set;
static cuda_attr_fn g_attr;
typedef const char *(*cuda_error_fn)(int error);
static cuda_error_fn g_error_string;

static const char *cuda_error(int rc) { return g_error_string ? g_error_string(rc) : "unknown"; }
static char g_error[512];

static void load_cudart(void) {
  static const char *const kNames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  g_error[0] = '\0';
  for (size_t i = 0; i < sizeof(kNames) / sizeof(kNames[0]) && g_cudart == NULL; i++) {
    tr_status *failed = tr_plat_lib_open(kNames[i], &g_cudart);
    if (failed != NULL) {
      strncpy(g_error, tr_status_message(failed), sizeof(g_error) - 1);
      tr_status_destroy(&failed);
    }
  }
  if (g_cudart == NULL) return;
  void *get = tr_plat_lib_symbol(g_cudart, "cudaGetDevice"), *set = tr_plat_lib_symbol(g_cudart, "cudaSetDevice");
  g_error[0] = '\0'; /* a later name loaded: the earlier ones' failures do not matter */
  void *attr = tr_plat_lib_symbol(g_cudart, "cudaDeviceGetAttribute");
  void *text = tr_plat_lib_symbol(g_cudart, "cudaGetErrorString");
  memcpy(&g_error_string, &text, sizeof(g_error_string));
  memcpy(&g_get, &get, sizeof(g_get));
  memcpy(&g_set, &set, sizeof(g_set));
  memcpy(&g_attr, &attr, sizeof(g_attr));
}

tr_status *tr__device_enter(const tr_device *device, tr_device_guard *guard) {
  guard->active = 0;
  if (strcmp(device->type, "cuda") != 0) return NULL;
  tr_plat_once_run(&g_once, load_cudart);
  char dev[TR_DEVICE_FORMAT_MAX];
  tr_device_format(device, dev, sizeof(dev));
  if (g_get == NULL || g_set == NULL) {
    return TR_STATUS(TR_BACKEND, "making %s current: the CUDA runtime (libcudart) could not be "
                     "loaded: %s", dev, g_error[0] ? g_error : "cudaGetDevice/cudaSetDevice missing");
  }
  int rc = g_get(&guard->saved);
  if (rc == 0) rc = g_set(device->index < 0 ? 0 : device->index);
  if (rc != 0) return TR_STATUS(TR_BACKEND, "making %s current: CUDA error %d (%s)", dev, rc, cuda_error(rc));
  guard->active = 1;
  return NULL;
}

void tr__device_leave(tr_device_guard *guard) {
  if (guard->active && g_set != NULL) g_set(guard->saved);
  guard->active = 0;
}

tr_status *tr__cuda_facts(const tr_device *device, tr_device_facts *out) {
  tr_plat_once_run(&g_once, load_cudart);
  char dev[TR_DEVICE_FORMAT_MAX];
  tr_device_format(device, dev, sizeof(dev));
  if (g_attr == NULL) {
    return TR_STATUS(TR_BACKEND, "reading the facts of %s: the CUDA runtime (libcudart) could not "
                     "be loaded: %s", dev, g_error[0] ? g_error : "cudaDeviceGetAttribute missing");
  }
  int index = device->index < 0 ? 0 : device->index, major = 0, minor = 0, sms = 0, smem = 0;
  int rc = g_attr(&major, kAttrComputeCapabilityMajor, index);
  if (rc == 0) rc = g_attr(&minor, kAttrComputeCapabilityMinor, index);
  if (rc == 0) rc = g_attr(&sms, kAttrMultiProcessorCount, index);
  if (rc == 0) rc = g_attr(&smem, kAttrSharedMemoryPerBlockOptin, index);
  if (rc != 0) return TR_STATUS(TR_BACKEND, "reading the facts of %s: CUDA error %d (%s)", dev, rc, cuda_error(rc));
  out->arch = major * 10 + minor;
  out->calibration = NULL;
  out->sm_count = sms;
  out->smem_budget = smem;
  return NULL;
}
