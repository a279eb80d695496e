// registry_test.cc: loading plugins (and surviving the broken ones), registration rules and
// rollback, and target settlement.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "core/test_support.h"
#include "platform/platform.h"
#include "platform/test_support.h"
#include "registry/discovery.h"
#include "registry/registry.h"
#include "selector/selector_testing.h"

struct Reg {
  std::vector<std::string> warnings;
  tr_registry *reg = nullptr;
  Reg() { tr_test::ok(tr_registry_new(sink, this, &reg)); }
  ~Reg() { tr_registry_destroy(&reg); }
  static void sink(void *ctx, const char *line) { static_cast<Reg *>(ctx)->warnings.push_back(line); }
  std::vector<std::string> targets(const char *op = nullptr) {
    const char *names[16];
    size_t n = tr_registry_targets(reg, op, names, 16);
    return std::vector<std::string>(names, names + n);
  }
};

static std::string lib(const char *name) {
  return std::filesystem::absolute(std::string("registry/testdata/lib") + name + ".so").string();
}

static tr_status *claim_all(void *, const tr_device *, int *claims) {
  *claims = 1;
  return nullptr;
}
static tr_status *claim_cpu(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "cpu";
  return nullptr;
}
static tr_status *claim_none(void *, const tr_device *, int *claims) {
  *claims = 0;
  return nullptr;
}
static tr_status *detector_fails(void *, const tr_device *, int *) {
  return TR_STATUS(TR_VALUE, "vendor runtime missing");
}
static tr_status *build_nothing(void *, const tr_build_request *, tr_kernel *) {
  return TR_STATUS(TR_INTERNAL, "not built in these tests");
}

// Each init registers what its name says.
static tr_status *init_cpu(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "torch_cpu", claim_cpu, nullptr));
  return api->register_kernel_builder(api->host, "RMSNormFwdOp", "torch_cpu", build_nothing, nullptr);
}
static tr_status *init_second_cpu(const tr_backend_api *api) {
  return api->register_detector(api->host, "other_cpu", claim_cpu, nullptr);
}
static tr_status *init_nothing(const tr_backend_api *api) {
  (void)api;
  return nullptr;
}
static tr_status *init_quiet(const tr_backend_api *api) {
  return api->register_detector(api->host, "quiet", claim_none, nullptr);
}
static tr_status *init_broken_detector(const tr_backend_api *api) {
  return api->register_detector(api->host, "flaky", detector_fails, nullptr);
}
static tr_status *init_fails_late(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "late", claim_all, nullptr));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "AddFwdOp", "late", build_nothing, nullptr));
  TR_RETURN_IF_ERROR(api->register_device_type(api->host, "lateware", 99));
  return TR_STATUS(TR_VALUE, "license check failed");
}
static tr_status *init_same_target(const tr_backend_api *api) {
  return api->register_detector(api->host, "torch_cpu", claim_all, nullptr);
}
static tr_status *init_same_builder(const tr_backend_api *api) {
  return api->register_kernel_builder(api->host, "RMSNormFwdOp", "torch_cpu", build_nothing, nullptr);
}
static tr_status *init_ignores_refusal(const tr_backend_api *api) {
  tr_status *refused = api->register_detector(api->host, "Bad Target", claim_all, nullptr);
  tr_status_destroy(&refused);  // ignored: the init goes on and reports success
  return api->register_detector(api->host, "fine", claim_all, nullptr);
}
static void *g_kept_host;
static decltype(tr_backend_api::register_kernel_builder) g_kept_register;
static tr_status *init_keeps_table(const tr_backend_api *api) {
  g_kept_host = api->host;
  g_kept_register = api->register_kernel_builder;
  return api->register_detector(api->host, "keeper", claim_all, nullptr);
}
static tr_status *init_facts_cuda(const tr_backend_api *api) {
  return api->register_device_facts(api->host, "cuda", nullptr, nullptr);
}
static tr_status *read_facts(void *, const tr_device *, tr_device_facts *out) {
  *out = tr_device_facts{90, "fast", 132, 232448};
  return nullptr;
}
static tr_status *read_bad_facts(void *, const tr_device *, tr_device_facts *out) {
  *out = tr_device_facts{1, nullptr, -4, 0};
  return nullptr;
}
static tr_status *read_bad_smem(void *, const tr_device *, tr_device_facts *out) {
  *out = tr_device_facts{1, nullptr, 8, -1};
  return nullptr;
}
static tr_status *read_fails(void *, const tr_device *, tr_device_facts *) {
  return TR_STATUS(TR_VALUE, "vendor runtime missing");
}
static tr_status *init_facts(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_device_facts(api->host, "acme", read_facts, nullptr));
  TR_RETURN_IF_ERROR(api->register_device_facts(api->host, "badsmem", read_bad_smem, nullptr));
  TR_RETURN_IF_ERROR(api->register_device_facts(api->host, "failing", read_fails, nullptr));
  return api->register_device_facts(api->host, "bad", read_bad_facts, nullptr);
}
static tr_status *init_facts_again(const tr_backend_api *api) {
  return api->register_device_facts(api->host, "acme", read_facts, nullptr);
}

TEST_CASE("plugins that fail to load are skipped, warned about once, and recorded") {
  Reg r;
  CHECK(tr_registry_load_plugin(r.reg, "gone", "/nonexistent/libgone.so", "/etc/gone.yaml") == 0);
  CHECK(tr_registry_load_plugin(r.reg, "no_init", lib("no_init").c_str(), "") == 0);
  CHECK(tr_registry_load_plugin(r.reg, "abi", lib("abi_too_new").c_str(), "") == 0);
  REQUIRE(tr_registry_failure_count(r.reg) == 3);
  REQUIRE(r.warnings.size() == 3);
  CHECK(r.warnings[0].find("backend 'gone' (/etc/gone.yaml) not loaded: ") == 0);
  CHECK(r.warnings[0].find("/nonexistent/libgone.so") != std::string::npos);
  CHECK(std::string(tr_registry_failure_at(r.reg, 1)->reason) ==
        lib("no_init") + " has no symbol 'tilerun_backend_init'");
  CHECK(std::string(tr_registry_failure_at(r.reg, 2)->reason) ==
        lib("abi_too_new") + " was built for backend ABI 99; this tilerun supports ABI 1 (ABI too "
        "new: update tilerun)");
  CHECK(std::string(tr_registry_failure_at(r.reg, 2)->backend) == "abi");
  {
    Reg g;  // an ABI symbol of another type reads as a number no ABI will reach
    CHECK(tr_registry_load_plugin(g.reg, "garbage", lib("abi_garbage").c_str(), "") == 0);
    CHECK(std::string(tr_registry_failure_at(g.reg, 0)->reason) ==
          lib("abi_garbage") + ": its 'tilerun_backend_abi' reads as 1684234849, no ABI version: declare it `const "
          "uint32_t tilerun_backend_abi = TR_BACKEND_ABI;` (tilerun/backend.h)");
  }
  CHECK(tr_registry_load_plugin(r.reg, "zero", lib("abi_zero").c_str(), "") == 0);
  REQUIRE(tr_registry_failure_count(r.reg) == 4);
  CHECK(std::string(tr_registry_failure_at(r.reg, 3)->reason) ==
        lib("abi_zero") + " declares backend ABI 0, which no tilerun has (the first is 1; tilerun/backend.h's "
        "TR_BACKEND_ABI is this one's)");
  CHECK(r.targets().empty());
}

// A copy of a real plugin cut to `size` bytes (0: half), in `dir`.
static std::string truncated_copy(const tr_test::TempDir &dir, const char *name, size_t size) {
  char *data = nullptr;
  size_t n = 0;
  tr_test::ok(tr_plat_read_file(lib("half_way").c_str(), &data, &n));
  std::string bytes(data, size ? size : n / 2);
  free(data);
  return dir.write(name, bytes);
}

TEST_CASE("a truncated or non-ELF shared object is a load failure naming the file and what is wrong") {
  tr_test::TempDir dir;
  Reg r;
  std::string half = truncated_copy(dir, "libhalf.so", 0);
  std::string segment = truncated_copy(dir, "libsegment.so", 5000);
  std::string headers = truncated_copy(dir, "libheaders.so", 200);
  std::string stub = truncated_copy(dir, "libstub.so", 40);
  std::string text = dir.write("libtext.so", "name: text\nlibrary: libtext.so\n");
  std::string empty = dir.write("libempty.so", "");
  for (const std::string *path : {&half, &segment, &headers, &stub, &text, &empty}) {
    CHECK(tr_registry_load_plugin(r.reg, "cut", path->c_str(), "") == 0);  // the process survives
  }
  REQUIRE(tr_registry_failure_count(r.reg) == 6);
  std::vector<std::string> reasons;
  for (size_t i = 0; i < 6; i++) reasons.push_back(tr_registry_failure_at(r.reg, i)->reason);
  CHECK_THAT(reasons[0], Catch::StartsWith("cannot load shared object '" + half + "': truncated: it is ") &&
                             Catch::Contains(" bytes long, but its ") && Catch::Contains(" at byte "));
  CHECK_THAT(reasons[1], Catch::StartsWith("cannot load shared object '" + segment +
                                           "': truncated: it is 5000 bytes long, but its loadable segment at program "
                                           "header "));
  CHECK_THAT(reasons[2], Catch::StartsWith("cannot load shared object '" + headers +
                                           "': truncated: it is 200 bytes long, but its program headers end at byte "));
  CHECK(reasons[3] == "cannot load shared object '" + stub +
                          "': truncated: it is 40 bytes long, shorter than its ELF header (64 bytes)");
  CHECK(reasons[4] == "cannot load shared object '" + text + "': not an ELF file (it begins with 6e 61 6d 65, not "
                                                              "7f 45 4c 46)");
  CHECK(reasons[5] == "cannot load shared object '" + empty + "': not an ELF file (it is empty)");
  CHECK(r.warnings.size() == 6);
  CHECK(tr_registry_load_builtin(r.reg, "cpu", init_cpu) == 1);  // and loading goes on
  CHECK(r.targets() == std::vector<std::string>{"torch_cpu"});
}

TEST_CASE("a plugin whose registration fails part-way leaves nothing behind") {
  Reg r;
  CHECK(tr_registry_load_builtin(r.reg, "cpu", init_cpu) == 1);
  CHECK(tr_registry_load_plugin(r.reg, "half_way", lib("half_way").c_str(), "") == 0);
  REQUIRE(tr_registry_failure_count(r.reg) == 1);
  CHECK(std::string(tr_registry_failure_at(r.reg, 0)->reason) ==
        "its init failed: BackendError: backend 'half_way': (AddFwdOp, half) already has a kernel "
        "builder; registering the same (op, target) twice is an error");
  CHECK(r.targets() == std::vector<std::string>{"torch_cpu"});  // 'half' rolled back
  CHECK(r.targets("AddFwdOp").empty());
  CHECK(tr_registry_load_builtin(r.reg, "late", init_fails_late) == 0);
  CHECK(r.targets() == std::vector<std::string>{"torch_cpu"});
  CHECK(tr_registry_device_type_for_dl(r.reg, 99) == nullptr);  // its device type too
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  const char *target = nullptr;
  tr_test::ok(tr_registry_settle(r.reg, nullptr, nullptr, &cpu, &target));
  CHECK(std::string(target) == "torch_cpu");  // the rolled-back detectors claim nothing
}

TEST_CASE("registration rules: one detector per target, one builder per (op, target), no cuda facts, facts once per type") {
  Reg r;
  REQUIRE(tr_registry_load_builtin(r.reg, "cpu", init_cpu) == 1);
  CHECK(tr_registry_load_builtin(r.reg, "dup", init_same_target) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 0)->reason) ==
        "its init failed: BackendError: backend 'dup': target 'torch_cpu' already has a detector, registered by "
        "backend 'cpu' (loaded first); a "
        "target is one set of kernels from one provider");
  CHECK(tr_registry_load_builtin(r.reg, "cudafacts", init_facts_cuda) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 1)->reason) ==
        "its init failed: BackendError: backend 'cudafacts': facts for device type 'cuda' cannot be "
        "registered; tilerun reads them itself");
  REQUIRE(tr_registry_load_builtin(r.reg, "facts", init_facts) == 1);
  CHECK(tr_registry_load_builtin(r.reg, "facts2", init_facts_again) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 2)->reason) ==
        "its init failed: BackendError: backend 'facts2': device type 'acme' already has facts; "
        "facts belong to a device type and only one backend registers them");
  CHECK(tr_registry_load_builtin(r.reg, "dupbuild", init_same_builder) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 3)->reason) ==
        "its init failed: BackendError: backend 'dupbuild': (RMSNormFwdOp, torch_cpu) already has a kernel "
        "builder, registered by backend 'cpu' (loaded first); registering the same (op, target) twice is an error");
  tr_status *annotated = tr_registry_annotate(r.reg, TR_STATUS(TR_VALUE, "boom"));
  CHECK(tr_test::error_of(annotated) == "ValueError: boom; 4 backends failed to load (see tr_load_failure_reason)");
}

TEST_CASE("an init that goes on after a refused registration fails whole; registering after init is refused") {
  Reg r;
  CHECK(tr_registry_load_builtin(r.reg, "sloppy", init_ignores_refusal) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 0)->reason) ==
        "its init returned success after a registration was refused (BackendError: backend 'sloppy': target "
        "'Bad Target' must be a lowercase letter followed by at most 30 lowercase letters, digits or '_'); a "
        "refused registration fails the whole backend");
  CHECK(r.targets().empty());  // 'fine' rolled back with it
  REQUIRE(tr_registry_load_builtin(r.reg, "keeper", init_keeps_table) == 1);
  CHECK(r.targets() == std::vector<std::string>{"keeper"});
  CHECK(tr_test::error_of(g_kept_register(g_kept_host, "RMSNormFwdOp", "keeper", build_nothing, nullptr)) ==
        "BackendError: register_kernel_builder was called outside a backend's init: registrations are taken only "
        "while the backend's init runs (the table's host and find_interface may be kept; the register functions "
        "may not be called later)");
  CHECK(r.targets("RMSNormFwdOp").empty());
}

TEST_CASE("device facts: registered reads, invalid facts, unregistered types") {
  Reg r;
  REQUIRE(tr_registry_load_builtin(r.reg, "facts", init_facts) == 1);
  tr_device acme = {"acme", 0}, bad = {"bad", 1}, cpu = {"cpu", TR_DEVICE_NO_INDEX};
  tr_device_facts f;
  tr_test::ok(tr_registry_device_facts(r.reg, &acme, &f));
  CHECK(f.arch == 90);
  CHECK(f.sm_count == 132);
  CHECK(tr_test::error_of(tr_registry_device_facts(r.reg, &bad, &f)) ==
        "BackendError: the device facts read of 'bad' returned invalid facts for bad:1: sm_count -4, "
        "smem_budget 0 (neither may be negative)");
  tr_device bad_smem = {"badsmem", 2}, failing = {"failing", 3};
  CHECK(tr_test::error_of(tr_registry_device_facts(r.reg, &bad_smem, &f)) ==
        "BackendError: the device facts read of 'badsmem' returned invalid facts for badsmem:2: "
        "sm_count 8, smem_budget -1 (neither may be negative)");
  CHECK(tr_test::error_of(tr_registry_device_facts(r.reg, &failing, &f)) ==
        "BackendError: the device facts read of 'failing' failed on failing:3: vendor runtime missing");
  tr_test::ok(tr_registry_device_facts(r.reg, &cpu, &f));
  CHECK(f.arch == -1);
  CHECK(f.calibration == nullptr);
  CHECK(f.sm_count == 0);
  CHECK(f.smem_budget == 0);
}

TEST_CASE("settlement: the op's target, then the process default, then detection") {
  Reg r;
  REQUIRE(tr_registry_load_builtin(r.reg, "cpu", init_cpu) == 1);
  REQUIRE(tr_registry_load_builtin(r.reg, "quiet", init_quiet) == 1);
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX}, acme = {"acme", 0};
  const char *t = nullptr;
  tr_test::ok(tr_registry_settle(r.reg, nullptr, nullptr, &cpu, &t));
  CHECK(std::string(t) == "torch_cpu");  // exactly one claim wins
  tr_test::ok(tr_registry_settle(r.reg, nullptr, nullptr, &acme, &t));
  CHECK(std::string(t) == TR_BUILTIN);  // none claims: the in-tree kernels
  tr_test::ok(tr_registry_settle(r.reg, nullptr, "quiet", &cpu, &t));
  CHECK(std::string(t) == "quiet");  // the default comes before detection
  tr_test::ok(tr_registry_settle(r.reg, "torch_cpu", "quiet", &acme, &t));
  CHECK(std::string(t) == "torch_cpu");  // the op's own target comes first
  tr_test::ok(tr_registry_settle(r.reg, TR_BUILTIN, "quiet", &cpu, &t));
  CHECK(std::string(t) == TR_BUILTIN);
  CHECK(tr_test::error_of(tr_registry_settle(r.reg, "nope", nullptr, &cpu, &t)) ==
        "UnknownTargetError: no backend registered target 'nope'; known targets: ['quiet', 'torch_cpu']");
  CHECK(tr_test::error_of(tr_registry_settle(r.reg, nullptr, "gone", &cpu, &t)).find("target 'gone'") !=
        std::string::npos);
}

TEST_CASE("settlement: two claims are ambiguous; a failing detector is a BackendError naming it") {
  Reg r;
  REQUIRE(tr_registry_load_builtin(r.reg, "cpu", init_cpu) == 1);
  REQUIRE(tr_registry_load_builtin(r.reg, "other", init_second_cpu) == 1);
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  const char *t = nullptr;
  CHECK(tr_test::error_of(tr_registry_settle(r.reg, nullptr, nullptr, &cpu, &t)) ==
        "AmbiguousTargetError: targets ['other_cpu', 'torch_cpu'] all claim device cpu; name one "
        "with the op's target or tr_set_default_target");
  Reg f;
  REQUIRE(tr_registry_load_builtin(f.reg, "flaky", init_broken_detector) == 1);
  CHECK(tr_test::error_of(tr_registry_settle(f.reg, nullptr, nullptr, &cpu, &t)) ==
        "BackendError: the detector of target 'flaky' failed on device cpu: ValueError: vendor "
        "runtime missing");
}

TEST_CASE("targets are listed sorted, and per op those with a builder") {
  Reg r;
  REQUIRE(tr_registry_load_builtin(r.reg, "quiet", init_quiet) == 1);
  REQUIRE(tr_registry_load_builtin(r.reg, "cpu", init_cpu) == 1);
  CHECK(r.targets() == std::vector<std::string>{"quiet", "torch_cpu"});
  CHECK(r.targets("RMSNormFwdOp") == std::vector<std::string>{"torch_cpu"});
  char text[128];
  tr_registry_targets_text(r.reg, "SoftmaxFwdOp", text, sizeof(text));
  CHECK(std::string(text) == "[]");
  tr_registry_targets_text(r.reg, nullptr, text, sizeof(text));
  CHECK(std::string(text) == "['quiet', 'torch_cpu']");
}

// A plugin's own GQA decode implementation for batch 2, added to the in-tree interface.
static const tr_kernel_type *vendor_bs2() {
  static const int32_t archs[] = {90};
  static tr_kernel_type t = {sizeof(tr_kernel_type), "acme_decode_bs2", tr_test::gqa_decode_interface(), nullptr,
                             archs, 1, 0, nullptr, nullptr,
                             [](const tr_kernel_type *, const tr_call_spec *c, char *, size_t) -> const char * {
                               return tr_call_spec_int(c, "batch") == 2 ? nullptr : "serves batch 2 only";
                             },
                             nullptr, tr_test::test_factory, nullptr, nullptr};
  return &t;
}
static tr_status *init_vendor_type(const tr_backend_api *api) {
  return api->register_kernel_type(api->host, "GQADecodeFwdOp", vendor_bs2());
}
static tr_status *init_vendor_type_twice(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_kernel_type(api->host, "GQADecodeFwdOp", vendor_bs2()));
  return api->register_kernel_type(api->host, "GQADecodeFwdOp", vendor_bs2());
}
static tr_status *facts90(void *, const tr_device *, tr_device_facts *out) {
  *out = tr_device_facts{90, nullptr, 132, 232448};
  return nullptr;
}

TEST_CASE("register_kernel_type: a plugin's implementation takes part in in-tree selection") {
  Reg r;
  CHECK(tr_registry_load_builtin(r.reg, "twice", init_vendor_type_twice) == 0);  // rolled back
  CHECK(std::string(tr_registry_failure_at(r.reg, 0)->reason) ==
        "its init failed: BackendError: backend 'twice': GQADecodeFwdOp already has a kernel type "
        "'acme_decode_bs2'");
  const tr_kernel_type *external[4];
  CHECK(tr_registry_kernel_types(r.reg, "GQADecodeFwdOp", external, 4) == 0);
  REQUIRE(tr_registry_load_builtin(r.reg, "vendor", init_vendor_type) == 1);
  REQUIRE(tr_registry_kernel_types(r.reg, "GQADecodeFwdOp", external, 4) == 1);
  CHECK(tr_registry_kernel_types(r.reg, "GemmFwdOp", external, 4) == 0);
  const tr_kernel_interface *ifaces[] = {tr_test::gqa_decode_interface()};
  const tr_kernel_type *types[] = {tr_test::gqa_decode(), tr_test::gqa_decode_bs1(),
                                   tr_test::gqa_decode_long_context(), external[0]};
  tr_selector *sel = nullptr;
  tr_test::ok(tr_selector_new("GQADecodeFwdOp", ifaces, 1, types, 4, facts90, nullptr, &sel));
  auto key = [&](int64_t batch) {
    tr_test::Call c(tr_test::attention_call(), "cuda:0", {{"batch", tr_value_int(batch)}, {"seqlen_kv", tr_value_int(512)}});
    const char *k = nullptr;
    tr_test::ok(tr_selector_key_for(sel, "GQADecodeDenseFwdInterface", &c.spec, &k));
    return std::string(k);
  };
  CHECK(key(2) == "acme_decode_bs2");   // beats the general implementation, like an in-tree one
  CHECK(key(1) == "gqa_dense_decode_bs1");
  CHECK(key(3) == "gqa_dense_decode");
  tr_selector_destroy(&sel);
}

static tr_status *init_steal_cpu(const tr_backend_api *api) {
  return api->register_device_type(api->host, "acme", kDLCPU);
}

TEST_CASE("a backend cannot take over a DLPack device type tilerun names itself") {
  Reg r;
  CHECK(tr_registry_load_builtin(r.reg, "thief", init_steal_cpu) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 0)->reason) ==
        "its init failed: BackendError: backend 'thief': device type 'acme' on DLPack device type 1: "
        "tilerun names that DLPack device type itself");
  CHECK(tr_registry_device_type_for_dl(r.reg, kDLCPU) == nullptr);
}

// ---- struct_size: what a plugin wrote is read only as far as it says it reaches ----

// A copy of vendor_bs2 with another key, struct_size and base.
static tr_kernel_type sized_type(const char *key, size_t struct_size, const tr_kernel_type *base = nullptr) {
  tr_kernel_type t = *vendor_bs2();
  t.key = key;
  t.struct_size = struct_size;
  t.base = base;
  return t;
}
static tr_kernel_type g_short_type, g_short_base, g_on_short_base, g_ok_type;
static tr_status *init_short_type(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_kernel_type(api->host, "GQADecodeFwdOp", &g_ok_type));  // rolled back
  return api->register_kernel_type(api->host, "GQADecodeFwdOp", &g_short_type);
}
static tr_status *init_on_short_base(const tr_backend_api *api) {
  return api->register_kernel_type(api->host, "GQADecodeFwdOp", &g_on_short_base);
}

TEST_CASE("register_kernel_type refuses a kernel type, or a base, shorter than version 1") {
  g_ok_type = sized_type("acme_ok", sizeof(tr_kernel_type));
  g_short_type = sized_type("acme_short", offsetof(tr_kernel_type, refusal));
  g_short_base = sized_type("acme_short_base", TR_KERNEL_TYPE_MIN_SIZE - 1);
  g_on_short_base = sized_type("acme_on_short_base", sizeof(tr_kernel_type), &g_short_base);
  Reg r;
  CHECK(tr_registry_load_builtin(r.reg, "old", init_short_type) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 0)->reason) ==
        "its init failed: BackendError: backend 'old': register_kernel_type for GQADecodeFwdOp: its "
        "tr_kernel_type has struct_size " + std::to_string(offsetof(tr_kernel_type, refusal)) +
            ", shorter than the " + std::to_string(sizeof(tr_kernel_type)) +
            " bytes of tr_kernel_type version 1 that tilerun reads; rebuild the backend against tilerun's headers");
  CHECK(tr_registry_load_builtin(r.reg, "older_base", init_on_short_base) == 0);
  CHECK_THAT(tr_registry_failure_at(r.reg, 1)->reason,
             Catch::Contains("backend 'older_base': register_kernel_type for GQADecodeFwdOp: the tr_kernel_type "
                             "of its base 1 level up has struct_size " +
                             std::to_string(TR_KERNEL_TYPE_MIN_SIZE - 1)));
  const tr_kernel_type *external[4];
  CHECK(tr_registry_kernel_types(r.reg, "GQADecodeFwdOp", external, 4) == 0);  // acme_ok rolled back
  CHECK(r.warnings.size() == 2);
}

// The finder a runtime sets: one op with one interface.
static const tr_kernel_interface *find_gqa(void *ctx, const char *op, const char *name) {
  ++*static_cast<int *>(ctx);
  const tr_kernel_interface *i = tr_test::gqa_decode_interface();
  return std::string(op) == "GQADecodeFwdOp" && std::string(name) == i->name ? i : nullptr;
}
static const tr_kernel_interface *g_found[3];
static tr_status *init_find(const tr_backend_api *api) {
  REQUIRE(TR_STRUCT_HAS(api, tr_backend_api, find_interface));
  g_found[0] = api->find_interface(api->host, "GQADecodeFwdOp", "GQADecodeDenseFwdInterface");
  g_found[1] = api->find_interface(api->host, "GQADecodeFwdOp", "NoSuchFwdInterface");
  g_found[2] = api->find_interface(api->host, "GemmFwdOp", "GQADecodeDenseFwdInterface");
  return nullptr;
}
static tr_kernel_type g_no_iface, g_foreign;
static tr_status *init_no_iface(const tr_backend_api *api) {
  return api->register_kernel_type(api->host, "GQADecodeFwdOp", &g_no_iface);
}
static tr_status *init_foreign(const tr_backend_api *api) {
  return api->register_kernel_type(api->host, "GemmFwdOp", &g_foreign);
}

TEST_CASE("find_interface answers from the registry's finder; a type's interface must be one of its op's") {
  Reg none;  // no finder: NULL for everything
  REQUIRE(tr_registry_load_builtin(none.reg, "finder", init_find) == 1);
  CHECK((g_found[0] == nullptr && g_found[1] == nullptr && g_found[2] == nullptr));
  Reg r;
  int asked = 0;
  tr_registry_set_interface_finder(r.reg, find_gqa, &asked);
  REQUIRE(tr_registry_load_builtin(r.reg, "finder", init_find) == 1);
  CHECK(g_found[0] == tr_test::gqa_decode_interface());
  CHECK(g_found[1] == nullptr);
  CHECK(g_found[2] == nullptr);
  CHECK(asked == 3);
  g_no_iface = sized_type("acme_no_iface", sizeof(tr_kernel_type));
  g_no_iface.interface = nullptr;
  CHECK(tr_registry_load_builtin(r.reg, "noiface", init_no_iface) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 0)->reason) ==
        "its init failed: BackendError: backend 'noiface': kernel type 'acme_no_iface' for GQADecodeFwdOp names "
        "no kernel interface (find it with the API table's find_interface)");
  g_foreign = sized_type("acme_foreign", sizeof(tr_kernel_type));  // GQA's interface, for GemmFwdOp
  CHECK(tr_registry_load_builtin(r.reg, "foreign", init_foreign) == 0);
  CHECK(std::string(tr_registry_failure_at(r.reg, 1)->reason) ==
        "its init failed: BackendError: backend 'foreign': kernel type 'acme_foreign' implements "
        "GQADecodeDenseFwdInterface, which is not a kernel interface of GemmFwdOp (find it with the API "
        "table's find_interface)");
  REQUIRE(tr_registry_load_builtin(r.reg, "vendor", init_vendor_type) == 1);  // the op's own: accepted
}

// Builders that fill in a kernel: whole, lowered to exactly version 1, or too short.
static tr_status *kernel_call(void *, DLTensor *const *, size_t, DLTensor *const *, size_t) { return nullptr; }
static int g_released = 0;
static void kernel_release(void *) { g_released++; }
static tr_status *build_sized(void *ctx, const tr_build_request *, tr_kernel *out) {
  size_t size = *static_cast<const size_t *>(ctx);
  if (size != 0) out->struct_size = size;  // 0: left as tilerun set it
  out->call = kernel_call;
  out->release = kernel_release;
  return nullptr;
}
static size_t g_sizes[3] = {0, TR_KERNEL_MIN_SIZE, offsetof(tr_kernel, request_tune)};
static tr_status *init_sized_builders(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "AddFwdOp", "left", build_sized, &g_sizes[0]));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "AddFwdOp", "exact", build_sized, &g_sizes[1]));
  return api->register_kernel_builder(api->host, "AddFwdOp", "short", build_sized, &g_sizes[2]);
}

TEST_CASE("a builder's tr_kernel shorter than version 1 is a BackendError, and nothing of it is kept") {
  Reg r;
  REQUIRE(tr_registry_load_builtin(r.reg, "sized", init_sized_builders) == 1);
  tr_device cpu;
  tr_test::ok(tr_device_make("cpu", TR_DEVICE_NO_INDEX, &cpu));
  auto build = [&](const char *target, tr_kernel *k) {
    tr_build_kernel_fn fn = nullptr;
    void *ctx = nullptr;
    REQUIRE(tr_registry_builder(r.reg, "AddFwdOp", target, &fn, &ctx));
    tr_build_request req = {"AddFwdOp", target, &cpu, nullptr, 0, nullptr, 0};
    *k = tr_kernel{};
    k->struct_size = sizeof(*k);
    return fn(ctx, &req, k);
  };
  tr_kernel k;
  tr_test::ok(build("left", &k));
  CHECK((k.call == kernel_call && k.release == kernel_release && k.struct_size == sizeof(tr_kernel)));
  tr_test::ok(build("exact", &k));
  CHECK((k.call == kernel_call && k.release == kernel_release));
  CHECK(tr_test::error_of(build("short", &k)) ==
        "BackendError: backend 'sized': the kernel built for (AddFwdOp, short) has struct_size " +
            std::to_string(offsetof(tr_kernel, request_tune)) + ", shorter than the " +
            std::to_string(TR_KERNEL_MIN_SIZE) +
            " bytes of tr_kernel version 1 that tilerun reads; rebuild the backend against tilerun's headers");
  CHECK((k.call == nullptr && k.release == nullptr && k.self == nullptr));  // left empty: nothing to release
  CHECK(g_released == 0);
}

TEST_CASE("a backend that registers nothing loads, with a warning saying it serves nothing") {
  Reg r;
  CHECK(tr_registry_load_builtin(r.reg, "empty", init_nothing) == 1);
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0] == "backend 'empty' loaded but registered nothing (no detector, kernel builder, device type, "
                         "facts, allocator or kernel type); it serves nothing");
  CHECK(tr_registry_failure_count(r.reg) == 0);
  CHECK(tr_registry_load_builtin(r.reg, "quiet", init_quiet) == 1);  // one that registers: no word
  CHECK(r.warnings.size() == 1);
}

TEST_CASE("a descriptor that fails before naming its backend is warned about by its path, once") {
  tr_test::TempDir dir;
  std::string bad = dir.write("bad.yaml", "name: bad\nlibrary: libbad.so\ncolor: red\n");
  const char *dirs[] = {dir.path};
  tr_discovery *found = nullptr;
  tr_test::ok(tr_backend_discover(dirs, 1, &found));
  REQUIRE(tr_discovery_failure_count(found) == 1);
  Reg r;
  tr_test::ok(tr_registry_load_all(r.reg, found));
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].find("backend descriptor not loaded: " + bad + ":3:1: ") == 0);
  CHECK(r.warnings[0].find(bad, bad.size()) == std::string::npos);  // the path once
  tr_discovery_destroy(&found);
}
