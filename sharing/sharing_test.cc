// sharing_test.cc: the shared-memory allocator, references, and mappings of references (the
// launch process's side, here mapped again in this process: a second mapping of the segment).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/test_support.h"
#include "sharing/sharing.h"

using tr_test::error_of;
using tr_test::ok;

static const DLDevice kCpu = {kDLCPU, 0};

TEST_CASE("shared memory: allocated, named by reference, mapped elsewhere, freed") {
  void *p = nullptr;
  ok(tr_share_alloc(4096 + 100, &p));
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  CHECK(tr_share_owns(p));
  CHECK(tr_share_owns(static_cast<char *>(p) + 4195));
  CHECK_FALSE(tr_share_owns(static_cast<char *>(p) + 4196));

  // A tensor starting 96 bytes in: its reference names the segment and the offset.
  float *data = reinterpret_cast<float *>(static_cast<char *>(p) + 96);
  for (int i = 0; i < 1000; i++) data[i] = static_cast<float>(i) * 0.5f;
  tr_share_ref ref;
  ok(tr_share_ref_of(kCpu, data, &ref));
  CHECK(ref.kind == TR_SHARE_SHM);
  CHECK(ref.offset == 96);
  CHECK(ref.size == 4196);
  CHECK(std::string(ref.name).rfind("/tilerun-", 0) == 0);

  tr_share_maps *maps = nullptr;
  ok(tr_share_maps_new(&maps));
  tr_share_maps_lock(maps);
  void *there = nullptr;
  ok(tr_share_map(maps, kCpu, &ref, 0, 4000, &there));
  REQUIRE(there != nullptr);
  CHECK(there != static_cast<void *>(data));  // another mapping of the same bytes
  CHECK(static_cast<float *>(there)[999] == 499.5f);
  static_cast<float *>(there)[3] = -7.0f;  // written there, seen here
  CHECK(data[3] == -7.0f);
  void *again = nullptr;
  ok(tr_share_map(maps, kCpu, &ref, 0, 4000, &again));
  CHECK(again == there);  // kept
  CHECK(tr_share_maps_count(maps) == 1);

  // Bytes outside the segment are refused, naming the extent and the segment.
  void *out = nullptr;
  std::string e = error_of(tr_share_map(maps, kCpu, &ref, 0, 4101, &out));
  CHECK(e.find("ValueError") == 0);
  CHECK(e.find("outside it") != std::string::npos);
  CHECK(e.find(ref.name) != std::string::npos);
  CHECK(out == nullptr);
  CHECK(error_of(tr_share_map(maps, kCpu, &ref, -97, 10, &out)).find("outside it") != std::string::npos);
  ok(tr_share_map(maps, kCpu, &ref, -96, 4100, &out));  // exactly the segment
  CHECK(error_of(tr_share_map(maps, kCpu, &ref, INT64_MIN, 4, &out)).find("outside it") != std::string::npos);
  CHECK(error_of(tr_share_map(maps, kCpu, &ref, 8, 4, &out)).find("outside it") != std::string::npos);
  CHECK(error_of(tr_share_map(maps, kCpu, &ref, 0, INT64_MAX, &out)).find("outside it") != std::string::npos);
  tr_share_ref past = ref;
  past.offset = 5000;
  CHECK(error_of(tr_share_map(maps, kCpu, &past, 0, 1, &out)).find("outside it") != std::string::npos);

  // A cpu tensor with a CUDA IPC reference, or a device that cannot share, is refused.
  tr_share_ref wrong = ref;
  wrong.kind = TR_SHARE_CUDA_IPC;
  CHECK(error_of(tr_share_map(maps, kCpu, &wrong, 0, 4, &out)) ==
        "ValueError: a cpu tensor needs shared (shm) memory, and its reference is CUDA IPC");
  CHECK(error_of(tr_share_map(maps, DLDevice{kDLExtDev, 0}, &ref, 0, 4, &out)).find("cannot come from another process") !=
        std::string::npos);
  tr_share_maps_unlock(maps);

  // Freed: kept for the next allocation of the same size, zero-filled again, under the same name
  // (so the mapping elsewhere is reused); another size gets a new segment.
  tr_share_free(p);
  CHECK_FALSE(tr_share_owns(p));
  void *same = nullptr;
  ok(tr_share_alloc(4196, &same));
  tr_share_ref sref;
  ok(tr_share_ref_of(kCpu, same, &sref));
  CHECK(std::string(sref.name) == ref.name);
  CHECK(static_cast<float *>(same)[30] == 0.0f);
  void *q = nullptr;
  ok(tr_share_alloc(64, &q));
  tr_share_ref qref;
  ok(tr_share_ref_of(kCpu, q, &qref));
  CHECK(std::string(qref.name) != ref.name);

  // A segment whose name is gone is dropped when another is mapped by a later launch, never
  // while the launch that uses it runs; then it cannot be mapped again.
  char name[TR_PLAT_SHM_NAME_MAX];
  snprintf(name, sizeof(name), "/tilerun-test-%lld", (long long)tr_plat_process_id());
  void *raw = nullptr;
  ok(tr_plat_shm_create(name, 256, &raw));
  static_cast<int *>(raw)[0] = 4242;
  tr_share_ref gone{};
  gone.kind = TR_SHARE_SHM;
  snprintf(gone.name, sizeof(gone.name), "%s", name);
  gone.size = 256;
  tr_share_maps_lock(maps);
  void *in_use = nullptr;
  ok(tr_share_map(maps, kCpu, &gone, 0, 256, &in_use));
  CHECK(tr_share_maps_count(maps) == 2);
  tr_plat_shm_unlink(name);
  ok(tr_share_map(maps, kCpu, &qref, 0, 64, &out));  // q's segment (kept by the allocator): a new mapping
  CHECK(tr_share_maps_count(maps) == 3);              // the gone one stays: this launch uses it
  CHECK(static_cast<int *>(in_use)[0] == 4242);
  tr_share_maps_unlock(maps);
  void *r = nullptr;
  ok(tr_share_alloc(96, &r));
  tr_share_ref rref;
  ok(tr_share_ref_of(kCpu, r, &rref));
  tr_share_maps_lock(maps);
  ok(tr_share_map(maps, kCpu, &rref, 0, 64, &out));  // another launch maps a new one: the gone one goes
  CHECK(tr_share_maps_count(maps) == 3);
  e = error_of(tr_share_map(maps, kCpu, &gone, 0, 4, &out));
  CHECK(e.find("IOError") == 0);
  CHECK(e.find(name) != std::string::npos);
  // Only tilerun's segments are mapped; a tensor out of bounds leaves nothing behind.
  tr_share_ref other = gone;
  snprintf(other.name, sizeof(other.name), "/someone-else");
  CHECK(error_of(tr_share_map(maps, kCpu, &other, 0, 4, &out)) ==
        "ValueError: shared memory '/someone-else' is not tilerun's (its names start with '/tilerun-')");
  tr_share_maps_unlock(maps);
  tr_share_maps_destroy(&maps);
  tr_share_free(q);
  tr_share_free(r);
  tr_share_free(same);
  tr_plat_shm_unmap(raw, 256);
  tr_share_free(nullptr);
  int local = 0;
  tr_share_free(&local);  // not ours: ignored
}

TEST_CASE("memory tilerun cannot share is named, with the reason") {
  void *heap = std::calloc(1, 64);
  tr_share_ref ref;
  std::string e = error_of(tr_share_ref_of(kCpu, heap, &ref));
  CHECK(e.find("ValueError: cpu memory at ") == 0);
  CHECK(e.find("is not from tilerun's shared-memory allocator (tr_alloc_shared)") != std::string::npos);
  CHECK(ref.kind == TR_SHARE_NONE);
  e = error_of(tr_share_ref_of(DLDevice{kDLExtDev, 0}, heap, &ref));
  CHECK(e.find("DLPack device type 12 cannot be shared") != std::string::npos);
  std::free(heap);
  void *p = nullptr;
  CHECK(error_of(tr_share_alloc(0, &p)) == "ValueError: shared memory: an allocation of 0 bytes");
}

TEST_CASE("at most 64 mappings are kept: the oldest is dropped") {
  tr_share_maps *maps = nullptr;
  ok(tr_share_maps_new(&maps));
  void *blocks[70];
  for (int i = 0; i < 70; i++) {  // a launch each
    ok(tr_share_alloc(128, &blocks[i]));
    static_cast<int *>(blocks[i])[0] = i;
    tr_share_ref ref;
    ok(tr_share_ref_of(kCpu, blocks[i], &ref));
    void *there = nullptr;
    tr_share_maps_lock(maps);
    ok(tr_share_map(maps, kCpu, &ref, 0, 4, &there));
    CHECK(static_cast<int *>(there)[0] == i);
    tr_share_maps_unlock(maps);
  }
  CHECK(tr_share_maps_count(maps) == 64);
  // One launch using more than 64 blocks is refused, not given a mapping it could lose.
  tr_share_maps_lock(maps);
  std::string e;
  for (int i = 0; i < 70 && e.empty(); i++) {
    tr_share_ref ref;
    ok(tr_share_ref_of(kCpu, blocks[i], &ref));
    void *there = nullptr;
    tr_status *s = tr_share_map(maps, kCpu, &ref, 0, 4, &there);
    if (s != nullptr) e = error_of(s);
  }
  CHECK(e == "ValueError: a launch reaches more than 64 shared memory blocks");
  tr_share_maps_unlock(maps);
  tr_share_maps_destroy(&maps);
  for (void *b : blocks) tr_share_free(b);
}
