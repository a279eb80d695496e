// messages_test.cc: the spec's messages (spec/backend-protocol.txt, "Error messages and what to
// do") byte for byte, with a backend that failed to load beside them: no count is appended to
// them (the warning channel says, once, that a failed backend may be why); tilerun's own
// messages still count failed backends, naming a function that exists. docs/messages.md lists
// which messages are which.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/runtime_testing.h"

using tr_test::HostTensor;
using tr_test::Outputs;

static tr_status *noop_call(void *, DLTensor *const *, size_t, DLTensor *const *, size_t) { return nullptr; }

static tr_status *build_noop(void *, const tr_build_request *, tr_kernel *out) {
  out->call = noop_call;
  return nullptr;
}

static tr_status *claim_cpu(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "cpu";
  return nullptr;
}

// The spec's example backend: target 'torch_cpu' claims cpu and serves RMSNormFwdOp only.
static tr_status *init_torch_cpu(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "torch_cpu", claim_cpu, nullptr));
  TR_RETURN_IF_ERROR(api->register_device_type(api->host, "acme", kDLExtDev));
  return api->register_kernel_builder(api->host, "RMSNormFwdOp", "torch_cpu", build_noop, nullptr);
}

static tr_status *init_broken(const tr_backend_api *) { return TR_STATUS(TR_VALUE, "no license"); }

struct Spec {
  tr_test::Warnings warnings;
  tr_runtime *rt = nullptr;
  explicit Spec(bool with_backend = true) {
    static const char *names[] = {"broken", "torch_cpu"};
    static const tr_backend_init_fn inits[] = {init_broken, init_torch_cpu};
    const char *none[] = {"/nonexistent"};
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    o.backend_dirs = none;
    o.n_backend_dirs = 1;
    o.builtin_names = names;
    o.builtin_inits = inits;
    o.n_builtins = with_backend ? 2 : 1;
    o.warn = tr_test::Warnings::sink;
    o.warn_ctx = &warnings;
    tr_test::ok(tr_runtime_new(&o, &rt));
    REQUIRE(tr_load_failure_count(rt) == 1);  // 'broken': every message below is made with it
  }
  ~Spec() { tr_runtime_destroy(&rt); }
  tr_op *op(const char *name, const char *target = nullptr, std::vector<tr_named_value> params = {}) {
    tr_op *made = nullptr;
    tr_test::ok(tr_op_new(rt, name, params.data(), params.size(), target, &made));
    return made;
  }
  // The error of calling `name` on one float32 tensor per shape, on `device`.
  std::string call(const char *name, std::vector<std::vector<int64_t>> shapes, DLDevice device = {kDLCPU, 0},
                   const char *target = nullptr, std::vector<tr_named_value> params = {}) {
    tr_op *op = this->op(name, target, params);
    std::vector<HostTensor> tensors;
    for (auto &s : shapes) tensors.emplace_back(s, device);
    std::vector<const DLTensor *> in;
    for (auto &t : tensors) in.push_back(&t.t);
    Outputs out;
    std::string error = tr_test::error_of(tr_op_call(op, in.data(), in.size(), out.items, 8));
    tr_op_destroy(&op);
    return error;
  }
};

static std::vector<tr_named_value> rms_params() {
  int64_t row = 64;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&row, 1, &shape));
  return {{"normalized_shape", shape}};
}

// The spec's text of a message, its wrapped lines joined with a space.
static const char *const kNoBuilder =
    "OpNotAvailableError: target 'torch_cpu' registers no kernel builder for SoftmaxFwdOp; "
    "targets that do: []. There is no fall back to the in-tree implementation: those kernels "
    "do not run on this target's devices.";
static const char *const kUnknown = "UnknownTargetError: no backend registered target 'nope'; known targets: ['torch_cpu']";
static const char *const kInTree =
    "OpNotAvailableError: RMSNormFwdOp's in-tree kernels do not run on cpu; known targets for this op: ['torch_cpu']";
static const char *const kInTreeNone =
    "OpNotAvailableError: RMSNormFwdOp's in-tree kernels do not run on cpu; known targets for this op: []";

TEST_CASE("the spec's three messages, byte for byte, with a backend that failed to load") {
  Spec spec;
  CHECK(spec.call("SoftmaxFwdOp", {{3, 8}}) == kNoBuilder);
  tr_op *named = nullptr;
  CHECK(tr_test::error_of(tr_op_new(spec.rt, "RMSNormFwdOp", nullptr, 0, "nope", &named)) == kUnknown);
  CHECK(tr_test::error_of(tr_set_default_target(spec.rt, "nope")) == kUnknown);
  auto params = rms_params();
  CHECK(spec.call("RMSNormFwdOp", {{4, 64}, {64}}, {kDLCPU, 0}, TR_BUILTIN, params) == kInTree);
  tr_value_clear(&params[0].value);
}

TEST_CASE("the in-tree message names the device's type, not the device") {
  Spec spec;
  auto params = rms_params();
  CHECK(spec.call("RMSNormFwdOp", {{4, 64}, {64}}, {kDLExtDev, 0}, TR_BUILTIN, params) ==
        "OpNotAvailableError: RMSNormFwdOp's in-tree kernels do not run on acme; known targets for this op: "
        "['torch_cpu']");
  tr_value_clear(&params[0].value);
  CHECK(spec.call("GroupNormFwdOp", {{2, 4, 3}}, {kDLCUDA, 0}, TR_BUILTIN, {{"num_groups", tr_value_int(2)}}) ==
        "OpNotAvailableError: GroupNormFwdOp's in-tree kernels do not run on cuda; known targets for this op: []");
}

TEST_CASE("with no backend installed, the spec's message for the example before install") {
  Spec spec(false);
  auto params = rms_params();
  CHECK(spec.call("RMSNormFwdOp", {{4, 64}, {64}}, {kDLCPU, 0}, nullptr, params) == kInTreeNone);
  tr_value_clear(&params[0].value);
}

TEST_CASE("the load-failure hint goes to the warning channel, once, beside the spec's message") {
  Spec spec;
  REQUIRE(spec.warnings.lines.size() == 1);  // the load failure itself
  CHECK(spec.warnings.lines[0] == "backend 'broken' not loaded: its init failed: ValueError: no license");
  CHECK(spec.call("SoftmaxFwdOp", {{3, 8}}) == kNoBuilder);
  REQUIRE(spec.warnings.lines.size() == 2);
  CHECK(spec.warnings.lines[1] == std::string("1 backend failed to load, which may be why: ") + kNoBuilder +
                                      " (tr_load_failure_backend and tr_load_failure_reason say which and why)");
  tr_op *named = nullptr;
  CHECK(tr_test::error_of(tr_op_new(spec.rt, "RMSNormFwdOp", nullptr, 0, "nope", &named)) == kUnknown);
  CHECK(spec.warnings.lines.size() == 2);  // once per runtime
}

TEST_CASE("tilerun's own messages count the backends that failed to load, naming a function that exists") {
  Spec spec;
  tr_op *op = nullptr;
  std::string e = tr_test::error_of(tr_op_new(spec.rt, "NoSuchFwdOp", nullptr, 0, nullptr, &op));
  CHECK_THAT(e, Catch::StartsWith("OpNotAvailableError: no op 'NoSuchFwdOp' in the manifest (") &&
                    Catch::EndsWith(" ops; see 'tilerun ops'); 1 backend failed to load (see tr_load_failure_reason)"));
  CHECK(std::string(tr_load_failure_reason(spec.rt, 0)) == "its init failed: ValueError: no license");
}

TEST_CASE("with no backend found at all, the spec's message stands and a warning says where tilerun looked") {
  tr_test::Warnings warnings;
  tr_runtime *rt = tr_test::runtime_with_dirs({"/nonexistent/backends-a", "/nonexistent/backends-b"}, &warnings);
  tr_op *op = nullptr;
  std::string e = tr_test::error_of(tr_op_new(rt, "AddFwdOp", nullptr, 0, "nope", &op));
  CHECK(e == "UnknownTargetError: no backend registered target 'nope'; known targets: []");  // the spec's, unchanged
  REQUIRE(warnings.lines.size() == 1);
  CHECK(warnings.lines[0] == "no backend was found, which may be why: " + e +
                                 " (looked for backend descriptors, *.yaml, in /nonexistent/backends-a, "
                                 "/nonexistent/backends-b: TILERUN_BACKEND_PATH's folders, then the install's "
                                 "lib/tilerun/backends; docs/writing-a-backend.md)");
  CHECK(tr_test::error_of(tr_op_new(rt, "AddFwdOp", nullptr, 0, "nope", &op)) == e);
  CHECK(warnings.lines.size() == 1);  // once per runtime
  tr_runtime_destroy(&rt);
}
