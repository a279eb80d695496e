// pipeline_testing.h: a component placed each way for contract tests: inline, in a thread, and in
// a `tilerun serve` process over ipc and over tcp.
#ifndef TILERUN_COMPONENTS_PIPELINE_TESTING_H_
#define TILERUN_COMPONENTS_PIPELINE_TESTING_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "components/pipeline/pipeline.h"
#include "core/test_support.h"
#include "platform/platform.h"

namespace tr_test {

enum class Where { kInline, kThread, kIpc, kTcp };

inline const char *where_name(Where w) {
  switch (w) {
    case Where::kInline: return "inline";
    case Where::kThread: return "thread";
    case Where::kIpc: return "process over ipc";
    case Where::kTcp: return "process over tcp";
  }
  return "?";
}

inline std::vector<Where> every_placement() { return {Where::kInline, Where::kThread, Where::kIpc, Where::kTcp}; }

// Whether a status says the server is not there (yet, or any more): no answer within the
// deadline, or a dropped connection that ZeroMQ has not made again yet.
inline bool not_there(const std::string &message) {
  return message.find("did not answer") != std::string::npos ||
         message.find("dropped the connection") != std::string::npos;
}

// Calls `call` (returning a status) until a served component answers, or 100 tries: the server
// may still be starting. Returns the last status.
template <class F>
tr_status *when_served(F call) {
  tr_status *s = nullptr;
  for (int tries = 0; tries < 100; tries++) {
    tr_status_destroy(&s);
    s = call();
    if (s == nullptr || !not_there(tr_status_message(s))) break;
    tr_plat_sleep_ns(10000000);  // a dropped connection fails at once: give a reconnect time
  }
  return s;
}

// One component placed somewhere; `call` sends a request's bytes through the pipeline.
struct Placed {
  tr_pipeline *pipeline = nullptr;
  tr_plat_process *server = nullptr;
  tr_component_id id;
  std::string endpoint;
  char *ipc_dir = nullptr;
  std::vector<std::string> server_args;  // more arguments for `tilerun serve`
  Placed(tr_component_id id_, Where where, tr_component_handler handler, void *ctx, uint32_t deadline_ms = 3000,
         std::vector<std::string> args = {})
      : id(id_), server_args(std::move(args)) {
    tr_pipeline_config config;
    tr_pipeline_config_default(&config);
    config.deadline_ms = deadline_ms;
    tr_component_config &c = config.components[id];
    if (where == Where::kThread) c.placement = TR_PLACE_THREAD;
    if (where == Where::kIpc || where == Where::kTcp) {
      c.placement = TR_PLACE_PROCESS;
      static int counter = 0;
      char ep[256];
      if (where == Where::kIpc) {  // a short path: unix socket paths stop at 107 bytes
        ok(tr_plat_make_temp_dir("tr-ipc", &ipc_dir));
        snprintf(ep, sizeof(ep), "ipc://%s/c%d-%d.sock", ipc_dir, (int)id, counter++);
      }
      else snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", 41000 + (int)(tr_plat_now_ns() % 9000) + counter++);
      endpoint = ep;
      snprintf(c.endpoint, sizeof(c.endpoint), "%s", ep);
      start_server();
    }
    tr_component_handler handlers[TR_COMPONENT_COUNT] = {nullptr};
    void *contexts[TR_COMPONENT_COUNT] = {nullptr};
    handlers[id] = handler;
    contexts[id] = ctx;
    ok(tr_pipeline_new(&config, handlers, contexts, &pipeline));
    if (server != nullptr) wait_ready();
  }
  ~Placed() {
    tr_pipeline_destroy(&pipeline);
    stop_server();
    if (ipc_dir != nullptr) {
      tr_status *s = tr_plat_remove_tree(ipc_dir);
      tr_status_destroy(&s);
      std::free(ipc_dir);
    }
  }
  void start_server() {
    std::vector<const char *> argv = {"tools/tilerun", "serve", tr_component_name(id), "--endpoint", endpoint.c_str(),
                                      "--manifest", "manifest/spec"};
    for (const std::string &a : server_args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    ok(tr_plat_process_spawn(argv.data(), &server));
  }
  void stop_server(bool hard = false) {
    if (server == nullptr) return;
    tr_plat_process_kill(server, hard);
    tr_plat_process_wait(&server, 5000);
  }
  // Waits until the served component answers (a malformed request gets a transport answer), for
  // up to a minute: on a loaded 2-core machine (the NVRTC compile tests running beside it) a
  // served process took over 10 s to start answering.
  void wait_ready() {
    uint64_t start = tr_plat_now_ns();
    while (tr_plat_now_ns() - start < 60000000000ull) {
      std::string r;
      tr_status *s = raw_call({0xff}, &r);
      std::string text = s ? tr_status_message(s) : "";
      tr_status_destroy(&s);
      if (!not_there(text)) return;
      tr_plat_sleep_ns(10000000);
    }
    FAIL("the served component never answered at " + endpoint + " within 60 s");
  }
  tr_status *raw_call(const std::vector<uint8_t> &request, std::string *reply) {
    std::vector<uint8_t> buf(256 * 1024);
    size_t n = 0;
    tr_status *s = tr_pipeline_call(pipeline, id, request.data(), request.size(), buf.data(), buf.size(), &n);
    if (s == nullptr) reply->assign((const char *)buf.data(), n);
    return s;
  }
};

}  // namespace tr_test

#endif  // TILERUN_COMPONENTS_PIPELINE_TESTING_H_
