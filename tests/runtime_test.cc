// runtime_test.cc: the op layer's contract, with test backends linked in (builtins) that record
// what they were asked to build: settlement order, params by name, absent optional inputs,
// contiguity and write-back, outputs that exist `when`, tuning, composition, threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kernels/intree/intree.h"
#include "platform/test_support.h"
#include "runtime/runtime_testing.h"

using tr_test::HostTensor;
using tr_test::Outputs;

// What the test backends saw.
static std::atomic<int> g_builds{0}, g_tunes{0};
static std::vector<std::string> g_seen;  // one line per build: "op target inputs params"
static int g_fail_tune = 0;
static int g_fail_call = 0;  // add_call raises a ValueError about its values, as a kernel may

static std::string describe(const tr_build_request *req) {
  std::string s = std::string(req->op) + " " + req->target;
  for (size_t i = 0; i < req->n_inputs; i++) {
    char buf[128] = "None";
    if (req->inputs[i]) tr_tensor_spec_format(req->inputs[i], buf, sizeof(buf));
    s += std::string(" ") + buf;
  }
  for (size_t i = 0; i < req->n_params; i++) {
    char buf[64];
    tr_value_format(&req->params[i].value, buf, sizeof(buf));
    s += std::string(" ") + req->params[i].name + "=" + buf;
  }
  return s;
}

static int64_t numel(const DLTensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

// Kernels: plain float32 loops over contiguous tensors.
static tr_status *add_call(void *, DLTensor *const *in, size_t, DLTensor *const *out, size_t) {
  if (g_fail_call) return TR_STATUS(TR_VALUE, "AddFwdOp: a[3] = 7 is out of range (positions < 4)");
  const float *a = (const float *)in[0]->data, *b = (const float *)in[1]->data;
  float *c = (float *)out[0]->data;
  for (int64_t i = 0; i < numel(in[0]); i++) c[i] = a[i] + b[i];
  return nullptr;
}

// RMSNorm stand-in: y = x (the tests here look at builds, not numbers).
static tr_status *copy_call(void *, DLTensor *const *in, size_t, DLTensor *const *out, size_t) {
  memcpy(out[0]->data, in[0]->data, (size_t)numel(in[0]) * 4);
  return nullptr;
}

static tr_status *gemm_call(void *, DLTensor *const *in, size_t, DLTensor *const *out, size_t) {
  // d[M,N] = a[M,K] @ b[N,K]^T (the Linear composition's trans_b)
  int64_t M = in[0]->shape[0], K = in[0]->shape[1], N = in[1]->shape[0];
  const float *a = (const float *)in[0]->data, *b = (const float *)in[1]->data;
  float *d = (float *)out[0]->data;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += (double)a[m * K + k] * b[n * K + k];
      d[m * N + n] = (float)s;
    }
  return nullptr;
}

// BatchNorm stand-in: writes running_mean[c] = 100 + c (through its stride, which it records
// with its data address), y = x, mean/rstd = c when present.
static const void *g_rm_data = nullptr;
static int64_t g_rm_stride = 0;
static tr_status *bn_call(void *, DLTensor *const *in, size_t, DLTensor *const *out, size_t n_out) {
  if (in[1] != nullptr) {
    float *rm = (float *)in[1]->data;
    g_rm_data = in[1]->data;
    g_rm_stride = in[1]->strides != nullptr ? in[1]->strides[0] : 1;
    for (int64_t c = 0; c < in[1]->shape[0]; c++) rm[c * g_rm_stride] = 100.0f + (float)c;
  }
  memcpy(out[0]->data, in[0]->data, (size_t)numel(in[0]) * 4);
  for (size_t o = 1; o < n_out; o++) {
    if (out[o] == nullptr) continue;
    for (int64_t c = 0; c < out[o]->shape[0]; c++) ((float *)out[o]->data)[c] = (float)c;
  }
  return nullptr;
}

static tr_status *tune(void *, const tr_device *) {
  int n = ++g_tunes;
  if (g_fail_tune == 2) return TR_STATUS(TR_COMPILE, "autotuner crashed at tune %d", n);  // which one failed
  return g_fail_tune ? TR_STATUS(TR_COMPILE, "autotuner crashed") : nullptr;
}

template <tr_status *(*Call)(void *, DLTensor *const *, size_t, DLTensor *const *, size_t), bool Tunable>
static tr_status *build(void *, const tr_build_request *req, tr_kernel *out) {
  g_builds++;
  g_seen.push_back(describe(req));
  out->self = nullptr;
  out->call = Call;
  out->request_tune = Tunable ? tune : nullptr;
  return nullptr;
}

static tr_status *claim_cpu(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "cpu";
  return nullptr;
}
static tr_status *claim_nothing(void *, const tr_device *, int *claims) {
  *claims = 0;
  return nullptr;
}

static tr_status *init_testcpu(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "testcpu", claim_cpu, nullptr));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "AddFwdOp", "testcpu", build<add_call, true>, nullptr));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "GemmFwdOp", "testcpu", build<gemm_call, true>, nullptr));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "RMSNormFwdOp", "testcpu", build<copy_call, false>, nullptr));
  return api->register_kernel_builder(api->host, "BatchNormFwdOp", "testcpu", build<bn_call, true>, nullptr);
}

static tr_status *claim_cuda(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "cuda";
  if (*claims && d->index == 7) return TR_STATUS(TR_VALUE, "cuda:7 is out of order");  // settle fails there
  return nullptr;
}

static tr_status *init_gpu(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "testgpu", claim_cuda, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "testgpu", build<add_call, true>, nullptr);
}

static tr_status *init_other(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "other", claim_nothing, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "other", build<add_call, true>, nullptr);
}

static tr_status *init_broken(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "broken", claim_nothing, nullptr));
  return TR_STATUS(TR_VALUE, "no license");
}

struct Env {
  tr_test::Warnings warnings;
  tr_runtime *rt = nullptr;
  explicit Env(bool with_broken = false, const char *pipeline_file = nullptr) {
    g_builds = 0;
    g_tunes = 0;
    g_seen.clear();
    g_fail_tune = 0;
    g_fail_call = 0;
    static const char *names[] = {"testcpu", "other", "testgpu", "broken"};
    static const tr_backend_init_fn inits[] = {init_testcpu, init_other, init_gpu, init_broken};
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    o.backend_dirs = nullptr;
    const char *none[] = {"/nonexistent"};
    o.backend_dirs = none;
    o.n_backend_dirs = 1;
    o.builtin_names = names;
    o.builtin_inits = inits;
    o.n_builtins = with_broken ? 4 : 3;
    o.warn = tr_test::Warnings::sink;
    o.warn_ctx = &warnings;
    o.pipeline_file = pipeline_file;
    tr_test::ok(tr_runtime_new(&o, &rt));
  }
  ~Env() { tr_runtime_destroy(&rt); }
  tr_op *op(const char *name, std::vector<tr_named_value> params = {}, const char *target = nullptr) {
    tr_op *made = nullptr;
    tr_test::ok(tr_op_new(rt, name, params.data(), params.size(), target, &made));
    return made;
  }
};

TEST_CASE("the target: the op's own, then the process default, then detection") {
  Env env;
  HostTensor a({4}), b({4});
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  tr_op *detected = env.op("AddFwdOp");
  tr_test::ok(tr_op_call(detected, in, 2, out.items, 1));
  CHECK(std::string(tr_op_target(detected)) == "testcpu");
  tr_test::ok(tr_set_default_target(env.rt, "other"));
  CHECK(std::string(tr_default_target(env.rt)) == "other");
  tr_op *by_default = env.op("AddFwdOp");
  out.reset();
  tr_test::ok(tr_op_call(by_default, in, 2, out.items, 1));
  CHECK(std::string(tr_op_target(by_default)) == "other");
  tr_op *own = env.op("AddFwdOp", {}, "testcpu");
  out.reset();
  tr_test::ok(tr_op_call(own, in, 2, out.items, 1));
  CHECK(std::string(tr_op_target(own)) == "testcpu");
  CHECK(tr_test::error_of(tr_set_default_target(env.rt, "nope")) ==
        "UnknownTargetError: no backend registered target 'nope'; known targets: ['other', 'testcpu', "
        "'testgpu']");
  CHECK(std::string(tr_default_target(env.rt)) == "other");  // a refused change leaves it
  tr_test::ok(tr_set_default_target(env.rt, TR_BUILTIN));
  tr_op *builtin = env.op("AddFwdOp");
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(builtin, in, 2, out.items, 1)) ==
        "OpNotAvailableError: AddFwdOp's in-tree kernels do not run on cpu; known targets for this "
        "op: ['other', 'testcpu', 'testgpu']");
  tr_test::ok(tr_set_default_target(env.rt, nullptr));
  CHECK(tr_default_target(env.rt) == nullptr);
  for (tr_op *op : {detected, by_default, own, builtin}) tr_op_destroy(&op);
}

TEST_CASE("builders get params by manifest name (defaults applied) and None for an absent input") {
  // the params validate settled: inline (no message) and from a validate in a thread (a message)
  tr_test::TempDir dir;
  std::string threaded = dir.write("p.yaml", "components:\n  validate: {placement: thread}\n");
  for (const char *file : {"", threaded.c_str()}) {
    INFO("pipeline file '" << file << "'");
    Env env(false, file);
    int64_t n = 4;
    tr_value shape;
    tr_test::ok(tr_value_int_list(&n, 1, &shape));
    tr_op *op = env.op("RMSNormFwdOp", {{"normalized_shape", shape}});
    tr_value_clear(&shape);
    HostTensor x({2, 4}), w({4});
    const DLTensor *in[] = {&x.t, &w.t};
    Outputs out;
    tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
    out.reset();
    tr_test::ok(tr_op_call(op, in, 1, out.items, 1));  // no weight this time: a second build
    REQUIRE(g_seen.size() == 2);
    CHECK(g_seen[0] == "RMSNormFwdOp testcpu float32[2, 4] on cpu float32[4] on cpu "
                       "normalized_shape=(4,) eps=None");
    CHECK(g_seen[1] == "RMSNormFwdOp testcpu float32[2, 4] on cpu None normalized_shape=(4,) eps=None");
    tr_op_destroy(&op);
  }
}

// A builder that keeps the request's params in its kernel and reads them at every call: they
// live as long as the op instance (backend.h), not only while the builder runs.
struct KeptParams {
  const tr_named_value *params;
  size_t n;
};
static tr_status *kept_call(void *self, DLTensor *const *, size_t, DLTensor *const *, size_t) {
  auto *k = static_cast<KeptParams *>(self);
  const tr_value *v = nullptr;
  for (size_t i = 0; i < k->n; i++) {
    if (std::string(k->params[i].name) == "normalized_shape") v = &k->params[i].value;
  }
  if (v == nullptr || v->kind != TR_VALUE_INT_LIST || v->as.list.len != 1 || v->as.list.items[0] != 4) {
    return TR_STATUS(TR_BACKEND, "the kept params changed after the build");
  }
  return nullptr;
}
static tr_status *build_keeper(void *, const tr_build_request *req, tr_kernel *out) {
  out->self = new KeptParams{req->params, req->n_params};
  out->call = kept_call;
  out->release = [](void *self) { delete static_cast<KeptParams *>(self); };
  return nullptr;
}
static tr_status *init_keeper(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "keeper", claim_cpu, nullptr));
  return api->register_kernel_builder(api->host, "RMSNormFwdOp", "keeper", build_keeper, nullptr);
}

TEST_CASE("a builder's params live as long as the op: a kernel may keep them") {
  tr_runtime *rt = tr_test::runtime_with_builtin("keeper", init_keeper);
  int64_t n = 4;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&n, 1, &shape));
  tr_named_value p[] = {{"normalized_shape", shape}};
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "RMSNormFwdOp", p, 1, nullptr, &op));
  tr_value_clear(&shape);
  HostTensor x({2, 4}), w({4}), y({2, 4});
  const DLTensor *in[] = {&x.t, &w.t};
  DLTensor *outs[] = {&y.t};
  for (int i = 0; i < 3; i++) tr_test::ok(tr_op_call_into(op, in, 2, outs, 1));  // the miss, then hits
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a backend that fails to load is reported, and later errors say so") {
  Env env(true);
  REQUIRE(tr_load_failure_count(env.rt) == 1);
  CHECK(std::string(tr_load_failure_backend(env.rt, 0)) == "broken");
  CHECK(std::string(tr_load_failure_reason(env.rt, 0)) == "its init failed: ValueError: no license");
  REQUIRE(env.warnings.lines.size() == 1);
  CHECK(env.warnings.lines[0] == "backend 'broken' not loaded: its init failed: ValueError: no license");
  const char *names[8];
  CHECK(tr_registered_targets(env.rt, nullptr, names, 8) == 3);  // 'broken' rolled back
  tr_op *op = env.op("SoftmaxFwdOp");
  HostTensor x({3});
  const DLTensor *in[] = {&x.t};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, in, 1, out.items, 1)) ==
        "OpNotAvailableError: target 'testcpu' registers no kernel builder for SoftmaxFwdOp; "
        "targets that do: []. There is no fall back to the in-tree implementation: those kernels "
        "do not run on this target's devices.");  // the spec's message: no count (docs/messages.md)
  tr_op_destroy(&op);
}

TEST_CASE("inputs the call does not write arrive contiguous; a contiguous: true mutated input is "
          "copied and written back") {
  Env env;
  tr_value training = tr_value_bool(false);
  tr_op *op = env.op("BatchNormFwdOp", {{"training", training}});
  HostTensor x({2, 3, 2}), var({3});
  HostTensor big({6}, {kDLCPU, 0}, 0.0f);
  big.view({3}, {2});  // running_mean: every other element of a 6-element buffer
  const DLTensor *in[] = {&x.t, &big.t, &var.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 3, out.items, 3));
  CHECK(big.data[0] == 100.0f);
  CHECK(big.data[2] == 101.0f);
  CHECK(big.data[4] == 102.0f);
  CHECK(big.data[1] == 0.0f + 0.25f * 1 - 0.1f * 1);  // untouched between the strided elements
  CHECK(out.items[1] == nullptr);  // mean and rstd exist only when training
  CHECK(out.items[2] == nullptr);
  tr_op_destroy(&op);
  tr_op *train = env.op("BatchNormFwdOp", {{"training", tr_value_bool(true)}});
  out.reset();
  tr_test::ok(tr_op_call(train, in, 1, out.items, 3));  // training: running stats may be left out
  REQUIRE(out.items[1] != nullptr);
  CHECK(out.items[1]->dl_tensor.dtype.bits == 32);
  CHECK(out.f(2)[2] == 2.0f);
  tr_op_destroy(&train);
}

TEST_CASE("tuning: kernels without request_tune are not tuned, and the op warns once") {
  Env env;
  int64_t n = 4;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&n, 1, &shape));
  tr_op *op = env.op("RMSNormFwdOp", {{"normalized_shape", shape}});
  tr_value_clear(&shape);
  HostTensor x({2, 4}), x3({3, 4});
  const DLTensor *in[] = {&x.t}, *in3[] = {&x3.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 1, out.items, 1));
  tr_test::ok(tr_op_request_tune(op));
  out.reset();
  tr_test::ok(tr_op_call(op, in3, 1, out.items, 1));  // built after the request: no tune either
  tr_test::ok(tr_op_request_tune(op));
  REQUIRE(env.warnings.lines.size() == 1);
  CHECK(env.warnings.lines[0] == "RMSNormFwdOp: a kernel of target 'testcpu' has no request_tune; it is not tuned");
  CHECK(g_tunes == 0);
  tr_op_destroy(&op);
}

TEST_CASE("tuning: reaches every kernel once per request; a kernel whose tuning fails while it "
          "is built is not memoised") {
  Env env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4}), b({4}), c({5}), d({5});
  const DLTensor *in[] = {&a.t, &b.t}, *in5[] = {&c.t, &d.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  CHECK(g_tunes == 0);
  tr_test::ok(tr_op_request_tune(op));
  CHECK(g_tunes == 1);
  tr_test::ok(tr_op_request_tune(op));  // idempotent: each request tunes again
  CHECK(g_tunes == 2);
  out.reset();
  tr_test::ok(tr_op_call(op, in5, 2, out.items, 1));  // built after: tuned before its first call
  CHECK(g_tunes == 3);
  out.reset();
  tr_test::ok(tr_op_call(op, in5, 2, out.items, 1));  // a memo hit does not tune again
  CHECK(g_tunes == 3);
  CHECK(g_builds == 2);
  g_fail_tune = 1;
  HostTensor e({6}), f({6});
  const DLTensor *in6[] = {&e.t, &f.t};
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(op, in6, 2, out.items, 1)) == "CompileError: autotuner crashed");
  CHECK(tr_op_memo_count(op) == 0);  // the failed call dropped the memo
  g_fail_tune = 0;
  tr_test::ok(tr_op_call(op, in6, 2, out.items, 1));
  CHECK(g_builds == 4);  // built again
  tr_op_destroy(&op);
}

TEST_CASE("a composite op runs its composition; each sub-op settles its own target") {
  Env env;
  tr_op *linear = env.op("LinearFwdOp");
  HostTensor x({2, 3, 4}), w({5, 4}), bias({5});
  const DLTensor *in[] = {&x.t, &w.t, &bias.t};
  Outputs out;
  tr_test::ok(tr_op_call(linear, in, 3, out.items, 1));
  const DLTensor &y = out.items[0]->dl_tensor;
  REQUIRE(y.ndim == 3);
  CHECK(y.shape[0] == 2);
  CHECK(y.shape[2] == 5);
  for (int64_t r = 0; r < 6; r++) {
    for (int64_t n = 0; n < 5; n++) {
      double ref = bias.data[n];
      for (int64_t k = 0; k < 4; k++) ref += (double)x.data[r * 4 + k] * w.data[n * 4 + k];
      CHECK(out.f(0)[r * 5 + n] == Approx(ref).epsilon(1e-5));
    }
  }
  REQUIRE(g_seen.size() == 2);
  CHECK(g_seen[0].find("GemmFwdOp testcpu float32[6, 4] on cpu float32[5, 4] on cpu trans_a=False trans_b=True") == 0);
  CHECK(g_seen[1].find("AddFwdOp testcpu float32[6, 5] on cpu float32[6, 5] on cpu") == 0);
  CHECK(tr_op_target(linear) == nullptr);  // the composite itself settles nothing
  out.reset();
  tr_test::ok(tr_op_call(linear, in, 2, out.items, 1));  // no bias: the Add step is skipped
  for (int64_t n = 0; n < 5; n++) {
    double ref = 0;
    for (int64_t k = 0; k < 4; k++) ref += (double)x.data[k] * w.data[n * 4 + k];
    CHECK(out.f(0)[n] == Approx(ref).epsilon(1e-5));
  }
  tr_op_destroy(&linear);
}

TEST_CASE("tuning a composite op: tuned mode first, every step tried, the first failure returned") {
  Env env;
  tr_op *linear = env.op("LinearFwdOp");
  HostTensor x({2, 4}), w({5, 4}), bias({5});
  const DLTensor *in[] = {&x.t, &w.t, &bias.t};
  Outputs out;
  tr_test::ok(tr_op_call(linear, in, 2, out.items, 1));  // no bias: only the Gemm step is made
  REQUIRE(g_tunes == 0);
  g_fail_tune = 2;
  CHECK(tr_test::error_of(tr_op_request_tune(linear)) == "CompileError: autotuner crashed at tune 1");
  g_fail_tune = 0;
  // the composite entered tuned mode although its step's tuning failed: the Add step, made at
  // this call, is tuned before its first call (the Gemm kernel, a memo hit, is not tuned again)
  out.reset();
  tr_test::ok(tr_op_call(linear, in, 3, out.items, 1));
  CHECK(g_tunes == 2);
  // both steps failing: each is tried, and the first failure (the Gemm step's) is the answer
  g_fail_tune = 2;
  CHECK(tr_test::error_of(tr_op_request_tune(linear)) == "CompileError: autotuner crashed at tune 3");
  CHECK(g_tunes == 4);
  g_fail_tune = 0;
  tr_op_destroy(&linear);
}

TEST_CASE("a call with too many inputs names the count it got") {
  Env env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4});
  const DLTensor *in[] = {&a.t, &a.t, &a.t, &a.t, &a.t};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, in, 5, out.items, 1)) ==
        "SignatureError(shape): AddFwdOp: takes 2 inputs (a, b), got 5");
  tr_op *linear = env.op("LinearFwdOp");
  CHECK(tr_test::error_of(tr_op_call(linear, in, 4, out.items, 1)) ==
        "SignatureError(shape): LinearFwdOp: takes 3 inputs (x, weight, bias), got 4");
  tr_op_destroy(&op);
  tr_op_destroy(&linear);
}

TEST_CASE("an op not in the manifest, or a bad param, is refused at construction") {
  Env env;
  tr_op *op = nullptr;
  CHECK(tr_test::error_of(tr_op_new(env.rt, "FrobFwdOp", nullptr, 0, nullptr, &op)) ==
        "OpNotAvailableError: no op 'FrobFwdOp' in the manifest (11 ops; see 'tilerun ops')");
  tr_named_value bad = {"alpha", tr_value_bool(true)};
  CHECK(tr_test::error_of(tr_op_new(env.rt, "AddFwdOp", &bad, 1, nullptr, &op)) ==
        "SignatureError(param): AddFwdOp: param 'alpha' expects float, got True (bool)");
  CHECK(op == nullptr);
}

TEST_CASE("many threads may call one op instance at once") {
  Env env;
  tr_op *op = env.op("AddFwdOp");
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      HostTensor a({16 + t}), b({16 + t}, {kDLCPU, 0}, 1.0f);
      const DLTensor *in[] = {&a.t, &b.t};
      for (int i = 0; i < 2000; i++) {
        Outputs out;
        tr_status *s = tr_op_call(op, in, 2, out.items, 1);
        if (s != nullptr) {
          tr_status_destroy(&s);
          wrong++;
          continue;
        }
        for (int k = 0; k < 16 + t; k++) wrong += out.f(0)[k] != a.data[k] + b.data[k];
      }
    });
  }
  for (auto &th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(tr_op_memo_count(op) == 4);
  CHECK(g_builds == 4);
  tr_op_destroy(&op);
}

TEST_CASE("a cuda call's build runs with its device made current; other device types are left "
          "alone") {
  // With no GPU (or no CUDA runtime) here, making cuda:0 current fails, and says so; the cpu
  // builds above never touch CUDA. The GPU side of this rule is //runtime:device_guard_test.
  Env env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4}, {kDLCUDA, 0}), b({4}, {kDLCUDA, 0});
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  std::string e = tr_test::error_of(tr_op_call(op, in, 2, out.items, 1));
  CHECK(e.find("BackendError: making cuda:0 current: ") == 0);
  CHECK(g_builds == 0);  // the builder never ran without its device current
  tr_op_destroy(&op);
}

TEST_CASE("device facts: an unregistered type reports -1 / none / 0 / 0") {
  Env env;
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  tr_device_facts f = {7, "x", 7, 7};
  tr_test::ok(tr_device_facts_of(env.rt, &cpu, &f));
  CHECK(f.arch == -1);
  CHECK(f.calibration == nullptr);
  CHECK(f.sm_count == 0);
  CHECK(f.smem_budget == 0);
}

TEST_CASE("review fixes: outputs given to call_into are checked; huge tensors are refused, not overrun") {
  Env env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4}), b({4}), out({4}), wrong_device({4}, {kDLCUDA, 0}), wrong_shape({5});
  const DLTensor *in[] = {&a.t, &b.t};
  DLTensor *outs[] = {&out.t};
  tr_test::ok(tr_op_call_into(op, in, 2, outs, 1));
  for (int i = 0; i < 4; i++) CHECK(out.data[i] == a.data[i] + b.data[i]);
  DLTensor *bad[] = {&wrong_device.t};
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, bad, 1)) ==
        "SignatureError(device): AddFwdOp: output 'c' given is on cuda:0; the call makes float32[4] on cpu");
  DLTensor *bad_shape[] = {&wrong_shape.t};
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, bad_shape, 1)) ==
        "SignatureError(shape): AddFwdOp: output 'c' given has shape [5]; the call makes float32[4] on cpu");
  // a wrong dtype is a dtype error, naming both
  DLTensor wrong_dtype = out.t;
  wrong_dtype.dtype = TR_FLOAT64;
  DLTensor *bad_dtype[] = {&wrong_dtype};
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, bad_dtype, 1)) ==
        "SignatureError(dtype): AddFwdOp: output 'c' given is float64; the call makes float32[4] on cpu");
  // a strided output: every other element of 8
  HostTensor wide({8});
  int64_t four[] = {4}, two[] = {2};
  DLTensor strided = wide.t;
  strided.shape = four;
  strided.strides = two;
  DLTensor *bad_layout[] = {&strided};
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, bad_layout, 1)) ==
        "SignatureError(shape): AddFwdOp: output 'c' given is not contiguous; the call makes float32[4] on cpu "
        "(contiguous)");
  // an empty output may come without data (torch's empty tensors have none); a non-empty one not
  int64_t none[] = {0};
  DLTensor ea{nullptr, {kDLCPU, 0}, 1, TR_FLOAT32, none, nullptr, 0}, eb = ea, ec = ea;
  const DLTensor *empty_in[] = {&ea, &eb};
  DLTensor *empty_out[] = {&ec};
  tr_test::ok(tr_op_call_into(op, empty_in, 2, empty_out, 1));
  DLTensor no_data = out.t;
  no_data.data = nullptr;
  DLTensor *bad_data[] = {&no_data};
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, bad_data, 1)) ==
        "SignatureError(shape): AddFwdOp: output 'c' given has no data; the call makes float32[4] on cpu");
  // A broadcast view of one element as 2^31 x 2^31: neither the output nor a contiguous copy can
  // be addressed; the allocation says so instead of wrapping around.
  float one = 1;
  int64_t huge[] = {int64_t(1) << 31, int64_t(1) << 31}, zero[] = {0, 0};
  DLTensor view{&one, {kDLCPU, 0}, 2, TR_FLOAT32, huge, zero, 0};
  const DLTensor *views[] = {&view, &view};
  Outputs o;
  CHECK(tr_test::error_of(tr_op_call(op, views, 2, o.items, 1)) ==
        "OutOfMemoryError: a tensor float32[2147483648, 2147483648] on cpu holds more bytes than this "
        "machine can address");
  tr_op_destroy(&op);
}

TEST_CASE("runtime options: an array NULL with a count, or a NULL entry, is a ValueError naming it") {
  const char *dirs[] = {"/nonexistent", nullptr};
  const char *names[] = {"testcpu", nullptr};
  tr_backend_init_fn inits[] = {init_testcpu, nullptr};
  struct Case {
    const char *const *dirs;
    size_t n_dirs;
    const char *const *names;
    const tr_backend_init_fn *inits;
    size_t n_builtins;
    const char *message;
  };
  const Case cases[] = {
      {nullptr, 1, nullptr, nullptr, 0, "ValueError: tr_runtime_new: options->backend_dirs is NULL with n_backend_dirs 1"},
      {dirs, 2, nullptr, nullptr, 0, "ValueError: tr_runtime_new: options->backend_dirs[1] is NULL"},
      {dirs, 1, nullptr, inits, 1, "ValueError: tr_runtime_new: options->builtin_names is NULL with n_builtins 1"},
      {dirs, 1, names, nullptr, 1, "ValueError: tr_runtime_new: options->builtin_inits is NULL with n_builtins 1"},
      {dirs, 1, names, inits, 2, "ValueError: tr_runtime_new: options->builtin_names[1] is NULL"},
  };
  for (const Case &c : cases) {
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    o.backend_dirs = c.dirs;
    o.n_backend_dirs = c.n_dirs;
    o.builtin_names = c.names;
    o.builtin_inits = c.inits;
    o.n_builtins = c.n_builtins;
    tr_runtime *rt = reinterpret_cast<tr_runtime *>(&o);  // set to NULL on failure
    CHECK(tr_test::error_of(tr_runtime_new(&o, &rt)) == c.message);
    CHECK(rt == nullptr);
  }
  const char *both[] = {"testcpu", "other"};
  tr_runtime_options o{};
  o.manifest_dir = "manifest/spec";
  o.builtin_names = both;
  o.builtin_inits = inits;
  o.n_builtins = 2;
  tr_runtime *rt = nullptr;
  CHECK(tr_test::error_of(tr_runtime_new(&o, &rt)) ==
        "ValueError: tr_runtime_new: options->builtin_inits[1] (backend 'other') is NULL");
}

TEST_CASE("a tensor without data or dims is refused naming it, on a memo hit too; a param needs a name") {
  Env env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4}), b({4}), out({4});
  const DLTensor *in[] = {&a.t, &b.t};
  DLTensor *outs[] = {&out.t};
  tr_test::ok(tr_op_call_into(op, in, 2, outs, 1));  // the entry is built: what follows hits it
  const std::string no_data = "ValueError: AddFwdOp: input 'b' has no data (a NULL pointer for its 4 elements)";
  DLTensor nb = b.t;
  nb.data = nullptr;
  const DLTensor *in_nb[] = {&a.t, &nb};
  CHECK(tr_test::error_of(tr_op_call_into(op, in_nb, 2, outs, 1)) == no_data);
  Outputs o;
  CHECK(tr_test::error_of(tr_op_call(op, in_nb, 2, o.items, 1)) == no_data);
  CHECK(o.items[0] == nullptr);
  int64_t four[] = {4}, back[] = {-1};  // strided (reversed): it would be copied, not read
  nb.shape = four;
  nb.strides = back;
  CHECK(tr_test::error_of(tr_op_call_into(op, in_nb, 2, outs, 1)) == no_data);
  // an input of rank 1 with no shape: validated (no key is made from it), not read
  DLTensor shapeless = b.t;
  shapeless.shape = nullptr;
  const DLTensor *in_shapeless[] = {&a.t, &shapeless};
  std::string e = tr_test::error_of(tr_op_call_into(op, in_shapeless, 2, outs, 1));
  CHECK(e.find("NULL shape") != std::string::npos);
  CHECK(e.find("input 'b' of AddFwdOp") != std::string::npos);
  // outputs: no shape, a rank no tensor has, a dtype with no name
  DLTensor bad = out.t;
  bad.shape = nullptr;
  DLTensor *bad_out[] = {&bad};
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, bad_out, 1)) ==
        "SignatureError(shape): AddFwdOp: output 'c' given has rank 1 and no shape; the call makes float32[4] on cpu");
  bad = out.t;
  bad.ndim = 200;
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, bad_out, 1)) ==
        "SignatureError(shape): AddFwdOp: output 'c' given has rank 200; the call makes float32[4] on cpu");
  bad = out.t;
  bad.dtype.lanes = 2;
  std::string lanes = tr_test::error_of(tr_op_call_into(op, in, 2, bad_out, 1));
  CHECK(lanes.find("SignatureError(dtype): AddFwdOp: output 'c' given is ") == 0);
  CHECK(lanes.find("(null)") == std::string::npos);
  tr_test::ok(tr_op_call_into(op, in, 2, outs, 1));  // the op still serves
  for (int i = 0; i < 4; i++) CHECK(out.data[i] == a.data[i] + b.data[i]);
  tr_op_destroy(&op);
  tr_named_value unnamed = {nullptr, tr_value_float(1)};
  tr_op *made = nullptr;
  CHECK(tr_test::error_of(tr_op_new(env.rt, "AddFwdOp", &unnamed, 1, nullptr, &made)) ==
        "SignatureError(param): AddFwdOp: param 0 of the 1 given has no name (NULL)");
  CHECK(made == nullptr);
}

TEST_CASE("call_into refuses outputs sharing memory with an input, outputs past the op's, and strides past 64 bits") {
  Env env;
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({8}), b({4}), out({4});
  const std::vector<float> before = a.data;
  int64_t four[] = {4};
  auto part = [&](int64_t first) {  // a's elements first .. first + 3
    DLTensor v = a.t;
    v.shape = four;
    v.data = a.data.data() + first;
    return v;
  };
  DLTensor lo = part(0), mid = part(2), hi = part(4);
  const DLTensor *in_mid[] = {&mid, &b.t}, *in_lo[] = {&lo, &b.t}, *in_b[] = {&b.t, &lo};
  DLTensor *over_mid[] = {&hi}, *over_b[] = {&b.t};
  const std::string msg = "ValueError: AddFwdOp: output 'c' shares memory with input ";
  const std::string tail = "; give the output memory of its own (the kernel reads its inputs while it writes)";
  CHECK(tr_test::error_of(tr_op_call_into(op, in_mid, 2, over_mid, 1)) == msg + "'a'" + tail);  // elements 4, 5
  CHECK(tr_test::error_of(tr_op_call_into(op, in_lo, 2, over_b, 1)) == msg + "'b'" + tail);     // b itself
  CHECK(tr_test::error_of(tr_op_call_into(op, in_b, 2, over_b, 1)) == msg + "'a'" + tail);
  CHECK(a.data == before);
  tr_test::ok(tr_op_call_into(op, in_lo, 2, over_mid, 1));  // elements 0..3 into 4..7: apart, served
  for (int i = 0; i < 4; i++) CHECK(a.data[4 + i] == before[i] + b.data[i]);
  // more outputs than the op returns: refused, the extra one untouched
  DLTensor *two[] = {&out.t, &hi};
  CHECK(tr_test::error_of(tr_op_call_into(op, in_lo, 2, two, 2)) == "ValueError: AddFwdOp returns 1 outputs; 2 were given");
  // an input whose strides reach past 64 bits of bytes (a producer's lie): refused before any read
  HostTensor wild({4});
  wild.view({4}, {int64_t(1) << 62});
  const DLTensor *in_wild[] = {&wild.t, &b.t};
  DLTensor *outs[] = {&out.t};
  CHECK(tr_test::error_of(tr_op_call_into(op, in_wild, 2, outs, 1)) ==
        "ValueError: AddFwdOp: input 'a' has strides that reach past what 64 bits count (shape and strides "
        "multiplied): no memory holds it");
  tr_op_destroy(&op);
}

TEST_CASE("review fixes: the builtin backends' arrays may be gone by the first op") {
  tr_runtime *rt = nullptr;
  {
    const char *names[] = {"testcpu"};
    tr_backend_init_fn inits[] = {init_testcpu};
    const char *none[] = {"/nonexistent"};
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    o.backend_dirs = none;
    o.n_backend_dirs = 1;
    o.builtin_names = names;
    o.builtin_inits = inits;
    o.n_builtins = 1;
    tr_test::ok(tr_runtime_new(&o, &rt));
    names[0] = "overwritten";  // the caller's arrays change (or go) before discovery
    inits[0] = init_broken;
  }
  const char *targets[4];
  CHECK(tr_registered_targets(rt, nullptr, targets, 4) == 1);
  CHECK(std::string(targets[0]) == "testcpu");
  CHECK(tr_load_failure_count(rt) == 0);
  tr_runtime_destroy(&rt);
}

static tr_status *noop_call(void *, DLTensor *const *, size_t, DLTensor *const *, size_t) { return nullptr; }

static tr_status *init_fused(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "fused", claim_cpu, nullptr));
  return api->register_kernel_builder(api->host, "LinearFwdOp", "fused", build<noop_call, true>, nullptr);
}

TEST_CASE("a composite op is served whole by a target that registered a builder for it") {
  g_seen.clear();
  tr_runtime *rt = tr_test::runtime_with_builtin("fused", init_fused);
  tr_op *linear = nullptr;
  tr_test::ok(tr_op_new(rt, "LinearFwdOp", nullptr, 0, nullptr, &linear));
  HostTensor x({2, 4}), w({3, 4});
  const DLTensor *in[] = {&x.t, &w.t};
  Outputs out;
  tr_test::ok(tr_op_call(linear, in, 2, out.items, 1));
  REQUIRE(g_seen.size() == 1);
  CHECK(g_seen[0].find("LinearFwdOp fused float32[2, 4] on cpu float32[3, 4] on cpu None") == 0);
  CHECK(std::string(tr_op_target(linear)) == "fused");
  tr_op_destroy(&linear);
  tr_runtime_destroy(&rt);
}

// ---- two devices of one target (the two-GPU issue's rules, on CPU "devices") ----

static void *twin_alloc(void *, const tr_device *, size_t bytes) { return malloc(bytes); }
static void twin_free(void *, const tr_device *, void *p) { free(p); }

struct TwinKernel {
  int32_t device_index;  // the device it was built for
};

static tr_status *twin_add(void *self, DLTensor *const *in, size_t, DLTensor *const *out, size_t) {
  int32_t want = static_cast<TwinKernel *>(self)->device_index;
  for (const DLTensor *t : std::initializer_list<const DLTensor *>{in[0], in[1], out[0]}) {
    if (t->device.device_id != want) {
      return TR_STATUS(TR_BACKEND, "cross-device launch: a kernel built for twin:%d got a tensor on twin:%d",
                       (int)want, (int)t->device.device_id);
    }
  }
  return add_call(nullptr, in, 2, out, 1);
}

static tr_status *build_twin(void *, const tr_build_request *req, tr_kernel *out) {
  g_builds++;
  auto *k = new TwinKernel{req->device->index};
  out->self = k;
  out->call = twin_add;
  out->release = [](void *self) { delete static_cast<TwinKernel *>(self); };
  return nullptr;
}

static tr_status *claim_twin(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "twin";
  return nullptr;
}

static tr_status *init_twin(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "twins", claim_twin, nullptr));
  TR_RETURN_IF_ERROR(api->register_device_type(api->host, "twin", kDLExtDev));
  TR_RETURN_IF_ERROR(api->register_allocator(api->host, "twin", twin_alloc, twin_free, nullptr, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "twins", build_twin, nullptr);
}

TEST_CASE("two devices of one target: one build per device, no cross-device launch, two threads") {
  g_builds = 0;
  tr_runtime *rt = tr_test::runtime_with_builtin("twins", init_twin);
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  // inputs on two devices: rejected by validation, naming both, before any builder
  HostTensor a0({8}, {kDLExtDev, 0}), b1({8}, {kDLExtDev, 1});
  const DLTensor *mixed[] = {&a0.t, &b1.t};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, mixed, 2, out.items, 1)) ==
        "SignatureError(device): AddFwdOp: input 'b' is on twin:1, but input 'a' is on twin:0; all "
        "inputs of a call are on one device");
  CHECK(g_builds == 0);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int d = 0; d < 2; d++) {
    threads.emplace_back([&, d] {
      HostTensor a({8}, {kDLExtDev, d}, 0.25f * d), b({8}, {kDLExtDev, d}, 1.0f);
      const DLTensor *in[] = {&a.t, &b.t};
      for (int i = 0; i < 10000; i++) {
        Outputs o2;
        tr_status *s = tr_op_call(op, in, 2, o2.items, 1);
        if (s != nullptr) {
          tr_status_destroy(&s);
          wrong++;
          continue;
        }
        if (o2.items[0]->dl_tensor.device.device_id != d) wrong++;
        for (int k = 0; k < 8; k++) wrong += o2.f(0)[k] != a.data[k] + b.data[k];
      }
    });
  }
  for (auto &t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(g_builds == 2);  // one per device
  CHECK(tr_op_memo_count(op) == 2);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("validate and settle in threads: asked together at a miss; validate's error comes first") {
  tr_test::TempDir dir;
  std::string file = dir.write("p.yaml", "components:\n  validate: {placement: thread}\n  settle: {placement: thread}\n");
  Env env(false, file.c_str());
  HostTensor a({4}), b({4}, {kDLCPU, 0}, 2.0f), wrong({5});
  Outputs out;
  tr_op *op = env.op("AddFwdOp");
  const DLTensor *bad[] = {&a.t, &wrong.t};
  CHECK(tr_test::error_of(tr_op_call(op, bad, 2, out.items, 1)).rfind("SignatureError(shape): AddFwdOp: input 'b'", 0) == 0);
  CHECK(tr_op_target(op) == nullptr);  // settle's answer to a call that failed is not kept
  CHECK(g_builds == 0);
  const DLTensor *in[] = {&a.t, &b.t};
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  CHECK(std::string(tr_op_target(op)) == "testcpu");
  const float *c = (const float *)out.items[0]->dl_tensor.data;
  for (int i = 0; i < 4; i++) CHECK(c[i] == a.data[i] + b.data[i]);
  tr_op_destroy(&op);

  tr_op *fails = env.op("AddFwdOp");  // settle fails on cuda:7; validate passes
  HostTensor a7({4}, {kDLCUDA, 7}), b7({4}, {kDLCUDA, 7});
  const DLTensor *in7[] = {&a7.t, &b7.t};
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(fails, in7, 2, out.items, 1)) ==
        "BackendError: the detector of target 'testgpu' failed on device cuda:7: ValueError: cuda:7 is out "
        "of order");
  CHECK(tr_op_target(fails) == nullptr);
  HostTensor wrong7({5}, {kDLCUDA, 7});  // both fail: validate's error is the one reported
  const DLTensor *both[] = {&a7.t, &wrong7.t};
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(fails, both, 2, out.items, 1)).rfind("SignatureError(shape): AddFwdOp: input 'b'", 0) == 0);
  out.reset();
  tr_test::ok(tr_op_call(fails, in, 2, out.items, 1));  // settled afresh by the next call
  CHECK(std::string(tr_op_target(fails)) == "testcpu");
  tr_op_destroy(&fails);
}

TEST_CASE("an optional input left off and one passed as NULL are one call signature: one build") {
  Env env;
  int64_t n = 4;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&n, 1, &shape));
  tr_named_value params[] = {{"normalized_shape", shape}};
  HostTensor x({2, 4}), y({2, 4});
  const DLTensor *left_off[] = {&x.t}, *as_null[] = {&x.t, nullptr};
  DLTensor *outs[] = {&y.t};
  Outputs out;
  tr_op *op = env.op("RMSNormFwdOp", {params[0]});
  tr_test::ok(tr_op_call(op, left_off, 1, out.items, 1));
  out.reset();
  tr_test::ok(tr_op_call(op, as_null, 2, out.items, 1));
  tr_test::ok(tr_op_call_into(op, as_null, 2, outs, 1));
  tr_test::ok(tr_op_call_into(op, left_off, 1, outs, 1));
  CHECK(g_builds == 1);
  CHECK(tr_op_memo_count(op) == 1);
  tr_op *null_first = env.op("RMSNormFwdOp", {params[0]});  // the other order, through call_into first
  tr_test::ok(tr_op_call_into(null_first, as_null, 2, outs, 1));
  out.reset();
  tr_test::ok(tr_op_call(null_first, left_off, 1, out.items, 1));
  CHECK(g_builds == 2);
  CHECK(tr_op_memo_count(null_first) == 1);
  REQUIRE(g_seen.size() == 2);
  CHECK(g_seen[0] == "RMSNormFwdOp testcpu float32[2, 4] on cpu None normalized_shape=(4,) eps=None");
  CHECK(g_seen[1] == g_seen[0]);
  tr_value_clear(&shape);
  tr_op_destroy(&op);
  tr_op_destroy(&null_first);
}

TEST_CASE("a named target that has no builder for the op is an error; detection and the in-tree "
          "kernels are not used instead") {
  Env env;  // 'other' is registered but serves AddFwdOp only; 'testcpu' claims cpu and serves RMSNorm
  int64_t n = 4;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&n, 1, &shape));
  tr_named_value params[] = {{"normalized_shape", shape}};
  const std::string refused =
      "OpNotAvailableError: target 'other' registers no kernel builder for RMSNormFwdOp; targets that "
      "do: ['testcpu']. There is no fall back to the in-tree implementation: those kernels do not run "
      "on this target's devices.";
  HostTensor x({2, 4}), xc({2, 4}, {kDLCUDA, 0});
  const DLTensor *cpu[] = {&x.t}, *cuda[] = {&xc.t};  // cuda: where the in-tree RMSNorm runs
  Outputs out;
  tr_op *own = env.op("RMSNormFwdOp", {params[0]}, "other");
  CHECK(tr_test::error_of(tr_op_call(own, cpu, 1, out.items, 1)) == refused);
  CHECK(tr_test::error_of(tr_op_call(own, cuda, 1, out.items, 1)) == refused);
  CHECK(tr_op_target(own) == nullptr);  // the failed call bound the op to no target
  tr_test::ok(tr_set_default_target(env.rt, "other"));
  tr_op *by_default = env.op("RMSNormFwdOp", {params[0]});
  CHECK(tr_test::error_of(tr_op_call(by_default, cpu, 1, out.items, 1)) == refused);
  CHECK(tr_test::error_of(tr_op_call(by_default, cuda, 1, out.items, 1)) == refused);
  CHECK(tr_op_target(by_default) == nullptr);
  CHECK(g_builds == 0);  // testcpu's builder never ran
  CHECK(tr_op_memo_count(own) == 0);
  CHECK(tr_op_memo_count(by_default) == 0);
  tr_value_clear(&shape);
  tr_op_destroy(&own);
  tr_op_destroy(&by_default);
}

// A builder that forgets the call function; its kernels count their releases.
static std::atomic<int> g_releases{0};

static tr_status *build_no_call(void *, const tr_build_request *, tr_kernel *out) {
  g_builds++;
  out->self = new int(0);
  out->call = nullptr;
  out->release = [](void *self) {
    g_releases++;
    delete static_cast<int *>(self);
  };
  return nullptr;
}

static tr_status *init_no_call(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "nocall", claim_cpu, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "nocall", build_no_call, nullptr);
}

TEST_CASE("a kernel built with no call function is a BackendError naming target and op; it is "
          "released and not memoised") {
  g_builds = 0;
  g_releases = 0;
  tr_runtime *rt = tr_test::runtime_with_builtin("nocall", init_no_call);
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  HostTensor a({4}), b({4});
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  const std::string error = "BackendError: target 'nocall' built a kernel for AddFwdOp with no call function";
  CHECK(tr_test::error_of(tr_op_call(op, in, 2, out.items, 1)) == error);
  CHECK(g_builds == 1);
  CHECK(g_releases == 1);  // released at once, not leaked
  REQUIRE(tr_op_memo_count(op) == 0);  // (a memoised kernel with no call would crash the next call)
  CHECK(tr_op_target(op) == nullptr);
  CHECK(tr_test::error_of(tr_op_call(op, in, 2, out.items, 1)) == error);
  CHECK(g_builds == 2);  // nothing was memoised: built again
  CHECK(g_releases == 2);
  tr_op_destroy(&op);
  CHECK(g_releases == 2);
  tr_runtime_destroy(&rt);
}

// A kernel that changes what it was handed: g_meddle 1 its output's shape values, 2 its output's
// data pointer, 3 its output's dtype, 4 its output's ndim.
static int g_meddle;
static float g_elsewhere[16];
static tr_status *meddling_call(void *, DLTensor *const *in, size_t, DLTensor *const *out, size_t) {
  if (g_meddle == 1) out[0]->shape[0] = 3;
  if (g_meddle == 2) out[0]->data = g_elsewhere;
  if (g_meddle == 3) out[0]->dtype.bits = 64;
  if (g_meddle == 4) out[0]->ndim = 0;
  (void)in;
  return nullptr;
}
static tr_status *build_meddling(void *, const tr_build_request *, tr_kernel *out) {
  out->call = meddling_call;
  return nullptr;
}
static tr_status *init_meddling(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "meddler", claim_cpu, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "meddler", build_meddling, nullptr);
}

TEST_CASE("a kernel that changes an output's DLTensor is a BackendError naming it; the caller's output comes back "
          "as it was") {
  tr_runtime *rt = tr_test::runtime_with_builtin("meddler", init_meddling);
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  HostTensor a({4}), b({4});
  const DLTensor *in[] = {&a.t, &b.t};
  const std::string changed = "BackendError: target 'meddler': its kernel for AddFwdOp changed its output 'c'";
  const std::string what = " (its DLTensor: data, shape, strides, dtype or device); a kernel writes the elements of "
                           "its outputs, never their description";
  for (int m = 1; m <= 4; m++) {
    INFO("meddle " << m);
    g_meddle = m;
    Outputs out;
    CHECK(tr_test::error_of(tr_op_call(op, in, 2, out.items, 1)) == changed + what);
    CHECK(out.items[0] == nullptr);  // no output with a shape it does not have
    HostTensor c({4});
    DLTensor before = c.t;
    int64_t dims_before = c.t.shape[0];
    DLTensor *into[] = {&c.t};
    CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, into, 1)) == changed + what);
    CHECK(c.t.data == before.data);  // the caller's own structs as they were
    CHECK(c.t.dtype.bits == 32);
    CHECK(c.t.shape[0] == dims_before);
    CHECK(c.t.ndim == 1);
  }
  g_meddle = 0;
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));  // a kernel that keeps them runs
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

static tr_status *init_misspelt(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "speller", claim_cpu, nullptr));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "AddFwdop", "speller", build_meddling, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "speller", build_meddling, nullptr);
}

TEST_CASE("a builder for an op the manifest does not declare (misspelt) is warned about once, naming it") {
  tr_test::Warnings warnings;
  tr_runtime *rt = tr_test::runtime_with_builtins({"speller"}, {init_misspelt}, "manifest/spec", &warnings);
  const char *targets[4];
  CHECK(tr_registered_targets(rt, "AddFwdOp", targets, 4) == 1);  // loading ran; the backend loaded
  CHECK(warnings.lines == std::vector<std::string>{"backend 'speller': a kernel builder for 'AddFwdop', an op the "
                                                   "manifest does not declare (misspelt?), is never called"});
  CHECK(tr_load_failure_count(rt) == 0);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a kernel's ValueError reaches the caller unchanged, even with a backend that failed to load") {
  Env env(true);  // "broken" failed to load: errors of settling and building say so ...
  REQUIRE(tr_load_failure_count(env.rt) == 1);
  tr_op *op = env.op("AddFwdOp");
  HostTensor a({4}), b({4});
  const DLTensor *in[] = {&a.t, &b.t};
  g_fail_call = 1;  // ... but not the kernel's own error about the values it was given
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(op, in, 2, out.items, 1)) ==
        "ValueError: AddFwdOp: a[3] = 7 is out of range (positions < 4)");
  CHECK(out.items[0] == nullptr);
  HostTensor c({4});
  DLTensor *into[] = {&c.t};
  CHECK(tr_test::error_of(tr_op_call_into(op, in, 2, into, 1)) ==
        "ValueError: AddFwdOp: a[3] = 7 is out of range (positions < 4)");
  g_fail_call = 0;
  tr_test::ok(tr_op_call(op, in, 2, out.items, 1));  // settled again, and it runs
  tr_op_destroy(&op);
  // a composite's step: its kernel's error unchanged too, not counted by the composite again
  tr_op *linear = env.op("LinearFwdOp");
  HostTensor x({2, 4}), w({3, 4}), bias({3});
  const DLTensor *lin[] = {&x.t, &w.t, &bias.t};
  g_fail_call = 1;
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(linear, lin, 3, out.items, 1)) ==
        "ValueError: AddFwdOp: a[3] = 7 is out of range (positions < 4)");
  g_fail_call = 0;
  tr_op_destroy(&linear);
  // a param that does not fit (tilerun's own message) counts the backend that failed, once
  tr_op *bad = nullptr;
  tr_named_value p = {"trans_a", tr_value_int(3)};
  std::string e = tr_test::error_of(tr_op_new(env.rt, "GemmFwdOp", &p, 1, nullptr, &bad));
  CHECK(e.find("trans_a") != std::string::npos);
  size_t at = e.find("; 1 backend failed to load (see tr_load_failure_reason)");
  CHECK(at != std::string::npos);
  CHECK(e.find("failed to load", e.find("failed to load") + 1) == std::string::npos);  // once
  // settling a target that is not there: the spec's message, as it stands
  tr_op *named = nullptr;
  CHECK(tr_test::error_of(tr_op_new(env.rt, "AddFwdOp", nullptr, 0, "nosuch", &named)) ==
        "UnknownTargetError: no backend registered target 'nosuch'; known targets: ['other', 'testcpu', 'testgpu']");
}

static tr_status *init_fused_later(const tr_backend_api *api) {  // a LinearFwdOp builder no detector picks
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "fusedlater", claim_nothing, nullptr));
  return api->register_kernel_builder(api->host, "LinearFwdOp", "fusedlater", build<noop_call, true>, nullptr);
}

TEST_CASE("a composite op keeps what its first call decided: a later default target does not change it") {
  g_seen.clear();
  tr_runtime *rt = tr_test::runtime_with_builtins({"testcpu", "fusedlater"}, {init_testcpu, init_fused_later});
  tr_op *linear = nullptr;
  tr_test::ok(tr_op_new(rt, "LinearFwdOp", nullptr, 0, nullptr, &linear));
  HostTensor x({2, 4}), w({3, 4});
  const DLTensor *in[] = {&x.t, &w.t};
  Outputs out;
  tr_test::ok(tr_op_call(linear, in, 2, out.items, 1));  // testcpu detected: no builder, composed
  REQUIRE(g_seen.size() == 1);
  CHECK(g_seen[0].find("GemmFwdOp testcpu") == 0);
  tr_test::ok(tr_set_default_target(rt, "fusedlater"));
  out.reset();
  tr_test::ok(tr_op_call(linear, in, 2, out.items, 1));
  CHECK(g_seen.size() == 1);  // still its composition: no LinearFwdOp build, its Gemm memoised
  tr_op *fresh = nullptr;     // a new instance settles now: served whole by the default target
  tr_test::ok(tr_op_new(rt, "LinearFwdOp", nullptr, 0, nullptr, &fresh));
  out.reset();
  tr_test::ok(tr_op_call(fresh, in, 2, out.items, 1));
  REQUIRE(g_seen.size() == 2);
  CHECK(g_seen[1].find("LinearFwdOp fusedlater") == 0);
  tr_op_destroy(&fresh);
  tr_op_destroy(&linear);
  tr_runtime_destroy(&rt);
}

TEST_CASE("an input the call writes arrives as the caller passed it, strided, unless contiguous: true") {
  // the shipped BatchNorm with running_mean's contiguous: true taken out
  char *text = nullptr, *dir = nullptr;
  size_t size = 0;
  tr_test::ok(tr_plat_read_file("manifest/spec/norm.yaml", &text, &size));
  std::string yaml(text, size);
  free(text);
  const std::string declared = "running_mean: {dtype: T, shape: \"[C]\", optional: true, mutated: true, contiguous: true,";
  size_t at = yaml.find(declared);
  REQUIRE(at != std::string::npos);
  yaml.replace(at, declared.size(), "running_mean: {dtype: T, shape: \"[C]\", optional: true, mutated: true,");
  tr_test::ok(tr_plat_make_temp_dir("tr-manifest", &dir));
  tr_test::ok(tr_plat_write_file((std::string(dir) + "/norm.yaml").c_str(), yaml.data(), yaml.size()));
  for (int shipped = 0; shipped < 2; shipped++) {
    INFO((shipped ? "the shipped manifest: contiguous: true" : "running_mean without contiguous: true"));
    tr_runtime *rt = tr_test::runtime_with_builtins({"testcpu"}, {init_testcpu}, shipped ? "manifest/spec" : dir);
    tr_op *op = nullptr;
    tr_named_value training[] = {{"training", tr_value_bool(false)}};
    tr_test::ok(tr_op_new(rt, "BatchNormFwdOp", training, 1, nullptr, &op));
    HostTensor x({2, 3, 2}), var({3});
    HostTensor big({6}, {kDLCPU, 0}, 0.0f);
    big.view({3}, {2});  // running_mean: every other element of a 6-element buffer
    const DLTensor *in[] = {&x.t, &big.t, &var.t};
    Outputs out;
    g_rm_data = nullptr;
    tr_test::ok(tr_op_call(op, in, 3, out.items, 3));
    if (shipped) {  // copied in contiguous, and written back
      CHECK(g_rm_data != big.data.data());
      CHECK(g_rm_stride == 1);
    } else {  // the caller's own view
      CHECK(g_rm_data == big.data.data());
      CHECK(g_rm_stride == 2);
    }
    CHECK(big.data[0] == 100.0f);  // either way the caller's elements hold what the kernel wrote
    CHECK(big.data[2] == 101.0f);
    CHECK(big.data[4] == 102.0f);
    CHECK(big.data[1] == 0.0f + 0.25f * 1 - 0.1f * 1);  // and nothing between them changed
    tr_op_destroy(&op);
    tr_runtime_destroy(&rt);
  }
  tr_test::ok(tr_plat_remove_tree(dir));
  free(dir);
}

// ---- a plugin's kernel type for an in-tree op, on the plugin's own device type ----

static std::atomic<int> g_acme_builds{0};
static const char *const kAcmeOnly[] = {"acme", nullptr};

static tr_status *acme_rms_factory(const tr_kernel_type *, const tr_call_spec *call, tr_kernel *out) {
  g_acme_builds++;
  g_seen.push_back("acme_rms row=" + std::to_string(tr_call_spec_int(call, "row")));
  out->self = nullptr;
  out->call = copy_call;
  return nullptr;
}

static const tr_kernel_type *acme_rms() {
  static tr_kernel_type t = {sizeof(tr_kernel_type), "acme_rms_norm", nullptr, kAcmeOnly, nullptr, 0, 0, nullptr,
                             nullptr, nullptr, nullptr, acme_rms_factory, nullptr, nullptr};
  t.interface = tr_intree_find("RMSNormFwdOp")->interfaces[0];
  return &t;
}

static void *acme_alloc(void *, const tr_device *, size_t bytes) { return malloc(bytes ? bytes : 1); }
static void acme_free(void *, const tr_device *, void *p) { free(p); }
static tr_status *acme_facts(void *, const tr_device *, tr_device_facts *out) {
  *out = tr_device_facts{-1, nullptr, 4, 0};
  return nullptr;
}

static tr_status *init_acme_kit(const tr_backend_api *api) {  // no detector: the builtin target there
  TR_RETURN_IF_ERROR(api->register_device_type(api->host, "acme", kDLExtDev));
  TR_RETURN_IF_ERROR(api->register_allocator(api->host, "acme", acme_alloc, acme_free, nullptr, nullptr));
  TR_RETURN_IF_ERROR(api->register_device_facts(api->host, "acme", acme_facts, nullptr));
  return api->register_kernel_type(api->host, "RMSNormFwdOp", acme_rms());
}

TEST_CASE("a plugin's kernel type for an in-tree op runs on the device types it declares") {
  g_seen.clear();
  g_acme_builds = 0;
  tr_runtime *rt = tr_test::runtime_with_builtin("acmekit", init_acme_kit);
  int64_t row = 8;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&row, 1, &shape));
  tr_named_value params[] = {{"normalized_shape", shape}};
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "RMSNormFwdOp", params, 1, nullptr, &op));
  tr_value_clear(&shape);
  HostTensor x({3, 8}, {kDLExtDev, 0});
  const DLTensor *in[] = {&x.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 1, out.items, 1));  // settled builtin; the selector picks the plugin's type
  CHECK(std::string(tr_op_target(op)) == "<builtin>");
  CHECK(g_acme_builds == 1);
  REQUIRE(g_seen.size() == 1);
  CHECK(g_seen[0] == "acme_rms row=8");
  REQUIRE(out.items[0] != nullptr);
  CHECK(out.items[0]->dl_tensor.device.device_type == kDLExtDev);
  for (int i = 0; i < 24; i++) CHECK(out.f(0)[i] == x.data[i]);  // the stand-in copies x
  out.reset();
  tr_test::ok(tr_op_call(op, in, 1, out.items, 1));
  CHECK(g_acme_builds == 1);  // memo hit
  // another batch size, and another op instance: memo misses of the same build identity, built once
  HostTensor x5({5, 8}, {kDLExtDev, 0});
  const DLTensor *in5[] = {&x5.t};
  out.reset();
  tr_test::ok(tr_op_call(op, in5, 1, out.items, 1));
  for (int i = 0; i < 40; i++) CHECK(out.f(0)[i] == x5.data[i]);
  CHECK(tr_op_memo_count(op) == 2);
  tr_op *twin = nullptr;
  tr_test::ok(tr_value_int_list(&row, 1, &shape));
  tr_named_value twin_params[] = {{"normalized_shape", shape}};
  tr_test::ok(tr_op_new(rt, "RMSNormFwdOp", twin_params, 1, nullptr, &twin));
  tr_value_clear(&shape);
  out.reset();
  tr_test::ok(tr_op_call(twin, in, 1, out.items, 1));
  tr_op_destroy(&twin);
  CHECK(g_acme_builds == 1);
  // on cpu, where neither the in-tree kernels nor the plugin's type run: refused by name
  HostTensor c({3, 8});
  const DLTensor *cin[] = {&c.t};
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(op, cin, 1, out.items, 1))
            .find("OpNotAvailableError: RMSNormFwdOp's in-tree kernels do not run on cpu") == 0);
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}

TEST_CASE("a plugin's kernel type chosen by a select component in a thread is built once, not selected again") {
  g_seen.clear();
  g_acme_builds = 0;
  tr_test::TempDir dir;
  std::string file = dir.write("p.yaml", "components:\n  select: {placement: thread}\n");
  const char *none[] = {"/nonexistent"};
  const char *names[] = {"acmekit"};
  tr_backend_init_fn inits[] = {init_acme_kit};
  tr_runtime_options o{};
  o.manifest_dir = "manifest/spec";
  o.backend_dirs = none;
  o.n_backend_dirs = 1;
  o.builtin_names = names;
  o.builtin_inits = inits;
  o.n_builtins = 1;
  o.pipeline_file = file.c_str();
  tr_runtime *rt = nullptr;
  tr_test::ok(tr_runtime_new(&o, &rt));
  int64_t row = 8;
  tr_value shape;
  tr_test::ok(tr_value_int_list(&row, 1, &shape));
  tr_named_value params[] = {{"normalized_shape", shape}};
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "RMSNormFwdOp", params, 1, nullptr, &op));
  tr_value_clear(&shape);
  HostTensor x({3, 8}, {kDLExtDev, 0}), x5({5, 8}, {kDLExtDev, 0});
  const DLTensor *in[] = {&x.t}, *in5[] = {&x5.t};
  Outputs out;
  tr_test::ok(tr_op_call(op, in, 1, out.items, 1));
  out.reset();
  tr_test::ok(tr_op_call(op, in5, 1, out.items, 1));  // another memo entry, the same build identity
  CHECK(tr_op_memo_count(op) == 2);
  CHECK(g_acme_builds == 1);
  REQUIRE(g_seen.size() == 1);
  CHECK(g_seen[0] == "acme_rms row=8");
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
}
