// shape_expr_test.cc: shape expressions parse into items; malformed ones name the column.
#include <catch2/catch.hpp>

#include <string>

#include "core/test_support.h"
#include "manifest/shape_expr.h"

TEST_CASE("the forms of a shape") {
  tr_shape_expr e;
  tr_test::ok(tr_shape_expr_parse("[*B, *normalized_shape]", 0, &e));
  REQUIRE(e.then_list.count == 2);
  CHECK(e.then_list.items[0].star);
  CHECK(std::string(e.then_list.items[1].name) == "normalized_shape");
  tr_test::ok(tr_shape_expr_parse(" [ M , K ] ", 0, &e));
  CHECK(e.then_list.count == 2);
  CHECK_FALSE(e.then_list.items[0].star);
  tr_test::ok(tr_shape_expr_parse("[]", 0, &e));
  CHECK(e.then_list.count == 0);
  tr_test::ok(tr_shape_expr_parse("[3, N]", 0, &e));
  CHECK(e.then_list.items[0].is_literal);
  CHECK(e.then_list.items[0].literal == 3);
  tr_test::ok(tr_shape_expr_parse("trans_a ? [K, M] : [M, K]", 0, &e));
  CHECK(e.has_cond);
  CHECK(std::string(e.cond) == "trans_a");
  CHECK(std::string(e.then_list.items[0].name) == "K");
  CHECK(std::string(e.else_list.items[0].name) == "M");
  tr_test::ok(tr_shape_expr_parse("[-1, K]", 1, &e));
  CHECK(e.then_list.items[0].literal == -1);
}

TEST_CASE("malformed shapes are refused with the column") {
  tr_shape_expr e;
  auto err = [&](const char *text, int allow = 0) { return tr_test::error_of(tr_shape_expr_parse(text, allow, &e)); };
  CHECK(err("M, K") == "ManifestError: shape 'M, K': expected '[' or 'name ? [...] : [...]' at column 2");
  CHECK(err("[M K]") == "ManifestError: shape '[M K]': expected ',' or ']' at column 4");
  CHECK(err("[M,]") == "ManifestError: shape '[M,]': expected a name at column 4");
  CHECK(err("[*3]") == "ManifestError: shape '[*3]': expected a name at column 3");
  CHECK(err("[-1, K]") == "ManifestError: shape '[-1, K]': a dim cannot be negative at column 2");
  CHECK(err("[-2, K]", 1) == "ManifestError: shape '[-2, K]': a dim cannot be negative at column 2");
  CHECK(err("[M] x") == "ManifestError: shape '[M] x': unexpected text after the shape at column 5");
  CHECK(err("c ? [M] [K]") == "ManifestError: shape 'c ? [M] [K]': expected ':' at column 9");
  CHECK(err("[99999999999999999999]") == "ManifestError: shape '[99999999999999999999]': expected an integer at column 2");
  std::string many = "[";
  for (int i = 0; i < 17; i++) many += i ? ", N" : "N";
  many += "]";
  CHECK(err(many.c_str()).find("more than 16 items") != std::string::npos);
  std::string long_name = "[" + std::string(64, 'n') + "]";
  CHECK(err(long_name.c_str()).find("name longer than 63 characters at column 2") != std::string::npos);
}
