// lint_test.cc: `manifest check`'s rules: the shipped manifest passes, and each rule catches its
// own kind of problem.
#include <catch2/catch.hpp>

#include <string>

#include "manifest/lint.h"
#include "manifest/manifest_testing.h"
#include "platform/test_support.h"

static std::vector<std::string> lint(const std::string &text) {
  tr_test::TempDir dir;
  std::string file = dir.write("t.yaml", text);
  const char *paths[] = {file.c_str()};
  tr_manifest *m = nullptr;
  tr_test::ok(tr_manifest_load(paths, 1, &m));
  tr_lint_report report;
  tr_test::ok(tr_manifest_lint(m, &report));
  std::vector<std::string> problems;
  for (size_t i = 0; i < report.count; i++) {
    std::string p = report.problems[i];
    size_t at = p.find(file);
    if (at != std::string::npos) p.replace(at, file.size(), "F");
    problems.push_back(p);
  }
  tr_lint_report_clear(&report);
  tr_manifest_destroy(&m);
  return problems;
}

static const char *kOp =
    "ScaleFwdOp:\n"                                                        // 1
    "  family: t\n  ref_api: none\n  signature:\n"                         // 2-4
    "    forall: {B: Shape, T: \"DType[float16 | float32]\"}\n"            // 5
    "    params: {n: {type: int}}\n"                                       // 6
    "    inputs:\n      x: {dtype: T, shape: \"[*B, n]\"}\n"               // 7-8
    "    outputs:\n      y: {dtype: T, shape: \"[*B, n]\"}\n";             // 9-10

TEST_CASE("the shipped manifest has no problems") {
  tr_lint_report report;
  tr_test::ok(tr_manifest_lint(tr_test::shipped(), &report));
  std::string all;
  for (size_t i = 0; i < report.count; i++) all += std::string(report.problems[i]) + "\n";
  CHECK(all == "");
  tr_lint_report_clear(&report);
}

TEST_CASE("a clean entry passes") {
  std::string text = std::string(kOp) +
                     "  workloads:\n    - {label: small, dtype: float16, shapes: {x: [4, 8]}, params: {n: 8}}\n"
                     "  roofline: {flops: \"numel(x)\", bytes: \"bytes(x) + bytes(y)\"}\n";
  CHECK(lint(text).empty());
}

TEST_CASE("an op with no workloads or no roofline is a problem") {
  auto problems = lint(kOp);
  REQUIRE(problems.size() == 2);
  CHECK(problems[0] == "F:1: ScaleFwdOp: has no workload rows");
  CHECK(problems[1] == "F:1: ScaleFwdOp: has no roofline (flops and bytes)");
}

TEST_CASE("a workload row that is not a legal call is a problem, with the checker's message") {
  std::string text = std::string(kOp) +
                     "  workloads:\n"                                                          // 11
                     "    - {label: good, dtype: float16, shapes: {x: [4, 8]}, params: {n: 8}}\n" // 12
                     "    - {label: wrong n, dtype: float16, shapes: {x: [4, 8]}, params: {n: 7}}\n"
                     "    - {label: no n, dtype: float16, shapes: {x: [4, 8]}}\n"
                     "    - {label: int8, dtype: int8, shapes: {x: [4, 8]}, params: {n: 8}}\n"
                     "  roofline: {flops: \"numel(x)\", bytes: \"bytes(x) + bytes(y)\"}\n";
  auto problems = lint(text);
  REQUIRE(problems.size() == 3);
  CHECK(problems[0] == "F:13:7: ScaleFwdOp: workload 'wrong n': ScaleFwdOp: input 'x' shape (4, 8) "
                       "does not match [*B, n] = (4, 7): axis 1 is 8, expected n = 7");
  CHECK(problems[1] == "F:14:7: ScaleFwdOp: workload 'no n': ScaleFwdOp: param 'n' (int) is required");
  CHECK(problems[2] == "F:15:7: ScaleFwdOp: workload 'int8': ScaleFwdOp: input 'x' dtype int8 is not "
                       "one of float16 | float32 (type variable T)");
}

TEST_CASE("a roofline that does not evaluate on a row is a problem") {
  std::string text = std::string(kOp) +
                     "  workloads:\n    - {label: zero, dtype: float16, shapes: {x: [0, 8]}, params: {n: 8}}\n"
                     "  roofline: {flops: \"numel(x) / prod(B)\", bytes: \"bytes(x)\"}\n";
  auto problems = lint(text);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == "F:12:7: ScaleFwdOp: workload 'zero': expression 'numel(x) / prod(B)': "
                       "division by zero");
}

TEST_CASE("a row's problem names the row's own line and column") {
  std::string text = "RowFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"                   // 1-4
                     "    forall: {T: \"DType[float16 | float32]\"}\n"                              // 5
                     "    params: {d: {type: int, default: 1}}\n"                                    // 6
                     "    inputs:\n      x: {dtype: T, shape: \"[M, N]\"}\n"                        // 7-8
                     "    outputs:\n      y: {dtype: T, shape: \"[M, N]\"}\n"                       // 9-10
                     "    constraints: [\"N // d >= 1\"]\n"                                        // 11
                     "  workloads:\n"                                                              // 12
                     "  - {label: zero d, dtype: float16, shapes: {x: [4, 8]}, params: {d: 0}}\n" // 13, column 5
                     "  - label: rank 3\n"                                                         // 14, column 5
                     "    dtype: float16\n    shapes: {x: [4, 8, 2]}\n"                          // 15-16
                     "  -   {label: inf, dtype: float32, shapes: {x: [4, 8]}}\n"                  // 17, column 7
                     "  roofline: {flops: \"numel(x) * 10 ** 400\", bytes: \"bytes(x) + bytes(y)\"}\n";
  auto problems = lint(text);
  REQUIRE(problems.size() == 3);
  CHECK(problems[0] == "F:13:5: RowFwdOp: workload 'zero d': RowFwdOp: constraint 'N // d >= 1' does not "
                       "hold: N = 8, d = 0 (expression 'N // d >= 1': division by zero)");
  CHECK(problems[1] == "F:14:5: RowFwdOp: workload 'rank 3': RowFwdOp: input 'x' shape (4, 8, 2) does not "
                       "match [M, N]: rank 3, expected 2");
  CHECK(problems[2] == "F:17:7: RowFwdOp: workload 'inf': roofline gives flops inf and bytes 256; both must "
                       "be finite and >= 0");
}

TEST_CASE("an unused type variable is a problem") {
  std::string text = std::string(kOp);
  text.replace(text.find("{B: Shape,"), 10, "{B: Shape, U: Shape,");
  text += "  workloads:\n    - {label: a, dtype: float16, shapes: {x: [8]}, params: {n: 8}}\n"
          "  roofline: {flops: \"1\", bytes: \"bytes(x)\"}\n";
  auto problems = lint(text);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == "F:1: ScaleFwdOp: type variable 'U' is declared but no tensor uses it");
}

TEST_CASE("a composition whose result differs from the signature is a problem") {
  std::string add = "AddFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                    "    forall: {S: Shape, T: DType}\n"
                    "    inputs:\n      a: {dtype: T, shape: \"[*S]\"}\n      b: {dtype: T, shape: \"[*S]\"}\n"
                    "    outputs:\n      c: {dtype: T, shape: \"[*S]\"}\n"
                    "  workloads:\n    - {label: a, dtype: float32, shapes: {a: [4], b: [4]}}\n"
                    "  roofline: {flops: \"numel(c)\", bytes: \"bytes(a) * 3\"}\n";
  std::string twice = "PairFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                      "    forall: {T: DType}\n"
                      "    inputs:\n      x: {dtype: T, shape: \"[N]\"}\n"
                      "    outputs:\n      y: {dtype: T, shape: \"[N]\"}\n"
                      "  composition:\n    steps:\n"
                      "      - {op: AddFwdOp, inputs: {a: \"view(x, [-1, 2])\", b: \"view(x, [-1, 2])\"}, outputs: {c: t}}\n"
                      "    returns: {y: t}\n"
                      "  workloads:\n    - {label: a, dtype: float32, shapes: {x: [6]}}\n"
                      "  roofline: {flops: \"N\", bytes: \"bytes(x)\"}\n";
  auto problems = lint(add + twice);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].find("workload 'a': PairFwdOp: composition returns float32[3, 2] on cpu for "
                         "output 'y', but the signature gives float32[6] on cpu") != std::string::npos);
  std::string bad_view = twice;
  bad_view.replace(bad_view.find("[-1, 2]"), 7, "[4, 2]");
  problems = lint(add + bad_view);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].find("PairFwdOp: wiring 'view(x, [4, 2])': cannot view (6,) as (4, 2)") != std::string::npos);
  // Extents whose product overflows int64 saturate, as tr_tensor_spec_numel does (no overflow).
  std::string huge = twice;
  huge.replace(huge.find("[-1, 2]"), 7, "[N, N]");
  huge.replace(huge.find("x: [6]"), 6, "x: [4294967296]");
  problems = lint(add + huge);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].find("cannot view (4294967296,) as (4294967296, 4294967296)") != std::string::npos);
}

TEST_CASE("an integer input's fill evaluates on every row and is not negative") {
  std::string text = "IndexFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                     "    params: {n: {type: int}}\n"
                     "    inputs:\n      i: {dtype: int32, shape: \"[M]\", fill: \"n - 10\"}\n"
                     "    outputs:\n      y: {dtype: int32, shape: \"[M]\"}\n"
                     "  workloads:\n    - {label: ok, shapes: {i: [4]}, params: {n: 12}}\n"
                     "    - {label: low, shapes: {i: [4]}, params: {n: 8}}\n"
                     "  roofline: {flops: \"0\", bytes: \"bytes(i) * 2\"}\n";
  auto problems = lint(text);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == "F:12:7: IndexFwdOp: workload 'low': input 'i' fill 'n - 10' gives -2, below 0");
}

TEST_CASE("an output too large for int64 to count is a problem of its row") {
  std::string gemm = "GemmFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"          // 1-4
                     "    forall: {T: \"DType[float16 | float32]\"}\n"                      // 5
                     "    inputs:\n      a: {dtype: T, shape: \"[M, K]\"}\n      b: {dtype: T, shape: \"[K, N]\"}\n"
                     "    outputs:\n      c: {dtype: T, shape: \"[M, N]\"}\n"               // 9-10
                     "  workloads:\n"                                                      // 11
                     "    - {label: wide, dtype: float16, shapes: {a: [4294967296, 1], b: [1, 4294967296]}}\n"
                     "    - {label: big, dtype: float32, shapes: {a: [1073741824, 1], b: [1, 4294967296]}}\n"
                     "    - {label: fits, dtype: float16, shapes: {a: [536870912, 1], b: [1, 4294967296]}}\n"
                     "  roofline: {flops: \"numel(c)\", bytes: \"bytes(a) + bytes(b) + bytes(c)\"}\n";
  auto problems = lint(gemm);
  REQUIRE(problems.size() == 2);
  CHECK(problems[0] == "F:12:7: GemmFwdOp: workload 'wide': output 'c' float16(4294967296, 4294967296) is too "
                       "large: its element count overflows int64 (at most 9223372036854775807 elements)");
  CHECK(problems[1] == "F:13:7: GemmFwdOp: workload 'big': output 'c' float32(1073741824, 4294967296) is too "
                       "large: its size, 4611686018427387904 elements of 4 bytes, overflows int64 (at most "
                       "9223372036854775807 bytes)");
}

TEST_CASE("a workload row's problem is named once") {
  std::vector<std::string> got = lint(std::string("SameFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                                                  "    forall: {T: \"DType[float16 | float32]\"}\n"
                                                  "    inputs:\n      a: {dtype: T, shape: \"[N]\"}\n"
                                                  "    outputs:\n      c: {dtype: T, shape: \"[N]\"}\n"
                                                  "  workloads:\n    - {label: r1, shapes: {a: [3]}}\n"));
  REQUIRE(got.size() == 2);  // and the roofline the op lacks
  CHECK(got[1] == "F:11:7: SameFwdOp: workload 'r1' gives no dtype for input 'a' (dtype: T)");
}

TEST_CASE("two workload rows of one op with one label") {
  std::vector<std::string> got = lint(std::string(kOp) +
                                      "  workloads:\n"                                                      // 11
                                      "    - {label: r, shapes: {x: [2, 4]}, params: {n: 4}, dtype: float32}\n"
                                      "    - {label: r, shapes: {x: [3, 4]}, params: {n: 4}, dtype: float32}\n"
                                      "  roofline: {flops: \"numel(x)\", bytes: \"bytes(x) + bytes(y)\"}\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0] == "F:13:7: ScaleFwdOp: workload 'r' is labelled as the row at line 12 already is; a label names one "
                  "row");
}
