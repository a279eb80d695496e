// launch_test.cc: the launch component's contract in the in-process placements (inline and a
// thread): the kernel sees exactly the tensors the caller passed (data, device, dtype, shape,
// strides, byte offset, absent ones as NULL), computes on them, and its error comes back
// unchanged; bad requests are errors naming the tensor; junk bytes are a transport error.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "components/launch/launch.h"
#include "components/pipeline/pipeline_testing.h"
#include "proto/codec.h"
#include "runtime/runtime_testing.h"

using namespace tr_test;

// What the kernel saw, and a real computation: out[i] = a[i] + (b ? b[i] : 0) over a's shape,
// following a's strides and byte offset.
struct Seen {
  size_t n_in = 0, n_out = 0;
  std::vector<DLTensor> in, out;
  std::vector<std::vector<int64_t>> in_shapes, in_strides;
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
  for (size_t i = 0; i < n_out; i++) seen->out.push_back(*out[i]);
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
  Registry() {
    ok(tr_registry_new(nullptr, nullptr, &reg));
    REQUIRE(tr_registry_load_builtin(reg, "acme", init_acme) == 1);
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
  if (s == nullptr) s = tr_launch_decode((const uint8_t *)reply.data(), reply.size());
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
    Placed p(TR_COMPONENT_LAUNCH, where, tr_launch_handle, r.reg);
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
  if (s == nullptr) s = tr_launch_decode((const uint8_t *)reply.data(), reply.size());
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
    Placed p(TR_COMPONENT_LAUNCH, where, tr_launch_handle, r.reg);
    calls = 0;
    CHECK(over_wire(p, raw(kernel, "cpu", data, {1})) == "ran");
    CHECK(calls == 1);
    CHECK(over_wire(p, raw(0, "cpu", data, {1})) == "ValueError: launch: the request names no kernel (address 0)");
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
  std::string e = error_of(tr_launch_handle(r.reg, junk, sizeof(junk), reply, sizeof(reply), &n));
  CHECK(e.rfind("TransportError: ", 0) == 0);
  CHECK(e.find("LaunchRequest") != std::string::npos);
  std::vector<DLTensor *> many(17, nullptr);
  uint8_t buf[64];
  CHECK(error_of(tr_launch_encode(r.reg, nullptr, many.data(), many.size(), nullptr, 0, buf, sizeof(buf), &n)) ==
        "ValueError: launch: 17 inputs and 0 outputs; a LaunchRequest carries at most 16 and 8");
  HostTensor deep({1, 1, 1, 1, 1, 1, 1, 1, 1});
  DLTensor *one[] = {&deep.t};
  CHECK(error_of(tr_launch_encode(r.reg, nullptr, one, 1, nullptr, 0, buf, sizeof(buf), &n)) ==
        "ValueError: launch: input 0 has rank 9; at most 8 travel");
}
