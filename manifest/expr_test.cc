// expr_test.cc: the expression language: Python's arithmetic, names resolved once, errors with
// the column.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "core/test_support.h"
#include "manifest/expr.h"

// Names a..z resolve to refs 0..25 (value: the letter's index + 1); runs r and tensors t resolve
// only in those places.
static int resolve(void *, const char *name, size_t len, int as_run, int as_tensor, tr_expr_ref *out) {
  if (len != 1 || name[0] < 'a' || name[0] > 'z') return 0;
  if (as_run) { if (name[0] != 'r') return 0; }
  else if (as_tensor) { if (name[0] != 't') return 0; }
  *out = tr_expr_ref{(uint16_t)(as_run ? 1 : as_tensor ? 2 : 0), (uint16_t)(name[0] - 'a')};
  return 1;
}

// y is 2^53 + 1 (no double holds it), x is a float (0.5); the other letters their index + 1.
static const int64_t kBig = (int64_t{1} << 53) + 1;

static int value(void *, tr_expr_ref ref, tr_expr_num *out) {
  if (ref.index == 'z' - 'a') return 0;  // z has no value
  if (ref.index == 'y' - 'a') *out = tr_expr_int(kBig);
  else if (ref.index == 'x' - 'a') *out = tr_expr_float(0.5);
  else *out = tr_expr_int(ref.index + 1);
  return 1;
}

static int call(void *, tr_expr_fn fn, tr_expr_ref, tr_expr_num *out) {
  *out = tr_expr_int(fn == TR_EXPR_FN_PROD ? 24 : fn == TR_EXPR_FN_LEN ? 3 : fn == TR_EXPR_FN_RANK ? 2 : 100);
  return 1;
}

static tr_expr_num eval_num(const char *text) {
  tr_expr *e = nullptr;
  tr_test::ok(tr_expr_compile(text, resolve, nullptr, &e));
  tr_expr_env env = {nullptr, value, call};
  tr_expr_num v = tr_expr_int(0);
  tr_test::ok(tr_expr_eval(e, &env, &v));
  tr_expr_destroy(&e);
  return v;
}

static double eval(const char *text) { return tr_expr_num_double(eval_num(text)); }

// The value as Python's repr would show it: an integer's digits, a float's with a point.
static std::string show(const char *text) {
  tr_expr_num v = eval_num(text);
  char buf[64];
  if (v.is_int) snprintf(buf, sizeof(buf), "%lld", (long long)v.i);
  else snprintf(buf, sizeof(buf), "%.17g.", v.f);
  return buf;
}

static std::string compile_error(const char *text) {
  tr_expr *e = nullptr;
  std::string message = tr_test::error_of(tr_expr_compile(text, resolve, nullptr, &e));
  CHECK(e == nullptr);
  return message;
}

TEST_CASE("arithmetic follows Python's precedence and semantics") {
  CHECK(eval("1 + 2 * 3") == 7);
  CHECK(eval("(1 + 2) * 3") == 9);
  CHECK(eval("2 ** 3 ** 2") == 512);  // right-associative
  CHECK(eval("-2 ** 2") == -4);       // ** binds tighter than unary minus
  CHECK(eval("7 // 2") == 3);
  CHECK(eval("-7 // 2") == -4);       // floor division
  CHECK(eval("-7 % 3") == 2);         // the divisor's sign
  CHECK(eval("7 / 2") == 3.5);
  CHECK(eval("1e-5 * 100000") == Approx(1.0));
  CHECK(eval("a + b * c") == 1 + 2 * 3);
}

TEST_CASE("integers stay exact as in Python; '/' and overflow past int64 give floats") {
  CHECK(show("y - 9007199254740992") == "1");  // 2^53 + 1: a double would say 0
  CHECK(eval("y != 9007199254740992") == 1);
  CHECK(eval("y > 9007199254740992.0") == 1);  // an integer and a float compare exactly
  CHECK(eval("y == 9007199254740992.0") == 0);
  CHECK(eval("9007199254740992 == 9007199254740992.0") == 1);
  CHECK(eval("3 < 3.5 and 4 > 3.5 and 3 == 3.0") == 1);
  CHECK(show("2 ** 62 + 2 ** 62 - 1 + 2 ** 62") == "1.3835058055282164e+19.");  // past int64: a float
  CHECK(show("2 ** 63") == "9.2233720368547758e+18.");
  CHECK(show("-2 ** 63") == "-9.2233720368547758e+18.");
  CHECK(show("9223372036854775807") == "9223372036854775807");  // int64's largest, exact
  CHECK(show("9223372036854775807 // 10 * 10 + 7") == "9223372036854775807");
  CHECK(show("6 / 3") == "2.");      // true division: a float, as in Python
  CHECK(show("7 // 2") == "3");
  CHECK(show("7.0 // 2") == "3.");
  CHECK(show("2 ** -1") == "0.5.");
  CHECK(show("-7 % -3") == "-1");
  CHECK(show("7 % -3") == "-2");
  CHECK(show("0x10 + 1") == "17");
  CHECK(show("min(2, 2.0)") == "2");     // the first of equals, as Python's min
  CHECK(show("max(2.0, 2)") == "2.");
  CHECK(show("max(a, x)") == "1");
  CHECK(show("1e3") == "1000.");
}

TEST_CASE("comparisons, chains and boolean logic give 1 or 0") {
  CHECK(eval("1 < 2") == 1);
  CHECK(eval("2 <= 1") == 0);
  CHECK(eval("1 < 2 < 3") == 1);
  CHECK(eval("1 < 3 < 2") == 0);  // a chain is (1 < 3) and (3 < 2)
  CHECK(eval("not 0") == 1);
  CHECK(eval("1 == 1 and 2 != 2") == 0);
  CHECK(eval("0 or 5 > 4") == 1);
  CHECK(eval("d % b == 0") == 1);  // 4 % 2
}

TEST_CASE("functions read runs and tensors through the env") {
  CHECK(eval("prod(r) * len(r)") == 72);
  CHECK(eval("numel(t) + rank(t)") == 102);
  CHECK(eval("min(a, b) + max(c, d)") == 1 + 4);
}

TEST_CASE("and/or short-circuit: the right side is not evaluated when the left decides") {
  CHECK(eval("0 and z") == 0);
  CHECK(eval("1 or z") == 1);
}

TEST_CASE("evaluation errors name the expression and the cause") {
  tr_expr *e = nullptr;
  tr_expr_env env = {nullptr, value, call};
  tr_expr_num v = tr_expr_int(0);
  tr_test::ok(tr_expr_compile("a / (b - 2)", resolve, nullptr, &e));
  CHECK(tr_test::error_of(tr_expr_eval(e, &env, &v)) ==
        "ValueError: expression 'a / (b - 2)': division by zero");
  tr_expr_destroy(&e);
  tr_test::ok(tr_expr_compile("a + z", resolve, nullptr, &e));
  CHECK(tr_test::error_of(tr_expr_eval(e, &env, &v)) == "ValueError: expression 'a + z': no value for 'z'");
  tr_expr_destroy(&e);
  tr_test::ok(tr_expr_compile("(a - 1) ** -1", resolve, nullptr, &e));
  CHECK(tr_test::error_of(tr_expr_eval(e, &env, &v)) ==
        "ValueError: expression '(a - 1) ** -1': zero to a negative power");
  tr_expr_destroy(&e);
  tr_test::ok(tr_expr_compile("b // (a - 1.0)", resolve, nullptr, &e));
  CHECK(tr_test::error_of(tr_expr_eval(e, &env, &v)) == "ValueError: expression 'b // (a - 1.0)': division by zero");
  tr_expr_destroy(&e);
}

TEST_CASE("syntax errors and unknown names give the column") {
  CHECK(compile_error("a +") == "ManifestError: expression 'a +': expected a value, found the end at column 4");
  CHECK(compile_error("a + A") == "ManifestError: expression 'a + A': unknown name 'A' at column 5");
  CHECK(compile_error("Q > 1") == "ManifestError: expression 'Q > 1': unknown name 'Q' at column 1");
  CHECK(compile_error("a * (b + width_2)") ==
        "ManifestError: expression 'a * (b + width_2)': unknown name 'width_2' at column 10");
  CHECK(compile_error("(a + b") == "ManifestError: expression '(a + b': expected ')' at column 7");
  CHECK(compile_error("a b") == "ManifestError: expression 'a b': unexpected text at column 3");
  CHECK(compile_error("sqrt(a)") == "ManifestError: expression 'sqrt(a)': unknown function (functions: "
                                    "prod, len, numel, rank, bytes, min, max) at column 1");
  CHECK(compile_error("prod(t)") == "ManifestError: expression 'prod(t)': unknown run at column 6");
  CHECK(compile_error("numel(3)") == "ManifestError: expression 'numel(3)': expected a tensor name at column 7");
  CHECK(compile_error("min(a)") == "ManifestError: expression 'min(a)': expected ',' between two arguments at column 6");
  std::string deep(100, '(');
  CHECK(compile_error(deep.c_str()).find("nested too deeply (more than 64 levels)") != std::string::npos);
  std::string minus(100, '-');
  CHECK(compile_error((minus + "a").c_str()).find("nested too deeply") != std::string::npos);
}

TEST_CASE("the refs an expression reads are visited once each") {
  tr_expr *e = nullptr;
  tr_test::ok(tr_expr_compile("a + b * a + numel(t) + numel(t)", resolve, nullptr, &e));
  std::string seen;
  tr_expr_visit_refs(e, [](void *ctx, int fn, tr_expr_ref, const char *name) {
    *static_cast<std::string *>(ctx) += std::string(name) + (fn >= 0 ? "()" : "") + " ";
  }, &seen);
  CHECK(seen == "a b t() ");
  CHECK(std::string(tr_expr_text(e)) == "a + b * a + numel(t) + numel(t)");
  tr_expr_destroy(&e);
}
