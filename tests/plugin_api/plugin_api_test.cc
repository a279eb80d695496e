// plugin_api_test.cc: plugins built against the public headers alone, loaded through descriptor
// files: one adds a kernel type to RMSNormFwdOp's in-tree interface (found with find_interface),
// which selection picks and whose kernel runs; one registers a kernel type shorter than version 1,
// which is refused by name while the other plugin of the same pass still works.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "components/select/intree_table.h"
#include "kernels/intree/intree.h"
#include "platform/platform.h"
#include "platform/test_support.h"
#include "registry/discovery.h"
#include "registry/registry.h"
#include "runtime/runtime_testing.h"
#include "selector/selector.h"

using tr_test::HostTensor;
using tr_test::Outputs;

static std::string lib(const char *name) {
  return std::filesystem::absolute(std::string("tests/plugin_api/lib") + name + ".so").string();
}

static void install(const tr_test::TempDir &dir, const char *file, const char *name, const char *library) {
  dir.write(file, std::string("name: ") + name + "\nlibrary: " + lib(library) + "\n");
}

// What public_plugin.c counts.
struct PublicStats {
  int factories, calls;
};

// The plugin's counters, through the loader (the same loaded object the registry holds).
struct PluginStats {
  tr_plat_lib *handle = nullptr;
  const PublicStats *stats = nullptr;
  PluginStats() {
    tr_test::ok(tr_plat_lib_open(lib("public_plugin").c_str(), &handle));
    stats = static_cast<const PublicStats *>(tr_plat_lib_symbol(handle, "public_plugin_stats_v"));
    REQUIRE(stats != nullptr);
  }
  ~PluginStats() { tr_plat_lib_close(&handle); }
};

// A registry loaded from the descriptors in `dir`, as the runtime loads it.
struct Loaded {
  std::vector<std::string> warnings;
  tr_registry *reg = nullptr;
  tr_select_table *table = nullptr;
  explicit Loaded(const tr_test::TempDir &dir) {
    tr_test::ok(tr_registry_new(sink, this, &reg));
    tr_registry_set_interface_finder(reg, tr_select_intree_interface, nullptr);
    const char *dirs[] = {dir.path};
    tr_discovery *found = nullptr;
    tr_test::ok(tr_backend_discover(dirs, 1, &found));
    tr_test::ok(tr_registry_load_all(reg, found));
    tr_discovery_destroy(&found);
    tr_test::ok(tr_select_table_new_intree(reg, facts, reg, &table));
  }
  ~Loaded() {
    tr_select_table_destroy(&table);
    tr_registry_destroy(&reg);
  }
  static void sink(void *ctx, const char *line) { static_cast<Loaded *>(ctx)->warnings.push_back(line); }
  static tr_status *facts(void *ctx, const tr_device *device, tr_device_facts *out) {
    return tr_registry_device_facts(static_cast<const tr_registry *>(ctx), device, out);
  }
  std::vector<std::string> keys(const char *op) {
    const tr_kernel_type *types[8];
    size_t n = tr_registry_kernel_types(reg, op, types, 8);
    std::vector<std::string> out;
    for (size_t i = 0; i < n && i < 8; i++) out.push_back(types[i]->key);
    return out;
  }
};

// RMSNormFwdOp's call spec for x [rows, 8] float32 on cpu, with a weight.
static void rms_call(int64_t rows, tr_call_spec *call, const char **iface) {
  tr_device cpu;
  tr_test::ok(tr_device_make("cpu", TR_DEVICE_NO_INDEX, &cpu));
  int64_t xs[] = {rows, 8}, ws[] = {8};
  tr_tensor_spec x, w;
  tr_test::ok(tr_tensor_spec_make(&cpu, TR_FLOAT32, 2, xs, &x));
  tr_test::ok(tr_tensor_spec_make(&cpu, TR_FLOAT32, 1, ws, &w));
  const tr_tensor_spec *in[] = {&x, &w};
  int64_t row = 8;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&row, 1, &shape));
  tr_named_value params[] = {{"normalized_shape", shape}, {"eps", tr_value_float(1e-6)}};
  tr_test::ok(tr_intree_find("RMSNormFwdOp")->call_spec(in, 2, params, 2, &cpu, iface, call));
  tr_value_clear(&shape);
}

// Selection over the in-tree table picks the public plugin's key, and its kernel computes RMSNorm.
static void check_selected_and_runs(Loaded &env, const PublicStats *stats) {
  const tr_select_entry *entry = tr_select_table_find(env.table, "RMSNormFwdOp");
  REQUIRE(entry != nullptr);
  tr_call_spec call;
  const char *iface = nullptr;
  rms_call(3, &call, &iface);
  CHECK(std::string(iface) == "RMSNormRowFwdInterface");
  const char *key = nullptr;
  tr_test::ok(tr_selector_key_for(entry->selector, iface, &call, &key));
  CHECK(std::string(key) == "public_rms_norm");
  int factories = stats->factories, calls = stats->calls;
  tr_selected selected;
  tr_test::ok(tr_selector_kernel_for(entry->selector, iface, &call, &selected));
  tr_call_spec_clear(&call);
  CHECK(std::string(selected.key) == "public_rms_norm");
  CHECK(stats->factories == factories + 1);
  HostTensor x({3, 8}), w({8}, {kDLCPU, 0}, 1.5f), y({3, 8}, {kDLCPU, 0}, -7.0f);
  DLTensor *in[] = {&x.t, &w.t}, *out[] = {&y.t};
  tr_test::ok(selected.kernel->call(selected.kernel->self, in, 2, out, 1));
  CHECK(stats->calls == calls + 1);
  std::vector<double> want = tr_test::rms_ref(x.data, w.data, 8);
  CHECK(tr_test::mismatches(y.data, want) == 0);
}

TEST_CASE("a plugin built on the public headers alone joins in-tree selection and its kernel runs") {
  tr_test::TempDir dir;
  install(dir, "public.yaml", "public", "public_plugin");
  Loaded env(dir);
  CHECK(env.warnings.empty());
  REQUIRE(tr_registry_failure_count(env.reg) == 0);
  CHECK(env.keys("RMSNormFwdOp") == std::vector<std::string>{"public_rms_norm"});
  PluginStats plugin;
  check_selected_and_runs(env, plugin.stats);
  // the interface it found is the in-tree one, the one find_interface hands out
  const tr_kernel_type *types[1];
  REQUIRE(tr_registry_kernel_types(env.reg, "RMSNormFwdOp", types, 1) == 1);
  CHECK(types[0]->interface == tr_intree_find("RMSNormFwdOp")->interfaces[0]);
  CHECK(types[0]->interface == tr_select_intree_interface(nullptr, "RMSNormFwdOp", "RMSNormRowFwdInterface"));
}

TEST_CASE("find_interface: an in-tree op's interface by name, NULL for an unknown op or interface") {
  CHECK(tr_select_intree_interface(nullptr, "RMSNormFwdOp", "RMSNormRowFwdInterface") ==
        tr_intree_find("RMSNormFwdOp")->interfaces[0]);
  CHECK(tr_select_intree_interface(nullptr, "RMSNormFwdOp", "LayerNormRowFwdInterface") == nullptr);
  CHECK(tr_select_intree_interface(nullptr, "GemmFwdOp", "RMSNormRowFwdInterface") == nullptr);
  CHECK(std::string(tr_select_intree_interface(nullptr, "AddFwdOp", "AddElementwiseFwdInterface")->name) ==
        "AddElementwiseFwdInterface");
}

TEST_CASE("through the runtime: a call on cpu tensors runs the public plugin's kernel") {
  tr_test::TempDir dir;
  install(dir, "public.yaml", "public", "public_plugin");
  const char *old = tr_plat_getenv(TR_BACKEND_PATH_ENV);
  std::string saved = old ? old : "";
  tr_test::ok(tr_plat_setenv(TR_BACKEND_PATH_ENV, dir.path));  // the search path, no dirs given
  tr_test::Warnings warnings;
  tr_runtime_options o{};
  o.manifest_dir = "manifest/spec";
  o.warn = tr_test::Warnings::sink;
  o.warn_ctx = &warnings;
  tr_runtime *rt = nullptr;
  tr_test::ok(tr_runtime_new(&o, &rt));
  PluginStats plugin;
  int factories = plugin.stats->factories, calls = plugin.stats->calls;
  tr_op *op = tr_test::rms_op(rt, 8);
  HostTensor x({4, 8}), w({8}, {kDLCPU, 0}, 0.75f);
  const DLTensor *in[] = {&x.t, &w.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  CHECK(std::string(tr_op_target(op)) == "<builtin>");  // no detector: in-tree selection, which picks the plugin's
  CHECK(plugin.stats->factories == factories + 1);
  CHECK(plugin.stats->calls == calls + 1);
  std::vector<float> y(out.f(0), out.f(0) + 32);
  CHECK(tr_test::mismatches(y, tr_test::rms_ref(x.data, w.data, 8)) == 0);
  CHECK(warnings.lines.empty());
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
  tr_test::ok(tr_plat_setenv(TR_BACKEND_PATH_ENV, saved.c_str()));
}

TEST_CASE("a kernel type shorter than version 1 fails its plugin's load, naming it; the other plugin works") {
  tr_test::TempDir dir;
  install(dir, "a_short.yaml", "short", "short_plugin");  // loaded first (sorted)
  install(dir, "b_public.yaml", "public", "public_plugin");
  Loaded env(dir);
  REQUIRE(tr_registry_failure_count(env.reg) == 1);
  const tr_load_failure *f = tr_registry_failure_at(env.reg, 0);
  CHECK(std::string(f->backend) == "short");
  CHECK_THAT(f->descriptor, Catch::Contains("a_short.yaml"));
  std::string want = "backend 'short': register_kernel_type for RMSNormFwdOp: its tr_kernel_type has struct_size " +
                     std::to_string(offsetof(tr_kernel_type, devices)) + ", shorter than the " +
                     std::to_string(TR_KERNEL_TYPE_MIN_SIZE) + " bytes of tr_kernel_type version 1";
  CHECK_THAT(f->reason, Catch::Contains(want));
  REQUIRE(env.warnings.size() == 1);
  CHECK_THAT(env.warnings[0], Catch::StartsWith("backend 'short'") && Catch::Contains("not loaded") &&
                                  Catch::Contains(want));
  // nothing of the short plugin remains (its valid first type rolled back); the public one does
  CHECK(env.keys("RMSNormFwdOp") == std::vector<std::string>{"public_rms_norm"});
  PluginStats plugin;
  check_selected_and_runs(env, plugin.stats);
}

TEST_CASE("the minimum sizes are version 1's members") {
  CHECK(TR_KERNEL_TYPE_MIN_SIZE == offsetof(tr_kernel_type, ctx) + sizeof(void *));
  CHECK(TR_KERNEL_TYPE_MIN_SIZE == sizeof(tr_kernel_type));
  CHECK(TR_KERNEL_MIN_SIZE == sizeof(tr_kernel));
  tr_backend_api api{};
  api.struct_size = offsetof(tr_backend_api, find_interface);  // an older tilerun's table
  CHECK(!TR_STRUCT_HAS(&api, tr_backend_api, find_interface));
  CHECK(TR_STRUCT_HAS(&api, tr_backend_api, register_kernel_type));
  api.struct_size = sizeof(api);
  CHECK(TR_STRUCT_HAS(&api, tr_backend_api, find_interface));
}
