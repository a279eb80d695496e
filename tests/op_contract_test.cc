// op_contract_test.cc: what the caller's API promises beyond a call: op.kernel_config() is the
// first non-empty config in build order; "no implementation serves this call" is a ValueError;
// the public entry points given NULL return a ValueError naming the argument (or the neutral
// value their header documents), never crash.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "platform/test_support.h"
#include "runtime/runtime_testing.h"

using tr_test::HostTensor;
using tr_test::Outputs;

// ---- kernel_config in build order ----

// A kernel whose config is {k: rows} for the rows of the call it was built for; none for 0 rows
// given as one row (an empty config).
struct ConfigKernel {
  tr_named_value value;
  int empty;
};

static tr_status *noop_call(void *, DLTensor *const *, size_t, DLTensor *const *, size_t) { return nullptr; }

static size_t config_kernel(void *self, const tr_named_value **out) {
  auto *k = static_cast<ConfigKernel *>(self);
  *out = k->empty ? nullptr : &k->value;
  return k->empty ? 0 : 1;
}

static void release_kernel(void *self) { delete static_cast<ConfigKernel *>(self); }

static tr_status *build_config(void *, const tr_build_request *req, tr_kernel *out) {
  int64_t rows = req->inputs[0]->shape[0];
  out->self = new ConfigKernel{{"k", tr_value_int(rows)}, rows == 1};
  out->call = noop_call;
  out->config = config_kernel;
  out->release = release_kernel;
  return nullptr;
}

static tr_status *claim_cpu(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "cpu";
  return nullptr;
}

static tr_status *init_config(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "configcpu", claim_cpu, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "configcpu", build_config, nullptr);
}

// The op's config after building for each row count in `order`, in that order.
static int64_t first_config(tr_runtime *rt, const std::vector<int64_t> &order) {
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  for (int64_t rows : order) {
    HostTensor a({rows, 2}), b({rows, 2});
    const DLTensor *in[] = {&a.t, &b.t};
    Outputs out;
    tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  }
  REQUIRE(tr_op_memo_count(op) == order.size());
  const tr_named_value *values = nullptr;
  size_t n = tr_op_kernel_config(op, &values);
  int64_t got = n == 1 && std::string(values[0].name) == "k" ? values[0].value.as.i : -1;
  tr_op_destroy(&op);
  return got;
}

TEST_CASE("kernel_config is the first non-empty config in build order, not the memo's order") {
  tr_runtime *rt = tr_test::runtime_with_builtin("configcpu", init_config);
  std::vector<int64_t> up, down;
  for (int64_t r = 2; r <= 17; r++) up.push_back(r);
  for (int64_t r = 17; r >= 2; r--) down.push_back(r);
  CHECK(first_config(rt, up) == 2);
  CHECK(first_config(rt, down) == 17);
  CHECK(first_config(rt, {1, 5, 3}) == 5);  // the kernel built first has an empty config: the next
  CHECK(first_config(rt, {3, 1, 5}) == 3);
  tr_runtime_destroy(&rt);
}

// ---- "no implementation serves this call" is a ValueError ----

// A runtime whose only backend is the public plugin: a float32 RMSNorm kernel type on cpu that
// refuses other dtypes ("serves float32 only").
struct WithPublicPlugin {
  tr_test::TempDir dir;
  tr_runtime *rt = nullptr;
  WithPublicPlugin() {
    std::string lib = std::filesystem::absolute("tests/plugin_api/libpublic_plugin.so").string();
    dir.write("public.yaml", "name: public\nlibrary: " + lib + "\n");
    const char *dirs[] = {dir.path};
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    o.backend_dirs = dirs;
    o.n_backend_dirs = 1;
    tr_test::ok(tr_runtime_new(&o, &rt));
  }
  ~WithPublicPlugin() { tr_runtime_destroy(&rt); }
};

TEST_CASE("no implementation serves this call: a ValueError, its message unchanged") {
  WithPublicPlugin env;
  tr_op *op = tr_test::rms_op(env.rt, 8);
  uint16_t x16[16] = {0}, w16[8] = {0};
  int64_t xs[] = {2, 8}, ws[] = {8};
  DLTensor x = {x16, {kDLCPU, 0}, 2, {kDLFloat, 16, 1}, xs, nullptr, 0};
  DLTensor w = {w16, {kDLCPU, 0}, 1, {kDLFloat, 16, 1}, ws, nullptr, 0};
  const DLTensor *in[] = {&x, &w};
  Outputs out;
  tr_status *status = tr_op_call(op, in, 2, out.items, 1);
  REQUIRE(status != nullptr);
  CHECK(tr_status_code(status) == TR_VALUE);
  std::string message = tr_status_message(status);
  CHECK_THAT(message, Catch::StartsWith("RMSNormFwdOp: no implementation serves this call NormCall("));
  CHECK_THAT(message, Catch::Contains("; public_rms_norm: serves float32 only"));
  tr_status_destroy(&status);
  HostTensor x32({2, 8}), w32({8});  // what it serves still runs
  const DLTensor *in32[] = {&x32.t, &w32.t};
  tr_test::ok(tr_op_call(op, in32, 2, out.items, 1));
  tr_op_destroy(&op);
}

// ---- NULL handles: a ValueError naming the argument, or the documented neutral value ----

static std::string null_error(tr_status *status) { return tr_test::error_of(status); }

TEST_CASE("every entry point of tilerun.h given NULL handles: a ValueError naming the argument, or a neutral value") {
  // functions that return a status
  CHECK(null_error(tr_runtime_new(nullptr, nullptr)) == "ValueError: tr_runtime_new: 'out' is NULL");
  tr_runtime *rt = tr_test::runtime_with_builtin("configcpu", init_config);
  tr_op *op = reinterpret_cast<tr_op *>(0x1);
  CHECK(null_error(tr_op_new(nullptr, "AddFwdOp", nullptr, 0, nullptr, &op)) == "ValueError: tr_op_new: 'rt' is NULL");
  CHECK(op == nullptr);  // out set to NULL first
  CHECK(null_error(tr_op_new(rt, nullptr, nullptr, 0, nullptr, &op)) == "ValueError: tr_op_new: 'op_name' is NULL");
  CHECK(null_error(tr_op_new(rt, "AddFwdOp", nullptr, 1, nullptr, &op)) == "ValueError: tr_op_new: 'params' is NULL");
  CHECK(null_error(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, nullptr)) == "ValueError: tr_op_new: 'out' is NULL");
  HostTensor a({2}), b({2});
  const DLTensor *in[] = {&a.t, &b.t};
  DLManagedTensor *outs[1] = {reinterpret_cast<DLManagedTensor *>(0x1)};
  CHECK(null_error(tr_op_call(nullptr, in, 2, outs, 1)) == "ValueError: tr_op_call: 'op' is NULL");
  CHECK(outs[0] == nullptr);
  tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  CHECK(null_error(tr_op_call(op, nullptr, 2, outs, 1)) == "ValueError: tr_op_call: 'inputs' is NULL");
  CHECK(null_error(tr_op_call(op, in, 2, nullptr, 1)) == "ValueError: tr_op_call: 'outputs' is NULL");
  HostTensor c({2});
  DLTensor *into[] = {&c.t};
  CHECK(null_error(tr_op_call_into(nullptr, in, 2, into, 1)) == "ValueError: tr_op_call_into: 'op' is NULL");
  CHECK(null_error(tr_op_call_into(op, nullptr, 2, into, 1)) == "ValueError: tr_op_call_into: 'inputs' is NULL");
  CHECK(null_error(tr_op_call_into(op, in, 2, nullptr, 1)) == "ValueError: tr_op_call_into: 'outputs' is NULL");
  CHECK(null_error(tr_op_request_tune(nullptr)) == "ValueError: tr_op_request_tune: 'op' is NULL");
  CHECK(null_error(tr_set_default_target(nullptr, "configcpu")) == "ValueError: tr_set_default_target: 'rt' is NULL");
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  tr_device_facts facts;
  CHECK(null_error(tr_device_facts_of(nullptr, &cpu, &facts)) == "ValueError: tr_device_facts_of: 'rt' is NULL");
  CHECK(null_error(tr_device_facts_of(rt, nullptr, &facts)) == "ValueError: tr_device_facts_of: 'device' is NULL");
  CHECK(null_error(tr_device_facts_of(rt, &cpu, nullptr)) == "ValueError: tr_device_facts_of: 'out' is NULL");
  DLManagedTensor *empty = reinterpret_cast<DLManagedTensor *>(0x1);
  CHECK(null_error(tr_runtime_empty(nullptr, &a.t, &empty)) == "ValueError: tr_runtime_empty: 'rt' is NULL");
  CHECK(empty == nullptr);
  CHECK(null_error(tr_runtime_empty(rt, &a.t, nullptr)) == "ValueError: tr_runtime_empty: 'out' is NULL");
  CHECK(null_error(tr_alloc_shared(64, nullptr)) == "ValueError: tr_alloc_shared: 'out' is NULL");
  // functions that return no status: their neutral value
  CHECK(tr_op_target(nullptr) == nullptr);
  CHECK(tr_op_memo_count(nullptr) == 0);
  const tr_named_value *values = reinterpret_cast<const tr_named_value *>(0x1);
  CHECK(tr_op_kernel_config(nullptr, &values) == 0);
  CHECK(values == nullptr);
  CHECK(tr_op_kernel_config(op, nullptr) == 0);
  CHECK(tr_registered_targets(nullptr, nullptr, nullptr, 8) == 0);
  CHECK(tr_registered_targets(rt, nullptr, nullptr, 8) == 1);  // NULL names: the count only
  CHECK(tr_default_target(nullptr) == nullptr);
  CHECK(tr_load_failure_count(nullptr) == 0);
  CHECK(tr_load_failure_backend(nullptr, 0) == nullptr);
  CHECK(tr_load_failure_reason(nullptr, 0) == nullptr);
  CHECK(tr_runtime_launch_remote(nullptr) == 0);
  tr_cuda_trim(nullptr);
  tr_free_shared(nullptr);
  tr_op_destroy(nullptr);
  tr_runtime_destroy(nullptr);
  tr_op *none = nullptr;
  tr_op_destroy(&none);
  // the runtime and op are unharmed
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

// The API table's host-side functions given a NULL host, each result recorded by the init.
static std::vector<std::string> g_host_errors;
static tr_status *init_null_host(const tr_backend_api *api) {
  tr_status *results[] = {
      api->register_detector(nullptr, "nullhost", claim_cpu, nullptr),
      api->register_kernel_builder(nullptr, "AddFwdOp", "nullhost", build_config, nullptr),
      api->register_device_facts(nullptr, "acme", nullptr, nullptr),
      api->register_device_type(nullptr, "acme", kDLExtDev),
      api->register_allocator(nullptr, "acme", nullptr, nullptr, nullptr, nullptr),
      api->register_kernel_type(nullptr, "RMSNormFwdOp", nullptr),
  };
  for (tr_status *s : results) g_host_errors.push_back(tr_test::error_of(s));
  g_host_errors.push_back(api->find_interface(nullptr, "RMSNormFwdOp", "RMSNormRowFwdInterface") == nullptr ? "NULL"
                                                                                                        : "found");
  return api->register_detector(api->host, "nullhost", claim_cpu, nullptr);  // the real host still works
}

TEST_CASE("the API table's functions given a NULL host: a ValueError naming it; find_interface: NULL") {
  g_host_errors.clear();
  tr_runtime *rt = tr_test::runtime_with_builtin("nullhost", init_null_host);
  CHECK(tr_load_failure_count(rt) == 0);
  std::vector<std::string> want;
  for (const char *fn : {"register_detector", "register_kernel_builder", "register_device_facts",
                         "register_device_type", "register_allocator", "register_kernel_type"}) {
    want.push_back(std::string("ValueError: ") + fn + ": 'host' is NULL (pass the API table's host)");
  }
  want.push_back("NULL");
  CHECK(g_host_errors == want);
  const char *names[2];
  REQUIRE(tr_registered_targets(rt, nullptr, names, 2) == 1);
  CHECK(std::string(names[0]) == "nullhost");
  tr_runtime_destroy(&rt);
}
