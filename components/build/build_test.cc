// build_test.cc: the build component's contract in every placement (inline, a thread, a
// `tilerun serve build` process over ipc and over tcp). Needs NVRTC, not a GPU. For in-tree calls
// of every family, the artifacts the component returns are the ones kernels/intree builds directly
// (same count, key, arch, entry and bytes); each bad request is answered with an error naming
// what was wrong; bytes that are not a BuildRequest are a transport error.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "components/build/build.h"
#include "components/build/build_client.h"
#include "components/pipeline/pipeline_testing.h"
#include "components/select/select_testing.h"

using namespace tr_test;

namespace {

struct NoCache {  // every build compiles, here and in the served process (which inherits it)
  NoCache() { ok(tr_plat_setenv("TILERUN_CACHE_DIR", "off")); }
};

std::vector<IntreeCall> calls() {
  int64_t r4096 = 4096, r1000 = 1000;
  tr_value s4096, s1000;
  ok(tr_value_int_list(&r4096, 1, &s4096));
  ok(tr_value_int_list(&r1000, 1, &s1000));
  std::vector<IntreeCall> c = {
      intree_call("RMSNormFwdOp", {cuda_spec(TR_BFLOAT16, {2, 4096}), cuda_spec(TR_BFLOAT16, {4096})},
                  {{"normalized_shape", s4096}}),  // looped: two builds
      intree_call("LayerNormFwdOp", {cuda_spec(TR_FLOAT16, {3, 1000})}, {{"normalized_shape", s1000}}),  // warp
      intree_call("SoftmaxFwdOp", {cuda_spec(TR_FLOAT32, {4, 8, 3})}, {{"dim", tr_value_int(1)}}),  // strided
      intree_call("AddFwdOp", {cuda_spec(TR_INT64, {5}), cuda_spec(TR_INT64, {5})}, {}),
      // a long softmax row: the block kernel, and on sm_90 its split build (two)
      intree_call("SoftmaxFwdOp", {cuda_spec(TR_BFLOAT16, {2, 20000})}, {{"dim", tr_value_int(-1)}}),
  };
  tr_value_clear(&s4096);
  tr_value_clear(&s1000);
  return c;
}

std::string key_for(const IntreeTable &t, const IntreeCall &c) {
  tr_call_spec call;
  ok(tr_call_spec_copy(&c.call, &call));
  tr_device_facts facts = {90, nullptr, 132, 232448};
  tr_call_spec_state_facts(&call, TR_FACT_ARCH, &facts);
  const char *key = nullptr;
  ok(tr_selector_key_for(t.selector(c.op.c_str()), c.iface.c_str(), &call, &key));
  tr_call_spec_clear(&call);
  return key;
}

// The component's answer: its artifacts, or the error's text.
std::string build(Placed &p, const IntreeCall &c, const std::string &key, const char *arch, tr_artifact out[2],
                  size_t *n) {
  std::vector<uint8_t> request(64 * 1024);
  size_t size = 0;
  ok(tr_build_encode(c.op.c_str(), c.iface.c_str(), key.c_str(), &c.call, arch, request.data(), request.size(), &size));
  request.resize(size);
  std::string reply;
  tr_status *s = p.raw_call(request, &reply);
  if (s == nullptr) s = tr_build_decode((const uint8_t *)reply.data(), reply.size(), out, n);
  return s ? error_of(s) : "";
}

// The same through the client.
std::string via_client(Placed &p, const IntreeCall &c, const std::string &key, const char *arch,
                       tr_built_artifacts *out) {
  tr_build_artifacts_request req = {c.op.c_str(), c.iface.c_str(), key.c_str(), &c.call, arch};
  tr_status *s = tr_build_call(p.pipeline, &req, out);
  return s ? error_of(s) : "";
}

}  // namespace

TEST_CASE("the build contract: the component returns the artifacts kernels/intree builds, in every placement") {
  NoCache off;
  IntreeTable t;
  std::vector<IntreeCall> cs = calls();
  for (Where where : every_placement()) {
    Placed p(TR_COMPONENT_BUILD, where, tr_build_handle, t.table, 20000);
    for (const IntreeCall &c : cs) {
      std::string key = key_for(t, c);
      INFO(where_name(where) << ": " << c.op << " " << key);
      tr_artifact got[2], want[2];
      size_t n_got = 0, n_want = 0;
      std::string error = build(p, c, key, "sm_90a", got, &n_got);
      REQUIRE(error == "");
      const tr_kernel_type *type = tr_selector_type(t.selector(c.op.c_str()), c.iface.c_str(), key.c_str());
      REQUIRE(type != nullptr);
      ok(tr_intree_build(type, &c.call, "sm_90a", want, &n_want));
      CHECK(n_got == n_want);
      CHECK(n_got == (key == "rms_norm_looped" || key == "softmax_block" ? 2u : 1u));
      for (size_t i = 0; i < n_got && i < n_want; i++) {
        CHECK(got[i].key[0] == want[i].key[0]);
        CHECK(got[i].key[1] == want[i].key[1]);
        CHECK(std::string(got[i].arch) == "sm_90a");
        CHECK(std::string(got[i].name) == key);
        CHECK(got[i].size == want[i].size);
        CHECK(std::memcmp(got[i].cubin, want[i].cubin, got[i].size) == 0);
      }
      tr_built_artifacts built;
      REQUIRE(via_client(p, c, key, "sm_90a", &built) == "");
      REQUIRE(built.n == n_want);
      for (size_t i = 0; i < built.n; i++) {
        CHECK(built.artifacts[i].size == want[i].size);
        CHECK(std::memcmp(built.artifacts[i].cubin, want[i].cubin, want[i].size) == 0);
      }
      tr_built_artifacts_clear(&built);
      CHECK(built.n == 0);
      for (size_t i = 0; i < n_got; i++) tr_artifact_clear(&got[i]);
      for (size_t i = 0; i < n_want; i++) tr_artifact_clear(&want[i]);
    }
  }
  for (IntreeCall &c : cs) tr_call_spec_clear(&c.call);
}

TEST_CASE("the build contract: each bad request is answered with an error naming what was wrong") {
  NoCache off;
  IntreeTable t;
  std::vector<IntreeCall> cs = calls();
  for (Where where : every_placement()) {
    Placed p(TR_COMPONENT_BUILD, where, tr_build_handle, t.table, 20000);
    INFO(where_name(where));
    tr_artifact out[2];
    size_t n = 0;
    // a key that refuses the call: the warp kernel for rows of 4096
    CHECK(build(p, cs[0], "rms_norm_warp", "sm_90a", out, &n) ==
          "SelectionError: kernel 'rms_norm_warp' does not serve this call: a warp holds rows of at most 1024 "
          "elements; got row 4096");
    CHECK(build(p, cs[0], "rms_norm_fast", "sm_90a", out, &n) ==
          "SelectionError: RMSNormFwdOp: RMSNormRowFwdInterface has no implementation 'rms_norm_fast'");
    tr_built_artifacts built;
    CHECK(via_client(p, cs[0], "rms_norm_fast", "sm_90a", &built) ==
          "SelectionError: RMSNormFwdOp: RMSNormRowFwdInterface has no implementation 'rms_norm_fast'");
    CHECK(built.n == 0);
    std::string bad_arch = build(p, cs[3], "add_elementwise", "sm_xx", out, &n);
    CHECK(bad_arch.find("CompileError") == 0);
    CHECK(bad_arch.find("sm_xx") != std::string::npos);
    CHECK(build(p, cs[3], "", "sm_90a", out, &n).find("is built in the process that launches it") != std::string::npos);
    IntreeCall other = cs[3];
    other.op = "GroupNormFwdOp";
    CHECK(build(p, other, "add_elementwise", "sm_90a", out, &n) ==
          "OpNotAvailableError: no in-tree kernels are registered for op 'GroupNormFwdOp'");
    CHECK(n == 0);
  }
  Placed inline_(TR_COMPONENT_BUILD, Where::kInline, tr_build_handle, t.table);
  std::string reply;
  tr_status *s = inline_.raw_call({0x0a, 0xff, 0x01}, &reply);
  REQUIRE(s != nullptr);
  CHECK(std::string(tr_status_message(s)).find("BuildRequest") != std::string::npos);
  tr_status_destroy(&s);
  for (IntreeCall &c : cs) tr_call_spec_clear(&c.call);
}
