// cuda_testing.h: float32 tensors on cuda:0 for the tests that need a GPU (needs cudart).
#ifndef TILERUN_RUNTIME_CUDA_TESTING_H_
#define TILERUN_RUNTIME_CUDA_TESTING_H_

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include <dlpack/dlpack.h>

#include "tilerun/dtype.h"

namespace tr_test {

// A float32 tensor on cuda:0 with host-chosen values: cudaMalloc'd, or (pooled) from the
// stream-ordered pool (cudaMallocAsync), which CUDA IPC cannot share.
struct CudaTensor {
  std::vector<int64_t> shape, strides;
  float *dev = nullptr;
  size_t n = 0;
  DLTensor t{};
  CudaTensor(std::vector<int64_t> s, const std::vector<float> &values, bool pooled = false) : shape(std::move(s)) {
    n = values.size();
    if (pooled) REQUIRE(cudaMallocAsync(&dev, n * sizeof(float), 0) == cudaSuccess);
    else REQUIRE(cudaMalloc(&dev, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemcpy(dev, values.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    t.data = dev;
    t.device = {kDLCUDA, 0};
    t.ndim = (int32_t)shape.size();
    t.dtype = TR_FLOAT32;
    t.shape = shape.data();
  }
  ~CudaTensor() { cudaFree(dev); }
};

// What the driver's default pool of `device` has handed out (cudaMemPoolAttrUsedMemCurrent), in
// bytes; all ones where the pool cannot be read.
inline uint64_t driver_pool_used(int device = 0) {
  cudaMemPool_t pool;
  unsigned long long v = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return ~0ull;
  (void)cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v);
  return (uint64_t)v;
}

// A float32 cuda tensor's values (after the device is idle).
inline std::vector<float> host(const DLTensor &t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.ndim; d++) n *= t.shape[d];
  std::vector<float> out((size_t)n);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(out.data(), (char *)t.data + t.byte_offset, out.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  return out;
}

}  // namespace tr_test

#endif  // TILERUN_RUNTIME_CUDA_TESTING_H_
