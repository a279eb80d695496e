// pipeline_test.cc: pipeline files, the load test (8 caller threads x 10,000 calls through one
// pipeline with thread placements, every reply matched to its request), and CurveZMQ through a
// pipeline file.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "components/pipeline/pipeline_testing.h"
#include "components/pipeline/transport.h"
#include "components/settle/settle.h"
#include "components/validate/validate.h"
#include "platform/test_support.h"

using namespace tr_test;

static std::string load_error(const std::string &text) {
  TempDir dir;
  std::string file = dir.write("p.yaml", text);
  tr_pipeline_config config;
  std::string e = error_of(tr_pipeline_config_load(file.c_str(), &config));
  size_t at = e.find(file);
  if (at != std::string::npos) e.replace(at, file.size(), "F");
  return e;
}

TEST_CASE("pipeline files: placements, endpoints, deadline; errors with file, line and column") {
  TempDir dir;
  std::string file = dir.write("p.yaml", "deadline_ms: 750\ncomponents:\n"
                                         "  validate: {implementation: builtin, placement: thread}\n"
                                         "  settle: {placement: process, endpoint: \"tcp://:45123\"}\n");
  tr_pipeline_config c;
  ok(tr_pipeline_config_load(file.c_str(), &c));
  CHECK(c.deadline_ms == 750);
  CHECK(c.components[TR_COMPONENT_VALIDATE].placement == TR_PLACE_THREAD);
  CHECK(c.components[TR_COMPONENT_SETTLE].placement == TR_PLACE_PROCESS);
  CHECK(std::string(c.components[TR_COMPONENT_SETTLE].endpoint) == "tcp://:45123");
  CHECK(c.components[TR_COMPONENT_BUILD].placement == TR_PLACE_INLINE);  // unnamed: inline
  CHECK(load_error("deadline_ms: 750\n---\ncomponents: {}\n") ==
        "ManifestError: F:2:1: a pipeline file holds one YAML document; a second one starts here");
  CHECK(load_error("components:\n  lanch: {placement: inline}\n") ==
        "ManifestError: F:2:3: unknown component 'lanch' (components: validate, settle, select, build, launch)");
  CHECK(load_error("components:\n  settle: {placement: process}\n") ==
        "ManifestError: F:2:11: component 'settle': placement process needs an endpoint");
  CHECK(load_error("components:\n  settle: {placement: process, endpoint: \"http://x\"}\n") ==
        "ManifestError: F:2:42: component 'settle': endpoint 'http://x' is not ipc:// or tcp://");
  CHECK(load_error("components:\n  settle: {placment: thread}\n") ==
        "ManifestError: F:2:12: component 'settle': unknown key 'placment' (known: implementation, "
        "placement, endpoint, curve_server_key, curve_client_secret_file, path, pins)");
  CHECK(load_error("deadline_ms: -5\n") ==
        "ManifestError: F:1:14: deadline_ms must be a number of milliseconds from 1 to 3600000, got '-5'");
  CHECK(load_error("components: [validate]\n") ==
        "ManifestError: F:1:13: 'components' must be a mapping of component: {placement, ...}");
  CHECK(load_error("deadlines: 5\n") ==
        "ManifestError: F:1:1: unknown key 'deadlines' in a pipeline file (known: components, deadline_ms)");
}

TEST_CASE("pipeline files: a key given twice is an error naming it; nesting too deep is refused fast") {
  CHECK(load_error("components:\n  settle: {placement: thread, placement: inline}\n") ==
        "ManifestError: F:2:31: component 'settle': duplicate key 'placement' (first at line 2, column 12)");
  CHECK(load_error("components:\n  settle: {placement: thread}\n  settle: {placement: inline}\n") ==
        "ManifestError: F:3:3: duplicate key 'settle' in 'components' (first at line 2, column 3)");
  CHECK(load_error("deadline_ms: 5\ncomponents: {}\ndeadline_ms: 6\n") ==
        "ManifestError: F:3:1: duplicate key 'deadline_ms' in a pipeline file (first at line 1, column 1)");
  std::string deep = "components: {settle: ";
  for (int i = 0; i < 100000; i++) deep += "[";
  auto start = std::chrono::steady_clock::now();
  std::string e = load_error(deep + "\n");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(e == "ManifestError: F:1:84: nesting too deep: this sequence is level 65; mappings and sequences "
             "nest at most 64 levels");
  CHECK(seconds < 0.25);  // libyaml alone: about 40 s
}

static tr_manifest *manifest() {
  static tr_manifest *m = [] {
    tr_manifest *loaded = nullptr;
    ok(tr_manifest_load_dir("manifest/spec", &loaded));
    return loaded;
  }();
  return m;
}

TEST_CASE("load: 8 caller threads x 10,000 calls through thread placements, each reply its own") {
  tr_pipeline_config config;
  tr_pipeline_config_default(&config);
  config.components[TR_COMPONENT_VALIDATE].placement = TR_PLACE_THREAD;
  tr_component_handler handlers[TR_COMPONENT_COUNT] = {tr_validate_handle};
  void *contexts[TR_COMPONENT_COUNT] = {manifest()};
  tr_pipeline *p = nullptr;
  ok(tr_pipeline_new(&config, handlers, contexts, &p));
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> request(TR_VALIDATE_MAX), reply(TR_VALIDATE_MAX);
      tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
      for (int i = 0; i < 10000; i++) {
        int64_t shape[2] = {t + 1, i + 1};  // a call no other request makes
        tr_tensor_spec a;
        if (tr_tensor_spec_make(&cpu, TR_FLOAT32, 2, shape, &a) != nullptr) abort();
        const tr_tensor_spec *in[] = {&a, &a};
        size_t n = 0, m = 0;
        tr_status *s = tr_validate_encode("AddFwdOp", nullptr, 0, in, 2, request.data(), request.size(), &n);
        if (s == nullptr) s = tr_pipeline_call(p, TR_COMPONENT_VALIDATE, request.data(), n, reply.data(), reply.size(), &m);
        tr_validated v;
        if (s == nullptr) s = tr_validate_decode(reply.data(), m, &v);
        if (s != nullptr) {
          tr_status_destroy(&s);
          failed++;
          continue;
        }
        wrong += !(v.n_outputs == 1 && v.outputs[0].rank == 2 && v.outputs[0].shape[0] == t + 1 &&
                   v.outputs[0].shape[1] == i + 1);
        tr_validated_clear(&v);
      }
    });
  }
  for (auto &th : threads) th.join();
  CHECK(failed == 0);
  CHECK(wrong == 0);
  tr_pipeline_destroy(&p);
}

// A handler for a server that only holds a port.
static tr_status *EchoNothing(void *, const uint8_t *, size_t, uint8_t *, size_t, size_t *reply_size) {
  *reply_size = 0;
  return nullptr;
}

static std::string slurp_file(const std::string &path) {
  std::string text;
  FILE *f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

// `tilerun serve ARGS` with its stdout and stderr in files of `dir` (out.txt, err.txt).
static tr_plat_process *spawn_serve(const TempDir &dir, const std::string &args) {
  std::string cmd = "exec tools/tilerun serve " + args + " >" + dir.path + "/out.txt 2>" + dir.path + "/err.txt";
  const char *argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  tr_plat_process *p = nullptr;
  ok(tr_plat_process_spawn(argv, &p));
  return p;
}

TEST_CASE("CurveZMQ through a pipeline file: the server's key is needed, and a client list names "
          "the clients served") {
  if (!tr_curve_available()) FAIL("libzmq here has no CurveZMQ");
  TempDir dir;
  char pub[TR_CURVE_KEY_SIZE], sec[TR_CURVE_KEY_SIZE], client_pub[TR_CURVE_KEY_SIZE], client_sec[TR_CURVE_KEY_SIZE];
  ok(tr_curve_keypair(pub, sec));
  ok(tr_curve_keypair(client_pub, client_sec));
  std::string secret_file = dir.write("server.key", std::string(sec) + "\n");
  std::string client_file = dir.write("client.key", std::string(client_sec) + "\n");
  std::string clients = dir.write("clients", "# the one client served\n" + std::string(client_pub) + "\n");
  std::string endpoint;
  tr_plat_process *server = nullptr;
  auto call = [&](const char *key, const std::string &client_secret_file) {
    tr_pipeline_config config;
    tr_pipeline_config_default(&config);
    config.deadline_ms = 700;
    tr_component_config &c = config.components[TR_COMPONENT_VALIDATE];
    c.placement = TR_PLACE_PROCESS;
    snprintf(c.endpoint, sizeof(c.endpoint), "%s", endpoint.c_str());
    snprintf(c.curve_server_key, sizeof(c.curve_server_key), "%s", key);
    snprintf(c.curve_client_secret_file, sizeof(c.curve_client_secret_file), "%s", client_secret_file.c_str());
    tr_component_handler handlers[TR_COMPONENT_COUNT] = {nullptr};
    void *contexts[TR_COMPONENT_COUNT] = {nullptr};
    tr_pipeline *p = nullptr;
    ok(tr_pipeline_new(&config, handlers, contexts, &p));
    uint8_t bad[] = {0xff};
    std::vector<uint8_t> reply(1024);
    size_t n = 0;
    tr_status *s = tr_pipeline_call(p, TR_COMPONENT_VALIDATE, bad, 1, reply.data(), reply.size(), &n);
    std::string text = s ? tr_status_message(s) : "";
    tr_status_destroy(&s);
    tr_pipeline_destroy(&p);
    return text;
  };
  std::string keyed;
  // The server's port: one the system has just handed out as free (a server bound to port 0 in
  // this process, then stopped). Another process may still take it before the spawned server
  // binds it (a test running beside this one once did: "Address already in use"), so a server
  // that never answers is stopped and another port tried.
  for (int attempt = 0; attempt < 3 && keyed.find("decoding a ValidateRequest") == std::string::npos; attempt++) {
    if (server != nullptr) {
      tr_plat_process_kill(server, 1);
      tr_plat_process_wait(&server, 5000);
    }
    tr_server *probe = nullptr;
    ok(tr_server_start("tcp://127.0.0.1:*", EchoNothing, nullptr, nullptr, &probe));
    endpoint = tr_server_endpoint(probe);
    tr_server_stop(&probe);
    // the secret from a file named in the environment, never on the command line
    ok(tr_plat_setenv("TILERUN_CURVE_SECRET_FILE", secret_file.c_str()));
    ok(tr_plat_setenv("TILERUN_CURVE_CLIENTS", clients.c_str()));
    server = spawn_serve(dir, "validate --endpoint " + endpoint + " --manifest manifest/spec");
    ok(tr_plat_setenv("TILERUN_CURVE_SECRET_FILE", nullptr));
    ok(tr_plat_setenv("TILERUN_CURVE_CLIENTS", nullptr));
    for (int tries = 0; tries < 20; tries++) {  // until the server is up
      keyed = call(pub, client_file);
      if (keyed.find("did not answer") == std::string::npos) break;
    }
  }
  CHECK(keyed.find("decoding a ValidateRequest") != std::string::npos);  // the listed client: answered
  const std::string silent = "component 'validate' at " + endpoint + " did not answer within 700 ms";
  CHECK(call(pub, "") == silent);  // the server's key, but a client key not on the list
  CHECK(call("", "") == silent);   // no CurveZMQ at all
  CHECK(call(pub, client_file).find("decoding a ValidateRequest") != std::string::npos);  // still served
  tr_plat_process_kill(server, 0);
  CHECK(tr_plat_process_wait(&server, 5000) == 0);
  std::string out = slurp_file(std::string(dir.path) + "/out.txt");
  std::string err = slurp_file(std::string(dir.path) + "/err.txt");
  INFO(out << err);
  CHECK(out.find("serving validate at " + endpoint + " (CurveZMQ, server key " + pub + "; listed clients only)\n") == 0);
  CHECK(out.find(" 0 CurveZMQ clients refused") == std::string::npos);  // counted
  CHECK(out.find(" CurveZMQ clients refused\nstopped\n") != std::string::npos);
  CHECK(err.find("refused a CurveZMQ client: its key ") != std::string::npos);  // and logged
  CHECK(err.find(client_pub) == std::string::npos);                              // not the listed one
}

TEST_CASE("a served component killed mid-run: the next calls fail at once, far inside the deadline") {
  for (Where where : {Where::kIpc, Where::kTcp}) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_VALIDATE, where, nullptr, nullptr, 10000);
    std::string reply;
    tr_status *s = p.raw_call({0xff}, &reply);
    CHECK(error_of(s).find("decoding a ValidateRequest") != std::string::npos);  // served
    p.stop_server(true);  // SIGKILL mid-run
    tr_plat_sleep_ns(100000000);
    for (int i = 0; i < 3; i++) {
      uint64_t start = tr_plat_now_ns();
      CHECK(error_of(p.raw_call({0xff}, &reply)) ==
            "TransportError: component 'validate' at " + p.endpoint + " dropped the connection (the server ended "
            "or stopped answering); calls fail at once until it is back");
      CHECK((tr_plat_now_ns() - start) / 1000000 < 1000);  // the deadline is 10 s
    }
  }
}

TEST_CASE("a served component that stops answering (paused) is seen as gone within a deadline under 3 s") {
  for (Where where : {Where::kIpc, Where::kTcp}) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_VALIDATE, where, nullptr, nullptr, 1500);
    std::string reply;
    tr_status *s = p.raw_call({0xff}, &reply);
    CHECK(error_of(s).find("decoding a ValidateRequest") != std::string::npos);  // served
    tr_plat_process_pause(p.server, 1);
    const std::string gone = "TransportError: component 'validate' at " + p.endpoint +
                             " dropped the connection (the server ended or stopped answering); calls fail at once "
                             "until it is back";
    uint64_t start = tr_plat_now_ns();
    std::string first = error_of(p.raw_call({0xff}, &reply));  // the heartbeats see it within this call
    CHECK(first == gone);
    CHECK((tr_plat_now_ns() - start) / 1000000 < 1600);
    for (int i = 0; i < 3; i++) {  // and every call after it fails at once
      start = tr_plat_now_ns();
      CHECK(error_of(p.raw_call({0xff}, &reply)) == gone);
      CHECK((tr_plat_now_ns() - start) / 1000000 < 500);
    }
    tr_plat_process_pause(p.server, 0);  // back: served again once ZeroMQ reconnects
    s = when_served([&] { return p.raw_call({0xff}, &reply); });
    CHECK(error_of(s).find("decoding a ValidateRequest") != std::string::npos);
  }
}

TEST_CASE("serve on an ipc path: a live server's path is refused, a dead one's taken over, the file "
          "removed on exit") {
  TempDir dir;
  char *ipc_dir = nullptr;
  ok(tr_plat_make_temp_dir("tr-ipc", &ipc_dir));  // a short path: unix socket paths stop at 107 bytes
  const std::string path = std::string(ipc_dir) + "/echo.sock", endpoint = "ipc://" + path;
  std::free(ipc_dir);
  tr_plat_process *first = spawn_serve(dir, "echo --endpoint " + endpoint);
  for (int i = 0; i < 500 && slurp_file(std::string(dir.path) + "/out.txt").empty(); i++) tr_plat_sleep_ns(10000000);
  REQUIRE(slurp_file(std::string(dir.path) + "/out.txt") == "serving echo at " + endpoint + "\n");
  TempDir second_dir;
  tr_plat_process *second = spawn_serve(second_dir, "echo --endpoint " + endpoint);
  CHECK(tr_plat_process_wait(&second, 10000) == 1);
  CHECK(slurp_file(std::string(second_dir.path) + "/out.txt").empty());  // never said "serving"
  CHECK(slurp_file(std::string(second_dir.path) + "/err.txt") ==
        "tilerun serve: TransportError: cannot bind component 'echo' to " + endpoint +
            ": the path is in use by a live server (stop it, or choose another path)\n");
  tr_transport_options opts = {};
  opts.component = "echo";
  opts.deadline_ms = 2000;
  tr_client *client = nullptr;
  ok(tr_client_new(endpoint.c_str(), &opts, &client));
  uint8_t reply[16];
  size_t n = 0;
  ok(tr_client_call(client, (const uint8_t *)"hi", 2, reply, sizeof(reply), &n));  // the first still answers
  CHECK(std::string((const char *)reply, n) == "hi");
  tr_plat_process_kill(first, 1);  // SIGKILL: the socket file stays
  tr_plat_process_wait(&first, 5000);
  CHECK(tr_plat_file_exists(path.c_str()));
  TempDir third_dir;
  tr_plat_process *third = spawn_serve(third_dir, "echo --endpoint " + endpoint);
  tr_status *s = when_served([&] { return tr_client_call(client, (const uint8_t *)"again", 5, reply, sizeof(reply), &n); });
  ok(s);
  CHECK(std::string((const char *)reply, n) == "again");
  tr_client_destroy(&client);
  tr_plat_process_kill(third, 0);
  CHECK(tr_plat_process_wait(&third, 5000) == 0);
  CHECK_FALSE(tr_plat_file_exists(path.c_str()));  // removed on exit
  tr_status *removed = tr_plat_remove_tree(path.substr(0, path.rfind('/')).c_str());
  tr_status_destroy(&removed);
}

#include <cstring>
#include <fstream>
#include <sstream>

#include "components/pipeline/stages.h"
#include "proto/codec.h"
#include "proto/wire.h"

TEST_CASE("the trace stage writes every message as one JSON line, in any placement") {
  for (tr_placement placement : {TR_PLACE_INLINE, TR_PLACE_THREAD}) {
    TempDir dir;
    std::string trace = std::string(dir.path) + "/trace.jsonl";
    std::string file = dir.write("p.yaml", "components:\n  validate: {implementation: trace, path: \"" + trace +
                                               "\", placement: " + (placement == TR_PLACE_INLINE ? "inline" : "thread") + "}\n");
    tr_pipeline_config config;
    ok(tr_pipeline_config_load(file.c_str(), &config));
    CHECK(config.components[TR_COMPONENT_VALIDATE].implementation == TR_IMPL_TRACE);
    tr_component_handler handlers[TR_COMPONENT_COUNT] = {tr_validate_handle};
    void *contexts[TR_COMPONENT_COUNT] = {manifest()};
    tr_pipeline *p = nullptr;
    ok(tr_pipeline_new(&config, handlers, contexts, &p));
    tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
    int64_t shape[] = {3};
    tr_tensor_spec a;
    ok(tr_tensor_spec_make(&cpu, TR_FLOAT32, 1, shape, &a));
    const tr_tensor_spec *in[] = {&a, &a};
    std::vector<uint8_t> request(TR_VALIDATE_MAX), reply(TR_VALIDATE_MAX);
    size_t n = 0, m = 0;
    ok(tr_validate_encode("AddFwdOp", nullptr, 0, in, 2, request.data(), request.size(), &n));
    for (int i = 0; i < 3; i++) ok(tr_pipeline_call(p, TR_COMPONENT_VALIDATE, request.data(), n, reply.data(), reply.size(), &m));
    tr_pipeline_destroy(&p);
    std::ifstream f(trace);
    std::string line;
    int lines = 0;
    while (std::getline(f, line)) {
      lines++;
      CHECK(line.find("{\"op\": \"AddFwdOp\", \"component\": \"validate\", \"request\": \"") == 0);
      CHECK(line.find("\"reply\": \"0a") != std::string::npos);  // the reply's envelope, in hex
      CHECK(line.find("\"microseconds\": ") != std::string::npos);
      CHECK(line.back() == '}');
    }
    CHECK(lines == 3);
  }
}

static std::string select_call(tr_pipeline *p, const char *op, const char *interface, int64_t batch) {
  tilerun_SelectRequest rq = tilerun_SelectRequest_init_zero;
  tr_wire_request_envelope("select", 0, &rq.envelope);
  rq.has_envelope = true;
  strcpy(rq.op, op);
  strcpy(rq.interface, interface);
  strcpy(rq.call_type, "AttentionCall");
  strcpy(rq.device, "cuda:0");
  rq.fields_count = 2;
  strcpy(rq.fields[0].name, "batch");
  rq.fields[0].has_value = true;
  tr_value b = tr_value_int(batch), kv = tr_value_int(4096);
  ok(tr_codec_value_to(&b, &rq.fields[0].value));
  strcpy(rq.fields[1].name, "seqlen_kv");
  rq.fields[1].has_value = true;
  ok(tr_codec_value_to(&kv, &rq.fields[1].value));
  std::vector<uint8_t> request(tilerun_SelectRequest_size + 64), reply(4096);
  size_t n = 0, m = 0;
  ok(tr_codec_encode(tilerun_SelectRequest_fields, &rq, request.data(), request.size(), &n, "a SelectRequest"));
  tr_status *s = tr_pipeline_call(p, TR_COMPONENT_SELECT, request.data(), n, reply.data(), reply.size(), &m);
  tilerun_SelectReply rp = tilerun_SelectReply_init_zero;
  if (s == nullptr) s = tr_codec_decode(tilerun_SelectReply_fields, reply.data(), m, &rp, "a SelectReply");
  if (s == nullptr && rp.envelope.has_status) s = tr_wire_status_to(&rp.envelope.status);
  return s ? error_of(s) : std::string(rp.key);
}

TEST_CASE("the pinned selector swaps in for select and refuses what its file does not cover") {
  TempDir dir;
  std::string pins = dir.write("pins.yaml",
      "- {op: GQADecodeFwdOp, interface: GQADecodeDenseFwdInterface, match: {batch: 1}, key: gqa_dense_decode_bs1}\n"
      "- {op: GQADecodeFwdOp, interface: GQADecodeDenseFwdInterface, key: gqa_dense_decode}\n");
  for (const char *placement : {"inline", "thread"}) {
    INFO(placement);
    std::string file = dir.write("p.yaml", std::string("components:\n  select: {implementation: pinned, pins: \"") +
                                               pins + "\", placement: " + placement + "}\n");
    tr_pipeline_config config;
    ok(tr_pipeline_config_load(file.c_str(), &config));
    tr_component_handler handlers[TR_COMPONENT_COUNT] = {nullptr};
    void *contexts[TR_COMPONENT_COUNT] = {nullptr};
    tr_pipeline *p = nullptr;
    ok(tr_pipeline_new(&config, handlers, contexts, &p));
    CHECK(select_call(p, "GQADecodeFwdOp", "GQADecodeDenseFwdInterface", 1) == "gqa_dense_decode_bs1");
    CHECK(select_call(p, "GQADecodeFwdOp", "GQADecodeDenseFwdInterface", 7) == "gqa_dense_decode");
    CHECK(select_call(p, "GemmFwdOp", "GemmFwdInterface", 1) ==
          "SelectionError: pinned select: no pin covers GemmFwdOp GemmFwdInterface on cuda:0 (2 call-spec "
          "fields); the pinned selector refuses calls its file does not cover");
    tr_pipeline_destroy(&p);
  }
  CHECK(load_error("components:\n  settle: {implementation: pinned, pins: x}\n") ==
        "ManifestError: F:2:28: component 'settle': implementation 'pinned' is not known here (known: builtin, trace)");
  CHECK(load_error("components:\n  validate: {implementation: trace}\n") ==
        "ManifestError: F:2:13: component 'validate': implementation trace needs a path (the trace file)");
  std::string bad = dir.write("bad.yaml", "- {op: X, interface: Y, key: z, color: red}\n");
  tr_pins *loaded = nullptr;
  CHECK(error_of(tr_pins_load(bad.c_str(), &loaded)) ==
        "ManifestError: " + bad + ":1:33: unknown key 'color' in a pin (known: op, interface, match, key)");
  std::string two = dir.write("two.yaml", "- {op: X, interface: Y, key: z}\n---\n- {op: Z, interface: Y, key: z}\n");
  CHECK(error_of(tr_pins_load(two.c_str(), &loaded)) ==
        "ManifestError: " + two + ":2:1: a pins file holds one YAML document; a second one starts here");
  CHECK(loaded == nullptr);
  // a pins file that is not there: the error says whose it is
  std::string missing = dir.write("m.yaml", "components:\n  select: {implementation: pinned, pins: /nonexistent.yaml}\n");
  tr_pipeline_config config;
  ok(tr_pipeline_config_load(missing.c_str(), &config));
  tr_component_handler handlers[TR_COMPONENT_COUNT] = {nullptr};
  void *contexts[TR_COMPONENT_COUNT] = {nullptr};
  tr_pipeline *p = nullptr;
  std::string e = error_of(tr_pipeline_new(&config, handlers, contexts, &p));
  CHECK(e.find("/nonexistent.yaml") != std::string::npos);
  CHECK(e.find("(the pins file of component 'select')") != std::string::npos);
  CHECK(p == nullptr);
}

TEST_CASE("the shipped pipeline files load") {
  for (const char *file : {"pipelines/default.yaml", "pipelines/out-of-process.yaml", "pipelines/traced.yaml"}) {
    INFO(file);
    tr_pipeline_config config;
    ok(tr_pipeline_config_load(file, &config));
  }
  tr_pins *pins = nullptr;
  ok(tr_pins_load("pipelines/pins.yaml", &pins));
  tr_pins_destroy(&pins);
}

namespace {

// Each waits (up to 2 s) for the other to have started, and answers "together" only when both
// requests were in flight at once; an empty request fails.
std::atomic<int> g_validate_started{0}, g_settle_started{0};

tr_status *latched(std::atomic<int> *mine, std::atomic<int> *other, const uint8_t *request, size_t n, uint8_t *reply,
                   size_t cap, size_t *size) {
  if (n == 0) return TR_STATUS(TR_VALUE, "an empty request");
  mine->store(1);
  uint64_t start = tr_plat_now_ns();
  while (other->load() == 0 && tr_plat_now_ns() - start < 2000000000ull) tr_plat_sleep_ns(100000);
  std::string text = std::string(reinterpret_cast<const char *>(request), n) + (other->load() ? ":together" : ":alone");
  REQUIRE(text.size() <= cap);
  memcpy(reply, text.data(), text.size());
  *size = text.size();
  return nullptr;
}

tr_status *latched_validate(void *, const uint8_t *request, size_t n, uint8_t *reply, size_t cap, size_t *size) {
  return latched(&g_validate_started, &g_settle_started, request, n, reply, cap, size);
}

tr_status *latched_settle(void *, const uint8_t *request, size_t n, uint8_t *reply, size_t cap, size_t *size) {
  return latched(&g_settle_started, &g_validate_started, request, n, reply, cap, size);
}

// Answers "inline:" + the request, and records that it ran.
int g_inline_calls = 0;
tr_status *inline_echo(void *, const uint8_t *request, size_t n, uint8_t *reply, size_t cap, size_t *size) {
  g_inline_calls++;
  std::string text = "inline:" + std::string(reinterpret_cast<const char *>(request), n);
  REQUIRE(text.size() <= cap);
  memcpy(reply, text.data(), text.size());
  *size = text.size();
  return nullptr;
}

}  // namespace

TEST_CASE("tr_pipeline_call_each has thread and process components' requests in flight at once") {
  Where where = GENERATE(Where::kThread, Where::kIpc);
  INFO(where_name(where));
  tr_pipeline_config config;
  tr_pipeline_config_default(&config);
  tr_component_handler handlers[TR_COMPONENT_COUNT] = {latched_validate, latched_settle, inline_echo};
  void *contexts[TR_COMPONENT_COUNT] = {nullptr};
  TempDir dir("each");
  tr_server *servers[2] = {nullptr, nullptr};
  for (int c = 0; c < 2; c++) {
    tr_component_config &cc = config.components[c];
    if (where == Where::kThread) {
      cc.placement = TR_PLACE_THREAD;
    } else {  // a server thread here, reached over ipc as a process component would be
      cc.placement = TR_PLACE_PROCESS;
      std::string ep = std::string("ipc://") + dir.path + (c ? "/s.sock" : "/v.sock");
      snprintf(cc.endpoint, sizeof(cc.endpoint), "%s", ep.c_str());
      ok(tr_server_start(cc.endpoint, handlers[c], nullptr, nullptr, &servers[c]));
    }
  }
  tr_pipeline *p = nullptr;
  ok(tr_pipeline_new(&config, handlers, contexts, &p));
  g_validate_started = 0;
  g_settle_started = 0;
  g_inline_calls = 0;
  uint8_t replies[3][64];
  tr_pipeline_exchange x[3] = {
      {TR_COMPONENT_VALIDATE, reinterpret_cast<const uint8_t *>("v"), 1, replies[0], 64, 0, nullptr, 0},
      {TR_COMPONENT_SELECT, reinterpret_cast<const uint8_t *>("s"), 1, replies[2], 64, 0, nullptr, 0},
      {TR_COMPONENT_SETTLE, reinterpret_cast<const uint8_t *>("t"), 1, replies[1], 64, 0, nullptr, 0}};
  tr_pipeline_call_each(p, x, 3, 0);
  for (auto &e : x) CHECK(e.status == nullptr);
  CHECK(std::string(reinterpret_cast<char *>(replies[0]), x[0].reply_size) == "v:together");
  CHECK(std::string(reinterpret_cast<char *>(replies[2]), x[1].reply_size) == "inline:s");
  CHECK(std::string(reinterpret_cast<char *>(replies[1]), x[2].reply_size) == "t:together");
  CHECK(g_inline_calls == 1);

  SECTION("each exchange has its own status; the others are still made") {
    g_validate_started = 1;  // nothing to wait for
    g_settle_started = 1;
    x[0].request_size = 0;  // validate fails
    tr_pipeline_call_each(p, x, 3, 0);
    CHECK(error_of(x[0].status).find("an empty request") != std::string::npos);  // error_of frees it
    x[0].status = nullptr;
    CHECK(x[0].reply_size == 0);
    CHECK(x[1].status == nullptr);
    CHECK(x[2].status == nullptr);
    CHECK(std::string(reinterpret_cast<char *>(replies[1]), x[2].reply_size) == "t:together");
    CHECK(g_inline_calls == 2);
    for (auto &e : x) tr_status_destroy(&e.status);
  }
  SECTION("until_failure: the first failure in index order ends the call; later exchanges are not made") {
    g_validate_started = 1;
    g_settle_started = 1;
    x[0].request_size = 0;  // validate (index 0) fails; settle (index 2) was sent and is abandoned
    tr_pipeline_call_each(p, x, 3, 1);
    CHECK(error_of(x[0].status).find("an empty request") != std::string::npos);  // error_of frees it
    x[0].status = nullptr;
    CHECK(x[0].made == 1);
    CHECK(x[1].made == 0);
    CHECK(x[2].made == 0);
    CHECK(x[1].status == nullptr);
    CHECK(x[2].status == nullptr);
    CHECK(g_inline_calls == 1);  // the inline select after it was not called
    x[0].request_size = 1;       // the client still serves the next call (the abandoned socket is gone)
    tr_pipeline_call_each(p, x, 3, 1);
    for (auto &e : x) CHECK(e.status == nullptr);
    CHECK(std::string(reinterpret_cast<char *>(replies[1]), x[2].reply_size) == "t:together");
  }
  SECTION("a request that cannot be sent fails alone; the others are made") {
    g_validate_started = 1;
    g_settle_started = 1;
    std::vector<uint8_t> huge(TR_TRANSPORT_DEFAULT_MAX_MESSAGE + 1, 'v');
    x[0].request = huge.data();
    x[0].request_size = huge.size();
    tr_pipeline_call_each(p, x, 3, 0);
    CHECK(error_of(x[0].status).find("larger than the transport's max_message") != std::string::npos);
    x[0].status = nullptr;
    CHECK(x[0].made == 1);
    CHECK(x[1].status == nullptr);
    CHECK(x[2].status == nullptr);
    CHECK(std::string(reinterpret_cast<char *>(replies[1]), x[2].reply_size) == "t:together");
    CHECK(g_inline_calls == 2);
    tr_pipeline_call_each(p, x, 3, 1);  // until_failure: a failed send ends it too
    CHECK(error_of(x[0].status).find("larger than the transport's max_message") != std::string::npos);
    x[0].status = nullptr;
    CHECK(x[1].made == 0);
    CHECK(x[2].made == 0);
    CHECK(g_inline_calls == 2);
  }
  tr_pipeline_destroy(&p);
  for (auto &s : servers) tr_server_stop(&s);
}

// A handler that fails with a message holding every character JSON must escape.
static tr_status *FailsOddly(void *, const uint8_t *, size_t, uint8_t *, size_t, size_t *) {
  return TR_STATUS(TR_VALUE, "a \"quoted\" \\ back\nslash\ttab\x01 bell\x7f caf\xc3\xa9 \xff end");
}

TEST_CASE("the trace stage escapes quotes, backslashes and control characters: each line is JSON") {
  TempDir dir;
  std::string trace = std::string(dir.path) + "/odd.jsonl";
  tr_trace *t = nullptr;
  ok(tr_trace_new(trace.c_str(), "validate", FailsOddly, nullptr, &t));
  // field 2 (the op), length-delimited: an op name with a quote, a backslash, a newline, a
  // control character and UTF-8
  const std::string op = "Odd\"Op\\x\ny\x02z\xc3\xa9";
  std::vector<uint8_t> request = {0x12, (uint8_t)op.size()};
  request.insert(request.end(), op.begin(), op.end());
  uint8_t reply[64];
  size_t n = 0;
  tr_status *s = tr_trace_handle(t, request.data(), request.size(), reply, sizeof(reply), &n);
  CHECK(s != nullptr);
  tr_status_destroy(&s);
  tr_trace_destroy(&t);
  std::string check = dir.write("check.py",
                                "import json, sys\n"
                                "lines = open(sys.argv[1], encoding='utf-8').read().splitlines()\n"
                                "assert len(lines) == 1, lines\n"
                                "d = json.loads(lines[0])\n"
                                "assert d['op'] == 'Odd\"Op\\\\x\\ny\\x02z\\u00e9', repr(d['op'])\n"
                                "assert d['error'] == 'a \"quoted\" \\\\ back\\nslash\\ttab\\x01 bell\\x7f caf\\u00e9 "
                                "\\ufffd end', repr(d['error'])\n"
                                "assert d['component'] == 'validate'\n");
  CHECK(std::system(("/usr/bin/python3 " + check + " " + trace).c_str()) == 0);
}

#include <zmq.h>

// The peak of a process's address space (VmPeak, in kB), read from /proc; -1 where there is none.
static long vm_peak_kb(const std::string &pid) {
  std::string status = slurp_file("/proc/" + pid + "/status");
  size_t at = status.find("VmPeak:");
  return at == std::string::npos ? -1 : std::atol(status.c_str() + at + 7);
}

TEST_CASE("serve: a request over the largest a component takes is refused unread; the server keeps serving") {
  TempDir dir;
  char *ipc_dir = nullptr;
  ok(tr_plat_make_temp_dir("tr-ipc", &ipc_dir));
  const std::string endpoint = std::string("ipc://") + ipc_dir + "/big.sock";
  std::string cmd = "echo $$ >" + std::string(dir.path) + "/pid; exec tools/tilerun serve echo --endpoint " + endpoint +
                    " >" + dir.path + "/out.txt";
  const char *argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  tr_plat_process *server = nullptr;
  ok(tr_plat_process_spawn(argv, &server));
  tr_transport_options opts = {};
  opts.component = "echo";
  opts.deadline_ms = 2000;
  tr_client *client = nullptr;
  ok(tr_client_new(endpoint.c_str(), &opts, &client));
  uint8_t reply[16];
  size_t n = 0;
  ok(when_served([&] { return tr_client_call(client, (const uint8_t *)"hi", 2, reply, sizeof(reply), &n); }));
  std::string pid = slurp_file(std::string(dir.path) + "/pid");
  pid = pid.substr(0, pid.find('\n'));
  const long before = vm_peak_kb(pid);
  if (before < 0) WARN("no /proc here: the server's memory is not measured");

  // 256 MiB in one frame from a plain ZeroMQ socket
  const size_t big = (size_t)256 << 20;
  void *ctx = zmq_ctx_new();
  void *raw = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof(linger));
  REQUIRE(zmq_connect(raw, endpoint.c_str()) == 0);
  zmq_msg_t msg;
  REQUIRE(zmq_msg_init_size(&msg, big) == 0);
  std::memset(zmq_msg_data(&msg), 'x', big);
  REQUIRE(zmq_msg_send(&msg, raw, 0) == (int)big);
  tr_plat_sleep_ns(1000000000);  // time to send it, and for the server to have dropped it
  zmq_close(raw);
  zmq_ctx_term(ctx);

  if (before >= 0) {
    const long after = vm_peak_kb(pid);
    INFO("VmPeak before " << before << " kB, after " << after << " kB");
    CHECK(after - before < 64 * 1024);  // far less than the 256 MiB message
  }
  ok(tr_client_call(client, (const uint8_t *)"still", 5, reply, sizeof(reply), &n));  // serves others
  CHECK(std::string((const char *)reply, n) == "still");
  tr_client_destroy(&client);
  tr_plat_process_kill(server, 0);
  CHECK(tr_plat_process_wait(&server, 5000) == 0);
  std::string out = slurp_file(std::string(dir.path) + "/out.txt");
  INFO(out);
  CHECK(out.find(" 0 peers disconnected") == std::string::npos);  // the big one's sender, at least
  CHECK(out.find("peers disconnected (a request over ") != std::string::npos);
  tr_status *removed = tr_plat_remove_tree(ipc_dir);
  tr_status_destroy(&removed);
  std::free(ipc_dir);
}
