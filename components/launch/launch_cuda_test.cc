// launch_cuda_test.cc (needs a GPU): launch in another process on cuda tensors through CUDA IPC:
// a runtime whose pipeline places launch in `tilerun serve launch` computes RMSNorm into outputs
// it allocated where the launch process can open them, equal bit for bit to the same call launched
// in process; a memo hit sees new input values; memory from a stream-ordered pool cannot be
// shared and is a clear error naming the tensor, never a crash.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "components/pipeline/pipeline_testing.h"
#include "platform/platform.h"
#include "runtime/cuda_testing.h"
#include "runtime/runtime_testing.h"
#include "sharing/sharing.h"

using namespace tr_test;

TEST_CASE("a cuda device allocation is named by its IPC handle and its offset") {
  std::vector<float> v(64, 1.0f);
  CudaTensor x({64}, v);
  tr_share_ref ref;
  ok(tr_share_ref_of(DLDevice{kDLCUDA, 0}, x.dev + 16, &ref));
  CHECK(ref.kind == TR_SHARE_CUDA_IPC);
  CHECK(ref.offset == 64);
  CHECK(ref.size >= 256);
  CudaTensor pooled({64}, v, true);
  std::string e = error_of(tr_share_ref_of(DLDevice{kDLCUDA, 0}, pooled.dev, &ref));
  CHECK(e.find("ValueError: cannot be shared with another process") == 0);
}

TEST_CASE("launch in another process on cuda tensors (CUDA IPC) equals launch in process") {
  const int64_t rows = 37, row = 4096;
  std::vector<float> xv = random_values((size_t)(rows * row), 3), wv = random_values((size_t)row, 4);
  CudaTensor x({rows, row}, xv), w({row}, wv);
  DLTensor *in[] = {&x.t, &w.t};
  const size_t n = (size_t)(rows * row);

  // In process: the reference.
  tr_runtime *local = runtime_without_backends("");
  tr_op *op = rms_op(local, row);
  DLManagedTensor *out[1] = {nullptr};
  ok(tr_op_call(op, in, 2, out, 1));
  std::vector<float> want = host(out[0]->dl_tensor);
  out[0]->deleter(out[0]);
  CHECK(mismatches(want, rms_ref(xv, wv, (size_t)row), 0, 1e-5) == 0);

  // In a `tilerun serve launch` process.
  char *dir = nullptr;
  ok(tr_plat_make_temp_dir("tr-launch-cuda", &dir));
  std::string endpoint = std::string("ipc://") + dir + "/launch.sock", file = std::string(dir) + "/pipeline.yaml";
  std::string text = "components:\n  launch: {placement: process, endpoint: \"" + endpoint + "\"}\n";
  ok(tr_plat_write_file(file.c_str(), text.data(), text.size()));
  const char *argv[] = {"tools/tilerun", "serve", "launch", "--endpoint", endpoint.c_str(), "--manifest",
                        "manifest/spec", nullptr};
  tr_plat_process *server = nullptr;
  ok(tr_plat_process_spawn(argv, &server));
  tr_runtime *rt = runtime_without_backends(file.c_str());
  tr_op *remote = rms_op(rt, row);
  ok(when_served([&] { return tr_op_call(remote, in, 2, out, 1); }));
  REQUIRE(out[0] != nullptr);
  tr_share_ref ref;
  ok(tr_share_ref_of(out[0]->dl_tensor.device, out[0]->dl_tensor.data, &ref));  // shareable, as made
  std::vector<float> got = host(out[0]->dl_tensor);
  out[0]->deleter(out[0]);
  CHECK(got == want);  // the same kernel on the same bytes

  // A memo hit sees new values.
  std::vector<float> x2 = random_values(n, 9);
  REQUIRE(cudaMemcpy(x.dev, x2.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  ok(tr_op_call(remote, in, 2, out, 1));
  got = host(out[0]->dl_tensor);
  out[0]->deleter(out[0]);
  CHECK(mismatches(got, rms_ref(x2, wv, (size_t)row), 0, 1e-5) == 0);

  // Memory from a stream-ordered pool cannot be shared: named, no crash, and the op works after.
  CudaTensor pooled({rows, row}, xv, true);
  DLTensor *bad[] = {&pooled.t, &w.t};
  std::string e = error_of(tr_op_call(remote, bad, 2, out, 1));
  CHECK(e.find("ValueError: launch: input 0: cannot be shared with another process") == 0);
  CHECK(e.find("stream-ordered pool") != std::string::npos);
  CHECK(e.find("(RMSNormFwdOp, launched in another process)") != std::string::npos);
  ok(tr_op_call(remote, in, 2, out, 1));
  out[0]->deleter(out[0]);

  tr_op_destroy(&remote);
  tr_runtime_destroy(&rt);
  tr_op_destroy(&op);
  tr_runtime_destroy(&local);
  tr_plat_process_kill(server, 0);
  CHECK(tr_plat_process_wait(&server, 5000) == 0);
  ok(tr_plat_remove_tree(dir));
  std::free(dir);
}
