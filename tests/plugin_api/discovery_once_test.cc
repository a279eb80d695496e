// discovery_once_test.cc: discovery runs once per runtime whatever a plugin does. A plugin whose
// kernel types fail a selector construction check (table 5, rows 1-5, and a key the in-tree
// implementations hold) is one load failure, rolled back, its init run once; the CPU backend
// loaded beside it serves RMSNormFwdOp and GemmFwdOp. Its own binary: the plugins' loads are the
// process's first.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>

#include "platform/platform.h"
#include "platform/test_support.h"
#include "runtime/runtime_testing.h"

using tr_test::HostTensor;
using tr_test::Outputs;

static std::string abs_path(const char *rel) { return std::filesystem::absolute(rel).string(); }

// How many lines the poison plugin's inits wrote.
static int inits(const std::string &log) {
  char *data = nullptr;
  size_t size = 0;
  tr_status *s = tr_plat_read_file(log.c_str(), &data, &size);
  if (s != nullptr) {
    tr_status_destroy(&s);
    return 0;
  }
  int n = 0;
  for (size_t i = 0; i < size; i++) n += data[i] == '\n';
  free(data);
  return n;
}

static void check_discovered_once(const char *mode, const char *fragment) {
  tr_test::TempDir dir;
  dir.write("cpu.yaml", "name: cpu\nlibrary: " + abs_path("backends/cpu/libtilerun_cpu.so") + "\n");
  dir.write("poison.yaml", "name: poison\nlibrary: " + abs_path("tests/plugin_api/libpoison_plugin.so") + "\n");
  std::string log = std::string(dir.path) + "/inits.log";
  tr_test::ok(tr_plat_setenv("TR_POISON_LOG", log.c_str()));
  tr_test::ok(tr_plat_setenv("TR_POISON_MODE", mode));
  tr_test::Warnings warnings;
  tr_runtime *rt = tr_test::runtime_with_dirs({dir.path}, &warnings);
  INFO("mode " << mode);
  for (int round = 0; round < 3; round++) {  // op construction and registry queries, again and again
    tr_op *rms = tr_test::rms_op(rt, 8);
    HostTensor x({2, 8}), w({8}, {kDLCPU, 0}, 0.5f);
    const DLTensor *in[] = {&x.t, &w.t};
    Outputs out;
    tr_test::ok(tr_op_call(rms, in, 2, out.items, 1));
    CHECK(std::string(tr_op_target(rms)) == "cpu");
    CHECK(tr_test::mismatches(std::vector<float>(out.f(0), out.f(0) + 16), tr_test::rms_ref(x.data, w.data, 8)) == 0);
    tr_op_destroy(&rms);
    tr_op *gemm = nullptr;
    tr_test::ok(tr_op_new(rt, "GemmFwdOp", nullptr, 0, nullptr, &gemm));
    HostTensor a({2, 3}, {kDLCPU, 0}, 1.0f), b({3, 4}, {kDLCPU, 0}, 2.0f);
    const DLTensor *ab[] = {&a.t, &b.t};
    Outputs d;
    tr_test::ok(tr_op_call(gemm, ab, 2, d.items, 1));
    for (int m = 0; m < 2; m++) {
      for (int n = 0; n < 4; n++) {
        double want = 0;
        for (int k = 0; k < 3; k++) want += (double)a.data[m * 3 + k] * b.data[k * 4 + n];
        CHECK(std::abs(d.f(0)[m * 4 + n] - want) < 1e-5);
      }
    }
    tr_op_destroy(&gemm);
    const char *names[8];
    REQUIRE(tr_registered_targets(rt, nullptr, names, 8) == 1);  // target 'a' rolled back
    CHECK(std::string(names[0]) == "cpu");
    REQUIRE(tr_load_failure_count(rt) == 1);
  }
  CHECK(inits(log) == 1);
  CHECK(std::string(tr_load_failure_backend(rt, 0)) == "poison");
  std::string reason = tr_load_failure_reason(rt, 0);
  CHECK_THAT(reason, Catch::Contains(fragment));
  CHECK(reason.find("already has a detector") == std::string::npos);
  REQUIRE(warnings.lines.size() == 1);
  CHECK_THAT(warnings.lines[0], Catch::StartsWith("backend 'poison'") && Catch::Contains(fragment));
  tr_runtime_destroy(&rt);
  tr_test::ok(tr_plat_setenv("TR_POISON_MODE", nullptr));
}

TEST_CASE("a kernel type that does not implement its interface (row 1) is one load failure, loaded once") {
  check_discovered_once("no_factory", "kernel type 'poison_a' does not implement RMSNormRowFwdInterface");
}

TEST_CASE("a kernel type whose forward does not take the interface's arguments (row 2) is one load failure") {
  check_discovered_once("forward_args", "forward does not take RMSNormRowFwdInterface's arguments");
}

TEST_CASE("a second general implementation (row 3) is one load failure, loaded once") {
  check_discovered_once("general", "RMSNormRowFwdInterface has more than one general implementation: "
                                   "rms_norm_looped, poison_a");
}

TEST_CASE("preferences that form a cycle (row 4) are one load failure, loaded once") {
  check_discovered_once("cycle", "preferences form a cycle through poison_a -> poison_b -> poison_a");
}

TEST_CASE("a key implementing none of the op's interfaces (row 5) is one load failure, loaded once") {
  check_discovered_once("stray", "implements LayerNormRowFwdInterface, which is not a kernel interface of RMSNormFwdOp");
}

TEST_CASE("a key the in-tree implementations already hold is one load failure, loaded once") {
  check_discovered_once("in_tree_key", "key 'rms_norm_warp' is registered twice");
}

TEST_CASE("supported_archs on two device types, bases in a cycle, a preference for no key: one load failure each") {
  check_discovered_once("archs", "kernel type 'poison_a' declares supported_archs, so it lists exactly one device type");
  check_discovered_once("base_cycle", "kernel type 'poison_a': its bases form a cycle: poison_a -> poison_b -> poison_a");
  check_discovered_once("unknown_preference", "'poison_a' is preferred over 'nobody', which is no implementation of "
                                              "RMSNormRowFwdInterface");
}
