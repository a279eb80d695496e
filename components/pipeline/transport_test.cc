// transport_test.cc: the transport over inproc, ipc and tcp: echo, concurrency, deadlines,
// restarts, malformed frames, handler errors, CurveZMQ and endpoint resolution.
#include "components/pipeline/transport.h"

#include <catch2/catch.hpp>
#include <zmq.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "platform/platform.h"
#include "platform/test_support.h"

using tr_test::error_of;
using tr_test::ok;
using tr_test::TempDir;

namespace {

constexpr uint64_t kMs = 1000000;  // nanoseconds

// Replies "echo:" + the request.
tr_status *Echo(void *, const uint8_t *request, size_t request_size, uint8_t *reply,
                size_t reply_cap, size_t *reply_size) {
  const size_t need = 5 + request_size;
  if (need > reply_cap) {
    return TR_STATUS(TR_VALUE, "reply of %zu bytes does not fit %zu", need, reply_cap);
  }
  std::memcpy(reply, "echo:", 5);
  if (request_size > 0) std::memcpy(reply + 5, request, request_size);
  *reply_size = need;
  return nullptr;
}

// As Echo, but a request "slow" first sleeps *(uint64_t *)ctx nanoseconds; "fail" fails;
// "huge" answers 4096 bytes; "overflow" breaks the handler contract.
tr_status *Sleepy(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                  size_t reply_cap, size_t *reply_size) {
  std::string text(reinterpret_cast<const char *>(request), request_size);
  if (text == "slow") tr_plat_sleep_ns(*static_cast<uint64_t *>(ctx));
  if (text == "fail") return TR_STATUS(TR_VALUE, "op 'frobnicate' has no param 'eps'");
  if (text == "huge") {
    REQUIRE(reply_cap >= 4096);
    std::memset(reply, 'x', 4096);
    *reply_size = 4096;
    return nullptr;
  }
  if (text == "overflow") {
    *reply_size = reply_cap + 1;
    return nullptr;
  }
  return Echo(ctx, request, request_size, reply, reply_cap, reply_size);
}

// Calls and returns the status; *reply gets the reply bytes.
tr_status *Call(tr_client *client, const std::string &request, std::string *reply,
                size_t cap = 65536) {
  std::vector<uint8_t> buffer(cap + 1);
  size_t size = 12345;
  tr_status *status =
      tr_client_call(client, reinterpret_cast<const uint8_t *>(request.data()), request.size(),
                     buffer.data(), cap, &size);
  if (status != nullptr) {
    CHECK(size == 0);
    return status;
  }
  reply->assign(reinterpret_cast<const char *>(buffer.data()), size);
  return nullptr;
}

std::string CallOk(tr_client *client, const std::string &request) {
  std::string reply;
  ok(Call(client, request, &reply));
  return reply;
}

double MsSince(uint64_t start_ns) { return double(tr_plat_now_ns() - start_ns) / double(kMs); }

// A timing allowance of `ms`, stretched by TILERUN_TEST_TIME_SCALE (the valgrind run sets it:
// everything there runs many times slower). Deadlines themselves are never stretched.
double Slack(double ms) {
  static const double scale = [] {
    const char *text = tr_plat_getenv("TILERUN_TEST_TIME_SCALE");
    const double value = text != nullptr ? std::atof(text) : 1.0;
    return value >= 1.0 ? value : 1.0;
  }();
  return ms * scale;
}

// Owners that stop or destroy at scope end.
struct Server {
  tr_server *s = nullptr;
  Server() = default;
  Server(const std::string &endpoint, tr_handler_fn handler, void *ctx,
         const tr_transport_options *opts = nullptr) {
    ok(tr_server_start(endpoint.c_str(), handler, ctx, opts, &s));
  }
  ~Server() { tr_server_stop(&s); }
  Server(const Server &) = delete;
  Server &operator=(const Server &) = delete;
};

struct Client {
  tr_client *c = nullptr;
  explicit Client(const std::string &endpoint, const tr_transport_options *opts = nullptr) {
    ok(tr_client_new(endpoint.c_str(), opts, &c));
  }
  ~Client() { tr_client_destroy(&c); }
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;
};

// A unique ipc endpoint in `dir` (a Unix socket path must fit in about 107 bytes).
std::string Ipc(const TempDir &dir, const std::string &name) {
  std::string path = std::string(dir.path) + "/" + name;
  INFO("ipc path " << path);
  REQUIRE(path.size() < 100);
  return "ipc://" + path;
}

// A unique inproc endpoint per call.
std::string Inproc(const std::string &name) {
  static std::atomic<int> counter{0};
  return "inproc://transport-test-" + name + "-" + std::to_string(counter++);
}

// Starts a server on "tcp://:PORT" for a free port in 40000-60000; returns the port.
int StartTcp(Server *server, tr_handler_fn handler, void *ctx,
             const tr_transport_options *opts = nullptr) {
  const uint64_t seed = tr_plat_now_ns() / 1000;
  for (int attempt = 0; attempt < 40; attempt++) {
    const int port = 40000 + int((seed + uint64_t(attempt) * 7919) % 20000);
    const std::string endpoint = "tcp://:" + std::to_string(port);
    tr_status *status = tr_server_start(endpoint.c_str(), handler, ctx, opts, &server->s);
    if (status == nullptr) return port;
    const std::string text = error_of(status);
    if (text.find("Address already in use") == std::string::npos) FAIL(text);
  }
  FAIL("no free tcp port in 40000-60000 after 40 tries");
  return -1;
}

// A plain ZeroMQ socket in its own context, for speaking raw frames to a transport endpoint.
struct RawSocket {
  void *ctx = zmq_ctx_new();
  void *sock = nullptr;
  RawSocket(int type, const std::string &endpoint, bool bind) {
    REQUIRE(ctx != nullptr);
    sock = zmq_socket(ctx, type);
    REQUIRE(sock != nullptr);
    int linger = 0;
    REQUIRE(zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger) == 0);
    int timeout_ms = 2000;
    REQUIRE(zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms) == 0);
    REQUIRE((bind ? zmq_bind(sock, endpoint.c_str()) : zmq_connect(sock, endpoint.c_str())) == 0);
  }
  ~RawSocket() {
    zmq_close(sock);
    zmq_ctx_term(ctx);
  }
  void Send(const std::string &frame, int flags = 0) {
    REQUIRE(zmq_send(sock, frame.data(), frame.size(), flags) == int(frame.size()));
  }
  std::string Recv() {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int rc = zmq_msg_recv(&msg, sock, 0);
    std::string data;
    if (rc >= 0) data.assign(static_cast<const char *>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
    REQUIRE(rc >= 0);
    return data;
  }
};

std::string IdBytes(uint64_t id) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; i++) out[i] = char(id >> (8 * i));
  return out;
}

uint64_t IdOf(const std::string &frame) {
  REQUIRE(frame.size() >= 8);
  uint64_t id = 0;
  for (int i = 0; i < 8; i++) id |= uint64_t(uint8_t(frame[i])) << (8 * i);
  return id;
}

std::string Resolve(const char *endpoint) {
  char resolved[TR_ENDPOINT_MAX];
  ok(tr_endpoint_resolve(endpoint, resolved));
  return resolved;
}

}  // namespace

TEST_CASE("endpoints without a tcp host resolve to loopback; others are kept", "[transport]") {
  CHECK(Resolve("tcp://:5555") == "tcp://127.0.0.1:5555");
  CHECK(Resolve("tcp://5555") == "tcp://127.0.0.1:5555");
  CHECK(Resolve("tcp://:*") == "tcp://127.0.0.1:*");
  CHECK(Resolve("tcp://*:5555") == "tcp://*:5555");
  CHECK(Resolve("tcp://0.0.0.0:5555") == "tcp://0.0.0.0:5555");
  CHECK(Resolve("tcp://10.1.2.3:80") == "tcp://10.1.2.3:80");
  CHECK(Resolve("tcp://[::1]:5555") == "tcp://[::1]:5555");
  CHECK(Resolve("ipc:///tmp/x.sock") == "ipc:///tmp/x.sock");
  CHECK(Resolve("inproc://select") == "inproc://select");

  char resolved[TR_ENDPOINT_MAX];
  CHECK(error_of(tr_endpoint_resolve("", resolved)) ==
        "ValueError: an endpoint is needed (inproc://name, ipc:///path or tcp://host:port), got "
        "an empty one");
  CHECK(error_of(tr_endpoint_resolve("udp://x:1", resolved)) ==
        "ValueError: endpoint 'udp://x:1' has a transport tilerun does not use: expected "
        "inproc://, ipc:// or tcp://");
  CHECK(error_of(tr_endpoint_resolve("tcp://", resolved)) ==
        "ValueError: endpoint 'tcp://' names no port");
  CHECK(error_of(tr_endpoint_resolve("tcp://:", resolved)) ==
        "ValueError: endpoint 'tcp://:' names no port");
  CHECK(error_of(tr_endpoint_resolve("inproc://", resolved)) ==
        "ValueError: endpoint 'inproc://' names no address");
  CHECK(error_of(tr_endpoint_resolve("tcp://localhost", resolved)) ==
        "ValueError: endpoint 'tcp://localhost' names no port (tcp://HOST:PORT, tcp://:PORT or tcp://PORT)");
  CHECK(error_of(tr_endpoint_resolve("tcp://[::1]", resolved)) ==
        "ValueError: endpoint 'tcp://[::1]' names no port (tcp://HOST:PORT, tcp://:PORT or tcp://PORT)");
  CHECK(resolved[0] == '\0');
  CHECK(Resolve("tcp://:0") == "tcp://127.0.0.1:0");
  CHECK(Resolve("tcp://:65535") == "tcp://127.0.0.1:65535");
  CHECK(Resolve("tcp://65535") == "tcp://127.0.0.1:65535");
}

TEST_CASE("a tcp port outside 0..65535, or not a number, is refused naming the endpoint", "[transport]") {
  // ZeroMQ itself would bind 99999 as 34463 (mod 65536) and -5 as 65531
  char resolved[TR_ENDPOINT_MAX];
  const std::pair<const char *, const char *> cases[] = {
      {"tcp://:99999", "99999"},      {"tcp://99999", "99999"},         {"tcp://:-5", "-5"},
      {"tcp://:65536", "65536"},      {"tcp://127.0.0.1:70000", "70000"}, {"tcp://[::1]:123456", "123456"},
      {"tcp://:5555x", "5555x"},      {"tcp://:99999999999999999999", "99999999999999999999"},
      {"tcp://*:http", "http"},
  };
  for (const auto &c : cases) {
    INFO(c.first);
    CHECK(error_of(tr_endpoint_resolve(c.first, resolved)) ==
          std::string("ValueError: endpoint '") + c.first + "': port '" + c.second +
              "' is not a number from 0 to 65535 (or *, any free port)");
    CHECK(resolved[0] == '\0');
  }
  tr_transport_options opts = {};
  tr_server *server = nullptr;  // the library refuses it too, before ZeroMQ sees it
  CHECK(error_of(tr_server_start("tcp://:99999", Echo, nullptr, &opts, &server)).find(
            "endpoint 'tcp://:99999': port '99999' is not a number") != std::string::npos);
  CHECK(server == nullptr);
  tr_client *client = nullptr;
  CHECK(error_of(tr_client_new("tcp://127.0.0.1:-5", &opts, &client)).find(
            "port '-5' is not a number from 0 to 65535") != std::string::npos);
  CHECK(client == nullptr);
}

TEST_CASE("long endpoints are refused with their length", "[transport]") {
  char resolved[TR_ENDPOINT_MAX];
  const std::string long_one = "ipc:///" + std::string(300, 'a');
  CHECK(error_of(tr_endpoint_resolve(long_one.c_str(), resolved)).find(
            "is 307 characters long; at most 255 fit") != std::string::npos);
  CHECK(resolved[0] == '\0');
}

TEST_CASE("echo over inproc, ipc and tcp", "[transport]") {
  TempDir dir("transport");
  const std::vector<std::string> requests = {"", "a", "hello, component",
                                             std::string(70000, 'z') + "end"};
  tr_transport_options opts = {};
  opts.component = "echo";

  auto exercise = [&](const std::string &endpoint) {
    INFO("endpoint " << endpoint);
    Client client(endpoint, &opts);
    for (const std::string &request : requests) {
      std::string reply;
      ok(Call(client.c, request, &reply, 80000));
      CHECK(reply == "echo:" + request);
    }
  };

  SECTION("inproc") {
    const std::string endpoint = Inproc("echo");
    Server server(endpoint, Echo, nullptr, &opts);
    CHECK(std::string(tr_server_endpoint(server.s)) == endpoint);
    exercise(endpoint);
  }
  SECTION("ipc") {
    const std::string endpoint = Ipc(dir, "echo.ipc");
    Server server(endpoint, Echo, nullptr, &opts);
    CHECK(std::string(tr_server_endpoint(server.s)) == endpoint);
    exercise(endpoint);
  }
  SECTION("tcp without a host binds loopback") {
    Server server;
    const int port = StartTcp(&server, Echo, nullptr, &opts);
    const std::string loopback = "tcp://127.0.0.1:" + std::to_string(port);
    CHECK(std::string(tr_server_endpoint(server.s)) == loopback);
    // The client resolves a host-less endpoint the same way.
    Client bare("tcp://:" + std::to_string(port), &opts);
    CHECK(std::string(tr_client_endpoint(bare.c)) == loopback);
    CHECK(CallOk(bare.c, "x") == "echo:x");
    exercise(loopback);
  }
  SECTION("a client may be made before its server is up") {
    const std::string endpoint = Ipc(dir, "late.ipc");
    Client client(endpoint, &opts);
    Server server(endpoint, Echo, nullptr, &opts);
    CHECK(CallOk(client.c, "late") == "echo:late");
  }
}

TEST_CASE("many threads share one client; every reply reaches its own caller", "[transport]") {
  TempDir dir("transport");
  constexpr int kThreads = 8;
  constexpr int kCalls = 2000;
  std::string endpoint;
  SECTION("inproc") { endpoint = Inproc("threads"); }
  SECTION("ipc") { endpoint = Ipc(dir, "threads.ipc"); }

  Server server(endpoint, Echo, nullptr);
  Client client(endpoint);
  std::atomic<int> good{0}, bad{0};
  std::mutex first_bad_lock;
  std::string first_bad;
  const uint64_t start = tr_plat_now_ns();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> reply(256);
      for (int i = 0; i < kCalls; i++) {
        // Lengths vary, so a reply swapped between callers cannot pass by accident.
        const std::string request = "thread " + std::to_string(t) + " call " +
                                    std::to_string(i) + std::string(size_t(i % 37), '.');
        size_t size = 0;
        tr_status *status =
            tr_client_call(client.c, reinterpret_cast<const uint8_t *>(request.data()),
                           request.size(), reply.data(), reply.size(), &size);
        std::string text;
        if (status != nullptr) {
          char buf[512];
          tr_status_format(status, buf, sizeof buf);
          text = buf;
          tr_status_destroy(&status);
        } else if (std::string(reinterpret_cast<char *>(reply.data()), size) !=
                   "echo:" + request) {
          text = "wrong reply to '" + request + "': '" +
                 std::string(reinterpret_cast<char *>(reply.data()), size) + "'";
        }
        if (text.empty()) {
          good++;
        } else {
          bad++;
          std::lock_guard<std::mutex> hold(first_bad_lock);
          if (first_bad.empty()) first_bad = text;
        }
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  INFO("first failure: " << first_bad);
  CHECK(bad == 0);
  CHECK(good == kThreads * kCalls);
  WARN(endpoint.substr(0, endpoint.find(':')) << ": " << kThreads * kCalls << " calls from "
                                              << kThreads << " threads in " << MsSince(start)
                                              << " ms");
}

TEST_CASE("a call without an answer fails at its deadline; the late reply goes nowhere",
          "[transport]") {
  TempDir dir("transport");
  uint64_t sleep_ns = 400 * kMs;
  std::string endpoint;
  SECTION("inproc") { endpoint = Inproc("sleepy"); }
  SECTION("ipc") { endpoint = Ipc(dir, "sleepy.ipc"); }
  Server server(endpoint, Sleepy, &sleep_ns);
  tr_transport_options opts = {};
  opts.component = "sleepy";
  opts.deadline_ms = 150;
  Client client(endpoint, &opts);
  // Warm up until the server answers: on a loaded machine its first answer can take longer than
  // the 150 ms deadline under test (a CI run once missed it so); the deadline is checked on "slow".
  std::string warm;
  for (int i = 0; i < 40 && warm != "echo:warm"; i++) {
    tr_status *missed = Call(client.c, "warm", &warm);
    tr_status_destroy(&missed);
  }
  CHECK(warm == "echo:warm");

  std::string reply;
  const uint64_t start = tr_plat_now_ns();
  tr_status *status = Call(client.c, "slow", &reply);
  const double elapsed = MsSince(start);
  CHECK(error_of(status) == "TransportError: component 'sleepy' at " + endpoint +
                                " did not answer within 150 ms");
  CHECK(elapsed >= 150.0);
  CHECK(elapsed < 150.0 + Slack(100.0));

  // The handler finishes "slow" and its reply is sent to the closed socket; the next call
  // gets its own reply, never the stale one.
  tr_plat_sleep_ns(sleep_ns);
  CHECK(CallOk(client.c, "fast") == "echo:fast");
}

TEST_CASE("a client with no server fails within its deadline", "[transport]") {
  TempDir dir("transport");
  tr_transport_options opts = {};
  opts.component = "absent";
  opts.deadline_ms = 120;
  for (const std::string &endpoint : {Ipc(dir, "nobody.ipc"), Inproc("nobody")}) {
    Client client(endpoint, &opts);
    std::string reply;
    const uint64_t start = tr_plat_now_ns();
    CHECK(error_of(Call(client.c, "anyone?", &reply)) ==
          "TransportError: component 'absent' at " + endpoint + " did not answer within 120 ms");
    CHECK(MsSince(start) < 120.0 + Slack(100.0));
  }
}

TEST_CASE("stopping a server mid-run fails calls (inproc at their deadline, ipc at once); a "
          "restart serves again", "[transport]") {
  TempDir dir("transport");
  std::string endpoint;
  bool dropped = false;  // ipc: the client sees the connection go and fails at once
  SECTION("ipc") {
    endpoint = Ipc(dir, "restart.ipc");
    dropped = true;
  }
  SECTION("inproc") { endpoint = Inproc("restart"); }
  tr_transport_options opts = {};
  opts.component = "restart";
  opts.deadline_ms = 250;
  INFO("endpoint " << endpoint);
  const std::string timeout_text = "TransportError: component 'restart' at " + endpoint +
                                   (dropped ? " dropped the connection (the server ended or stopped "
                                              "answering); calls fail at once until it is back"
                                            : " did not answer within 250 ms");

  Server server(endpoint, Echo, nullptr, &opts);
  Client client(endpoint, &opts);
  constexpr int kThreads = 4;
  std::atomic<bool> done{false};
  std::atomic<int> successes{0}, timeouts{0}, others{0}, too_slow{0};
  std::atomic<int> last_ok[kThreads] = {};
  std::mutex other_lock;
  std::string other_text;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; !done; i++) {
        const std::string request = std::to_string(t) + ":" + std::to_string(i);
        std::vector<uint8_t> reply(64);
        size_t size = 0;
        const uint64_t start = tr_plat_now_ns();
        tr_status *status =
            tr_client_call(client.c, reinterpret_cast<const uint8_t *>(request.data()),
                           request.size(), reply.data(), reply.size(), &size);
        if (MsSince(start) > 250.0 + Slack(150.0)) too_slow++;
        if (status == nullptr) {
          const bool right =
              std::string(reinterpret_cast<char *>(reply.data()), size) == "echo:" + request;
          (right ? successes : others)++;
          last_ok[t] = right ? 1 : 0;
          continue;
        }
        char buf[512];
        tr_status_format(status, buf, sizeof buf);
        tr_status_destroy(&status);
        last_ok[t] = 0;
        if (buf == timeout_text) {
          timeouts++;
          if (dropped) tr_plat_sleep_ns(kMs);  // the loop does not spin while the server is down
        } else {
          others++;
          std::lock_guard<std::mutex> hold(other_lock);
          other_text = buf;
        }
      }
    });
  }
  tr_plat_sleep_ns(200 * kMs);
  const int before_stop = successes;
  const uint64_t stop_start = tr_plat_now_ns();
  tr_server_stop(&server.s);
  const double stop_ms = MsSince(stop_start);
  const int at_stop = successes;
  tr_plat_sleep_ns(600 * kMs);
  // Once stopped, only replies already on their way may still arrive, one per caller at most.
  const int while_down = successes - at_stop;
  ok(tr_server_start(endpoint.c_str(), Echo, nullptr, &opts, &server.s));
  tr_plat_sleep_ns(700 * kMs);
  done = true;
  for (std::thread &thread : threads) thread.join();

  INFO("unexpected outcome: " << other_text);
  CHECK(before_stop > 0);
  CHECK(stop_ms < Slack(100.0));
  CHECK(while_down <= kThreads);  // at most the calls already answered as it stopped
  CHECK(timeouts >= kThreads);
  CHECK(others == 0);
  CHECK(too_slow == 0);
  for (int t = 0; t < kThreads; t++) CHECK(last_ok[t] == 1);
}

TEST_CASE("an idle client survives its server's restart", "[transport]") {
  TempDir dir("transport");
  std::string endpoint;
  SECTION("ipc") { endpoint = Ipc(dir, "idle.ipc"); }
  SECTION("inproc") { endpoint = Inproc("idle"); }
  tr_transport_options opts = {};
  opts.component = "idle";
  opts.deadline_ms = 1000;
  Server server;
  SECTION("tcp") {
    endpoint = "tcp://127.0.0.1:" + std::to_string(StartTcp(&server, Echo, nullptr, &opts));
  }
  INFO("endpoint " << endpoint);
  if (server.s == nullptr) ok(tr_server_start(endpoint.c_str(), Echo, nullptr, &opts, &server.s));
  Client client(endpoint, &opts);
  CHECK(CallOk(client.c, "before") == "echo:before");
  // The pooled socket sees its peer go: an ipc or tcp one reconnects (every 100 ms); an
  // inproc one is replaced at the next call, since inproc never reconnects. (A request sent in
  // the very instant the server goes may still be lost with the old connection: that call
  // fails at its deadline.)
  tr_server_stop(&server.s);
  ok(tr_server_start(endpoint.c_str(), Echo, nullptr, &opts, &server.s));
  tr_plat_sleep_ns(300 * kMs);
  const uint64_t start = tr_plat_now_ns();
  CHECK(CallOk(client.c, "after") == "echo:after");
  CHECK(MsSince(start) < Slack(50.0));
}

TEST_CASE("malformed frames are dropped and counted; the server keeps answering",
          "[transport]") {
  TempDir dir("transport");
  const std::string endpoint = Ipc(dir, "malformed.ipc");
  tr_transport_options opts = {};
  opts.component = "sturdy";
  opts.max_message = 1024;
  Server server(endpoint, Echo, nullptr, &opts);
  CHECK(tr_server_dropped(server.s) == 0);

  RawSocket raw(ZMQ_DEALER, endpoint, false);
  raw.Send("abc");                                // shorter than a request id
  raw.Send(IdBytes(2) + "first", ZMQ_SNDMORE);    // two frames
  raw.Send("second");
  raw.Send(std::string());  // empty
  // A well-formed request still gets the documented reply: id, kind 0, payload.
  raw.Send(IdBytes(42) + "hi");
  const std::string reply = raw.Recv();
  CHECK(IdOf(reply) == 42);
  CHECK(reply.substr(8) == std::string(1, '\0') + "echo:hi");
  // Exactly max_message is accepted (the echo then does not fit: an error reply, kind 1).
  raw.Send(IdBytes(43) + std::string(1024, 'm'));
  const std::string error_reply = raw.Recv();
  CHECK(IdOf(error_reply) == 43);
  CHECK(error_reply.substr(8) ==
        std::string(1, '\1') + "ValueError: reply of 1029 bytes does not fit 1024");

  const uint64_t start = tr_plat_now_ns();
  while (tr_server_dropped(server.s) < 3 && MsSince(start) < 2000) tr_plat_sleep_ns(5 * kMs);
  CHECK(tr_server_dropped(server.s) == 3);
  Client client(endpoint, &opts);
  CHECK(CallOk(client.c, "still here") == "echo:still here");
  // One byte over max_message: ZeroMQ refuses it (ZMQ_MAXMSGSIZE) and drops that peer.
  const uint64_t before = tr_server_disconnects(server.s);
  RawSocket over(ZMQ_DEALER, endpoint, false);
  over.Send(IdBytes(1) + std::string(1025, 'o'));
  const uint64_t sent = tr_plat_now_ns();
  while (tr_server_disconnects(server.s) == before && MsSince(sent) < 2000) tr_plat_sleep_ns(5 * kMs);
  CHECK(tr_server_disconnects(server.s) == before + 1);
  CHECK(tr_server_dropped(server.s) == 3);
  CHECK(CallOk(client.c, "and here") == "echo:and here");

  // A client refuses a request over max_message before sending it.
  std::string ignored;
  CHECK(error_of(Call(client.c, std::string(1025, 'r'), &ignored)) ==
        "TransportError: a request of 1025 bytes for component 'sturdy' at " + endpoint +
            " is larger than the transport's max_message of 1024 bytes");
}

TEST_CASE("a client matches replies by id and discards stale or malformed ones", "[transport]") {
  TempDir dir("transport");
  const std::string endpoint = Ipc(dir, "fake.ipc");
  RawSocket router(ZMQ_ROUTER, endpoint, true);
  tr_transport_options opts = {};
  opts.component = "fake";
  opts.deadline_ms = 2000;
  Client client(endpoint, &opts);

  std::string reply;
  tr_status *status = nullptr;
  std::thread caller([&] { status = Call(client.c, "question", &reply); });
  const std::string identity = router.Recv();
  const std::string request = router.Recv();
  const uint64_t id = IdOf(request);
  CHECK(request.substr(8) == "question");
  auto send = [&](const std::string &frame) {
    router.Send(identity, ZMQ_SNDMORE);
    router.Send(frame);
  };
  send("short");                                                // no room for id and kind
  send(IdBytes(id - 1) + std::string(1, '\0') + "stale answer");  // an earlier call's
  send(IdBytes(id + 7) + std::string(1, '\0') + "not yours");
  router.Send(identity, ZMQ_SNDMORE);  // two frames
  router.Send(IdBytes(id) + std::string(1, '\0') + "part", ZMQ_SNDMORE);
  router.Send("two");
  send(IdBytes(id) + std::string(1, '\0') + "the answer");
  caller.join();
  ok(status);
  CHECK(reply == "the answer");

  // A reply kind this transport does not know is an error, not a reply.
  std::thread second([&] { status = Call(client.c, "again", &reply); });
  router.Recv();
  const uint64_t id2 = IdOf(router.Recv());
  send(IdBytes(id2) + std::string(1, '\7') + "future");
  second.join();
  CHECK(error_of(status) == "TransportError: component 'fake' at " + endpoint +
                                " sent a reply of unknown kind 7");
}

TEST_CASE("handler failures and oversized replies are transport errors", "[transport]") {
  const std::string endpoint = Inproc("errors");
  uint64_t sleep_ns = 0;
  tr_transport_options opts = {};
  opts.component = "validate";
  opts.max_message = 8192;
  Server server(endpoint, Sleepy, &sleep_ns, &opts);
  Client client(endpoint, &opts);
  std::string reply;

  CHECK(error_of(Call(client.c, "fail", &reply)) ==
        "TransportError: component 'validate' at " + endpoint +
            " failed: ValueError: op 'frobnicate' has no param 'eps'");
  CHECK(error_of(Call(client.c, "huge", &reply, 100)) ==
        "TransportError: component 'validate' at " + endpoint +
            " sent a reply of 4096 bytes, larger than the caller's buffer of 100 bytes");
  CHECK(error_of(Call(client.c, "overflow", &reply)) ==
        "TransportError: component 'validate' at " + endpoint +
            " failed: InternalError: the handler of component 'validate' reported a reply of "
            "8193 bytes in room for 8192");
  ok(Call(client.c, "huge", &reply, 4096));
  CHECK(reply == std::string(4096, 'x'));
  CHECK(CallOk(client.c, "fine") == "echo:fine");
}

TEST_CASE("a bind failure names the endpoint and ZeroMQ's reason", "[transport]") {
  tr_transport_options opts = {};
  opts.component = "dup";
  const std::string endpoint = Inproc("dup");
  Server first(endpoint, Echo, nullptr, &opts);
  tr_server *second = nullptr;
  CHECK(error_of(tr_server_start(endpoint.c_str(), Echo, nullptr, &opts, &second)) ==
        "TransportError: cannot bind component 'dup' to " + endpoint +
            ": Address already in use");
  CHECK(second == nullptr);

  Server tcp;
  const int port = StartTcp(&tcp, Echo, nullptr, &opts);
  const std::string taken = "tcp://127.0.0.1:" + std::to_string(port);
  CHECK(error_of(tr_server_start(taken.c_str(), Echo, nullptr, &opts, &second)) ==
        "TransportError: cannot bind component 'dup' to " + taken + ": Address already in use");

  CHECK(error_of(tr_server_start("bogus", Echo, nullptr, &opts, &second)) ==
        "ValueError: endpoint 'bogus' has a transport tilerun does not use: expected "
        "inproc://, ipc:// or tcp://");
  tr_client *client = nullptr;
  CHECK(error_of(tr_client_new("tcp://", &opts, &client)) ==
        "ValueError: endpoint 'tcp://' names no port");
  CHECK(client == nullptr);
}

TEST_CASE("stopping returns promptly with clients connected", "[transport]") {
  TempDir dir("transport");
  for (const std::string &endpoint : {Ipc(dir, "busy.ipc"), Inproc("busy")}) {
    tr_server *server = nullptr;
    ok(tr_server_start(endpoint.c_str(), Echo, nullptr, nullptr, &server));
    std::vector<tr_client *> clients(5, nullptr);
    for (tr_client *&client : clients) {
      ok(tr_client_new(endpoint.c_str(), nullptr, &client));
      CHECK(CallOk(client, "hi") == "echo:hi");
    }
    const uint64_t start = tr_plat_now_ns();
    tr_server_stop(&server);
    CHECK(server == nullptr);
    CHECK(MsSince(start) < Slack(50.0));
    for (tr_client *&client : clients) tr_client_destroy(&client);
  }
  tr_server_stop(nullptr);
  tr_client_destroy(nullptr);
}

TEST_CASE("tr_server_run serves in the calling thread until asked to stop", "[transport]") {
  TempDir dir("transport");
  const std::string endpoint = Ipc(dir, "serve.ipc");
  volatile int stop = 0;
  tr_status *result = nullptr;
  std::thread runner([&] {
    result = tr_server_run(endpoint.c_str(), Echo, nullptr, nullptr, &stop);
  });
  Client client(endpoint);
  CHECK(CallOk(client.c, "served") == "echo:served");
  const uint64_t start = tr_plat_now_ns();
  stop = 1;
  runner.join();
  CHECK(MsSince(start) < 100.0 + Slack(50.0));
  ok(result);

  volatile int never = 0;
  CHECK(error_of(tr_server_run("inproc://", Echo, nullptr, nullptr, &never)) ==
        "ValueError: endpoint 'inproc://' names no address");
}

TEST_CASE("a CurveZMQ server answers keyed clients only", "[transport]") {
  if (!tr_curve_available()) {
    WARN("this libzmq has no CurveZMQ: skipped");
    char pub[TR_CURVE_KEY_SIZE], sec[TR_CURVE_KEY_SIZE];
    CHECK(error_of(tr_curve_keypair(pub, sec)).find("not built in") != std::string::npos);
    return;
  }
  TempDir dir("transport");
  char server_public[TR_CURVE_KEY_SIZE], server_secret[TR_CURVE_KEY_SIZE];
  ok(tr_curve_keypair(server_public, server_secret));
  CHECK(std::strlen(server_public) == 40);
  CHECK(std::strlen(server_secret) == 40);

  tr_transport_options server_opts = {};
  server_opts.component = "secure";
  server_opts.curve_server_public = server_public;
  server_opts.curve_server_secret = server_secret;
  Server ipc_server;
  const std::string ipc = Ipc(dir, "secure.ipc");
  ok(tr_server_start(ipc.c_str(), Echo, nullptr, &server_opts, &ipc_server.s));
  Server tcp_server;
  const int port = StartTcp(&tcp_server, Echo, nullptr, &server_opts);
  const std::string tcp = "tcp://127.0.0.1:" + std::to_string(port);

  for (const std::string &endpoint : {ipc, tcp}) {
    INFO("endpoint " << endpoint);
    tr_transport_options keyed = {};
    keyed.component = "secure";
    keyed.deadline_ms = 1000;
    keyed.curve_server_public = server_public;
    Client generated(endpoint, &keyed);  // the client's own keypair is made for it
    CHECK(CallOk(generated.c, "sealed") == "echo:sealed");

    char client_public[TR_CURVE_KEY_SIZE], client_secret[TR_CURVE_KEY_SIZE];
    ok(tr_curve_keypair(client_public, client_secret));
    keyed.curve_client_public = client_public;
    keyed.curve_client_secret = client_secret;
    Client given(endpoint, &keyed);
    CHECK(CallOk(given.c, "sealed too") == "echo:sealed too");

    tr_transport_options keyless = {};
    keyless.component = "secure";
    keyless.deadline_ms = 300;
    Client plain(endpoint, &keyless);
    std::string reply;
    const uint64_t start = tr_plat_now_ns();
    CHECK(error_of(Call(plain.c, "let me in", &reply)) ==
          "TransportError: component 'secure' at " + endpoint + " did not answer within 300 ms");
    CHECK(MsSince(start) < 300.0 + Slack(100.0));

    char other_public[TR_CURVE_KEY_SIZE], other_secret[TR_CURVE_KEY_SIZE];
    ok(tr_curve_keypair(other_public, other_secret));
    tr_transport_options wrong = keyless;
    wrong.curve_server_public = other_public;
    Client impostor(endpoint, &wrong);
    CHECK(error_of(Call(impostor.c, "let me in", &reply)) ==
          "TransportError: component 'secure' at " + endpoint + " did not answer within 300 ms");
  }
  CHECK(tr_server_dropped(ipc_server.s) == 0);
}

TEST_CASE("a CurveZMQ server with a client list serves the listed clients only, and counts "
          "the refused", "[transport]") {
  if (!tr_curve_available()) return;
  TempDir dir("transport");
  char server_public[TR_CURVE_KEY_SIZE], server_secret[TR_CURVE_KEY_SIZE];
  char listed_public[TR_CURVE_KEY_SIZE], listed_secret[TR_CURVE_KEY_SIZE];
  char other_public[TR_CURVE_KEY_SIZE], other_secret[TR_CURVE_KEY_SIZE];
  ok(tr_curve_keypair(server_public, server_secret));
  ok(tr_curve_keypair(listed_public, listed_secret));
  ok(tr_curve_keypair(other_public, other_secret));
  const std::string clients = "# who may call\n\n" + std::string(listed_public) + "\n";
  tr_transport_options server_opts = {};
  server_opts.component = "guarded";
  server_opts.curve_server_public = server_public;
  server_opts.curve_server_secret = server_secret;
  server_opts.curve_clients = clients.c_str();
  const std::string endpoint = Ipc(dir, "guarded.ipc");
  Server server(endpoint, Echo, nullptr, &server_opts);
  // A server of the same process without a list still serves every keyed client.
  tr_transport_options open_opts = server_opts;
  open_opts.curve_clients = nullptr;
  const std::string open_endpoint = Ipc(dir, "open.ipc");
  Server open(open_endpoint, Echo, nullptr, &open_opts);

  tr_transport_options listed = {};
  listed.component = "guarded";
  listed.deadline_ms = 1000;
  listed.curve_server_public = server_public;
  listed.curve_client_public = listed_public;
  listed.curve_client_secret = listed_secret;
  Client allowed(endpoint, &listed);
  CHECK(CallOk(allowed.c, "on the list") == "echo:on the list");
  CHECK(tr_server_refused(server.s) == 0);

  tr_transport_options unlisted = listed;
  unlisted.deadline_ms = 300;
  unlisted.curve_client_public = other_public;
  unlisted.curve_client_secret = other_secret;
  Client refused(endpoint, &unlisted);
  std::string reply;
  CHECK(error_of(Call(refused.c, "let me in", &reply)) ==
        "TransportError: component 'guarded' at " + endpoint + " did not answer within 300 ms");
  CHECK(tr_server_refused(server.s) >= 1);
  CHECK(CallOk(allowed.c, "still served") == "echo:still served");
  Client elsewhere(open_endpoint, &unlisted);
  CHECK(CallOk(elsewhere.c, "no list here") == "echo:no list here");
  CHECK(tr_server_refused(open.s) == 0);

  tr_transport_options bad = server_opts;
  bad.curve_clients = "not a key\n";
  tr_server *none = nullptr;
  CHECK(error_of(tr_server_start(Ipc(dir, "bad.ipc").c_str(), Echo, nullptr, &bad, &none)) ==
        "ValueError: option curve_clients, line 1: a CurveZMQ public key is 40 Z85 characters, got 9");
  tr_transport_options keyless = {};
  keyless.curve_clients = clients.c_str();
  CHECK(error_of(tr_server_start(Ipc(dir, "bad.ipc").c_str(), Echo, nullptr, &keyless, &none)) ==
        "ValueError: component '(unnamed)': curve_clients is set but curve_server_public and "
        "curve_server_secret are not");
}

TEST_CASE("a call to a server that went fails at once, well before its deadline", "[transport]") {
  TempDir dir("transport");
  std::string endpoint;
  tr_transport_options opts = {};
  opts.component = "gone";
  opts.deadline_ms = 5000;
  Server server;
  SECTION("ipc") {
    endpoint = Ipc(dir, "gone.ipc");
    ok(tr_server_start(endpoint.c_str(), Echo, nullptr, &opts, &server.s));
  }
  SECTION("tcp") {
    endpoint = "tcp://127.0.0.1:" + std::to_string(StartTcp(&server, Echo, nullptr, &opts));
  }
  INFO("endpoint " << endpoint);
  Client client(endpoint, &opts);
  CHECK(CallOk(client.c, "up") == "echo:up");
  const std::string gone = "TransportError: component 'gone' at " + endpoint +
                           " dropped the connection (the server ended or stopped answering); "
                           "calls fail at once until it is back";
  tr_server_stop(&server.s);
  tr_plat_sleep_ns(100 * kMs);  // the client's side of the connection sees it close
  for (int i = 0; i < 3; i++) {  // every call while it is gone
    std::string reply;
    const uint64_t start = tr_plat_now_ns();
    CHECK(error_of(Call(client.c, "anyone?", &reply)) == gone);
    CHECK(MsSince(start) < Slack(500.0));
  }
}

TEST_CASE("CurveZMQ options are checked", "[transport]") {
  if (!tr_curve_available()) return;
  char pub[TR_CURVE_KEY_SIZE], sec[TR_CURVE_KEY_SIZE];
  char pub2[TR_CURVE_KEY_SIZE], sec2[TR_CURVE_KEY_SIZE];
  ok(tr_curve_keypair(pub, sec));
  ok(tr_curve_keypair(pub2, sec2));
  const std::string endpoint = Inproc("keys");
  tr_server *server = nullptr;
  tr_client *client = nullptr;

  tr_transport_options half = {};
  half.component = "keys";
  half.curve_server_public = pub;
  CHECK(error_of(tr_server_start(endpoint.c_str(), Echo, nullptr, &half, &server)) ==
        "ValueError: component 'keys': a server needs both curve_server_public and "
        "curve_server_secret, or neither; got only curve_server_public");

  tr_transport_options mismatched = half;
  mismatched.curve_server_secret = sec2;
  CHECK(error_of(tr_server_start(endpoint.c_str(), Echo, nullptr, &mismatched, &server)) ==
        "ValueError: option curve_server_public is not the public key of option "
        "curve_server_secret");

  tr_transport_options short_key = half;
  short_key.curve_server_secret = "tooshort";
  CHECK(error_of(tr_server_start(endpoint.c_str(), Echo, nullptr, &short_key, &server)) ==
        "ValueError: option curve_server_secret: a CurveZMQ key is 40 Z85 characters, got 8");

  tr_transport_options bad_z85 = half;
  std::string not_z85(40, '"');  // '"' is outside Z85's alphabet
  bad_z85.curve_server_secret = not_z85.c_str();
  CHECK(error_of(tr_server_start(endpoint.c_str(), Echo, nullptr, &bad_z85, &server)) ==
        "ValueError: option curve_server_secret: not a Z85-encoded CurveZMQ key");
  CHECK(server == nullptr);

  tr_transport_options client_half = {};
  client_half.component = "keys";
  client_half.curve_server_public = pub;
  client_half.curve_client_secret = sec2;
  CHECK(error_of(tr_client_new(endpoint.c_str(), &client_half, &client)) ==
        "ValueError: component 'keys': a client needs both curve_client_public and "
        "curve_client_secret, or neither; got only curve_client_secret");

  tr_transport_options no_server_key = {};
  no_server_key.component = "keys";
  no_server_key.curve_client_public = pub2;
  no_server_key.curve_client_secret = sec2;
  CHECK(error_of(tr_client_new(endpoint.c_str(), &no_server_key, &client)) ==
        "ValueError: component 'keys': curve_client_public and curve_client_secret are set but "
        "curve_server_public is not");

  tr_transport_options client_mismatch = client_half;
  client_mismatch.curve_client_public = pub;
  CHECK(error_of(tr_client_new(endpoint.c_str(), &client_mismatch, &client)) ==
        "ValueError: option curve_client_public is not the public key of option "
        "curve_client_secret");
  CHECK(client == nullptr);
}

TEST_CASE("CurveZMQ does not apply to inproc: every client of this process is answered",
          "[transport]") {
  if (!tr_curve_available()) return;
  char pub[TR_CURVE_KEY_SIZE], sec[TR_CURVE_KEY_SIZE];
  ok(tr_curve_keypair(pub, sec));
  tr_transport_options server_opts = {};
  server_opts.curve_server_public = pub;
  server_opts.curve_server_secret = sec;
  const std::string endpoint = Inproc("curve");
  Server server(endpoint, Echo, nullptr, &server_opts);
  tr_transport_options client_opts = {};
  client_opts.deadline_ms = 1000;
  Client plain(endpoint, &client_opts);
  CHECK(CallOk(plain.c, "x") == "echo:x");
  client_opts.curve_server_public = pub;
  Client keyed(endpoint, &client_opts);
  CHECK(CallOk(keyed.c, "y") == "echo:y");
}

TEST_CASE("an ipc bind refuses a path a live server holds, takes over a dead one's, and "
          "removes its file when stopped", "[transport]") {
  TempDir dir("transport");
  const std::string endpoint = Ipc(dir, "taken.ipc");
  const std::string path = endpoint.substr(6);
  Server first(endpoint, Echo, nullptr);
  tr_server *second = nullptr;
  CHECK(error_of(tr_server_start(endpoint.c_str(), Echo, nullptr, nullptr, &second)) ==
        "TransportError: cannot bind component '(unnamed)' to " + endpoint +
            ": the path is in use by a live server (stop it, or choose another path)");
  CHECK(second == nullptr);
  tr_transport_options opts = {};
  opts.component = "taken";
  {
    Client client(endpoint, &opts);
    CHECK(CallOk(client.c, "still the first") == "echo:still the first");  // not replaced
  }
  tr_server_stop(&first.s);
  CHECK_FALSE(tr_plat_file_exists(path.c_str()));  // removed with its server

  // A socket file nobody listens on (a server that was killed leaves one): a raw ZeroMQ
  // socket that binds it and is closed in another context leaves the file behind.
  {
    RawSocket dead(ZMQ_ROUTER, endpoint, true);
  }
  REQUIRE(tr_plat_file_exists(path.c_str()));
  Server taker(endpoint, Echo, nullptr);
  Client client(endpoint, &opts);
  CHECK(CallOk(client.c, "taken over") == "echo:taken over");
}

TEST_CASE("a tcp bind to a host name says a server binds an address", "[transport]") {
  tr_server *s = nullptr;
  std::string e = error_of(tr_server_start("tcp://localhost:0", Echo, nullptr, nullptr, &s));
  CHECK(e.find("TransportError: cannot bind component '(unnamed)' to tcp://localhost:0: ") == 0);
  CHECK(e.find("(a server binds an IP address or an interface's name, not a host name: tcp://127.0.0.1:PORT, or "
               "tcp://:PORT for loopback)") != std::string::npos);
  CHECK(s == nullptr);
}

TEST_CASE("an ipc bind never replaces a file or a folder that is not a socket", "[transport]") {
  TempDir dir("transport");
  const std::string file = std::string(dir.path) + "/data.sock", folder = std::string(dir.path) + "/folder.sock";
  FILE *f = std::fopen(file.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("keep me", f);
  std::fclose(f);
  REQUIRE(tr_plat_make_dirs(folder.c_str()) == nullptr);
  for (const std::string &path : {file, folder}) {
    const std::string endpoint = "ipc://" + path;
    tr_server *s = nullptr;
    CHECK(error_of(tr_server_start(endpoint.c_str(), Echo, nullptr, nullptr, &s)) ==
          "TransportError: cannot bind component '(unnamed)' to " + endpoint + ": " + path + " is a " +
              (path == file ? "file" : "directory") + ", not a socket a server left (move it, or choose another path)");
    CHECK(s == nullptr);
    CHECK(tr_plat_file_exists(path.c_str()));
  }
  std::ifstream in(file);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(kept == "keep me");
}

namespace {

// Two handlers that each wait (up to 2 s) for the other to have started: both answer
// "together" only when their requests were in flight at the same time.
struct Latch {
  std::atomic<int> *mine, *other;
};

tr_status *Latched(void *ctx, const uint8_t *, size_t, uint8_t *reply, size_t reply_cap, size_t *reply_size) {
  Latch *l = static_cast<Latch *>(ctx);
  l->mine->store(1);
  const uint64_t start = tr_plat_now_ns();
  while (l->other->load() == 0 && tr_plat_now_ns() - start < 2000 * kMs) tr_plat_sleep_ns(kMs / 10);
  const char *text = l->other->load() ? "together" : "alone";
  *reply_size = std::strlen(text);
  REQUIRE(*reply_size <= reply_cap);
  std::memcpy(reply, text, *reply_size);
  return nullptr;
}

std::string Received(tr_client_pending *pending, tr_status **status) {
  char reply[64];
  size_t n = 0;
  *status = tr_client_receive(pending, reinterpret_cast<uint8_t *>(reply), sizeof(reply), &n);
  return std::string(reply, n);
}

}  // namespace

TEST_CASE("tr_client_send and tr_client_receive keep requests to two servers in flight at once",
          "[transport]") {
  TempDir dir("transport");
  std::string a_end, b_end;
  SECTION("inproc") {
    a_end = Inproc("latch-a");
    b_end = Inproc("latch-b");
  }
  SECTION("ipc") {
    a_end = Ipc(dir, "a.ipc");
    b_end = Ipc(dir, "b.ipc");
  }
  std::atomic<int> a_started{0}, b_started{0};
  Latch la = {&a_started, &b_started}, lb = {&b_started, &a_started};
  Server a(a_end, Latched, &la), b(b_end, Latched, &lb);
  tr_transport_options opts = {};
  opts.deadline_ms = 3000;
  Client ca(a_end, &opts), cb(b_end, &opts);
  tr_client_pending pa, pb;
  ok(tr_client_send(ca.c, reinterpret_cast<const uint8_t *>("x"), 1, &pa));
  ok(tr_client_send(cb.c, reinterpret_cast<const uint8_t *>("y"), 1, &pb));
  tr_status *sa = nullptr, *sb = nullptr;
  CHECK(Received(&pb, &sb) == "together");  // received in the other order than sent
  CHECK(Received(&pa, &sa) == "together");
  CHECK(sa == nullptr);
  CHECK(sb == nullptr);
  tr_status_destroy(&sa);
  tr_status_destroy(&sb);
}

TEST_CASE("two requests in flight on one client each get their own reply; a receive keeps the deadline",
          "[transport]") {
  uint64_t sleep_ns = 400 * kMs;
  std::string endpoint = Inproc("pending");
  Server server(endpoint, Sleepy, &sleep_ns);
  tr_transport_options opts = {};
  opts.component = "sleepy";
  opts.deadline_ms = 150;
  Client client(endpoint, &opts);
  CHECK(CallOk(client.c, "warm") == "echo:warm");
  tr_client_pending p1, p2;
  ok(tr_client_send(client.c, reinterpret_cast<const uint8_t *>("one"), 3, &p1));
  ok(tr_client_send(client.c, reinterpret_cast<const uint8_t *>("two"), 3, &p2));
  tr_status *s1 = nullptr, *s2 = nullptr;
  CHECK(Received(&p2, &s2) == "echo:two");
  CHECK(Received(&p1, &s1) == "echo:one");
  CHECK(s1 == nullptr);
  CHECK(s2 == nullptr);

  // The deadline runs from the send: a receive 100 ms later waits only for what is left of it.
  tr_client_pending slow;
  const uint64_t sent_at = tr_plat_now_ns();
  ok(tr_client_send(client.c, reinterpret_cast<const uint8_t *>("slow"), 4, &slow));
  tr_plat_sleep_ns(100 * kMs);
  const uint64_t receive_at = tr_plat_now_ns();
  tr_status *late = nullptr;
  CHECK(Received(&slow, &late).empty());
  CHECK(error_of(late) == "TransportError: component 'sleepy' at " + endpoint + " did not answer within 150 ms");
  CHECK(MsSince(sent_at) >= 150.0);
  CHECK(MsSince(receive_at) < 150.0);  // a fresh deadline would wait 150 ms from here
  tr_plat_sleep_ns(sleep_ns);  // the stale reply went to the closed socket; the next call is its own
  CHECK(CallOk(client.c, "fast") == "echo:fast");

  // A reply that came in time is taken even when the receive comes after the deadline.
  tr_client_pending quick;
  ok(tr_client_send(client.c, reinterpret_cast<const uint8_t *>("quick"), 5, &quick));
  tr_plat_sleep_ns(250 * kMs);
  tr_status *taken = nullptr;
  CHECK(Received(&quick, &taken) == "echo:quick");
  CHECK(taken == nullptr);

  // An abandoned request: its socket is closed, its late reply reaches no later call.
  tr_client_pending dropped;
  ok(tr_client_send(client.c, reinterpret_cast<const uint8_t *>("fast"), 4, &dropped));
  tr_client_abandon(&dropped);
  CHECK(dropped.client == nullptr);
  tr_client_abandon(&dropped);  // a second time: nothing
  CHECK(CallOk(client.c, "after") == "echo:after");
}
