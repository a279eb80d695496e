// settle_test.cc: the settle component's contract against every placement (inline, thread,
// `tilerun serve` over ipc and tcp), and the faults of a process component: killed mid-run,
// calls fail with the transport error within the deadline; restarted, calls succeed again.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "components/pipeline/pipeline_testing.h"
#include "components/settle/settle.h"

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

TEST_CASE("a process component killed mid-run: the transport error within the deadline, then "
          "calls succeed after a restart") {
  Placed p(TR_COMPONENT_SETTLE, Where::kIpc, tr_settle_handle, registry(), 500);
  CHECK(settle(p, nullptr, nullptr, "cpu") == "cpu");
  p.stop_server(true);  // SIGKILL: no goodbye
  for (int i = 0; i < 3; i++) {
    uint64_t start = tr_plat_now_ns();
    CHECK(settle(p, nullptr, nullptr, "cpu") ==
          "TransportError: component 'settle' at " + p.endpoint + " did not answer within 500 ms");
    double ms = (double)(tr_plat_now_ns() - start) / 1e6;
    CHECK(ms >= 450);
    CHECK(ms < 1500);  // within the deadline (and a margin), never a hang
  }
  p.start_server();
  p.wait_ready();
  CHECK(settle(p, nullptr, nullptr, "cpu") == "cpu");  // reconnected
}
