// driver_unloadable_test.cc: where no libcuda can be loaded, loading the driver fails with a
// message that says the driver could not be loaded, gives the loader's reason (with the file it
// tried), where it looked and what to do. The BUILD rule puts testdata/unloadable first on the
// loader's path: its libcuda.so.1 and libcuda.so are text files, which the loader refuses ("invalid
// ELF header") without searching on, so the test runs the same whatever driver the machine has.
#include <string>

#include <catch2/catch.hpp>

#include "core/test_support.h"
#include "kernels/cuda/driver.h"

TEST_CASE("a libcuda the loader cannot load: the message gives the loader's reason and what to do") {
  std::string e = tr_test::error_of(tr_cu_load());
  INFO(e);
  CHECK(e.find("BackendError") == 0);
  CHECK(e.find("the CUDA driver (libcuda.so.1) could not be loaded: ") != std::string::npos);
  // the loader's reason for each name tried, in order
  CHECK(e.find("'libcuda.so.1': kernels/cuda/testdata/unloadable/libcuda.so.1: invalid ELF header; ") !=
        std::string::npos);
  CHECK(e.find("'libcuda.so': kernels/cuda/testdata/unloadable/libcuda.so: invalid ELF header.") != std::string::npos);
  CHECK(e.find("It comes with the NVIDIA driver; the loader looked on LD_LIBRARY_PATH and in its cache "
               "(ldconfig). Without a GPU, pass cpu tensors: the cpu backend serves every op") != std::string::npos);
  CHECK(tr_test::error_of(tr_cu_load()) == e);  // the load runs once; every call says the same
}
