// cpu_pool_test.cc: the CPU kernels' parallel loop (a persistent pool): every item run once, by
// threads that outlive a call, errors passed up, concurrent and nested callers, kernels called
// from several threads at once.
#include <catch2/catch.hpp>

#include "core/test_support.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "backends/cpu/kernels/internal.h"
}

namespace {

using tr_test::ok;

// Counts each item it runs; ranges are long enough (TR_CPU_PARALLEL_MIN / 4 work each) that the
// loop spreads them.
struct Counts {
  std::vector<std::atomic<int>> runs;
  explicit Counts(size_t n) : runs(n) {}
};

thread_local int t_ranges_run = 0;  // ranges this thread has run, over its whole life
std::atomic<int> g_most_ranges_on_a_worker{0};
std::thread::id g_main_thread;

tr_status *count_items(void *ctx, int64_t begin, int64_t end) {
  Counts *counts = static_cast<Counts *>(ctx);
  for (int64_t i = begin; i < end; i++) counts->runs[i]++;
  ++t_ranges_run;
  if (std::this_thread::get_id() != g_main_thread) {
    int seen = g_most_ranges_on_a_worker.load();
    while (t_ranges_run > seen && !g_most_ranges_on_a_worker.compare_exchange_weak(seen, t_ranges_run)) {
    }
  }
  volatile double spin = 0;  // a little work per range, so workers get to take some
  for (int i = 0; i < 2000; i++) spin = spin + i;
  return nullptr;
}

void check_each_once(const Counts &counts, int64_t items) {
  for (int64_t i = 0; i < items; i++) {
    if (counts.runs[i].load() != 1) {
      FAIL("item " << i << " ran " << counts.runs[i].load() << " times");
    }
  }
}

}  // namespace

TEST_CASE("the default thread count is the processors this process may use") {
  // TILERUN_CPU_THREADS is unset in tests.
  CHECK(tr_cpu_default_threads() >= 1);
  CHECK(tr_cpu_default_threads() <= TR_CPU_MAX_THREADS);
  unsigned hw = std::thread::hardware_concurrency();
  if (hw != 0 && hw <= TR_CPU_MAX_THREADS) CHECK(tr_cpu_default_threads() <= static_cast<int>(hw));
}

TEST_CASE("many calls run every item exactly once, on threads that persist across calls") {
  g_main_thread = std::this_thread::get_id();
  g_most_ranges_on_a_worker = 0;
  const int64_t items = 64;
  const int64_t work = TR_CPU_PARALLEL_MIN / 4;  // 16 * the minimum in all: parallel
  for (int threads : {0, 1, 2, 3, 7, TR_CPU_MAX_THREADS, TR_CPU_MAX_THREADS + 5}) {
    INFO("threads " << threads);
    for (int call = 0; call < 300; call++) {
      Counts counts(items);
      ok(tr__cpu_parallel_for(threads, items, work, count_items, &counts));
      check_each_once(counts, items);
    }
  }
  if (tr_cpu_default_threads() > 1) {
    // A thread started per call runs one range and ends; a pool's worker runs many.
    CHECK(g_most_ranges_on_a_worker.load() > 1);
  } else {
    CHECK(g_most_ranges_on_a_worker.load() == 0);  // one processor: all inline
  }
}

TEST_CASE("small work runs on the calling thread") {
  g_main_thread = std::this_thread::get_id();
  g_most_ranges_on_a_worker = 0;
  for (int call = 0; call < 1000; call++) {
    Counts counts(16);
    ok(tr__cpu_parallel_for(0, 16, TR_CPU_PARALLEL_MIN / 16, count_items, &counts));  // = min
    check_each_once(counts, 16);
  }
  CHECK(g_most_ranges_on_a_worker.load() == 0);
  Counts none(1);
  ok(tr__cpu_parallel_for(0, 0, 1, count_items, &none));  // no items: fn never runs
  CHECK(none.runs[0].load() == 0);
}

namespace {

// Fails the ranges that hold item 5 or item 40, each with its own message.
tr_status *fail_some(void *ctx, int64_t begin, int64_t end) {
  (void)ctx;
  if (begin <= 5 && 5 < end) return TR_STATUS(TR_VALUE, "range with 5 failed");
  if (begin <= 40 && 40 < end) return TR_STATUS(TR_VALUE, "range with 40 failed");
  return nullptr;
}

}  // namespace

TEST_CASE("the first range's error comes back; the others are freed") {
  for (int threads : {1, 2, 3, 8}) {
    INFO("threads " << threads);
    tr_status *status = tr__cpu_parallel_for(threads, 64, TR_CPU_PARALLEL_MIN, fail_some, nullptr);
    REQUIRE(status != nullptr);
    CHECK(std::string(tr_status_message(status)) == "range with 5 failed");
    tr_status_destroy(&status);
  }
}

namespace {

struct Nested {
  Counts inner{64 * 64};
};

// Each outer item runs an inner parallel loop over its 64 inner items.
tr_status *run_nested(void *ctx, int64_t begin, int64_t end) {
  Nested *nested = static_cast<Nested *>(ctx);
  for (int64_t i = begin; i < end; i++) {
    struct Slice {
      Counts *counts;
      int64_t base;
    } slice{&nested->inner, i * 64};
    TR_RETURN_IF_ERROR(tr__cpu_parallel_for(
        0, 64, TR_CPU_PARALLEL_MIN,
        [](void *c, int64_t b, int64_t e) -> tr_status * {
          Slice *s = static_cast<Slice *>(c);
          for (int64_t j = b; j < e; j++) s->counts->runs[s->base + j]++;
          return nullptr;
        },
        &slice));
  }
  return nullptr;
}

}  // namespace

TEST_CASE("a range that runs a parallel loop itself runs it inline, without deadlock") {
  for (int call = 0; call < 50; call++) {
    Nested nested;
    ok(tr__cpu_parallel_for(0, 64, TR_CPU_PARALLEL_MIN, run_nested, &nested));
    check_each_once(nested.inner, 64 * 64);
  }
}

TEST_CASE("concurrent callers from several threads each get every item run once") {
  const int callers = 6, calls = 200;
  const int64_t items = 48;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; c++) {
    threads.emplace_back([&, c] {
      for (int call = 0; call < calls; call++) {
        Counts counts(items);
        tr_status *status = tr__cpu_parallel_for(c % 3, items, TR_CPU_PARALLEL_MIN / 4,
                                                 count_items, &counts);
        if (status != nullptr) {
          tr_status_destroy(&status);
          bad++;
          continue;
        }
        for (int64_t i = 0; i < items; i++) {
          if (counts.runs[i].load() != 1) bad++;
        }
      }
    });
  }
  for (auto &t : threads) t.join();
  CHECK(bad.load() == 0);
}

TEST_CASE("kernels called from several threads at once give the single-thread bytes") {
  const tr_dtype f32{kDLFloat, 32, 1}, bf16{kDLBfloat, 16, 1};
  const int64_t M = 150, N = 130, K = 170, n = 1 << 18;
  std::vector<float> a(M * K), b(K * N), x(n);
  for (size_t i = 0; i < a.size(); i++) a[i] = static_cast<float>((i * 7919) % 101) / 50 - 1;
  for (size_t i = 0; i < b.size(); i++) b[i] = static_cast<float>((i * 104729) % 97) / 48 - 1;
  for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>(i % 1000) / 250 - 2;
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  for (size_t i = 0; i < a.size(); i++) ah[i] = tr_cpu_f32_to_bf16(a[i]);
  for (size_t i = 0; i < b.size(); i++) bh[i] = tr_cpu_f32_to_bf16(b[i]);
  std::vector<float> want_d(M * N), want_y(n);
  std::vector<uint16_t> want_dh(M * N);
  ok(tr_cpu_gemm(a.data(), b.data(), want_d.data(), M, N, K, 0, 0, f32, 1));
  ok(tr_cpu_gemm(ah.data(), bh.data(), want_dh.data(), M, N, K, 0, 0, bf16, 1));
  ok(tr_cpu_rms_norm(x.data(), nullptr, want_y.data(), n / 1024, 1024, f32, 1e-6, 1));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < 4; c++) {
    threads.emplace_back([&] {
      std::vector<float> d(M * N), y(n);
      std::vector<uint16_t> dh(M * N);
      for (int call = 0; call < 20; call++) {
        tr_status *s1 = tr_cpu_gemm(a.data(), b.data(), d.data(), M, N, K, 0, 0, f32, 0);
        tr_status *s2 = tr_cpu_gemm(ah.data(), bh.data(), dh.data(), M, N, K, 0, 0, bf16, 0);
        tr_status *s3 = tr_cpu_rms_norm(x.data(), nullptr, y.data(), n / 1024, 1024, f32, 1e-6, 0);
        if (s1 || s2 || s3) bad++;
        tr_status_destroy(&s1);
        tr_status_destroy(&s2);
        tr_status_destroy(&s3);
        if (d != want_d || dh != want_dh || y != want_y) bad++;
      }
    });
  }
  for (auto &t : threads) t.join();
  CHECK(bad.load() == 0);
}
