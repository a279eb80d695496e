// probe_test.cc (needs a GPU): the nvcc-built probe kernel runs and writes what it should.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/probe.h"

TEST_CASE("the nvcc-built kernel runs on the GPU") {
  const int n = 1000;
  std::vector<int> out(n, -1);
  int rc = tr_cuda_probe_squares(out.data(), n);
  INFO(tr_cuda_probe_error(rc));
  REQUIRE(rc == 0);
  for (int i = 0; i < n; i++) REQUIRE(out[i] == i * i);
}
