// runtime_testing.h: helpers for tests that call ops: host tensors on any device type, a
// runtime over the shipped manifest, captured warnings.
#ifndef TILERUN_RUNTIME_RUNTIME_TESTING_H_
#define TILERUN_RUNTIME_RUNTIME_TESTING_H_

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/test_support.h"
#include "tilerun/tilerun.h"

namespace tr_test {

// A float32 tensor in host memory, labelled with any DLPack device (kDLExtDev for "acme").
struct HostTensor {
  std::vector<float> data;
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  HostTensor(std::vector<int64_t> s, DLDevice device = {kDLCPU, 0}, float start = 0.5f)
      : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.resize((size_t)n);
    for (int64_t i = 0; i < n; i++) data[(size_t)i] = start + 0.25f * (float)(i % 13) - 0.1f * (float)(i % 7);
    t.data = data.data();
    t.device = device;
    t.ndim = (int32_t)shape.size();
    t.dtype = TR_FLOAT32;
    t.shape = shape.data();
  }
  // Views the data with other strides (and shape), e.g. a transpose.
  void view(std::vector<int64_t> s, std::vector<int64_t> st) {
    shape = std::move(s);
    strides = std::move(st);
    t.shape = shape.data();
    t.ndim = (int32_t)shape.size();
    t.strides = strides.data();
  }
};

struct Warnings {
  std::vector<std::string> lines;
  static void sink(void *ctx, const char *line) { static_cast<Warnings *>(ctx)->lines.push_back(line); }
};

// Owns a call's outputs.
struct Outputs {
  DLManagedTensor *items[8] = {nullptr};
  ~Outputs() { reset(); }
  void reset() {
    for (auto &m : items) {
      if (m) m->deleter(m);
      m = nullptr;
    }
  }
  const float *f(int i) const { return static_cast<const float *>(items[i]->dl_tensor.data); }
};

// A runtime over the manifest in `manifest_dir` whose only backends are the built-in ones given
// (no plugin folder is read), its warnings into `warnings` where given. The runtime copies the names and functions, so they may be
// temporaries.
inline tr_runtime *runtime_with_builtins(std::vector<const char *> names, std::vector<tr_backend_init_fn> inits,
                                         const char *manifest_dir = "manifest/spec", Warnings *warnings = nullptr) {
  const char *no_dirs[] = {"/nonexistent"};
  tr_runtime_options o{};
  if (warnings != nullptr) {
    o.warn = Warnings::sink;
    o.warn_ctx = warnings;
  }
  o.manifest_dir = manifest_dir;
  o.backend_dirs = no_dirs;
  o.n_backend_dirs = 1;
  o.builtin_names = names.data();
  o.builtin_inits = inits.data();
  o.n_builtins = names.size();
  tr_runtime *rt = nullptr;
  ok(tr_runtime_new(&o, &rt));
  return rt;
}

// A runtime over the shipped manifest whose only backend is the built-in `init`.
inline tr_runtime *runtime_with_builtin(const char *name, tr_backend_init_fn init) {
  return runtime_with_builtins({name}, {init});
}

// A runtime over the shipped manifest with no backend at all (cuda calls go to the in-tree
// kernels), its components placed by `pipeline_file` (NULL: $TILERUN_PIPELINE; "": inline).
inline tr_runtime *runtime_without_backends(const char *pipeline_file = nullptr) {
  const char *no_dirs[] = {"/nonexistent"};
  tr_runtime_options o{};
  o.manifest_dir = "manifest/spec";
  o.backend_dirs = no_dirs;
  o.n_backend_dirs = 1;
  o.pipeline_file = pipeline_file;
  tr_runtime *rt = nullptr;
  ok(tr_runtime_new(&o, &rt));
  return rt;
}

// A runtime over the shipped manifest that looks for backends in `dirs` only, its warnings
// captured in `warnings`.
inline tr_runtime *runtime_with_dirs(std::vector<const char *> dirs, Warnings *warnings) {
  tr_runtime_options o{};
  o.manifest_dir = "manifest/spec";
  o.backend_dirs = dirs.data();
  o.n_backend_dirs = dirs.size();
  o.warn = Warnings::sink;
  o.warn_ctx = warnings;
  tr_runtime *rt = nullptr;
  ok(tr_runtime_new(&o, &rt));
  return rt;
}

// n values uniform in [-2, 2), the same for the same seed.
inline std::vector<float> random_values(size_t n, unsigned seed) {
  std::vector<float> v(n);
  srand(seed);
  for (auto &x : v) x = (float)rand() / RAND_MAX * 4.f - 2.f;
  return v;
}

// float64 RMSNorm over rows of `row` (eps 1e-6), weight `w`.
inline std::vector<double> rms_ref(const std::vector<float> &x, const std::vector<float> &w, size_t row) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / row; r++) {
    double ss = 0;
    for (size_t i = 0; i < row; i++) ss += (double)x[r * row + i] * x[r * row + i];
    double rs = 1.0 / std::sqrt(ss / row + 1e-6);
    for (size_t i = 0; i < row; i++) y[r * row + i] = x[r * row + i] * rs * w[i];
  }
  return y;
}

// How many of `want` differ from got[offset...] by more than tol * (1 + |want|).
inline size_t mismatches(const std::vector<float> &got, const std::vector<double> &want, size_t offset = 0,
                         double tol = 1e-5) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); i++) {
    if (!(std::fabs(got[offset + i] - want[i]) <= tol * (1 + std::fabs(want[i])))) bad++;
  }
  return bad;
}

// An RMSNormFwdOp instance over rows of `row`, eps 1e-6.
inline tr_op *rms_op(tr_runtime *rt, int64_t row) {
  tr_value shape;
  ok(tr_value_int_list(&row, 1, &shape));
  tr_named_value p[2] = {{"normalized_shape", shape}, {"eps", tr_value_float(1e-6)}};
  tr_op *op = nullptr;
  ok(tr_op_new(rt, "RMSNormFwdOp", p, 2, nullptr, &op));
  tr_value_clear(&shape);
  return op;
}

}  // namespace tr_test

#endif  // TILERUN_RUNTIME_RUNTIME_TESTING_H_
