// headers_test_cpp.cc: the public headers also compile as C++ (Catch2 tests and C++ callers).
#include <catch2/catch.hpp>

#include "tilerun/backend.h"
#include "tilerun/core.h"
#include "tilerun/inspect.h"

TEST_CASE("the public headers are usable from C++") {
  tr_dtype dt = TR_BFLOAT16;
  CHECK(tr_dtype_bytes(dt) == 2);
  CHECK(TR_CODE_COUNT > TR_OUT_OF_MEMORY);
}

TEST_CASE("the kernel-type header is usable from C++") {
  static const tr_call_field fields[] = {{"row", TR_VALUE_INT, 0, 0, {}}};
  static const tr_call_spec_type type = {"TestCall", 1, fields};
  tr_call_spec spec{};
  spec.type = &type;
  spec.values[0] = tr_value_int(3);
  CHECK(tr_call_spec_int(&spec, "row") == 3);
  CHECK(tr_call_spec_get(&spec, "eps") == nullptr);
  CHECK(TR_KERNEL_TYPE_MIN_SIZE == sizeof(tr_kernel_type));
}
