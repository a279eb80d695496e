// tensor_spec_test.cc: tensor specs: construction, DLPack descriptions, text, hashing, layout.
#include <catch2/catch.hpp>

#include "core/test_support.h"

#include <string>
#include <vector>

#include "tilerun/tensor_spec.h"

static std::string text_of(const tr_tensor_spec &spec) {
  char buf[256];
  tr_tensor_spec_format(&spec, buf, sizeof(buf));
  return buf;
}

static tr_device dev(const char *text) {
  tr_device d;
  tr_status *s = tr_device_parse(text, &d);
  REQUIRE(s == nullptr);
  return d;
}

TEST_CASE("a spec describes device, dtype and shape") {
  tr_device cuda0 = dev("cuda:0");
  int64_t shape[] = {4, 4096};
  tr_tensor_spec spec;
  REQUIRE(tr_tensor_spec_make(&cuda0, TR_FLOAT16, 2, shape, &spec) == nullptr);
  CHECK(text_of(spec) == "float16[4, 4096] on cuda:0");
  CHECK(tr_tensor_spec_numel(&spec) == 4 * 4096);
  tr_device cpu = dev("cpu");
  REQUIRE(tr_tensor_spec_make(&cpu, TR_FLOAT32, 0, nullptr, &spec) == nullptr);
  CHECK(text_of(spec) == "float32[] on cpu");
  CHECK(tr_tensor_spec_numel(&spec) == 1);
  int64_t empty[] = {3, 0, 5};
  REQUIRE(tr_tensor_spec_make(&cpu, TR_INT8, 3, empty, &spec) == nullptr);
  CHECK(tr_tensor_spec_numel(&spec) == 0);
  int64_t huge[] = {INT64_MAX / 2, 4};
  REQUIRE(tr_tensor_spec_make(&cpu, TR_INT8, 2, huge, &spec) == nullptr);
  CHECK(tr_tensor_spec_numel(&spec) == INT64_MAX);  // saturates, never wraps
}

TEST_CASE("bad shapes are refused naming the axis and the extent received") {
  tr_device cpu = dev("cpu");
  tr_tensor_spec spec;
  int64_t ok[] = {7};
  REQUIRE(tr_tensor_spec_make(&cpu, TR_FLOAT32, 1, ok, &spec) == nullptr);
  int64_t negative[] = {4, -1, 8};
  CHECK(tr_test::error_of(tr_tensor_spec_make(&cpu, TR_FLOAT32, 3, negative, &spec)) ==
        "SignatureError(shape): tensor shape (4, -1, 8): axis 1 has extent -1, which is negative");
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(tr_test::error_of(tr_tensor_spec_make(&cpu, TR_FLOAT32, 9, nine, &spec)) ==
        "SignatureError(shape): tensor rank 9 is out of range: tilerun handles ranks 0 to 8");
  CHECK(tr_test::error_of(tr_tensor_spec_make(&cpu, TR_FLOAT32, -1, nine, &spec)) ==
        "SignatureError(shape): tensor rank -1 is out of range: tilerun handles ranks 0 to 8");
  CHECK(tr_test::error_of(tr_tensor_spec_make(&cpu, TR_FLOAT32, 2, nullptr, &spec)) ==
        "ValueError: tensor of rank 2 has a NULL shape");
  CHECK(text_of(spec) == "float32[7] on cpu");
}

TEST_CASE("shapes print as the manifest's messages show them") {
  int64_t one[] = {4096};
  int64_t two[] = {2, 3};
  char buf[64];
  tr_shape_format(1, one, buf, sizeof(buf));
  CHECK(std::string(buf) == "(4096,)");
  tr_shape_format(2, two, buf, sizeof(buf));
  CHECK(std::string(buf) == "(2, 3)");
  CHECK(tr_shape_format(0, nullptr, buf, sizeof(buf)) == 2);
  CHECK(std::string(buf) == "()");
  char tiny[4];
  CHECK(tr_shape_format(2, two, tiny, sizeof(tiny)) == 6);  // measures the whole text
  CHECK(std::string(tiny) == "(2,");
  CHECK(tr_shape_format(2, two, nullptr, 0) == 6);
}

TEST_CASE("equality and hash cover device, dtype and every extent") {
  tr_device cuda0 = dev("cuda:0"), cuda1 = dev("cuda:1");
  int64_t s1[] = {4, 4096}, s2[] = {4, 4095}, s3[] = {4096, 4};
  tr_tensor_spec a, b, c, d, e, f;
  REQUIRE(tr_tensor_spec_make(&cuda0, TR_FLOAT16, 2, s1, &a) == nullptr);
  REQUIRE(tr_tensor_spec_make(&cuda0, TR_FLOAT16, 2, s1, &b) == nullptr);
  REQUIRE(tr_tensor_spec_make(&cuda1, TR_FLOAT16, 2, s1, &c) == nullptr);
  REQUIRE(tr_tensor_spec_make(&cuda0, TR_BFLOAT16, 2, s1, &d) == nullptr);
  REQUIRE(tr_tensor_spec_make(&cuda0, TR_FLOAT16, 2, s2, &e) == nullptr);
  REQUIRE(tr_tensor_spec_make(&cuda0, TR_FLOAT16, 2, s3, &f) == nullptr);
  CHECK(tr_tensor_spec_equal(&a, &b));
  CHECK(tr_tensor_spec_hash(&a) == tr_tensor_spec_hash(&b));
  for (const tr_tensor_spec *other : {&c, &d, &e, &f}) {
    CHECK_FALSE(tr_tensor_spec_equal(&a, other));
    CHECK(tr_tensor_spec_hash(&a) != tr_tensor_spec_hash(other));
  }
}

TEST_CASE("a DLTensor is described without looking at its data or strides") {
  int64_t shape[] = {2, 3};
  int64_t strides[] = {1, 2};  // transposed view
  DLTensor t{};
  t.data = nullptr;
  t.device = DLDevice{kDLCUDA, 1};
  t.ndim = 2;
  t.dtype = TR_BFLOAT16;
  t.shape = shape;
  t.strides = strides;
  tr_tensor_spec spec;
  REQUIRE(tr_tensor_spec_from_dl(&t, &spec) == nullptr);
  CHECK(text_of(spec) == "bfloat16[2, 3] on cuda:1");
  CHECK_FALSE(tr_dl_tensor_is_contiguous(&t));
  int64_t compact[] = {3, 1};
  t.strides = compact;
  CHECK(tr_dl_tensor_is_contiguous(&t));
  t.strides = nullptr;
  CHECK(tr_dl_tensor_is_contiguous(&t));
  int64_t unit_shape[] = {1, 3};
  int64_t odd_strides[] = {99, 1};  // an axis of extent 1 may have any stride
  t.shape = unit_shape;
  t.strides = odd_strides;
  CHECK(tr_dl_tensor_is_contiguous(&t));
  int64_t empty_shape[] = {0, 3};
  int64_t any_strides[] = {5, 7};
  t.shape = empty_shape;
  t.strides = any_strides;
  CHECK(tr_dl_tensor_is_contiguous(&t));
  CHECK(tr_test::error_of(tr_tensor_spec_from_dl(nullptr, &spec)) == "ValueError: tensor is NULL");
  t.device = DLDevice{(DLDeviceType)99, 0};
  CHECK(tr_test::error_of(tr_tensor_spec_from_dl(&t, &spec)).find("no name for DLPack device type 99") !=
        std::string::npos);
}

namespace {
// A float32 cpu DLTensor of `shape` and `strides` (none: compact) over `data`; its vectors live
// as long as the View.
struct View {
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  View(std::vector<int64_t> sh, std::vector<int64_t> st, void *data, uint64_t byte_offset = 0)
      : shape(std::move(sh)), strides(std::move(st)) {
    t.data = data;
    t.device = {kDLCPU, 0};
    t.ndim = (int32_t)shape.size();
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = byte_offset;
  }
};
}  // namespace

TEST_CASE("a row broadcast's repeating block: stride-0 leading axes over contiguous trailing ones") {
  float data[64] = {0};
  auto t = [&](std::vector<int64_t> shape, std::vector<int64_t> strides) {
    View v(std::move(shape), std::move(strides), data);
    return tr_dl_tensor_repeat_period(&v.t);
  };
  CHECK(t({4, 8}, {0, 1}) == 8);          // expand(bias [8], [4, 8])
  CHECK(t({2, 3, 8}, {0, 0, 1}) == 8);    // over two leading axes
  CHECK(t({2, 3, 8}, {0, 8, 1}) == 24);   // a [3, 8] block repeated
  CHECK(t({1, 4, 8}, {99, 0, 1}) == 8);   // an axis of one: any stride
  CHECK(t({4, 8}, {8, 1}) == 0);          // contiguous: nothing repeats
  CHECK(t({4, 8}, {}) == 0);              // no strides: contiguous
  CHECK(t({4, 8}, {0, 2}) == 0);          // the trailing block is strided
  CHECK(t({4, 8}, {16, 1}) == 0);         // a gap, not a broadcast
  CHECK(t({4, 0}, {0, 1}) == 0);          // no elements
  CHECK(t({8}, {0}) == 1);                // one element repeated (a scalar expanded)
}

TEST_CASE("a DLTensor's span: the bytes its elements reach, negative strides below the data address") {
  auto span = [](std::vector<int64_t> shape, std::vector<int64_t> strides, uint64_t offset = 0) {
    View v(std::move(shape), std::move(strides), nullptr, offset);
    int64_t lo = -1, hi = -1;
    int ok = tr_dl_tensor_span(&v.t, &lo, &hi);
    return std::vector<int64_t>{ok, lo, hi};
  };
  CHECK(span({4, 8}, {}) == std::vector<int64_t>{1, 0, 128});            // compact
  CHECK(span({4, 8}, {8, 1}, 16) == std::vector<int64_t>{1, 16, 144});    // byte_offset counted
  CHECK(span({4, 8}, {1, 4}) == std::vector<int64_t>{1, 0, 128});         // a transpose
  CHECK(span({4, 8}, {16, 1}) == std::vector<int64_t>{1, 0, 224});        // gaps between rows
  CHECK(span({4}, {-1}, 12) == std::vector<int64_t>{1, 0, 16});           // reversed
  CHECK(span({4, 8}, {0, 1}) == std::vector<int64_t>{1, 0, 32});          // a broadcast row
  CHECK(span({4, 0}, {8, 1}, 8) == std::vector<int64_t>{1, 8, 8});        // no elements: no bytes
  CHECK(span({4}, {int64_t(1) << 62}) == std::vector<int64_t>{0, 0, 0});  // 3 * 2^62 elements overflow
  CHECK(span({int64_t(1) << 32, int64_t(1) << 32}, {0, 0}) == std::vector<int64_t>{1, 0, 4});  // huge, broadcast
  CHECK(span({int64_t(1) << 40, int64_t(1) << 40}, {}) == std::vector<int64_t>{0, 0, 0});       // huge, compact
}
