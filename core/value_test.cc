// value_test.cc: param values: kinds, copies, typed equality, hashing and Python-like text.
#include <catch2/catch.hpp>

#include "core/test_support.h"

#include <cmath>
#include <string>
#include <vector>

#include "tilerun/value.h"

static std::string text_of(const tr_value &v) {
  char buf[1200];
  size_t need = tr_value_format(&v, buf, sizeof(buf));
  REQUIRE(need == std::string(buf).size());
  return buf;
}

TEST_CASE("values print as Python would") {
  CHECK(text_of(tr_value_none()) == "None");
  CHECK(text_of(tr_value_int(-42)) == "-42");
  CHECK(text_of(tr_value_int(INT64_MIN)) == "-9223372036854775808");
  CHECK(text_of(tr_value_float(1e-5)) == "1e-05");
  CHECK(text_of(tr_value_float(1e-6)) == "1e-06");
  CHECK(text_of(tr_value_float(1.0)) == "1.0");
  CHECK(text_of(tr_value_float(0.1)) == "0.1");
  CHECK(text_of(tr_value_float(-2.5)) == "-2.5");
  CHECK(text_of(tr_value_float(1.0 / 3.0)) == "0.3333333333333333");
  CHECK(text_of(tr_value_float(INFINITY)) == "inf");
  CHECK(text_of(tr_value_float(NAN)) == "nan");
  CHECK(text_of(tr_value_bool(true)) == "True");
  CHECK(text_of(tr_value_bool(false)) == "False");
  CHECK(text_of(tr_value_dtype(TR_BFLOAT16)) == "bfloat16");
  tr_value s, l1, l2, l0;
  REQUIRE(tr_value_str("rms", &s) == nullptr);
  CHECK(text_of(s) == "'rms'");
  int64_t items[] = {1, 2};
  REQUIRE(tr_value_int_list(items, 1, &l1) == nullptr);
  REQUIRE(tr_value_int_list(items, 2, &l2) == nullptr);
  REQUIRE(tr_value_int_list(nullptr, 0, &l0) == nullptr);
  CHECK(text_of(l1) == "(1,)");
  CHECK(text_of(l2) == "(1, 2)");
  CHECK(text_of(l0) == "()");
  for (tr_value *v : {&s, &l1, &l2, &l0}) tr_value_clear(v);
}

TEST_CASE("a float prints the shortest text that reads back exactly") {
  for (double f : {1e-5, 0.1, 3.14159, 1e300, 5e-324, 123456789.125, 2.0 / 3.0}) {
    std::string text = text_of(tr_value_float(f));
    CHECK(std::strtod(text.c_str(), nullptr) == f);
  }
}

TEST_CASE("equality is typed: int 1 is not float 1.0") {
  tr_value i1 = tr_value_int(1), f1 = tr_value_float(1.0), b1 = tr_value_bool(true);
  CHECK_FALSE(tr_value_equal(&i1, &f1));
  CHECK_FALSE(tr_value_equal(&i1, &b1));
  tr_value i1b = tr_value_int(1);
  CHECK(tr_value_equal(&i1, &i1b));
  CHECK(tr_value_hash(&i1) == tr_value_hash(&i1b));
  CHECK(tr_value_hash(&i1) != tr_value_hash(&f1));
  tr_value n1 = tr_value_none(), n2 = tr_value_none();
  CHECK(tr_value_equal(&n1, &n2));
  tr_value d1 = tr_value_dtype(TR_FLOAT16), d2 = tr_value_dtype(TR_BFLOAT16);
  CHECK_FALSE(tr_value_equal(&d1, &d2));
  CHECK(tr_value_hash(&d1) != tr_value_hash(&d2));
}

TEST_CASE("floats key a table: NaN equals NaN, -0.0 equals 0.0, hashes agree") {
  tr_value nan1 = tr_value_float(NAN), nan2 = tr_value_float(-NAN);
  CHECK(tr_value_equal(&nan1, &nan2));
  CHECK(tr_value_hash(&nan1) == tr_value_hash(&nan2));
  tr_value z = tr_value_float(0.0), nz = tr_value_float(-0.0);
  CHECK(tr_value_equal(&z, &nz));
  CHECK(tr_value_hash(&z) == tr_value_hash(&nz));
  tr_value eps1 = tr_value_float(1e-5), eps2 = tr_value_float(1e-6);
  CHECK_FALSE(tr_value_equal(&eps1, &eps2));
  CHECK(tr_value_hash(&eps1) != tr_value_hash(&eps2));
}

TEST_CASE("strings and lists compare by content and survive copies") {
  int64_t a[] = {4096}, b[] = {4095}, ab[] = {4096, 4095};
  tr_value la, lb, lab, lcopy, sa, sb, scopy;
  REQUIRE(tr_value_int_list(a, 1, &la) == nullptr);
  REQUIRE(tr_value_int_list(b, 1, &lb) == nullptr);
  REQUIRE(tr_value_int_list(ab, 2, &lab) == nullptr);
  CHECK_FALSE(tr_value_equal(&la, &lb));
  CHECK_FALSE(tr_value_equal(&la, &lab));
  CHECK(tr_value_hash(&la) != tr_value_hash(&lb));
  REQUIRE(tr_value_copy(&la, &lcopy) == nullptr);
  CHECK(lcopy.as.list.items != la.as.list.items);  // a deep copy
  CHECK(tr_value_equal(&la, &lcopy));
  CHECK(tr_value_hash(&la) == tr_value_hash(&lcopy));
  a[0] = 1;  // the value holds its own storage
  CHECK(la.as.list.items[0] == 4096);
  REQUIRE(tr_value_str("rms", &sa) == nullptr);
  REQUIRE(tr_value_str("rmsx", &sb) == nullptr);
  CHECK_FALSE(tr_value_equal(&sa, &sb));
  REQUIRE(tr_value_copy(&sa, &scopy) == nullptr);
  CHECK(tr_value_equal(&sa, &scopy));
  CHECK(tr_value_hash(&sa) == tr_value_hash(&scopy));
  tr_value_clear(&sa);
  CHECK(sa.kind == TR_VALUE_NONE);
  CHECK(text_of(scopy) == "'rms'");
  for (tr_value *v : {&la, &lb, &lab, &lcopy, &sb, &scopy}) tr_value_clear(v);
  tr_value_clear(nullptr);
}

TEST_CASE("a string too long or a list too long is refused with its size and the limit") {
  tr_value v = tr_value_int(7);
  std::string longest(TR_VALUE_STR_MAX, 'y');
  tr_value ok;
  REQUIRE(tr_value_str(longest.c_str(), &ok) == nullptr);
  tr_value_clear(&ok);
  std::string too_long(TR_VALUE_STR_MAX + 1, 'x');
  CHECK(tr_test::error_of(tr_value_str(too_long.c_str(), &v)) ==
        "ValueError: string value '" + std::string(32, 'x') + "...' is 1025 bytes long, at most 1024");
  std::vector<int64_t> items(TR_VALUE_LIST_MAX + 1, 3);
  CHECK(tr_test::error_of(tr_value_int_list(items.data(), items.size(), &v)) ==
        "ValueError: int list value has 65 items, at most 64");
  CHECK(tr_test::error_of(tr_value_str(nullptr, &v)) == "ValueError: string value is NULL");
  CHECK(tr_test::error_of(tr_value_int_list(nullptr, 2, &v)) == "ValueError: int list of 2 items is NULL");
  CHECK(v.kind == TR_VALUE_INT);  // untouched
  CHECK(v.as.i == 7);
}

TEST_CASE("kind names") {
  CHECK(std::string(tr_value_kind_name(TR_VALUE_INT_LIST)) == "list[int]");
  CHECK(std::string(tr_value_kind_name(TR_VALUE_STR)) == "str");
  CHECK(std::string(tr_value_kind_name(TR_VALUE_NONE)) == "none");
}
