// intree_select_test.cc: the in-tree ops as the selector sees them (no GPU, no NVRTC): the
// selectors build (table 5's checks), and each call goes to the implementation meant for it,
// at every boundary: warp rows up to 1024, block rows up to 32768, looped beyond; softmax along
// an inner axis goes to the strided kernel; what no implementation serves is refused with each
// implementation's reason.
#include <catch2/catch.hpp>

#include <cmath>

#include <algorithm>
#include <string>
#include <vector>

#include "core/test_support.h"
#include "kernels/intree/intree.h"

namespace {

struct Selector {
  tr_selector *sel = nullptr;
  const tr_intree_op *op;
  // reversed: the op's implementations handed to the selector in the opposite order
  explicit Selector(const char *name, bool reversed = false) : op(tr_intree_find(name)) {
    REQUIRE(op != nullptr);
    std::vector<const tr_kernel_type *> types(op->types, op->types + op->n_types);
    if (reversed) std::reverse(types.begin(), types.end());
    tr_status *status = tr_selector_new(op->op, op->interfaces, op->n_interfaces, types.data(), types.size(), nullptr,
                                        nullptr, &sel);
    REQUIRE(status == nullptr);
  }
  ~Selector() { tr_selector_destroy(&sel); }
};

tr_device cuda0() {
  tr_device d = {"cuda", 0};
  return d;
}

// key_for a call made by the family from input specs and params, with facts stated.
std::string key_for(Selector &s, const tr_tensor_spec *const *inputs, size_t n, const tr_named_value *params,
                    size_t n_params, int32_t arch = 90, std::string *error = nullptr) {
  tr_device dev = cuda0();
  const char *iface = nullptr;
  tr_call_spec call;
  tr_status *status = s.op->call_spec(inputs, n, params, n_params, &dev, &iface, &call);
  REQUIRE(status == nullptr);
  tr_device_facts facts = {arch, nullptr, 132, 232448};
  tr_call_spec_state_facts(&call, TR_FACT_ARCH | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET, &facts);
  const char *key = nullptr;
  status = tr_selector_key_for(s.sel, iface, &call, &key);
  tr_call_spec_clear(&call);
  if (status != nullptr) {
    if (error != nullptr) *error = tr_status_message(status);
    tr_status_destroy(&status);
    return "";
  }
  return key;
}

tr_tensor_spec spec(tr_dtype dt, std::initializer_list<int64_t> shape) {
  tr_tensor_spec s;
  memset(&s, 0, sizeof(s));
  s.dtype = dt;
  s.device = cuda0();
  s.rank = (int32_t)shape.size();
  int i = 0;
  for (int64_t d : shape) s.shape[i++] = d;
  return s;
}

std::string norm_key(Selector &s, tr_dtype dt, int64_t rows, int64_t row) {
  tr_tensor_spec x = spec(dt, {rows, row}), w = spec(dt, {row});
  const tr_tensor_spec *in[3] = {&x, &w, nullptr};
  int64_t shape[1] = {row};
  tr_named_value p[2];
  p[0].name = "normalized_shape";
  REQUIRE(tr_value_int_list(shape, 1, &p[0].value) == nullptr);
  p[1].name = "eps";
  p[1].value = tr_value_float(1e-6);
  std::string key = key_for(s, in, 3, p, 2);
  tr_value_clear(&p[0].value);
  return key;
}

}  // namespace

TEST_CASE("every in-tree op's selector passes the checks made when it is built") {
  REQUIRE(tr_intree_op_count() == 8);
  for (size_t i = 0; i < tr_intree_op_count(); i++) {
    const tr_intree_op *op = tr_intree_op_at(i);
    tr_selector *sel = nullptr;
    tr_status *status = tr_selector_new(op->op, op->interfaces, op->n_interfaces, op->types, op->n_types, nullptr,
                                        nullptr, &sel);
    INFO(op->op << ": " << (status ? tr_status_message(status) : ""));
    CHECK(status == nullptr);
    tr_status_destroy(&status);
    tr_selector_destroy(&sel);
    for (size_t k = 0; k < op->n_interfaces; k++) CHECK(tr_interface_name_ok(op->interfaces[k]->name));
  }
  CHECK(tr_intree_find("GemmFwdOp") != nullptr);
  CHECK(tr_intree_find("GQADecodeFwdOp") != nullptr);
  CHECK(tr_intree_find("GQAPrefillFwdOp") != nullptr);
  CHECK(tr_intree_find("GroupNormFwdOp") == nullptr);
}

TEST_CASE("RMSNorm and LayerNorm rows go to a warp up to 1024 elements, else to the looped kernel") {
  for (const char *name : {"RMSNormFwdOp", "LayerNormFwdOp"}) {
    Selector s(name);
    std::string prefix = std::string(name) == "RMSNormFwdOp" ? "rms_norm_" : "layer_norm_";
    for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32}) {
      INFO(name << " " << tr_dtype_name(dt));
      CHECK(norm_key(s, dt, 7, 0) == prefix + "warp");  // rows of no elements: served, nothing launched
      CHECK(norm_key(s, dt, 7, 1) == prefix + "warp");
      CHECK(norm_key(s, dt, 1, 1024) == prefix + "warp");
      CHECK(norm_key(s, dt, 1, 1025) == prefix + "looped");
      CHECK(norm_key(s, dt, 2048, 4096) == prefix + "looped");
      CHECK(norm_key(s, dt, 1, 32768) == prefix + "looped");
      CHECK(norm_key(s, dt, 1, 32769) == prefix + "looped");
      CHECK(norm_key(s, dt, 3, 65536) == prefix + "looped");
    }
  }
}

TEST_CASE("softmax: contiguous rows by length, an inner axis to the strided kernel, dtypes refused") {
  Selector s("SoftmaxFwdOp");
  auto key = [&](tr_tensor_spec x, int64_t dim, const tr_dtype *out, std::string *error = nullptr) {
    const tr_tensor_spec *in[1] = {&x};
    tr_named_value p[2] = {{"dim", tr_value_int(dim)}, {"dtype", out ? tr_value_dtype(*out) : tr_value_none()}};
    return key_for(s, in, 1, p, 2, 90, error);
  };
  CHECK(key(spec(TR_BFLOAT16, {64, 1000}), -1, nullptr) == "softmax_warp");
  CHECK(key(spec(TR_BFLOAT16, {16, 32, 2048, 2048}), -1, nullptr) == "softmax_block");
  tr_dtype f32 = TR_FLOAT32, f64 = TR_FLOAT64;
  CHECK(key(spec(TR_BFLOAT16, {64, 128256}), -1, &f32) == "softmax_looped");
  CHECK(key(spec(TR_FLOAT32, {4, 8, 3}), 1, nullptr) == "softmax_strided");
  CHECK(key(spec(TR_FLOAT32, {4, 8, 1}), 1, nullptr) == "softmax_warp");  // inner 1: a contiguous row
  std::string error;
  CHECK(key(spec(TR_FLOAT32, {4, 8}), -1, &f64, &error).empty());
  CHECK(error.find("no implementation serves this call") != std::string::npos);
  CHECK(error.find("out_dtype must be float16, bfloat16 or float32; got float64") != std::string::npos);
}

TEST_CASE("softmax: the boundaries between warp, block and looped rows") {
  Selector s("SoftmaxFwdOp");
  auto key = [&](int64_t row) {
    tr_tensor_spec x = spec(TR_BFLOAT16, {3, row});
    const tr_tensor_spec *in[1] = {&x};
    tr_named_value p[2] = {{"dim", tr_value_int(-1)}, {"dtype", tr_value_none()}};
    return key_for(s, in, 1, p, 2);
  };
  CHECK(key(0) == "softmax_warp");  // rows of no elements: served, nothing launched
  CHECK(key(1) == "softmax_warp");
  CHECK(key(1024) == "softmax_warp");
  CHECK(key(1025) == "softmax_block");
  CHECK(key(32768) == "softmax_block");
  CHECK(key(32769) == "softmax_looped");
  CHECK(key(INT32_MAX - 1024) == "softmax_looped");
}

TEST_CASE("what the in-tree kernels refuse, with each implementation's reason") {
  Selector rms("RMSNormFwdOp"), sm("SoftmaxFwdOp"), add("AddFwdOp");
  auto norm_error = [&](tr_dtype dt, int64_t row, int32_t arch) {
    tr_tensor_spec x = spec(dt, {2, row}), w = spec(dt, {row});
    const tr_tensor_spec *in[3] = {&x, &w, nullptr};
    int64_t shape[1] = {row};
    tr_named_value p[1];
    p[0].name = "normalized_shape";
    REQUIRE(tr_value_int_list(shape, 1, &p[0].value) == nullptr);
    std::string error;
    CHECK(key_for(rms, in, 3, p, 1, arch, &error).empty());
    tr_value_clear(&p[0].value);
    return error;
  };
  std::string e = norm_error(TR_FLOAT64, 4096, 90);
  CHECK(e.find("no implementation serves this call") != std::string::npos);
  CHECK(e.find("rms_norm_warp: dtype must be float16, bfloat16 or float32; got float64") != std::string::npos);
  CHECK(e.find("rms_norm_looped: dtype must be float16, bfloat16 or float32; got float64") != std::string::npos);
  CHECK(norm_error(TR_FLOAT32, (int64_t)INT32_MAX - 1023, 90)
            .find("rms_norm_looped: rows hold at most 2147482623 elements; got row 2147482624") != std::string::npos);
  CHECK(norm_error(TR_FLOAT32, 4096, 75).find("rms_norm_looped: not available on arch 75 (supports") !=
        std::string::npos);
  auto softmax_error = [&](int64_t row, int32_t arch) {
    tr_tensor_spec x = spec(TR_FLOAT32, {2, row});
    const tr_tensor_spec *in[1] = {&x};
    tr_named_value p[2] = {{"dim", tr_value_int(-1)}, {"dtype", tr_value_none()}};
    std::string error;
    CHECK(key_for(sm, in, 1, p, 2, arch, &error).empty());
    return error;
  };
  CHECK(softmax_error(4096, 75).find("softmax_block: not available on arch 75 (supports") != std::string::npos);
  tr_tensor_spec a = spec(TR_INT8, {3, 5});
  const tr_tensor_spec *in[2] = {&a, &a};
  tr_named_value p[1] = {{"alpha", tr_value_int(1)}};
  std::string error;
  CHECK(key_for(add, in, 2, p, 1, 90, &error).empty());
  CHECK(error.find("add_elementwise: adds float16, bfloat16, float32, float64, int32 and int64; got int8") !=
        std::string::npos);
}

TEST_CASE("architectures before SM80 have no in-tree kernels; add serves its six dtypes") {
  Selector s("AddFwdOp");
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32, TR_FLOAT64, TR_INT32, TR_INT64}) {
    tr_tensor_spec a = spec(dt, {3, 5});
    const tr_tensor_spec *in[2] = {&a, &a};
    tr_named_value p[1] = {{"alpha", tr_value_float(0.5)}};
    CHECK(key_for(s, in, 2, p, 1) == "add_elementwise");
    std::string error;
    CHECK(key_for(s, in, 2, p, 1, 75, &error).empty());
    CHECK(error.find("75") != std::string::npos);
  }
}

TEST_CASE("a row of no elements is compiled as a row of one (its tensor is empty: never launched)") {
  for (const char *name : {"RMSNormFwdOp", "SoftmaxFwdOp"}) {
    INFO(name);
    const tr_intree_op *op = tr_intree_find(name);
    REQUIRE(op != nullptr);
    tr_device dev = cuda0();
    tr_tensor_spec x = spec(TR_FLOAT32, {4, 0}), w = spec(TR_FLOAT32, {0});
    const tr_tensor_spec *in[3] = {&x, &w, nullptr};
    int64_t zero = 0;
    tr_named_value p[2];
    size_t n_p = 2;
    if (std::string(name) == "SoftmaxFwdOp") {
      p[0] = {"dim", tr_value_int(-1)};
      p[1] = {"dtype", tr_value_none()};
    } else {
      p[0].name = "normalized_shape";
      REQUIRE(tr_value_int_list(&zero, 1, &p[0].value) == nullptr);
      n_p = 1;
    }
    const char *iface = nullptr;
    tr_call_spec call;
    tr_test::ok(op->call_spec(in, std::string(name) == "SoftmaxFwdOp" ? 1 : 2, p, n_p, &dev, &iface, &call));
    CHECK(tr_call_spec_int(&call, "row") == 0);
    tr_intree_source src;
    tr_test::ok(tr_intree_source_for(op->types[0], &call, -1, &src));
    bool one = false, zero_row = false;
    for (size_t i = 0; i < src.n_options; i++) {
      one |= std::string(src.options[i]) == "-DTR_N=1";
      zero_row |= std::string(src.options[i]) == "-DTR_N=0";
    }
    CHECK(one);
    CHECK_FALSE(zero_row);
    tr_call_spec_clear(&call);
    if (n_p == 1) tr_value_clear(&p[0].value);
  }
}

TEST_CASE("architecture names for NVRTC") {
  char buf[16];
  tr_intree_arch_name(90, buf, sizeof(buf));
  CHECK(std::string(buf) == "sm_90a");
  tr_intree_arch_name(80, buf, sizeof(buf));
  CHECK(std::string(buf) == "sm_80");
}

TEST_CASE("the launch side refuses artifacts that are not the kernel's, before touching a device") {
  const tr_intree_op *op = tr_intree_find("RMSNormFwdOp");
  const tr_kernel_type *looped = op->types[1];
  REQUIRE(std::string(looped->key) == "rms_norm_looped");
  tr_device dev = cuda0();
  tr_named_value v[2] = {{"dtype", tr_value_dtype(TR_BFLOAT16)}, {"row", tr_value_int(4096)}};
  tr_call_spec call;
  REQUIRE(tr_call_spec_init(&call, looped->interface->request, &dev, v, 2) == nullptr);
  tr_device_facts facts = {90, nullptr, 132, 232448};
  tr_call_spec_state_facts(&call, TR_FACT_ARCH | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET, &facts);
  auto refusal = [&](const char *name, const char *arch, size_t n) {
    tr_artifact arts[2] = {};
    for (auto &a : arts) {
      snprintf(a.name, sizeof(a.name), "%s", name);
      snprintf(a.entry, sizeof(a.entry), "tr_norm");
      snprintf(a.arch, sizeof(a.arch), "%s", arch);
    }
    tr_kernel k{};
    tr_status *s = tr_intree_kernel(looped, &call, arts, n, &k);
    std::string msg = s ? tr_status_message(s) : "";
    tr_status_destroy(&s);
    return msg;
  };
  CHECK(refusal("rms_norm_warp", "sm_90a", 2) ==
        "kernel 'rms_norm_looped' for sm_90a was given an artifact of 'rms_norm_warp' (entry tr_norm) for sm_90a");
  CHECK(refusal("rms_norm_looped", "sm_80", 2) ==
        "kernel 'rms_norm_looped' for sm_90a was given an artifact of 'rms_norm_looped' (entry tr_norm) for sm_80");
  CHECK(refusal("rms_norm_looped", "sm_90a", 1) == "kernel 'rms_norm_looped' needs 2 artifacts, was given 1");
  tr_call_spec_clear(&call);
}

namespace {

// A GemmFwdOp call's inputs and params: a [m, k] ([k, m] with trans_a), b [k, n] ([n, k] with trans_b).
struct GemmIn {
  tr_tensor_spec a, b;
  const tr_tensor_spec *in[2];
  tr_named_value p[2];
  GemmIn(tr_dtype dt, int64_t m, int64_t n, int64_t k, bool ta, bool tb)
      : a(ta ? spec(dt, {k, m}) : spec(dt, {m, k})), b(tb ? spec(dt, {n, k}) : spec(dt, {k, n})),
        in{&a, &b}, p{{"trans_a", tr_value_bool(ta)}, {"trans_b", tr_value_bool(tb)}} {}
};

// GemmFwdOp's key for that call.
std::string gemm_key(Selector &s, tr_dtype dt, int64_t m, int64_t n, int64_t k, bool ta, bool tb, int32_t arch = 90,
                     std::string *error = nullptr) {
  GemmIn g(dt, m, n, k, ta, tb);
  return key_for(s, g.in, 2, g.p, 2, arch, error);
}

// The reason `key` gives for refusing the call (empty: it serves it).
std::string gemm_refusal(Selector &s, const char *key, tr_dtype dt, int64_t m, int64_t n, int64_t k, bool ta,
                         bool tb) {
  GemmIn g(dt, m, n, k, ta, tb);
  tr_device dev = cuda0();
  const char *iface = nullptr;
  tr_call_spec call;
  REQUIRE(s.op->call_spec(g.in, 2, g.p, 2, &dev, &iface, &call) == nullptr);
  const tr_kernel_type *type = nullptr;
  for (size_t i = 0; i < s.op->n_types; i++) {
    if (std::string(s.op->types[i]->key) == key) type = s.op->types[i];
  }
  REQUIRE(type != nullptr);
  char buf[512];
  const char *reason = type->refusal(type, &call, buf, sizeof(buf));
  tr_call_spec_clear(&call);
  return reason ? reason : "";
}

}  // namespace

TEST_CASE("GEMM: m or n up to 64 goes to the skinny kernel, beyond to cuBLASLt, at both boundaries") {
  Selector s("GemmFwdOp");
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16}) {
    // m small, the weight b [n, k] (the decode projections: batch 1, 16, 64)
    for (int64_t m : {1, 16, 64}) CHECK(gemm_key(s, dt, m, 4096, 4096, false, true) == "gemm_skinny");
    CHECK(gemm_key(s, dt, 65, 4096, 4096, false, true) == "gemm_cublaslt");
    CHECK(gemm_key(s, dt, 64, 14336, 4096, true, true) == "gemm_skinny");  // a [k, m]: x read strided
    // n small, the weight a [m, k]
    CHECK(gemm_key(s, dt, 4096, 64, 4096, false, false) == "gemm_skinny");
    CHECK(gemm_key(s, dt, 4096, 64, 4096, false, true) == "gemm_skinny");
    CHECK(gemm_key(s, dt, 4096, 65, 4096, false, false) == "gemm_cublaslt");
    // both large: prefill and square shapes
    CHECK(gemm_key(s, dt, 2048, 4096, 4096, false, true) == "gemm_cublaslt");
    CHECK(gemm_key(s, dt, 8192, 8192, 8192, false, false) == "gemm_cublaslt");
  }
  // m small but the weight b [k, n] is not k-contiguous, and a [k, m] rules out the other way
  CHECK(gemm_key(s, TR_BFLOAT16, 16, 4096, 4096, true, false) == "gemm_cublaslt");
  CHECK(gemm_refusal(s, "gemm_skinny", TR_BFLOAT16, 16, 4096, 4096, true, false)
            .find("streams a k-contiguous weight: m <= 64 needs trans_b (b [n, k])") != std::string::npos);
  // float32 is cuBLASLt's alone (the skinny kernel multiplies on the tensor cores)
  CHECK(gemm_key(s, TR_FLOAT32, 1, 4096, 4096, false, true) == "gemm_cublaslt");
  CHECK(gemm_refusal(s, "gemm_skinny", TR_FLOAT32, 1, 4096, 4096, false, true) ==
        "multiplies float16 and bfloat16 on the tensor cores; got float32");
  CHECK(gemm_refusal(s, "gemm_skinny", TR_BFLOAT16, 65, 4096, 4096, false, true) ==
        "serves m or n of at most 64 (decode), got m=65, n=4096");
  CHECK(gemm_refusal(s, "gemm_cublaslt", TR_FLOAT32, 65, 4096, 4096, false, true).empty());
}

TEST_CASE("GEMM: k too narrow for a 16-byte vector is refused by the vectorised kernel (the spec's case)") {
  Selector s("GemmFwdOp");
  // the spec's call: SM90, 132 SMs, m = n = 64, k = 1, float16, trans_b
  CHECK(gemm_refusal(s, "gemm_skinny", TR_FLOAT16, 64, 64, 1, false, true) ==
        "k must span at least one 16-byte vector (8 elements of 2 bytes), got k=1");
  // cuBLASLt, the general implementation, serves it: key_for names it
  CHECK(gemm_key(s, TR_FLOAT16, 64, 64, 1, false, true) == "gemm_cublaslt");
  // the boundary: 8 elements span one vector; 127 is not a whole number of vectors
  CHECK(gemm_key(s, TR_FLOAT16, 64, 64, 8, false, true) == "gemm_skinny");
  CHECK(gemm_key(s, TR_FLOAT16, 64, 64, 7, false, true) == "gemm_cublaslt");
  CHECK(gemm_refusal(s, "gemm_skinny", TR_BFLOAT16, 1, 4096, 127, false, true) ==
        "k must be a whole number of 16-byte vectors (a multiple of 8), got k=127");
  CHECK(gemm_key(s, TR_BFLOAT16, 1, 4096, 127, false, true) == "gemm_cublaslt");
}

TEST_CASE("GEMM: architectures before SM80 have no implementation; the reasons name both") {
  Selector s("GemmFwdOp");
  std::string error;
  CHECK(gemm_key(s, TR_BFLOAT16, 1, 4096, 4096, false, true, 75, &error).empty());
  CHECK(error.find("no implementation serves this call") != std::string::npos);
  CHECK(error.find("gemm_skinny") != std::string::npos);
  CHECK(error.find("gemm_cublaslt") != std::string::npos);
  CHECK(gemm_key(s, TR_BFLOAT16, 1, 4096, 4096, false, true, 80) == "gemm_skinny");
}

TEST_CASE("GEMM: cuBLASLt compiles nothing; the skinny kernel has a source; the call spec reads the transposes") {
  Selector s("GemmFwdOp");
  const tr_kernel_type *lt = s.op->types[0], *skinny = s.op->types[1];
  REQUIRE(std::string(lt->key) == "gemm_cublaslt");
  REQUIRE(std::string(skinny->key) == "gemm_skinny");
  CHECK(tr_intree_has_source(lt) == 0);
  CHECK(tr_intree_has_source(skinny) == 1);
  GemmIn g(TR_BFLOAT16, 3, 5, 4096, true, true);  // a [4096, 3], b [5, 4096]
  tr_device dev = cuda0();
  const char *iface = nullptr;
  tr_call_spec call;
  REQUIRE(s.op->call_spec(g.in, 2, g.p, 2, &dev, &iface, &call) == nullptr);
  CHECK(tr_call_spec_int(&call, "m") == 3);
  CHECK(tr_call_spec_int(&call, "n") == 5);
  CHECK(tr_call_spec_int(&call, "k") == 4096);
  tr_artifact arts[2];
  size_t n = 9;
  REQUIRE(tr_intree_build(lt, &call, "sm_90a", arts, &n) == nullptr);
  CHECK(n == 0);
  tr_call_spec_clear(&call);
}

namespace {

std::string rope_key(Selector &s, tr_dtype dt, tr_dtype pos, int64_t dim, bool neox, int32_t arch = 90,
                     std::string *error = nullptr) {
  tr_tensor_spec p = spec(pos, {7}), x = spec(dt, {7, 4, dim}), cache = spec(dt, {100, dim});
  const tr_tensor_spec *in[3] = {&p, &x, &cache};
  tr_named_value params[1] = {{"is_neox", tr_value_bool(neox)}};
  return key_for(s, in, 3, params, 1, arch, error);
}

}  // namespace

TEST_CASE("RoPE: the rotation picks the implementation; dtypes, odd head dims and old archs are refused") {
  Selector s("RoPEFwdOp");
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32}) {
    for (tr_dtype pos : {TR_INT32, TR_INT64}) {
      CHECK(rope_key(s, dt, pos, 128, true) == "rope_neox");
      CHECK(rope_key(s, dt, pos, 128, false) == "rope_interleaved");
      CHECK(rope_key(s, dt, pos, 2, false, 80) == "rope_interleaved");
    }
  }
  std::string error;
  CHECK(rope_key(s, TR_FLOAT64, TR_INT64, 128, true, 90, &error).empty());
  CHECK(error.find("rope_neox: rotates float16, bfloat16 and float32; got float64") != std::string::npos);
  CHECK(error.find("rope_interleaved: rotates float16, bfloat16 and float32; got float64") != std::string::npos);
  CHECK(rope_key(s, TR_BFLOAT16, TR_INT16, 128, true, 90, &error).empty());
  CHECK(error.find("positions must be int32 or int64; got int16") != std::string::npos);
  CHECK(rope_key(s, TR_BFLOAT16, TR_INT64, 2048, true, 90, &error).empty());
  CHECK(error.find("the head dim must be even, in 2..1024; got 2048") != std::string::npos);
  CHECK(rope_key(s, TR_BFLOAT16, TR_INT64, 128, true, 75, &error).empty());
  CHECK(error.find("75") != std::string::npos);
  // each implementation says why it does not serve the other rotation
  CHECK(rope_key(s, TR_FLOAT32, TR_INT64, 64, true) == "rope_neox");
  tr_tensor_spec p = spec(TR_INT64, {7}), x = spec(TR_FLOAT32, {7, 4, 64}), cache = spec(TR_FLOAT32, {100, 64});
  const tr_tensor_spec *in[3] = {&p, &x, &cache};
  tr_device dev = cuda0();
  const char *iface = nullptr;
  tr_call_spec call;
  tr_named_value params[1] = {{"is_neox", tr_value_bool(false)}};
  REQUIRE(s.op->call_spec(in, 3, params, 1, &dev, &iface, &call) == nullptr);
  char buf[256];
  const tr_kernel_type *neox = s.op->types[0];
  REQUIRE(std::string(neox->key) == "rope_neox");
  const char *why = neox->refusal(neox, &call, buf, sizeof(buf));
  REQUIRE(why != nullptr);
  CHECK(std::string(why) == "rotates halves (NeoX); the call asks is_neox=false");
  tr_call_spec_clear(&call);
}

namespace {

std::string gqa_key(Selector &s, tr_dtype dt, int64_t B, int64_t S, int64_t heads, int64_t kv, int64_t dim,
                    int32_t arch = 90, std::string *error = nullptr) {
  tr_tensor_spec q = spec(dt, {B, heads, dim}), k = spec(dt, {B, S, kv, dim}), len = spec(TR_INT32, {B});
  const tr_tensor_spec *in[4] = {&q, &k, &k, &len};
  tr_named_value p[4] = {{"heads", tr_value_int(heads)}, {"heads_kv", tr_value_int(kv)}, {"dim", tr_value_int(dim)},
                         {"softcap", tr_value_float(0.0)}};
  return key_for(s, in, 4, p, 4, arch, error);
}

}  // namespace

TEST_CASE("GQA decode: the general implementation serves both dtypes and head dims, any batch and length") {
  Selector s("GQADecodeFwdOp");
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16}) {
    for (int64_t dim : {64, 128}) {
      CHECK(gqa_key(s, dt, 1, 4096, 32, 8, dim, 80) == "gqa_dense_decode");
      CHECK(gqa_key(s, dt, 2, 4096, 32, 8, dim) == "gqa_dense_decode");
      CHECK(gqa_key(s, dt, 64, 131072, 64, 8, dim, 80) == "gqa_dense_decode");
      CHECK(gqa_key(s, dt, 64, 131072, 64, 8, dim, 90) == "gqa_dense_decode");
      CHECK(gqa_key(s, dt, 3, 1, 8, 8, dim, 89) == "gqa_dense_decode");
      // batch 1 on sm_90: the bulk-copy implementation, outside the long-context range
      CHECK(gqa_key(s, dt, 1, 4096, 32, 8, dim) == "gqa_dense_decode_bs1");
      CHECK(gqa_key(s, dt, 1, 1, 8, 1, dim) == "gqa_dense_decode_bs1");
    }
  }
  std::string error;
  CHECK(gqa_key(s, TR_FLOAT32, 1, 4096, 32, 8, 128, 90, &error).empty());
  CHECK(error.find("gqa_dense_decode: attends in float16 and bfloat16; got float32") != std::string::npos);
  CHECK(gqa_key(s, TR_BFLOAT16, 1, 4096, 32, 8, 96, 90, &error).empty());
  CHECK(error.find("serves head dims 64 and 128; got dim=96") != std::string::npos);
  CHECK(gqa_key(s, TR_BFLOAT16, 1, 4096, 32, 8, 128, 75, &error).empty());
  CHECK(error.find("gqa_dense_decode: not available on arch 75") != std::string::npos);
  // the call spec carries the spec's AttentionCall fields
  tr_tensor_spec q = spec(TR_BFLOAT16, {2, 32, 128}), k = spec(TR_BFLOAT16, {2, 777, 8, 128}),
                 len = spec(TR_INT32, {2});
  const tr_tensor_spec *in[4] = {&q, &k, &k, &len};
  tr_named_value p[3] = {{"heads", tr_value_int(32)}, {"heads_kv", tr_value_int(8)}, {"dim", tr_value_int(128)}};
  tr_device dev = cuda0();
  const char *iface = nullptr;
  tr_call_spec call;
  REQUIRE(s.op->call_spec(in, 4, p, 3, &dev, &iface, &call) == nullptr);
  CHECK(std::string(iface) == "GQADecodeDenseFwdInterface");
  CHECK(std::string(call.type->name) == "AttentionCall");
  CHECK(tr_call_spec_int(&call, "batch") == 2);
  CHECK(tr_call_spec_int(&call, "seqlen_kv") == 777);
  CHECK(tr_call_spec_float(&call, "scale") == Approx(1.0 / std::sqrt(128.0)));
  tr_call_spec_clear(&call);
}

TEST_CASE("GQA decode: the kernel-selection spec's table 2, in either order of the implementations") {
  // batch 1, heads 32/4, dim 128, float16 (the long-context implementation's range when KV >= 1024)
  for (bool reversed : {false, true}) {
    Selector s("GQADecodeFwdOp", reversed);
    INFO("implementations reversed: " << reversed);
    CHECK(gqa_key(s, TR_FLOAT16, 1, 4096, 32, 4, 128, 90) == "gqa_dense_decode_long_context");  // row 1
    CHECK(gqa_key(s, TR_FLOAT16, 1, 512, 32, 4, 128, 90) == "gqa_dense_decode_bs1");            // row 2
    CHECK(gqa_key(s, TR_FLOAT16, 1, 4096, 32, 4, 128, 80) == "gqa_dense_decode_long_context");  // row 3
    CHECK(gqa_key(s, TR_FLOAT16, 1, 512, 32, 4, 128, 80) == "gqa_dense_decode");                // row 4
    // the range's edges: KV 1024 is long, 1023 is not; bfloat16, other heads or batch 2 are not
    CHECK(gqa_key(s, TR_FLOAT16, 1, 1024, 32, 4, 128, 90) == "gqa_dense_decode_long_context");
    CHECK(gqa_key(s, TR_FLOAT16, 1, 1023, 32, 4, 128, 90) == "gqa_dense_decode_bs1");
    CHECK(gqa_key(s, TR_BFLOAT16, 1, 4096, 32, 4, 128, 90) == "gqa_dense_decode_bs1");
    CHECK(gqa_key(s, TR_FLOAT16, 1, 4096, 32, 8, 128, 90) == "gqa_dense_decode_bs1");
    CHECK(gqa_key(s, TR_FLOAT16, 2, 4096, 32, 4, 128, 90) == "gqa_dense_decode");
    CHECK(gqa_key(s, TR_FLOAT16, 1, 4096, 32, 4, 64, 80) == "gqa_dense_decode");
  }
}

TEST_CASE("GQA decode: the batch-1 and long-context implementations' refusals") {
  const tr_intree_op *op = tr_intree_find("GQADecodeFwdOp");
  REQUIRE(op != nullptr);
  const tr_kernel_type *bs1 = nullptr, *lc = nullptr;
  for (size_t i = 0; i < op->n_types; i++) {
    if (std::string(op->types[i]->key) == "gqa_dense_decode_bs1") bs1 = op->types[i];
    if (std::string(op->types[i]->key) == "gqa_dense_decode_long_context") lc = op->types[i];
  }
  REQUIRE(bs1 != nullptr);
  REQUIRE(lc != nullptr);
  CHECK(bs1->n_archs == 1);
  CHECK(bs1->supported_archs[0] == 90);
  REQUIRE(lc->preferred_over != nullptr);
  CHECK(std::string(lc->preferred_over[0]) == "gqa_dense_decode_bs1");
  CHECK(lc->preferred_over[1] == nullptr);
  auto why = [](const tr_kernel_type *t, tr_dtype dt, int64_t B, int64_t S, int64_t heads, int64_t kv, int64_t dim,
                double softcap) -> std::string {
    tr_named_value v[8] = {{"dtype", tr_value_dtype(dt)},       {"batch", tr_value_int(B)},
                           {"seqlen_kv", tr_value_int(S)},      {"heads", tr_value_int(heads)},
                           {"heads_kv", tr_value_int(kv)},      {"dim", tr_value_int(dim)},
                           {"softcap", tr_value_float(softcap)}, {"scale", tr_value_float(0.125)}};
    tr_device dev = cuda0();
    tr_call_spec call;
    REQUIRE(tr_call_spec_init(&call, t->interface->request, &dev, v, 8) == nullptr);
    char buf[256];
    const char *r = t->refusal(t, &call, buf, sizeof(buf));
    std::string out = r == nullptr ? "" : r;
    tr_call_spec_clear(&call);
    return out;
  };
  CHECK(why(bs1, TR_BFLOAT16, 1, 4096, 32, 8, 128, 0.0) == "");
  CHECK(why(bs1, TR_BFLOAT16, 2, 4096, 32, 8, 128, 0.0) == "serves batch 1; got batch=2");
  CHECK(why(bs1, TR_FLOAT32, 1, 4096, 32, 8, 128, 0.0) == "attends in float16 and bfloat16; got float32");
  CHECK(why(lc, TR_FLOAT16, 1, 4096, 32, 4, 128, 0.0) == "");
  CHECK(why(lc, TR_FLOAT16, 1, 4096, 32, 4, 128, 30.0) == "does not serve this call");
  CHECK(why(lc, TR_FLOAT16, 1, 512, 32, 4, 128, 0.0) == "does not serve this call");
  CHECK(why(lc, TR_BFLOAT16, 1, 4096, 32, 4, 128, 0.0) == "does not serve this call");
}

namespace {

std::string prefill_key(Selector &s, tr_dtype dt, int64_t B, int64_t L, int64_t heads, int64_t kv, int64_t dim,
                        int32_t arch = 90, std::string *error = nullptr) {
  tr_tensor_spec q = spec(dt, {B, L, heads, dim}), k = spec(dt, {B, L, kv, dim});
  const tr_tensor_spec *in[3] = {&q, &k, &k};
  tr_named_value p[3] = {{"heads", tr_value_int(heads)}, {"heads_kv", tr_value_int(kv)}, {"dim", tr_value_int(dim)}};
  return key_for(s, in, 3, p, 3, arch, error);
}

}  // namespace

TEST_CASE("GQA prefill: wgmma on SM90, flash elsewhere, both dtypes and head dims, any batch, length and group") {
  Selector s("GQAPrefillFwdOp");
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16}) {
    for (int64_t dim : {64, 128}) {
      CHECK(prefill_key(s, dt, 1, 2048, 32, 8, dim) == "gqa_prefill_wgmma");  // preferred over flash
      CHECK(prefill_key(s, dt, 3, 1, 8, 8, dim) == "gqa_prefill_wgmma");
      CHECK(prefill_key(s, dt, 1, 2048, 32, 8, dim, 100) == "gqa_prefill_flash");  // sm_90a's instructions only
      CHECK(prefill_key(s, dt, 4, 2048, 64, 8, dim, 80) == "gqa_prefill_flash");
      CHECK(prefill_key(s, dt, 3, 1, 8, 8, dim, 89) == "gqa_prefill_flash");
      CHECK(prefill_key(s, dt, 2, 1000, 7, 1, dim, 120) == "gqa_prefill_flash");
    }
  }
  std::string error;
  CHECK(prefill_key(s, TR_FLOAT32, 1, 2048, 32, 8, 128, 90, &error).empty());
  CHECK(error.find("gqa_prefill_flash: attends in float16 and bfloat16; got float32") != std::string::npos);
  CHECK(prefill_key(s, TR_BFLOAT16, 1, 2048, 32, 8, 96, 90, &error).empty());
  CHECK(error.find("gqa_prefill_flash: serves head dims 64 and 128; got dim=96") != std::string::npos);
  CHECK(prefill_key(s, TR_BFLOAT16, 1, 2048, 32, 5, 128, 90, &error).empty());
  CHECK(error.find("gqa_prefill_flash: needs heads a positive multiple of heads_kv; got heads=32, heads_kv=5") !=
        std::string::npos);
  CHECK(prefill_key(s, TR_BFLOAT16, 1, 2048, 32, 0, 128, 90, &error).empty());
  CHECK(error.find("got heads=32, heads_kv=0") != std::string::npos);
  CHECK(error.find("gqa_prefill_wgmma: needs heads a positive multiple of heads_kv") != std::string::npos);
  CHECK(prefill_key(s, TR_BFLOAT16, 1, 2048, 32, 8, 128, 75, &error).empty());
  CHECK(error.find("gqa_prefill_flash: not available on arch 75") != std::string::npos);
  CHECK(error.find("gqa_prefill_wgmma: not available on arch 75") != std::string::npos);
  // the call spec: the default scale is 1 / sqrt(dim), a given one is kept
  tr_tensor_spec q = spec(TR_BFLOAT16, {2, 777, 32, 64}), k = spec(TR_BFLOAT16, {2, 777, 8, 64});
  const tr_tensor_spec *in[3] = {&q, &k, &k};
  tr_device dev = cuda0();
  const char *iface = nullptr;
  tr_call_spec call;
  tr_named_value p[4] = {{"heads", tr_value_int(32)}, {"heads_kv", tr_value_int(8)}, {"dim", tr_value_int(64)},
                         {"scale", tr_value_none()}};
  REQUIRE(s.op->call_spec(in, 3, p, 4, &dev, &iface, &call) == nullptr);
  CHECK(std::string(iface) == "GQAPrefillFwdInterface");
  CHECK(std::string(call.type->name) == "AttentionPrefillCall");
  CHECK(tr_call_spec_int(&call, "heads") == 32);
  CHECK(tr_call_spec_int(&call, "heads_kv") == 8);
  CHECK(tr_call_spec_float(&call, "scale") == Approx(0.125));
  tr_call_spec_clear(&call);
  p[3].value = tr_value_float(0.3);
  REQUIRE(s.op->call_spec(in, 3, p, 4, &dev, &iface, &call) == nullptr);
  CHECK(tr_call_spec_float(&call, "scale") == Approx(0.3));
  tr_call_spec_clear(&call);
  // a call the in-tree kernels cannot express: q of rank 3
  tr_tensor_spec q3 = spec(TR_BFLOAT16, {2, 32, 64});
  const tr_tensor_spec *in3[3] = {&q3, &k, &k};
  tr_status *status = s.op->call_spec(in3, 3, p, 4, &dev, &iface, &call);
  REQUIRE(status != nullptr);
  CHECK(std::string(tr_status_message(status)).find("GQAPrefillFwdOp: the in-tree kernels need q [B, L, heads, dim]") !=
        std::string::npos);
  tr_status_destroy(&status);
}
