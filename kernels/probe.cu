// probe.cu: one tiny kernel compiled by nvcc, so the nvcc build path is exercised end to end.
#include <cuda_runtime.h>

#include "kernels/probe.h"

__global__ void squares(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * i;
}

extern "C" int tr_cuda_probe_squares(int *out_host, int n) {
  int *dev = nullptr;
  cudaError_t rc = cudaMalloc(&dev, sizeof(int) * (n > 0 ? n : 1));
  if (rc != cudaSuccess) return (int)rc;
  squares<<<(n + 255) / 256, 256>>>(dev, n);
  rc = cudaGetLastError();
  if (rc == cudaSuccess) rc = cudaMemcpy(out_host, dev, sizeof(int) * n, cudaMemcpyDeviceToHost);
  cudaFree(dev);
  return (int)rc;
}

extern "C" const char *tr_cuda_probe_error(int error) {
  return cudaGetErrorString((cudaError_t)error);
}
