// pool_scope_test.cc (needs a GPU): each runtime's cuda outputs come from its own pool, so
// destroying one runtime gives back its own blocks only, never a block another runtime's captured
// graph still writes at every replay.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <vector>

#include "kernels/intree/intree.h"
#include "runtime/cuda_testing.h"
#include "runtime/runtime_testing.h"

using tr_test::driver_pool_used;
using tr_test::ok;

TEST_CASE("destroying one runtime leaves alone the blocks another runtime's graph replays into") {
  const int64_t row = 4096, rows = 64;
  tr_runtime *a = tr_test::runtime_without_backends(), *b = tr_test::runtime_without_backends();
  tr_op *op_a = tr_test::rms_op(a, row), *op_b = tr_test::rms_op(b, row);
  std::vector<float> xv = tr_test::random_values((size_t)(rows * row), 41), wv = tr_test::random_values(row, 42);
  tr_test::CudaTensor x({rows, row}, xv), w({row}, wv);
  const DLTensor *in[] = {&x.t, &w.t};
  {  // runtime a makes and frees an output of another size: a block kept in a's pool
    tr_test::CudaTensor small({2, row}, tr_test::random_values(2 * (size_t)row, 43));
    const DLTensor *in_small[] = {&small.t, &w.t};
    tr_test::Outputs out;
    ok(tr_op_call(op_a, in_small, 2, out.items, 1));
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  // runtime b: an output made before a capture, written by the captured call, freed during the
  // capture: parked in b's pool (the graph writes it at every replay)
  tr_test::Outputs made;
  ok(tr_op_call(op_b, in, 2, made.items, 1));
  DLTensor target = made.items[0]->dl_tensor;
  DLTensor *into[] = {&target};
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemset(target.data, 0, (size_t)(rows * row) * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  ok(tr_op_call_into(op_b, in, 2, into, 1));
  made.reset();  // freed while captured: parked, not freed
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t used_with_both = driver_pool_used();
  const uint64_t kept_before = tr_intree_get_stats().pool_kept;

  tr_op_destroy(&op_a);
  tr_runtime_destroy(&a);  // a's kept block goes back; b's parked block stays
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t block_b = (uint64_t)(rows * row) * sizeof(float);
  const uint64_t used_after_a = driver_pool_used();
  CHECK(tr_intree_get_stats().pool_kept == kept_before - 1);  // a's block, and only it
  CHECK(used_after_a < used_with_both);                       // a's 32 KiB block is the driver's again
  CHECK(used_with_both - used_after_a < block_b);             // b's 1 MiB block is not
  // the graph replays into b's block, which is still b's: every value right
  for (int i = 0; i < 3; i++) REQUIRE(cudaGraphLaunch(exec, cudaStreamPerThread) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  std::vector<float> got = tr_test::host(target);
  CHECK(tr_test::mismatches(got, tr_test::rms_ref(xv, wv, row), 0, 1e-5) == 0);

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  const uint64_t used_with_b = driver_pool_used();
  tr_cuda_trim(b);  // no graph of b's will replay now: its parked block goes back
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(driver_pool_used() <= used_with_b - block_b);
  tr_op_destroy(&op_b);
  tr_runtime_destroy(&b);
}

TEST_CASE("a runtime destroyed before its outputs: they stay valid, and go back as they are freed") {
  const int64_t row = 1024;
  tr_runtime *rt = tr_test::runtime_without_backends();
  tr_op *op = tr_test::rms_op(rt, row);
  std::vector<float> xv = tr_test::random_values(4 * (size_t)row, 44), wv = tr_test::random_values(row, 45);
  tr_test::CudaTensor x({4, row}, xv), w({row}, wv);
  const DLTensor *in[] = {&x.t, &w.t};
  tr_test::Outputs out;
  ok(tr_op_call(op, in, 2, out.items, 1));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t used = driver_pool_used();
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
  CHECK(tr_test::mismatches(tr_test::host(out.items[0]->dl_tensor), tr_test::rms_ref(xv, wv, row), 0, 1e-5) == 0);
  out.reset();  // the pool's last block: freed, not kept (its owner is gone)
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(driver_pool_used() < used);
}

TEST_CASE("a destroyed runtime's last output freed during a capture: nothing freed under the graph") {
  // The pool's end frees what it still holds on the legacy stream, which must not be used while
  // this thread captures (the capture would be invalidated): the blocks wait, and go back at the
  // next pool made, destroyed or trimmed outside a capture.
  const int64_t row = 2048;
  tr_runtime *rt = tr_test::runtime_without_backends();
  tr_op *op = tr_test::rms_op(rt, row);
  std::vector<float> xv = tr_test::random_values(64 * (size_t)row, 46), wv = tr_test::random_values(row, 47);
  tr_test::CudaTensor x({64, row}, xv), w({row}, wv);
  const DLTensor *in[] = {&x.t, &w.t};
  tr_test::Outputs out;
  ok(tr_op_call(op, in, 2, out.items, 1));
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);  // the output is the pool's last block
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const uint64_t used = driver_pool_used();
  REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  out.reset();  // parked, then the pool ends: its blocks wait
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);  // the capture held
  if (graph != nullptr) cudaGraphDestroy(graph);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(driver_pool_used() == used);  // not freed under the graph
  tr_runtime *next = tr_test::runtime_without_backends();  // a pool made outside a capture
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(driver_pool_used() < used);  // the waiting block went back
  tr_runtime_destroy(&next);
}
