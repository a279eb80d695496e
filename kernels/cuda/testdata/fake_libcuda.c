/* fake_libcuda.c: a libcuda.so.1 whose cuInit fails with CUDA_ERROR_INSUFFICIENT_DRIVER (35), as the
 * real one does on a machine with the driver's user-space library but no matching kernel driver
 * (no GPU). It defines every function kernels/cuda/driver.c binds, so the load gets as far as
 * cuInit; only cuInit and the two error texts are ever called (driver_fake_test). */
#include <stddef.h>

#define CUDA_ERROR_INSUFFICIENT_DRIVER 35

int cuInit(unsigned flags) {
  (void)flags;
  return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

int cuGetErrorName(int code, const char **name) {
  *name = code == CUDA_ERROR_INSUFFICIENT_DRIVER ? "CUDA_ERROR_INSUFFICIENT_DRIVER" : NULL;
  return *name != NULL ? 0 : 1;
}

int cuGetErrorString(int code, const char **text) {
  *text = code == CUDA_ERROR_INSUFFICIENT_DRIVER ? "CUDA driver version is insufficient for CUDA runtime version"
                                                 : NULL;
  return *text != NULL ? 0 : 1;
}

/* The rest: never called (a call would find the driver not initialised). */
#define UNUSED_ENTRY(name) \
  int name(void) { return CUDA_ERROR_INSUFFICIENT_DRIVER; }
UNUSED_ENTRY(cuDeviceGet)
UNUSED_ENTRY(cuDevicePrimaryCtxRetain)
UNUSED_ENTRY(cuCtxGetCurrent)
UNUSED_ENTRY(cuCtxSetCurrent)
UNUSED_ENTRY(cuModuleLoadData)
UNUSED_ENTRY(cuModuleGetFunction)
UNUSED_ENTRY(cuFuncSetAttribute)
UNUSED_ENTRY(cuLaunchKernel)
UNUSED_ENTRY(cuMemAllocAsync)
UNUSED_ENTRY(cuMemFreeAsync)
UNUSED_ENTRY(cuDeviceGetCount)
UNUSED_ENTRY(cuMemcpyHtoD_v2)
UNUSED_ENTRY(cuMemcpyDtoH_v2)
UNUSED_ENTRY(cuMemcpyDtoDAsync_v2)
UNUSED_ENTRY(cuStreamSynchronize)
UNUSED_ENTRY(cuDeviceGetAttribute)
UNUSED_ENTRY(cuModuleUnload)
UNUSED_ENTRY(cuStreamIsCapturing)
UNUSED_ENTRY(cuMemAlloc_v2)
UNUSED_ENTRY(cuMemFree_v2)
UNUSED_ENTRY(cuMemGetAddressRange_v2)
UNUSED_ENTRY(cuIpcGetMemHandle)
UNUSED_ENTRY(cuIpcOpenMemHandle_v2)
UNUSED_ENTRY(cuIpcCloseMemHandle)
UNUSED_ENTRY(cuEventCreate)
UNUSED_ENTRY(cuEventRecord)
UNUSED_ENTRY(cuEventSynchronize)
UNUSED_ENTRY(cuEventDestroy_v2)
UNUSED_ENTRY(cuEventElapsedTime)
UNUSED_ENTRY(cuMemsetD8Async)
