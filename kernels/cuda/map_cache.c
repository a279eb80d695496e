/* map_cache.c: a kernel's last pair of tensor maps (see map_cache.h): one entry, compared and
 * copied under a lock (two 128-byte maps; the lock is held for no driver call). */
#include "kernels/cuda/map_cache.h"

#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

struct tr_cuda_map_cache {
  tr_cu_tensor_map maps[2]; /* first: the struct's alignment is the maps' */
  tr_cuda_map_key key;
  int filled;
  tr_plat_mutex lock;
};

int tr_cuda_map_key_equal(const tr_cuda_map_key *a, const tr_cuda_map_key *b) {
  for (int i = 0; i < 2; i++) {
    if (a->base[i] != b->base[i] || a->strides[i] != b->strides[i]) return 0;
  }
  for (int i = 0; i < 3; i++) {
    if (a->dims[i] != b->dims[i]) return 0;
  }
  return 1;
}

tr_status *tr_cuda_map_cache_new(tr_cuda_map_cache **out) {
  *out = NULL;
  /* the maps' 128-byte alignment, which malloc does not promise; a struct's size is a multiple of
   * its alignment, as aligned_alloc asks */
  tr_cuda_map_cache *c = aligned_alloc(_Alignof(tr_cuda_map_cache), sizeof(tr_cuda_map_cache));
  if (c == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a kernel's cache of tensor maps");
  memset(c, 0, sizeof(*c));
  tr_status *status = tr_plat_mutex_init(&c->lock);
  if (status != NULL) {
    free(c);
    return status;
  }
  *out = c;
  return NULL;
}

void tr_cuda_map_cache_destroy(tr_cuda_map_cache **cache_p) {
  if (cache_p == NULL || *cache_p == NULL) return;
  tr_cuda_map_cache *c = *cache_p;
  *cache_p = NULL;
  tr_plat_mutex_destroy(&c->lock);
  free(c);
}

int tr_cuda_map_cache_get(tr_cuda_map_cache *c, const tr_cuda_map_key *key, tr_cu_tensor_map out[2]) {
  tr_plat_mutex_lock(&c->lock);
  int hit = c->filled && tr_cuda_map_key_equal(&c->key, key);
  if (hit) memcpy(out, c->maps, sizeof(c->maps));
  tr_plat_mutex_unlock(&c->lock);
  return hit;
}

void tr_cuda_map_cache_put(tr_cuda_map_cache *c, const tr_cuda_map_key *key, const tr_cu_tensor_map maps[2]) {
  tr_plat_mutex_lock(&c->lock);
  memcpy(c->maps, maps, sizeof(c->maps));
  c->key = *key;
  c->filled = 1;
  tr_plat_mutex_unlock(&c->lock);
}

tr_status *tr_cuda_map_cache_fetch(tr_cuda_map_cache *c, const tr_cuda_map_key *key, tr_cuda_map_encoder encode,
                                   const void *ctx, tr_cu_tensor_map out[2]) {
  if (tr_cuda_map_cache_get(c, key, out)) return NULL;
  TR_RETURN_IF_ERROR(encode(ctx, key, out));
  tr_cuda_map_cache_put(c, key, out);
  return NULL;
}
