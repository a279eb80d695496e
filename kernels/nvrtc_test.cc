// nvrtc_test.cc: NVRTC compiles cubins for sm_90a and sm_80 with no GPU; errors carry the log.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "kernels/nvrtc.h"

static const char *kScale = R"(
extern "C" __global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a * FACTOR;
}
)";

TEST_CASE("a kernel compiles to an ELF cubin for each CI architecture") {
  const char *options[] = {"-DFACTOR=2.0f"};
  for (const char *arch : {"sm_90a", "sm_80"}) {
    INFO(arch);
    tr_cubin cubin{};
    tr_status *s = tr_nvrtc_compile("scale.cu", kScale, arch, options, 1, &cubin);
    INFO(tr_status_message(s));
    REQUIRE(s == nullptr);
    REQUIRE(cubin.size > 64);
    CHECK(std::memcmp(cubin.data, "\x7f" "ELF", 4) == 0);
    CHECK(cubin.log != nullptr);
    tr_cubin_clear(&cubin);
    CHECK(cubin.data == nullptr);
  }
  CHECK(tr_nvrtc_version() >= 12000);
}

TEST_CASE("a compile error is a CompileError carrying NVRTC's log") {
  tr_cubin cubin{};
  tr_status *s = tr_nvrtc_compile("scale.cu", kScale, "sm_90a", nullptr, 0, &cubin);  // no FACTOR
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_COMPILE);
  std::string message = tr_status_message(s);
  CHECK(message.find("compiling 'scale.cu' for sm_90a failed") == 0);
  CHECK(message.find("FACTOR") != std::string::npos);  // NVRTC's own diagnosis
  CHECK(cubin.data == nullptr);
  tr_status_destroy(&s);
}

TEST_CASE("a malformed architecture is named") {
  tr_cubin cubin{};
  tr_status *s = tr_nvrtc_compile("scale.cu", kScale, "hopper", nullptr, 0, &cubin);
  REQUIRE(s != nullptr);
  CHECK(std::string(tr_status_message(s)) ==
        "compiling 'scale.cu': architecture 'hopper' is not of the form sm_NN[a]");
  tr_status_destroy(&s);
  s = tr_nvrtc_compile("scale.cu", kScale, "sm_1", nullptr, 0, &cubin);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_COMPILE);
  CHECK(std::string(tr_status_message(s)).find("sm_1") != std::string::npos);
  tr_status_destroy(&s);
}
