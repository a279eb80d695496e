// check_test.cc: every rule of a call's check, each with a passing call and a failing one whose
// exact message is asserted; run against the shipped manifest's real signatures.
#include <catch2/catch.hpp>

#include <cstdint>

#include "manifest/manifest_testing.h"

using tr_test::Bound;
using tr_test::Params;
using tr_test::op;
using tr_test::spec;

TEST_CASE("RMSNorm: a legal call gives the settled params and the output spec") {
  Bound rms(op("RMSNormFwdOp"), Params().list("normalized_shape", {4096}));
  CHECK(rms.settled[1].kind == TR_VALUE_NONE);  // eps: the null default arrives as none
  tr_tensor_spec x = spec("cuda:0", "bfloat16", {2, 7, 4096}), w = spec("cuda:0", "bfloat16", {4096});
  tr_call_check out;
  REQUIRE(rms.check({&x, &w}, &out) == "");
  REQUIRE(out.output_present[0]);
  CHECK(tr_test::shape_text(out.outputs[0]) == "bfloat16[2, 7, 4096] on cuda:0");
  // the optional weight may be omitted, or passed as NULL
  CHECK(rms.check({&x}) == "");
  CHECK(rms.check({&x, nullptr}) == "");
}

TEST_CASE("the example message: a weight that does not match *normalized_shape") {
  Bound rms(op("RMSNormFwdOp"), Params().list("normalized_shape", {4096}));
  tr_tensor_spec x = spec("cuda:0", "float16", {4, 4096}), w = spec("cuda:0", "float16", {4095});
  CHECK(rms.check({&x, &w}) ==
        "SignatureError(shape): RMSNormFwdOp: input 'weight' shape (4095,) does not match "
        "[*normalized_shape] = (4096,): axis 0 is 4095, expected normalized_shape[0] = 4096");
}

TEST_CASE("required inputs are present") {
  Bound rms(op("RMSNormFwdOp"), Params().list("normalized_shape", {8}));
  CHECK(rms.check({}) == "SignatureError(shape): RMSNormFwdOp: input 'x' is required");
  tr_tensor_spec x = spec("cpu", "float32", {8});
  CHECK(rms.check({&x, &x, &x}) ==
        "SignatureError(shape): RMSNormFwdOp: takes 2 inputs (x, weight), got 3");
}

TEST_CASE("dtypes are in their unions") {
  Bound rms(op("RMSNormFwdOp"), Params().list("normalized_shape", {8}));
  tr_tensor_spec x = spec("cpu", "float64", {2, 8});
  CHECK(rms.check({&x}) == "SignatureError(dtype): RMSNormFwdOp: input 'x' dtype float64 is not "
                           "one of float16 | bfloat16 | float32 (type variable T)");
  Bound gqa(op("GQADecodeFwdOp"), Params().i("heads", 8).i("heads_kv", 2).i("dim", 64));
  tr_tensor_spec q = spec("cuda:0", "float16", {3, 8, 64}), k = spec("cuda:0", "float16", {3, 100, 2, 64});
  tr_tensor_spec lens_ok = spec("cuda:0", "int32", {3}), lens_bad = spec("cuda:0", "int64", {3});
  CHECK(gqa.check({&q, &k, &k, &lens_ok}) == "");
  CHECK(gqa.check({&q, &k, &k, &lens_bad}) ==
        "SignatureError(dtype): GQADecodeFwdOp: input 'seqlens' dtype int64 is not one of int32");
}

TEST_CASE("a type variable binds one dtype for every tensor using it") {
  Bound rms(op("RMSNormFwdOp"), Params().list("normalized_shape", {8}));
  tr_tensor_spec x = spec("cpu", "bfloat16", {2, 8}), w = spec("cpu", "float32", {8});
  CHECK(rms.check({&x, &w}) == "SignatureError(dtype): RMSNormFwdOp: input 'weight' dtype float32 "
                               "does not match T = bfloat16 from input 'x'");
}

TEST_CASE("ranks and named dims: Gemm, plain and transposed") {
  Bound gemm(op("GemmFwdOp"), Params());
  tr_tensor_spec a = spec("cuda:0", "float16", {64, 32}), b = spec("cuda:0", "float16", {32, 16});
  tr_call_check out;
  REQUIRE(gemm.check({&a, &b}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "float16[64, 16] on cuda:0");
  tr_tensor_spec b_bad = spec("cuda:0", "float16", {31, 16});
  CHECK(gemm.check({&a, &b_bad}) ==
        "SignatureError(shape): GemmFwdOp: input 'b' shape (31, 16) does not match "
        "trans_b ? [N, K] : [K, N]: axis 0 is 31, expected K = 32 from input 'a' axis 1");
  tr_tensor_spec a3 = spec("cuda:0", "float16", {2, 64, 32});
  CHECK(gemm.check({&a3, &b}) == "SignatureError(shape): GemmFwdOp: input 'a' shape (2, 64, 32) "
                                 "does not match trans_a ? [K, M] : [M, K]: rank 3, expected 2");
  Bound gemm_t(op("GemmFwdOp"), Params().b("trans_a", true).b("trans_b", true));
  tr_tensor_spec at = spec("cuda:0", "float16", {32, 64}), bt = spec("cuda:0", "float16", {16, 32});
  REQUIRE(gemm_t.check({&at, &bt}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "float16[64, 16] on cuda:0");
  CHECK(gemm_t.check({&a, &b}) ==
        "SignatureError(shape): GemmFwdOp: input 'b' shape (32, 16) does not match "
        "trans_b ? [N, K] : [K, N] = (32, 64): axis 1 is 16, expected K = 64 from input 'a' axis 0");
}

TEST_CASE("fill: the largest value benchmarks put in an integer input") {
  Bound gqa(op("GQADecodeFwdOp"), Params().i("heads", 8).i("heads_kv", 2).i("dim", 64));
  tr_tensor_spec q = spec("cpu", "float16", {3, 8, 64}), k = spec("cpu", "float16", {3, 100, 2, 64});
  tr_tensor_spec lens = spec("cpu", "int32", {3});
  tr_call_check out;
  REQUIRE(gqa.check({&q, &k, &k, &lens}, &out) == "");
  int has = 0;
  int64_t max = 0;
  tr_test::ok(tr_op_def_input_fill(gqa.op, 3, gqa.settled, &out, &has, &max));
  CHECK(has == 1);
  CHECK(max == 100);  // S
  tr_test::ok(tr_op_def_input_fill(gqa.op, 0, gqa.settled, &out, &has, &max));
  CHECK(has == 0);
}

TEST_CASE("fill: one that is not a number is a ValueError naming op, input and expression") {
  const std::string text =
      "NanFwdOp:\n"
      "  family: test\n"
      "  ref_api: none\n"
      "  signature:\n"
      "    inputs:\n"
      "      idx: {dtype: int32, shape: \"[L]\", fill: \"1e308 * 10 - 1e308 * 10\"}\n"
      "    outputs:\n"
      "      y: {dtype: int32, shape: \"[L]\"}\n";
  tr_manifest *m = nullptr;
  tr_test::ok(tr_manifest_load_string("nan.yaml", text.data(), text.size(), &m));
  {
    Bound nan(tr_manifest_find(m, "NanFwdOp"), Params());
    tr_tensor_spec idx = spec("cpu", "int32", {4});
    tr_call_check out;
    REQUIRE(nan.check({&idx}, &out) == "");
    int has = 0;
    int64_t max = 0;
    CHECK(tr_test::error_of(tr_op_def_input_fill(nan.op, 0, nan.settled, &out, &has, &max)) ==
          "ValueError: NanFwdOp: input 'idx': its fill '1e308 * 10 - 1e308 * 10' is not a number");
    CHECK(has == 0);
  }
  tr_manifest_destroy(&m);
}

TEST_CASE("int params stand for dims: GQA decode") {
  Bound gqa(op("GQADecodeFwdOp"), Params().i("heads", 32).i("heads_kv", 8).i("dim", 128));
  tr_tensor_spec q = spec("cuda:0", "bfloat16", {4, 32, 128});
  tr_tensor_spec k = spec("cuda:0", "bfloat16", {4, 4096, 8, 128});
  tr_tensor_spec lens = spec("cuda:0", "int32", {4});
  tr_call_check out;
  REQUIRE(gqa.check({&q, &k, &k, &lens}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "bfloat16[4, 32, 128] on cuda:0");
  tr_tensor_spec q_bad = spec("cuda:0", "bfloat16", {4, 32, 64});
  CHECK(gqa.check({&q_bad, &k, &k, &lens}) ==
        "SignatureError(shape): GQADecodeFwdOp: input 'q' shape (4, 32, 64) does not match "
        "[B, heads, dim] = (4, 32, 128): axis 2 is 64, expected dim = 128");
  tr_tensor_spec v_bad = spec("cuda:0", "bfloat16", {4, 2048, 8, 128});
  CHECK(gqa.check({&q, &k, &v_bad, &lens}) ==
        "SignatureError(shape): GQADecodeFwdOp: input 'v_cache' shape (4, 2048, 8, 128) does not "
        "match [B, S, heads_kv, dim] = (4, 4096, 8, 128): axis 1 is 2048, expected S = 4096 from "
        "input 'k_cache' axis 1");
}

TEST_CASE("star runs: a Shape variable binds once, a list param expands") {
  Bound add(op("AddFwdOp"), Params());
  tr_tensor_spec a = spec("cpu", "float32", {2, 3, 4}), b = spec("cpu", "float32", {2, 3, 4});
  CHECK(add.check({&a, &b}) == "");
  tr_tensor_spec b_bad = spec("cpu", "float32", {2, 5, 4});
  CHECK(add.check({&a, &b_bad}) ==
        "SignatureError(shape): AddFwdOp: input 'b' shape (2, 5, 4) does not match [*S] = "
        "(2, 3, 4): axis 1 is 5, expected S[1] = 3 from input 'a' axis 1");
  tr_tensor_spec b_rank = spec("cpu", "float32", {2, 3});
  CHECK(add.check({&a, &b_rank}) ==
        "SignatureError(shape): AddFwdOp: input 'b' shape (2, 3) does not match [*S] = (2, 3, 4): "
        "rank 2, expected 3");
  Bound ln(op("LayerNormFwdOp"), Params().list("normalized_shape", {3, 4}));
  tr_tensor_spec x_ok = spec("cpu", "float32", {5, 3, 4}), x_bad = spec("cpu", "float32", {5, 4, 3});
  CHECK(ln.check({&x_ok}) == "");
  CHECK(ln.check({&x_bad}) ==
        "SignatureError(shape): LayerNormFwdOp: input 'x' shape (5, 4, 3) does not match "
        "[*B, *normalized_shape] = (5, 3, 4): axis 1 is 4, expected normalized_shape[0] = 3");
  tr_tensor_spec x_short = spec("cpu", "float32", {4});
  CHECK(ln.check({&x_short}) ==
        "SignatureError(shape): LayerNormFwdOp: input 'x' shape (4,) does not match "
        "[*B, *normalized_shape]: rank 1, expected at least 2");
}

TEST_CASE("every input of a call is on one device") {
  Bound gemm(op("GemmFwdOp"), Params());
  tr_tensor_spec a = spec("cuda:0", "float16", {4, 4}), b = spec("cuda:1", "float16", {4, 4});
  CHECK(gemm.check({&a, &b}) ==
        "SignatureError(device): GemmFwdOp: input 'b' is on cuda:1, but input 'a' is on cuda:0; "
        "all inputs of a call are on one device");
  tr_call_check out;
  tr_tensor_spec b0 = spec("cuda:0", "float16", {4, 4});
  REQUIRE(gemm.check({&a, &b0}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "float16[4, 4] on cuda:0");
}


TEST_CASE("param types: checked, an int accepted for a float") {
  const tr_op_def *rms = op("RMSNormFwdOp");
  Bound ok(rms, Params().list("normalized_shape", {8}).i("eps", 1));
  CHECK(ok.settled[1].kind == TR_VALUE_FLOAT);
  CHECK(ok.settled[1].as.f == 1.0);
  CHECK(tr_test::bind_error(rms, Params().list("normalized_shape", {8}).s("eps", "tiny")) ==
        "SignatureError(param): RMSNormFwdOp: param 'eps' expects float | None, got 'tiny' (str)");
  CHECK(tr_test::bind_error(rms, Params().i("normalized_shape", 8)) ==
        "SignatureError(param): RMSNormFwdOp: param 'normalized_shape' expects "
        "list[int] | tuple[int, ...], got 8 (int)");
  const tr_op_def *gemm = op("GemmFwdOp");
  CHECK(tr_test::bind_error(gemm, Params().i("trans_a", 1)) ==
        "SignatureError(param): GemmFwdOp: param 'trans_a' expects bool, got 1 (int)");
}

TEST_CASE("required params are given; unknown or repeated params are refused") {
  const tr_op_def *rms = op("RMSNormFwdOp");
  CHECK(tr_test::bind_error(rms, Params()) ==
        "SignatureError(param): RMSNormFwdOp: param 'normalized_shape' (list[int] | tuple[int, "
        "...]) is required");
  CHECK(tr_test::bind_error(rms, Params().list("normalized_shape", {8}).f("epsilon", 1e-6)) ==
        "SignatureError(param): RMSNormFwdOp: unknown param 'epsilon'; params: normalized_shape, eps");
  CHECK(tr_test::bind_error(rms, Params().list("normalized_shape", {8}).list("normalized_shape", {8})) ==
        "SignatureError(param): RMSNormFwdOp: param 'normalized_shape' is given twice");
  Bound defaults(op("LayerNormFwdOp"), Params().list("normalized_shape", {8}));
  CHECK(defaults.settled[1].kind == TR_VALUE_FLOAT);
  CHECK(defaults.settled[1].as.f == 1e-05);
}

TEST_CASE("constraints over params hold when an op is made, over dims at each call") {
  const tr_op_def *gqa = op("GQADecodeFwdOp");
  CHECK(tr_test::bind_error(gqa, Params().i("heads", 32).i("heads_kv", 5).i("dim", 128)) ==
        "SignatureError(param): GQADecodeFwdOp: constraint 'heads % heads_kv == 0' does not hold: "
        "heads = 32, heads_kv = 5");
  Bound gn(op("GroupNormFwdOp"), Params().i("num_groups", 32));
  tr_tensor_spec x_ok = spec("cpu", "float16", {2, 320, 8, 8}), x_bad = spec("cpu", "float16", {2, 300, 8, 8});
  CHECK(gn.check({&x_ok}) == "");
  CHECK(gn.check({&x_bad}) == "SignatureError(shape): GroupNormFwdOp: constraint 'C % num_groups "
                              "== 0' does not hold: C = 300, num_groups = 32");
  Bound sm(op("SoftmaxFwdOp"), Params().i("dim", 2));
  tr_tensor_spec s2 = spec("cpu", "float32", {4, 5}), s3 = spec("cpu", "float32", {4, 5, 6});
  CHECK(sm.check({&s3}) == "");
  CHECK(sm.check({&s2}) == "SignatureError(shape): SoftmaxFwdOp: constraint 'dim >= -rank(x) and "
                           "dim < rank(x)' does not hold: dim = 2, rank(x) = 2");
  // integers are compared exactly, as Python compares them: 2^53 + 1 is 3 times 3002399751580331 (as a
  // double it would be 2^53, which 3 does not divide)
  Bound exact(gqa, Params().i("heads", 9007199254740993).i("heads_kv", 3).i("dim", 128));
  CHECK(exact.settled[0].as.i == 9007199254740993);
  CHECK(tr_test::bind_error(gqa, Params().i("heads", 9007199254740992).i("heads_kv", 3).i("dim", 128)) ==
        "SignatureError(param): GQADecodeFwdOp: constraint 'heads % heads_kv == 0' does not hold: "
        "heads = 9007199254740992, heads_kv = 3");
  // an int64 extreme is printed as the int it is, not rounded to six digits
  Bound low(op("SoftmaxFwdOp"), Params().i("dim", INT64_MIN));
  CHECK(low.check({&s2}) == "SignatureError(shape): SoftmaxFwdOp: constraint 'dim >= -rank(x) and "
                            "dim < rank(x)' does not hold: dim = -9223372036854775808, rank(x) = 2");
}

TEST_CASE("a dtype param takes a dtype's name, as workload rows write it; another string is refused") {
  Bound named(op("SoftmaxFwdOp"), Params().s("dtype", "float32"));
  int i = tr_op_def_param_index(op("SoftmaxFwdOp"), "dtype");
  REQUIRE(i >= 0);
  CHECK(named.settled[i].kind == TR_VALUE_DTYPE);
  CHECK(tr_dtype_equal(named.settled[i].as.dtype, TR_FLOAT32));
  CHECK(tr_test::bind_error(op("SoftmaxFwdOp"), Params().s("dtype", "float33")) ==
        "SignatureError(param): SoftmaxFwdOp: param 'dtype' expects dtype | None, got 'float33' (str)");
}

TEST_CASE("outputs: a dtype param overrides, `when` drops an output") {
  Bound sm(op("SoftmaxFwdOp"), Params().dt("dtype", TR_FLOAT32));
  tr_tensor_spec x = spec("cuda:0", "bfloat16", {4, 5});
  tr_call_check out;
  REQUIRE(sm.check({&x}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "float32[4, 5] on cuda:0");
  Bound sm_same(op("SoftmaxFwdOp"), Params());
  REQUIRE(sm_same.check({&x}, &out) == "");
  CHECK(tr_test::shape_text(out.outputs[0]) == "bfloat16[4, 5] on cuda:0");

  tr_tensor_spec bx = spec("cuda:0", "float16", {8, 16, 4, 4}), stat = spec("cuda:0", "float16", {16});
  Bound train(op("BatchNormFwdOp"), Params().b("training", true));
  REQUIRE(train.check({&bx}, &out) == "");  // training: running stats may be left out
  REQUIRE(out.n_outputs == 3);
  CHECK(out.output_present[1]);
  CHECK(tr_test::shape_text(out.outputs[1]) == "float32[16] on cuda:0");
  Bound infer(op("BatchNormFwdOp"), Params());
  CHECK(infer.check({&bx}) ==
        "SignatureError(shape): BatchNormFwdOp: input 'running_mean' is required when training is False");
  REQUIRE(infer.check({&bx, &stat, &stat}, &out) == "");
  CHECK(out.output_present[0]);
  CHECK_FALSE(out.output_present[1]);
  CHECK_FALSE(out.output_present[2]);
}

