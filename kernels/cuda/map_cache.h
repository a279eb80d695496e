/* map_cache.h: the pair of TMA tensor maps a kernel encoded last, kept for its next launch on the
 * same tensors (a decode step replayed on one pair of caches), so that launch copies them instead
 * of asking the driver again (cuTensorMapEncodeTiled: host work on every call). The key is what
 * the maps were encoded from but for the kernel's own constants (box, swizzle, element type): a
 * map is a function of those alone, so a hit is the map an encoding would give, even where the
 * memory was freed and taken again at the same address. Thread-safe (a built kernel is shared:
 * get and put copy under the cache's lock). */
#ifndef TILERUN_KERNELS_CUDA_MAP_CACHE_H_
#define TILERUN_KERNELS_CUDA_MAP_CACHE_H_

#include <stdint.h>

#include "kernels/cuda/driver.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Two maps of one layout: the tensors they view, and the dims and byte strides of both. */
typedef struct tr_cuda_map_key {
  const void *base[2];
  uint64_t dims[3];    /* innermost first */
  uint64_t strides[2]; /* of dims 1 and 2 */
} tr_cuda_map_key;

typedef struct tr_cuda_map_cache tr_cuda_map_cache;

/* 1 where a and b are the same key, field by field (padding is never compared). Cannot fail. */
int tr_cuda_map_key_equal(const tr_cuda_map_key *a, const tr_cuda_map_key *b);

/* An empty cache in *out (NULL first), which the caller destroys. OutOfMemoryError, or the
 * platform layer's error making the lock. */
tr_status *tr_cuda_map_cache_new(tr_cuda_map_cache **out) TR_MUST_USE;
/* Accepts NULL and *NULL; nulls the caller's pointer. No other thread may be using the cache. */
void tr_cuda_map_cache_destroy(tr_cuda_map_cache **cache_p);

/* 1, with the maps kept for `key` copied to out[0] and out[1]; 0, out untouched, where the cache
 * holds none or another key's. Cannot fail. */
int tr_cuda_map_cache_get(tr_cuda_map_cache *cache, const tr_cuda_map_key *key, tr_cu_tensor_map out[2]);
/* Keeps copies of maps[0] and maps[1] for `key`, in place of what was kept. Cannot fail. */
void tr_cuda_map_cache_put(tr_cuda_map_cache *cache, const tr_cuda_map_key *key, const tr_cu_tensor_map maps[2]);

/* How a kernel encodes the pair of maps of `key` (`ctx`: the kernel's own, for its errors). */
typedef tr_status *(*tr_cuda_map_encoder)(const void *ctx, const tr_cuda_map_key *key, tr_cu_tensor_map out[2]);
/* The maps of `key` in out[0] and out[1]: the kept ones where the cache holds that key, else
 * `encode`'s, kept from now on. The encoder's error, with nothing kept and the cache as it was. */
tr_status *tr_cuda_map_cache_fetch(tr_cuda_map_cache *cache, const tr_cuda_map_key *key, tr_cuda_map_encoder encode,
                                   const void *ctx, tr_cu_tensor_map out[2]) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_MAP_CACHE_H_ */
