// cli_test.cc: the `tilerun` command: help, usage errors, ops and backends listings.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/cuda/driver.h"
#include "platform/test_support.h"
#include "tools/bench.h"
#include "tools/cli.h"
#include "components/pipeline/transport.h"
#include "tilerun/tilerun.h"

static tr_status *EchoNothing(void *, const uint8_t *, size_t, uint8_t *, size_t, size_t *reply_size) {
  *reply_size = 0;
  return nullptr;
}

struct Run {
  int rc;
  std::string out, err;
};

static std::string slurp(FILE *f) {
  std::string text;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

static Run run(std::vector<std::string> args) {
  args.insert(args.begin(), "tilerun");
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(&a[0]);
  FILE *out = std::tmpfile(), *err = std::tmpfile();
  REQUIRE(out != nullptr);
  REQUIRE(err != nullptr);
  int rc = tr_cli_main((int)argv.size(), argv.data(), out, err);
  return Run{rc, slurp(out), slurp(err)};
}

TEST_CASE("--help explains the commands and exits 0") {
  for (const char *flag : {"--help", "-h", "help"}) {
    Run r = run({flag});
    CHECK(r.rc == 0);
    CHECK(r.out.find("usage: tilerun") == 0);
    CHECK(r.out.find("  run ") != std::string::npos);
    CHECK(r.out.find("TILERUN_BACKEND_PATH") != std::string::npos);
    CHECK(r.err.empty());
  }
}

TEST_CASE("--version prints the library's version, the one tilerun.pc and tr_version() give") {
  Run r = run({"--version"});
  CHECK(r.rc == 0);
  CHECK(r.out == std::string("tilerun ") + tr_version() + "\n");
  CHECK(std::string(tr_version()) == TILERUN_VERSION);
}

TEST_CASE("usage errors name what was wrong and exit 2") {
  Run r = run({});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun: no command given\nRun 'tilerun --help' for usage.\n");
  r = run({"frobnicate"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: unknown command 'frobnicate' (commands: run, ops, manifest, backends, targets, serve, bench, help)") == 0);
  r = run({"ops", "--bogus"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: unknown option '--bogus'") == 0);
  r = run({"ops", "--manifest"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --manifest needs a directory") == 0);
  r = run({"run", "--device"});  // at the end of the line: the value is missing, not ''
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun: --device needs a value: auto, cpu or cuda\nRun 'tilerun --help' for usage.\n");
  CHECK(r.out.empty());
  r = run({"serve", "select", "--endpoint", "ipc:///tmp/x", "--device-facts"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --device-facts needs a value: DEVICE=ARCH,SMS,SHARED_BYTES, e.g. cuda:0=90,132,232448\n") ==
        0);
}

TEST_CASE("an option the command does not take, or one given twice, is a usage error naming it") {
  Run r = run({"targets", "--ops", "AddFwdOp"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun: 'tilerun targets' takes no --ops (its options: --manifest, --pipeline; 'tilerun targets "
                 "--help')\nRun 'tilerun --help' for usage.\n");
  CHECK(r.out.empty());
  r = run({"ops", "--iters", "5"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: 'tilerun ops' takes no --iters (its options: --manifest;") == 0);
  r = run({"backends", "--manifest", "/nonexistent"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: 'tilerun backends' takes no --manifest (its options: none;") == 0);
  r = run({"manifest", "show", "--smallest", "AddFwdOp"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: 'tilerun manifest show' takes no --smallest (its options: --manifest;") == 0);
  r = run({"run", "--ops", "AddFwdOp", "--ops", "SoftmaxFwdOp"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun: --ops is given twice (one value each)\nRun 'tilerun --help' for usage.\n");
  CHECK(r.out.empty());
  r = run({"manifest", "frob"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: 'manifest' takes 'check [FILES]' or 'show OP'; got 'frob'\n") == 0);
  r = run({"serve", "validate", "extra", "--endpoint", "ipc:///tmp/x"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("got 'extra' after 'validate'") != std::string::npos);
  r = run({"serve", "validate", "--endpoint", "inproc://x"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun serve: --endpoint 'inproc://x': an inproc:// endpoint is reachable only inside this "
                 "process; serve at ipc://PATH or tcp://:PORT\n");
}

TEST_CASE("a default manifest folder that cannot be read says where the default came from") {
  REQUIRE(tr_plat_setenv("TILERUN_MANIFEST_DIR", "/nonexistent/spec") == nullptr);
  Run r = run({"ops"});
  CHECK(r.rc == 1);
  CHECK(r.err.find("'/nonexistent/spec'") != std::string::npos);
  CHECK(r.err.find("(the manifest folder by default, from $TILERUN_MANIFEST_DIR; give --manifest DIR)\n") !=
        std::string::npos);
  tr_runtime *rt = nullptr;
  tr_runtime_options o{};
  std::string e = tr_test::error_of(tr_runtime_new(&o, &rt));
  CHECK(e.find("(the manifest folder by default, from $TILERUN_MANIFEST_DIR; give manifest_dir or set "
               "TILERUN_MANIFEST_DIR)") != std::string::npos);
  REQUIRE(tr_plat_setenv("TILERUN_MANIFEST_DIR", nullptr) == nullptr);
  r = run({"ops", "--manifest", "/nonexistent/spec"});  // given: no word of defaults
  CHECK(r.rc == 1);
  CHECK(r.err.find("by default") == std::string::npos);
}

TEST_CASE("run and manifest check on a folder that declares no op fail, saying so") {
  tr_test::TempDir dir;
  Run r = run({"run", "--manifest", dir.path, "--device", "cpu"});
  CHECK(r.rc == 1);
  CHECK(r.err == std::string("tilerun: the manifest folder ") + dir.path +
                     " declares no op (its *.yaml files; --manifest or TILERUN_MANIFEST_DIR names another)\n");
  r = run({"manifest", "check", "--manifest", dir.path});
  CHECK(r.rc == 1);
  CHECK(r.out == std::string("manifest check: 1 problem\n  ") + dir.path +
                     " declares no op (its *.yaml files; see --manifest)\n");
}

TEST_CASE("--version and help take no more words than they use") {
  Run r = run({"--version", "extra"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --version takes nothing else, got 'extra'") == 0);
  r = run({"help", "run", "extra"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: 'run' has no subcommands; got 'extra'") == 0);
  r = run({"help", "manifest", "show", "extra"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: help takes a command and a subcommand, got 'extra' too") == 0);
  r = run({"serve", "select", "--endpoint", "ipc:///tmp/x", "--device-facts", "cuda:0=90,132,232448",
           "--device-facts", "cuda:0=80,108,166912"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun serve: --device-facts 'cuda:0=80,108,166912': cuda:0 is given twice (once, as "
                 "'cuda:0=90,132,232448')\n");
}

TEST_CASE("help for a command that does not exist says so and lists the commands, exit 2") {
  const std::string commands = "(commands: run, ops, manifest, backends, targets, serve, bench, help)";
  for (const std::vector<std::string> &args : {std::vector<std::string>{"help", "bogus"},
                                               std::vector<std::string>{"bogus", "--help"},
                                               std::vector<std::string>{"help", "bogus", "pipeline"}}) {
    Run r = run(args);
    INFO(args[0] << " " << args[1]);
    CHECK(r.rc == 2);
    CHECK(r.err == "tilerun: no command 'bogus' " + commands + "\nRun 'tilerun --help' for usage.\n");
    CHECK(r.out.empty());
  }
  Run r = run({"help", "manifest", "frob"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: no command 'manifest frob' (manifest's subcommands: check, show)\n") == 0);
  CHECK(r.out.empty());
  r = run({"bench", "nope", "--help"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: no command 'bench nope' (bench's subcommands: pipeline)\n") == 0);
  r = run({"help", "help"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("usage: tilerun [--help]") == 0);
}

TEST_CASE("ops lists the manifest's ops with where they are declared") {
  Run r = run({"ops", "--manifest", "manifest/spec"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("manifest manifest/spec: ") == 0);
  CHECK(r.out.find("RMSNormFwdOp") != std::string::npos);
  CHECK(r.out.find("torch.nn.functional.rms_norm") != std::string::npos);
  CHECK(r.out.find("manifest/spec/norm.yaml:") != std::string::npos);
}

TEST_CASE("a broken manifest fails with file, line and column, exit 1") {
  tr_test::TempDir dir;
  std::string file = dir.write("bad.yaml", "bad_name: {}\n");
  Run r = run({"run", "--manifest", dir.path});
  CHECK(r.rc == 1);
  CHECK(r.err.find("tilerun: ManifestError: " + file + ":1:1: op name 'bad_name'") == 0);
}

TEST_CASE("backends lists the search path and what was found there") {
  tr_test::TempDir tmp;
  std::string dir = tmp.path;
  tmp.write("acme.yaml", "name: acme\nlibrary: libacme.so\n");
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", tmp.path) == nullptr);
  Run r = run({"backends"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("backend search path:\n  " + dir + "\n") == 0);
  CHECK(r.out.find("backends: 1 found\n  acme") != std::string::npos);
  CHECK(r.out.find(dir + "/libacme.so") != std::string::npos);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
}

TEST_CASE("run: the ops, the backends, and each op's smallest row run on the cpu backend") {
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "backends/cpu") == nullptr);
  Run r = run({"run", "--manifest", "manifest/spec", "--smallest", "--device", "cpu"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("the main job") != std::string::npos);
  CHECK(r.out.find("backends: 1 found\n  cpu") != std::string::npos);
  CHECK(r.out.find("workloads on cpu (no cuda device asked for), each op's smallest row") != std::string::npos);
  CHECK(r.out.find("  RMSNormFwdOp     llama3.1-8b decode                     cpu   cpu         -") !=
        std::string::npos);
  CHECK(r.out.find("  LinearFwdOp      llama3.1-8b mlp up decode              cpu   (composite)") != std::string::npos);
  // the prefill rows are all over the default --max-gflop 20 on cpu
  CHECK(r.out.find("  GQAPrefillFwdOp  llama3.1-8b prefill batch 1 seq 2048   skipped on cpu: 34.4 GFLOP (over "
                   "--max-gflop 20)") != std::string::npos);
  CHECK(r.out.find("10 rows ran, 0 failed, 1 skipped") != std::string::npos);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "/nonexistent") == nullptr);
  r = run({"run", "--manifest", "manifest/spec", "--smallest", "--device", "cpu"});
  CHECK(r.rc == 1);  // no backend: every row fails, each with its error
  CHECK(r.out.find("RMSNormFwdOp     llama3.1-8b decode                     FAILED: OpNotAvailableError: "
                   "RMSNormFwdOp's in-tree kernels do not run on cpu; known targets for this op: []") !=
        std::string::npos);
  CHECK(r.out.find("10 rows ran, 10 failed, 1 skipped") != std::string::npos);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
  r = run({"run", "--max-gb", "zero"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --max-gb needs a positive number, got 'zero'") == 0);
  r = run({"run", "--device", "tpu"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --device needs auto, cpu or cuda, got 'tpu'") == 0);
  if (tr_cu_device_count() == 0) {  // here (CI): asking for cuda without a device is an error
    r = run({"run", "--manifest", "manifest/spec", "--device", "cuda"});
    CHECK(r.rc == 1);
    CHECK(r.err.find("tilerun: OpNotAvailableError: --device cuda: no cuda device here") == 0);
    CHECK(r.err.find("(on this machine, --device cpu or auto runs every row on the CPU backend)\n") != std::string::npos);
  } else {  // on a GPU machine the same request runs the rows on cuda
    r = run({"run", "--manifest", "manifest/spec", "--device", "cuda", "--smallest"});
    CHECK(r.out.find("workloads on cuda:0") != std::string::npos);
  }
}

TEST_CASE("run: every row; rows over the limits are skipped on cpu with the reason") {
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "backends/cpu") == nullptr);
  Run r = run({"run", "--manifest", "manifest/spec", "--device", "cpu", "--max-gb", "0.05", "--max-gflop", "1"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("workloads on cpu (no cuda device asked for), every row") != std::string::npos);
  CHECK(r.out.find("  SoftmaxFwdOp     llama3.1-8b prefill attention scores b skipped on cpu: moves 8.59 GB (over "
                   "--max-gb 0.05)") != std::string::npos);
  CHECK(r.out.find("  GemmFwdOp") != std::string::npos);
  CHECK(r.out.find("  GemmFwdOp        llama3.1-8b q/o proj prefill           skipped on cpu: moves 0.0671 GB (over "
                   "--max-gb 0.05)") != std::string::npos);

  CHECK(r.out.find("  AddFwdOp         llama3.1-8b residual decode            cpu   cpu") != std::string::npos);
  CHECK(r.out.find("25 rows ran, 0 failed, 37 skipped") != std::string::npos);
  r = run({"run", "--manifest", "manifest/spec", "--device", "cpu", "--max-gb", "0.3", "--max-gflop", "1"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("  GQADecodeFwdOp   llama3.1-8b decode batch 16 kv 4096    skipped on cpu: 1.07 GFLOP (over "
                   "--max-gflop 1)") != std::string::npos);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
}

TEST_CASE("run --ops: only the named ops' rows; an op the manifest lacks is named, nothing run") {
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "backends/cpu") == nullptr);
  Run r = run({"run", "--manifest", "manifest/spec", "--device", "cpu", "--smallest", "--ops", "AddFwdOp,RMSNormFwdOp"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("workloads on cpu (no cuda device asked for), each op's smallest row of AddFwdOp,RMSNormFwdOp") !=
        std::string::npos);
  CHECK(r.out.find("  AddFwdOp         ") != std::string::npos);
  CHECK(r.out.find("  RMSNormFwdOp     llama3.1-8b decode") != std::string::npos);
  CHECK(r.out.find("  LayerNormFwdOp   llama3.1-8b size decode") == std::string::npos);  // no row of another op
  CHECK(r.out.find("2 rows ran, 0 failed, 0 skipped") != std::string::npos);
  r = run({"run", "--manifest", "manifest/spec", "--device", "cpu", "--ops", "AddFwdOp,GemFwdOp"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun: --ops: the manifest (manifest/spec) has no op 'GemFwdOp' ('tilerun ops' lists them)\n");
  CHECK(r.out.empty());  // refused before the op and backend listings, not after them
  r = run({"run", "--manifest", "manifest/spec", "--ops", "Nope"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun: --ops: the manifest (manifest/spec) has no op 'Nope' ('tilerun ops' lists them)\n");
  CHECK(r.out.empty());
  r = run({"run", "--manifest", "manifest/spec", "--device", "cpu", "--ops", "AddFwdOp,"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("has no op ''") != std::string::npos);
  CHECK(r.out.empty());
  r = run({"run", "--ops"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --ops needs op names separated by commas, e.g. GemmFwdOp,LinearFwdOp") == 0);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
}

TEST_CASE("run --target: every row on the named target; one not registered is the spec's error") {
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "backends/cpu") == nullptr);
  Run r = run({"run", "--manifest", "manifest/spec", "--device", "cpu", "--smallest", "--ops", "AddFwdOp",
               "--target", "cpu"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("1 rows ran, 0 failed, 0 skipped") != std::string::npos);
  r = run({"run", "--manifest", "manifest/spec", "--device", "cpu", "--smallest", "--ops", "AddFwdOp", "--target",
           "nosuch"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --target: UnknownTargetError") == 0);
  CHECK(r.err.find("nosuch") != std::string::npos);
  r = run({"run", "--target"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: --target needs a value") == 0);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
}

TEST_CASE("manifest check passes the shipped spec files and lists problems in broken ones") {
  Run r = run({"manifest", "check", "--manifest", "manifest/spec"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("manifest check: 11 ops, ") == 0);
  CHECK(r.out.find("workload rows: no problems") != std::string::npos);
  // a file given twice, under one name or two, is read once (not an op declared twice)
  r = run({"manifest", "check", "manifest/spec/norm.yaml", "manifest/spec/norm.yaml", "manifest/spec/../spec/norm.yaml"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("no problems") != std::string::npos);
  tr_test::TempDir dir;
  std::string file = dir.write("t.yaml",
      "ScaleFwdOp:\n  family: t\n  ref_api: none\n  signature:\n"
      "    inputs:\n      x: {dtype: float32, shape: \"[N]\"}\n"
      "    outputs:\n      y: {dtype: float32, shape: \"[N]\"}\n");
  r = run({"manifest", "check", file});
  CHECK(r.rc == 1);
  CHECK(r.out == "manifest check: 2 problems\n  " + file + ":1: ScaleFwdOp: has no workload rows\n  " +
                 file + ":1: ScaleFwdOp: has no roofline (flops and bytes)\n");
  std::string broken = dir.write("u.yaml", "ScaleFwdOp: {family: t, ref_api: none, signature: {bogus: 1}}\n");
  r = run({"manifest", "check", broken});
  CHECK(r.rc == 1);
  CHECK(r.out == "manifest check: 1 problem\n  " + broken + ":1:52: ScaleFwdOp: unknown key 'bogus' in "
                 "'signature' (known: forall, params, inputs, outputs, constraints)\n");
}

TEST_CASE("manifest show prints the signature and the workload rows") {
  Run r = run({"manifest", "show", "RMSNormFwdOp", "--manifest", "manifest/spec"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("RMSNormFwdOp  (norm, manifest/spec/norm.yaml:") == 0);
  CHECK(r.out.find("  normalized_shape   list[int] | tuple[int, ...]  required") != std::string::npos);
  CHECK(r.out.find("  weight             T                            [*normalized_shape]          optional") !=
        std::string::npos);
  CHECK(r.out.find("x=bfloat16(2048, 4096) weight=bfloat16(4096,) normalized_shape=(4096,)") !=
        std::string::npos);
  r = run({"manifest", "show", "NopeFwdOp", "--manifest", "manifest/spec"});
  CHECK(r.rc == 2);  // an argument naming no op is bad usage, as with run --ops
  CHECK(r.err == "tilerun: no op 'NopeFwdOp' in the manifest manifest/spec (see 'tilerun ops')\n");
  r = run({"manifest", "frob"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: 'manifest' takes 'check [FILES]' or 'show OP'") == 0);
}

TEST_CASE("targets lists each registered target with the ops it serves, and load failures") {
  tr_test::TempDir tmp;
  std::string lib = std::filesystem::absolute("backends/example/libexample_backend.so").string();
  tmp.write("example.yaml", "name: example\nlibrary: " + lib + "\n");
  tmp.write("gone.yaml", "name: gone\nlibrary: /nonexistent/libgone.so\n");
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", tmp.path) == nullptr);
  Run r = run({"targets", "--manifest", "manifest/spec"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("registered targets: 1\n  example          AddFwdOp, RMSNormFwdOp\n") == 0);
  CHECK(r.out.find("load failures: 1\n  gone             ") != std::string::npos);
  CHECK(r.err.find("tilerun: warning: backend 'gone' (") == 0);
  r = run({"targets", "AddFwdOp", "--manifest", "manifest/spec"});
  CHECK(r.out.find("targets serving AddFwdOp: 1\n  example") == 0);
  r = run({"targets", "SoftmaxFwdOp", "--manifest", "manifest/spec"});
  CHECK(r.out.find("targets serving SoftmaxFwdOp: 0\n") == 0);
  r = run({"targets", "NopeFwdOp", "--manifest", "manifest/spec"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun: no op 'NopeFwdOp' in the manifest manifest/spec (see 'tilerun ops')\n");
  CHECK(r.out.find("no backend was found") == std::string::npos);
  // no descriptor anywhere on the path: the empty list says where it looked
  std::string empty = std::string(tmp.path) + "/empty";
  REQUIRE(tr_plat_make_dirs(empty.c_str()) == nullptr);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", (empty + ":/nonexistent/backends").c_str()) == nullptr);
  r = run({"targets", "--manifest", "manifest/spec"});
  CHECK(r.rc == 0);
  // (the path ends with the install's folder, whatever this machine has there)
  CHECK(r.out.find("registered targets: 0\nload failures: 0\nno backend was found: looked for backend descriptors, "
                   "*.yaml, in " + empty + ", /nonexistent/backends (does not exist), ") == 0);
  CHECK(r.out.find("lib/tilerun/backends") != std::string::npos);
  CHECK(r.out.find("; set TILERUN_BACKEND_PATH or install a backend (see 'tilerun backends')\n") != std::string::npos);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
}

TEST_CASE("serve: usage errors, and a component that does not exist") {
  Run r = run({"serve", "validate"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: serve needs --endpoint (ipc://PATH or tcp://:PORT)") == 0);
  r = run({"serve", "--endpoint", "ipc:///tmp/x"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun: serve takes one component (validate, settle, select, build, launch, echo)") == 0);
  r = run({"serve", "memo", "--endpoint", "ipc:///tmp/x"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun serve: no component 'memo' (served: validate, settle, select, build, launch, echo)\n");
  r = run({"serve", "validate", "--endpoint", "ipc:///tmp/x", "--device-facts", "cuda:0=90,132,232448"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun serve: --device-facts is for select, not validate\n");
  r = run({"serve", "settle", "--endpoint", "ftp://x"});
  CHECK(r.rc == 2);
  CHECK(r.err == "tilerun serve: --endpoint: endpoint 'ftp://x' has a transport tilerun does not use: expected "
                 "inproc://, ipc:// or tcp://\n");
  r = run({"serve", "settle", "--endpoint", "tcp://:45999", "--curve-secret", "short"});
  CHECK(r.rc == 2);  // a usage error, whatever the value
  CHECK(r.err == "tilerun serve: --curve-secret is no longer read: on the command line every local user sees the "
                 "key (ps); give it in TILERUN_CURVE_SECRET, or in a file named by TILERUN_CURVE_SECRET_FILE\n");
  CHECK(r.out.empty());
  REQUIRE(tr_plat_setenv("TILERUN_CURVE_SECRET", "short") == nullptr);
  r = run({"serve", "settle", "--endpoint", "tcp://:45999"});
  REQUIRE(tr_plat_setenv("TILERUN_CURVE_SECRET", nullptr) == nullptr);
  CHECK(r.rc == 1);
  CHECK(r.err.find("the Curve secret key must be 40 Z85 characters, got 5 characters (from TILERUN_CURVE_SECRET)") !=
        std::string::npos);
  tr_test::TempDir dir;
  std::string file = dir.write("secret", "tooshort\n");
  REQUIRE(tr_plat_setenv("TILERUN_CURVE_SECRET_FILE", file.c_str()) == nullptr);
  r = run({"serve", "settle", "--endpoint", "tcp://:45999"});
  REQUIRE(tr_plat_setenv("TILERUN_CURVE_SECRET_FILE", nullptr) == nullptr);
  CHECK(r.err.find("got 8 characters (from TILERUN_CURVE_SECRET_FILE)") != std::string::npos);
}

TEST_CASE("serve: a tcp port outside 0..65535 or not a number is a usage error naming the endpoint, exit 2") {
  // ZeroMQ alone binds 99999 as 34463 and -5 as 65531. The manifest does not load: the endpoint is
  // checked before anything is loaded (and no case can reach a bind and serve for ever).
  for (const char *port : {"99999", "-5", "65536", "80x"}) {
    const std::string endpoint = std::string("tcp://:") + port;
    Run r = run({"serve", "validate", "--endpoint", endpoint, "--manifest", "/nonexistent"});
    INFO(endpoint);
    CHECK(r.rc == 2);
    CHECK(r.err == "tilerun serve: --endpoint: endpoint '" + endpoint + "': port '" + port +
                       "' is not a number from 0 to 65535 (or *, any free port)\n");
    CHECK(r.out.empty());
  }
  Run r = run({"serve", "validate", "--endpoint", "tcp://127.0.0.1:123456", "--manifest", "/nonexistent"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("port '123456' is not a number from 0 to 65535") != std::string::npos);
  CHECK(r.out.empty());
}

TEST_CASE("serve --device-facts: a bad entry names the field (DEVICE, ARCH, SMS, SHARED_BYTES) and its value") {
  const std::string format = " (DEVICE=ARCH,SMS,SHARED_BYTES, e.g. cuda:0=90,132,232448)\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cuda:0=-1,99999999999,3", "ARCH must be a whole number from 0 to 2147483647, got '-1'"},
      {"cuda:0=ninety", "ARCH must be a whole number from 0 to 2147483647, got 'ninety'"},
      {"cuda:0=90,99999999999,232448", "SMS must be a whole number from 0 to 2147483647, got '99999999999'"},
      {"cuda:0=90,-132,232448", "SMS must be a whole number from 0 to 2147483647, got '-132'"},
      {"cuda:0=90,132,99999999999999999999",
       "SHARED_BYTES must be a whole number from 0 to 9223372036854775807, got '99999999999999999999'"},
      {"cuda:0=90,132,2.5", "SHARED_BYTES must be a whole number from 0 to 9223372036854775807, got '2.5'"},
      {"cuda:0=90", "SMS is missing"},
      {"cuda:0=90,,232448", "SMS is missing"},
      {"cuda:0=90,132", "SHARED_BYTES is missing"},
      {"cuda:0=90,132,232448,7", "more than the three fields ARCH,SMS,SHARED_BYTES"},
      {"cuda:0", "no '=' after the DEVICE"},
      {"=90,132,232448", "DEVICE is missing"},
  };
  for (const auto &c : cases) {
    // the endpoint is bad too: the facts are checked first, and no case can bind and serve for ever
    Run r = run({"serve", "select", "--endpoint", "ftp://x", "--device-facts", "cuda:1=90,132,232448",
                 "--device-facts", c.first});
    INFO(c.first);
    CHECK(r.rc == 2);
    CHECK(r.err == "tilerun serve: --device-facts '" + c.first + "': " + c.second + format);
    CHECK(r.out.empty());
  }
  Run r = run({"serve", "select", "--endpoint", "ftp://x", "--device-facts", "cu da=90,132,232448"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("tilerun serve: --device-facts 'cu da=90,132,232448': DEVICE: ") == 0);
  r = run({"serve", "select", "--endpoint", "ftp://x", "--device-facts", "cuda:0=90,132,232448"});
  CHECK(r.rc == 2);  // good facts: the endpoint is what is wrong
  CHECK(r.err.find("tilerun serve: --endpoint: endpoint 'ftp://x'") == 0);
}

TEST_CASE("serve says it serves only once the bind succeeded; a failed bind is the error, exit 1") {
  tr_server *holder = nullptr;
  tr_test::ok(tr_server_start("tcp://127.0.0.1:*", EchoNothing, nullptr, nullptr, &holder));
  std::string taken = tr_server_endpoint(holder);
  Run r = run({"serve", "echo", "--endpoint", taken});
  tr_server_stop(&holder);
  CHECK(r.rc == 1);
  CHECK(r.out.find("serving") == std::string::npos);
  CHECK(r.err.find("tilerun serve: TransportError: cannot bind component 'echo' to " + taken) == 0);
  CHECK(r.err.find("Address already in use") != std::string::npos);
}

TEST_CASE("run --pipeline: a bad pipeline file is named with file, line and column") {
  tr_test::TempDir dir;
  std::string file = dir.write("p.yaml", "components:\n  validate: {placement: far}\n");
  Run r = run({"run", "--manifest", "manifest/spec", "--pipeline", file});
  CHECK(r.rc == 1);
  CHECK(r.err.find("ManifestError: " + file + ":2:25: component 'validate': placement 'far' is not "
                   "inline, thread or process") != std::string::npos);
}

TEST_CASE("bench pipeline's free tcp ports: all different on loopback; a host not here is the bind's error") {
  char eps[3][64];
  tr_test::ok(tr_bench_free_tcp_endpoints("127.0.0.1", 3, eps));
  for (int i = 0; i < 3; i++) {
    INFO(eps[i]);
    CHECK(std::string(eps[i]).rfind("tcp://127.0.0.1:", 0) == 0);
    CHECK(std::atoi(eps[i] + 16) > 0);
    for (int j = 0; j < i; j++) CHECK(std::string(eps[i]) != std::string(eps[j]));
  }
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine, so binding it fails
  std::string e = tr_test::error_of(tr_bench_free_tcp_endpoints("192.0.2.1", 3, eps));
  CHECK(e.find("tcp://192.0.2.1:*") != std::string::npos);
  CHECK(tr_test::error_of(tr_bench_free_tcp_endpoints("127.0.0.1", 9, eps)) ==
        "ValueError: at most 8 free tcp endpoints at once, 9 asked");
}

TEST_CASE("bench pipeline: a placement that did not run prints its error in its row, no figure or verdict") {
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "/nonexistent") == nullptr);  // no CPU backend: every miss fails
  Run r = run({"bench", "pipeline", "--iters", "1", "--manifest", "manifest/spec"});
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
  INFO(r.out);
  CHECK(r.rc == 1);
  const std::string not_here = "FAILED: OpNotAvailableError: AddFwdOp's in-tree kernels do not run on cpu; known "
                               "targets for this op: []\n";
  CHECK(r.out.find("\ninline             " + not_here) != std::string::npos);
  CHECK(r.out.find("\nthread (inproc)    " + not_here) != std::string::npos);
  CHECK(r.out.find("\nprocess (ipc)      FAILED: ") != std::string::npos);
  CHECK(r.out.find("\nprocess (tcp)      FAILED: ") != std::string::npos);
  CHECK(r.out.find(": ok") == std::string::npos);
  CHECK(r.out.find("MISSED") == std::string::npos);
  CHECK(r.out.find("0.00") == std::string::npos);
  CHECK(r.out.find("\nhit path: no placement ran\n") != std::string::npos);
  CHECK(r.err.find("tilerun bench: inline: AddFwdOp's in-tree kernels do not run on cpu") != std::string::npos);
}

TEST_CASE("bench pipeline stopped by SIGTERM midway: exit 130, its temporary folder removed") {
  tr_test::TempDir tmp;  // the command's TMPDIR: its folder is made here
  const char *saved = std::getenv("TMPDIR");
  std::string before = saved ? saved : "";
  REQUIRE(tr_plat_setenv("TMPDIR", tmp.path) == nullptr);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "backends/cpu") == nullptr);
  const char *argv[] = {"tools/tilerun", "bench", "pipeline", "--iters", "1000000", "--manifest", "manifest/spec",
                        nullptr};
  tr_plat_process *bench = nullptr;
  tr_status *started = tr_plat_process_spawn(argv, &bench);
  REQUIRE(tr_plat_setenv("TMPDIR", saved ? before.c_str() : nullptr) == nullptr);
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
  tr_test::ok(started);
  bool made = false;  // its folder exists once it measures
  for (int i = 0; i < 500 && !made; i++) {
    made = !std::filesystem::is_empty(tmp.path);
    if (!made) tr_plat_sleep_ns(10 * 1000 * 1000ull);
  }
  CHECK(made);
  tr_plat_sleep_ns(300 * 1000 * 1000ull);
  tr_plat_process_kill(bench, 0);
  CHECK(tr_plat_process_wait(&bench, 20000) == 130);
  CHECK(std::filesystem::is_empty(tmp.path));
}

TEST_CASE("every command has its own --help: usage, a one-line description, options with defaults, exit 0") {
  struct Want {
    std::vector<std::string> args;
    std::string usage;
    std::vector<std::string> lines;  // options, each with its default
  };
  const std::string manifest =
      "  --manifest DIR     the spec directory (default: $TILERUN_MANIFEST_DIR, else the install's\n"
      "                     share/tilerun/manifest, else ./manifest/spec)\n";
  const std::vector<Want> wants = {
      {{"run", "--help"}, "usage: tilerun run [--manifest DIR] [--pipeline FILE] [--device D] [--smallest]",
       {manifest, "  --smallest         each op's smallest workload row only (default: every row)\n",
        "  --max-gb N         rows moving more than N GB", "(default 1; above 0, at most 1000000)\n",
        "(default 20; above 0, at", "  --device D         ", "(default: auto, cuda when there is a GPU)\n",
        "  --pipeline FILE    the pipeline file placing the components (default: $TILERUN_PIPELINE, else\n"}},
      {{"ops", "-h"}, "usage: tilerun ops [--manifest DIR]\n", {manifest}},
      {{"manifest", "--help"}, "usage: tilerun manifest check [FILES] | tilerun manifest show OP\n", {manifest}},
      {{"manifest", "check", "--help"}, "usage: tilerun manifest check [--manifest DIR] [FILES]\n", {manifest}},
      {{"manifest", "check", "a.yaml", "--help"}, "usage: tilerun manifest check [--manifest DIR] [FILES]\n", {manifest}},
      {{"manifest", "show", "--help"}, "usage: tilerun manifest show [--manifest DIR] OP\n", {manifest}},
      {{"backends", "--help"}, "usage: tilerun backends\n", {}},
      {{"targets", "--help"}, "usage: tilerun targets [--manifest DIR] [--pipeline FILE] [OP]\n", {manifest}},
      {{"serve", "--help"}, "usage: tilerun serve COMPONENT --endpoint E [--device-facts F]... [--manifest DIR]\n",
       {manifest, "  --endpoint E       where to listen: ipc://PATH, or tcp://:PORT (binds loopback); required\n",
        "  CurveZMQ           from the environment, never a flag",
        "TILERUN_CURVE_SECRET, or a file named by TILERUN_CURVE_SECRET_FILE;\n",
        "  --device-facts F   select only:", "(default: read from the device)\n"}},
      {{"serve", "validate", "--help"}, "usage: tilerun serve COMPONENT --endpoint E", {manifest}},
      {{"bench", "--help"}, "usage: tilerun bench pipeline [--iters N] [--manifest DIR]\n", {manifest}},
      {{"bench", "pipeline", "--help"}, "usage: tilerun bench pipeline [--iters N] [--manifest DIR]\n",
       {manifest, "  --iters N          calls per measurement (default 2000; a whole number from 1 to 10000000)\n"}},
      {{"help", "bench", "pipeline"}, "usage: tilerun bench pipeline [--iters N] [--manifest DIR]\n", {manifest}},
  };
  for (const Want &w : wants) {
    Run r = run(w.args);
    INFO(w.args[0] << " " << w.args[1] << "\n" << r.out);
    CHECK(r.rc == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find(w.usage) == 0);
    size_t blank = r.out.find("\n\n");
    REQUIRE(blank != std::string::npos);
    size_t end = r.out.find("\n", blank + 2);
    CHECK(r.out.substr(end, 11) == "\n\noptions:\n");  // the description: one line
    for (const std::string &line : w.lines) CHECK(r.out.find(line) != std::string::npos);
    CHECK(r.out.find("  --help, -h         show this text\n") != std::string::npos);
    CHECK(r.out.find("TILERUN_BACKEND_PATH   extra backend directories") == std::string::npos);  // not the global help
  }
}

TEST_CASE("numeric options: not a number, negative, zero, too large and missing each say so") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"bench", "pipeline", "--iters", "99999999999"}, "tilerun: --iters 99999999999 is too large: at most 10000000\n"},
      {{"bench", "pipeline", "--iters", "10000001"}, "tilerun: --iters 10000001 is too large: at most 10000000\n"},
      {{"bench", "pipeline", "--iters", "1e400"}, "tilerun: --iters 1e400 is too large: at most 10000000\n"},
      {{"bench", "pipeline", "--iters", "-5"}, "tilerun: --iters cannot be negative, got '-5'\n"},
      {{"bench", "pipeline", "--iters", "0"}, "tilerun: --iters must be at least 1, got '0'\n"},
      {{"bench", "pipeline", "--iters", "many"}, "tilerun: --iters needs a positive number, got 'many'\n"},
      {{"bench", "pipeline", "--iters", "2.5"}, "tilerun: --iters needs a whole number, got '2.5'\n"},
      {{"bench", "pipeline", "--iters", "0x10"}, "tilerun: --iters needs a positive number, got '0x10'\n"},
      {{"bench", "pipeline", "--iters", " 5"}, "tilerun: --iters needs a positive number, got ' 5'\n"},
      {{"run", "--max-gb", "0x1p3"}, "tilerun: --max-gb needs a positive number, got '0x1p3'\n"},
      {{"bench", "pipeline", "--iters"}, "tilerun: --iters needs a value: a whole number from 1 to 10000000\n"},
      {{"run", "--max-gb", "zero"}, "tilerun: --max-gb needs a positive number, got 'zero'\n"},
      {{"run", "--max-gb", "nan"}, "tilerun: --max-gb needs a positive number, got 'nan'\n"},
      {{"run", "--max-gb", "-0.5"}, "tilerun: --max-gb cannot be negative, got '-0.5'\n"},
      {{"run", "--max-gb", "0"}, "tilerun: --max-gb must be above 0, got '0'\n"},
      {{"run", "--max-gb", "1e7"}, "tilerun: --max-gb 1e7 is too large: at most 1000000\n"},
      {{"run", "--max-gb"}, "tilerun: --max-gb needs a value: a number above 0, at most 1000000\n"},
      {{"run", "--max-gflop", "inf"}, "tilerun: --max-gflop inf is too large: at most 1000000000\n"},
      {{"run", "--max-gflop", "-3"}, "tilerun: --max-gflop cannot be negative, got '-3'\n"},
      {{"run", "--max-gflop", "0.0"}, "tilerun: --max-gflop must be above 0, got '0.0'\n"},
      {{"run", "--max-gflop", "20x"}, "tilerun: --max-gflop needs a positive number, got '20x'\n"},
  };
  for (const auto &c : cases) {
    Run r = run(c.first);
    INFO(c.first[c.first.size() - 1]);
    CHECK(r.rc == 2);
    CHECK(r.err == c.second + "Run 'tilerun --help' for usage.\n");
    CHECK(r.out.empty());
  }
}

TEST_CASE("run with settle served where its backend is missing: the error says the server knows no such target") {
  tr_test::TempDir dir;
  char *ipc_dir = nullptr;
  tr_test::ok(tr_plat_make_temp_dir("tr-ipc", &ipc_dir));  // a short path: unix socket paths stop at 107 bytes
  const std::string endpoint = std::string("ipc://") + ipc_dir + "/settle.sock";
  std::string pipeline = dir.write("p.yaml", "components:\n  settle: {placement: process, endpoint: \"" + endpoint + "\"}\n");
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "/nonexistent") == nullptr);  // the server's: no backend
  const char *argv[] = {"tools/tilerun", "serve", "settle", "--endpoint", endpoint.c_str(), nullptr};
  tr_plat_process *server = nullptr;
  tr_test::ok(tr_plat_process_spawn(argv, &server));
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", "backends/cpu") == nullptr);  // this process's: cpu
  Run r;
  for (int tries = 0; tries < 50; tries++) {  // until the server is up
    r = run({"run", "--manifest", "manifest/spec", "--smallest", "--device", "cpu", "--pipeline", pipeline});
    if (r.out.find("did not answer") == std::string::npos) break;
  }
  REQUIRE(tr_plat_setenv("TILERUN_BACKEND_PATH", nullptr) == nullptr);
  tr_plat_process_kill(server, 0);
  CHECK(tr_plat_process_wait(&server, 5000) == 0);
  tr_status *removed = tr_plat_remove_tree(ipc_dir);
  tr_status_destroy(&removed);
  std::free(ipc_dir);
  CHECK(r.rc == 1);
  CHECK(r.out.find("known targets for this op: ['cpu']") == std::string::npos);  // not the contradiction
  CHECK(r.out.find("RMSNormFwdOp     llama3.1-8b decode                     FAILED: OpNotAvailableError: "
                   "RMSNormFwdOp on cpu: the settle component served at " + endpoint + " knows no target for cpu "
                   "and answered the in-tree kernels, which do not run there; in this process target 'cpu' serves "
                   "it (the settle server lacks that backend: see its TILERUN_BACKEND_PATH)") != std::string::npos);
}
