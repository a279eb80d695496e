// loader_test.cc: spec-file errors name file, line and column and what was expected there; the
// rules the shipped ops do not exercise (same_as, device: cpu) checked on small manifests.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "manifest/manifest_testing.h"
#include "platform/test_support.h"

using tr_test::Bound;
using tr_test::Params;
using tr_test::spec;

// A small valid entry to vary: one input, one output.
static const char *kHeader =
    "TestFwdOp:\n"                                  // line 1
    "  family: test\n"                              // 2
    "  ref_api: none\n"                             // 3
    "  signature:\n"                                // 4
    "    forall: {B: Shape, T: \"DType[float16 | float32]\"}\n";  // 5

struct Loaded {
  tr_test::TempDir dir;
  std::string file;
  tr_manifest *m = nullptr;
  std::string error;  // "<Code>: <message>" when loading failed
  explicit Loaded(const std::string &text) {
    file = dir.write("t.yaml", text);
    const char *paths[] = {file.c_str()};
    tr_status *s = tr_manifest_load(paths, 1, &m);
    if (s != nullptr) error = tr_test::error_of(s);
  }
  ~Loaded() { tr_manifest_destroy(&m); }
  const tr_op_def *op(const char *name = "TestFwdOp") {
    REQUIRE(error == "");
    const tr_op_def *d = tr_manifest_find(m, name);
    REQUIRE(d != nullptr);
    return d;
  }
};

// The message of a failed load, with the file's path replaced by "F".
static std::string load_error(const std::string &text) {
  Loaded l(text);
  REQUIRE(l.error != "");
  std::string e = l.error;
  for (size_t at; (at = e.find(l.file)) != std::string::npos;) e.replace(at, l.file.size(), "F");
  return e;
}

static std::string entry(const std::string &params, const std::string &inputs,
                         const std::string &outputs, const std::string &rest = "") {
  return std::string(kHeader) + "    params: " + params + "\n" +   // 6
         "    inputs:\n" + inputs +                                  // 7, 8...
         "    outputs:\n" + outputs + rest;
}

static const char *kX = "      x: {dtype: T, shape: \"[*B, N]\"}\n";
static const char *kY = "      y: {dtype: T, shape: \"[*B, N]\"}\n";

TEST_CASE("a small valid entry loads") {
  Loaded l(entry("{}", kX, kY));
  const tr_op_def *d = l.op();
  CHECK(std::string(tr_op_def_family(d)) == "test");
  CHECK(tr_op_def_input_count(d) == 1);
  CHECK(tr_op_def_line(d) == 1);
}

TEST_CASE("unknown keys are named with where they stand") {
  CHECK(load_error(entry("{}", "      x: {dtype: T, shape: \"[*B, N]\", optinal: true}\n", kY)) ==
        "ManifestError: F:8:39: TestFwdOp: unknown key 'optinal' in input 'x' (known: dtype, "
        "shape, optional, mutated, contiguous, device, required_unless, fill, doc)");
  CHECK(load_error(std::string(kHeader) + "    parms: {}\n") ==
        "ManifestError: F:6:5: TestFwdOp: unknown key 'parms' in 'signature' (known: forall, "
        "params, inputs, outputs, constraints)");
  CHECK(load_error("TestFwdOp:\n  family: t\n  ref_api: none\n  signture: {}\n") ==
        "ManifestError: F:4:3: TestFwdOp: unknown key 'signture' in an op's entry (known: "
        "family, ref_api, doc, signature, composition, workloads, roofline)");
}

TEST_CASE("a bad type expression is named") {
  CHECK(load_error(entry("{eps: {type: \"flaot | None\"}}", kX, kY)) ==
        "ManifestError: F:6:26: TestFwdOp: param 'eps': unknown type 'flaot' in 'flaot | None' "
        "(types: int, float, bool, str, dtype, list[int], tuple[int, ...], None)");
  CHECK(load_error(std::string("TestFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                               "    forall: {T: \"DType[float16 | half]\"}\n")) ==
        "ManifestError: F:5:17: TestFwdOp: type variable 'T': 'half' in 'DType[float16 | half]' "
        "is not a dtype");
}

TEST_CASE("an undefined dim or type variable is named") {
  CHECK(load_error(entry("{}", kX, "      y: {dtype: T, shape: \"[*B, M]\"}\n")) ==
        "ManifestError: F:10:28: TestFwdOp: output 'y': dim 'M' is bound by no input (an "
        "undefined dim)");
  CHECK(load_error(entry("{}", "      x: {dtype: U, shape: \"[*B, N]\"}\n", kY)) ==
        "ManifestError: F:8:18: TestFwdOp: input 'x': dtype 'U' is neither a type variable nor a "
        "dtype (in 'U')");
  CHECK(load_error(entry("{}", "      x: {dtype: T, shape: \"[*C, N]\"}\n", kY)) ==
        "ManifestError: F:8:28: TestFwdOp: input 'x': '*C' is neither a Shape variable nor a list "
        "param");
  CHECK(load_error(entry("{}", "      x: {dtype: T, shape: \"[B, N]\"}\n", kY)) ==
        "ManifestError: F:8:28: TestFwdOp: input 'x': type variable 'B' in a shape must be written "
        "*B (a Shape variable)");
}

TEST_CASE("a shape expression that does not parse is named, with its column") {
  CHECK(load_error(entry("{}", "      x: {dtype: T, shape: \"[*B, N\"}\n", kY)) ==
        "ManifestError: F:8:28: TestFwdOp: input 'x': shape '[*B, N': expected ']', found the "
        "end at column 7");
  CHECK(load_error(entry("{}", "      x: {dtype: T, shape: \"[*B, -2]\"}\n", kY)) ==
        "ManifestError: F:8:28: TestFwdOp: input 'x': shape '[*B, -2]': a dim cannot be negative "
        "at column 6");
  CHECK(load_error(entry("{}", "      x: {dtype: T, shape: \"[*B, *B2]\"}\n", kY))
            .find("'*B2' is neither") != std::string::npos);
}

TEST_CASE("a default of the wrong type is named") {
  CHECK(load_error(entry("{eps: {type: float, default: small}}", kX, kY)) ==
        "ManifestError: F:6:42: TestFwdOp: param 'eps' default must be float, got 'small'");
  CHECK(load_error(entry("{n: {type: int, default: null}}", kX, kY)) ==
        "ManifestError: F:6:38: TestFwdOp: param 'n' default must be int, got null");
  CHECK(load_error(entry("{s: {type: \"list[int]\", default: [1, x]}}", kX, kY)) ==
        "ManifestError: F:6:50: TestFwdOp: param 's' default must be a list of ints, got item 'x'");
}

TEST_CASE("structure rules: optional inputs trail, runs are resolvable, outputs are bound") {
  CHECK(load_error(entry("{}", "      w: {dtype: T, shape: \"[N]\", optional: true}\n"
                               "      x: {dtype: T, shape: \"[*B, N]\"}\n", kY)) ==
        "ManifestError: F:9:7: TestFwdOp: input 'x': a required input follows an optional one; "
        "optional inputs are trailing");
  CHECK(load_error(std::string("TestFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                               "    forall: {A: Shape, C: Shape, T: DType}\n"
                               "    inputs:\n      x: {dtype: T, shape: \"[*A, *C]\"}\n"
                               "    outputs:\n      y: {dtype: T, shape: \"[*A]\"}\n")) ==
        "ManifestError: F:7:28: TestFwdOp: input 'x': shape '[*A, *C]' has 2 runs of unknown "
        "length; at most one");
  CHECK(load_error(entry("{}", std::string(kX) + "      w: {dtype: T, shape: \"[M]\", optional: true}\n",
                         "      y: {dtype: T, shape: \"[M]\"}\n")) ==
        "ManifestError: F:11:28: TestFwdOp: output 'y': dim 'M' is bound by no required input");
}

TEST_CASE("op names and duplicates across files") {
  CHECK(load_error("rms_norm: {}\n") ==
        "ManifestError: F:1:1: op name 'rms_norm' does not have the form {Name}{Fwd|Bwd}Op (e.g. "
        "RMSNormFwdOp)");
  tr_test::TempDir dir;
  std::string text = entry("{}", kX, kY);
  std::string a = dir.write("a.yaml", text), b = dir.write("b.yaml", "\n" + text);
  const char *paths[] = {a.c_str(), b.c_str()};
  tr_manifest *m = nullptr;
  CHECK(tr_test::error_of(tr_manifest_load(paths, 2, &m)) ==
        "ManifestError: " + b + ":2:1: op 'TestFwdOp' is already declared at " + a + ":1");
  CHECK(m == nullptr);
}

TEST_CASE("a YAML syntax error and a missing file") {
  CHECK(load_error("TestFwdOp: {family: [t\n") ==
        "ManifestError: F:2:1: bad structure: did not find expected ',' or ']' (while parsing a "
        "flow sequence at line 1)");
  tr_manifest *m = nullptr;
  std::string e = tr_test::error_of(tr_manifest_load_dir("/nonexistent/spec", &m));
  CHECK(e.find("IOError: ") == 0);
  CHECK(e.find("/nonexistent/spec") != std::string::npos);
}

TEST_CASE("a spec file holds one YAML document; a second is an error at its start") {
  std::string one = entry("{}", kX, kY);  // lines 1-10
  CHECK(load_error(one + "---\nOtherFwdOp: 1\n") ==
        "ManifestError: F:11:1: a manifest file holds one YAML document; a second one starts here");
  // after an explicit end, anything but comments is refused where it starts (libyaml wants '---')
  CHECK(load_error(one + "...\n\n  OtherFwdOp: 1\n") ==
        "ManifestError: F:13:3: bad structure: did not find expected <document start>");
  CHECK(load_error(one + "---\n") ==  // an empty second document is one too
        "ManifestError: F:11:1: a manifest file holds one YAML document; a second one starts here");
  tr_manifest *m = nullptr;
  std::string two = one + "--- # more\n" + one;
  CHECK(tr_test::error_of(tr_manifest_load_string("mem.yaml", two.data(), two.size(), &m)) ==
        "ManifestError: mem.yaml:11:1: a manifest file holds one YAML document; a second one starts here");
  CHECK(m == nullptr);
  // one document, its start and end marked, and comments after it: loads
  Loaded marked("---\n" + one + "...\n# the end\n");
  CHECK(tr_op_def_line(marked.op()) == 2);
}

TEST_CASE("a constraint naming an unknown name says which, at the file, line and column") {
  CHECK(load_error(entry("{n: {type: int}}", kX, kY, "    constraints: [\"n > 1\", \"Q > 1\"]\n")) ==
        "ManifestError: F:11:28: TestFwdOp: constraint: expression 'Q > 1': unknown name 'Q' at column 1");
  CHECK(load_error(entry("{}", kX, kY, "  roofline: {flops: \"N * widht\", bytes: \"1\"}\n")) ==
        "ManifestError: F:11:21: TestFwdOp: roofline flops: expression 'N * widht': unknown name "
        "'widht' at column 5");
}

TEST_CASE("same_as: an input's dtype follows an earlier input's") {
  Loaded l(std::string("SameFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                       "    inputs:\n"
                       "      a: {dtype: \"float16 | float32\", shape: \"[N]\"}\n"
                       "      b: {dtype: same_as(a), shape: \"[N]\"}\n"
                       "    outputs:\n      c: {dtype: same_as(b), shape: \"[N]\"}\n"));
  Bound op(l.op("SameFwdOp"), Params());
  tr_tensor_spec a = spec("cpu", "float32", {3}), b = spec("cpu", "float32", {3}),
                 b16 = spec("cpu", "float16", {3});
  tr_call_check out;
  REQUIRE(op.check({&a, &b}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "float32[3] on cpu");
  CHECK(op.check({&a, &b16}) == "SignatureError(dtype): SameFwdOp: input 'b' dtype float16 does "
                                "not match same_as(a) = float32");
}

TEST_CASE("same_as: a workload row leaving out the input a dtype follows is an error naming both") {
  Loaded l(std::string("SameFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                       "    inputs:\n"
                       "      a: {dtype: \"float16 | float32\", shape: \"[N]\", optional: true}\n"
                       "      b: {dtype: same_as(a), shape: \"[N]\", optional: true}\n"
                       "    outputs:\n      c: {dtype: float32, shape: \"[2]\"}\n"
                       "  workloads:\n    - {label: no a, shapes: {b: [3]}}\n"));
  const tr_op_def *op = l.op("SameFwdOp");
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  tr_tensor_spec specs[2];
  memset(specs, 0xff, sizeof(specs));  // what the row leaves out is zeroed, not left as given
  uint8_t has[2] = {9, 9};
  size_t n_params = 0;
  std::string e = tr_test::error_of(tr_op_def_workload(op, 0, &cpu, specs, has, nullptr, &n_params));
  CHECK(e == "ManifestError: " + l.file + ":11:7: SameFwdOp: workload 'no a' leaves out input 'a', whose "
             "dtype input 'b' takes (dtype: same_as(a))");
  CHECK(has[0] == 0);
  CHECK(specs[0].rank == 0);
}

TEST_CASE("a missing inputs, outputs, dtype or shape is named at the mapping that lacks it") {
  // the mapping's own line and column: the signature's (line 5), an input's or output's value
  CHECK(load_error(std::string(kHeader) + "    outputs:\n" + kY) ==
        "ManifestError: F:5:5: TestFwdOp: signature has no 'inputs'");
  CHECK(load_error(std::string(kHeader) + "    inputs:\n" + kX) ==
        "ManifestError: F:5:5: TestFwdOp: signature has no 'outputs'");
  CHECK(load_error(entry("{}", "      x: {shape: \"[*B, N]\"}\n", kY)) ==
        "ManifestError: F:8:10: TestFwdOp: input 'x' has no 'dtype'");
  CHECK(load_error(entry("{}", "      x: {dtype: T}\n", kY)) ==
        "ManifestError: F:8:10: TestFwdOp: input 'x' has no 'shape'");
  CHECK(load_error(entry("{}", kX, "      y: {dtype: T}\n")) ==
        "ManifestError: F:10:10: TestFwdOp: output 'y' has no 'shape'");
}

TEST_CASE("device: cpu lets one input stay on the CPU") {
  Loaded l(std::string("LookupFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                       "    inputs:\n"
                       "      x: {dtype: float32, shape: \"[N]\"}\n"
                       "      index: {dtype: int64, shape: \"[M]\", device: cpu}\n"
                       "    outputs:\n      y: {dtype: float32, shape: \"[M]\"}\n"));
  Bound op(l.op("LookupFwdOp"), Params());
  tr_tensor_spec x = spec("cuda:0", "float32", {10});
  tr_tensor_spec i_cpu = spec("cpu", "int64", {4}), i_gpu = spec("cuda:0", "int64", {4}),
                 i_other = spec("cuda:1", "int64", {4});
  tr_call_check out;
  REQUIRE(op.check({&x, &i_cpu}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "float32[4] on cuda:0");
  CHECK(op.check({&x, &i_gpu}) == "");
  CHECK(op.check({&x, &i_other}) ==
        "SignatureError(device): LookupFwdOp: input 'index' is on cuda:1, but input 'x' is on "
        "cuda:0; all inputs of a call are on one device (or on cpu, for this input)");
  tr_tensor_spec x_cpu = spec("cpu", "float32", {10});
  CHECK(op.check({&x_cpu, &i_gpu}) ==
        "SignatureError(device): LookupFwdOp: input 'index' is on cuda:0, but input 'x' is on cpu; "
        "all inputs of a call are on one device (or on cpu, for this input)");
}

TEST_CASE("a call's device: the first input not exempt as a cpu tensor, else cpu") {
  Loaded l(std::string("LookupFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                       "    inputs:\n"
                       "      index: {dtype: int64, shape: \"[M]\", device: cpu}\n"
                       "      x: {dtype: float32, shape: \"[N]\", optional: true}\n"
                       "    outputs:\n      y: {dtype: float32, shape: \"[M]\"}\n"));
  const tr_op_def *d = l.op("LookupFwdOp");
  tr_tensor_spec x = spec("cuda:1", "float32", {10}), x_cpu = spec("cpu", "float32", {10});
  tr_tensor_spec i_cpu = spec("cpu", "int64", {4}), i_gpu = spec("cuda:0", "int64", {4});
  tr_device device;
  char text[TR_DEVICE_FORMAT_MAX];
  auto named = [&](std::initializer_list<const tr_tensor_spec *> in) {
    std::vector<const tr_tensor_spec *> v(in);
    int from = tr_op_def_call_device(d, v.data(), v.size(), &device);
    tr_device_format(&device, text, sizeof(text));
    return std::to_string(from) + " " + text;
  };
  CHECK(named({&i_cpu, &x}) == "1 cuda:1");     // the exempt cpu index is passed over
  CHECK(named({&i_gpu, &x}) == "0 cuda:0");     // a device index is the call's device
  CHECK(named({&i_cpu, &x_cpu}) == "1 cpu");
  CHECK(named({&i_cpu, nullptr}) == "-1 cpu");  // only exempt inputs: cpu
  CHECK(named({&i_cpu}) == "-1 cpu");
  // tr_op_def_check agrees with it on a valid call.
  Bound op(d, Params());
  tr_call_check out;
  REQUIRE(op.check({&i_cpu, &x}, &out) == "");
  tr_op_def_call_device(d, std::vector<const tr_tensor_spec *>{&i_cpu, &x}.data(), 2, &device);
  CHECK(tr_device_equal(&out.device, &device));
}

TEST_CASE("composition steps name ops, inputs and params that exist") {
  std::string base = "AddFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                     "    forall: {S: Shape, T: DType}\n"
                     "    params: {alpha: {type: float, default: 1.0}}\n"
                     "    inputs:\n      a: {dtype: T, shape: \"[*S]\"}\n      b: {dtype: T, shape: \"[*S]\"}\n"
                     "    outputs:\n      c: {dtype: T, shape: \"[*S]\"}\n"
                     "TwiceFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"   // 12..15
                     "    forall: {S: Shape, T: DType}\n"
                     "    inputs:\n      x: {dtype: T, shape: \"[*S]\"}\n"
                     "    outputs:\n      y: {dtype: T, shape: \"[*S]\"}\n"
                     "  composition:\n    steps:\n";                                   // 21, 22
  Loaded good(base + "      - {op: AddFwdOp, inputs: {a: x, b: x}, params: {alpha: 2}, outputs: {c: t}}\n"
                     "    returns: {y: t}\n");
  CHECK(tr_op_def_is_composite(good.op("TwiceFwdOp")));
  CHECK(load_error(base + "      - {op: SubFwdOp, inputs: {a: x}, outputs: {c: t}}\n    returns: {y: t}\n") ==
        "ManifestError: F:23:9: TwiceFwdOp: composition step 1: op 'SubFwdOp' is not in the manifest");
  CHECK(load_error(base + "      - {op: AddFwdOp, inputs: {a: x, z: x}, outputs: {c: t}}\n    returns: {y: t}\n") ==
        "ManifestError: F:23:9: TwiceFwdOp: composition step 1: AddFwdOp has no input 'z'");
  CHECK(load_error(base + "      - {op: AddFwdOp, inputs: {a: x, b: x}, params: {alpha: true}, outputs: {c: t}}\n"
                          "    returns: {y: t}\n") ==
        "ManifestError: F:23:9: TwiceFwdOp: composition step 1: param 'alpha' of AddFwdOp expects "
        "float, got True");
  CHECK(load_error(base + "      - {op: AddFwdOp, inputs: {a: x, b: x}, outputs: {c: t}}\n    returns: {}\n") ==
        "ManifestError: F:24:14: TwiceFwdOp: 'returns' gives no value for output 'y'");
}

// libyaml keeps repeated keys; a param repeated in a row or a step must not pass the loader (the
// callers hold TR_SIG_MAX_PARAMS of them).
TEST_CASE("a param given twice in a workload row or a composition step is named") {
  std::string rows = entry("{n: {type: int}}", kX, kY,
                           "  workloads:\n    - {label: r, shapes: {x: [2]}, params: {n: 1, n: 1}}\n");
  CHECK(load_error(rows) == "ManifestError: F:12:51: TestFwdOp: workload 'r': param 'n' is given twice");
  std::string steps = "AddFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                      "    forall: {S: Shape, T: DType}\n"
                      "    params: {alpha: {type: float, default: 1.0}}\n"
                      "    inputs:\n      a: {dtype: T, shape: \"[*S]\"}\n      b: {dtype: T, shape: \"[*S]\"}\n"
                      "    outputs:\n      c: {dtype: T, shape: \"[*S]\"}\n"
                      "TwiceFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                      "    forall: {S: Shape, T: DType}\n"
                      "    inputs:\n      x: {dtype: T, shape: \"[*S]\"}\n"
                      "    outputs:\n      y: {dtype: T, shape: \"[*S]\"}\n"
                      "  composition:\n    steps:\n"
                      "      - {op: AddFwdOp, inputs: {a: x, b: x}, params: {alpha: 2, alpha: 3}, outputs: {c: t}}\n"
                      "    returns: {y: t}\n";
  CHECK(load_error(steps) == "ManifestError: F:23:65: TwiceFwdOp: step AddFwdOp: param 'alpha' is given twice");
}

TEST_CASE("a spec file's text loads from memory, named in messages") {
  std::string text = entry("{}", kX, kY);
  tr_manifest *m = nullptr;
  tr_test::ok(tr_manifest_load_string("mem.yaml", text.data(), text.size(), &m));
  REQUIRE(m != nullptr);
  const tr_op_def *op = tr_manifest_find(m, "TestFwdOp");
  REQUIRE(op != nullptr);
  CHECK(std::string(tr_op_def_path(op)) == "mem.yaml");
  tr_manifest_destroy(&m);
  CHECK(tr_test::error_of(tr_manifest_load_string("mem.yaml", "x: [", 4, &m)).find("ManifestError: mem.yaml:") == 0);
  CHECK(m == nullptr);
}

TEST_CASE("a key given twice is named with both places, in every mapping of an entry") {
  CHECK(load_error("TestFwdOp:\n  family: t\n  ref_api: none\n  family: u\n") ==
        "ManifestError: F:4:3: TestFwdOp: duplicate key 'family' in an op's entry (first at line 2, column 3)");
  CHECK(load_error(entry("{}", "      x: {dtype: T, shape: \"[*B, N]\", shape: \"[N]\"}\n", kY)) ==
        "ManifestError: F:8:39: TestFwdOp: duplicate key 'shape' in input 'x' (first at line 8, column 21)");
  CHECK(load_error(entry("{n: {type: int, type: float}}", kX, kY)) ==
        "ManifestError: F:6:29: TestFwdOp: duplicate key 'type' in param 'n' (first at line 6, column 18)");
  std::string rows = entry("{}", kX, kY, "  workloads:\n    - {label: r, shapes: {x: [2, 3], x: [4, 5]}}\n");
  CHECK(load_error(rows) ==
        "ManifestError: F:12:38: TestFwdOp: duplicate key 'x' in 'shapes' of workload 'r' (first at line 12, column 27)");
  rows = entry("{}", kX, kY, "  workloads:\n    - {label: r, shapes: {x: [2, 3]}, dtypes: {x: float16, x: float32}}\n");
  CHECK(load_error(rows) ==
        "ManifestError: F:12:60: TestFwdOp: duplicate key 'x' in 'dtypes' of workload 'r' (first at line 12, column 48)");
  rows = entry("{}", kX, kY, "  workloads:\n    - {label: r, label: s, shapes: {x: [2, 3]}}\n");
  CHECK(load_error(rows) ==
        "ManifestError: F:12:18: TestFwdOp: duplicate key 'label' in a workload row (first at line 12, column 8)");
  rows = entry("{}", kX, kY, "  roofline: {flops: \"1\", bytes: \"1\", flops: \"2\"}\n");
  CHECK(load_error(rows) ==
        "ManifestError: F:11:38: TestFwdOp: duplicate key 'flops' in 'roofline' (first at line 11, column 14)");
  std::string base = "AddFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
                     "    forall: {S: Shape, T: DType}\n"
                     "    inputs:\n      a: {dtype: T, shape: \"[*S]\"}\n      b: {dtype: T, shape: \"[*S]\"}\n"
                     "    outputs:\n      c: {dtype: T, shape: \"[*S]\"}\n"
                     "TwiceFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"   // 11..14
                     "    forall: {S: Shape, T: DType}\n"
                     "    inputs:\n      x: {dtype: T, shape: \"[*S]\"}\n"
                     "    outputs:\n      y: {dtype: T, shape: \"[*S]\"}\n"
                     "  composition:\n    steps:\n";                                   // 20, 21
  CHECK(load_error(base + "      - {op: AddFwdOp, inputs: {a: x, b: x, a: x}, outputs: {c: t}}\n    returns: {y: t}\n") ==
        "ManifestError: F:22:45: TwiceFwdOp: duplicate key 'a' in 'inputs' of step AddFwdOp (first at line 22, column 33)");
  CHECK(load_error(base + "      - {op: AddFwdOp, inputs: {a: x, b: x}, outputs: {c: t, c: u}}\n    returns: {y: t}\n") ==
        "ManifestError: F:22:62: TwiceFwdOp: duplicate key 'c' in 'outputs' of step AddFwdOp (first at line 22, column 56)");
  CHECK(load_error(base + "      - {op: AddFwdOp, inputs: {a: x, b: x}, outputs: {c: t}}\n    returns: {y: t, y: c}\n") ==
        "ManifestError: F:23:21: TwiceFwdOp: duplicate key 'y' in 'returns' (first at line 23, column 15)");
  // the messages that named a repeated name before stay as they were
  CHECK(load_error(entry("{n: {type: int}, n: {type: int}}", kX, kY)) ==
        "ManifestError: F:6:30: TestFwdOp: param 'n' is declared twice");
}

TEST_CASE("a workload row whose element count or byte size overflows int64 is refused at its shape") {
  std::string huge = entry("{}", kX, kY, "  workloads:\n    - {label: r, dtype: float32, shapes: {x: [4294967296, 4294967296]}}\n");
  CHECK(load_error(huge) ==
        "ManifestError: F:12:46: TestFwdOp: workload 'r': input 'x' float32(4294967296, 4294967296) is too large: "
        "its element count overflows int64 (at most 9223372036854775807 elements)");
  std::string bytes = entry("{}", kX, kY, "  workloads:\n    - {label: r, dtype: float32, shapes: {x: [2, 2305843009213693952]}}\n");
  CHECK(load_error(bytes) ==
        "ManifestError: F:12:46: TestFwdOp: workload 'r': input 'x' float32(2, 2305843009213693952) is too large: "
        "its size, 4611686018427387904 elements of 4 bytes, overflows int64 (at most 9223372036854775807 bytes)");
  // no dtype to settle (lint's problem): the element count is still checked
  std::string no_dtype = entry("{}", kX, kY, "  workloads:\n    - {label: r, shapes: {x: [4294967296, 4294967296]}}\n");
  CHECK(load_error(no_dtype) ==
        "ManifestError: F:12:30: TestFwdOp: workload 'r': input 'x' (4294967296, 4294967296) is too large: "
        "its element count overflows int64 (at most 9223372036854775807 elements)");
  // the largest that fits, and a zero axis beside huge ones, load
  Loaded fits(entry("{}", kX, kY, "  workloads:\n    - {label: r, dtype: float16, shapes: {x: [2, 2305843009213693951]}}\n"
                                  "    - {label: e, dtype: float16, shapes: {x: [0, 4294967296, 4294967296]}}\n"));
  CHECK(tr_op_def_workload_count(fits.op()) == 2);
}

TEST_CASE("a spec file nested 100,000 levels deep is refused fast, at the level too many") {
  std::string deep = entry("{}", kX, kY, "  workloads: ");
  for (int i = 0; i < 100000; i++) deep += "[";
  auto start = std::chrono::steady_clock::now();
  std::string e = load_error(deep + "\n");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(e == "ManifestError: F:11:76: nesting too deep: this sequence is level 65; mappings and sequences nest "
             "at most 64 levels");
  CHECK(seconds < 0.25);  // libyaml alone: about 40 s
}
