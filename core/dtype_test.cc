// dtype_test.cc: dtype names over DLPack's DLDataType, both ways, and the bad-name error.
#include <catch2/catch.hpp>

#include "core/test_support.h"

#include <string>

#include "tilerun/dtype.h"

TEST_CASE("every named dtype parses to its DLPack type and prints back") {
  struct Row {
    const char *name;
    uint8_t code, bits;
    size_t bytes;
    int floating;
  } rows[] = {
      {"float16", kDLFloat, 16, 2, 1},   {"bfloat16", kDLBfloat, 16, 2, 1},
      {"float32", kDLFloat, 32, 4, 1},   {"float64", kDLFloat, 64, 8, 1},
      {"int8", kDLInt, 8, 1, 0},         {"int16", kDLInt, 16, 2, 0},
      {"int32", kDLInt, 32, 4, 0},       {"int64", kDLInt, 64, 8, 0},
      {"uint8", kDLUInt, 8, 1, 0},       {"bool", 6, 8, 1, 0},
      {"float8_e4m3", 10, 8, 1, 1},      {"float8_e5m2", 12, 8, 1, 1},
  };
  REQUIRE(tr_dtype_count() == sizeof(rows) / sizeof(rows[0]));
  for (const Row &row : rows) {
    INFO(row.name);
    tr_dtype dt{};
    REQUIRE(tr_dtype_parse(row.name, &dt) == nullptr);
    CHECK(dt.code == row.code);
    CHECK(dt.bits == row.bits);
    CHECK(dt.lanes == 1);
    CHECK(std::string(tr_dtype_name(dt)) == row.name);
    CHECK(tr_dtype_bytes(dt) == row.bytes);
    CHECK(tr_dtype_is_floating(dt) == row.floating);
    char buf[TR_DTYPE_FORMAT_MAX];
    CHECK(tr_dtype_format(dt, buf, sizeof(buf)) == std::string(row.name).size());
    CHECK(std::string(buf) == row.name);
  }
  for (size_t i = 0; i < tr_dtype_count(); i++) {
    CHECK(tr_dtype_name(tr_dtype_at(i)) != nullptr);
  }
}

TEST_CASE("the constants match the names") {
  tr_dtype dt;
  REQUIRE(tr_dtype_parse("bfloat16", &dt) == nullptr);
  CHECK(tr_dtype_equal(dt, TR_BFLOAT16));
  CHECK_FALSE(tr_dtype_equal(dt, TR_FLOAT16));
  REQUIRE(tr_dtype_parse("float8_e4m3", &dt) == nullptr);
  CHECK(tr_dtype_equal(dt, TR_FLOAT8_E4M3));
  CHECK_FALSE(tr_dtype_equal(TR_FLOAT8_E4M3, TR_FLOAT8_E5M2));
  CHECK_FALSE(tr_dtype_equal(TR_INT8, TR_UINT8));
}

TEST_CASE("an unknown dtype name is refused, quoting it and listing the known names") {
  tr_dtype dt = TR_INT32;
  CHECK(tr_test::error_of(tr_dtype_parse("floot32", &dt)) ==
        "ValueError: unknown dtype 'floot32'; known dtypes: float16, bfloat16, float32, "
        "float64, int8, int16, int32, int64, uint8, bool, float8_e4m3, float8_e5m2");
  CHECK(tr_test::error_of(tr_dtype_parse("", &dt)).find("unknown dtype ''") != std::string::npos);
  CHECK(tr_test::error_of(tr_dtype_parse("Float16", &dt)).find("unknown dtype 'Float16'") !=
        std::string::npos);
  std::string huge(200, 'q');
  CHECK(tr_test::error_of(tr_dtype_parse(huge.c_str(), &dt)).find("'" + std::string(64, 'q') + "...'") !=
        std::string::npos);
  CHECK(tr_test::error_of(tr_dtype_parse(nullptr, &dt)) == "ValueError: dtype name is NULL");
  CHECK(tr_dtype_equal(dt, TR_INT32));  // untouched by every failure
}

TEST_CASE("an unnamed DLPack type prints its three numbers") {
  tr_dtype vec = {kDLFloat, 32, 4};
  CHECK(tr_dtype_name(vec) == nullptr);
  char buf[TR_DTYPE_FORMAT_MAX];
  tr_dtype_format(vec, buf, sizeof(buf));
  CHECK(std::string(buf) == "dtype(code=2, bits=32, lanes=4)");
  CHECK(tr_dtype_bytes(vec) == 16);
  tr_dtype complex64 = {5, 64, 1};
  tr_dtype_format(complex64, buf, sizeof(buf));
  CHECK(std::string(buf) == "dtype(code=5, bits=64, lanes=1)");
}
