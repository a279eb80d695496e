// inspect_gpu_test.cc (needs a GPU): tilerun/inspect.h on a real device (key_for with the
// device's facts derived agrees with them stated; kernel_for builds an in-tree kernel that runs),
// and the in-tree kernels' edge values on every softmax implementation and the norms, as torch:
// a row all -inf is NaN (the warp and block kernels gave 0), a NaN met while a row's running max
// is -inf makes the row NaN (the looped and split kernels dropped it), an inf in a LayerNorm row
// makes it NaN (the variance clamp turned NaN into 0).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cuda_testing.h"
#include "tilerun/inspect.h"
#include "tilerun/tilerun.h"

using tr_test::CudaTensor;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

void ok(tr_status *s) {
  if (s == nullptr) return;
  char buf[2048];
  tr_status_format(s, buf, sizeof(buf));
  tr_status_destroy(&s);
  FAIL(buf);
}

struct Runtime {
  tr_runtime *rt = nullptr;
  Runtime() {
    static const char *const kNone[] = {""};
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    o.backend_dirs = kNone;  // no backends: cuda calls settle the in-tree kernels
    o.n_backend_dirs = 0;
    ok(tr_runtime_new(&o, &rt));
  }
  ~Runtime() { tr_runtime_destroy(&rt); }
};

// Calls a one-output op on cuda float32 inputs and returns y's values.
std::vector<float> call(tr_op *op, std::vector<const DLTensor *> in) {
  DLManagedTensor *y = nullptr;
  ok(tr_op_call(op, in.data(), in.size(), &y, 1));
  REQUIRE(y != nullptr);
  std::vector<float> out = tr_test::host(y->dl_tensor);
  y->deleter(y);
  return out;
}

// torch's softmax of one row in double.
std::vector<double> softmax_ref(const std::vector<float> &x) {
  double m = -INFINITY;
  for (float v : x) m = (v > m || std::isnan(v)) ? v : m;
  double s = 0;
  for (float v : x) s += std::exp((double)v - m);
  std::vector<double> y;
  for (float v : x) y.push_back(std::exp((double)v - m) / s);
  return y;
}

// Row r of a [rows, n] softmax input: r % 4 == 0 all -inf; 1 the first half NaN; 2 the last
// element NaN, the rest -inf; 3 plain.
float softmax_value(int64_t r, int64_t i, int64_t n) {
  switch (r % 4) {
    case 0: return -kInf;
    case 1: return i < n / 2 ? kNan : (float)std::sin((double)i);
    case 2: return i == n - 1 ? kNan : -kInf;
    default: return (float)(3 * std::sin(0.37 * (double)(i + r)));
  }
}

void check_rows(const std::vector<float> &x, const std::vector<float> &y, int64_t rows, int64_t n,
                const std::string &what) {
  for (int64_t r = 0; r < rows; r++) {
    std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
    std::vector<double> want = softmax_ref(row);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
      double g = y[(size_t)(r * n + i)], w = want[(size_t)i];
      bool good = std::isnan(w) ? std::isnan(g) : std::fabs(g - w) <= 1e-5 + 1e-5 * std::fabs(w);
      if (!good && bad++ == 0) first = i;
    }
    INFO(what << " row " << r << ": " << bad << " elements wrong, first at " << first << ": got "
              << (first >= 0 ? y[(size_t)(r * n + first)] : 0.f));
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("key_for with the device's facts derived agrees with them stated; kernel_for builds and runs") {
  Runtime r;
  tr_op *op = nullptr;
  ok(tr_op_new(r.rt, "SoftmaxFwdOp", nullptr, 0, nullptr, &op));
  tr_device gpu;
  ok(tr_device_parse("cuda:0", &gpu));
  tr_device_facts f;
  ok(tr_device_facts_of(r.rt, &gpu, &f));
  for (int64_t n : {8, 4096, 40000}) {
    int64_t shape[] = {4, n};
    tr_tensor_spec x;
    ok(tr_tensor_spec_make(&gpu, TR_FLOAT32, 2, shape, &x));
    const tr_tensor_spec *in[] = {&x};
    tr_op_selection derived, stated;
    ok(tr_op_key_for(op, in, 1, 0, nullptr, &derived));
    ok(tr_op_key_for(op, in, 1, TR_FACT_ARCH | TR_FACT_CALIBRATION | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET, &f,
                     &stated));
    CHECK(std::string(derived.key) == stated.key);
  }
  int64_t shape[] = {4, 8};
  tr_tensor_spec xs;
  ok(tr_tensor_spec_make(&gpu, TR_FLOAT32, 2, shape, &xs));
  const tr_tensor_spec *in[] = {&xs};
  tr_op_selection sel;
  ok(tr_op_kernel_for(op, in, 1, 0, nullptr, &sel));
  CHECK(std::string(sel.key) == "softmax_warp");
  REQUIRE(sel.kernel != nullptr);
  std::vector<float> xv(32);
  for (int64_t i = 0; i < 32; i++) xv[(size_t)i] = softmax_value(i / 8, i % 8, 8);
  CudaTensor x({4, 8}, xv), y({4, 8}, std::vector<float>(32, 12345.f));
  DLTensor *args[] = {&x.t}, *outs[] = {&y.t};
  ok(sel.kernel->call(sel.kernel->self, args, 1, outs, 1));
  check_rows(xv, tr_test::host(y.t), 4, 8, "kernel_for's softmax_warp");
  tr_op_destroy(&op);
}

TEST_CASE("softmax edge rows on every implementation: all -inf and NaN rows are NaN, as torch") {
  Runtime r;
  tr_op *op = nullptr;
  ok(tr_op_new(r.rt, "SoftmaxFwdOp", nullptr, 0, nullptr, &op));
  // warp, block, block split (sm_90: fewer rows than SMs), looped split, looped
  for (auto rn : std::vector<std::pair<int64_t, int64_t>>{{8, 8}, {8, 4096}, {8, 20000}, {8, 40000}, {200, 40000}}) {
    const int64_t rows = rn.first, n = rn.second;
    std::vector<float> xv((size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) xv[(size_t)i] = softmax_value(i / n, i % n, n);
    CudaTensor x({rows, n}, xv);
    check_rows(xv, call(op, {&x.t}), rows, n, "rows=" + std::to_string(rows) + " n=" + std::to_string(n));
  }
  tr_op_destroy(&op);
  // strided: along dim 0, the columns carry the patterns
  tr_named_value dim0 = {"dim", tr_value_int(0)};
  ok(tr_op_new(r.rt, "SoftmaxFwdOp", &dim0, 1, nullptr, &op));
  const int64_t n = 64, cols = 8;
  std::vector<float> xv((size_t)(n * cols)), colmajor((size_t)(n * cols));
  for (int64_t c = 0; c < cols; c++) {
    for (int64_t i = 0; i < n; i++) {
      xv[(size_t)(i * cols + c)] = softmax_value(c, i, n);
      colmajor[(size_t)(c * n + i)] = softmax_value(c, i, n);
    }
  }
  CudaTensor x({n, cols}, xv);
  std::vector<float> y = call(op, {&x.t}), ycol((size_t)(n * cols));
  for (int64_t c = 0; c < cols; c++) {
    for (int64_t i = 0; i < n; i++) ycol[(size_t)(c * n + i)] = y[(size_t)(i * cols + c)];
  }
  check_rows(colmajor, ycol, cols, n, "strided");
  tr_op_destroy(&op);
}

TEST_CASE("LayerNorm and RMSNorm rows holding an inf or a NaN, as torch") {
  Runtime r;
  for (int64_t n : {8, 4096, 65536}) {
    tr_value shape;
    ok(tr_value_int_list(&n, 1, &shape));
    tr_named_value p[] = {{"normalized_shape", shape}, {"eps", tr_value_float(1e-5)}};
    tr_op *ln = nullptr, *rms = nullptr;
    ok(tr_op_new(r.rt, "LayerNormFwdOp", p, 2, nullptr, &ln));
    ok(tr_op_new(r.rt, "RMSNormFwdOp", p, 2, nullptr, &rms));
    tr_value_clear(&shape);
    const int64_t rows = 3;
    std::vector<float> xv((size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) xv[(size_t)i] = (float)std::sin(0.1 * (double)i);
    xv[(size_t)(n / 2)] = kInf;         // row 0: an inf in the middle
    xv[(size_t)(n + n / 3)] = kNan;     // row 1: a NaN
    CudaTensor x({rows, n}, xv);
    std::vector<float> y = call(ln, {&x.t});
    for (int64_t i = 0; i < 2 * n; i++) {
      INFO("LayerNorm n=" << n << " element " << i << " = " << y[(size_t)i]);
      REQUIRE(std::isnan(y[(size_t)i]));  // before: -inf for row 0's finite elements
    }
    CHECK(std::isfinite(y[(size_t)(2 * n)]));
    std::vector<float> z = call(rms, {&x.t});
    for (int64_t i = 0; i < n; i++) {
      INFO("RMSNorm n=" << n << " element " << i << " = " << z[(size_t)i]);
      if (i == n / 2) CHECK(std::isnan(z[(size_t)i]));
      else CHECK(z[(size_t)i] == 0.f);  // rstd = 1/sqrt(inf) = 0
    }
    for (int64_t i = n; i < 2 * n; i++) REQUIRE(std::isnan(z[(size_t)i]));
    tr_op_destroy(&ln);
    tr_op_destroy(&rms);
  }
}
