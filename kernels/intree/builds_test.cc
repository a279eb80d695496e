// builds_test.cc: the artifacts kept per in-tree build identity (type and whole call spec): found
// again for an equal call spec only, copied (the caller's may go), bounded, shared by threads.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/test_support.h"
#include "kernels/intree/builds.h"
#include "kernels/intree/intree.h"

namespace {

struct Spec {
  tr_call_spec call{};
  Spec(const tr_kernel_type *type, const char *device, int64_t row, int32_t arch = 90) {
    tr_device d;
    tr_test::ok(tr_device_parse(device, &d));
    tr_named_value v[2] = {{"dtype", tr_value_dtype(TR_BFLOAT16)}, {"row", tr_value_int(row)}};
    tr_test::ok(tr_call_spec_init(&call, type->interface->request, &d, v, 2));
    tr_device_facts f = {arch, nullptr, 132, 232448};
    tr_call_spec_state_facts(&call, TR_FACT_ARCH | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET, &f);
  }
  ~Spec() { tr_call_spec_clear(&call); }
};

tr_artifact artifact(const char *name, size_t size, uint8_t fill) {
  tr_artifact a;
  memset(&a, 0, sizeof(a));
  snprintf(a.name, sizeof(a.name), "%s", name);
  snprintf(a.entry, sizeof(a.entry), "tr_norm");
  snprintf(a.arch, sizeof(a.arch), "sm_90a");
  a.key[0] = fill;
  a.key[1] = size;
  a.cubin = (uint8_t *)malloc(size);
  memset(a.cubin, fill, size);
  a.size = size;
  return a;
}

const tr_kernel_type *rms_type(size_t i) {
  const tr_intree_op *op = tr_intree_find("RMSNormFwdOp");
  REQUIRE(op != nullptr);
  REQUIRE(i < op->n_types);
  return op->types[i];
}

}  // namespace

TEST_CASE("kept artifacts are found for an equal call spec, as copies, and for nothing else") {
  tr_intree_builds *b = nullptr;
  tr_test::ok(tr_intree_builds_new(16, 1 << 20, &b));
  const tr_kernel_type *looped = rms_type(1), *warp = rms_type(0);
  Spec a(looped, "cuda:0", 4096), same(looped, "cuda:0", 4096), row(looped, "cuda:0", 8192),
      dev(looped, "cuda:1", 4096), arch(looped, "cuda:0", 4096, 80);
  size_t n = 9;
  CHECK(tr_intree_builds_find(b, looped, &a.call, &n) == nullptr);
  CHECK(n == 0);
  tr_artifact arts[2] = {artifact("rms_norm_looped", 100, 7), artifact("rms_norm_looped", 50, 9)};
  int kept = 0;
  tr_test::ok(tr_intree_builds_add(b, looped, &a.call, arts, 2, &kept));
  CHECK(kept == 1);
  for (auto &x : arts) tr_artifact_clear(&x);  // the kept ones are copies
  const tr_artifact *got = tr_intree_builds_find(b, looped, &same.call, &n);
  REQUIRE(got != nullptr);
  REQUIRE(n == 2);
  CHECK(got[0].size == 100);
  CHECK(got[1].size == 50);
  CHECK(got[0].cubin[0] == 7);
  CHECK(got[0].cubin[99] == 7);
  CHECK(got[1].cubin[49] == 9);
  CHECK(std::string(got[0].name) == "rms_norm_looped");
  CHECK(got[0].key[0] == 7);
  // any part of the identity that differs: not found
  CHECK(tr_intree_builds_find(b, looped, &row.call, &n) == nullptr);
  CHECK(tr_intree_builds_find(b, looped, &dev.call, &n) == nullptr);
  CHECK(tr_intree_builds_find(b, looped, &arch.call, &n) == nullptr);
  CHECK(tr_intree_builds_find(b, warp, &a.call, &n) == nullptr);
  // the same identity again: the first is kept, nothing added
  tr_artifact again = artifact("rms_norm_looped", 10, 1);
  tr_test::ok(tr_intree_builds_add(b, looped, &a.call, &again, 1, &kept));
  CHECK(kept == 0);
  tr_artifact_clear(&again);
  CHECK(tr_intree_builds_find(b, looped, &a.call, &n) == got);
  tr_intree_builds_stats s = tr_intree_builds_get_stats(b);
  CHECK(s.entries == 1);
  CHECK(s.bytes == 150);
  CHECK(s.hits == 2);
  tr_intree_builds_destroy(&b);
  CHECK(b == nullptr);
  tr_intree_builds_destroy(&b);  // NULL: nothing
}

TEST_CASE("past either limit nothing more is kept, and what was kept stays") {
  tr_intree_builds *b = nullptr;
  tr_test::ok(tr_intree_builds_new(2, 300, &b));
  const tr_kernel_type *looped = rms_type(1);
  Spec r1(looped, "cuda:0", 1), r2(looped, "cuda:0", 2), r3(looped, "cuda:0", 3), r4(looped, "cuda:0", 4);
  int kept = -1;
  auto add = [&](const Spec &s, size_t size) {
    tr_artifact a = artifact("rms_norm_looped", size, 1);
    tr_test::ok(tr_intree_builds_add(b, looped, &s.call, &a, 1, &kept));
    tr_artifact_clear(&a);
    return kept;
  };
  CHECK(add(r1, 200) == 1);
  CHECK(add(r2, 101) == 0);  // 301 bytes: over
  CHECK(add(r2, 100) == 1);  // 300: at the limit
  CHECK(add(r3, 1) == 0);    // a third entry: over
  size_t n = 0;
  CHECK(tr_intree_builds_find(b, looped, &r1.call, &n) != nullptr);
  CHECK(tr_intree_builds_find(b, looped, &r2.call, &n) != nullptr);
  CHECK(tr_intree_builds_find(b, looped, &r3.call, &n) == nullptr);
  tr_artifact none[3];
  CHECK(tr_test::error_of(tr_intree_builds_add(b, looped, &r4.call, none, 3, &kept)) ==
        "ValueError: kernel 'rms_norm_looped': 1 or 2 artifacts are kept per build, got 3");
  CHECK(kept == 0);
  tr_artifact empty = artifact("rms_norm_looped", 8, 1);
  free(empty.cubin);
  empty.cubin = nullptr;
  CHECK(tr_test::error_of(tr_intree_builds_add(b, looped, &r4.call, &empty, 1, &kept)) ==
        "ValueError: kernel 'rms_norm_looped': artifact 0 has no cubin (8 bytes)");
  CHECK(kept == 0);
  CHECK(tr_intree_builds_get_stats(b).entries == 2);
  tr_intree_builds_destroy(&b);
}

TEST_CASE("threads adding and finding the same identities keep one entry each") {
  tr_intree_builds *b = nullptr;
  tr_test::ok(tr_intree_builds_new(64, 1 << 20, &b));
  const tr_kernel_type *looped = rms_type(1);
  std::vector<std::thread> threads;
  std::vector<int> found(4, 0);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; i++) {
        Spec s(looped, "cuda:0", 1 + i % 8);
        size_t n = 0;
        const tr_artifact *got = tr_intree_builds_find(b, looped, &s.call, &n);
        if (got != nullptr) {
          found[t] += got[0].cubin[0] == (uint8_t)(1 + i % 8);
          continue;
        }
        tr_artifact a = artifact("rms_norm_looped", 64, (uint8_t)(1 + i % 8));
        tr_status *st = tr_intree_builds_add(b, looped, &s.call, &a, 1, nullptr);
        tr_status_destroy(&st);
        tr_artifact_clear(&a);
      }
    });
  }
  for (auto &th : threads) th.join();
  tr_intree_builds_stats s = tr_intree_builds_get_stats(b);
  CHECK(s.entries == 8);
  CHECK(s.bytes == 8 * 64);
  int total = 0;
  for (int f : found) total += f;
  CHECK(total == (int)s.hits);  // every artifact found was the one kept for its row
  CHECK(total >= 4 * 200 - 8 * 4);
  tr_intree_builds_destroy(&b);
}
