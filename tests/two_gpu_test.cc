// two_gpu_test.cc (needs two GPUs: the nvidia-h200-x2 machine): one op instance on two cards.
// A call on cuda:0 then on cuda:1 builds twice (two memo entries, each card's artifacts loaded on
// it) and each result matches float64; a call with inputs on both cards is refused by validation
// naming both devices, before any build; two threads, one per card, call the same op instance
// 10,000 times each at once, and every result is correct on its own card. The cuda output pools
// are scoped per runtime and per card: a runtime destroyed while another runtime's graph replays
// on the other card gives back its own blocks only, and the replays stay right; an output of
// cuda:1 freed with cuda:0 current while cuda:1's stream is captured is parked, not reused.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/intree/intree.h"
#include "runtime/cuda_testing.h"
#include "runtime/runtime_testing.h"

namespace {

using namespace tr_test;

tr_runtime *cuda_runtime() { return runtime_without_backends(); }
std::vector<float> values(size_t n, unsigned seed) { return random_values(n, seed); }

struct OnDevice {
  int device;
  float *ptr = nullptr;
  size_t n;
  OnDevice(int d, const std::vector<float> &v) : device(d), n(v.size()) {
    REQUIRE(cudaSetDevice(d) == cudaSuccess);
    REQUIRE(cudaMalloc(&ptr, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemcpy(ptr, v.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  OnDevice(int d, size_t count) : device(d), n(count) {
    REQUIRE(cudaSetDevice(d) == cudaSuccess);
    REQUIRE(cudaMalloc(&ptr, n * sizeof(float)) == cudaSuccess);
  }
  ~OnDevice() {
    cudaSetDevice(device);
    cudaFree(ptr);
  }
  std::vector<float> host(size_t offset = 0, size_t count = 0) const {
    std::vector<float> out(count ? count : n);
    cudaSetDevice(device);
    cudaDeviceSynchronize();
    REQUIRE(cudaMemcpy(out.data(), ptr + offset, out.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
};

DLTensor view(const OnDevice &t, std::vector<int64_t> &shape) {
  return DLTensor{t.ptr, {kDLCUDA, t.device}, (int32_t)shape.size(), TR_FLOAT32, shape.data(), nullptr, 0};
}

void need_two() {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  INFO("this test needs two GPUs; found " << count);
  REQUIRE(count >= 2);
}

}  // namespace

TEST_CASE("one op instance on cuda:0 then cuda:1 builds once per card and is right on each") {
  need_two();
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 4096);
  std::vector<float> xv = values(7 * 4096, 1), wv = values(4096, 2);
  std::vector<int64_t> xs = {7, 4096}, ws = {4096};
  for (int d = 0; d < 2; d++) {
    OnDevice x(d, xv), w(d, wv);
    DLTensor tx = view(x, xs), tw = view(w, ws);
    const DLTensor *in[] = {&tx, &tw};
    tr_intree_stats before = tr_intree_get_stats();
    REQUIRE(cudaSetDevice(0) == cudaSuccess);  // the caller's current device: not the call's for d = 1
    tr_test::Outputs out;
    ok(tr_op_call(op, in, 2, out.items, 1));
    int now = -1;
    REQUIRE(cudaGetDevice(&now) == cudaSuccess);
    CHECK(now == 0);  // restored after the build
    CHECK(out.items[0]->dl_tensor.device.device_id == d);
    CHECK(tr_op_memo_count(op) == (size_t)d + 1);  // a second entry for the second card
    tr_intree_stats after = tr_intree_get_stats();
    CHECK(after.kernels == before.kernels + 1);
    CHECK(after.loaded >= before.loaded + 1);  // this card's own modules
    std::vector<float> got(7 * 4096);
    REQUIRE(cudaSetDevice(d) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(got.data(), out.items[0]->dl_tensor.data, got.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(mismatches(got, rms_ref(xv, wv, 4096)) == 0);
  }
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a call with inputs on two cards is refused by validation, naming both, before any build") {
  need_two();
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 256);
  std::vector<int64_t> xs = {2, 256}, ws = {256};
  OnDevice x(0, values(512, 3)), w(1, values(256, 4));
  DLTensor tx = view(x, xs), tw = view(w, ws);
  const DLTensor *in[] = {&tx, &tw};
  tr_intree_stats before = tr_intree_get_stats();
  tr_test::Outputs out;
  tr_status *s = tr_op_call(op, in, 2, out.items, 1);
  REQUIRE(s != nullptr);
  std::string msg = tr_status_message(s);
  INFO(msg);
  CHECK(msg.find("cuda:1") != std::string::npos);
  CHECK(msg.find("cuda:0") != std::string::npos);
  CHECK(msg.find("all inputs of a call are on one device") != std::string::npos);
  tr_status_destroy(&s);
  CHECK(tr_op_memo_count(op) == 0);
  CHECK(tr_intree_get_stats().kernels == before.kernels);  // no build
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("two threads, one per card, 10,000 calls each on one op instance: every result right") {
  need_two();
  tr_runtime *rt = cuda_runtime();
  const int64_t kRow = 256, kRows = 4;
  const int kCalls = 10000, kInputs = 4;
  tr_op *op = rms_op(rt, kRow);
  std::vector<std::vector<float>> xv;
  for (int i = 0; i < kInputs; i++) xv.push_back(values(kRows * kRow, 10 + i));
  std::vector<float> wv = values(kRow, 20);
  std::vector<std::vector<double>> want;
  for (auto &x : xv) want.push_back(rms_ref(x, wv, kRow));
  size_t bad[2] = {0, 0};
  tr_status *failed[2] = {nullptr, nullptr};
  auto run = [&](int d) {
    std::vector<OnDevice *> xs;
    for (auto &x : xv) xs.push_back(new OnDevice(d, x));
    OnDevice w(d, wv), y(d, (size_t)kCalls * kRows * kRow);
    std::vector<int64_t> xshape = {kRows, kRow}, wshape = {kRow};
    DLTensor tw = view(w, wshape);
    for (int i = 0; i < kCalls && failed[d] == nullptr; i++) {
      DLTensor tx = view(*xs[i % kInputs], xshape);
      DLTensor ty = {y.ptr + (size_t)i * kRows * kRow, {kDLCUDA, d}, 2, TR_FLOAT32, xshape.data(), nullptr, 0};
      const DLTensor *in[] = {&tx, &tw};
      DLTensor *out[] = {&ty};
      failed[d] = tr_op_call_into(op, in, 2, out, 1);
    }
    std::vector<float> got = y.host();
    for (int i = 0; i < kCalls; i++) bad[d] += mismatches(got, want[i % kInputs], (size_t)i * kRows * kRow);
    for (auto *x : xs) delete x;
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (int d = 0; d < 2; d++) {
    INFO("cuda:" << d << ": " << (failed[d] ? tr_status_message(failed[d]) : "ok"));
    CHECK(failed[d] == nullptr);
    CHECK(bad[d] == 0);
    tr_status_destroy(&failed[d]);
  }
  CHECK(tr_op_memo_count(op) == 2);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a runtime destroyed while another runtime's graph replays on the other card: only its own blocks go") {
  need_two();
  const int64_t row = 4096, rows = 64;
  tr_runtime *a = cuda_runtime(), *b = cuda_runtime();
  tr_op *op_a = rms_op(a, row), *op_b = rms_op(b, row);
  std::vector<float> xv = values((size_t)(rows * row), 51), wv = values(row, 52), sv = values(2 * (size_t)row, 53);
  std::vector<int64_t> xs = {rows, row}, ws = {row}, ss = {2, row};
  OnDevice x1(1, xv), w1(1, wv), w0(0, wv);
  // runtime a makes and frees a small output on each card: a block kept in a's pool on each
  const uint64_t kept_at_start = tr_intree_get_stats().pool_kept;
  for (int d = 0; d < 2; d++) {
    OnDevice small(d, sv), w(d, wv);
    DLTensor ts = view(small, ss), tw = view(w, ws);
    const DLTensor *in[] = {&ts, &tw};
    tr_test::Outputs out;
    ok(tr_op_call(op_a, in, 2, out.items, 1));
    REQUIRE(cudaSetDevice(d) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  CHECK(tr_intree_get_stats().pool_kept == kept_at_start + 2);
  // runtime b, on cuda:1: an output made before a capture, written by the captured call, freed
  // during the capture (parked in b's pool: the graph writes it at every replay)
  DLTensor tx = view(x1, xs), tw = view(w1, ws);
  const DLTensor *in[] = {&tx, &tw};
  tr_test::Outputs made;
  ok(tr_op_call(op_b, in, 2, made.items, 1));
  DLTensor target = made.items[0]->dl_tensor;
  REQUIRE(target.device.device_id == 1);
  DLTensor *into[] = {&target};
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemset(target.data, 0, (size_t)(rows * row) * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  // the captured call and the free with cuda:0 current: the pool asks about cuda:1's per-thread
  // stream, not the current context's
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ok(tr_op_call_into(op_b, in, 2, into, 1));
  made.reset();  // freed while cuda:1's stream is captured: parked, not kept for reuse
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t used1_with_both = driver_pool_used(1), used0_with_a = driver_pool_used(0);
  const uint64_t kept_before = tr_intree_get_stats().pool_kept;
  // the graph replays on cuda:1 while runtime a is destroyed from cuda:0: 500 replays queued
  // (each enqueue takes the host about as long as the replay takes the card, so the last are
  // still queued or running when the destruction begins)
  for (int i = 0; i < 500; i++) REQUIRE(cudaGraphLaunch(exec, cudaStreamPerThread) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  tr_op_destroy(&op_a);
  tr_runtime_destroy(&a);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(driver_pool_used(0) < used0_with_a);  // a's block on cuda:0 is the driver's again
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t block_b = (uint64_t)(rows * row) * sizeof(float);
  const uint64_t used1_after_a = driver_pool_used(1);
  CHECK(tr_intree_get_stats().pool_kept == kept_before - 2);  // a's two blocks, and only they
  CHECK(used1_after_a < used1_with_both);                       // a's block on cuda:1 is the driver's again
  CHECK(used1_with_both - used1_after_a < block_b);             // b's 1 MiB block is not
  for (int i = 0; i < 3; i++) REQUIRE(cudaGraphLaunch(exec, cudaStreamPerThread) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  std::vector<float> got((size_t)(rows * row));
  REQUIRE(cudaMemcpy(got.data(), target.data, got.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(mismatches(got, rms_ref(xv, wv, row)) == 0);
  {  // an eager call of b's on cuda:1 at the same size gets a block of its own, not the parked one
    tr_test::Outputs again;
    ok(tr_op_call(op_b, in, 2, again.items, 1));
    CHECK(again.items[0]->dl_tensor.data != target.data);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  // b still calls on cuda:0 (a's end left b's state there alone)
  {
    OnDevice x0(0, xv);
    DLTensor t0 = view(x0, xs), tw0 = view(w0, ws);
    const DLTensor *in0[] = {&t0, &tw0};
    tr_test::Outputs out;
    ok(tr_op_call(op_b, in0, 2, out.items, 1));
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(got.data(), out.items[0]->dl_tensor.data, got.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    CHECK(mismatches(got, rms_ref(xv, wv, row)) == 0);
  }
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  tr_op_destroy(&op_b);
  tr_runtime_destroy(&b);
}
