// settle_test.cc: the settle component's contract against every placement (inline, thread,
// `tilerun serve` over ipc and tcp), and the faults of a process component: killed mid-run,
// calls fail with the transport error within the deadline; restarted, calls succeed again.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "components/pipeline/pipeline_testing.h"
#include "components/settle/settle.h"
#include "components/settle/settle_client.h"

using namespace tr_test;

// The CPU backend, as the served process finds it (TILERUN_BACKEND_PATH).
static tr_registry *registry() {
  static tr_registry *reg = [] {
    tr_registry *r = nullptr;
    ok(tr_registry_new(nullptr, nullptr, &r));
    ok(tr_plat_setenv("TILERUN_BACKEND_PATH", "backends/cpu"));
    const char *dirs[] = {"backends/cpu"};
    tr_discovery *found = nullptr;
    ok(tr_backend_discover(dirs, 1, &found));
    ok(tr_registry_load_all(r, found));
    tr_discovery_destroy(&found);
    return r;
  }();
  return reg;
}

static std::string settle(Placed &p, const char *requested, const char *default_target, const char *device) {
  tr_device d;
  ok(tr_device_parse(device, &d));
  uint8_t request[512];
  size_t n = 0;
  ok(tr_settle_encode("AddFwdOp", requested, default_target, &d, request, sizeof(request), &n));
  std::string reply;
  tr_status *s = p.raw_call(std::vector<uint8_t>(request, request + n), &reply);
  char target[32];
  if (s == nullptr) s = tr_settle_decode((const uint8_t *)reply.data(), reply.size(), target);
  return s ? error_of(s) : std::string(target);
}

TEST_CASE("the settle contract holds in every placement") {
  for (Where where : every_placement()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_SETTLE, where, tr_settle_handle, registry());
    CHECK(settle(p, nullptr, nullptr, "cpu") == "cpu");               // detection
    CHECK(settle(p, nullptr, nullptr, "cuda:0") == TR_BUILTIN);       // nobody claims it
    CHECK(settle(p, TR_BUILTIN, nullptr, "cpu") == TR_BUILTIN);       // the op's own choice first
    CHECK(settle(p, nullptr, TR_BUILTIN, "cpu") == TR_BUILTIN);       // then the default
    CHECK(settle(p, "nope", nullptr, "cpu") ==
          "UnknownTargetError: no backend registered target 'nope'; known targets: ['cpu']");
  }
}

TEST_CASE("a process component killed mid-run: the transport error at once, well within the "
          "deadline, then calls succeed after a restart") {
  Placed p(TR_COMPONENT_SETTLE, Where::kIpc, tr_settle_handle, registry(), 5000);
  CHECK(settle(p, nullptr, nullptr, "cpu") == "cpu");
  p.stop_server(true);  // SIGKILL: no goodbye
  tr_plat_sleep_ns(100000000);  // the kernel closes the dead server's end
  for (int i = 0; i < 3; i++) {
    uint64_t start = tr_plat_now_ns();
    CHECK(settle(p, nullptr, nullptr, "cpu") ==
          "TransportError: component 'settle' at " + p.endpoint + " dropped the connection (the server "
          "ended or stopped answering); calls fail at once until it is back");
    double ms = (double)(tr_plat_now_ns() - start) / 1e6;
    CHECK(ms < 1000);  // not the 5 s deadline
  }
  p.start_server();
  p.wait_ready();
  CHECK(settle(p, nullptr, nullptr, "cpu") == "cpu");  // reconnected
}

// Through the client: the same answers and errors in every placement (inline, the registry
// settles the struct; elsewhere, through messages).
static std::string settle_client(tr_pipeline *p, const char *requested, const char *default_target,
                                 const char *device) {
  tr_settle_request req = {"AddFwdOp", requested, default_target, {"", 0}};
  ok(tr_device_parse(device, &req.device));
  tr_settled out;
  tr_status *s = tr_settle_call(p, &req, &out);
  return s ? error_of(s) : std::string(out.target);
}

TEST_CASE("the settle client answers alike in every placement") {
  for (Where where : every_placement()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_SETTLE, where, tr_settle_handle, registry());
    tr_status *first = when_served([&] {
      tr_settle_request req = {"AddFwdOp", nullptr, nullptr, {"cpu", TR_DEVICE_NO_INDEX}};
      tr_settled out;
      return tr_settle_call(p.pipeline, &req, &out);
    });
    REQUIRE(first == nullptr);
    CHECK(settle_client(p.pipeline, nullptr, nullptr, "cpu") == "cpu");
    CHECK(settle_client(p.pipeline, nullptr, nullptr, "cuda:0") == TR_BUILTIN);
    CHECK(settle_client(p.pipeline, TR_BUILTIN, nullptr, "cpu") == TR_BUILTIN);
    CHECK(settle_client(p.pipeline, nullptr, TR_BUILTIN, "cpu") == TR_BUILTIN);
    CHECK(settle_client(p.pipeline, "nope", nullptr, "cpu") ==
          "UnknownTargetError: no backend registered target 'nope'; known targets: ['cpu']");
  }
}

static tr_manifest *manifest() {
  static tr_manifest *m = [] {
    tr_manifest *loaded = nullptr;
    ok(tr_manifest_load_dir("manifest/spec", &loaded));
    return loaded;
  }();
  return m;
}

// Validate and settle asked together, each inline or in a thread: validate's answer and the
// target, or validate's error (settle's reply not waited for), or settle's.
TEST_CASE("validate and settle asked together, in every pairing of inline and thread") {
  const tr_placement places[] = {TR_PLACE_INLINE, TR_PLACE_THREAD};
  for (tr_placement v : places) {
    for (tr_placement s : places) {
      INFO("validate " << (int)v << ", settle " << (int)s);
      tr_pipeline_config config;
      tr_pipeline_config_default(&config);
      config.components[TR_COMPONENT_VALIDATE].placement = v;
      config.components[TR_COMPONENT_SETTLE].placement = s;
      tr_component_handler handlers[TR_COMPONENT_COUNT] = {tr_validate_handle, tr_settle_handle, nullptr, nullptr,
                                                           nullptr};
      void *contexts[TR_COMPONENT_COUNT] = {manifest(), registry(), nullptr, nullptr, nullptr};
      tr_pipeline *p = nullptr;
      ok(tr_pipeline_new(&config, handlers, contexts, &p));
      tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
      tr_tensor_spec a;
      int64_t shape[] = {3};
      ok(tr_tensor_spec_make(&cpu, {kDLFloat, 32, 1}, 1, shape, &a));
      const tr_tensor_spec *in[] = {&a, &a};
      tr_validate_request vreq = {"AddFwdOp", nullptr, 0, in, 2};
      tr_settle_request sreq = {"AddFwdOp", nullptr, nullptr, cpu};
      tr_validated validated;
      tr_settled settled;
      ok(tr_settle_call_with_validate(p, &vreq, &sreq, &validated, &settled));
      CHECK(std::string(settled.target) == "cpu");
      CHECK(validated.n_outputs == 1);
      tr_validated_clear(&validated);
      tr_validate_request one = {"AddFwdOp", nullptr, 0, in, 1};  // other: required
      CHECK(error_of(tr_settle_call_with_validate(p, &one, &sreq, &validated, &settled)).find("SignatureError") == 0);
      CHECK(std::string(settled.target).empty());
      tr_settle_request nope = {"AddFwdOp", "nope", nullptr, cpu};
      CHECK(error_of(tr_settle_call_with_validate(p, &vreq, &nope, &validated, &settled)) ==
            "UnknownTargetError: no backend registered target 'nope'; known targets: ['cpu']");
      CHECK(validated.n_settled == 0);
      tr_pipeline_destroy(&p);
    }
  }
}
