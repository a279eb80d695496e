// cuda_ops_test.cc (needs a GPU): the in-tree CUDA path end to end through the runtime: a call on
// cuda settles BUILTIN, selects, builds once per signature (the memo), loads an artifact from the
// disk cache in a second runtime, launches on the caller's current stream, copies strided inputs,
// allocates outputs stream-ordered, can be captured into a CUDA graph and replayed, and refuses
// what no implementation serves with the implementations' reasons. Correctness against PyTorch
// for every dtype and row length is python/tests/test_ops_gpu.py.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/artifact.h"
#include "kernels/cuda/pool.h"
#include "kernels/intree/intree.h"
#include "platform/platform.h"
#include "runtime/cuda_testing.h"
#include "runtime/runtime_testing.h"

namespace {

using namespace tr_test;

tr_runtime *cuda_runtime() { return runtime_without_backends(); }
std::vector<float> values(size_t n, unsigned seed) { return random_values(n, seed); }

void near(const std::vector<float> &got, const std::vector<double> &want, double tol) {
  REQUIRE(got.size() == want.size());
  CHECK(mismatches(got, want, 0, tol) == 0);
}

struct CacheDir {  // a fresh disk cache folder for the builds from now on
  char *path = nullptr;
  CacheDir() {
    ok(tr_plat_make_temp_dir("tilerun-cache", &path));
    ok(tr_plat_setenv("TILERUN_CACHE_DIR", path));
    tr_intree_reload_cache();  // the process read the folder at its first build
  }
  ~CacheDir() {
    tr_status *unset = tr_plat_setenv("TILERUN_CACHE_DIR", "");  // empty: as if not set
    tr_status_destroy(&unset);
    tr_intree_reload_cache();
    tr_status *s = tr_plat_remove_tree(path);
    tr_status_destroy(&s);
    free(path);
  }
};

// The data of an output tr_op_call makes on a new thread (so on that thread's per-thread default
// stream), after `first` runs there; nullptr when the call fails. The output is freed there.
void *output_on_another_thread(tr_op *op, const DLTensor *const *in, size_t n_in,
                               const std::function<void()> &first = [] {}) {
  void *data = nullptr;
  std::thread t([&] {
    first();
    tr_test::Outputs c;
    tr_status *s = tr_op_call(op, in, n_in, c.items, 1);
    if (s == nullptr) data = c.items[0]->dl_tensor.data;
    tr_status_destroy(&s);
    cudaStreamSynchronize(cudaStreamPerThread);
  });
  t.join();
  return data;
}

// Two threads taking turns: advance(k) says stage k is reached, await(k) waits for it.
struct Stages {
  std::mutex m;
  std::condition_variable cv;
  int stage = 0;
  void advance(int to) {
    std::lock_guard<std::mutex> g(m);
    stage = to;
    cv.notify_all();
  }
  void await(int at) {
    std::unique_lock<std::mutex> g(m);
    cv.wait(g, [&] { return stage >= at; });
  }
};

}  // namespace

TEST_CASE("a cuda call settles BUILTIN, builds once per signature, and matches float64") {
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 4096);
  std::vector<float> xv = values(7 * 4096, 1), wv = values(4096, 2);
  CudaTensor x({7, 4096}, xv), w({4096}, wv);
  const DLTensor *in[] = {&x.t, &w.t};
  tr_intree_stats before = tr_intree_get_stats();
  for (int i = 0; i < 3; i++) {
    tr_test::Outputs out;
    ok(tr_op_call(op, in, 2, out.items, 1));
    CHECK(out.items[0]->dl_tensor.device.device_type == kDLCUDA);
    near(host(out.items[0]->dl_tensor), rms_ref(xv, wv, 4096), 1e-5);
  }
  CHECK(std::string(tr_op_target(op)) == TR_BUILTIN);
  {  // an output freed on the default stream is reused by the next call of that size
    tr_test::Outputs a, b;
    ok(tr_op_call(op, in, 2, a.items, 1));
    void *first = a.items[0]->dl_tensor.data;
    a.reset();
    ok(tr_op_call(op, in, 2, b.items, 1));
    CHECK(b.items[0]->dl_tensor.data == first);
    near(host(b.items[0]->dl_tensor), rms_ref(xv, wv, 4096), 1e-5);
    b.reset();
    // ... but not by another thread: its per-thread default stream is another stream
    void *other = output_on_another_thread(op, in, 2);
    CHECK(other != nullptr);
    CHECK(other != first);
  }
  CHECK(tr_op_memo_count(op) == 1);
  CHECK(tr_intree_get_stats().kernels == before.kernels + 1);  // built once for three calls
  CudaTensor x2({3, 4096}, values(3 * 4096, 3));                 // another signature: a second entry
  const DLTensor *in2[] = {&x2.t, &w.t};
  tr_test::Outputs out2;
  ok(tr_op_call(op, in2, 2, out2.items, 1));
  CHECK(tr_op_memo_count(op) == 2);
  out2.reset();  // before the runtime goes: its pool is trimmed then
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("an output goes back in the order of the stream it was made on, whoever frees it") {
  // A block reused on another stream than the one whose kernel last wrote it would be written
  // while that kernel may still run: the pool keys blocks by the stream (and, for the per-thread
  // default stream, the thread) that made them, not by whoever frees them.
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 4096);
  std::vector<float> xv = values(5 * 4096, 11), wv = values(4096, 12);
  CudaTensor x({5, 4096}, xv), w({4096}, wv);
  const DLTensor *in[] = {&x.t, &w.t};
  tr_cuda_trim(rt);  // an empty pool (an earlier test may have left blocks in it)
  {  // made by this thread, freed by another: the other thread does not get it; this one does
    tr_test::Outputs a;
    ok(tr_op_call(op, in, 2, a.items, 1));
    void *made = a.items[0]->dl_tensor.data;
    void *other = output_on_another_thread(op, in, 2, [&] { a.reset(); });  // freed on the other thread
    CHECK(other != nullptr);
    CHECK(other != made);
    tr_test::Outputs b;
    ok(tr_op_call(op, in, 2, b.items, 1));
    CHECK(b.items[0]->dl_tensor.data == made);  // back to the thread that made it
    near(host(b.items[0]->dl_tensor), rms_ref(xv, wv, 4096), 1e-5);
  }
  {  // made on a stream of the caller's, freed after the current stream went back to the
     // per-thread default: freed on its stream, not pooled for the per-thread one
    CudaTensor x3({3, 4096}, values(3 * 4096, 13));
    const DLTensor *in3[] = {&x3.t, &w.t};
    cudaStream_t stream;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    ok(tr_cuda_set_stream(0, stream));
    tr_test::Outputs a;
    ok(tr_op_call(op, in3, 2, a.items, 1));
    ok(tr_cuda_set_stream(0, nullptr));
    a.reset();  // goes back on `stream`
    uint64_t hits = tr_intree_get_stats().pool_hits;
    tr_test::Outputs later;
    ok(tr_op_call(op, in3, 2, later.items, 1));
    CHECK(tr_intree_get_stats().pool_hits == hits);  // not from the pool
    later.reset();  // made on the per-thread stream, freed there: pooled, and the next is a hit
    tr_test::Outputs again;
    ok(tr_op_call(op, in3, 2, again.items, 1));
    CHECK(tr_intree_get_stats().pool_hits == hits + 1);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    cudaStreamDestroy(stream);
  }
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a full pool makes room for another thread's block with one of the freeing thread's own") {
  // A worker makes an output and waits; this thread fills the pool with its own blocks, then
  // frees the worker's output: one of its own blocks is freed to make room, and the worker's next
  // allocation of that size gets its block back.
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 4096);
  std::vector<float> wv = values(4096, 21);
  CudaTensor x1({1, 4096}, values(4096, 22)), x2({2, 4096}, values(2 * 4096, 23)), w({4096}, wv);
  const DLTensor *in1[] = {&x1.t, &w.t}, *in2[] = {&x2.t, &w.t};
  tr_cuda_trim(rt);
  Stages stages;
  auto advance = [&](int to) { stages.advance(to); };
  auto await = [&](int at) { stages.await(at); };
  void *made = nullptr, *again = nullptr;
  tr_test::Outputs theirs;
  std::thread worker([&] {
    tr_status *s = tr_op_call(op, in1, 2, theirs.items, 1);
    if (s == nullptr) made = theirs.items[0]->dl_tensor.data;
    tr_status_destroy(&s);
    cudaStreamSynchronize(cudaStreamPerThread);
    advance(1);
    await(2);
    tr_test::Outputs next;
    s = tr_op_call(op, in1, 2, next.items, 1);
    if (s == nullptr) again = next.items[0]->dl_tensor.data;
    tr_status_destroy(&s);
    cudaStreamSynchronize(cudaStreamPerThread);
    advance(3);
  });
  await(1);
  {
    std::vector<tr_test::Outputs> mine(TR_CUDA_POOL_BLOCKS);
    for (auto &o : mine) ok(tr_op_call(op, in2, 2, o.items, 1));
  }  // freed: the pool is full of this thread's blocks
  theirs.reset();  // the worker's block, freed here
  uint64_t hits = tr_intree_get_stats().pool_hits;
  advance(2);
  await(3);
  worker.join();
  REQUIRE(made != nullptr);
  CHECK(again == made);  // kept for the worker
  CHECK(tr_intree_get_stats().pool_hits == hits + 1);
  {  // this thread has one block fewer: of as many calls as the pool holds, one is not a hit
    std::vector<tr_test::Outputs> mine(TR_CUDA_POOL_BLOCKS);
    for (auto &o : mine) ok(tr_op_call(op, in2, 2, o.items, 1));
    CHECK(tr_intree_get_stats().pool_hits == hits + 1 + TR_CUDA_POOL_BLOCKS - 1);
    near(host(mine.back().items[0]->dl_tensor), rms_ref(values(2 * 4096, 23), wv, 4096), 1e-5);
  }
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

namespace {

// What a thread exit hook registered before any call saw: it runs after the runtime's own (hooks
// run last registered first), so it tells the state the runtime's hook left, and before the
// driver's clean-up of the thread.
struct AtExit {
  cudaError_t stream_query = cudaErrorUnknown;  // the thread's per-thread default stream then
  uint64_t kept = 0, released = 0;               // the pool's counts then
};
void record_at_exit(void *arg) {
  AtExit *seen = static_cast<AtExit *>(arg);
  seen->stream_query = cudaStreamQuery(cudaStreamPerThread);
  tr_intree_stats s = tr_intree_get_stats();
  seen->kept = s.pool_kept;
  seen->released = s.pool_released;
}

// Exit-time code that calls: `calls` calls (into `into` when given, else each output allocated and
// freed), then whether they were still queued.
struct LateCalls {
  tr_op *op = nullptr;
  const DLTensor *const *in = nullptr;
  DLTensor *const *into = nullptr;
  int calls = 0, made = 0, failed = 0;
  bool queued = false;
};
void calls_at_exit(void *arg) {
  LateCalls *late = static_cast<LateCalls *>(arg);
  for (; late->made < late->calls && !late->failed; late->made++) {
    tr_test::Outputs out;
    tr_status *s = late->into ? tr_op_call_into(late->op, late->in, 2, late->into, 1)
                              : tr_op_call(late->op, late->in, 2, out.items, 1);
    late->failed = s != nullptr;
    tr_status_destroy(&s);
  }
  late->queued = cudaStreamQuery(cudaStreamPerThread) == cudaErrorNotReady;
}

// Exit-time code that reads the thread's own output `x` in a call, then lets the main thread free
// `x` (stage 1) and waits until it has (stage 2).
struct LateUse {
  tr_op *op = nullptr;
  const DLTensor *w = nullptr;
  DLManagedTensor *x = nullptr;
  int failed = 0;
  Stages stages;
};
void use_at_exit(void *arg) {
  LateUse *late = static_cast<LateUse *>(arg);
  if (late->x != nullptr) {  // else the thread's own call failed
    const DLTensor *in[] = {&late->x->dl_tensor, late->w};
    tr_test::Outputs out;
    tr_status *s = tr_op_call(late->op, in, 2, out.items, 1);
    late->failed = s != nullptr;
    tr_status_destroy(&s);
  }
  late->stages.advance(1);
  late->stages.await(2);
}

uint64_t pool_used() {  // what the driver's pool of device 0, where outputs come from, has handed out
  cudaMemPool_t pool;
  unsigned long long v = 0;  // the attribute is 64 bits
  if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess) return ~0ull;
  (void)cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v);
  return (uint64_t)v;
}

}  // namespace

TEST_CASE("calls a thread makes as it ends after the runtime's hook ran are waited for too") {
  // Exit-time code registered before the thread's first call runs after the runtime's hook. If it
  // calls, its first allocation or launch on the per-thread stream registers the hook again,
  // once, which then waits for that stream (and keeps nothing: the ending thread keeps no block).
  // Checked by mutation on the H200: without the launch path's re-registration the thread never
  // finished ending (the driver hang the hook exists for; the test then times out); registered
  // at every call, the hook ran 151 times.
  tr_runtime *rt = cuda_runtime();
  const int64_t row = 8192, rows = 4096;  // 128 MiB in and out
  tr_op *op = rms_op(rt, row);
  std::vector<float> wv = values((size_t)row, 41);
  CudaTensor x({rows, row}, values((size_t)(rows * row), 42)), w({row}, wv);
  CudaTensor small({2, row}, values(2 * (size_t)row, 43));
  CudaTensor y({rows, row}, std::vector<float>((size_t)(rows * row), NAN));
  const DLTensor *in[] = {&x.t, &w.t}, *in_small[] = {&small.t, &w.t};
  DLTensor *into[] = {&y.t};
  tr_cuda_trim(rt);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  tr_intree_stats before = tr_intree_get_stats();
  const uint64_t used_before = pool_used();
  AtExit seen;
  LateCalls allocating, launching;  // run in this order, each after a run of the runtime's hook
  allocating.op = launching.op = op;
  allocating.in = launching.in = in;
  launching.into = into;
  allocating.calls = launching.calls = 50;
  int hooked = 0, failed = 0;
  std::thread t([&] {
    // hooks run last registered first: the runtime's (registered by the first call below), the
    // allocating calls, the runtime's again, the calls into `y`, the runtime's again, the check
    hooked = tr_plat_at_thread_exit(record_at_exit, &seen) + tr_plat_at_thread_exit(calls_at_exit, &launching) +
             tr_plat_at_thread_exit(calls_at_exit, &allocating);
    tr_test::Outputs out;
    tr_status *s = tr_op_call(op, in_small, 2, out.items, 1);
    failed = s != nullptr;
    tr_status_destroy(&s);
  });
  t.join();
  REQUIRE(hooked == 3);
  REQUIRE(failed == 0);
  REQUIRE(allocating.failed == 0);
  REQUIRE(launching.failed == 0);
  CHECK(allocating.made == 50);
  CHECK(launching.made == 50);
  // each set of late calls was still queued when its exit-time function returned ...
  CHECK(allocating.queued);
  CHECK(launching.queued);
  // ... and the thread had waited for all of them before its end
  CHECK(seen.stream_query == cudaSuccess);
  // the runtime's hook ran three times: at the end, and once after each set of late calls (not
  // once per call)
  CHECK(tr_intree_get_stats().thread_ends == before.thread_ends + 3);
  CHECK(seen.released == before.pool_released + 1);  // the first call's block went back
  CHECK(seen.kept == before.pool_kept);               // the late calls' were freed, not kept
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(pool_used() == used_before);
  std::vector<float> got = host(y.t);  // the calls into y are right
  std::vector<float> last_row(got.end() - row, got.end());
  std::vector<float> xv = host(x.t);
  near(last_row, rms_ref(std::vector<float>(xv.end() - row, xv.end()), wv, row), 1e-5);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("an output another thread frees after the thread that made it ended goes back to the driver") {
  // Once a thread has ended, and its hook has waited for its per-thread stream, nobody can take a
  // block kept for it: an output it made that another thread frees later is freed then, on the
  // freeing thread's current stream, not kept for the ended thread (it used to stay in the pool
  // until tr_cuda_trim, so short-lived workers whose outputs another thread freed made the
  // pool hold all of them). With the legacy stream current, it is freed on the freeing thread's
  // per-thread stream instead (the legacy stream would wait for a stream being captured, which
  // breaks the capture), and parked while that one is captured.
  tr_runtime *rt = cuda_runtime();
  const int64_t row = 4096, rows = 1024;  // 16 MiB out
  tr_op *op = rms_op(rt, row);
  std::vector<float> wv = values((size_t)row, 41), xv = values((size_t)(rows * row), 42);
  CudaTensor x({rows, row}, xv), w({row}, wv);
  const DLTensor *in[] = {&x.t, &w.t};
  tr_cuda_trim(rt);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t used_before = pool_used();
  const tr_intree_stats before = tr_intree_get_stats();
  enum { CURRENT, LEGACY, LEGACY_CAPTURING, WORKERS };
  uint64_t freed = 0;  // orphans freed so far
  for (int worker = 0; worker < WORKERS; worker++) {
    tr_test::Outputs theirs;
    int failed = 0;
    std::thread t([&] {
      tr_status *s = tr_op_call(op, in, 2, theirs.items, 1);
      failed = s != nullptr;
      tr_status_destroy(&s);
    });  // ends with its output alive, held here
    t.join();
    REQUIRE(failed == 0);
    CHECK(tr_intree_get_stats().thread_ends == before.thread_ends + worker + 1);
    std::vector<float> got = host(theirs.items[0]->dl_tensor);
    std::vector<float> last_row(got.end() - row, got.end());
    near(last_row, rms_ref(std::vector<float>(xv.end() - row, xv.end()), wv, row), 1e-5);
    if (worker != CURRENT) ok(tr_cuda_set_stream(0, (void *)cudaStreamLegacy));
    if (worker == LEGACY_CAPTURING) {
      REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    }
    theirs.reset();  // freed by this thread, after its maker ended
    ok(tr_cuda_set_stream(0, nullptr));
    if (worker == LEGACY_CAPTURING) {
      cudaGraph_t graph = nullptr;
      CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);  // not broken
      if (graph != nullptr) cudaGraphDestroy(graph);
    } else {
      freed++;
    }
    CHECK(tr_intree_get_stats().pool_kept == before.pool_kept);  // not kept for the ended thread
    CHECK(tr_intree_get_stats().orphans_freed == before.orphans_freed + freed);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(pool_used() > used_before);  // the one freed during the capture is parked ...
  tr_cuda_trim(rt);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(pool_used() == used_before);  // ... and freed by the trim: the driver has all three back
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a block freed while its maker's exit-time code uses it is kept for the maker") {
  // Exit-time code that runs after the runtime's hook (which marked the thread ended) and calls
  // on the thread's per-thread stream makes the thread not ended again, until the hook, which
  // that call registered again, has waited for the call: a block of the thread's that another
  // thread frees meanwhile is kept for it, and goes back to the driver on its stream then, not
  // freed at once while the call may still read it.
  tr_runtime *rt = cuda_runtime();
  const int64_t row = 4096, rows = 1024;
  tr_op *op = rms_op(rt, row);
  CudaTensor x({rows, row}, values((size_t)(rows * row), 51)), w({row}, values((size_t)row, 52));
  const DLTensor *in[] = {&x.t, &w.t};
  tr_cuda_trim(rt);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t used_before = pool_used();
  const tr_intree_stats before = tr_intree_get_stats();
  LateUse late;
  late.op = op;
  late.w = &w.t;
  int hooked = 0, failed = 0;
  std::thread t([&] {
    hooked = tr_plat_at_thread_exit(use_at_exit, &late);  // runs after the runtime's hook
    tr_test::Outputs made;
    tr_status *s = tr_op_call(op, in, 2, made.items, 1);
    failed = s != nullptr;
    tr_status_destroy(&s);
    late.x = made.items[0];  // handed over: freed by this test's thread
    made.items[0] = nullptr;
    if (!hooked) late.stages.advance(1);  // no exit-time code will
  });
  late.stages.await(1);  // the runtime's hook ran; the exit-time call is queued
  const uint64_t ends_meanwhile = tr_intree_get_stats().thread_ends;
  if (late.x != nullptr) late.x->deleter(late.x);  // freed here while the maker's exit-time call may read it
  tr_intree_stats meanwhile = tr_intree_get_stats();
  late.stages.advance(2);
  t.join();  // no REQUIRE before: the thread waits for stage 2
  CHECK(ends_meanwhile == before.thread_ends + 1);
  REQUIRE(hooked == 1);
  REQUIRE(late.x != nullptr);
  REQUIRE(failed == 0);
  REQUIRE(late.failed == 0);
  CHECK(meanwhile.orphans_freed == before.orphans_freed);  // not freed at once ...
  CHECK(meanwhile.pool_kept == before.pool_kept + 1);      // ... but kept for its maker
  tr_intree_stats after = tr_intree_get_stats();
  CHECK(after.thread_ends == before.thread_ends + 2);  // the hook ran again after the late call
  CHECK(after.pool_kept == before.pool_kept);          // and gave the block back then
  CHECK(after.pool_released == before.pool_released + 1);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(pool_used() == used_before);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a thread whose only use of its per-thread stream is a free waits for that stream as it ends") {
  // A thread that never allocated through tilerun frees an output whose maker has ended: the
  // block goes back to the driver on the freeing thread's per-thread stream. That stream is then
  // one this thread used, so its exit hook waits for it too, with whatever else is queued there
  // (here, memsets the thread queued itself), as for a thread that allocated. Checked by
  // mutation on the H200: with the free not marking the stream as used, the thread never
  // finished ending (the driver hang the hook's wait exists for; the test then times out).
  tr_runtime *rt = cuda_runtime();
  const int64_t row = 4096, rows = 1024;
  tr_op *op = rms_op(rt, row);
  CudaTensor x({rows, row}, values((size_t)(rows * row), 61)), w({row}, values((size_t)row, 62));
  const DLTensor *in[] = {&x.t, &w.t};
  const size_t busy_bytes = (size_t)512 << 20;
  void *busy = nullptr;
  REQUIRE(cudaMalloc(&busy, busy_bytes) == cudaSuccess);
  tr_cuda_trim(rt);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const tr_intree_stats before = tr_intree_get_stats();
  DLManagedTensor *theirs = nullptr;
  int failed = 0;
  std::thread maker([&] {
    tr_test::Outputs made;
    tr_status *s = tr_op_call(op, in, 2, made.items, 1);
    failed = s != nullptr;
    tr_status_destroy(&s);
    theirs = made.items[0];  // handed over
    made.items[0] = nullptr;
  });
  maker.join();
  REQUIRE(failed == 0);
  REQUIRE(theirs != nullptr);
  REQUIRE(tr_intree_get_stats().thread_ends == before.thread_ends + 1);
  AtExit seen;
  int hooked = 0, queued = 0;
  std::thread freer([&] {
    hooked = tr_plat_at_thread_exit(record_at_exit, &seen);  // runs after the runtime's hook
    for (int i = 0; i < 16; i++) {  // 8 GiB of writes queued on this thread's stream, not tilerun's
      if (cudaMemsetAsync(busy, i, busy_bytes, cudaStreamPerThread) != cudaSuccess) failed = 1;
    }
    theirs->deleter(theirs);  // the orphan, freed on this thread's per-thread stream
    queued = cudaStreamQuery(cudaStreamPerThread) == cudaErrorNotReady;
  });
  freer.join();
  REQUIRE(hooked == 1);
  REQUIRE(failed == 0);
  CHECK(queued);  // it ended with the memsets still queued
  tr_intree_stats after = tr_intree_get_stats();
  CHECK(after.orphans_freed == before.orphans_freed + 1);
  CHECK(after.thread_ends == before.thread_ends + 2);  // the freeing thread's hook ran ...
  CHECK(seen.stream_query == cudaSuccess);             // ... and had waited for its stream
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaFree(busy) == cudaSuccess);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("the blocks the pool keeps for a thread go back on its stream as the thread ends") {
  // A block kept for a thread's per-thread default stream is no other thread's to take; once the
  // thread has ended nobody could, so it goes back to the driver then, on that stream, while the
  // driver still has it. The thread ends with its calls still queued: the runtime's hook also
  // waits for the stream, since a thread that ended so after a stream-ordered allocation there
  // never finished ending on the H200 (driver 580; this test then hangs).
  tr_runtime *rt = cuda_runtime();
  const int64_t row = 8192, rows = 4096;  // 128 MiB in and out
  tr_op *op = rms_op(rt, row);
  std::vector<float> wv = values((size_t)row, 31), xv = values((size_t)(rows * row), 32);
  CudaTensor x({rows, row}, xv), w({row}, wv);
  CudaTensor small({2, row}, values(2 * (size_t)row, 33));
  const DLTensor *in[] = {&x.t, &w.t}, *in_small[] = {&small.t, &w.t};
  tr_cuda_trim(rt);
  const uint64_t elsewhere = tr_intree_get_stats().pool_kept;  // other runtimes' pools
  {  // this thread's own block, kept before and after the other thread
    tr_test::Outputs mine;
    ok(tr_op_call(op, in_small, 2, mine.items, 1));
  }
  tr_intree_stats before = tr_intree_get_stats();
  REQUIRE(before.pool_kept == elsewhere + 1);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t used_before = pool_used(), block = (uint64_t)(rows * row) * sizeof(float);
  AtExit seen;
  int hooked = 0, failed = 0;
  uint64_t kept_inside = 0, used_inside = 0;
  bool queued = false;
  std::thread t([&] {
    hooked = tr_plat_at_thread_exit(record_at_exit, &seen);
    for (int i = 0; i < 100 && !failed; i++) {  // each output freed: kept, and the next call's
      tr_test::Outputs out;
      tr_status *s = tr_op_call(op, in, 2, out.items, 1);
      failed = s != nullptr;
      tr_status_destroy(&s);
    }
    kept_inside = tr_intree_get_stats().pool_kept;
    used_inside = pool_used();
    queued = cudaStreamQuery(cudaStreamPerThread) == cudaErrorNotReady;
  });  // ends with its calls queued
  t.join();
  REQUIRE(failed == 0);
  REQUIRE(hooked == 1);
  CHECK(queued);  // the thread ended with work queued (100 calls of 256 MiB of traffic)
  CHECK(kept_inside == before.pool_kept + 1);  // one block, reused by every call of the thread
  // after the runtime's hook, the thread's stream was still there, and idle: it had waited
  CHECK(seen.stream_query == cudaSuccess);
  CHECK(seen.released == before.pool_released + 1);
  CHECK(seen.kept == before.pool_kept);
  tr_intree_stats after = tr_intree_get_stats();
  CHECK(after.pool_kept == before.pool_kept);  // this thread's own block is still kept
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(used_inside >= used_before + block);  // the thread's block, kept while it ran ...
  CHECK(pool_used() == used_before);           // ... is the driver's again
  CHECK(after.pool_released == before.pool_released + 1);
  {  // and this thread's next call of that size gets it
    uint64_t hits = after.pool_hits;
    tr_test::Outputs again;
    ok(tr_op_call(op, in_small, 2, again.items, 1));
    CHECK(tr_intree_get_stats().pool_hits == hits + 1);
  }
  {  // a call of the size the thread's block had gives the right result here
    tr_test::Outputs out;
    ok(tr_op_call(op, in, 2, out.items, 1));
    std::vector<float> got = host(out.items[0]->dl_tensor);
    std::vector<float> last_row(got.end() - row, got.end());
    near(last_row, rms_ref(std::vector<float>(xv.end() - row, xv.end()), wv, row), 1e-5);
  }
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("an artifact compiled by one runtime is loaded from the disk cache by the next") {
  CacheDir cache;
  const int64_t row = 1000;  // a row length no other test uses (a warp kernel: one artifact)
  for (int round = 0; round < 2; round++) {
    tr_runtime *rt = cuda_runtime();
    tr_op *op = rms_op(rt, row);
    CudaTensor x({2, row}, values(2 * (size_t)row, 4)), w({row}, values((size_t)row, 5));
    const DLTensor *in[] = {&x.t, &w.t};
    tr_intree_stats before = tr_intree_get_stats();
    tr_test::Outputs out;
    ok(tr_op_call(op, in, 2, out.items, 1));
    tr_intree_stats after = tr_intree_get_stats();
    if (round == 0) CHECK(after.compiled == before.compiled + 1);
    else CHECK(after.from_cache == before.from_cache + 1);  // not compiled again
    if (round == 1) CHECK(after.compiled == before.compiled);
    tr_op_destroy(&op);
    tr_runtime_destroy(&rt);
  }
}

TEST_CASE("a build identity built once: another batch size or another op loads its artifacts again") {
  CacheDir cache;
  const int64_t row = 1500;  // a row length no other test uses (the looped kernel: two artifacts)
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, row), *twin = rms_op(rt, row);
  std::vector<float> xv = values(5 * (size_t)row, 8), wv = values((size_t)row, 9);
  CudaTensor x2({2, row}, std::vector<float>(xv.begin(), xv.begin() + 2 * row)), x5({5, row}, xv), w({row}, wv);
  tr_intree_stats before = tr_intree_get_stats();
  {
    const DLTensor *in[] = {&x2.t, &w.t};
    tr_test::Outputs out;
    ok(tr_op_call(op, in, 2, out.items, 1));
  }
  tr_intree_stats first = tr_intree_get_stats();
  CHECK(first.compiled > before.compiled);  // built: this runtime had none, the disk neither
  CHECK(first.kernels == before.kernels + 1);
  for (tr_op *o : {op, twin}) {  // 5 rows: a memo miss of the same identity, in this op and another
    const DLTensor *in[] = {&x5.t, &w.t};
    tr_test::Outputs out;
    ok(tr_op_call(o, in, 2, out.items, 1));
    near(host(out.items[0]->dl_tensor), rms_ref(xv, wv, row), 1e-5);
  }
  tr_intree_stats after = tr_intree_get_stats();
  CHECK(after.kernels == first.kernels + 2);          // a kernel for each memo entry ...
  CHECK(after.compiled == first.compiled);            // ... from the artifacts kept: not compiled
  CHECK(after.from_cache == first.from_cache);        // nor read from the disk
  CHECK(after.loaded == first.loaded);                // their modules were loaded already
  tr_op_destroy(&twin);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("calls launch on the caller's current stream; strided inputs are copied first") {
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 64);
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(tr_cuda_stream(0) == nullptr);  // the per-thread default stream until set
  ok(tr_cuda_set_stream(0, stream));
  CHECK(tr_cuda_stream(0) == (void *)stream);
  std::vector<float> xv = values(64 * 32, 6), wv = values(64, 7);
  CudaTensor xt({64, 32}, xv), w({64}, wv);  // stored [64, 32]; viewed as its transpose [32, 64]
  xt.shape = {32, 64};
  xt.strides = {1, 32};
  xt.t.shape = xt.shape.data();
  xt.t.strides = xt.strides.data();
  std::vector<float> contiguous(64 * 32);  // the transpose's values, row-major
  for (int r = 0; r < 32; r++)
    for (int c = 0; c < 64; c++) contiguous[r * 64 + c] = xv[c * 32 + r];
  const DLTensor *in[] = {&xt.t, &w.t};
  tr_test::Outputs out;
  ok(tr_op_call(op, in, 2, out.items, 1));
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);  // the work went to `stream`
  near(host(out.items[0]->dl_tensor), rms_ref(contiguous, wv, 64), 1e-5);
  out.reset();
  ok(tr_cuda_set_stream(0, nullptr));
  tr_status *bad = tr_cuda_set_stream(64, stream);
  REQUIRE(bad != nullptr);
  CHECK(std::string(tr_status_message(bad)).find("64") != std::string::npos);
  tr_status_destroy(&bad);
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("100 warmed-up calls captured into a CUDA graph replay to the eager results") {
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 4096);
  const int kCalls = 100;
  std::vector<float> wv = values(4096, 8);
  CudaTensor w({4096}, wv);
  std::vector<std::vector<float>> xs;
  std::vector<CudaTensor *> x, y;
  for (int i = 0; i < kCalls; i++) {
    xs.push_back(values(4 * 4096, 100 + i));
    x.push_back(new CudaTensor({4, 4096}, xs.back()));
    y.push_back(new CudaTensor({4, 4096}, std::vector<float>(4 * 4096, NAN)));
  }
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  ok(tr_cuda_set_stream(0, stream));
  const DLTensor *in0[] = {&x[0]->t, &w.t};
  DLTensor *out0[] = {&y[0]->t};
  ok(tr_op_call_into(op, in0, 2, out0, 1));  // the warm-up: builds
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(y[0]->dev, 0xff, 4 * 4096 * sizeof(float), stream) == cudaSuccess);  // NaN again
  cudaGraph_t graph;
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  for (int i = 0; i < kCalls; i++) {
    const DLTensor *in[] = {&x[i]->t, &w.t};
    DLTensor *out[] = {&y[i]->t};
    ok(tr_op_call_into(op, in, 2, out, 1));
  }
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == (size_t)kCalls);  // one kernel node per call, nothing else
  cudaGraphExec_t exec;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  for (int i = 0; i < kCalls; i++) near(host(y[i]->t), rms_ref(xs[i], wv, 4096), 1e-5);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ok(tr_cuda_set_stream(0, nullptr));
  cudaStreamDestroy(stream);
  for (auto *t : x) delete t;
  for (auto *t : y) delete t;
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a call no in-tree implementation serves is refused with every implementation's reason") {
  tr_runtime *rt = cuda_runtime();
  tr_named_value p[1] = {{"dtype", tr_value_dtype(TR_FLOAT64)}};
  tr_op *op = nullptr;
  ok(tr_op_new(rt, "SoftmaxFwdOp", p, 1, nullptr, &op));
  CudaTensor x({2, 8}, values(16, 9));
  const DLTensor *in[] = {&x.t};
  tr_test::Outputs out;
  tr_status *status = tr_op_call(op, in, 1, out.items, 1);
  REQUIRE(status != nullptr);
  std::string msg = tr_status_message(status);
  INFO(msg);
  CHECK(msg.find("no implementation serves this call") != std::string::npos);
  CHECK(msg.find("softmax_warp") != std::string::npos);
  CHECK(msg.find("got float64") != std::string::npos);
  tr_status_destroy(&status);
  CHECK(tr_op_memo_count(op) == 0);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

namespace {

// float64 softmax over rows of `row`.
std::vector<double> softmax_ref(const std::vector<float> &x, size_t row) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / row; r++) {
    double m = -INFINITY, s = 0;
    for (size_t i = 0; i < row; i++) m = std::max(m, (double)x[r * row + i]);
    for (size_t i = 0; i < row; i++) s += std::exp((double)x[r * row + i] - m);
    for (size_t i = 0; i < row; i++) y[r * row + i] = std::exp((double)x[r * row + i] - m) / s;
  }
  return y;
}

}  // namespace

TEST_CASE("softmax over long rows starting with -inf (masked logits) stays finite") {
  tr_runtime *rt = cuda_runtime();
  tr_op *op = nullptr;
  ok(tr_op_new(rt, "SoftmaxFwdOp", nullptr, 0, nullptr, &op));
  for (int64_t row : {40000, 40001}) {  // the looped kernel (two rows on sm_90: its split build),
                                         // with 16-byte vectors and without
    std::vector<float> xv = values(2 * (size_t)row, 30);
    for (int i = 0; i < 4096; i++) xv[(size_t)i] = -INFINITY;  // row 0 begins masked
    xv[(size_t)row + 7] = -INFINITY;                            // row 1 has a masked element
    CudaTensor x({2, row}, xv);
    const DLTensor *in[] = {&x.t};
    tr_test::Outputs out;
    ok(tr_op_call(op, in, 1, out.items, 1));
    INFO("row " << row);
    near(host(out.items[0]->dl_tensor), softmax_ref(xv, (size_t)row), 1e-5);
  }
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

// The kernel config entry `name` of op's kernel (op has one memo entry), as text ("" when absent
// or not text).
std::string config_text(tr_op *op, const char *name) {
  const tr_named_value *config = nullptr;
  size_t n = tr_op_kernel_config(op, &config);
  for (size_t i = 0; i < n; i++) {
    if (std::string(config[i].name) == name && config[i].value.kind == TR_VALUE_STR) return config[i].value.as.str.data;
  }
  return "";
}

TEST_CASE("few long softmax rows are split over a cluster on sm_90 and match float64") {
  // Rows of 16384 elements and more, fewer than the SMs: each row over a cluster of CTAs (sm_90
  // on); as many rows as SMs: a block per row. Outputs poisoned first; row 0 masked (-inf) over
  // its first 40%, so that whole CTAs of it hold nothing but -inf. Every output is compared
  // relatively (most are 1e-5 and below, where an absolute tolerance would pass anything).
  ok(tr_plat_setenv("TILERUN_CUDA_OVERLAP", "1"));
  tr_runtime *rt = cuda_runtime();
  tr_op *add = nullptr;
  ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &add));
  int major = 0, sms = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  for (int64_t row : {20000, 100003, 128256}) {  // the block kernel's; looped without and with vectors
    tr_op *op = nullptr;  // one op per row length: its one kernel is the one the config describes
    ok(tr_op_new(rt, "SoftmaxFwdOp", nullptr, 0, nullptr, &op));
    for (int64_t rows : {(int64_t)1, (int64_t)3, (int64_t)64, (int64_t)sms - 1, (int64_t)sms}) {
      std::vector<float> xv = values((size_t)(rows * row), (unsigned)(40 + rows));
      for (auto &v : xv) v *= 4.0f;
      for (int64_t i = 0; i < row * 2 / 5; i++) xv[(size_t)i] = -INFINITY;
      if (rows > 1) xv[(size_t)row + 7] = -INFINITY;
      // x = a + 0 by the add just before (overlapped): a softmax that did not wait for it would
      // read x's old zeros
      CudaTensor a({rows, row}, xv), zero({rows, row}, std::vector<float>(xv.size(), 0.0f)),
          x({rows, row}, std::vector<float>(xv.size(), 0.0f)), y({rows, row}, std::vector<float>(xv.size(), NAN));
      const DLTensor *add_in[] = {&a.t, &zero.t};
      DLTensor *add_out[] = {&x.t};
      const DLTensor *in[] = {&x.t};
      DLTensor *out[] = {&y.t};
      ok(tr_op_call_into(add, add_in, 2, add_out, 1));
      uint64_t splits = tr_intree_get_stats().split_launches;
      ok(tr_op_call_into(op, in, 1, out, 1));
      INFO("rows " << rows << " of " << row);
      CHECK(config_text(op, "few_rows") == (major >= 9 ? "split" : "none"));
      CHECK(tr_intree_get_stats().split_launches - splits == (major >= 9 && rows < sms ? 1u : 0u));
      std::vector<float> got = host(y.t);
      std::vector<double> want = softmax_ref(xv, (size_t)row);
      size_t bad = 0, first = want.size();
      for (size_t i = 0; i < want.size(); i++) {
        if (!(std::fabs(got[i] - want[i]) <= 1e-5 * std::fabs(want[i]) + 1e-30)) {
          if (bad++ == 0) first = i;
        }
      }
      INFO(bad << " outputs off by more than 1e-5 relative; first at " << first << ": got "
                << (first < got.size() ? got[first] : 0.0f) << ", want " << (first < want.size() ? want[first] : 0.0));
      CHECK(bad == 0);
    }
    tr_op_destroy(&op);
  }
  tr_op_destroy(&add);
  tr_runtime_destroy(&rt);
}

TEST_CASE("an empty tensor is a call with nothing to compute, not a crash") {
  tr_runtime *rt = cuda_runtime();
  tr_named_value p[1] = {{"dim", tr_value_int(1)}};
  tr_op *op = nullptr;
  ok(tr_op_new(rt, "SoftmaxFwdOp", p, 1, nullptr, &op));
  CudaTensor x({2, 3, 1}, values(6, 31));
  x.shape = {2, 3, 0};  // the same buffer viewed empty
  x.t.shape = x.shape.data();
  const DLTensor *in[] = {&x.t};
  tr_test::Outputs out;
  ok(tr_op_call(op, in, 1, out.items, 1));
  REQUIRE(out.items[0] != nullptr);
  CHECK(out.items[0]->dl_tensor.shape[2] == 0);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("outputs made while the per-thread stream is captured never come from, or go to, the pool") {
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 4096);
  CudaTensor x({2, 4096}, values(2 * 4096, 40)), w({4096}, values(4096, 41));
  const DLTensor *in[] = {&x.t, &w.t};
  void *pooled = nullptr;
  {
    tr_test::Outputs a;
    ok(tr_op_call(op, in, 2, a.items, 1));  // builds; its output then goes to the pool
    pooled = a.items[0]->dl_tensor.data;
  }
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  cudaGraph_t graph;
  REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  tr_test::Outputs captured;
  ok(tr_op_call(op, in, 2, captured.items, 1));
  REQUIRE(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);
  void *in_graph = captured.items[0]->dl_tensor.data;
  CHECK(in_graph != pooled);  // not handed the pooled block during the capture
  captured.reset();           // freed after the capture: not pooled either
  tr_test::Outputs b;  // the pool hands back the block freed before the capture, not the captured one
  ok(tr_op_call(op, in, 2, b.items, 1));
  CHECK(b.items[0]->dl_tensor.data == pooled);
  CHECK(b.items[0]->dl_tensor.data != in_graph);
  cudaGraphDestroy(graph);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("an output the graph reads, freed during the capture, is parked: no eager call gets it before the graph runs") {
  tr_runtime *rt = cuda_runtime();
  tr_op *op = rms_op(rt, 4096);
  std::vector<float> xv = values(2 * 4096, 42), x2v = values(2 * 4096, 44), wv = values(4096, 43);
  CudaTensor x({2, 4096}, xv), x2({2, 4096}, x2v), w({4096}, wv);
  const DLTensor *in[] = {&x.t, &w.t};
  auto first = std::make_unique<tr_test::Outputs>();
  ok(tr_op_call(op, in, 2, first->items, 1));  // X = rms(x), eagerly
  void *made_eagerly = first->items[0]->dl_tensor.data;
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  std::vector<float> x_normed = host(first->items[0]->dl_tensor);
  cudaGraph_t graph;
  REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  const DLTensor *from_first[] = {&first->items[0]->dl_tensor, &w.t};
  tr_test::Outputs captured;
  ok(tr_op_call(op, from_first, 2, captured.items, 1));  // Y = rms(X), captured: the graph reads X
  first.reset();                                          // X freed during the capture
  REQUIRE(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);  // the capture is intact
  const DLTensor *in2[] = {&x2.t, &w.t};
  tr_test::Outputs eager;
  ok(tr_op_call(op, in2, 2, eager.items, 1));  // Z = rms(x2): must not be written into X's block
  CHECK(eager.items[0]->dl_tensor.data != made_eagerly);
  size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  std::vector<cudaGraphNode_t> list(nodes);
  REQUIRE(cudaGraphGetNodes(graph, list.data(), &nodes) == cudaSuccess);
  for (cudaGraphNode_t n : list) {  // X is not freed inside the graph (it is not the graph's)
    cudaGraphNodeType type;
    REQUIRE(cudaGraphNodeGetType(n, &type) == cudaSuccess);
    CHECK(type != cudaGraphNodeTypeMemFree);
  }
  cudaGraphExec_t exec;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, cudaStreamPerThread) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  near(host(captured.items[0]->dl_tensor), rms_ref(x_normed, wv, 4096), 1e-5);  // read X, not Z
  near(host(eager.items[0]->dl_tensor), rms_ref(x2v, wv, 4096), 1e-5);
  captured.reset();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);  // trims: the parked block goes back to the driver
}

TEST_CASE("calls back to back, each reading the one before's output, are right with overlapped launches") {
  // Add writes its output in a grid-stride loop; softmax over dim 0 then reads every column whole,
  // so each of its threads reads what the add's last blocks write last: a launch that did not
  // wait for the call before would read some of the old values, and a column would not be
  // uniform.
  ok(tr_plat_setenv("TILERUN_CUDA_OVERLAP", "1"));  // whatever the environment says
  tr_runtime *rt = cuda_runtime();
  tr_op *add = nullptr, *softmax = nullptr;
  ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &add));
  tr_named_value dim0[] = {{"dim", tr_value_int(0)}};
  ok(tr_op_new(rt, "SoftmaxFwdOp", dim0, 1, nullptr, &softmax));
  const int64_t R = 2048, C = 4096;
  const size_t n = (size_t)(R * C);  // 32 MB a tensor
  CudaTensor one({R, C}, std::vector<float>(n, 1.0f)), p({R, C}, std::vector<float>(n, 0.0f)),
      q({R, C}, std::vector<float>(n, 0.0f));
  CudaTensor *x[2] = {&p, &q};
  const int steps = 8;
  std::vector<std::unique_ptr<CudaTensor>> ys;
  for (int i = 0; i < steps; i++) ys.push_back(std::make_unique<CudaTensor>(std::vector<int64_t>{R, C}, std::vector<float>(n, -1.0f)));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  for (int i = 0; i < steps; i++) {  // x[(i+1)%2] = x[i%2] + 1; ys[i] = softmax(x[(i+1)%2], dim 0)
    const DLTensor *in[] = {&x[i % 2]->t, &one.t};
    DLTensor *sum[] = {&x[(i + 1) % 2]->t};
    ok(tr_op_call_into(add, in, 2, sum, 1));
    const DLTensor *sin[] = {&x[(i + 1) % 2]->t};
    DLTensor *sout[] = {&ys[i]->t};
    ok(tr_op_call_into(softmax, sin, 1, sout, 1));
  }
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  for (tr_op *op : {add, softmax}) {
    const tr_named_value *config = nullptr;
    size_t n_config = tr_op_kernel_config(op, &config);
    bool overlapped = false;
    for (size_t i = 0; i < n_config; i++) {
      if (std::string(config[i].name) == "overlap") overlapped = config[i].value.as.b;
    }
    CHECK(overlapped == (major >= 9));  // on from sm_90 (TILERUN_CUDA_OVERLAP unset)
  }
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  std::vector<float> last = host(x[steps % 2]->t);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += last[i] != (float)steps;
  CHECK(wrong == 0);
  for (int s = 0; s < steps; s++) {
    std::vector<float> y = host(ys[s]->t);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) off += std::fabs(y[i] * (float)R - 1.0f) > 1e-4f;
    INFO("softmax of step " << s);
    CHECK(off == 0);
  }
  tr_op_destroy(&add);
  tr_op_destroy(&softmax);
  tr_runtime_destroy(&rt);
}

TEST_CASE("an expanded bias is read in place by the add, with no copy the size of the output") {
  tr_runtime *rt = cuda_runtime();
  tr_op *op = nullptr;
  ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  const int64_t rows = 48, n = 72;
  std::vector<float> av = values(rows * n, 11), bv = values(2 * n, 12);
  CudaTensor a({rows, n}, av), bias({2 * n}, bv);
  // b: bias[0:n] expanded over rows (strides 0, 1); and bias[::2] expanded (a strided block)
  DLTensor expanded = bias.t;
  int64_t shape[2] = {rows, n}, zero_one[2] = {0, 1}, zero_two[2] = {0, 2};
  expanded.ndim = 2;
  expanded.shape = shape;
  expanded.strides = zero_one;
  for (int strided = 0; strided < 2; strided++) {
    expanded.strides = strided ? zero_two : zero_one;
    const DLTensor *in[] = {&a.t, &expanded};
    tr_test::Outputs out;
    uint64_t copies = tr_intree_get_stats().copies;
    ok(tr_op_call(op, in, 2, out.items, 1));
    std::vector<float> got = host(out.items[0]->dl_tensor);
    std::vector<double> want((size_t)(rows * n));
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < n; c++) want[r * n + c] = (double)av[r * n + c] + bv[strided ? 2 * c : c];
    near(got, want, 1e-6);
    // in place where the block is contiguous; copied first where it is not
    CHECK(tr_intree_get_stats().copies - copies == (uint64_t)strided);
  }
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

// float32, cuBLASLt's alone (the skinny kernel, 16-bit types only, is checked against torch by
// python/tests/test_gemm_gpu.py).
TEST_CASE("GemmFwdOp on cuda in float32 matches float64, both layouts of b; tuning keeps it right") {
  tr_runtime *rt = cuda_runtime();
  struct G {
    int64_t m, n, k;
    bool tb;
  };
  for (G g : {G{5, 96, 40, false}, G{3, 200, 64, true}}) {
    tr_value ta = tr_value_bool(false), tb = tr_value_bool(g.tb);
    tr_named_value p[2] = {{"trans_a", ta}, {"trans_b", tb}};
    tr_op *op = nullptr;
    ok(tr_op_new(rt, "GemmFwdOp", p, 2, nullptr, &op));
    std::vector<float> av = values(g.m * g.k, 21), bv = values(g.k * g.n, 22);
    CudaTensor a({g.m, g.k}, av), b(g.tb ? std::vector<int64_t>{g.n, g.k} : std::vector<int64_t>{g.k, g.n}, bv);
    std::vector<double> want((size_t)(g.m * g.n), 0.0);
    for (int64_t i = 0; i < g.m; i++)
      for (int64_t j = 0; j < g.n; j++)
        for (int64_t q = 0; q < g.k; q++)
          want[i * g.n + j] += (double)av[i * g.k + q] * bv[g.tb ? j * g.k + q : q * g.n + j];
    const DLTensor *in[] = {&a.t, &b.t};
    for (int tuned = 0; tuned < 2; tuned++) {
      if (tuned) ok(tr_op_request_tune(op));
      tr_test::Outputs out;
      ok(tr_op_call(op, in, 2, out.items, 1));
      near(host(out.items[0]->dl_tensor), want, 1e-4);
      const tr_named_value *cfg = nullptr;
      size_t n_cfg = tr_op_kernel_config(op, &cfg);
      REQUIRE(n_cfg >= 1);
      CHECK(std::string(cfg[0].value.as.str.data) == "gemm_cublaslt");
      bool saw_tuned = false;
      for (size_t i = 0; i < n_cfg; i++) {
        if (std::string(cfg[i].name) == "tuned") saw_tuned = cfg[i].value.as.b;
      }
      CHECK(saw_tuned == (tuned == 1));
    }
    tr_op_destroy(&op);
  }
  tr_runtime_destroy(&rt);
}

namespace {

// A contiguous cuda view of `shape` at `data`: shapes past any allocation, for the refusals made
// before a kernel reads anything (the runtime never touches a cuda tensor's memory on the host).
struct View {
  std::vector<int64_t> shape;
  DLTensor t{};
  View(void *data, std::vector<int64_t> s, tr_dtype dt) : shape(std::move(s)) {
    t.data = data;
    t.device = {kDLCUDA, 0};
    t.ndim = (int32_t)shape.size();
    t.dtype = dt;
    t.shape = shape.data();
  }
};

// The message of the call's error, with its code checked to be a ValueError ("" if it succeeded).
std::string value_error(tr_op *op, const DLTensor *const *in, size_t n_in, DLTensor *out) {
  DLTensor *outs[] = {out};
  tr_status *status = tr_op_call_into(op, in, n_in, outs, 1);
  std::string msg = status ? tr_status_message(status) : "";
  if (status != nullptr) CHECK(tr_status_code(status) == TR_VALUE);
  tr_status_destroy(&status);
  return msg;
}

}  // namespace

TEST_CASE("attention calls past one launch's grid are refused with the sizes, before any kernel runs") {
  tr_runtime *rt = cuda_runtime();
  CudaTensor buf({64}, values(64, 5));  // where every input view points: never read
  void *d = buf.dev;
  // the outputs' views point 16 TiB past it, beyond every input's reach (an output sharing memory
  // with an input is refused first); never written either
  void *far = (char *)d + (int64_t(1) << 44);
  SECTION("prefill: more query tiles than a grid's 65535 rows") {
    tr_named_value p[3] = {{"heads", tr_value_int(1)}, {"heads_kv", tr_value_int(1)}, {"dim", tr_value_int(64)}};
    tr_op *op = nullptr;
    ok(tr_op_new(rt, "GQAPrefillFwdOp", p, 3, nullptr, &op));
    const int64_t L = 65535LL * 128 + 1;  // one token past 65535 tiles of 128 query rows
    View q(d, {1, L, 1, 64}, TR_BFLOAT16), k(d, {1, L, 1, 64}, TR_BFLOAT16), v(d, {1, L, 1, 64}, TR_BFLOAT16);
    View o(far, {1, L, 1, 64}, TR_BFLOAT16);
    const DLTensor *in[] = {&q.t, &k.t, &v.t};
    CHECK(value_error(op, in, 3, &o.t) ==
          "GQAPrefillFwdOp: 1 batch rows of 1 heads and 8388481 tokens are more than one launch covers (at most "
          "2^31 - 1 rows x heads, 8388480 tokens)");
    tr_op_destroy(&op);
  }
  SECTION("prefill: more batch rows x heads than 2^31 - 1") {
    tr_named_value p[3] = {{"heads", tr_value_int(64)}, {"heads_kv", tr_value_int(8)}, {"dim", tr_value_int(64)}};
    tr_op *op = nullptr;
    ok(tr_op_new(rt, "GQAPrefillFwdOp", p, 3, nullptr, &op));
    const int64_t B = (1LL << 31) / 64;  // B x 64 heads = 2^31
    View q(d, {B, 1, 64, 64}, TR_BFLOAT16), k(d, {B, 1, 8, 64}, TR_BFLOAT16), v(d, {B, 1, 8, 64}, TR_BFLOAT16);
    View o(far, {B, 1, 64, 64}, TR_BFLOAT16);
    const DLTensor *in[] = {&q.t, &k.t, &v.t};
    CHECK(value_error(op, in, 3, &o.t) ==
          "GQAPrefillFwdOp: 33554432 batch rows of 64 heads and 1 tokens are more than one launch covers (at most "
          "2^31 - 1 rows x heads, 8388480 tokens)");
    tr_op_destroy(&op);
  }
  SECTION("decode: more batch rows x heads than 2^31 - 1") {
    tr_named_value p[3] = {{"heads", tr_value_int(32)}, {"heads_kv", tr_value_int(8)}, {"dim", tr_value_int(128)}};
    tr_op *op = nullptr;
    ok(tr_op_new(rt, "GQADecodeFwdOp", p, 3, nullptr, &op));
    const int64_t B = (1LL << 31) / 32;
    View q(d, {B, 32, 128}, TR_BFLOAT16), kc(d, {B, 16, 8, 128}, TR_BFLOAT16), vc(d, {B, 16, 8, 128}, TR_BFLOAT16);
    View lens(d, {B}, TR_INT32), o(far, {B, 32, 128}, TR_BFLOAT16);
    const DLTensor *in[] = {&q.t, &kc.t, &vc.t, &lens.t};
    CHECK(value_error(op, in, 4, &o.t) ==
          "GQADecodeFwdOp: 67108864 batch rows of 32 heads are more than one launch covers");
    tr_op_destroy(&op);
  }
  tr_runtime_destroy(&rt);
}

namespace {

// bfloat16 bits of x (round to nearest even) and back.
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Causal GQA attention in float64: o [B, L, heads, dim] from q [B, L, heads, dim], k and v
// [B, L, kv, dim], scale 1 / sqrt(dim).
std::vector<double> prefill_ref(const std::vector<float> &q, const std::vector<float> &k, const std::vector<float> &v,
                                int64_t B, int64_t L, int64_t heads, int64_t kv, int64_t dim) {
  std::vector<double> o((size_t)(B * L * heads * dim), 0.0), w((size_t)L);
  const double scale = 1.0 / std::sqrt((double)dim);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < heads; h++) {
      const int64_t g = h / (heads / kv);
      for (int64_t i = 0; i < L; i++) {
        const float *qi = &q[(size_t)(((b * L + i) * heads + h) * dim)];
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j <= i; j++) {
          const float *kj = &k[(size_t)(((b * L + j) * kv + g) * dim)];
          double s = 0.0;
          for (int64_t d = 0; d < dim; d++) s += (double)qi[d] * kj[d];
          w[(size_t)j] = s * scale;
          mx = std::max(mx, w[(size_t)j]);
        }
        for (int64_t j = 0; j <= i; j++) sum += (w[(size_t)j] = std::exp(w[(size_t)j] - mx));
        double *oi = &o[(size_t)(((b * L + i) * heads + h) * dim)];
        for (int64_t j = 0; j <= i; j++) {
          const float *vj = &v[(size_t)(((b * L + j) * kv + g) * dim)];
          for (int64_t d = 0; d < dim; d++) oi[d] += w[(size_t)j] / sum * vj[d];
        }
      }
    }
  return o;
}

// A bfloat16 tensor on cuda:0 holding `values` rounded (which it gives back rounded in `values`).
struct Bf16Tensor {
  std::vector<int64_t> shape;
  uint16_t *dev = nullptr;
  DLTensor t{};
  Bf16Tensor(std::vector<int64_t> s, std::vector<float> &values) : shape(std::move(s)) {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); i++) values[i] = from_bf16(bits[i] = to_bf16(values[i]));
    REQUIRE(cudaMalloc(&dev, bits.size() * 2) == cudaSuccess);
    REQUIRE(cudaMemcpy(dev, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    t.data = dev;
    t.device = {kDLCUDA, 0};
    t.ndim = (int32_t)shape.size();
    t.dtype = TR_BFLOAT16;
    t.shape = shape.data();
  }
  std::vector<float> values() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint16_t> bits((size_t)n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(bits.data(), dev, bits.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); i++) out[i] = from_bf16(bits[i]);
    return out;
  }
  ~Bf16Tensor() { cudaFree(dev); }
};

}  // namespace

TEST_CASE("GQA prefill: the general kernel, built directly where the selection prefers another, matches float64") {
  // On sm_90 the selection gives aligned calls to gqa_prefill_wgmma; gqa_prefill_flash's aligned
  // entry is built and run here by its type, so it stays checked on that card too.
  int arch_major = 0, arch_minor = 0, sms = 0, smem = 0;
  REQUIRE(cudaDeviceGetAttribute(&arch_major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&arch_minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess);
  const int32_t arch = arch_major * 10 + arch_minor;
  char arch_name[16];
  tr_intree_arch_name(arch, arch_name, sizeof(arch_name));
  const tr_intree_op *op = tr_intree_find("GQAPrefillFwdOp");
  REQUIRE(op != nullptr);
  const tr_kernel_type *flash = nullptr;
  for (size_t i = 0; i < op->n_types; i++) {
    if (std::string(op->types[i]->key) == "gqa_prefill_flash") flash = op->types[i];
  }
  REQUIRE(flash != nullptr);
  tr_runtime *rt = cuda_runtime();
  const int64_t B = 2, L = 130, heads = 8, kv = 2;
  for (int64_t dim : {64, 128}) {
    CAPTURE(dim);
    std::vector<float> qv = values((size_t)(B * L * heads * dim), 11), kv_ = values((size_t)(B * L * kv * dim), 12);
    std::vector<float> vv = values((size_t)(B * L * kv * dim), 13), ov((size_t)(B * L * heads * dim), NAN);
    Bf16Tensor q({B, L, heads, dim}, qv), k({B, L, kv, dim}, kv_), v({B, L, kv, dim}, vv);
    Bf16Tensor o_flash({B, L, heads, dim}, ov), o_op({B, L, heads, dim}, ov);
    const std::vector<double> want = prefill_ref(qv, kv_, vv, B, L, heads, kv, dim);

    tr_tensor_spec specs[3];
    const Bf16Tensor *ts[3] = {&q, &k, &v};
    const tr_tensor_spec *in_specs[3];
    for (int i = 0; i < 3; i++) {
      std::memset(&specs[i], 0, sizeof(specs[i]));
      specs[i].dtype = TR_BFLOAT16;
      specs[i].device = {"cuda", 0};
      specs[i].rank = 4;
      for (int d = 0; d < 4; d++) specs[i].shape[d] = ts[i]->shape[(size_t)d];
      in_specs[i] = &specs[i];
    }
    tr_named_value p[3] = {{"heads", tr_value_int(heads)}, {"heads_kv", tr_value_int(kv)}, {"dim", tr_value_int(dim)}};
    tr_device dev = {"cuda", 0};
    const char *iface = nullptr;
    tr_call_spec call;
    ok(op->call_spec(in_specs, 3, p, 3, &dev, &iface, &call));
    tr_device_facts facts = {arch, nullptr, sms, smem};
    tr_call_spec_state_facts(&call, TR_FACT_ARCH | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET, &facts);
    tr_artifact arts[2];
    size_t n_arts = 0;
    ok(tr_intree_build(flash, &call, arch_name, arts, &n_arts));
    tr_kernel kernel;
    std::memset(&kernel, 0, sizeof(kernel));
    kernel.struct_size = sizeof(kernel);
    ok(tr_intree_kernel(flash, &call, arts, n_arts, &kernel));
    DLTensor *ins[3] = {&q.t, &k.t, &v.t}, *outs[1] = {&o_flash.t};
    ok(kernel.call(kernel.self, ins, 3, outs, 1));
    std::vector<float> got = o_flash.values();
    CHECK(mismatches(got, want, 0, 2e-2) == 0);

    tr_op *top = nullptr;  // and the op, whichever implementation the selection names
    ok(tr_op_new(rt, "GQAPrefillFwdOp", p, 3, nullptr, &top));
    const DLTensor *cin[3] = {&q.t, &k.t, &v.t};
    DLTensor *couts[1] = {&o_op.t};
    ok(tr_op_call_into(top, cin, 3, couts, 1));
    CHECK(mismatches(o_op.values(), want, 0, 2e-2) == 0);
    CHECK(config_text(top, "implementation") == (arch == 90 ? "gqa_prefill_wgmma" : "gqa_prefill_flash"));
    tr_op_destroy(&top);
    if (kernel.release != nullptr) kernel.release(kernel.self);
    for (size_t i = 0; i < n_arts; i++) tr_artifact_clear(&arts[i]);
    tr_call_spec_clear(&call);
  }
  tr_runtime_destroy(&rt);
}
