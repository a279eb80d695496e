// device_guard_test.cc (needs a GPU): a cuda build runs with the call's device current, and the
// caller's current device is restored afterwards; checked from inside a test builder. So does a
// tuning: a kernel built on each card tunes once on each, with that card current, whether tuned
// mode was asked before the builds or after (on every card of the machine: two on the two-GPU one).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include "runtime/runtime_testing.h"

static int g_current_in_build = -1;

static tr_status *noop(void *, DLTensor *const *, size_t, DLTensor *const *, size_t) { return nullptr; }

// Per card: how many tunings its kernel saw, and the current device and the device argument in
// the last one (-1: none).
struct TuneSeen {
  int count = 0, current = -1, argument = -1;
};
static TuneSeen g_tunes[16];

static tr_status *tune(void *self, const tr_device *device) {
  TuneSeen &seen = g_tunes[(intptr_t)self];
  seen.count++;
  cudaGetDevice(&seen.current);
  seen.argument = device->index;
  return nullptr;
}

static tr_status *build(void *, const tr_build_request *, tr_kernel *out) {
  cudaGetDevice(&g_current_in_build);
  out->call = noop;
  out->self = (void *)(intptr_t)g_current_in_build;  // the card it was built for
  out->request_tune = tune;
  return nullptr;
}

static tr_status *claim_cuda(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "cuda";
  return nullptr;
}

static tr_status *init(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "guarded", claim_cuda, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "guarded", build, nullptr);
}

// One call_into on cuda:d (a test backend's builder for cuda registers no allocator: the caller
// gives the output) made with cuda:0 current; cuda:0 is current again after it.
static void call_on(tr_op *op, int d) {
  float *buf = nullptr;
  REQUIRE(cudaSetDevice(d) == cudaSuccess);
  REQUIRE(cudaMalloc(&buf, 3 * 16 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int64_t shape[] = {16};
  DLTensor a{buf, {kDLCUDA, d}, 1, TR_FLOAT32, shape, nullptr, 0}, b = a, c = a;
  b.data = buf + 16;
  c.data = buf + 32;
  const DLTensor *in[] = {&a, &b};
  DLTensor *out[] = {&c};
  tr_test::ok(tr_op_call_into(op, in, 2, out, 1));
  int now = -1;
  REQUIRE(cudaGetDevice(&now) == cudaSuccess);
  CHECK(now == 0);  // restored after the build (and a tuning)
  cudaSetDevice(d);
  cudaFree(buf);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("each cuda build sees its call's device current; the caller's is restored") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  tr_runtime *rt = tr_test::runtime_with_builtin("guarded", init);
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  for (int d = count - 1; d >= 0; d--) {  // the last card first, so it differs from the caller's
    g_current_in_build = -1;
    call_on(op, d);
    CHECK(g_current_in_build == d);
  }
  CHECK(tr_op_memo_count(op) == (size_t)count);  // one build per card
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

// One op instance called on every card, the last first.
static void call_on_every_card(tr_op *op, int count) {
  for (int d = count - 1; d >= 0; d--) call_on(op, d);
}

TEST_CASE("a kernel built on each card tunes once on each, with that card current") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  REQUIRE(count <= 16);
  for (int early = 0; early < 2; early++) {
    INFO((early ? "tuned mode asked before the builds" : "tuned mode asked after the builds"));
    for (auto &seen : g_tunes) seen = TuneSeen{};
    tr_runtime *rt = tr_test::runtime_with_builtin("guarded", init);
    tr_op *op = nullptr;
    tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
    if (early) tr_test::ok(tr_op_request_tune(op));
    call_on_every_card(op, count);
    if (!early) {
      for (int d = 0; d < count; d++) CHECK(g_tunes[d].count == 0);  // not tuned until asked
      REQUIRE(cudaSetDevice(0) == cudaSuccess);
      tr_test::ok(tr_op_request_tune(op));
    }
    call_on_every_card(op, count);  // memo hits: no tuning again
    for (int d = 0; d < count; d++) {
      INFO("cuda:" << d);
      CHECK(g_tunes[d].count == 1);
      CHECK(g_tunes[d].current == d);
      CHECK(g_tunes[d].argument == d);
    }
    int now = -1;
    REQUIRE(cudaGetDevice(&now) == cudaSuccess);
    CHECK(now == 0);  // restored after request_tune
    tr_test::ok(tr_op_request_tune(op));  // a second request tunes each card's kernel again, once
    for (int d = 0; d < count; d++) {
      INFO("cuda:" << d);
      CHECK(g_tunes[d].count == 2);
      CHECK(g_tunes[d].current == d);
    }
    CHECK(tr_op_memo_count(op) == (size_t)count);
    tr_op_destroy(&op);
    tr_runtime_destroy(&rt);
  }
}

TEST_CASE("cuda facts are read from the device") {
  tr_runtime *rt = tr_test::runtime_without_backends();
  cudaDeviceProp prop;
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  tr_device cuda0 = {"cuda", 0};
  tr_device_facts f;
  tr_test::ok(tr_device_facts_of(rt, &cuda0, &f));
  CHECK(f.arch == prop.major * 10 + prop.minor);
  CHECK(f.sm_count == prop.multiProcessorCount);
  CHECK(f.smem_budget == (int64_t)prop.sharedMemPerBlockOptin);
  CHECK(f.calibration == nullptr);
  printf("cuda:0 facts: arch %d, sm_count %d, smem_budget %lld\n", f.arch, f.sm_count, (long long)f.smem_budget);
  tr_runtime_destroy(&rt);
}
