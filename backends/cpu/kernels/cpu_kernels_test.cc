// cpu_kernels_test.cc: every CPU kernel, every dtype it allows, against a float64 reference;
// the 16-bit conversions exhaustively; thread counts that must agree bit for bit; the errors.
#include <catch2/catch.hpp>

#include "backends/cpu/kernels/internal.h"
#include "core/test_support.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/kernels/cpu_kernels.h"

namespace {

using tr_test::error_of;
using tr_test::ok;

tr_dtype make_dtype(uint8_t code, uint8_t bits) {
  tr_dtype d;
  d.code = code;
  d.bits = bits;
  d.lanes = 1;
  return d;
}

enum class Kind { F16, BF16, F32, F64, I32, I64 };

// A dtype as the tests use it, with its tolerance.
struct Dt {
  Kind kind;
  tr_dtype dtype;
  const char *name;
  size_t bytes;
  double rtol;  // relative to |reference| + a per-element scale of the terms that cancel
  double atol;  // absolute: half the spacing of the dtype's smallest subnormals and below
};

// The tolerances, in one place. A result is close when
//   |got - ref| <= rtol * (|ref| + scale) + atol,
// where ref is the float64 reference from the same (exactly representable) inputs and scale is
// the size of the terms that cancel in it (sum |a_k b_k| for a dot product, |x1 cos| + |x2 sin|
// for a rotation, |weighted x| + |bias| for a norm; 0 where nothing cancels).
// float32: 1e-5, float32 arithmetic with a few roundings; float16: 2e-3 (2^-9: two roundings
// to float16, as RMSNorm with a weight does, as torch does); bfloat16: 1.6e-2 (2^-6: two
// roundings to bfloat16); float64: 1e-12. atol covers results in the subnormal range, where a
// rounding is absolute.
const Dt kF16{Kind::F16, make_dtype(kDLFloat, 16), "float16", 2, 2e-3, 0x1p-24};
const Dt kBF16{Kind::BF16, make_dtype(kDLBfloat, 16), "bfloat16", 2, 1.6e-2, 0x1p-126};
const Dt kF32{Kind::F32, make_dtype(kDLFloat, 32), "float32", 4, 1e-5, 0x1p-126};
const Dt kF64{Kind::F64, make_dtype(kDLFloat, 64), "float64", 8, 1e-12, 0x1p-1022};
const Dt kI32{Kind::I32, make_dtype(kDLInt, 32), "int32", 4, 0, 0};
const Dt kI64{Kind::I64, make_dtype(kDLInt, 64), "int64", 8, 0, 0};

const Dt *const kHalvesF32[] = {&kF16, &kBF16, &kF32};

// v rounded to dt (nearest, ties to even) and read back.
double round_to(const Dt &dt, double v) {
  switch (dt.kind) {
    case Kind::F16: return tr_cpu_f16_to_f32(tr_cpu_f32_to_f16(static_cast<float>(v)));
    case Kind::BF16: return tr_cpu_bf16_to_f32(tr_cpu_f32_to_bf16(static_cast<float>(v)));
    case Kind::F32: return static_cast<float>(v);
    default: return v;
  }
}

// A tensor's bytes in some dtype, read and written as doubles.
struct Buf {
  const Dt *dt;
  size_t n;
  std::vector<unsigned char> bytes;

  Buf(const Dt &d, size_t count) : dt(&d), n(count), bytes(count * d.bytes) {}
  void *data() { return bytes.empty() ? nullptr : bytes.data(); }
  const void *data() const { return bytes.empty() ? nullptr : bytes.data(); }

  double get(size_t i) const {
    const unsigned char *p = bytes.data() + i * dt->bytes;
    uint16_t h;
    float f;
    double d;
    int32_t i32;
    int64_t i64;
    switch (dt->kind) {
      case Kind::F16: std::memcpy(&h, p, 2); return tr_cpu_f16_to_f32(h);
      case Kind::BF16: std::memcpy(&h, p, 2); return tr_cpu_bf16_to_f32(h);
      case Kind::F32: std::memcpy(&f, p, 4); return f;
      case Kind::F64: std::memcpy(&d, p, 8); return d;
      case Kind::I32: std::memcpy(&i32, p, 4); return i32;
      case Kind::I64: std::memcpy(&i64, p, 8); return static_cast<double>(i64);
    }
    return 0;
  }

  void set(size_t i, double v) {
    unsigned char *p = bytes.data() + i * dt->bytes;
    uint16_t h;
    float f = static_cast<float>(v);
    switch (dt->kind) {
      case Kind::F16: h = tr_cpu_f32_to_f16(f); std::memcpy(p, &h, 2); break;
      case Kind::BF16: h = tr_cpu_f32_to_bf16(f); std::memcpy(p, &h, 2); break;
      case Kind::F32: std::memcpy(p, &f, 4); break;
      case Kind::F64: std::memcpy(p, &v, 8); break;
      default: FAIL("Buf::set on an integer dtype");
    }
  }

  std::vector<double> values() const {
    std::vector<double> out(n);
    for (size_t i = 0; i < n; i++) out[i] = get(i);
    return out;
  }
};

// The seed of every test's random inputs: $TILERUN_TEST_SEED reproduces a run, else fresh.
uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char *text = std::getenv("TILERUN_TEST_SEED");
    if (text != nullptr && *text != '\0') {
      return static_cast<uint64_t>(std::strtoull(text, nullptr, 10));
    }
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  return seed;
}

#define TR_SEEDED_RNG(rng)                                                             \
  std::mt19937_64 rng(base_seed());                                                    \
  INFO("random inputs from seed " << base_seed() << " (TILERUN_TEST_SEED=" << base_seed() \
                                  << " reproduces them)")

// n uniform values in [lo, hi), stored (rounded) in dt.
Buf random_buf(std::mt19937_64 &rng, const Dt &dt, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Buf b(dt, n);
  for (size_t i = 0; i < n; i++) b.set(i, dist(rng));
  return b;
}

// Checks got against ref elementwise with dt's tolerance; reports the first mismatch.
void expect_close(const Buf &got, const std::vector<double> &ref, const std::vector<double> &scale,
                  const Dt &tol, const std::string &what) {
  REQUIRE(got.n == ref.size());
  size_t bad = 0, first = 0;
  double first_got = 0, first_bound = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    double g = got.get(i), r = ref[i];
    double s = scale.empty() ? 0.0 : scale[i];
    double bound = tol.rtol * (std::fabs(r) + s) + tol.atol;
    bool good = std::isnan(r) ? std::isnan(g) : std::fabs(g - r) <= bound;
    if (!good && bad++ == 0) {
      first = i;
      first_got = g;
      first_bound = bound;
    }
  }
  if (bad != 0) {
    std::ostringstream text;
    text.precision(9);
    text << what << ": " << bad << " of " << ref.size() << " elements off; first at [" << first
         << "]: got " << first_got << ", want " << ref[first] << " (within " << first_bound
         << ", " << tol.name << ")";
    FAIL_CHECK(text.str());
  }
}

std::string describe(std::initializer_list<std::pair<const char *, long long>> items) {
  std::ostringstream text;
  for (const auto &item : items) text << item.first << "=" << item.second << " ";
  return text.str();
}

const int kMultiThreads = 3;  // an odd count, so ranges split unevenly

// ---- Conversions --------------------------------------------------------------------------

// The value of float16 bits, from the format's definition.
double f16_value(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  if (exp == 31) mag = mant == 0 ? INFINITY : NAN;
  return sign ? -mag : mag;
}

TEST_CASE("float16 and bfloat16 read exactly and round-trip every 16-bit pattern") {
  for (uint32_t bits = 0; bits <= 0xffff; bits++) {
    const uint16_t h = static_cast<uint16_t>(bits);
    INFO("pattern 0x" << std::hex << bits);
    float f = tr_cpu_f16_to_f32(h);
    double want = f16_value(h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      uint16_t back = tr_cpu_f32_to_f16(f);
      REQUIRE((back & 0x7c00) == 0x7c00);
      REQUIRE((back & 0x3ff) != 0);            // still a nan
      REQUIRE((back & 0x8000) == (h & 0x8000));  // with its sign
      REQUIRE(back == h);                       // and its payload
    } else {
      REQUIRE(static_cast<double>(f) == want);
      REQUIRE(std::signbit(f) == std::signbit(want));
      REQUIRE(tr_cpu_f32_to_f16(f) == h);
    }

    float b = tr_cpu_bf16_to_f32(h);
    uint32_t fbits;
    std::memcpy(&fbits, &b, 4);
    REQUIRE(fbits == bits << 16);  // bfloat16 is float32's top half
    uint16_t bback = tr_cpu_f32_to_bf16(b);
    if (std::isnan(b)) {
      REQUIRE(std::isnan(tr_cpu_bf16_to_f32(bback)));
      REQUIRE((bback & 0x8000) == (h & 0x8000));
    }
    REQUIRE(bback == h);
  }
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_CASE("float32 to float16 and bfloat16 rounds to nearest, ties to even") {
  // Every pair of neighbouring finite values, both signs: the midpoint (exact in float32) goes
  // to the even one, a float32 ulp either side of it to the nearer one.
  for (uint16_t h = 0; h < 0x7c00; h++) {
    for (uint16_t sign : {0, 0x8000}) {
      const uint16_t lo = static_cast<uint16_t>(sign | h), hi = static_cast<uint16_t>(lo + 1);
      INFO("float16 between 0x" << std::hex << lo << " and 0x" << hi);
      float a = tr_cpu_f16_to_f32(lo), b = (h + 1 == 0x7c00) ? (sign ? -65536.0f : 65536.0f)
                                                               : tr_cpu_f16_to_f32(hi);
      float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
      REQUIRE(static_cast<double>(mid) == (static_cast<double>(a) + b) / 2);
      REQUIRE(tr_cpu_f32_to_f16(mid) == ((lo & 1) ? hi : lo));
      REQUIRE(tr_cpu_f32_to_f16(std::nextafter(mid, a)) == lo);
      REQUIRE(tr_cpu_f32_to_f16(std::nextafter(mid, b)) == hi);  // 0x7c00 past 65504: inf
    }
  }
  CHECK(tr_cpu_f32_to_f16(65520.0f) == 0x7c00);
  CHECK(tr_cpu_f32_to_f16(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(tr_cpu_f32_to_f16(1e30f) == 0x7c00);
  CHECK(tr_cpu_f32_to_f16(-INFINITY) == 0xfc00);
  CHECK(tr_cpu_f32_to_f16(0x1p-25f) == 0x0000);                       // tie to even: zero
  CHECK(tr_cpu_f32_to_f16(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);  // smallest subnormal
  CHECK(tr_cpu_f32_to_f16(-1e-30f) == 0x8000);                        // keeps the sign
  CHECK(tr_cpu_f32_to_f16(from_bits(0x7f800001)) != 0x7c00);          // low-payload nan: a nan
  CHECK((tr_cpu_f32_to_f16(from_bits(0x7f800001)) & 0x3ff) != 0);

  for (uint32_t h = 0; h < 0x7f80; h++) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint32_t lo = sign | h, hi = lo + 1;
      INFO("bfloat16 between 0x" << std::hex << lo << " and 0x" << hi);
      float mid = from_bits((lo << 16) | 0x8000u);  // the midpoint, exactly
      REQUIRE(tr_cpu_f32_to_bf16(mid) == ((lo & 1) ? hi : lo));
      REQUIRE(tr_cpu_f32_to_bf16(from_bits((lo << 16) | 0x7fffu)) == lo);
      REQUIRE(tr_cpu_f32_to_bf16(from_bits((lo << 16) | 0x8001u)) == hi);
    }
  }
  CHECK(tr_cpu_f32_to_bf16(from_bits(0x7f800001)) != 0x7f80);  // low-payload nan: a nan
  CHECK(std::isnan(tr_cpu_bf16_to_f32(tr_cpu_f32_to_bf16(from_bits(0xff800001)))));
  CHECK(tr_cpu_f32_to_bf16(-INFINITY) == 0xff80);
}

// float32 to float16 by the definition: the nearest value, ties to the even pattern.
uint16_t f16_by_definition(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // at or past the midpoint of 65504 and 65536
  uint16_t lo = 0, hi = 0x7bff;            // the largest pattern whose value is <= a
  while (lo < hi) {
    uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (f16_value(mid) <= a) lo = mid; else hi = static_cast<uint16_t>(mid - 1);
  }
  const double below = f16_value(lo), above = lo == 0x7bff ? 65536.0 : f16_value(lo + 1);
  const double d_below = a - below, d_above = above - a;
  uint16_t pick = d_below < d_above ? lo : d_above < d_below ? lo + 1 : (lo & 1) ? lo + 1 : lo;
  return sign | pick;
}

TEST_CASE("float32 to float16 agrees with the definition on random values") {
  TR_SEEDED_RNG(rng);
  std::uniform_int_distribution<uint32_t> exponent(95, 145), mantissa(0, 0x7fffff), coin(0, 1);
  for (int i = 0; i < 300000; i++) {
    // mostly the float16 range and just around it (subnormals, overflow), sometimes anything
    uint32_t bits = (i % 8 == 0) ? static_cast<uint32_t>(rng())
                                 : (coin(rng) << 31) | (exponent(rng) << 23) | mantissa(rng);
    float f = from_bits(bits);
    if (std::isnan(f)) continue;
    INFO("float32 bits 0x" << std::hex << bits);
    REQUIRE(tr_cpu_f32_to_f16(f) == f16_by_definition(f));
  }
}

TEST_CASE("the default thread count is modest and positive") {
  int n = tr_cpu_default_threads();
  CHECK(n >= 1);
  CHECK(n <= TR_CPU_MAX_THREADS);
}

// ---- Normalization ------------------------------------------------------------------------

// The terms that cancel in a normalized element, (x - mean) * rstd * w + b: the kernels (as
// torch's) compute x * (rstd * w) + (b - mean * rstd * w), whose rounding errors scale with
// |x| and |mean| rather than with |x - mean|.
double norm_scale(double x, double mean, double rstd, double w, double b) {
  return (std::fabs(x) + std::fabs(mean)) * rstd * std::fabs(w) + std::fabs(b);
}

std::vector<double> ref_rms_norm(const std::vector<double> &x, const Buf *w, int64_t rows,
                                 int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[r * n + i] * x[r * n + i];
    double rstd = 1 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; i++) {
      y[r * n + i] = x[r * n + i] * rstd * (w ? w->get(i) : 1.0);
    }
  }
  return y;
}

TEST_CASE("rms_norm matches the float64 reference") {
  TR_SEEDED_RNG(rng);
  const int64_t shapes[][2] = {{1, 1}, {3, 3}, {1, 4095}, {2, 4096}, {5, 4097}, {300, 7}};
  for (const Dt *dt : kHalvesF32) {
    for (const auto &shape : shapes) {
      for (bool with_weight : {false, true}) {
        const int64_t rows = shape[0], n = shape[1];
        INFO(dt->name << " " << describe({{"rows", rows}, {"n", n}, {"weight", with_weight}}));
        Buf x = random_buf(rng, *dt, rows * n, -2, 2);
        Buf w = random_buf(rng, *dt, n, -2, 2);
        Buf y(*dt, rows * n);
        const double eps = 1e-6;
        ok(tr_cpu_rms_norm(x.data(), with_weight ? w.data() : nullptr, y.data(), rows, n,
                           dt->dtype, eps, 1));
        expect_close(y, ref_rms_norm(x.values(), with_weight ? &w : nullptr, rows, n, eps), {},
                     *dt, "rms_norm");
      }
    }
  }
}

std::vector<double> ref_layer_norm(const std::vector<double> &x, const Buf *w, const Buf *b,
                                   int64_t rows, int64_t n, double eps,
                                   std::vector<double> *scale) {
  std::vector<double> y(x.size());
  scale->assign(x.size(), 0);
  for (int64_t r = 0; r < rows; r++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++) mean += x[r * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; i++) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
    var /= n;
    double rstd = 1 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; i++) {
      double wi = w ? w->get(i) : 1.0, bias = b ? b->get(i) : 0.0;
      y[r * n + i] = (x[r * n + i] - mean) * rstd * wi + bias;
      (*scale)[r * n + i] = norm_scale(x[r * n + i], mean, rstd, wi, bias);
    }
  }
  return y;
}

TEST_CASE("layer_norm matches the float64 reference") {
  TR_SEEDED_RNG(rng);
  const int64_t shapes[][2] = {{1, 1}, {3, 3}, {1, 4095}, {2, 4096}, {5, 4097}, {300, 7}};
  for (const Dt *dt : kHalvesF32) {
    for (const auto &shape : shapes) {
      for (int affine = 0; affine < 4; affine++) {  // bit 0: weight, bit 1: bias
        const int64_t rows = shape[0], n = shape[1];
        INFO(dt->name << " " << describe({{"rows", rows}, {"n", n}, {"affine", affine}}));
        Buf x = random_buf(rng, *dt, rows * n, -3, 5);
        Buf w = random_buf(rng, *dt, n, -2, 2);
        Buf b = random_buf(rng, *dt, n, -2, 2);
        Buf y(*dt, rows * n);
        const double eps = 1e-5;
        const Buf *wp = (affine & 1) ? &w : nullptr, *bp = (affine & 2) ? &b : nullptr;
        ok(tr_cpu_layer_norm(x.data(), wp ? w.data() : nullptr, bp ? b.data() : nullptr,
                             y.data(), rows, n, dt->dtype, eps, 1));
        std::vector<double> scale;
        std::vector<double> ref = ref_layer_norm(x.values(), wp, bp, rows, n, eps, &scale);
        expect_close(y, ref, scale, *dt, "layer_norm");
      }
    }
  }
}

TEST_CASE("group_norm matches the float64 reference") {
  TR_SEEDED_RNG(rng);
  // N, C, spatial, groups
  const int64_t shapes[][4] = {{1, 1, 1, 1},    {2, 6, 5, 3},  {1, 4, 4095, 2},
                               {3, 8, 1, 8},    {1, 3, 4096, 1}, {2, 12, 33, 4}};
  for (const Dt *dt : kHalvesF32) {
    for (const auto &s : shapes) {
      for (int affine : {0, 3}) {
        const int64_t N = s[0], C = s[1], spatial = s[2], groups = s[3];
        INFO(dt->name << " " << describe({{"N", N}, {"C", C}, {"spatial", spatial},
                                          {"groups", groups}, {"affine", affine}}));
        Buf x = random_buf(rng, *dt, N * C * spatial, -3, 5);
        Buf w = random_buf(rng, *dt, C, -2, 2);
        Buf b = random_buf(rng, *dt, C, -2, 2);
        Buf y(*dt, N * C * spatial);
        const double eps = 1e-5;
        ok(tr_cpu_group_norm(x.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr,
                             y.data(), N, C, spatial, groups, dt->dtype, eps, 1));
        std::vector<double> xv = x.values(), ref(xv.size()), scale(xv.size());
        const int64_t cpg = C / groups, size = cpg * spatial;
        for (int64_t n = 0; n < N; n++) {
          for (int64_t g = 0; g < groups; g++) {
            const int64_t off = (n * C + g * cpg) * spatial;
            double mean = 0, var = 0;
            for (int64_t i = 0; i < size; i++) mean += xv[off + i];
            mean /= size;
            for (int64_t i = 0; i < size; i++) var += (xv[off + i] - mean) * (xv[off + i] - mean);
            var /= size;
            double rstd = 1 / std::sqrt(var + eps);
            for (int64_t i = 0; i < size; i++) {
              int64_t c = g * cpg + i / spatial;
              double wc = affine ? w.get(c) : 1.0, bias = affine ? b.get(c) : 0.0;
              ref[off + i] = (xv[off + i] - mean) * rstd * wc + bias;
              scale[off + i] = norm_scale(xv[off + i], mean, rstd, wc, bias);
            }
          }
        }
        expect_close(y, ref, scale, *dt, "group_norm");
      }
    }
  }
}

TEST_CASE("batch_norm matches the float64 reference, training and inference") {
  TR_SEEDED_RNG(rng);
  // N, C, spatial
  const int64_t shapes[][3] = {{2, 3, 1}, {1, 1, 2}, {4, 5, 4095}, {1, 2, 4096}, {3, 7, 9}};
  for (const Dt *dt : kHalvesF32) {
    for (const auto &s : shapes) {
      for (int training : {1, 0}) {
        for (int with_stats : {1, 0}) {  // running stats (and weight, bias) given or not
          if (!training && !with_stats) continue;  // inference needs the running stats
          const int64_t N = s[0], C = s[1], spatial = s[2];
          INFO(dt->name << " " << describe({{"N", N}, {"C", C}, {"spatial", spatial},
                                            {"training", training}, {"stats", with_stats}}));
          Buf x = random_buf(rng, *dt, N * C * spatial, -3, 5);
          Buf rm = random_buf(rng, *dt, C, -1, 1);
          Buf rv = random_buf(rng, *dt, C, 0.5, 2);
          Buf w = random_buf(rng, *dt, C, -2, 2);
          Buf b = random_buf(rng, *dt, C, -2, 2);
          const std::vector<double> rm0 = rm.values(), rv0 = rv.values();
          Buf y(*dt, N * C * spatial);
          std::vector<float> mean_out(C, -7.0f), rstd_out(C, -7.0f);
          const double eps = 1e-5, momentum = 0.1;
          ok(tr_cpu_batch_norm(x.data(), with_stats ? rm.data() : nullptr,
                               with_stats ? rv.data() : nullptr, with_stats ? w.data() : nullptr,
                               with_stats ? b.data() : nullptr, y.data(), mean_out.data(),
                               rstd_out.data(), N, C, spatial, training, momentum, eps,
                               dt->dtype, 1));
          std::vector<double> xv = x.values(), ref(xv.size()), scale(xv.size());
          std::vector<double> ref_rm(C), ref_rv(C), ref_mean(C), ref_rstd(C);
          const int64_t count = N * spatial;
          for (int64_t c = 0; c < C; c++) {
            double mean, var;
            if (training) {
              double sum = 0, sq = 0;
              for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < spatial; i++) sum += xv[(n * C + c) * spatial + i];
              mean = sum / count;
              for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < spatial; i++) {
                  double d = xv[(n * C + c) * spatial + i] - mean;
                  sq += d * d;
                }
              var = sq / count;
              ref_rm[c] = (1 - momentum) * rm0[c] + momentum * mean;
              ref_rv[c] = (1 - momentum) * rv0[c] + momentum * sq / (count - 1);
            } else {
              mean = rm0[c];
              var = rv0[c];
            }
            ref_mean[c] = mean;
            ref_rstd[c] = 1 / std::sqrt(var + eps);
            for (int64_t n = 0; n < N; n++) {
              for (int64_t i = 0; i < spatial; i++) {
                int64_t k = (n * C + c) * spatial + i;
                double wc = with_stats ? w.get(c) : 1.0, bias = with_stats ? b.get(c) : 0.0;
                ref[k] = (xv[k] - mean) * ref_rstd[c] * wc + bias;
                scale[k] = norm_scale(xv[k], mean, ref_rstd[c], wc, bias);
              }
            }
          }
          expect_close(y, ref, scale, *dt, "batch_norm y");
          if (training) {
            Buf mo(kF32, C), ro(kF32, C);
            std::memcpy(mo.data(), mean_out.data(), C * 4);
            std::memcpy(ro.data(), rstd_out.data(), C * 4);
            // x holds values up to 5: the mean is checked against that scale
            expect_close(mo, ref_mean, std::vector<double>(C, 5.0), kF32, "batch_norm mean");
            expect_close(ro, ref_rstd, {}, kF32, "batch_norm rstd");
            if (with_stats) {
              // the new running stats are stored in dt: one rounding, no cancellation to speak of
              expect_close(rm, ref_rm, std::vector<double>(C, 1.0), *dt, "running_mean");
              expect_close(rv, ref_rv, {}, *dt, "running_var");
            }
          } else {
            CHECK(mean_out == std::vector<float>(C, -7.0f));  // not written in inference
            CHECK(rm.values() == rm0);                         // nor the running stats
            CHECK(rv.values() == rv0);
          }
        }
      }
    }
  }
}

// ---- Softmax ------------------------------------------------------------------------------

TEST_CASE("softmax matches the float64 reference for every in and out dtype") {
  TR_SEEDED_RNG(rng);
  // outer, dim_size, inner
  const int64_t shapes[][3] = {{1, 1, 1},  {3, 3, 1},  {1, 4095, 1}, {2, 4096, 1},
                               {2, 5, 3},  {3, 17, 70}, {1, 4096, 2}, {4, 1, 5}};
  const Dt *const outs[] = {&kF16, &kBF16, &kF32, &kF64};
  for (const Dt *in : kHalvesF32) {
    for (const Dt *out : outs) {
      for (const auto &s : shapes) {
        for (double offset : {0.0, 1000.0}) {  // 1000: exp overflows unless the max is taken out
          const int64_t outer = s[0], dim = s[1], inner = s[2];
          INFO(in->name << " -> " << out->name << " offset " << offset << " "
                        << describe({{"outer", outer}, {"dim", dim}, {"inner", inner}}));
          Buf x = random_buf(rng, *in, outer * dim * inner, offset - 6, offset + 6);
          Buf y(*out, outer * dim * inner);
          ok(tr_cpu_softmax(x.data(), y.data(), outer, dim, inner, in->dtype, out->dtype, 1));
          std::vector<double> xv = x.values(), ref(xv.size());
          for (double &v : xv) v = round_to(*out, v);  // torch converts x to dtype first
          for (int64_t o = 0; o < outer; o++) {
            for (int64_t j = 0; j < inner; j++) {
              const int64_t base = o * dim * inner + j;
              double max = -INFINITY, sum = 0;
              for (int64_t d = 0; d < dim; d++) max = std::fmax(max, xv[base + d * inner]);
              for (int64_t d = 0; d < dim; d++) sum += std::exp(xv[base + d * inner] - max);
              for (int64_t d = 0; d < dim; d++) {
                ref[base + d * inner] = std::exp(xv[base + d * inner] - max) / sum;
              }
            }
          }
          // the arithmetic runs in out's precision, so its tolerance holds (float32 for float64
          // inputs converted exactly is float64 arithmetic: float64's)
          expect_close(y, ref, {}, *out, "softmax");
        }
      }
    }
  }
}

TEST_CASE("softmax propagates nan and handles -inf") {
  std::vector<float> x = {1.0f, NAN, 2.0f, -INFINITY, 0.0f, -INFINITY};
  std::vector<float> y(6);
  ok(tr_cpu_softmax(x.data(), y.data(), 2, 3, 1, kF32.dtype, kF32.dtype, 1));
  CHECK(std::isnan(y[0]));
  CHECK(std::isnan(y[1]));
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == 0.0f);
  CHECK(y[4] == 1.0f);
  CHECK(y[5] == 0.0f);
}

// ---- Add ----------------------------------------------------------------------------------

TEST_CASE("add matches the reference for every dtype, ints wrapping") {
  TR_SEEDED_RNG(rng);
  const int64_t sizes[] = {0, 1, 3, 4095, 4096, 10001};
  for (const Dt *dt : {&kF16, &kBF16, &kF32, &kF64}) {
    for (int64_t n : sizes) {
      for (double alpha : {1.0, -2.5}) {
        INFO(dt->name << " numel " << n << " alpha " << alpha);
        Buf a = random_buf(rng, *dt, n, -10, 10), b = random_buf(rng, *dt, n, -10, 10);
        Buf c(*dt, n);
        ok(tr_cpu_add(a.data(), b.data(), c.data(), n, dt->dtype, alpha, 1));
        std::vector<double> ref(n), scale(n);
        for (int64_t i = 0; i < n; i++) {
          ref[i] = a.get(i) + alpha * b.get(i);
          scale[i] = std::fabs(a.get(i)) + std::fabs(alpha * b.get(i));
        }
        expect_close(c, ref, scale, *dt, "add");
      }
    }
  }
  for (int64_t n : sizes) {
    for (double alpha : {1.0, -3.0, 65537.0}) {
      INFO("ints numel " << n << " alpha " << alpha);
      std::vector<int32_t> a32(n), b32(n), c32(n);
      std::vector<int64_t> a64(n), b64(n), c64(n);
      for (int64_t i = 0; i < n; i++) {  // the full range, so sums overflow and wrap
        a32[i] = static_cast<int32_t>(rng());
        b32[i] = static_cast<int32_t>(rng());
        a64[i] = static_cast<int64_t>(rng());
        b64[i] = static_cast<int64_t>(rng());
      }
      ok(tr_cpu_add(a32.data(), b32.data(), c32.data(), n, kI32.dtype, alpha, 1));
      ok(tr_cpu_add(a64.data(), b64.data(), c64.data(), n, kI64.dtype, alpha, 1));
      const int64_t al = static_cast<int64_t>(alpha);
      size_t bad32 = 0, bad64 = 0;
      for (int64_t i = 0; i < n; i++) {
        uint32_t want32 = static_cast<uint32_t>(a32[i]) +
                          static_cast<uint32_t>(al) * static_cast<uint32_t>(b32[i]);
        uint64_t want64 = static_cast<uint64_t>(a64[i]) +
                          static_cast<uint64_t>(al) * static_cast<uint64_t>(b64[i]);
        bad32 += static_cast<uint32_t>(c32[i]) != want32;
        bad64 += static_cast<uint64_t>(c64[i]) != want64;
      }
      CHECK(bad32 == 0);
      CHECK(bad64 == 0);
      if (n > 0) {  // a small case exactly, without wrapping
        int32_t x = 7, yv = -4, z = 0;
        ok(tr_cpu_add(&x, &yv, &z, 1, kI32.dtype, alpha, 1));
        CHECK(z == 7 + static_cast<int32_t>(alpha) * -4);
      }
    }
  }
}

TEST_CASE("add works in place") {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  ok(tr_cpu_add(a.data(), b.data(), a.data(), 3, kF32.dtype, 2.0, 1));
  CHECK(a == std::vector<float>({21, 42, 63}));
}

// ---- GEMM ---------------------------------------------------------------------------------

TEST_CASE("gemm matches the float64 reference for every transpose and dtype") {
  TR_SEEDED_RNG(rng);
  // M, N, K
  // Odd sizes, 1 and 127. float16/bfloat16: op(a) of at most 16 rows takes the skinny path (b
  // streamed, rows of b dotted 8 lanes at a time with a tail, or b's columns in ranges of 256),
  // 16 and 17 are its edge; above, blocks of at most 4096 rows, columns and depth converted to
  // float32: 4100 spans two (d accumulates over the depth blocks). K == 0 gives zeros; M or N == 0
  // writes nothing.
  const int64_t shapes[][3] = {{1, 1, 1},       {3, 3, 3},     {1, 300, 4095}, {33, 257, 129},
                               {5, 4096, 4},    {37, 5, 300},  {4, 6, 0},      {64, 1, 4096},
                               {127, 127, 127}, {1, 127, 3},   {16, 40, 67},   {17, 9, 33},
                               {3, 1030, 1025}, {2, 3, 2049},  {17, 3, 4100},  {4100, 2, 17},
                               {18, 4100, 3},   {1, 257, 4096}, {4, 33, 64},   {0, 5, 7},
                               {5, 0, 7},       {0, 0, 0}};
  for (const Dt *dt : kHalvesF32) {
    for (const auto &s : shapes) {
      for (int trans = 0; trans < 4; trans++) {
        const int64_t M = s[0], N = s[1], K = s[2];
        const int ta = trans & 1, tb = (trans >> 1) & 1;
        INFO(dt->name << " " << describe({{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta},
                                          {"trans_b", tb}}));
        Buf a = random_buf(rng, *dt, M * K, -1, 1), b = random_buf(rng, *dt, K * N, -1, 1);
        Buf d(*dt, M * N);
        for (int64_t i = 0; i < M * N; i++) d.set(i, NAN);  // every element must be written
        ok(tr_cpu_gemm(a.data(), b.data(), d.data(), M, N, K, ta, tb, dt->dtype, 1));
        std::vector<double> av = a.values(), bv = b.values(), ref(M * N), scale(M * N);
        for (int64_t i = 0; i < M; i++) {
          for (int64_t j = 0; j < N; j++) {
            double sum = 0, abs_sum = 0;
            for (int64_t k = 0; k < K; k++) {
              double x = ta ? av[k * M + i] : av[i * K + k];
              double y = tb ? bv[j * K + k] : bv[k * N + j];
              sum += x * y;
              abs_sum += std::fabs(x * y);
            }
            ref[i * N + j] = sum;
            scale[i * N + j] = abs_sum;
          }
        }
        expect_close(d, ref, scale, *dt, "gemm");
      }
    }
  }
}

TEST_CASE("gemm's choice of path: the skinny path's limits on rows, b's size and layout, op(a)'s bytes") {
  const int64_t big = (int64_t)8 << 20;  // b of 8Mi elements: the wide limit
  for (tr__cpu_kind kind : {TR__CPU_F16, TR__CPU_BF16}) {
    INFO("kind " << (int)kind);
    CHECK(tr__gemm_skinny_path(kind, 1, 4096, 16, 0));
    CHECK(tr__gemm_skinny_path(kind, 16, 4096, 16, 0));
    CHECK_FALSE(tr__gemm_skinny_path(kind, 17, 4096, 16, 0));
    CHECK_FALSE(tr__gemm_skinny_path(kind, 17, 4096, big, 0));  // b [K, N]: 16 rows whatever its size
    CHECK_FALSE(tr__gemm_skinny_path(kind, 17, 4096, big - 2048, 1));  // [N, K] one row under 8Mi
    CHECK(tr__gemm_skinny_path(kind, 17, 4096, big, 1));
    CHECK(tr__gemm_skinny_path(kind, 48, 4096, big, 1));
    CHECK_FALSE(tr__gemm_skinny_path(kind, 49, 4096, big, 1));
    CHECK_FALSE(tr__gemm_skinny_path(kind, 0, 4096, big, 1));
    // op(a) in float32 of at most 64 MiB: 16Mi elements
    CHECK(tr__gemm_skinny_path(kind, 16, (int64_t)1 << 20, big, 1));
    CHECK_FALSE(tr__gemm_skinny_path(kind, 17, (int64_t)1 << 20, big, 1));
  }
  // float16 converts a row of b at a time into 4 MiB at most: K up to 1Mi
  CHECK(tr__gemm_skinny_path(TR__CPU_BF16, 1, ((int64_t)1 << 20) + 8, big, 1));
  CHECK_FALSE(tr__gemm_skinny_path(TR__CPU_F16, 1, ((int64_t)1 << 20) + 8, big, 1));
  CHECK_FALSE(tr__gemm_skinny_path(TR__CPU_F32, 1, 4096, 16, 1));  // float32: sgemm
}

TEST_CASE("gemm with a large [N, K] b is right either side of the skinny path's 48 rows") {
  // b [N, K] (trans_b) of 8Mi elements takes the skinny path up to 48 rows of op(a) (the test
  // above), the block path from 49; one row of b less, the block path from 17. Every element must be
  // written; the float64 reference is checked on every 61st column of d.
  TR_SEEDED_RNG(rng);
  const Dt *const halves[] = {&kF16, &kBF16};
  const int64_t cases[][3] = {{48, 4096, 2048}, {49, 4096, 2048}, {33, 4096, 2048}, {17, 4095, 2048}};
  for (const Dt *dt : halves) {
    for (const auto &c : cases) {
      const int64_t M = c[0], N = c[1], K = c[2];
      Buf b = random_buf(rng, *dt, N * K, -1, 1);
      std::vector<double> bv = b.values();
      for (int ta = 0; ta < 2; ta++) {
        INFO(dt->name << " " << describe({{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta}, {"trans_b", 1}}));
        Buf a = random_buf(rng, *dt, M * K, -1, 1);
        Buf d(*dt, M * N);
        for (int64_t i = 0; i < M * N; i++) d.set(i, NAN);
        ok(tr_cpu_gemm(a.data(), b.data(), d.data(), M, N, K, ta, 1, dt->dtype, 2));
        std::vector<double> av = a.values();
        size_t unwritten = 0;
        for (int64_t i = 0; i < M * N; i++) unwritten += std::isnan(d.get(i)) ? 1 : 0;
        CHECK(unwritten == 0);
        std::vector<int64_t> cols;
        for (int64_t j = 0; j < N; j += 61) cols.push_back(j);
        cols.push_back(N - 1);
        Buf got(*dt, M * (int64_t)cols.size());
        std::vector<double> ref(got.n), scale(got.n);
        for (int64_t i = 0; i < M; i++) {
          for (size_t jj = 0; jj < cols.size(); jj++) {
            const int64_t j = cols[jj];
            double sum = 0, abs_sum = 0;
            for (int64_t k = 0; k < K; k++) {
              const double x = ta ? av[k * M + i] : av[i * K + k], y = bv[j * K + k];
              sum += x * y;
              abs_sum += std::fabs(x * y);
            }
            got.set(i * (int64_t)cols.size() + (int64_t)jj, d.get(i * N + j));
            ref[i * cols.size() + jj] = sum;
            scale[i * cols.size() + jj] = abs_sum;
          }
        }
        expect_close(got, ref, scale, *dt, "gemm");
      }
    }
  }
}

// ---- RoPE ---------------------------------------------------------------------------------

// A vLLM cos/sin cache: row p = [cos(p * theta_i) for i < D/2, sin(p * theta_i) ...].
Buf rope_cache(const Dt &dt, int64_t rows, int64_t D) {
  Buf cache(dt, rows * D);
  for (int64_t p = 0; p < rows; p++) {
    for (int64_t i = 0; i < D / 2; i++) {
      double theta = std::pow(10000.0, -2.0 * i / D);
      cache.set(p * D + i, std::cos(p * theta));
      cache.set(p * D + D / 2 + i, std::sin(p * theta));
    }
  }
  return cache;
}

std::vector<double> ref_rope(const std::vector<int64_t> &pos, const Buf &x, const Buf &cache,
                             int64_t tokens, int64_t heads, int64_t D, bool neox,
                             std::vector<double> *scale) {
  std::vector<double> y(x.n);
  scale->assign(x.n, 0);
  for (int64_t t = 0; t < tokens; t++) {
    for (int64_t h = 0; h < heads; h++) {
      const int64_t off = (t * heads + h) * D;
      for (int64_t i = 0; i < D / 2; i++) {
        double c = cache.get(pos[t] * D + i), s = cache.get(pos[t] * D + D / 2 + i);
        int64_t i1 = neox ? off + i : off + 2 * i, i2 = neox ? off + D / 2 + i : off + 2 * i + 1;
        double x1 = x.get(i1), x2 = x.get(i2);
        y[i1] = x1 * c - x2 * s;
        y[i2] = x2 * c + x1 * s;
        (*scale)[i1] = std::fabs(x1 * c) + std::fabs(x2 * s);
        (*scale)[i2] = std::fabs(x2 * c) + std::fabs(x1 * s);
      }
    }
  }
  return y;
}

TEST_CASE("rope matches the float64 reference, NeoX and GPT-J, int32 and int64 positions") {
  TR_SEEDED_RNG(rng);
  // tokens, heads, head_dim, cache_rows
  const int64_t shapes[][4] = {{1, 1, 2, 1}, {3, 3, 4, 5}, {17, 2, 128, 64}, {2, 3, 1030, 9},
                               {5, 1, 4096, 3}};
  for (const Dt *dt : kHalvesF32) {
    for (const auto &s : shapes) {
      for (int neox : {1, 0}) {
        for (const Dt *pdt : {&kI32, &kI64}) {
          const int64_t tokens = s[0], heads = s[1], D = s[2], rows = s[3];
          INFO(dt->name << " positions " << pdt->name << " "
                        << describe({{"tokens", tokens}, {"heads", heads}, {"head_dim", D},
                                     {"cache_rows", rows}, {"neox", neox}}));
          std::uniform_int_distribution<int64_t> pick(0, rows - 1);
          std::vector<int64_t> pos(tokens);
          std::vector<int32_t> pos32(tokens);
          for (int64_t t = 0; t < tokens; t++) pos32[t] = static_cast<int32_t>(pos[t] = pick(rng));
          pos[0] = rows - 1;  // the last row is in range
          pos32[0] = static_cast<int32_t>(rows - 1);
          Buf x = random_buf(rng, *dt, tokens * heads * D, -2, 2);
          Buf cache = rope_cache(*dt, rows, D);
          Buf y(*dt, tokens * heads * D);
          const void *p = pdt == &kI32 ? static_cast<const void *>(pos32.data()) : pos.data();
          ok(tr_cpu_rope(p, pdt->dtype, x.data(), cache.data(), y.data(), tokens, heads, D, rows,
                         neox, dt->dtype, 1));
          std::vector<double> scale;
          std::vector<double> ref = ref_rope(pos, x, cache, tokens, heads, D, neox, &scale);
          expect_close(y, ref, scale, *dt, "rope");
          // in place gives the same bytes
          ok(tr_cpu_rope(p, pdt->dtype, x.data(), cache.data(), x.data(), tokens, heads, D, rows,
                         neox, dt->dtype, 1));
          CHECK(x.bytes == y.bytes);
        }
      }
    }
  }
}

// ---- GQA decode ---------------------------------------------------------------------------

TEST_CASE("gqa_decode matches the float64 reference, with and without softcap") {
  TR_SEEDED_RNG(rng);
  // B, heads, heads_kv, dim, S
  const int64_t shapes[][5] = {{1, 1, 1, 1, 1}, {2, 4, 2, 3, 5}, {3, 8, 2, 64, 130},
                               {1, 32, 8, 128, 300}, {2, 3, 3, 16, 70}};
  for (const Dt *dt : {&kF16, &kBF16}) {
    for (const auto &s : shapes) {
      for (double softcap : {0.0, 0.5, 30.0}) {
        const int64_t B = s[0], heads = s[1], hkv = s[2], dim = s[3], S = s[4];
        INFO(dt->name << " softcap " << softcap << " "
                      << describe({{"B", B}, {"heads", heads}, {"heads_kv", hkv}, {"dim", dim},
                                   {"S", S}}));
        std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(S));
        std::vector<int32_t> seqlens(B);
        for (auto &L : seqlens) L = pick(rng);
        seqlens[0] = static_cast<int32_t>(S);  // the whole cache
        if (B > 1) seqlens[1] = 0;             // none of it: zeros
        Buf q = random_buf(rng, *dt, B * heads * dim, -2, 2);
        Buf k = random_buf(rng, *dt, B * S * hkv * dim, -2, 2);
        Buf v = random_buf(rng, *dt, B * S * hkv * dim, -1, 1);
        Buf o(*dt, B * heads * dim);
        for (size_t i = 0; i < o.n; i++) o.set(i, 99.0);  // every element must be written
        const double scale = 1 / std::sqrt(static_cast<double>(dim));
        ok(tr_cpu_gqa_decode(q.data(), k.data(), v.data(), seqlens.data(), o.data(), B, heads, hkv,
                             dim, S, softcap, scale, dt->dtype, 1));
        std::vector<double> ref(o.n, 0.0), mag(o.n, 0.0);
        for (int64_t b = 0; b < B; b++) {
          for (int64_t h = 0; h < heads; h++) {
            const int64_t kvh = h / (heads / hkv), L = seqlens[b];
            std::vector<double> logit(L);
            double max = -INFINITY, sum = 0;
            for (int64_t t = 0; t < L; t++) {
              double dot = 0;
              for (int64_t d = 0; d < dim; d++) {
                dot += q.get((b * heads + h) * dim + d) *
                       k.get(((b * S + t) * hkv + kvh) * dim + d);
              }
              logit[t] = dot * scale;
              if (softcap > 0) logit[t] = softcap * std::tanh(logit[t] / softcap);
              max = std::fmax(max, logit[t]);
            }
            for (int64_t t = 0; t < L; t++) sum += std::exp(logit[t] - max);
            for (int64_t t = 0; t < L; t++) {
              double p = std::exp(logit[t] - max) / sum;
              for (int64_t d = 0; d < dim; d++) {
                double vv = v.get(((b * S + t) * hkv + kvh) * dim + d);
                ref[(b * heads + h) * dim + d] += p * vv;
                mag[(b * heads + h) * dim + d] += p * std::fabs(vv);
              }
            }
          }
        }
        expect_close(o, ref, mag, *dt, "gqa_decode");
        if (B > 1) {
          for (int64_t i = 0; i < heads * dim; i++) REQUIRE(o.get(heads * dim + i) == 0.0);
        }
      }
    }
  }
}

// ---- Threads ------------------------------------------------------------------------------

// Runs `call(threads)` for 1, kMultiThreads and 0 (the default) threads and requires the outputs
// it returns to be the same bytes.
template <typename Call>
void expect_same_across_threads(const char *what, Call call) {
  INFO(what);
  const std::vector<unsigned char> one = call(1);
  CHECK(call(kMultiThreads) == one);
  CHECK(call(0) == one);
}

TEST_CASE("every kernel gives the same bytes on one thread and on several") {
  TR_SEEDED_RNG(rng);
  for (const Dt *dt : kHalvesF32) {
    INFO(dt->name);
    {
      const int64_t rows = 64, n = 4096;  // 262144 elements: above TR_CPU_PARALLEL_MIN
      Buf x = random_buf(rng, *dt, rows * n, -2, 2), w = random_buf(rng, *dt, n, -2, 2);
      Buf b = random_buf(rng, *dt, n, -2, 2);
      expect_same_across_threads("rms_norm", [&](int threads) {
        Buf y(*dt, rows * n);
        ok(tr_cpu_rms_norm(x.data(), w.data(), y.data(), rows, n, dt->dtype, 1e-6, threads));
        return y.bytes;
      });
      expect_same_across_threads("layer_norm", [&](int threads) {
        Buf y(*dt, rows * n);
        ok(tr_cpu_layer_norm(x.data(), w.data(), b.data(), y.data(), rows, n, dt->dtype, 1e-5,
                             threads));
        return y.bytes;
      });
      expect_same_across_threads("group_norm", [&](int threads) {
        Buf y(*dt, rows * n);
        ok(tr_cpu_group_norm(x.data(), w.data(), b.data(), y.data(), 2, 4096, 32, 64, dt->dtype,
                             1e-5, threads));
        return y.bytes;
      });
      expect_same_across_threads("batch_norm", [&](int threads) {
        Buf y(*dt, rows * n);
        Buf rm(*dt, 16), rv(*dt, 16);
        for (int i = 0; i < 16; i++) rv.set(i, 1.0);
        std::vector<float> mean(16), rstd(16);
        ok(tr_cpu_batch_norm(x.data(), rm.data(), rv.data(), w.data(), b.data(), y.data(),
                             mean.data(), rstd.data(), 4, 16, 4096, 1, 0.1, 1e-5, dt->dtype,
                             threads));
        std::vector<unsigned char> all = y.bytes;
        all.insert(all.end(), rm.bytes.begin(), rm.bytes.end());
        all.insert(all.end(), rv.bytes.begin(), rv.bytes.end());
        all.insert(all.end(), reinterpret_cast<unsigned char *>(mean.data()),
                   reinterpret_cast<unsigned char *>(mean.data() + 16));
        all.insert(all.end(), reinterpret_cast<unsigned char *>(rstd.data()),
                   reinterpret_cast<unsigned char *>(rstd.data() + 16));
        return all;
      });
      expect_same_across_threads("softmax, last axis", [&](int threads) {
        Buf y(kF32, rows * n);
        ok(tr_cpu_softmax(x.data(), y.data(), rows, n, 1, dt->dtype, kF32.dtype, threads));
        return y.bytes;
      });
      expect_same_across_threads("softmax, middle axis", [&](int threads) {
        Buf y(*dt, rows * n);
        ok(tr_cpu_softmax(x.data(), y.data(), 4, 256, 256, dt->dtype, dt->dtype, threads));
        return y.bytes;
      });
      expect_same_across_threads("add", [&](int threads) {
        Buf c(*dt, rows * n);
        ok(tr_cpu_add(x.data(), x.data(), c.data(), rows * n, dt->dtype, 0.5, threads));
        return c.bytes;
      });
      expect_same_across_threads("rope", [&](int threads) {
        Buf y(*dt, rows * n);
        Buf cache = rope_cache(*dt, 32, 128);
        std::vector<int64_t> pos(2048);
        for (size_t t = 0; t < pos.size(); t++) pos[t] = static_cast<int64_t>(t % 32);
        ok(tr_cpu_rope(pos.data(), kI64.dtype, x.data(), cache.data(), y.data(), 2048, 1, 128, 32,
                       1, dt->dtype, threads));
        return y.bytes;
      });
    }
    {
      const int64_t M = 70, N = 300, K = 200;  // 4.2M multiply-adds, uneven tiles
      Buf a = random_buf(rng, *dt, M * K, -1, 1), b = random_buf(rng, *dt, K * N, -1, 1);
      expect_same_across_threads("gemm", [&](int threads) {
        Buf d(*dt, M * N);
        ok(tr_cpu_gemm(a.data(), b.data(), d.data(), M, N, K, 0, 1, dt->dtype, threads));
        return d.bytes;
      });
      Buf a2 = random_buf(rng, *dt, 4100 * 4100, -1, 1), b2 = random_buf(rng, *dt, 4100 * 4, -1, 1);
      expect_same_across_threads("gemm, two blocks in M and in K", [&](int threads) {
        Buf d(*dt, 4100 * 4);
        ok(tr_cpu_gemm(a2.data(), b2.data(), d.data(), 4100, 4, 4100, 1, 0, dt->dtype, threads));
        return d.bytes;
      });
      expect_same_across_threads("gemm, the skinny path: rows of b", [&](int threads) {
        Buf d(*dt, 16 * 300);
        ok(tr_cpu_gemm(a.data(), b.data(), d.data(), 16, 300, 200, 0, 1, dt->dtype, threads));
        return d.bytes;
      });
      expect_same_across_threads("gemm, the skinny path: columns of b", [&](int threads) {
        Buf d(*dt, 16 * 300);
        ok(tr_cpu_gemm(a.data(), b.data(), d.data(), 16, 300, 200, 1, 0, dt->dtype, threads));
        return d.bytes;
      });
      expect_same_across_threads("gemm, one row", [&](int threads) {  // 1 x 300 x 200: above the parallel minimum
        Buf d(*dt, 1 * 300);
        ok(tr_cpu_gemm(a.data(), b.data(), d.data(), 1, 300, 200, 0, 0, dt->dtype, threads));
        return d.bytes;
      });
    }
    if (dt != &kF32) {
      const int64_t B = 4, heads = 8, hkv = 2, dim = 64, S = 512;
      Buf q = random_buf(rng, *dt, B * heads * dim, -2, 2);
      Buf k = random_buf(rng, *dt, B * S * hkv * dim, -2, 2);
      Buf v = random_buf(rng, *dt, B * S * hkv * dim, -1, 1);
      std::vector<int32_t> seqlens = {512, 300, 1, 0};
      expect_same_across_threads("gqa_decode", [&](int threads) {
        Buf o(*dt, B * heads * dim);
        ok(tr_cpu_gqa_decode(q.data(), k.data(), v.data(), seqlens.data(), o.data(), B, heads,
                             hkv, dim, S, 20.0, 0.125, dt->dtype, threads));
        return o.bytes;
      });
    }
  }
  {  // the wider dtypes of add
    std::vector<int64_t> a(1 << 18), c1(1 << 18), c3(1 << 18);
    for (auto &e : a) e = static_cast<int64_t>(rng());
    ok(tr_cpu_add(a.data(), a.data(), c1.data(), 1 << 18, kI64.dtype, -7, 1));
    ok(tr_cpu_add(a.data(), a.data(), c3.data(), 1 << 18, kI64.dtype, -7, kMultiThreads));
    CHECK(c1 == c3);
  }
}

// ---- Errors -------------------------------------------------------------------------------

TEST_CASE("bad arguments are ValueErrors naming the item and the value") {
  float x[16] = {0}, y[16] = {0};
  const tr_dtype i32 = kI32.dtype, f32 = kF32.dtype, f64 = kF64.dtype;
  const std::string v = "ValueError: ";

  // dtypes
  CHECK(error_of(tr_cpu_rms_norm(x, nullptr, y, 1, 4, i32, 1e-6, 1)) ==
        v + "rms_norm: dtype int32 is not supported (float16, bfloat16, float32)");
  CHECK(error_of(tr_cpu_layer_norm(x, nullptr, nullptr, y, 1, 4, f64, 1e-5, 1)) ==
        v + "layer_norm: dtype float64 is not supported (float16, bfloat16, float32)");
  CHECK(error_of(tr_cpu_group_norm(x, nullptr, nullptr, y, 1, 4, 1, 2, make_dtype(kDLUInt, 16),
                                   1e-5, 1)) ==
        v + "group_norm: dtype dtype(code=1, bits=16, lanes=1) is not supported (float16, "
            "bfloat16, float32)");
  CHECK(error_of(tr_cpu_batch_norm(x, nullptr, nullptr, nullptr, nullptr, y, nullptr, nullptr, 2,
                                   2, 2, 1, 0.1, 1e-5, kI64.dtype, 1)) ==
        v + "batch_norm: dtype int64 is not supported (float16, bfloat16, float32)");
  CHECK(error_of(tr_cpu_softmax(x, y, 1, 4, 1, kI64.dtype, f32, 1)) ==
        v + "softmax: in_dtype int64 is not supported (float16, bfloat16, float32)");
  CHECK(error_of(tr_cpu_softmax(x, y, 1, 4, 1, f32, i32, 1)) ==
        v + "softmax: out_dtype int32 is not supported (float16, bfloat16, float32, float64)");
  CHECK(error_of(tr_cpu_add(x, x, y, 4, make_dtype(kDLInt, 8), 1.0, 1)) ==
        v + "add: dtype int8 is not supported (float16, bfloat16, float32, float64, int32, "
            "int64)");
  CHECK(error_of(tr_cpu_gemm(x, x, y, 2, 2, 2, 0, 0, f64, 1)) ==
        v + "gemm: dtype float64 is not supported (float16, bfloat16, float32)");
  int64_t pos[4] = {0, 1, 2, 3};
  CHECK(error_of(tr_cpu_rope(pos, f32, x, x, y, 1, 1, 4, 4, 1, f32, 1)) ==
        v + "rope: pos_dtype float32 is not supported (int32, int64)");
  CHECK(error_of(tr_cpu_rope(pos, kI64.dtype, x, x, y, 1, 1, 4, 4, 1, i32, 1)) ==
        v + "rope: dtype int32 is not supported (float16, bfloat16, float32)");
  int32_t seqlens[2] = {1, 1};
  CHECK(error_of(tr_cpu_gqa_decode(x, x, x, seqlens, y, 1, 1, 1, 4, 1, 0, 1, f32, 1)) ==
        v + "gqa_decode: dtype float32 is not supported (float16, bfloat16)");

  // sizes and threads
  CHECK(error_of(tr_cpu_rms_norm(x, nullptr, y, -1, 4, f32, 1e-6, 1)) ==
        v + "rms_norm: rows must be >= 0, got -1");
  CHECK(error_of(tr_cpu_rms_norm(x, nullptr, y, 1, 4, f32, 1e-6, -2)) ==
        v + "rms_norm: threads must be >= 0, got -2");
  CHECK(error_of(tr_cpu_layer_norm(x, nullptr, nullptr, y, 1, -5, f32, 1e-5, 1)) ==
        v + "layer_norm: n must be >= 0, got -5");
  CHECK(error_of(tr_cpu_group_norm(x, nullptr, nullptr, y, 1, 4, -1, 2, f32, 1e-5, 1)) ==
        v + "group_norm: spatial must be >= 0, got -1");
  CHECK(error_of(tr_cpu_batch_norm(x, nullptr, nullptr, nullptr, nullptr, y, nullptr, nullptr,
                                   2, -3, 2, 1, 0.1, 1e-5, f32, 1)) ==
        v + "batch_norm: C must be >= 0, got -3");
  CHECK(error_of(tr_cpu_softmax(x, y, 1, -3, 1, f32, f32, 1)) ==
        v + "softmax: dim_size must be >= 0, got -3");
  CHECK(error_of(tr_cpu_add(x, x, y, -4, f32, 1.0, 1)) == v + "add: numel must be >= 0, got -4");
  CHECK(error_of(tr_cpu_gemm(x, x, y, 2, 2, -1, 0, 0, f32, 1)) ==
        v + "gemm: K must be >= 0, got -1");
  CHECK(error_of(tr_cpu_rope(pos, kI64.dtype, x, x, y, 1, 1, 4, -4, 1, f32, 1)) ==
        v + "rope: cache_rows must be >= 0, got -4");
  CHECK(error_of(tr_cpu_gqa_decode(x, x, x, seqlens, y, 1, 1, 1, 4, -1, 0, 1, kF16.dtype, 1)) ==
        v + "gqa_decode: S must be >= 0, got -1");
  CHECK(error_of(tr_cpu_rms_norm(x, nullptr, y, int64_t(1) << 40, int64_t(1) << 40, f32, 1e-6,
                                 1)) ==
        v + "rms_norm: rows * n = 1099511627776 * 1099511627776 overflows int64");
  CHECK(error_of(tr_cpu_group_norm(x, nullptr, nullptr, y, 1 << 30, 1 << 30, 1 << 30, 1, f32,
                                   1e-5, 1)) ==
        v + "group_norm: N * C * spatial = 1152921504606846976 * 1073741824 overflows int64");

  // missing buffers
  CHECK(error_of(tr_cpu_rms_norm(nullptr, nullptr, y, 2, 3, f32, 1e-6, 1)) ==
        v + "rms_norm: x is NULL (it holds 6 elements)");
  CHECK(error_of(tr_cpu_gemm(x, x, nullptr, 2, 3, 2, 0, 0, f32, 1)) ==
        v + "gemm: d is NULL (it holds 6 elements)");
  ok(tr_cpu_rms_norm(nullptr, nullptr, nullptr, 0, 3, f32, 1e-6, 1));  // nothing to read

  // values
  CHECK(error_of(tr_cpu_group_norm(x, nullptr, nullptr, y, 1, 4, 1, 0, f32, 1e-5, 1)) ==
        v + "group_norm: groups must be > 0, got 0");
  CHECK(error_of(tr_cpu_group_norm(x, nullptr, nullptr, y, 1, 10, 1, 4, f32, 1e-5, 1)) ==
        v + "group_norm: C 10 is not divisible by groups 4");
  CHECK(error_of(tr_cpu_batch_norm(x, nullptr, nullptr, nullptr, nullptr, y, nullptr, nullptr, 1,
                                   3, 1, 1, 0.1, 1e-5, f32, 1)) ==
        v + "batch_norm: training needs more than 1 value per channel, got N * spatial = 1 (N 1, "
            "spatial 1)");
  CHECK(error_of(tr_cpu_batch_norm(x, nullptr, y, nullptr, nullptr, y, nullptr, nullptr, 2, 3, 1,
                                   0, 0.1, 1e-5, f32, 1)) ==
        v + "batch_norm: running_mean is required when not training, got NULL");
  CHECK(error_of(tr_cpu_batch_norm(x, y, nullptr, nullptr, nullptr, y, nullptr, nullptr, 2, 3, 1,
                                   0, 0.1, 1e-5, f32, 1)) ==
        v + "batch_norm: running_var is required when not training, got NULL");
  CHECK(error_of(tr_cpu_add(x, x, y, 4, i32, 1.5, 1)) ==
        v + "add: alpha 1.5 is not integral, as dtype int32 requires");
  CHECK(error_of(tr_cpu_add(x, x, y, 4, kI64.dtype, NAN, 1)) ==
        v + "add: alpha nan is not integral, as dtype int64 requires");
  CHECK(error_of(tr_cpu_add(x, x, y, 4, i32, 3e9, 1)) ==
        v + "add: alpha 3e+09 is out of range for dtype int32");
  CHECK(error_of(tr_cpu_add(x, x, y, 4, kI64.dtype, INFINITY, 1)) ==
        v + "add: alpha inf is out of range for dtype int64");
  CHECK(error_of(tr_cpu_add(x, x, y, 4, kI64.dtype, 9223372036854775808.0, 1)) ==
        v + "add: alpha 9.223372036854776e+18 is out of range for dtype int64");
  ok(tr_cpu_add(x, x, y, 4, i32, -2147483648.0, 1));  // the most negative int32 fits
  ok(tr_cpu_add(x, x, y, 4, f32, 1.5, 1));            // floats take any alpha
  CHECK(error_of(tr_cpu_rope(pos, kI64.dtype, x, x, y, 1, 1, 7, 4, 1, f32, 1)) ==
        v + "rope: head_dim must be even, got 7");
  CHECK(error_of(tr_cpu_gqa_decode(x, x, x, seqlens, y, 1, 4, 0, 4, 1, 0, 1, kF16.dtype, 1)) ==
        v + "gqa_decode: heads_kv must be > 0, got 0");
  CHECK(error_of(tr_cpu_gqa_decode(x, x, x, seqlens, y, 1, 6, 4, 1, 1, 0, 1, kF16.dtype, 1)) ==
        v + "gqa_decode: heads 6 is not divisible by heads_kv 4");
}

TEST_CASE("out-of-range positions and seqlens name the token or batch, and write nothing") {
  float cache[4 * 8] = {0}, x[3 * 2 * 4] = {0}, y[3 * 2 * 4];
  for (float &e : y) e = 42.0f;
  const int64_t pos64[3] = {0, 3, 4};
  CHECK(error_of(tr_cpu_rope(pos64, kI64.dtype, x, cache, y, 3, 2, 4, 4, 1, kF32.dtype, 1)) ==
        "ValueError: rope: token 2 has position 4, out of range [0, 4) of the cache's rows");
  const int32_t pos32[3] = {1, -1, 9};
  CHECK(error_of(tr_cpu_rope(pos32, kI32.dtype, x, cache, y, 3, 2, 4, 4, 0, kF32.dtype, 1)) ==
        "ValueError: rope: token 1 has position -1, out of range [0, 4) of the cache's rows");
  for (float e : y) REQUIRE(e == 42.0f);

  uint16_t q[2 * 2 * 4] = {0}, kv[2 * 8 * 1 * 4] = {0}, o[2 * 2 * 4];
  for (uint16_t &e : o) e = 0x3c00;
  const int32_t too_long[2] = {3, 9};
  CHECK(error_of(tr_cpu_gqa_decode(q, kv, kv, too_long, o, 2, 2, 1, 4, 8, 0, 0.5, kF16.dtype,
                                   1)) ==
        "ValueError: gqa_decode: seqlens[1] is 9, out of range [0, S = 8]");
  const int32_t negative[2] = {-1, 2};
  CHECK(error_of(tr_cpu_gqa_decode(q, kv, kv, negative, o, 2, 2, 1, 4, 8, 0, 0.5, kBF16.dtype,
                                   1)) ==
        "ValueError: gqa_decode: seqlens[0] is -1, out of range [0, S = 8]");
  for (uint16_t e : o) REQUIRE(e == 0x3c00);
}

}  // namespace
