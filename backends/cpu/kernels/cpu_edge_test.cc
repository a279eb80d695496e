// cpu_edge_test.cc: the CPU kernels on the edge values of the manifest's reference semantics
// (torch's): rows all -inf, +-inf and NaN inputs, empty rows and empty tensors, for softmax
// (rows, columns and float64 paths), RMSNorm, LayerNorm and add, in float32 and the 16-bit
// dtypes, on one thread and several.
#include <catch2/catch.hpp>

#include "core/test_support.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/kernels/cpu_kernels.h"

namespace {

using tr_test::ok;

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

// Buffers of one dtype: float32 as is, float16 / bfloat16 converted on the way in and out.
struct Buf {
  tr_dtype dtype;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<double> f64;
  Buf(tr_dtype d, const std::vector<float> &v) : dtype(d), f32(v) {
    if (d.bits == 16) {
      for (float x : v) half.push_back(d.code == kDLBfloat ? tr_cpu_f32_to_bf16(x) : tr_cpu_f32_to_f16(x));
    }
    if (d.bits == 64) f64.assign(v.begin(), v.end());
  }
  void *data() {
    return dtype.bits == 16 ? (void *)half.data() : dtype.bits == 64 ? (void *)f64.data() : (void *)f32.data();
  }
  std::vector<double> values() const {
    std::vector<double> out;
    if (dtype.bits == 16) {
      for (uint16_t h : half) out.push_back(dtype.code == kDLBfloat ? tr_cpu_bf16_to_f32(h) : tr_cpu_f16_to_f32(h));
    } else if (dtype.bits == 64) {
      out = f64;
    } else {
      out.assign(f32.begin(), f32.end());
    }
    return out;
  }
};

// NaN where `want` is NaN, an infinity where it is one, else within tol (float32: 1e-6; 16-bit:
// 1e-2 relative and absolute).
void check_like(const std::vector<double> &got, const std::vector<double> &want, double tol, const std::string &what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO(what << " element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::fabs(got[i] - want[i]) <= tol + tol * std::fabs(want[i]));
    }
  }
}

const tr_dtype kDtypes[] = {TR_FLOAT32, TR_FLOAT16, TR_BFLOAT16};
double tol_of(tr_dtype d) { return d.bits == 16 ? 1e-2 : 1e-6; }
std::string name_of(tr_dtype d) { return d.bits == 32 ? "float32" : d.code == kDLBfloat ? "bfloat16" : "float16"; }

// torch's softmax of one row in double: max (NaN if any), exp(x - max) / sum.
std::vector<double> softmax_ref(const std::vector<double> &x) {
  double m = -INFINITY;
  for (double v : x) m = (v > m || std::isnan(v)) ? v : m;
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> y;
  for (double v : x) y.push_back(std::exp(v - m) / s);
  return y;
}

// The edge rows softmax is checked on (each of length 6).
std::vector<std::vector<float>> softmax_rows() {
  return {
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf},  // all -inf: NaN
      {-kInf, 0.f, -kInf, 1.f, -kInf, 2.f},        // some -inf: 0 there
      {1.f, 2.f, kNan, 3.f, 4.f, 5.f},             // a NaN: all NaN
      {kNan, -kInf, -kInf, -kInf, -kInf, -kInf},   // a NaN among -inf: all NaN
      {1.f, kInf, 2.f, 3.f, 4.f, 5.f},             // +inf: inf - inf, all NaN
      {kInf, kInf, kInf, kInf, kInf, kInf},        // all +inf: NaN
      {-kInf, kInf, 0.f, 0.f, 0.f, 0.f},           // both infinities: NaN
      {1.f, 2.f, 3.f, 4.f, 5.f, 6.f},              // plain
  };
}

}  // namespace

TEST_CASE("softmax edge rows are torch's: all -inf, NaN, +inf rows NaN; -inf elements 0") {
  const auto rows = softmax_rows();
  const int64_t R = (int64_t)rows.size(), N = 6;
  for (tr_dtype dt : kDtypes) {
    for (int threads : {1, 4}) {
      std::vector<float> flat;
      for (const auto &r : rows) flat.insert(flat.end(), r.begin(), r.end());
      Buf x(dt, flat);
      // along the last axis (rows path), into the same dtype and into float32 and float64
      for (tr_dtype out_dt : {dt, TR_FLOAT32, TR_FLOAT64}) {
        Buf y(out_dt, std::vector<float>(flat.size(), 7.f));
        ok(tr_cpu_softmax(x.data(), y.data(), R, N, 1, dt, out_dt, threads));
        std::vector<double> xv = x.values(), got = y.values();
        for (int64_t r = 0; r < R; r++) {
          std::vector<double> row(xv.begin() + r * N, xv.begin() + (r + 1) * N);
          std::vector<double> g(got.begin() + r * N, got.begin() + (r + 1) * N);
          check_like(g, softmax_ref(row), out_dt.bits == 16 ? 1e-2 : 1e-6,
                     name_of(dt) + " row " + std::to_string(r) + " threads " + std::to_string(threads));
        }
      }
      // along the first axis (columns path): x transposed, [N, R] with the softmax over N
      std::vector<float> t((size_t)(N * R));
      for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < N; c++) t[(size_t)(c * R + r)] = rows[(size_t)r][(size_t)c];
      }
      Buf xt(dt, t), yt(dt, std::vector<float>(t.size(), 7.f));
      ok(tr_cpu_softmax(xt.data(), yt.data(), 1, N, R, dt, dt, threads));
      std::vector<double> xv = xt.values(), got = yt.values();
      for (int64_t r = 0; r < R; r++) {
        std::vector<double> col, g;
        for (int64_t c = 0; c < N; c++) {
          col.push_back(xv[(size_t)(c * R + r)]);
          g.push_back(got[(size_t)(c * R + r)]);
        }
        check_like(g, softmax_ref(col), tol_of(dt), name_of(dt) + " column " + std::to_string(r));
      }
    }
  }
}

TEST_CASE("softmax of empty rows and empty tensors writes nothing and succeeds") {
  float y[4] = {7, 7, 7, 7};
  const float x[4] = {0, 0, 0, 0};
  ok(tr_cpu_softmax(x, y, 4, 0, 1, TR_FLOAT32, TR_FLOAT32, 2));  // [4, 0] along the last axis
  ok(tr_cpu_softmax(x, y, 0, 4, 1, TR_FLOAT32, TR_FLOAT32, 2));  // [0, 4]
  ok(tr_cpu_softmax(x, y, 2, 0, 2, TR_FLOAT32, TR_FLOAT64, 2));  // [2, 0, 2], float64 out
  for (float v : y) CHECK(v == 7.f);
}

TEST_CASE("RMSNorm edge rows: an inf is NaN there and 0 elsewhere, a NaN makes the row NaN") {
  const std::vector<std::vector<float>> rows = {
      {1.f, kInf, 2.f, 3.f},   // rstd = 1/sqrt(inf) = 0: 0, NaN (inf * 0), 0, 0
      {-kInf, 1.f, 1.f, 1.f},  // the same with -inf
      {1.f, kNan, 2.f, 3.f},   // NaN
      {0.f, 0.f, 0.f, 0.f},    // 0 / sqrt(eps) = 0
      {1.f, 2.f, 3.f, 4.f},
  };
  const std::vector<std::vector<double>> want = {
      {0, NAN, 0, 0}, {NAN, 0, 0, 0}, {NAN, NAN, NAN, NAN}, {0, 0, 0, 0}, {}};
  for (tr_dtype dt : kDtypes) {
    std::vector<float> flat;
    for (const auto &r : rows) flat.insert(flat.end(), r.begin(), r.end());
    Buf x(dt, flat), w(dt, {1.f, 2.f, -1.f, 0.5f}), y(dt, std::vector<float>(flat.size(), 7.f));
    ok(tr_cpu_rms_norm(x.data(), w.data(), y.data(), (int64_t)rows.size(), 4, dt, 1e-6, 2));
    std::vector<double> got = y.values();
    for (size_t r = 0; r + 1 < rows.size(); r++) {
      std::vector<double> g(got.begin() + (long)(r * 4), got.begin() + (long)(r * 4 + 4));
      check_like(g, want[r], tol_of(dt), name_of(dt) + " rms row " + std::to_string(r));
    }
    double ms = (1 + 4 + 9 + 16) / 4.0, rstd = 1 / std::sqrt(ms + 1e-6);
    std::vector<double> g(got.end() - 4, got.end());
    check_like(g, {1 * rstd, 2 * rstd * 2, -3 * rstd, 4 * rstd * 0.5}, tol_of(dt), name_of(dt) + " rms plain row");
  }
}

TEST_CASE("LayerNorm edge rows: an inf or a NaN makes the row NaN; a constant row is the bias") {
  const std::vector<std::vector<float>> rows = {
      {1.f, kInf, 2.f, 3.f},   // mean inf, variance NaN (inf - inf): all NaN, as torch
      {kInf, 1.f, 2.f, 3.f},   // an inf first
      {-kInf, 1.f, 2.f, 3.f},  // -inf
      {1.f, kNan, 2.f, 3.f},   // NaN
      {5.f, 5.f, 5.f, 5.f},    // variance 0: (x - mean) * rstd = 0, y = bias
  };
  for (tr_dtype dt : kDtypes) {
    std::vector<float> flat;
    for (const auto &r : rows) flat.insert(flat.end(), r.begin(), r.end());
    Buf x(dt, flat), w(dt, {1.f, 2.f, -1.f, 0.5f}), b(dt, {0.25f, -1.f, 0.f, 3.f});
    Buf y(dt, std::vector<float>(flat.size(), 7.f));
    ok(tr_cpu_layer_norm(x.data(), w.data(), b.data(), y.data(), (int64_t)rows.size(), 4, dt, 1e-5, 2));
    std::vector<double> got = y.values();
    for (size_t r = 0; r + 1 < rows.size(); r++) {
      std::vector<double> g(got.begin() + (long)(r * 4), got.begin() + (long)(r * 4 + 4));
      check_like(g, {NAN, NAN, NAN, NAN}, tol_of(dt), name_of(dt) + " layer row " + std::to_string(r));
    }
    std::vector<double> g(got.end() - 4, got.end());
    check_like(g, {0.25, -1, 0, 3}, tol_of(dt), name_of(dt) + " layer constant row");
  }
}

TEST_CASE("norms of empty tensors write nothing and succeed") {
  float y[4] = {7, 7, 7, 7};
  const float x[4] = {0, 0, 0, 0};
  ok(tr_cpu_rms_norm(x, nullptr, y, 0, 4, TR_FLOAT32, 1e-6, 2));
  ok(tr_cpu_layer_norm(x, nullptr, nullptr, y, 0, 4, TR_FLOAT32, 1e-5, 2));
  for (float v : y) CHECK(v == 7.f);
}

TEST_CASE("add edge values: inf + -inf is NaN, NaN propagates, infinities add; empty is nothing") {
  const std::vector<float> a = {kInf, kInf, kNan, 1.f, -kInf, 0.f};
  const std::vector<float> b = {-kInf, kInf, 1.f, kNan, 1.f, -0.f};
  for (tr_dtype dt : kDtypes) {
    for (double alpha : {1.0, 0.5}) {
      Buf x(dt, a), z(dt, b), y(dt, std::vector<float>(a.size(), 7.f));
      ok(tr_cpu_add(x.data(), z.data(), y.data(), (int64_t)a.size(), dt, alpha, 2));
      check_like(y.values(), {NAN, INFINITY, NAN, NAN, -INFINITY, 0}, 0, name_of(dt) + " add");
    }
  }
  float y[2] = {7, 7};
  ok(tr_cpu_add(y, y, y, 0, TR_FLOAT32, 1.0, 2));
  CHECK(y[0] == 7.f);
}
