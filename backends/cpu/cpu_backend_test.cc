// cpu_backend_test.cc: the CPU backend through tilerun's caller API: discovered from its
// descriptor, serving every op that builds kernels, each checked against a float64 reference on
// fresh random inputs (the glue: params, defaults, shapes), bad inputs named, and what the
// kernels cannot serve refused by the builder.
#include <catch2/catch.hpp>


#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "platform/platform.h"
#include "platform/test_support.h"
#include "runtime/runtime_testing.h"

using tr_test::HostTensor;
using tr_test::Outputs;

struct Cpu {
  tr_runtime *rt = nullptr;
  Cpu() {
    const char *dirs[] = {"backends/cpu"};
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    o.backend_dirs = dirs;
    o.n_backend_dirs = 1;
    tr_test::ok(tr_runtime_new(&o, &rt));
  }
  explicit Cpu(tr_runtime *made) : rt(made) {}
  ~Cpu() { tr_runtime_destroy(&rt); }
  tr_op *op(const char *name, std::vector<tr_named_value> params = {}) {
    tr_op *made = nullptr;
    tr_test::ok(tr_op_new(rt, name, params.data(), params.size(), nullptr, &made));
    for (auto &p : params) tr_value_clear(&p.value);
    return made;
  }
};

static std::mt19937 &rng() {
  static std::mt19937 g(std::random_device{}());
  return g;
}

static HostTensor random(std::vector<int64_t> shape) {
  HostTensor t(shape);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float &v : t.data) v = n(rng());
  return t;
}

static tr_value list(std::vector<int64_t> items) {
  tr_value v;
  tr_test::ok(tr_value_int_list(items.data(), items.size(), &v));
  return v;
}

static void near(const float *got, const std::vector<double> &want, double rtol = 2e-5) {
  for (size_t i = 0; i < want.size(); i++) {
    INFO("element " << i);
    REQUIRE(got[i] == Approx(want[i]).epsilon(rtol).margin(1e-6));
  }
}

TEST_CASE("the cpu backend is discovered and serves every op that builds kernels") {
  Cpu cpu;
  const char *names[16];
  REQUIRE(tr_registered_targets(cpu.rt, nullptr, names, 16) == 1);
  CHECK(std::string(names[0]) == "cpu");
  for (const char *op : {"RMSNormFwdOp", "LayerNormFwdOp", "GroupNormFwdOp", "BatchNormFwdOp",
                         "SoftmaxFwdOp", "AddFwdOp", "GemmFwdOp", "RoPEFwdOp", "GQADecodeFwdOp",
                         "GQAPrefillFwdOp"}) {
    INFO(op);
    CHECK(tr_registered_targets(cpu.rt, op, names, 16) == 1);
  }
  CHECK(tr_registered_targets(cpu.rt, "LinearFwdOp", names, 16) == 0);  // composite
  CHECK(tr_load_failure_count(cpu.rt) == 0);
}

TEST_CASE("RMSNorm and LayerNorm, with their default eps") {
  Cpu cpu;
  HostTensor x = random({5, 33}), w = random({33}), b = random({33});
  tr_op *rms = cpu.op("RMSNormFwdOp", {{"normalized_shape", list({33})}});
  tr_op *ln = cpu.op("LayerNormFwdOp", {{"normalized_shape", list({33})}});
  const DLTensor *rin[] = {&x.t, &w.t}, *lin[] = {&x.t, &w.t, &b.t};
  Outputs r, l;
  tr_test::ok(tr_op_call(rms, rin, 2, r.items, 1));
  tr_test::ok(tr_op_call(ln, lin, 3, l.items, 1));
  CHECK(std::string(tr_op_target(rms)) == "cpu");
  std::vector<double> rw, lw;
  for (int row = 0; row < 5; row++) {
    double ss = 0, mean = 0, var = 0;
    for (int i = 0; i < 33; i++) ss += (double)x.data[row * 33 + i] * x.data[row * 33 + i], mean += x.data[row * 33 + i];
    mean /= 33;
    for (int i = 0; i < 33; i++) var += (x.data[row * 33 + i] - mean) * (x.data[row * 33 + i] - mean);
    var /= 33;
    for (int i = 0; i < 33; i++) {
      rw.push_back(x.data[row * 33 + i] / std::sqrt(ss / 33 + 1.1920928955078125e-07) * w.data[i]);
      lw.push_back((x.data[row * 33 + i] - mean) / std::sqrt(var + 1e-5) * w.data[i] + b.data[i]);
    }
  }
  near(r.f(0), rw);
  near(l.f(0), lw, 5e-5);
  tr_op_destroy(&rms);
  tr_op_destroy(&ln);
}

TEST_CASE("Softmax over a middle axis; Add with alpha") {
  Cpu cpu;
  HostTensor x = random({3, 4, 5});
  tr_op *sm = cpu.op("SoftmaxFwdOp", {{"dim", tr_value_int(1)}});
  const DLTensor *in[] = {&x.t};
  Outputs out;
  tr_test::ok(tr_op_call(sm, in, 1, out.items, 1));
  std::vector<double> want(60);
  for (int o = 0; o < 3; o++)
    for (int i = 0; i < 5; i++) {
      double sum = 0;
      for (int d = 0; d < 4; d++) sum += std::exp((double)x.data[o * 20 + d * 5 + i]);
      for (int d = 0; d < 4; d++) want[o * 20 + d * 5 + i] = std::exp((double)x.data[o * 20 + d * 5 + i]) / sum;
    }
  near(out.f(0), want);
  HostTensor a = random({7, 3}), b = random({7, 3});
  tr_op *add = cpu.op("AddFwdOp", {{"alpha", tr_value_float(-2.5)}});
  const DLTensor *ab[] = {&a.t, &b.t};
  Outputs sum;
  tr_test::ok(tr_op_call(add, ab, 2, sum.items, 1));
  std::vector<double> ws;
  for (int i = 0; i < 21; i++) ws.push_back(a.data[i] - 2.5 * b.data[i]);
  near(sum.f(0), ws);
  tr_op_destroy(&sm);
  tr_op_destroy(&add);
}

TEST_CASE("Gemm, transposed b") {
  Cpu cpu;
  HostTensor a = random({6, 9}), b = random({4, 9});
  tr_op *gemm = cpu.op("GemmFwdOp", {{"trans_b", tr_value_bool(true)}});
  const DLTensor *in[] = {&a.t, &b.t};
  Outputs out;
  tr_test::ok(tr_op_call(gemm, in, 2, out.items, 1));
  CHECK(out.items[0]->dl_tensor.shape[1] == 4);
  std::vector<double> want;
  for (int m = 0; m < 6; m++)
    for (int n = 0; n < 4; n++) {
      double s = 0;
      for (int k = 0; k < 9; k++) s += (double)a.data[m * 9 + k] * b.data[n * 9 + k];
      want.push_back(s);
    }
  near(out.f(0), want, 1e-4);
  tr_op_destroy(&gemm);
}

TEST_CASE("GroupNorm and BatchNorm (training: mean and rstd out, running stats updated)") {
  Cpu cpu;
  HostTensor x = random({2, 4, 3});
  tr_op *gn = cpu.op("GroupNormFwdOp", {{"num_groups", tr_value_int(2)}});
  const DLTensor *gin[] = {&x.t};
  Outputs g;
  tr_test::ok(tr_op_call(gn, gin, 1, g.items, 1));
  std::vector<double> want(24);
  for (int n = 0; n < 2; n++)
    for (int grp = 0; grp < 2; grp++) {
      double mean = 0, var = 0;
      for (int i = 0; i < 6; i++) mean += x.data[n * 12 + grp * 6 + i];
      mean /= 6;
      for (int i = 0; i < 6; i++) var += std::pow(x.data[n * 12 + grp * 6 + i] - mean, 2);
      var /= 6;
      for (int i = 0; i < 6; i++) want[n * 12 + grp * 6 + i] = (x.data[n * 12 + grp * 6 + i] - mean) / std::sqrt(var + 1e-5);
    }
  near(g.f(0), want, 5e-5);
  HostTensor rm({4}), rv({4});
  for (int c = 0; c < 4; c++) rm.data[c] = 0, rv.data[c] = 1;
  tr_op *bn = cpu.op("BatchNormFwdOp", {{"training", tr_value_bool(true)}});
  const DLTensor *bin[] = {&x.t, &rm.t, &rv.t};
  Outputs b;
  tr_test::ok(tr_op_call(bn, bin, 3, b.items, 3));
  REQUIRE(b.items[1] != nullptr);
  for (int c = 0; c < 4; c++) {
    double mean = 0, var = 0;
    for (int n = 0; n < 2; n++)
      for (int s = 0; s < 3; s++) mean += x.data[n * 12 + c * 3 + s];
    mean /= 6;
    for (int n = 0; n < 2; n++)
      for (int s = 0; s < 3; s++) var += std::pow(x.data[n * 12 + c * 3 + s] - mean, 2);
    CHECK(b.f(1)[c] == Approx(mean).epsilon(1e-5).margin(1e-6));
    CHECK(b.f(2)[c] == Approx(1 / std::sqrt(var / 6 + 1e-5)).epsilon(1e-5));
    CHECK(rm.data[c] == Approx(0.1 * mean).epsilon(1e-5).margin(1e-6));     // momentum 0.1
    CHECK(rv.data[c] == Approx(0.9 + 0.1 * var / 5).epsilon(1e-5));         // unbiased variance
  }
  // running stats laid over x, or over one another: the op would read what it writes
  const std::vector<float> x_before = x.data, rv_before = rv.data;
  DLTensor over_x = rm.t;
  over_x.data = x.data.data() + 2;
  const DLTensor *aliased[] = {&x.t, &over_x, &rv.t};
  Outputs a;
  CHECK(tr_test::error_of(tr_op_call(bn, aliased, 3, a.items, 3)) ==
        "ValueError: BatchNormFwdOp: input 'running_mean', which the op writes in place, shares memory with input "
        "'x'; give it memory of its own");
  const DLTensor *twice[] = {&x.t, &rv.t, &rv.t};
  CHECK(tr_test::error_of(tr_op_call(bn, twice, 3, a.items, 3)) ==
        "ValueError: BatchNormFwdOp: input 'running_mean', which the op writes in place, shares memory with input "
        "'running_var'; give it memory of its own");
  CHECK(x.data == x_before);  // nothing written
  CHECK(rv.data == rv_before);
  Outputs again;
  tr_test::ok(tr_op_call(bn, bin, 3, again.items, 3));  // apart: served
  tr_op_destroy(&gn);
  tr_op_destroy(&bn);
}

TEST_CASE("RoPE (neox) and an out-of-range position, passed on as the kernel's ValueError") {
  Cpu cpu;
  HostTensor x = random({3, 2, 4}), cache = random({5, 4});
  std::vector<int64_t> pos = {0, 4, 2};
  int64_t pshape[] = {3};
  DLTensor positions{pos.data(), {kDLCPU, 0}, 1, TR_INT64, pshape, nullptr, 0};
  tr_op *rope = cpu.op("RoPEFwdOp");
  const DLTensor *in[] = {&positions, &x.t, &cache.t};
  Outputs out;
  tr_test::ok(tr_op_call(rope, in, 3, out.items, 1));
  std::vector<double> want;
  for (int t = 0; t < 3; t++)
    for (int h = 0; h < 2; h++) {
      const float *v = &x.data[(t * 2 + h) * 4];
      const float *c = &cache.data[pos[t] * 4];
      for (int i = 0; i < 2; i++) want.push_back((double)v[i] * c[i] - (double)v[i + 2] * c[2 + i]);
      for (int i = 0; i < 2; i++) want.push_back((double)v[i + 2] * c[i] + (double)v[i] * c[2 + i]);
    }
  near(out.f(0), want);
  pos[1] = 5;
  out.reset();
  CHECK(tr_test::error_of(tr_op_call(rope, in, 3, out.items, 1)) ==
        "ValueError: rope: token 1 has position 5, out of range [0, 5) of the cache's rows");
  tr_op_destroy(&rope);
}

TEST_CASE("GQA decode needs 16-bit inputs: float32 is refused by validation, naming it") {
  Cpu cpu;
  tr_op *gqa = cpu.op("GQADecodeFwdOp", {{"heads", tr_value_int(4)}, {"heads_kv", tr_value_int(2)},
                                         {"dim", tr_value_int(8)}});
  HostTensor q = random({1, 4, 8}), k = random({1, 6, 2, 8});
  std::vector<int32_t> lens = {6};
  int64_t lshape[] = {1};
  DLTensor seqlens{lens.data(), {kDLCPU, 0}, 1, TR_INT32, lshape, nullptr, 0};
  const DLTensor *in[] = {&q.t, &k.t, &k.t, &seqlens};
  Outputs out;
  CHECK(tr_test::error_of(tr_op_call(gqa, in, 4, out.items, 1)) ==
        "SignatureError(dtype): GQADecodeFwdOp: input 'q' dtype float32 is not one of float16 | "
        "bfloat16 (type variable T)");
  tr_op_destroy(&gqa);
}

// A bfloat16 tensor of random values in host memory.
struct Bf16 {
  std::vector<uint16_t> bits;
  std::vector<int64_t> shape;
  DLTensor t{};
  explicit Bf16(std::vector<int64_t> s) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) bits.push_back(tr_cpu_f32_to_bf16(dist(rng())));
    t = DLTensor{bits.data(), {kDLCPU, 0}, (int32_t)shape.size(), TR_BFLOAT16, shape.data(), nullptr, 0};
  }
  double at(int64_t i) const { return tr_cpu_bf16_to_f32(bits[(size_t)i]); }
};

TEST_CASE("GQA decode in bfloat16, with the default scale and a softcap") {
  Cpu cpu;
  const int B = 2, H = 4, HKV = 2, D = 8, S = 6;
  tr_op *gqa = cpu.op("GQADecodeFwdOp", {{"heads", tr_value_int(H)}, {"heads_kv", tr_value_int(HKV)},
                                         {"dim", tr_value_int(D)}, {"softcap", tr_value_float(2.0)}});
  Bf16 q({B, H, D}), k({B, S, HKV, D}), v({B, S, HKV, D});
  std::vector<int32_t> lens = {6, 3};
  int64_t lshape[] = {B};
  DLTensor seqlens{lens.data(), {kDLCPU, 0}, 1, TR_INT32, lshape, nullptr, 0};
  const DLTensor *in[] = {&q.t, &k.t, &v.t, &seqlens};
  Outputs out;
  tr_test::ok(tr_op_call(gqa, in, 4, out.items, 1));
  const uint16_t *o = static_cast<const uint16_t *>(out.items[0]->dl_tensor.data);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      int kv = h / (H / HKV);
      std::vector<double> p;
      double mx = -1e300, sum = 0;
      for (int s = 0; s < lens[b]; s++) {
        double l = 0;
        for (int d = 0; d < D; d++) l += q.at((b * H + h) * D + d) * k.at(((b * S + s) * HKV + kv) * D + d);
        l = 2.0 * std::tanh(l / std::sqrt((double)D) / 2.0);
        p.push_back(l);
        mx = std::max(mx, l);
      }
      for (double &l : p) sum += (l = std::exp(l - mx));
      for (int d = 0; d < D; d++) {
        double want = 0;
        for (int s = 0; s < lens[b]; s++) want += p[s] / sum * v.at(((b * S + s) * HKV + kv) * D + d);
        INFO("b " << b << " h " << h << " d " << d);
        CHECK(tr_cpu_bf16_to_f32(o[(b * H + h) * D + d]) == Approx(want).epsilon(1.6e-2).margin(2e-2));
      }
    }
  tr_op_destroy(&gqa);
}

TEST_CASE("GQA prefill in bfloat16: causal, each query head on its KV head, default and given scale") {
  Cpu cpu;
  const int B = 2, L = 7, D = 8;
  struct Heads {
    int h, kv;
  };
  for (Heads hs : {Heads{4, 2}, Heads{3, 3}, Heads{4, 1}}) {
    for (bool given : {false, true}) {
      const int H = hs.h, HKV = hs.kv;
      const double scale = given ? 0.3 : 1.0 / std::sqrt((double)D);
      std::vector<tr_named_value> params = {
          {"heads", tr_value_int(H)}, {"heads_kv", tr_value_int(HKV)}, {"dim", tr_value_int(D)}};
      if (given) params.push_back({"scale", tr_value_float(scale)});
      tr_op *op = cpu.op("GQAPrefillFwdOp", params);
      Bf16 q({B, L, H, D}), k({B, L, HKV, D}), v({B, L, HKV, D});
      const DLTensor *in[] = {&q.t, &k.t, &v.t};
      Outputs out;
      tr_test::ok(tr_op_call(op, in, 3, out.items, 1));
      CHECK(out.items[0]->dl_tensor.ndim == 4);
      CHECK(out.items[0]->dl_tensor.shape[1] == L);
      CHECK(out.items[0]->dl_tensor.shape[2] == H);
      const uint16_t *o = static_cast<const uint16_t *>(out.items[0]->dl_tensor.data);
      for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
          for (int h = 0; h < H; h++) {
            const int kv = h / (H / HKV);
            std::vector<double> p;
            double mx = -1e300, sum = 0;
            for (int j = 0; j <= i; j++) {  // keys after i are never seen
              double l = 0;
              for (int d = 0; d < D; d++)
                l += q.at(((b * L + i) * H + h) * D + d) * k.at(((b * L + j) * HKV + kv) * D + d);
              p.push_back(l * scale);
              mx = std::max(mx, l * scale);
            }
            for (double &l : p) sum += (l = std::exp(l - mx));
            for (int d = 0; d < D; d++) {
              double want = 0;
              for (int j = 0; j <= i; j++) want += p[j] / sum * v.at(((b * L + j) * HKV + kv) * D + d);
              INFO("heads " << H << "/" << HKV << " scale " << scale << " b " << b << " i " << i << " h " << h
                            << " d " << d);
              CHECK(tr_cpu_bf16_to_f32(o[((b * L + i) * H + h) * D + d]) == Approx(want).epsilon(1.6e-2).margin(2e-2));
            }
          }
      tr_op_destroy(&op);
    }
  }
}

// A 16-bit float tensor (float16 or bfloat16) in host memory, holding `values` rounded.
struct Half {
  std::vector<uint16_t> bits;
  std::vector<int64_t> shape;
  DLTensor t{};
  Half(tr_dtype dtype, std::vector<int64_t> s, const std::vector<float> &values) : shape(std::move(s)) {
    for (float v : values) bits.push_back(dtype.code == kDLBfloat ? tr_cpu_f32_to_bf16(v) : tr_cpu_f32_to_f16(v));
    t = DLTensor{bits.data(), {kDLCPU, 0}, (int32_t)shape.size(), dtype, shape.data(), nullptr, 0};
  }
  double at(size_t i) const {
    return t.dtype.code == kDLBfloat ? tr_cpu_bf16_to_f32(bits[i]) : tr_cpu_f16_to_f32(bits[i]);
  }
};

TEST_CASE("RMSNorm with eps unset takes the epsilon of x's dtype (torch.finfo(x.dtype).eps)") {
  // Rows of mean square about 1e-4: float16's epsilon (2^-10) and bfloat16's (2^-7) change the
  // result by a factor of 3 to 9 there, where float32's (2^-23) would leave it almost unchanged.
  struct Case {
    tr_dtype dtype;
    double eps, rtol;
  } cases[] = {{TR_FLOAT16, 0.0009765625, 2e-3}, {TR_BFLOAT16, 0.0078125, 1e-2}};
  for (const Case &c : cases) {
    INFO("dtype code " << (int)c.dtype.code);
    Cpu cpu;
    std::vector<float> values(4 * 16);
    std::normal_distribution<float> dist(0.0f, 0.01f);
    for (float &v : values) v = dist(rng());
    Half x(c.dtype, {4, 16}, values);
    tr_op *rms = cpu.op("RMSNormFwdOp", {{"normalized_shape", list({16})}});  // eps None
    const DLTensor *in[] = {&x.t};
    Outputs out;
    tr_test::ok(tr_op_call(rms, in, 1, out.items, 1));
    REQUIRE(tr_dtype_equal(out.items[0]->dl_tensor.dtype, c.dtype));
    const uint16_t *y = static_cast<const uint16_t *>(out.items[0]->dl_tensor.data);
    for (int row = 0; row < 4; row++) {
      double ss = 0;
      for (int i = 0; i < 16; i++) ss += x.at(row * 16 + i) * x.at(row * 16 + i);
      for (int i = 0; i < 16; i++) {
        double want = x.at(row * 16 + i) / std::sqrt(ss / 16 + c.eps);
        double got = c.dtype.code == kDLBfloat ? tr_cpu_bf16_to_f32(y[row * 16 + i]) : tr_cpu_f16_to_f32(y[row * 16 + i]);
        INFO("row " << row << " element " << i);
        REQUIRE(got == Approx(want).epsilon(c.rtol).margin(1e-3));
      }
    }
    tr_op_destroy(&rms);
  }
}

// ---- What the builder refuses ----

// The shipped library's builders, watched: its init runs with an API table whose
// register_kernel_builder puts a counter in front of each builder, so that a test sees how many
// times a call asked the builder and how many times the builder itself refused. One runtime at a
// time (the counters are the process's).
namespace watched {

struct Builder {
  std::string op;
  tr_build_kernel_fn build = nullptr;
  void *ctx = nullptr;
  int asked = 0, refused = 0;
};

static Builder builders[16];
static size_t n_builders = 0;
static const tr_backend_api *host_api = nullptr;

static tr_status *build(void *ctx, const tr_build_request *req, tr_kernel *out) {
  Builder *b = static_cast<Builder *>(ctx);
  b->asked++;
  tr_status *status = b->build(b->ctx, req, out);
  if (status != nullptr) b->refused++;
  return status;
}

static tr_status *register_builder(void *host, const char *op, const char *target,
                                   tr_build_kernel_fn fn, void *ctx) {
  REQUIRE(n_builders < 16);
  Builder *b = &builders[n_builders++];
  *b = Builder{op, fn, ctx};
  return host_api->register_kernel_builder(host, op, target, build, b);
}

static tr_status *init(const tr_backend_api *api) {
  static tr_plat_lib *lib = nullptr;  // kept open: the runtime calls into it until the end
  if (lib == nullptr) tr_test::ok(tr_plat_lib_open("backends/cpu/libtilerun_cpu.so", &lib));
  auto real = reinterpret_cast<tr_backend_init_fn>(tr_plat_lib_symbol(lib, TR_BACKEND_INIT_SYMBOL));
  REQUIRE(real != nullptr);
  n_builders = 0;
  host_api = api;
  tr_backend_api watching = *api;
  watching.register_kernel_builder = register_builder;
  return real(&watching);
}

static Builder &of(const char *op) {
  for (size_t i = 0; i < n_builders; i++) {
    if (builders[i].op == op) return builders[i];
  }
  FAIL("no builder watched for " << op);
  return builders[0];
}

}  // namespace watched

// A runtime whose only backend is the shipped cpu library, its builders watched (loaded now).
struct WatchedCpu : Cpu {
  WatchedCpu() : Cpu(tr_test::runtime_with_builtin("cpu", watched::init)) {
    const char *names[4];
    REQUIRE(tr_registered_targets(rt, nullptr, names, 4) == 1);  // runs discovery
  }
};

TEST_CASE("builder: an integer Add with a fractional or out-of-range alpha is refused at build") {
  WatchedCpu cpu;
  struct Case {
    tr_dtype dtype;
    double alpha;
    const char *error;
  } cases[] = {
      {TR_INT32, 0.5,
       "ValueError: cpu AddFwdOp: param 'alpha' is 0.5; with input dtype int32 the cpu target needs "
       "an integral alpha in [-2147483648, 2147483647]"},
      {TR_INT32, 2147483648.0,
       "ValueError: cpu AddFwdOp: param 'alpha' is 2147483648.0; with input dtype int32 the cpu "
       "target needs an integral alpha in [-2147483648, 2147483647]"},
      {TR_INT64, 1e19,
       "ValueError: cpu AddFwdOp: param 'alpha' is 1e+19; with input dtype int64 the cpu target "
       "needs an integral alpha in [-9223372036854775808, 9223372036854775807]"},
  };
  for (const Case &c : cases) {
    INFO(c.error);
    watched::Builder &builder = watched::of("AddFwdOp");
    builder.asked = builder.refused = 0;
    tr_op *add = cpu.op("AddFwdOp", {{"alpha", tr_value_float(c.alpha)}});
    std::vector<int64_t> a(6, 1), b(6, 2);
    int64_t shape[] = {6};
    std::vector<int32_t> a32(6, 1), b32(6, 2);
    bool is32 = c.dtype.bits == 32;
    DLTensor ta{is32 ? (void *)a32.data() : (void *)a.data(), {kDLCPU, 0}, 1, c.dtype, shape, nullptr, 0};
    DLTensor tb{is32 ? (void *)b32.data() : (void *)b.data(), {kDLCPU, 0}, 1, c.dtype, shape, nullptr, 0};
    const DLTensor *in[] = {&ta, &tb};
    for (int call = 1; call <= 2; call++) {  // each call asks the builder, which refuses again
      Outputs out;
      CHECK(tr_test::error_of(tr_op_call(add, in, 2, out.items, 1)) == c.error);
      CHECK(out.items[0] == nullptr);
      CHECK(builder.asked == call);
      CHECK(builder.refused == call);  // the builder's refusal, not a built kernel's failure
      CHECK(tr_op_memo_count(add) == 0);
      CHECK(tr_op_target(add) == nullptr);
    }
    tr_op_destroy(&add);
  }
  // An integral alpha in range is served (and memoised) as before.
  watched::Builder &builder = watched::of("AddFwdOp");
  builder.asked = builder.refused = 0;
  tr_op *add = cpu.op("AddFwdOp", {{"alpha", tr_value_float(-3.0)}});
  std::vector<int32_t> a = {1, 2, 3}, b = {10, 20, 30};
  int64_t shape[] = {3};
  DLTensor ta{a.data(), {kDLCPU, 0}, 1, TR_INT32, shape, nullptr, 0}, tb{b.data(), {kDLCPU, 0}, 1, TR_INT32, shape, nullptr, 0};
  const DLTensor *in[] = {&ta, &tb};
  Outputs out;
  tr_test::ok(tr_op_call(add, in, 2, out.items, 1));
  const int32_t *c = static_cast<const int32_t *>(out.items[0]->dl_tensor.data);
  CHECK((c[0] == -29 && c[1] == -58 && c[2] == -87));
  CHECK((builder.asked == 1 && builder.refused == 0));
  CHECK(tr_op_memo_count(add) == 1);
  tr_op_destroy(&add);
}

TEST_CASE("builder: Softmax with a dtype param the kernel does not write is refused at build") {
  WatchedCpu cpu;
  HostTensor x = random({3, 5});
  const DLTensor *in[] = {&x.t};
  for (tr_dtype dtype : {TR_INT32, TR_FLOAT8_E4M3}) {
    watched::Builder &builder = watched::of("SoftmaxFwdOp");
    builder.asked = builder.refused = 0;
    tr_op *sm = cpu.op("SoftmaxFwdOp", {{"dtype", tr_value_dtype(dtype)}});
    char name[TR_DTYPE_FORMAT_MAX];
    tr_dtype_format(dtype, name, sizeof(name));
    for (int call = 1; call <= 2; call++) {
      Outputs out;
      CHECK(tr_test::error_of(tr_op_call(sm, in, 1, out.items, 1)) ==
            std::string("ValueError: cpu SoftmaxFwdOp: param 'dtype' is ") + name +
                "; the cpu target serves float16 | bfloat16 | float32 | float64, or None (x's dtype)");
      CHECK(builder.asked == call);
      CHECK(builder.refused == call);
      CHECK(tr_op_memo_count(sm) == 0);
    }
    tr_op_destroy(&sm);
  }
  // float64, which the kernel writes, is served.
  tr_op *sm = cpu.op("SoftmaxFwdOp", {{"dtype", tr_value_dtype(TR_FLOAT64)}});
  Outputs out;
  tr_test::ok(tr_op_call(sm, in, 1, out.items, 1));
  CHECK(tr_op_memo_count(sm) == 1);
  const double *y = static_cast<const double *>(out.items[0]->dl_tensor.data);
  double sum = 0;
  for (int i = 0; i < 5; i++) sum += y[i];
  CHECK(sum == Approx(1.0).epsilon(1e-12));
  tr_op_destroy(&sm);
}

// One input of a hand-made build request: its dtype and shape, or absent.
struct In {
  tr_dtype dtype;
  std::vector<int64_t> shape;
  bool absent = false;
};

// Asks the watched builder of `op` directly, with a request the runtime never sends (the
// manifest's validation refuses such calls first): the builder must refuse it on its own.
// Returns the refusal's text, or "built".
static std::string build_directly(const char *op, std::vector<In> inputs,
                                  std::vector<tr_named_value> params) {
  tr_device device;
  tr_test::ok(tr_device_make("cpu", 0, &device));
  std::vector<tr_tensor_spec> specs(inputs.size());
  std::vector<const tr_tensor_spec *> ptrs(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); i++) {
    if (inputs[i].absent) continue;
    tr_test::ok(tr_tensor_spec_make(&device, inputs[i].dtype, (int32_t)inputs[i].shape.size(),
                                    inputs[i].shape.data(), &specs[i]));
    ptrs[i] = &specs[i];
  }
  tr_build_request req = {op, "cpu", &device, ptrs.data(), ptrs.size(), params.data(), params.size()};
  watched::Builder &builder = watched::of(op);
  tr_kernel kernel{};
  kernel.struct_size = sizeof(kernel);
  tr_status *status = builder.build(builder.ctx, &req, &kernel);
  for (auto &p : params) tr_value_clear(&p.value);
  if (status == nullptr) {
    if (kernel.release != nullptr) kernel.release(kernel.self);
    return "built";
  }
  return tr_test::error_of(status);
}

TEST_CASE("builder: it refuses on its own what the kernels refuse and the manifest already does") {
  WatchedCpu cpu;  // loads the library; the requests below go to its builders directly
  const tr_dtype f32 = TR_FLOAT32;
  CHECK(build_directly("RMSNormFwdOp", {{TR_FLOAT64, {2, 8}}, {f32, {8}, true}},
                       {{"normalized_shape", list({8})}}) ==
        "ValueError: cpu RMSNormFwdOp: input 'x' dtype is float64; the cpu target serves "
        "float16 | bfloat16 | float32");
  CHECK(build_directly("GQADecodeFwdOp",
                       {{TR_FLOAT32, {1, 4, 8}}, {TR_FLOAT32, {1, 6, 2, 8}}, {TR_FLOAT32, {1, 6, 2, 8}}, {TR_INT32, {1}}},
                       {{"heads", tr_value_int(4)}, {"heads_kv", tr_value_int(2)}, {"dim", tr_value_int(8)}}) ==
        "ValueError: cpu GQADecodeFwdOp: input 'q' dtype is float32; the cpu target serves float16 | bfloat16");
  CHECK(build_directly("GroupNormFwdOp", {{f32, {2, 4, 3}}, {f32, {4}, true}, {f32, {4}, true}},
                       {{"num_groups", tr_value_int(3)}}) ==
        "ValueError: cpu GroupNormFwdOp: param 'num_groups' is 3; the cpu target needs num_groups > 0 "
        "dividing C = 4 (input 'x' dim 1)");
  CHECK(build_directly("GroupNormFwdOp", {{f32, {2, 4, 3}}, {f32, {4}, true}, {f32, {4}, true}},
                       {{"num_groups", tr_value_int(0)}}) ==
        "ValueError: cpu GroupNormFwdOp: param 'num_groups' is 0; the cpu target needs num_groups > 0 "
        "dividing C = 4 (input 'x' dim 1)");
  std::vector<In> bn_absent = {{f32, {1, 4}}, {f32, {4}, true}, {f32, {4}, true}, {f32, {4}, true}, {f32, {4}, true}};
  CHECK(build_directly("BatchNormFwdOp", bn_absent, {{"training", tr_value_bool(true)}}) ==
        "ValueError: cpu BatchNormFwdOp: input 'x' has N * prod(S) = 1 values per channel; "
        "training=True needs more than 1");
  CHECK(build_directly("BatchNormFwdOp", bn_absent, {{"training", tr_value_bool(false)}}) ==
        "ValueError: cpu BatchNormFwdOp: input 'running_mean' is absent; training=False needs "
        "running_mean and running_var");
  CHECK(build_directly("BatchNormFwdOp", {{f32, {2, 4}}, {f32, {4}}, {f32, {4}, true}, {f32, {4}, true}, {f32, {4}, true}},
                       {{"training", tr_value_bool(false)}}) ==
        "ValueError: cpu BatchNormFwdOp: input 'running_var' is absent; training=False needs "
        "running_mean and running_var");
  CHECK(build_directly("SoftmaxFwdOp", {{f32, {3, 5}}}, {{"dim", tr_value_int(2)}, {"dtype", tr_value_none()}}) ==
        "ValueError: cpu SoftmaxFwdOp: param 'dim' is 2; input 'x' has rank 2, so dim must be in [-2, 2)");
  CHECK(build_directly("SoftmaxFwdOp", {{f32, {3, 5}}}, {{"dim", tr_value_int(-3)}, {"dtype", tr_value_none()}}) ==
        "ValueError: cpu SoftmaxFwdOp: param 'dim' is -3; input 'x' has rank 2, so dim must be in [-2, 2)");
  CHECK(build_directly("RoPEFwdOp", {{TR_INT64, {3}}, {f32, {3, 2, 5}}, {f32, {7, 5}}},
                       {{"is_neox", tr_value_bool(true)}}) ==
        "ValueError: cpu RoPEFwdOp: input 'x' head dim D is 5; the cpu target needs it even");
  CHECK(build_directly("RoPEFwdOp", {{f32, {3}}, {f32, {3, 2, 4}}, {f32, {7, 4}}},
                       {{"is_neox", tr_value_bool(true)}}) ==
        "ValueError: cpu RoPEFwdOp: input 'positions' dtype is float32; the cpu target serves int32 | int64");
  std::vector<tr_named_value> gqa = {{"heads", tr_value_int(4)}, {"heads_kv", tr_value_int(3)}, {"dim", tr_value_int(8)}};
  std::vector<In> bf16_in = {{TR_BFLOAT16, {1, 4, 8}}, {TR_BFLOAT16, {1, 6, 3, 8}}, {TR_BFLOAT16, {1, 6, 3, 8}}, {TR_INT32, {1}}};
  CHECK(build_directly("GQADecodeFwdOp", bf16_in, gqa) ==
        "ValueError: cpu GQADecodeFwdOp: param 'heads_kv' is 3; the cpu target needs heads_kv > 0 "
        "dividing heads = 4");
  bf16_in[3].dtype = TR_INT64;
  CHECK(build_directly("GQADecodeFwdOp", bf16_in,
                       {{"heads", tr_value_int(4)}, {"heads_kv", tr_value_int(2)}, {"dim", tr_value_int(8)}}) ==
        "ValueError: cpu GQADecodeFwdOp: input 'seqlens' dtype is int64; the cpu target serves int32");
  // A rank the builder would index past: refused, not read out of bounds.
  CHECK(build_directly("GroupNormFwdOp", {{f32, {4}}, {f32, {4}, true}, {f32, {4}, true}},
                       {{"num_groups", tr_value_int(2)}}) ==
        "ValueError: cpu GroupNormFwdOp: input 'x' has rank 1; the cpu target needs [N, C, ...]");
  CHECK(build_directly("BatchNormFwdOp", {{f32, {4}}, {f32, {4}}, {f32, {4}}, {f32, {4}, true}, {f32, {4}, true}},
                       {{"training", tr_value_bool(true)}}) ==
        "ValueError: cpu BatchNormFwdOp: input 'x' has rank 1; the cpu target needs [N, C, ...]");
  CHECK(build_directly("RoPEFwdOp", {{TR_INT64, {}}, {f32, {}}, {f32, {7, 4}}}, {{"is_neox", tr_value_bool(true)}}) ==
        "ValueError: cpu RoPEFwdOp: input 'x' is a scalar; the cpu target needs [..., H, D]");
  // A request the kernels serve is built.
  CHECK(build_directly("GroupNormFwdOp", {{f32, {2, 4, 3}}, {f32, {4}, true}, {f32, {4}, true}},
                       {{"num_groups", tr_value_int(2)}}) == "built");
}

// The threads of this process, where the system lists them (Linux: /proc/self/task); -1 elsewhere.
static long thread_count() {
  char **names = nullptr;
  size_t count = 0;
  tr_status *status = tr_plat_list_dir("/proc/self/task", &names, &count);
  if (status != nullptr) {
    tr_status_destroy(&status);
    return -1;
  }
  tr_plat_free_names(&names, count);
  return static_cast<long>(count);
}

TEST_CASE("the backend's thread pool starts on the first large op and stops when it is unloaded") {
  const long before = thread_count();
  if (before < 0) {
    WARN("no /proc/self/task here: the threads cannot be counted");
    return;
  }
  // A copy of the library in a directory of its own: another test keeps the shipped one loaded
  // for the whole process, and this one must be the only user of what it loads.
  tr_test::TempDir dir("tilerun-cpu-pool");
  char *bytes = nullptr;
  size_t size = 0;
  tr_test::ok(tr_plat_read_file("backends/cpu/libtilerun_cpu.so", &bytes, &size));
  dir.write("libtilerun_cpu.so", std::string(bytes, size));
  std::free(bytes);
  dir.write("cpu.yaml", "name: cpu\nlibrary: libtilerun_cpu.so\n");
  for (int load = 0; load < 3; load++) {  // loaded, used, unloaded again each time
    INFO("load " << load);
    {
      const char *dirs[] = {dir.path};
      tr_runtime_options o{};
      o.manifest_dir = "manifest/spec";
      o.backend_dirs = dirs;
      o.n_backend_dirs = 1;
      tr_runtime *rt = nullptr;
      tr_test::ok(tr_runtime_new(&o, &rt));
      Cpu cpu(rt);
      HostTensor a = random({512, 1024}), b = random({512, 1024});
      tr_op *add = cpu.op("AddFwdOp");
      const DLTensor *in[] = {&a.t, &b.t};
      for (int call = 0; call < 20; call++) {
        Outputs out;
        tr_test::ok(tr_op_call(add, in, 2, out.items, 1));
        REQUIRE(out.f(0)[12345] == a.data[12345] + b.data[12345]);
      }
      REQUIRE(std::string(tr_op_target(add)) == "cpu");
      if (tr_cpu_default_threads() > 1) CHECK(thread_count() > before);  // its workers
      tr_op_destroy(&add);
    }
    CHECK(thread_count() == before);  // the runtime closed the plugin: its workers were joined
  }
}
