// memo_test.cc: memo keys (device, dtype and shape per input; not strides) and the table.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "core/test_support.h"
#include "memo/memo.h"

struct Tensor {
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  Tensor(std::vector<int64_t> s, DLDataType dt = TR_FLOAT16, DLDevice dev = {kDLCPU, 0},
         std::vector<int64_t> st = {})
      : shape(s), strides(st) {
    t.device = dev;
    t.dtype = dt;
    t.ndim = (int32_t)shape.size();
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
};

static tr_memo_key key_of(std::vector<const DLTensor *> inputs) {
  tr_memo_key k;
  REQUIRE(tr_memo_key_from_dl(inputs.data(), inputs.size(), &k));
  return k;
}

static bool same(const tr_memo_key &a, const tr_memo_key &b) {
  return a.hash == b.hash && a.size == b.size && memcmp(a.bytes, b.bytes, a.size) == 0;
}

TEST_CASE("a key covers device, dtype and shape of every input, and not the strides") {
  Tensor x({4, 64}), w({64});
  tr_memo_key base = key_of({&x.t, &w.t});
  Tensor x2({4, 64}), w2({64});
  CHECK(same(base, key_of({&x2.t, &w2.t})));
  Tensor strided({4, 64}, TR_FLOAT16, {kDLCPU, 0}, {1, 4});
  CHECK(same(base, key_of({&strided.t, &w.t})));  // a new stride builds nothing new
  Tensor shape({4, 65}), dtype({4, 64}, TR_BFLOAT16), dev({4, 64}, TR_FLOAT16, {kDLCUDA, 0}),
      dev1({4, 64}, TR_FLOAT16, {kDLCUDA, 1}), rank({256});
  for (Tensor *other : {&shape, &dtype, &dev, &rank}) CHECK_FALSE(same(base, key_of({&other->t, &w.t})));
  CHECK_FALSE(same(key_of({&dev.t}), key_of({&dev1.t})));  // a second card builds again
  CHECK_FALSE(same(base, key_of({&x.t, nullptr})));        // an absent optional input is recorded
  CHECK_FALSE(same(key_of({&x.t, nullptr}), key_of({&x.t})));
}

TEST_CASE("keys that would not fit are refused") {
  std::vector<int64_t> nine(9, 1);
  Tensor big(nine);
  tr_memo_key k;
  std::vector<const DLTensor *> one = {&big.t};
  CHECK(tr_memo_key_from_dl(one.data(), 1, &k) == 0);
  Tensor x({1});
  std::vector<const DLTensor *> many(17, &x.t);
  CHECK(tr_memo_key_from_dl(many.data(), many.size(), &k) == 0);
  Tensor no_dims({2, 3});  // a rank with no shape to read: no key (validation names the tensor)
  no_dims.t.shape = nullptr;
  std::vector<const DLTensor *> shapeless = {&no_dims.t};
  CHECK(tr_memo_key_from_dl(shapeless.data(), 1, &k) == 0);
}

TEST_CASE("the table stores, finds, grows and clears") {
  tr_memo *memo = nullptr;
  tr_test::ok(tr_memo_new(&memo));
  std::vector<Tensor> tensors;
  for (int i = 0; i < 5000; i++) tensors.emplace_back(std::vector<int64_t>{i, 7});
  static int values[5000];
  for (int i = 0; i < 5000; i++) {
    tr_memo_key k = key_of({&tensors[i].t});
    CHECK(tr_memo_find(memo, &k) == nullptr);
    tr_test::ok(tr_memo_insert(memo, &k, &values[i]));
  }
  CHECK(tr_memo_count(memo) == 5000);
  for (int i = 0; i < 5000; i++) {
    tr_memo_key k = key_of({&tensors[i].t});
    REQUIRE(tr_memo_find(memo, &k) == &values[i]);
  }
  int dropped = 0;
  tr_memo_clear(memo, [](void *ctx, void *) { ++*static_cast<int *>(ctx); }, &dropped);
  CHECK(dropped == 5000);
  CHECK(tr_memo_count(memo) == 0);
  tr_memo_key k = key_of({&tensors[3].t});
  CHECK(tr_memo_find(memo, &k) == nullptr);
  tr_test::ok(tr_memo_insert(memo, &k, &values[3]));
  CHECK(tr_memo_find(memo, &k) == &values[3]);
  tr_memo_destroy(&memo);
  CHECK(memo == nullptr);
}
