// example_test.cc: the example backend's tests, in the spec's five groups: takeover, discovery,
// errors, memoisation, tuning. Everything runs with no GPU: "acme" tensors live in host memory.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>

#include "platform/test_support.h"
#include "runtime/runtime_testing.h"

using tr_test::HostTensor;
using tr_test::Outputs;

static const DLDevice kAcme0 = {kDLExtDev, 0}, kAcme1 = {kDLExtDev, 1};

// A runtime whose backend directory holds the example's descriptor and library.
struct Installed {
  tr_test::TempDir dir;
  tr_test::Warnings warnings;
  tr_runtime *rt = nullptr;
  explicit Installed(bool install = true) {
    if (install) {
      std::string lib = std::filesystem::absolute("backends/example/libexample_backend.so").string();
      dir.write("example.yaml", "name: example\nlibrary: " + lib + "\n");
    }
    rt = tr_test::runtime_with_dirs({dir.path}, &warnings);
  }
  ~Installed() { tr_runtime_destroy(&rt); }
  tr_op *op(const char *name, std::vector<tr_named_value> params = {}, const char *target = nullptr) {
    tr_op *made = nullptr;
    tr_test::ok(tr_op_new(rt, name, params.data(), params.size(), target, &made));
    return made;
  }
};

static std::vector<tr_named_value> rms_params(int64_t n) {
  tr_value shape;
  tr_test::ok(tr_value_int_list(&n, 1, &shape));
  return {{"normalized_shape", shape}};
}

static void free_params(std::vector<tr_named_value> &p) {
  for (auto &nv : p) tr_value_clear(&nv.value);
}

static double rms_ref(const HostTensor &x, const HostTensor &w, int64_t row, int64_t i, int64_t n) {
  double sum = 0;
  for (int64_t k = 0; k < n; k++) sum += (double)x.data[row * n + k] * x.data[row * n + k];
  return x.data[row * n + i] / std::sqrt(sum / n + 1.1920928955078125e-07) * w.data[i];
}

// ---- takeover ----

TEST_CASE("takeover: RMSNorm on acme runs the example's kernel and matches a float64 reference") {
  Installed env;
  auto params = rms_params(8);
  tr_op *op = env.op("RMSNormFwdOp", params);
  HostTensor x({3, 8}, kAcme0), w({8}, kAcme0, 1.0f);
  const DLTensor *in[] = {&x.t, &w.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  CHECK(std::string(tr_op_target(op)) == "example");
  const DLTensor &y = out.items[0]->dl_tensor;
  CHECK(y.device.device_type == kDLExtDev);
  CHECK(y.ndim == 2);
  for (int64_t r = 0; r < 3; r++) {
    for (int64_t i = 0; i < 8; i++) CHECK(out.f(0)[r * 8 + i] == Approx(rms_ref(x, w, r, i, 8)).epsilon(1e-5));
  }
  tr_op_destroy(&op);
  free_params(params);
}

TEST_CASE("takeover: a strided input arrives contiguous, with the same result") {
  Installed env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4, 3}, kAcme0), b({3, 4}, kAcme0, 2.0f);
  b.view({4, 3}, {1, 4});  // b transposed: not contiguous
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  for (int64_t i = 0; i < 4; i++) {
    for (int64_t j = 0; j < 3; j++) {
      CHECK(out.f(0)[i * 3 + j] == Approx(a.data[i * 3 + j] + b.data[j * 4 + i]));
    }
  }
  tr_op_destroy(&op);
}

TEST_CASE("takeover: validation runs first; a rejected call never reaches the builder") {
  Installed env;
  auto params = rms_params(8);
  tr_op *op = env.op("RMSNormFwdOp", params);
  HostTensor x({3, 8}, kAcme0), w({7}, kAcme0);
  const DLTensor *in[] = {&x.t, &w.t};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, in, 2, out.items, 1)) ==
        "SignatureError(shape): RMSNormFwdOp: input 'weight' shape (7,) does not match "
        "[*normalized_shape] = (8,): axis 0 is 7, expected normalized_shape[0] = 8");
  CHECK(tr_op_memo_count(op) == 0);
  CHECK(tr_op_target(op) == nullptr);
  tr_op_destroy(&op);
  free_params(params);
}

// ---- discovery ----

TEST_CASE("discovery: the descriptor installs the backend, found when the first op is made") {
  Installed env;
  const char *names[8];
  CHECK(tr_registered_targets(env.rt, nullptr, names, 8) == 1);
  CHECK(std::string(names[0]) == "example");
  CHECK(tr_registered_targets(env.rt, "AddFwdOp", names, 8) == 1);
  CHECK(tr_registered_targets(env.rt, "SoftmaxFwdOp", names, 8) == 0);
  CHECK(tr_load_failure_count(env.rt) == 0);
  CHECK(env.warnings.lines.empty());
}

TEST_CASE("discovery: without the descriptor, acme calls have no target") {
  Installed env(false);
  const char *names[8];
  CHECK(tr_registered_targets(env.rt, nullptr, names, 8) == 0);
  auto params = rms_params(8);
  tr_op *op = env.op("RMSNormFwdOp", params);
  HostTensor x({3, 8}, kAcme0);
  const DLTensor *in[] = {&x.t};
  Outputs out;
  // without the backend, acme's DLPack device type is plain ext_dev, and nobody claims it
  CHECK(tr_test::error_of(tr_op_call(op, in, 1, out.items, 1)) ==
        "OpNotAvailableError: RMSNormFwdOp's in-tree kernels do not run on ext_dev; known "
        "targets for this op: []");
  tr_op_destroy(&op);
  free_params(params);
}

// ---- errors ----

TEST_CASE("errors: an op the target does not implement raises; there is no fall back") {
  Installed env;
  tr_op *op = env.op("SoftmaxFwdOp");
  HostTensor x({2, 5}, kAcme0);
  const DLTensor *in[] = {&x.t};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, in, 1, out.items, 1)) ==
        "OpNotAvailableError: target 'example' registers no kernel builder for SoftmaxFwdOp; "
        "targets that do: []. There is no fall back to the in-tree implementation: those kernels "
        "do not run on this target's devices.");
  tr_op_destroy(&op);
}

TEST_CASE("errors: an unknown target is refused, listing the known ones") {
  Installed env;
  tr_op *op = nullptr;
  CHECK(tr_test::error_of(tr_op_new(env.rt, "AddFwdOp", nullptr, 0, "nope", &op)) ==
        "UnknownTargetError: no backend registered target 'nope'; known targets: ['example']");
  CHECK(op == nullptr);
}

TEST_CASE("errors: BUILTIN forces the in-tree kernels, which do not run on acme") {
  Installed env;
  tr_op *op = env.op("AddFwdOp", {}, TR_BUILTIN);
  HostTensor a({4}, kAcme0), b({4}, kAcme0);
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, in, 2, out.items, 1)) ==
        "OpNotAvailableError: AddFwdOp's in-tree kernels do not run on acme; known targets for "
        "this op: ['example']");
  tr_op_destroy(&op);
}

TEST_CASE("errors: a failed call binds the op to no target and drops its memo") {
  Installed env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4}, kAcme0), b({4}, kAcme0);
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  CHECK(std::string(tr_op_target(op)) == "example");
  CHECK(tr_op_memo_count(op) == 1);
  HostTensor c({4}, kAcme0), d({5}, kAcme0);
  const DLTensor *bad[] = {&c.t, &d.t};
  Outputs out2;
  CHECK(tr_test::error_of(tr_op_call(op, bad, 2, out2.items, 1)).find("SignatureError(shape)") == 0);
  CHECK(tr_op_target(op) == nullptr);
  CHECK(tr_op_memo_count(op) == 0);
  tr_op_destroy(&op);
}

TEST_CASE("errors: the builder's own refusal names the item and the value") {
  Installed env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4}, kAcme0), b({4}, kAcme0);
  a.t.dtype = b.t.dtype = TR_FLOAT64;  // legal for AddFwdOp, not served by the example
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, in, 2, out.items, 1)) ==
        "ValueError: example AddFwdOp needs dtype float32, got float64");
  tr_op_destroy(&op);
}

// ---- memoisation ----

TEST_CASE("memoisation: one build per device and input signature; not per stride") {
  Installed env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4, 3}, kAcme0), b({4, 3}, kAcme0);
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  out.reset();
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  out.reset();
  CHECK(tr_op_memo_count(op) == 1);
  HostTensor bt({3, 4}, kAcme0);
  bt.view({4, 3}, {1, 4});  // same shape, other strides: no new build
  const DLTensor *strided[] = {&a.t, &bt.t};
  tr_test::ok(tr_op_call(op, strided, 2, out.items, 1));
  out.reset();
  CHECK(tr_op_memo_count(op) == 1);
  HostTensor a2({5, 3}, kAcme0), b2({5, 3}, kAcme0);  // a new shape builds again
  const DLTensor *other[] = {&a2.t, &b2.t};
  tr_test::ok(tr_op_call(op, other, 2, out.items, 1));
  out.reset();
  CHECK(tr_op_memo_count(op) == 2);
  HostTensor a3({4, 3}, kAcme1), b3({4, 3}, kAcme1);  // a second card builds again
  const DLTensor *card1[] = {&a3.t, &b3.t};
  tr_test::ok(tr_op_call(op, card1, 2, out.items, 1));
  CHECK(tr_op_memo_count(op) == 3);
  CHECK(out.items[0]->dl_tensor.device.device_id == 1);
  tr_op_destroy(&op);
}

// ---- tuning ----

// The "tunes" the op's kernel reports: how many times request_tune reached it.
static int64_t tunes_reported(tr_op *op) {
  const tr_named_value *config = nullptr;
  size_t n = tr_op_kernel_config(op, &config);
  for (size_t i = 0; i < n; i++) {
    if (std::string(config[i].name) == "tunes") return config[i].value.as.i;
  }
  return -1;
}

TEST_CASE("tuning: a request reaches kernels built before and after it; config is reported") {
  Installed env;
  tr_op *op = env.op("AddFwdOp");
  const tr_named_value *config = nullptr;
  CHECK(tr_op_kernel_config(op, &config) == 0);  // nothing built yet
  HostTensor a({4}, kAcme0), b({4}, kAcme0);
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  out.reset();
  CHECK(tunes_reported(op) == 0);  // not tuned before a request
  tr_test::ok(tr_op_request_tune(op));
  CHECK(tunes_reported(op) == 1);  // reached the kernel built before it
  tr_test::ok(tr_op_request_tune(op));  // idempotent: tunes again, never fails
  CHECK(tunes_reported(op) == 2);
  HostTensor c({6}, kAcme0), d({6}, kAcme0);
  const DLTensor *later[] = {&c.t, &d.t};
  tr_test::ok(tr_op_call(op, later, 2, out.items, 1));
  REQUIRE(tr_op_kernel_config(op, &config) == 2);
  CHECK(std::string(config[0].name) == "tile");
  CHECK(config[0].value.as.i == 128);
  CHECK(tr_op_memo_count(op) == 2);
  CHECK(env.warnings.lines.empty());  // every example kernel can be tuned
  HostTensor e({7}, kAcme0), f({8}, kAcme0);
  const DLTensor *bad[] = {&e.t, &f.t};
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(op, bad, 2, out.items, 1)).find("SignatureError(shape)") == 0);  // the kernels go
  CHECK(std::string(config[0].name) == "tile");  // the op's copy outlives the released kernels
  CHECK(config[0].value.as.i == 128);
  // The op stays in tuned mode: a kernel built after the requests (here the only one, as the
  // failed call dropped the others) is tuned once before its first call, and not on a memo hit.
  tr_test::ok(tr_op_call(op, later, 2, out.items, 1));
  out.reset();
  CHECK(tr_op_memo_count(op) == 1);
  CHECK(tunes_reported(op) == 1);
  tr_test::ok(tr_op_call(op, later, 2, out.items, 1));
  CHECK(tunes_reported(op) == 1);
  tr_op_destroy(&op);
}
