// driver_stub_test.cc: with the CUDA Toolkit's stub libcuda on the loader's path (as a machine
// with the toolkit but no GPU often has it), loading the driver fails with a message that names
// the stub file and says what to do. Run with LD_LIBRARY_PATH=<toolkit>/lib64/stubs (the BUILD
// rule sets it); on a machine with a working libcuda.so.1 the stub is never reached.
#include <string>

#include <catch2/catch.hpp>

#include "core/test_support.h"
#include "kernels/cuda/driver.h"

TEST_CASE("a stub libcuda is named as such, with what to do") {
  std::string e = tr_test::error_of(tr_cu_load());
  if (e.empty()) {
    WARN("a working CUDA driver loaded: the stub was not reached");
    return;
  }
  INFO(e);
  CHECK(e.find("BackendError") == 0);
  CHECK(e.find("cuInit") != std::string::npos);
  CHECK(e.find("(34)") != std::string::npos);  // CUDA_ERROR_STUB_LIBRARY (the stub has no names)
  CHECK(e.find("/stubs/libcuda.so") != std::string::npos);  // the file loaded, by its path
  CHECK(e.find("the CUDA Toolkit's stub") != std::string::npos);
  CHECK(e.find("pass cpu tensors") != std::string::npos);
  // the same on every later call (the load runs once)
  CHECK(tr_test::error_of(tr_cu_load()) == e);
}
