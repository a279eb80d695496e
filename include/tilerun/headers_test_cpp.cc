// headers_test_cpp.cc: the public headers also compile as C++ (Catch2 tests and C++ callers).
#include <catch2/catch.hpp>

#include "tilerun/core.h"

TEST_CASE("the public headers are usable from C++") {
  tr_dtype dt = TR_BFLOAT16;
  CHECK(tr_dtype_bytes(dt) == 2);
  CHECK(TR_CODE_COUNT > TR_OUT_OF_MEMORY);
}
