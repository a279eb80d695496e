// launch_test.cc: the launch component's contract. By address, in the in-process placements
// (inline and a thread): the kernel sees exactly the tensors the caller passed (data, device,
// dtype, shape, strides, byte offset, absent ones as NULL), computes on them, and its error comes
// back unchanged; bad requests are errors naming the tensor; junk bytes are a transport error.
// By descriptor, in every placement (inline, thread, `tilerun serve launch` over ipc and tcp):
// the op runs on the caller's shared-memory tensors and writes the caller's outputs; memory that
// cannot be shared, references that overrun their segment, kernel addresses out of process are
// errors naming the tensor. And the runtime, with launch placed in a thread or a process.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "components/launch/launch.h"
#include "components/pipeline/pipeline_testing.h"
#include "proto/codec.h"
#include "runtime/op_cache.h"
#include "runtime/runtime_testing.h"
#include "sharing/sharing.h"

using namespace tr_test;

// What the kernel saw, and a real computation: out[i] = a[i] + (b ? b[i] : 0) over a's shape,
// following a's strides and byte offset.
struct Seen {
  size_t n_in = 0, n_out = 0;
  std::vector<DLTensor> in, out;
  std::vector<std::vector<int64_t>> in_shapes, in_strides, out_shapes;
  std::vector<bool> in_null;
};

static tr_status *record_add(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out, size_t n_out) {
  Seen *seen = static_cast<Seen *>(self);
  *seen = Seen{};
  seen->n_in = n_in;
  seen->n_out = n_out;
  for (size_t i = 0; i < n_in; i++) {
    seen->in_null.push_back(in[i] == nullptr);
    if (in[i] == nullptr) continue;
    seen->in.push_back(*in[i]);
    seen->in_shapes.emplace_back(in[i]->shape, in[i]->shape + in[i]->ndim);
    seen->in_strides.emplace_back(in[i]->strides ? std::vector<int64_t>(in[i]->strides, in[i]->strides + in[i]->ndim)
                                                 : std::vector<int64_t>{});
  }
  for (size_t i = 0; i < n_out; i++) {
    seen->out.push_back(*out[i]);
    seen->out_shapes.emplace_back(out[i]->shape, out[i]->shape + out[i]->ndim);
  }
  // the handler's shape arrays are gone after the call: point at the copies
  for (size_t i = 0; i < seen->in.size(); i++) seen->in[i].shape = seen->in_shapes[i].data();
  for (size_t i = 0; i < seen->out.size(); i++) seen->out[i].shape = seen->out_shapes[i].data();
  const DLTensor *a = in[0], *b = n_in > 1 ? in[1] : nullptr;
  if (a->ndim != 2) return TR_STATUS(TR_VALUE, "record_add: a must be 2-d, got rank %d", (int)a->ndim);
  const float *pa = (const float *)((const char *)a->data + a->byte_offset);
  float *po = static_cast<float *>(out[0]->data);
  int64_t rows = a->shape[0], cols = a->shape[1];
  int64_t s0 = a->strides ? a->strides[0] : cols, s1 = a->strides ? a->strides[1] : 1;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      po[r * cols + c] = pa[r * s0 + c * s1] + (b ? static_cast<const float *>(b->data)[r * cols + c] : 0.0f);
    }
  }
  return nullptr;
}

static void *acme_alloc(void *, const tr_device *, size_t bytes) { return malloc(bytes); }
static void acme_free(void *, const tr_device *, void *p) { free(p); }

static tr_status *init_acme(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_device_type(api->host, "acme", kDLExtDev));
  return api->register_allocator(api->host, "acme", acme_alloc, acme_free, nullptr, nullptr);
}

struct Registry {
  tr_registry *reg = nullptr;
  tr_launch_context ctx;  // in process: by address
  Registry() {
    ok(tr_registry_new(nullptr, nullptr, &reg));
    REQUIRE(tr_registry_load_builtin(reg, "acme", init_acme) == 1);
    ctx = tr_launch_context{reg, 1, nullptr, nullptr, nullptr};
  }
  ~Registry() { tr_registry_destroy(&reg); }
};

static std::string launch(Placed &p, const tr_registry *reg, const tr_kernel *k, std::vector<DLTensor *> in,
                          std::vector<DLTensor *> out) {
  uint8_t request[8192];
  size_t n = 0;
  tr_status *s = tr_launch_encode(reg, k, in.data(), in.size(), out.data(), out.size(), request, sizeof(request), &n);
  std::string reply;
  if (s == nullptr) s = p.raw_call(std::vector<uint8_t>(request, request + n), &reply);
  if (s == nullptr) s = tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr);
  return s ? error_of(s) : std::string("ran");
}

static bool same(const DLTensor &a, const DLTensor &b) {
  return a.data == b.data && a.device.device_type == b.device.device_type && a.device.device_id == b.device.device_id &&
         a.ndim == b.ndim && a.dtype.code == b.dtype.code && a.dtype.bits == b.dtype.bits &&
         a.dtype.lanes == b.dtype.lanes && a.byte_offset == b.byte_offset &&
         std::equal(a.shape, a.shape + a.ndim, b.shape);
}

static std::vector<Where> in_process() { return {Where::kInline, Where::kThread}; }

TEST_CASE("the launch contract: the kernel sees the caller's tensors and computes on them") {
  Registry r;
  Seen seen;
  tr_kernel k{sizeof(tr_kernel), &seen, record_add, nullptr, nullptr, nullptr};
  for (Where where : in_process()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_LAUNCH, where, tr_launch_handle, &r.ctx);
    // Contiguous, on cpu, both inputs present.
    HostTensor a({3, 4}), b({3, 4}, {kDLCPU, 0}, 2.0f), out({3, 4});
    REQUIRE(launch(p, r.reg, &k, {&a.t, &b.t}, {&out.t}) == "ran");
    REQUIRE(seen.n_in == 2);
    REQUIRE(seen.n_out == 1);
    CHECK(same(seen.in[0], a.t));
    CHECK(same(seen.in[1], b.t));
    CHECK(same(seen.out[0], out.t));
    CHECK(seen.in_strides[0].empty());  // contiguous stays "no strides"
    for (size_t i = 0; i < 12; i++) CHECK(out.data[i] == a.data[i] + b.data[i]);
    // A transposed view with a byte offset, on a backend's device type, b absent.
    HostTensor base({5, 4}, {kDLExtDev, 3}), t_out({4, 4}, {kDLExtDev, 3});
    base.view({4, 4}, {1, 4});        // the transpose of rows 1..4
    base.t.byte_offset = 4 * sizeof(float);
    REQUIRE(launch(p, r.reg, &k, {&base.t, nullptr}, {&t_out.t}) == "ran");
    REQUIRE(seen.in_null == std::vector<bool>{false, true});
    CHECK(same(seen.in[0], base.t));
    CHECK(seen.in[0].device.device_type == kDLExtDev);
    CHECK(seen.in[0].device.device_id == 3);
    CHECK(seen.in_strides[0] == std::vector<int64_t>{1, 4});
    for (int64_t rr = 0; rr < 4; rr++) {
      for (int64_t c = 0; c < 4; c++) CHECK(t_out.data[(size_t)(rr * 4 + c)] == base.data[(size_t)(4 + rr + c * 4)]);
    }
    // The kernel's error, unchanged (code and message).
    HostTensor v({6});
    CHECK(launch(p, r.reg, &k, {&v.t}, {&out.t}) == "ValueError: record_add: a must be 2-d, got rank 1");
    // And the component answers after it.
    CHECK(launch(p, r.reg, &k, {&a.t, &b.t}, {&out.t}) == "ran");
  }
}

// A request built field by field.
static std::vector<uint8_t> raw(uint64_t kernel, const char *device, uint64_t data, std::vector<int64_t> shape,
                                size_t n_strides = 0) {
  tilerun_LaunchRequest rq = tilerun_LaunchRequest_init_zero;
  rq.kernel = kernel;
  rq.inputs_count = 1;
  tilerun_Tensor &t = rq.inputs[0];
  t.has_spec = true;
  t.spec.present = true;
  snprintf(t.spec.device, sizeof(t.spec.device), "%s", device);
  t.spec.dtype_code = kDLFloat;
  t.spec.dtype_bits = 32;
  t.spec.dtype_lanes = 1;
  t.spec.shape_count = (pb_size_t)shape.size();
  for (size_t i = 0; i < shape.size(); i++) t.spec.shape[i] = shape[i];
  t.data = data;
  t.strides_count = (pb_size_t)n_strides;
  uint8_t buf[4096];
  size_t n = 0;
  ok(tr_codec_encode(tilerun_LaunchRequest_fields, &rq, buf, sizeof(buf), &n, "a LaunchRequest"));
  return std::vector<uint8_t>(buf, buf + n);
}

static std::string over_wire(Placed &p, const std::vector<uint8_t> &request) {
  std::string reply;
  tr_status *s = p.raw_call(request, &reply);
  if (s == nullptr) s = tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr);
  return s ? error_of(s) : std::string("ran");
}

TEST_CASE("the launch contract: bad requests are errors naming the tensor, and no kernel runs") {
  Registry r;
  int calls = 0;
  struct Counting {
    int *calls;
  } counting{&calls};
  tr_kernel k{sizeof(tr_kernel), &counting,
              [](void *self, DLTensor *const *, size_t, DLTensor *const *, size_t) -> tr_status * {
                (*static_cast<Counting *>(self)->calls)++;
                return nullptr;
              },
              nullptr, nullptr, nullptr};
  uint64_t kernel = (uint64_t)(uintptr_t)&k;
  float cell = 1.0f;
  uint64_t data = (uint64_t)(uintptr_t)&cell;
  for (Where where : in_process()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_LAUNCH, where, tr_launch_handle, &r.ctx);
    calls = 0;
    CHECK(over_wire(p, raw(kernel, "cpu", data, {1})) == "ran");
    CHECK(calls == 1);
    CHECK(over_wire(p, raw(0, "cpu", data, {1})) == "ValueError: launch: the request names neither a kernel nor an op");
    CHECK(over_wire(p, raw(kernel, "cpu", 0, {1})) == "ValueError: launch: input 0 is present but its data address is 0");
    CHECK(over_wire(p, raw(kernel, "cpu", data, {1}, 3)) == "ValueError: launch: input 0 has rank 1 but 3 strides");
    tr_device bad;
    tr_status *parse = tr_device_parse("nodev:x", &bad);
    REQUIRE(parse != nullptr);
    std::string parse_error = tr_status_message(parse);
    tr_status_destroy(&parse);
    CHECK(over_wire(p, raw(kernel, "nodev:x", data, {1})) == "ValueError: launch: input 0: " + parse_error);
    CHECK(over_wire(p, raw(kernel, "cpu", data, {-2})).find("ValueError: launch: input 0: ") == 0);
    // A device that parses but has no DLPack form here (no backend registered 'zeta'), named too.
    tr_device zeta;
    ok(tr_device_parse("zeta:0", &zeta));
    DLDevice dl;
    tr_status *unmapped = tr_registry_device_to_dl(r.reg, &zeta, &dl);
    REQUIRE(unmapped != nullptr);
    std::string unmapped_error = tr_status_message(unmapped);
    tr_status_destroy(&unmapped);
    CHECK(over_wire(p, raw(kernel, "zeta:0", data, {1})) == "ValueError: launch: input 0: " + unmapped_error);
    CHECK(calls == 1);  // none of the bad requests reached the kernel
  }
}

TEST_CASE("the launch handler and encoder: junk is a transport error; too many tensors a ValueError") {
  Registry r;
  const uint8_t junk[] = {0x12, 0xff, 0xff, 0xff};
  uint8_t reply[256];
  size_t n = 0;
  std::string e = error_of(tr_launch_handle(&r.ctx, junk, sizeof(junk), reply, sizeof(reply), &n));
  CHECK(e.rfind("TransportError: ", 0) == 0);
  CHECK(e.find("LaunchRequest") != std::string::npos);
  std::vector<DLTensor *> many(17, nullptr);
  uint8_t buf[64];
  CHECK(error_of(tr_launch_encode(r.reg, nullptr, many.data(), many.size(), nullptr, 0, buf, sizeof(buf), &n)) ==
        "ValueError: launch: 17 inputs, 0 outputs and 0 params; a LaunchRequest carries at most 16, 8 and 32");
  HostTensor deep({1, 1, 1, 1, 1, 1, 1, 1, 1});
  DLTensor *one[] = {&deep.t};
  CHECK(error_of(tr_launch_encode(r.reg, nullptr, one, 1, nullptr, 0, buf, sizeof(buf), &n)) ==
        "ValueError: launch: input 0 has rank 9; at most 8 travel");
}

// ---- by descriptor ----

// A float32 tensor in tilerun's shared memory (or, `heap`, in ordinary memory).
struct SharedTensor {
  void *block = nullptr;
  float *data = nullptr;
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  bool heap = false;
  SharedTensor(std::vector<int64_t> s, float start, size_t room = 0, bool heap_ = false) : shape(std::move(s)), heap(heap_) {
    size_t n = 1;
    for (int64_t d : shape) n *= (size_t)d;
    if (room < n) room = n;
    if (heap) block = std::calloc(room, sizeof(float));
    else ok(tr_share_alloc(room * sizeof(float), &block));
    data = static_cast<float *>(block);
    for (size_t i = 0; i < room; i++) data[i] = start + 0.25f * (float)i;
    t.data = block;
    t.device = {kDLCPU, 0};
    t.ndim = (int32_t)shape.size();
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
  }
  ~SharedTensor() {
    if (heap) std::free(block);
    else tr_share_free(block);
  }
};

// The CPU backend, and the tunable test backend (target "tunable": testing/tunable_backend.c),
// for the runtimes here and for the served process (TILERUN_BACKEND_PATH).
static const char *kBackends = "backends/cpu:components/launch/testing";
static tr_runtime *cpu_runtime(const char *pipeline_file = "", tr_test::Warnings *warnings = nullptr) {
  ok(tr_plat_setenv("TILERUN_BACKEND_PATH", kBackends));
  tr_runtime_options o{};
  o.manifest_dir = "manifest/spec";
  o.pipeline_file = pipeline_file;
  if (warnings != nullptr) {
    o.warn = tr_test::Warnings::sink;
    o.warn_ctx = warnings;
  }
  tr_runtime *rt = nullptr;
  ok(tr_runtime_new(&o, &rt));
  return rt;
}

static std::string run_shared(Placed &p, const tr_registry *reg, const char *op, std::vector<tr_named_value> params,
                              std::vector<DLTensor *> in, std::vector<DLTensor *> out, const char *target = "",
                              int tuned = 0) {
  std::vector<uint8_t> request(TR_LAUNCH_REQUEST_MAX);
  size_t n = 0;
  tr_launch_descriptor d{op, target, params.data(), params.size(), tuned};
  tr_status *s = tr_launch_encode_shared(reg, &d, in.data(), in.size(), out.data(), out.size(), request.data(),
                                         request.size(), &n);
  std::string reply;
  if (s == nullptr) s = p.raw_call(std::vector<uint8_t>(request.begin(), request.begin() + (long)n), &reply);
  if (s == nullptr) s = tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr);
  return s ? error_of(s) : std::string("ran");
}

// A tune or config ask of the op named, through the handler; "ran" or the error.
static std::string ask(Placed &p, const char *op, std::vector<tr_named_value> params, tr_launch_action action,
                       tr_launch_config *config = nullptr, const char *target = "tunable") {
  std::vector<uint8_t> request(TR_LAUNCH_REQUEST_MAX);
  size_t n = 0;
  tr_launch_descriptor d{op, target, params.data(), params.size(), 0};
  tr_status *s = tr_launch_encode_ask(&d, action, request.data(), request.size(), &n);
  std::string reply;
  if (s == nullptr) s = p.raw_call(std::vector<uint8_t>(request.begin(), request.begin() + (long)n), &reply);
  if (s == nullptr) s = tr_launch_decode((const uint8_t *)reply.data(), reply.size(), config);
  return s ? error_of(s) : std::string("ran");
}

// The tunable kernel's "tunes" in a config (how many times request_tune reached it); -1: none.
static int64_t tunes_in(const tr_named_value *values, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (std::string(values[i].name) == "tunes" && values[i].value.kind == TR_VALUE_INT) return values[i].value.as.i;
  }
  return -1;
}

// A descriptor request whose one input's reference is edited after encoding.
static std::vector<uint8_t> edited(const tr_registry *reg, SharedTensor &a, SharedTensor &b, SharedTensor &c,
                                   void (*edit)(tilerun_LaunchRequest *)) {
  std::vector<uint8_t> buf(TR_LAUNCH_REQUEST_MAX);
  size_t n = 0;
  tr_launch_descriptor d{"AddFwdOp", "", nullptr, 0, 0};
  DLTensor *in[] = {&a.t, &b.t}, *out[] = {&c.t};
  ok(tr_launch_encode_shared(reg, &d, in, 2, out, 1, buf.data(), buf.size(), &n));
  auto *rq = new tilerun_LaunchRequest();
  ok(tr_codec_decode(tilerun_LaunchRequest_fields, buf.data(), n, rq, "a LaunchRequest"));
  edit(rq);
  ok(tr_codec_encode(tilerun_LaunchRequest_fields, rq, buf.data(), buf.size(), &n, "a LaunchRequest"));
  delete rq;
  buf.resize(n);
  return buf;
}

// What `tilerun serve launch` runs by descriptor: a runtime's op cache, and the shared
// references it maps, behind the handler's context.
struct OpServer {
  tr_runtime *rt = cpu_runtime();
  tr_op_cache *cache = nullptr;
  tr_share_maps *maps = nullptr;
  const tr_registry *reg = nullptr;
  tr_launch_context ctx{};
  OpServer() {
    ok(tr_op_cache_new(rt, &cache));
    ok(tr_share_maps_new(&maps));
    reg = tr_op_cache_registry(cache);
    ctx = tr_launch_context{reg, 1, maps, &tr_op_cache_ops, cache};
  }
  ~OpServer() {
    tr_share_maps_destroy(&maps);
    tr_op_cache_destroy(&cache);
    tr_runtime_destroy(&rt);
  }
};

TEST_CASE("the launch contract by descriptor: the op runs on the caller's shared tensors in every placement") {
  OpServer server;
  const tr_registry *reg = server.reg;
  for (Where where : every_placement()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_LAUNCH, where, tr_launch_handle, &server.ctx);
    // c = a + 2 b, written into the caller's memory.
    SharedTensor a({3, 4}, 1.0f), b({3, 4}, -2.0f), c({3, 4}, 99.0f);
    tr_named_value alpha{"alpha", tr_value_float(2.0)};
    REQUIRE(run_shared(p, reg, "AddFwdOp", {alpha}, {&a.t, &b.t}, {&c.t}) == "ran");
    for (size_t i = 0; i < 12; i++) CHECK(c.data[i] == a.data[i] + 2.0f * b.data[i]);
    // A transposed view with a byte offset into a larger segment: made contiguous over there.
    SharedTensor base({4, 4}, 0.5f, 20), ones({4, 4}, 1.0f), out({4, 4}, 0.0f);
    base.strides = {1, 4};
    base.t.strides = base.strides.data();
    base.t.byte_offset = 4 * sizeof(float);
    REQUIRE(run_shared(p, reg, "AddFwdOp", {}, {&base.t, &ones.t}, {&out.t}, "cpu") == "ran");
    for (int64_t r = 0; r < 4; r++) {
      for (int64_t k = 0; k < 4; k++) {
        CHECK(out.data[r * 4 + k] == base.data[4 + r + k * 4] + ones.data[r * 4 + k]);
      }
    }
    // The op's own errors come back: a signature mismatch, an unknown op.
    SharedTensor wide({3, 5}, 0.0f);
    std::string e = run_shared(p, reg, "AddFwdOp", {}, {&a.t, &wide.t}, {&c.t});
    CHECK(e.find("SignatureError") == 0);
    CHECK(e.find("AddFwdOp") != std::string::npos);
    CHECK(run_shared(p, reg, "NoSuchOp", {}, {&a.t}, {&c.t}).find("OpNotAvailableError: no op 'NoSuchOp'") == 0);
    // And the component answers after them.
    REQUIRE(run_shared(p, reg, "AddFwdOp", {}, {&a.t, &b.t}, {&c.t}) == "ran");
    for (size_t i = 0; i < 12; i++) CHECK(c.data[i] == a.data[i] + b.data[i]);

    if (where == Where::kIpc || where == Where::kTcp) {
      // Out of process: a reference that overruns its segment, a tensor with no reference, a
      // kernel address: each refused, naming the tensor; nothing written.
      for (size_t i = 0; i < 12; i++) c.data[i] = -1.0f;
      std::string reply;
      auto over = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) { rq->inputs[1].shared_offset += 8; });
      ok(p.raw_call(over, &reply));
      e = error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr));
      CHECK(e.find("ValueError: launch: input 1: the tensor reaches bytes 0 to 48 around offset 8") == 0);
      CHECK(e.find("outside it") != std::string::npos);
      auto bare = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) { rq->outputs[0].shm[0] = '\0'; });
      ok(p.raw_call(bare, &reply));
      e = error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr));
      CHECK(e.find("ValueError: launch: output 0 carries no shared memory reference") == 0);
      auto gone = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) {
        snprintf(rq->inputs[0].shm, sizeof(rq->inputs[0].shm), "/tilerun-gone-segment");  // tilerun's, gone
      });
      ok(p.raw_call(gone, &reply));
      e = error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr));
      CHECK(e.find("IOError: launch: input 0: cannot open shared memory '/tilerun-gone-segment'") == 0);
      // Shapes whose bytes overflow 64 bits, or that reach past the segment, and a segment that is
      // not tilerun's: refused before any kernel runs.
      auto huge = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) {
        rq->inputs[0].spec.shape_count = 2;
        rq->inputs[0].spec.shape[0] = (int64_t)1 << 31;
        rq->inputs[0].spec.shape[1] = (int64_t)1 << 31;
      });
      ok(p.raw_call(huge, &reply));
      e = error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr));
      CHECK(e == "ValueError: launch: input 0 reaches more bytes than 64 bits count (shape and strides)");
      auto long_row = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) {
        rq->inputs[0].spec.shape_count = 1;
        rq->inputs[0].spec.shape[0] = ((int64_t)1 << 62) + 4;
      });
      ok(p.raw_call(long_row, &reply));
      e = error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr));
      CHECK(e.find("ValueError: launch: input 0") == 0);
      auto foreign = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) {
        snprintf(rq->inputs[0].shm, sizeof(rq->inputs[0].shm), "/someone-else");
      });
      ok(p.raw_call(foreign, &reply));
      e = error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr));
      CHECK(e == "ValueError: launch: input 0: shared memory '/someone-else' is not tilerun's (its names start with "
                 "'/tilerun-')");
      int k = 0;
      CHECK(over_wire(p, raw((uint64_t)(uintptr_t)&k, "cpu", 64, {1})).find(
                "ValueError: launch: a kernel address means something only in the process that built it") == 0);
      for (size_t i = 0; i < 12; i++) CHECK(c.data[i] == -1.0f);
    }
    // Memory that cannot be shared is refused on the caller's side, naming the tensor.
    SharedTensor heap({3, 4}, 0.0f, 0, true);
    e = run_shared(p, reg, "AddFwdOp", {}, {&a.t, &heap.t}, {&c.t});
    CHECK(e.find("ValueError: launch: input 1: cpu memory at ") == 0);
    CHECK(e.find("is not from tilerun's shared-memory allocator (tr_alloc_shared)") != std::string::npos);
  }
}

TEST_CASE("the launch contract by descriptor: tuning and the kernel config are asked of the op there") {
  for (Where where : every_placement()) {
    INFO(where_name(where));
    OpServer server;  // a fresh one each time: nothing built, nothing tuned
    const tr_registry *reg = server.reg;
    {
      Placed p(TR_COMPONENT_LAUNCH, where, tr_launch_handle, &server.ctx);
      SharedTensor a({2, 3}, 1.0f), b({2, 3}, 2.0f), c({2, 3}, 0.0f);
      tr_named_value two{"alpha", tr_value_float(2.0)}, three{"alpha", tr_value_float(3.0)},
          four{"alpha", tr_value_float(4.0)};
      tr_launch_config config{};
      // Nothing built there yet: no config.
      REQUIRE(ask(p, "AddFwdOp", {two}, TR_LAUNCH_CONFIG, &config) == "ran");
      CHECK(config.n == 0);
      // A call builds the kernel; its config comes back, untuned.
      REQUIRE(run_shared(p, reg, "AddFwdOp", {two}, {&a.t, &b.t}, {&c.t}, "tunable") == "ran");
      REQUIRE(ask(p, "AddFwdOp", {two}, TR_LAUNCH_CONFIG, &config) == "ran");
      REQUIRE(config.n == 3);
      CHECK(tunes_in(config.values, config.n) == 0);
      CHECK(std::string(config.values[1].name) == "variant");
      REQUIRE(config.values[1].value.kind == TR_VALUE_STR);
      CHECK(std::string(config.values[1].value.as.str.data) == "tunable-add");
      REQUIRE(config.values[2].value.kind == TR_VALUE_STR);  // 300 bytes there, cut to what a message holds
      CHECK(std::string(config.values[2].value.as.str.data) == std::string(255, 'n'));
      // Tune: the kernel there is tuned, again at each ask (request_tune's idempotence).
      REQUIRE(ask(p, "AddFwdOp", {two}, TR_LAUNCH_TUNE) == "ran");
      REQUIRE(ask(p, "AddFwdOp", {two}, TR_LAUNCH_CONFIG, &config) == "ran");
      CHECK(tunes_in(config.values, config.n) == 1);
      REQUIRE(ask(p, "AddFwdOp", {two}, TR_LAUNCH_TUNE) == "ran");
      REQUIRE(ask(p, "AddFwdOp", {two}, TR_LAUNCH_CONFIG, &config) == "ran");
      CHECK(tunes_in(config.values, config.n) == 2);
      // A call saying the caller's op is in tuned mode, to an op made there afresh (as after it
      // left the cache): it enters tuned mode, so its kernel is tuned before its first call;
      // without, not.
      REQUIRE(run_shared(p, reg, "AddFwdOp", {three}, {&a.t, &b.t}, {&c.t}, "tunable", 1) == "ran");
      for (size_t i = 0; i < 6; i++) CHECK(c.data[i] == a.data[i] + 3.0f * b.data[i]);
      REQUIRE(ask(p, "AddFwdOp", {three}, TR_LAUNCH_CONFIG, &config) == "ran");
      CHECK(tunes_in(config.values, config.n) == 1);
      REQUIRE(run_shared(p, reg, "AddFwdOp", {four}, {&a.t, &b.t}, {&c.t}, "tunable") == "ran");
      REQUIRE(ask(p, "AddFwdOp", {four}, TR_LAUNCH_CONFIG, &config) == "ran");
      CHECK(tunes_in(config.values, config.n) == 0);
      // The op's own errors come back; an ask that carries tensors, names no op, or an action
      // the handler does not know is refused, naming it.
      CHECK(ask(p, "NoSuchOp", {}, TR_LAUNCH_TUNE).find("OpNotAvailableError: no op 'NoSuchOp'") == 0);
      // a config ask makes nothing there: none for an op never called, even one that cannot be made
      REQUIRE(ask(p, "NoSuchOp", {}, TR_LAUNCH_CONFIG, &config) == "ran");
      CHECK(config.n == 0);
      {  // the caller's side refuses an ask it does not know
        std::vector<uint8_t> request(TR_LAUNCH_REQUEST_MAX);
        size_t n = 0;
        tr_launch_descriptor d{"AddFwdOp", "tunable", &two, 1, 0};
        CHECK(error_of(tr_launch_encode_ask(&d, (tr_launch_action)5, request.data(), request.size(), &n)) ==
              "ValueError: launch: ask 5 is neither tune (1) nor config (2)");
        std::vector<tr_named_value> many(33, two);  // more params than a request carries
        tr_launch_descriptor crowded{"AddFwdOp", "tunable", many.data(), many.size(), 0};
        CHECK(error_of(tr_launch_encode_ask(&crowded, TR_LAUNCH_TUNE, request.data(), request.size(), &n)) ==
              "ValueError: launch: 33 params; a LaunchRequest carries at most 32");
      }
      CHECK(ask(p, "AddFwdOp", {tr_named_value{"alpha", tr_value_bool(true)}}, TR_LAUNCH_TUNE).find("alpha") !=
            std::string::npos);
      std::string reply;
      CHECK(ask(p, "AddFwdOp", {two}, TR_LAUNCH_TUNE, nullptr, "nosuchtarget").find("nosuchtarget") !=
            std::string::npos);
      auto with_tensors = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) {
        rq->action = tilerun_LaunchRequest_Action_TUNE;
      });
      ok(p.raw_call(with_tensors, &reply));
      CHECK(error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr)) ==
            "ValueError: launch: a tune request names an op and carries no tensors (op 'AddFwdOp', 2 inputs, 1 "
            "outputs)");
      auto no_op = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) {
        rq->action = tilerun_LaunchRequest_Action_CONFIG;
        rq->op[0] = '\0';
        rq->inputs_count = rq->outputs_count = 0;
      });
      ok(p.raw_call(no_op, &reply));
      CHECK(error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), &config)) ==
            "ValueError: launch: a config request names an op and carries no tensors (op '', 0 inputs, 0 outputs)");
      CHECK(config.n == 0);  // an error leaves no config
      auto unknown = edited(reg, a, b, c, [](tilerun_LaunchRequest *rq) {
        rq->action = (tilerun_LaunchRequest_Action)7;
      });
      ok(p.raw_call(unknown, &reply));
      CHECK(error_of(tr_launch_decode((const uint8_t *)reply.data(), reply.size(), nullptr)) ==
            "ValueError: launch: action 7 is none this launch component knows (0 call, 1 tune, 2 config)");
      tr_launch_config_clear(&config);
    }
  }
}

// A pipeline file placing launch (and only launch) somewhere.
static std::string pipeline_file(const char *dir, const std::string &launch) {
  std::string path = std::string(dir) + "/pipeline.yaml";
  std::string text = "components:\n  launch: " + launch + "\n";
  ok(tr_plat_write_file(path.c_str(), text.data(), text.size()));
  return path;
}

TEST_CASE("the runtime launches through the launch component placed in a thread or in a process") {
  char *dir = nullptr;
  ok(tr_plat_make_temp_dir("tr-launch", &dir));
  for (int process = 0; process < 2; process++) {
    INFO((process ? "process" : "thread"));
    tr_plat_process *server = nullptr;
    std::string endpoint = std::string("ipc://") + dir + "/launch.sock";
    std::string file;
    if (process) {
      const char *argv[] = {"tools/tilerun", "serve", "launch", "--endpoint", endpoint.c_str(), "--manifest",
                            "manifest/spec", nullptr};
      ok(tr_plat_setenv("TILERUN_BACKEND_PATH", kBackends));
      ok(tr_plat_process_spawn(argv, &server));
      file = pipeline_file(dir, "{placement: process, endpoint: \"" + endpoint + "\"}");
    } else {
      file = pipeline_file(dir, "{placement: thread}");
    }
    tr_test::Warnings warnings;
    tr_runtime *rt = cpu_runtime(file.c_str(), &warnings);
    tr_op *add = nullptr;
    ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &add));
    SharedTensor a({2, 3}, 1.0f), b({2, 3}, 10.0f);
    DLTensor *in[] = {&a.t, &b.t};
    DLManagedTensor *out[1] = {nullptr};
    ok(when_served([&] { return tr_op_call(add, in, 2, out, 1); }));
    REQUIRE(out[0] != nullptr);
    const float *c = static_cast<const float *>(out[0]->dl_tensor.data);
    if (process) CHECK(tr_share_owns(c));  // made where the launch process can write it
    for (size_t i = 0; i < 6; i++) CHECK(c[i] == a.data[i] + b.data[i]);
    out[0]->deleter(out[0]);
    // A memo hit, the same way.
    for (size_t i = 0; i < 6; i++) a.data[i] = 100.0f;
    ok(tr_op_call(add, in, 2, out, 1));
    c = static_cast<const float *>(out[0]->dl_tensor.data);
    for (size_t i = 0; i < 6; i++) CHECK(c[i] == 100.0f + b.data[i]);
    out[0]->deleter(out[0]);
    // Tuning and the kernel's config (target "tunable"): in a thread, the kernel's here; in a
    // process, that process's kernel, asked of it. The same answers.
    tr_named_value two{"alpha", tr_value_float(2.0)}, three{"alpha", tr_value_float(3.0)};
    tr_op *tuned = nullptr;
    ok(tr_op_new(rt, "AddFwdOp", &two, 1, "tunable", &tuned));
    const tr_named_value *config = nullptr;
    CHECK(tr_op_kernel_config(tuned, &config) == 0);  // nothing built yet
    ok(tr_op_call(tuned, in, 2, out, 1));
    for (size_t i = 0; i < 6; i++) CHECK(static_cast<const float *>(out[0]->dl_tensor.data)[i] == 100.0f + 2 * b.data[i]);
    out[0]->deleter(out[0]);
    size_t n_config = tr_op_kernel_config(tuned, &config);
    REQUIRE(n_config == 3);
    REQUIRE(config[1].value.kind == TR_VALUE_STR);
    CHECK(std::string(config[1].value.as.str.data) == "tunable-add");
    CHECK(tunes_in(config, n_config) == 0);
    ok(tr_op_request_tune(tuned));
    n_config = tr_op_kernel_config(tuned, &config);
    CHECK(tunes_in(config, n_config) == 1);
    ok(tr_op_request_tune(tuned));  // again: tuned again
    n_config = tr_op_kernel_config(tuned, &config);
    CHECK(tunes_in(config, n_config) == 2);
    ok(tr_op_call(tuned, in, 2, out, 1));  // a memo hit after tuning: not tuned again
    out[0]->deleter(out[0]);
    n_config = tr_op_kernel_config(tuned, &config);
    CHECK(tunes_in(config, n_config) == 2);
    tr_op_destroy(&tuned);
    // An op in tuned mode before its first call: its kernel is tuned before that call, there as
    // here (in a process, the call carries the tuned mode).
    ok(tr_op_new(rt, "AddFwdOp", &three, 1, "tunable", &tuned));
    ok(tr_op_request_tune(tuned));
    ok(tr_op_call(tuned, in, 2, out, 1));
    for (size_t i = 0; i < 6; i++) CHECK(static_cast<const float *>(out[0]->dl_tensor.data)[i] == 100.0f + 3 * b.data[i]);
    out[0]->deleter(out[0]);
    n_config = tr_op_kernel_config(tuned, &config);
    CHECK(tunes_in(config, n_config) == 1);
    tr_op_destroy(&tuned);
    CHECK(warnings.lines.empty());
    // The cpu target's kernels have no request_tune: said once (by the process that holds them:
    // in a process, on its own stderr), and the op still runs.
    ok(tr_op_request_tune(add));
    if (!process) {
      REQUIRE(warnings.lines.size() == 1);
      CHECK(warnings.lines[0] == "AddFwdOp: a kernel of target 'cpu' has no request_tune; it is not tuned");
    } else {
      CHECK(warnings.lines.empty());
    }
    ok(tr_op_call(add, in, 2, out, 1));
    out[0]->deleter(out[0]);
    // Inputs made by tr_runtime_empty: shared memory exactly when launch is in a process.
    int64_t shape[2] = {2, 3};
    DLTensor like = {nullptr, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
    DLManagedTensor *e1 = nullptr, *e2 = nullptr;
    ok(tr_runtime_empty(rt, &like, &e1));
    ok(tr_runtime_empty(rt, &like, &e2));
    CHECK(tr_share_owns(e1->dl_tensor.data) == process);
    CHECK(e1->dl_tensor.ndim == 2);
    CHECK(e1->dl_tensor.shape[1] == 3);
    CHECK(e1->dl_tensor.strides == nullptr);
    float *d1 = static_cast<float *>(e1->dl_tensor.data), *d2 = static_cast<float *>(e2->dl_tensor.data);
    for (int i = 0; i < 6; i++) {
      d1[i] = (float)i;
      d2[i] = 0.5f;
    }
    DLTensor *made[] = {&e1->dl_tensor, &e2->dl_tensor};
    ok(tr_op_call(add, made, 2, out, 1));
    c = static_cast<const float *>(out[0]->dl_tensor.data);
    for (int i = 0; i < 6; i++) CHECK(c[i] == (float)i + 0.5f);
    out[0]->deleter(out[0]);
    e1->deleter(e1);
    e2->deleter(e2);
    DLTensor unknown = like;
    unknown.device.device_type = (DLDeviceType)99;
    DLManagedTensor *none = nullptr;
    CHECK(error_of(tr_runtime_empty(rt, &unknown, &none)).find("99") != std::string::npos);
    CHECK(none == nullptr);
    DLTensor odd = like;
    odd.dtype = {(uint8_t)77, 32, 1};
    CHECK(error_of(tr_runtime_empty(rt, &odd, &none)) ==
          "ValueError: tr_runtime_empty: dtype (code 77, bits 32, lanes 1) is not one tilerun knows");
    CHECK(error_of(tr_runtime_empty(rt, nullptr, &none)).find("tr_runtime_empty: 'like' is NULL") != std::string::npos);
    DLTensor negative = like;
    int64_t bad_shape[2] = {2, -3};
    negative.shape = bad_shape;
    CHECK(error_of(tr_runtime_empty(rt, &negative, &none)).find("axis 1 has extent -3") != std::string::npos);
    CHECK(none == nullptr);
    if (process) {
      // An input in ordinary memory: a clear error naming the op and the tensor, no crash.
      SharedTensor heap({2, 3}, 0.0f, 0, true);
      DLTensor *bad[] = {&a.t, &heap.t};
      std::string e = error_of(tr_op_call(add, bad, 2, out, 1));
      CHECK(e.find("ValueError: launch: input 1: cpu memory at ") == 0);
      CHECK(e.find("(AddFwdOp, launched in another process)") != std::string::npos);
      CHECK(out[0] == nullptr);
    }
    if (server != nullptr) {
      ok(tr_op_call(add, in, 2, out, 1));  // built there again (the refused call above revoked it)
      out[0]->deleter(out[0]);
      REQUIRE(tr_op_memo_count(add) == 1);
      tr_plat_process_kill(server, 0);
      CHECK(tr_plat_process_wait(&server, 5000) == 0);
      // The launch process gone: a tune request is a transport error saying where; a config
      // ask is warned, and none.
      warnings.lines.clear();
      std::string e = error_of(tr_op_request_tune(add));
      CHECK(e.find("TransportError") == 0);
      CHECK(e.find("(AddFwdOp, launched in another process)") != std::string::npos);
      CHECK(tr_op_kernel_config(add, &config) == 0);
      REQUIRE(warnings.lines.size() == 1);
      CHECK(warnings.lines[0].find("AddFwdOp: its kernel config from the launch process: ") == 0);
      CHECK(warnings.lines[0].find("(AddFwdOp, launched in another process)") != std::string::npos);
    }
    tr_op_destroy(&add);
    tr_runtime_destroy(&rt);
  }
  ok(tr_plat_remove_tree(dir));
  std::free(dir);
}
