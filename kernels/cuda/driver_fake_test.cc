// driver_fake_test.cc: on a machine whose libcuda.so.1 loads but whose cuInit reports
// CUDA_ERROR_INSUFFICIENT_DRIVER (the driver's library without a matching kernel driver: a
// machine without a GPU), loading the driver fails with a message that gives the driver's error,
// names the file loaded and says what to do. The BUILD rule puts testdata's fake libcuda.so.1
// (fake_libcuda.c) first on the loader's path, so it runs the same with or without a GPU.
#include <string>

#include <catch2/catch.hpp>

#include "core/test_support.h"
#include "kernels/cuda/driver.h"

TEST_CASE("cuInit's insufficient-driver error names the file loaded and says what to do") {
  std::string e = tr_test::error_of(tr_cu_load());
  INFO(e);
  CHECK(e.find("BackendError") == 0);
  CHECK(e.find("initialising the CUDA driver (cuInit) failed: CUDA_ERROR_INSUFFICIENT_DRIVER (35): CUDA driver "
               "version is insufficient for CUDA runtime version") != std::string::npos);
  CHECK(e.find("kernels/cuda/testdata/fake/libcuda.so.1") != std::string::npos);  // the file, by its path
  CHECK(e.find("no NVIDIA kernel driver matching it is running here (a machine without a GPU") != std::string::npos);
  CHECK(e.find("pass cpu tensors: the cpu backend serves every op") != std::string::npos);
  CHECK(tr_test::error_of(tr_cu_load()) == e);  // the load runs once; every call says the same
}
