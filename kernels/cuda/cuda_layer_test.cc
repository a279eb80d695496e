// cuda_layer_test.cc: the CUDA layer's parts that need no GPU: launch geometry, a pool's life
// without blocks, allocations and module loads failing cleanly where no driver is, and a
// kernel's cache of tensor maps (its keys, and threads sharing it).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/test_support.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/map_cache.h"
#include "kernels/cuda/modules.h"
#include "kernels/cuda/pool.h"
#include "kernels/cuda/timing.h"
#include "kernels/cuda/toolkit.h"

TEST_CASE("a grid over rows covers every row, in x up to 2^30 blocks") {
  uint32_t gx = 7, gy = 7;
  tr_cuda_rows_grid(0, 4, &gx, &gy);
  CHECK((gx == 0 && gy == 0));
  tr_cuda_rows_grid(10, 4, &gx, &gy);
  CHECK((gx == 3 && gy == 1));
  tr_cuda_rows_grid(8, 4, &gx, &gy);
  CHECK((gx == 2 && gy == 1));
  const int64_t many = (int64_t)1 << 33;
  tr_cuda_rows_grid(many, 1, &gx, &gy);
  CHECK(gx == (1u << 30));
  CHECK((int64_t)gx * gy >= many);
  CHECK((int64_t)gx * (gy - 1) < many);
}

TEST_CASE("a grid over elements rounds up and stops at its cap") {
  CHECK(tr_cuda_elements_grid(0, 256, 100) == 0);
  CHECK(tr_cuda_elements_grid(1, 256, 100) == 1);
  CHECK(tr_cuda_elements_grid(257, 256, 100) == 2);
  CHECK(tr_cuda_elements_grid(256 * 1000, 256, 100) == 100);
}

TEST_CASE("a launch over no rows launches nothing") {
  // no function, no driver needed: nothing is asked of the driver for zero rows
  CHECK(tr_cuda_launch_rows(nullptr, "none", 0, 1, 64, nullptr, nullptr, 0) == nullptr);
}

namespace {

struct Runs {
  std::vector<int> reps;
  int fail_at = -1;
};

tr_status *counted_run(void *ctx, int rep, tr_cu_stream) {
  Runs *r = static_cast<Runs *>(ctx);
  r->reps.push_back(rep);
  return rep == r->fail_at ? TR_STATUS(TR_BACKEND, "run %d failed", rep) : nullptr;
}

}  // namespace

TEST_CASE("a timed run's failure in the warm-ups stops it with that error, before any event") {
  // no driver needed: the events are touched only from the first timed run on
  Runs runs;
  runs.fail_at = 1;
  float us = 7.f;
  std::string e = tr_test::error_of(tr_cuda_time_runs(counted_run, &runs, TR_CUDA_TUNE_WARMUPS, 20, nullptr, nullptr,
                                                      nullptr, &us));
  CHECK(e.find("run 1 failed") != std::string::npos);
  CHECK(runs.reps == std::vector<int>{0, 1});  // counted from 0 over the warm-ups
  CHECK(us == 0.f);
}

namespace {

// TILERUN_CUDA_PATH set (NULL: unset) for a scope, then as it was.
struct CudaPath {
  explicit CudaPath(const char *value) {
    const char *was = tr_plat_getenv("TILERUN_CUDA_PATH");
    had = was != nullptr;
    if (had) saved = was;
    tr_test::ok(tr_plat_setenv("TILERUN_CUDA_PATH", value));
  }
  ~CudaPath() { tr_test::ok(tr_plat_setenv("TILERUN_CUDA_PATH", had ? saved.c_str() : nullptr)); }
  bool had = false;
  std::string saved;
};

std::vector<std::string> places(const char *stem, int unversioned, const char *cuda_path) {
  CudaPath set(cuda_path);
  tr_cuda_lib_places p;
  tr_cuda_lib_places_of(stem, unversioned, &p);
  return std::vector<std::string>(p.at, p.at + p.n);
}

std::vector<std::string> g_notes;
void take_note(const char *text) { g_notes.push_back(text); }
int refuse(tr_plat_lib *) { return 0; }

}  // namespace

TEST_CASE("a toolkit library is looked for by soname, then under TILERUN_CUDA_PATH, then /usr/local/cuda") {
  using v = std::vector<std::string>;
  CHECK(places("libnvrtc", 1, "/opt/cuda") == v{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                                "/opt/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.13"});
  CHECK(places("libcublasLt", 0, nullptr) == v{"libcublasLt.so.13", "libcublasLt.so.12",
                                                "/usr/local/cuda/lib64/libcublasLt.so.13"});
  CHECK(places("libcublasLt", 0, "none") == places("libcublasLt", 0, ""));
  CHECK(places("libcublasLt", 0, "none").size() == 3);
}

TEST_CASE("where no place serves, each is noted with the loader's text, and none is returned") {
  g_notes.clear();
  {
    CudaPath set("/nonexistent-cuda");
    CHECK(tr_cuda_lib_open_first("libtilerun-no-such-lib", 1, refuse, take_note) == nullptr);
  }
  REQUIRE(g_notes.size() == 5);
  CHECK(g_notes[0].find("libtilerun-no-such-lib.so.13") != std::string::npos);
  CHECK(g_notes[2].find("libtilerun-no-such-lib.so") != std::string::npos);
  CHECK(g_notes[3].find("/nonexistent-cuda/lib64/libtilerun-no-such-lib.so.13") != std::string::npos);
  CHECK(g_notes[4].find("/usr/local/cuda/lib64/libtilerun-no-such-lib.so.13") != std::string::npos);
}

TEST_CASE("pools count on their own and over the process") {
  tr_cuda_pool *a = nullptr, *b = nullptr;
  tr_test::ok(tr_cuda_pool_new(&a));
  tr_test::ok(tr_cuda_pool_new(&b));
  REQUIRE(a != nullptr);
  REQUIRE(a != b);
  tr_cuda_pool_stats sa = tr_cuda_pool_get_stats(a), all = tr_cuda_pool_get_stats(nullptr);
  CHECK(sa.kept == 0);
  CHECK(sa.parked == 0);
  CHECK(all.kept == 0);
  tr_cuda_origin none = {a, nullptr, 0, 0};
  tr_cuda_pool_free(0, nullptr, 16, &none);  // a NULL block: nothing, and no reference dropped
  tr_cuda_pool_trim(a);
  tr_cuda_pool_trim(nullptr);
  tr_cuda_pool_destroy(&a);
  CHECK(a == nullptr);
  tr_cuda_pool_destroy(&a);  // NULL again: nothing
  tr_cuda_pool_destroy(&b);
}

TEST_CASE("where no CUDA driver is, an allocation and a module load fail naming it") {
  if (tr_cu_device_count() > 0) return;  // the GPU machine runs tests/pool_scope_test instead
  tr_cuda_pool *p = nullptr;
  tr_test::ok(tr_cuda_pool_new(&p));
  void *block = reinterpret_cast<void *>(1);
  tr_cuda_origin origin;
  std::string e = tr_test::error_of(tr_cuda_pool_alloc(p, 0, 64, &block, &origin));
  CHECK(e.find("BackendError") == 0);
  CHECK(e.find("CUDA driver") != std::string::npos);
  CHECK(block == nullptr);
  CHECK(tr_cuda_pool_get_stats(p).kept == 0);
  e = tr_test::error_of(tr_cuda_pool_alloc(p, 64, 64, &block, &origin));
  CHECK(e.find("cuda device index 64 is outside 0..63") != std::string::npos);
  tr_cuda_pool_destroy(&p);

  uint64_t loaded = tr_cuda_modules_loaded();
  tr_artifact art = {};
  snprintf(art.name, sizeof(art.name), "k");
  snprintf(art.entry, sizeof(art.entry), "k");
  static uint8_t cubin[] = "not a cubin";
  art.cubin = cubin;
  art.size = sizeof(cubin);
  tr_cuda_loaded out;
  e = tr_test::error_of(tr_cuda_module_load(0, &art, 1, nullptr, &out));
  CHECK(e.find("CUDA driver") != std::string::npos);
  CHECK(out.function == nullptr);
  CHECK(tr_cuda_modules_loaded() == loaded);
}

namespace {

// Maps whose every byte is `fill` (a map's contents are the driver's: any bytes do here).
void fill_maps(tr_cu_tensor_map maps[2], unsigned char fill) { std::memset(maps, fill, 2 * sizeof(tr_cu_tensor_map)); }

bool maps_are(const tr_cu_tensor_map maps[2], unsigned char fill) {
  const unsigned char *b = reinterpret_cast<const unsigned char *>(maps);
  for (size_t i = 0; i < 2 * sizeof(tr_cu_tensor_map); i++) {
    if (b[i] != fill) return false;
  }
  return true;
}

char g_k[64], g_v[64], g_other[64];

// bs1's key for a cache of S rows of 8 KV heads of 128 dims
tr_cuda_map_key key_of(const void *k, const void *v, uint64_t S) {
  return tr_cuda_map_key{{k, v}, {128, 8, S}, {256, 8 * 256}};
}

}  // namespace

TEST_CASE("map keys are equal field by field, every field counted") {
  const tr_cuda_map_key a = key_of(g_k, g_v, 4096);
  tr_cuda_map_key b = a;
  CHECK(tr_cuda_map_key_equal(&a, &b));
  b.base[0] = g_other;
  CHECK_FALSE(tr_cuda_map_key_equal(&a, &b));
  b = a;
  b.base[1] = g_other;
  CHECK_FALSE(tr_cuda_map_key_equal(&a, &b));
  b = a;
  b.base[0] = g_v;  // the caches swapped
  b.base[1] = g_k;
  CHECK_FALSE(tr_cuda_map_key_equal(&a, &b));
  for (int i = 0; i < 3; i++) {
    b = a;
    b.dims[i] += 1;
    CHECK_FALSE(tr_cuda_map_key_equal(&a, &b));
  }
  for (int i = 0; i < 2; i++) {
    b = a;
    b.strides[i] += 16;
    CHECK_FALSE(tr_cuda_map_key_equal(&a, &b));
  }
}

TEST_CASE("a map cache gives back the maps kept for its key only, and keeps the last put") {
  tr_cuda_map_cache *c = nullptr;
  tr_test::ok(tr_cuda_map_cache_new(&c));
  const tr_cuda_map_key a = key_of(g_k, g_v, 4096), longer = key_of(g_k, g_v, 4097);
  tr_cu_tensor_map got[2], put[2];
  fill_maps(got, 0x11);
  CHECK_FALSE(tr_cuda_map_cache_get(c, &a, got));  // empty
  CHECK(maps_are(got, 0x11));                      // untouched
  fill_maps(put, 0xa5);
  tr_cuda_map_cache_put(c, &a, put);
  CHECK(tr_cuda_map_cache_get(c, &a, got));
  CHECK(maps_are(got, 0xa5));
  fill_maps(got, 0x11);
  CHECK_FALSE(tr_cuda_map_cache_get(c, &longer, got));  // a decode step on a longer cache
  CHECK(maps_are(got, 0x11));
  fill_maps(put, 0x3c);
  tr_cuda_map_cache_put(c, &longer, put);
  CHECK_FALSE(tr_cuda_map_cache_get(c, &a, got));  // one entry: a's went
  CHECK(tr_cuda_map_cache_get(c, &longer, got));
  CHECK(maps_are(got, 0x3c));
  tr_cuda_map_cache_destroy(&c);
  CHECK(c == nullptr);
  tr_cuda_map_cache_destroy(&c);  // NULL: nothing
  tr_cuda_map_cache_destroy(nullptr);
}

namespace {

// An encoder for fetch: counts its calls (ctx: an int), fills the maps with 0x5a, or fails where
// the key's cache is g_other
tr_status *counting_encoder(const void *ctx, const tr_cuda_map_key *key, tr_cu_tensor_map out[2]) {
  ++*static_cast<int *>(const_cast<void *>(ctx));
  if (key->base[0] == g_other) return TR_STATUS(TR_BACKEND, "no map of this cache");
  fill_maps(out, 0x5a);
  return nullptr;
}

}  // namespace

TEST_CASE("fetch encodes a key the cache lacks once, keeps it, and keeps nothing when encoding fails") {
  tr_cuda_map_cache *c = nullptr;
  tr_test::ok(tr_cuda_map_cache_new(&c));
  const tr_cuda_map_key a = key_of(g_k, g_v, 4096), bad = key_of(g_other, g_v, 4096);
  int calls = 0;
  tr_cu_tensor_map got[2];
  fill_maps(got, 0x11);
  tr_test::ok(tr_cuda_map_cache_fetch(c, &a, counting_encoder, &calls, got));
  CHECK(calls == 1);
  CHECK(maps_are(got, 0x5a));
  fill_maps(got, 0x11);
  tr_test::ok(tr_cuda_map_cache_fetch(c, &a, counting_encoder, &calls, got));  // kept: no encoding
  CHECK(calls == 1);
  CHECK(maps_are(got, 0x5a));
  tr_status *s = tr_cuda_map_cache_fetch(c, &bad, counting_encoder, &calls, got);
  REQUIRE(s != nullptr);
  CHECK(std::string(tr_status_message(s)) == "no map of this cache");
  tr_status_destroy(&s);
  CHECK(calls == 2);
  fill_maps(got, 0x11);
  CHECK(tr_cuda_map_cache_get(c, &a, got));  // the failure kept nothing in a's place
  CHECK(maps_are(got, 0x5a));
  tr_cuda_map_cache_destroy(&c);
}

TEST_CASE("threads sharing a map cache never get another key's maps, nor half of two") {
  tr_cuda_map_cache *c = nullptr;
  tr_test::ok(tr_cuda_map_cache_new(&c));
  const tr_cuda_map_key keys[2] = {key_of(g_k, g_v, 1000), key_of(g_k, g_v, 2000)};
  const unsigned char fills[2] = {0x5a, 0xc3};
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      tr_cu_tensor_map maps[2];
      for (int i = 0; i < 20000; i++) {
        const int which = (i / 2 + t) % 2;  // each key twice running: a thread alone hits too
        if (tr_cuda_map_cache_get(c, &keys[which], maps)) {
          hits++;
          if (!maps_are(maps, fills[which])) wrong++;
        } else {
          fill_maps(maps, fills[which]);  // "encoded", then kept
          tr_cuda_map_cache_put(c, &keys[which], maps);
        }
      }
    });
  }
  for (auto &th : threads) th.join();
  CHECK(wrong.load() == 0);
  CHECK(hits.load() > 0);
  tr_cuda_map_cache_destroy(&c);
}
