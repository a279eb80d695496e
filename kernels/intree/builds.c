/* builds.c: the artifacts built per in-tree build identity (see builds.h). A memo miss is not the
 * hot path: a find scans the entries with the lock held, comparing hashes first. */
#include "kernels/intree/builds.h"

#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "platform/platform.h"
#include "tilerun/hash.h"

typedef struct entry {
  uint64_t hash;
  const tr_kernel_type *type;
  tr_call_spec call;
  size_t n;
  tr_artifact arts[2];
} entry;

struct tr_intree_builds {
  tr_plat_mutex lock;
  size_t max_entries, max_bytes;
  entry **entries; /* each malloc'd once and never moved or changed: finds hand them out */
  size_t n, capacity, bytes;
  uint64_t hits;
};

static uint64_t identity_hash(const tr_kernel_type *type, const tr_call_spec *call) {
  return tr_hash_u64(tr_call_spec_hash(call), (uint64_t)(uintptr_t)type);
}

tr_status *tr_intree_builds_new(size_t max_entries, size_t max_bytes, tr_intree_builds **out) {
  *out = NULL;
  tr_intree_builds *b = calloc(1, sizeof(*b));
  if (b == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "the in-tree builds of a runtime");
  tr_status *status = tr_plat_mutex_init(&b->lock);
  if (status != NULL) {
    free(b);
    return status;
  }
  b->max_entries = max_entries;
  b->max_bytes = max_bytes;
  *out = b;
  return NULL;
}

static void entry_free(entry *e) {
  for (size_t i = 0; i < e->n; i++) tr_artifact_clear(&e->arts[i]);
  tr_call_spec_clear(&e->call);
  free(e);
}

void tr_intree_builds_destroy(tr_intree_builds **builds_p) {
  if (builds_p == NULL || *builds_p == NULL) return;
  tr_intree_builds *b = *builds_p;
  *builds_p = NULL;
  for (size_t i = 0; i < b->n; i++) entry_free(b->entries[i]);
  free(b->entries);
  tr_plat_mutex_destroy(&b->lock);
  free(b);
}

static const entry *find_locked(const tr_intree_builds *b, uint64_t hash, const tr_kernel_type *type,
                                const tr_call_spec *call) {
  for (size_t i = 0; i < b->n; i++) {
    const entry *e = b->entries[i];
    if (e->hash == hash && e->type == type && tr_call_spec_equal(&e->call, call)) return e;
  }
  return NULL;
}

const tr_artifact *tr_intree_builds_find(tr_intree_builds *b, const tr_kernel_type *type, const tr_call_spec *call,
                                         size_t *n) {
  *n = 0;
  uint64_t hash = identity_hash(type, call);
  tr_plat_mutex_lock(&b->lock);
  const entry *e = find_locked(b, hash, type, call);
  if (e != NULL) b->hits++;
  tr_plat_mutex_unlock(&b->lock);
  if (e == NULL) return NULL;
  *n = e->n;
  return e->arts;
}

tr_status *tr_intree_builds_add(tr_intree_builds *b, const tr_kernel_type *type, const tr_call_spec *call,
                                const tr_artifact *arts, size_t n, int *kept) {
  if (kept != NULL) *kept = 0;
  if (n < 1 || n > 2) return TR_STATUS(TR_VALUE, "kernel '%s': 1 or 2 artifacts are kept per build, got %zu", type->key, n);
  size_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    if (arts[i].cubin == NULL || arts[i].size == 0) {
      return TR_STATUS(TR_VALUE, "kernel '%s': artifact %zu has no cubin (%zu bytes)", type->key, i, arts[i].size);
    }
    bytes += arts[i].size;
  }
  /* the copies are made before the lock is taken: a find meanwhile is not held up */
  entry *e = calloc(1, sizeof(*e));
  tr_status *status = e != NULL ? tr_call_spec_copy(call, &e->call)
                                : TR_STATUS(TR_OUT_OF_MEMORY, "keeping the build of kernel '%s'", type->key);
  for (size_t i = 0; i < n && status == NULL; i++) {
    e->arts[i] = arts[i];
    e->arts[i].cubin = malloc(arts[i].size);
    if (e->arts[i].cubin == NULL) {
      e->arts[i].size = 0;
      status = TR_STATUS(TR_OUT_OF_MEMORY, "keeping the %zu-byte artifact of kernel '%s'", arts[i].size, type->key);
      break;
    }
    memcpy(e->arts[i].cubin, arts[i].cubin, arts[i].size);
    e->n = i + 1;
  }
  if (status != NULL) {
    if (e != NULL) entry_free(e);
    return status;
  }
  e->hash = identity_hash(type, call);
  e->type = type;
  tr_plat_mutex_lock(&b->lock);
  int room = b->n < b->max_entries && bytes <= b->max_bytes - b->bytes && find_locked(b, e->hash, type, call) == NULL;
  if (room && b->n == b->capacity) {
    size_t capacity = b->capacity ? b->capacity * 2 : 16;
    entry **grown = realloc(b->entries, capacity * sizeof(entry *));
    if (grown == NULL) {
      room = 0;
      status = TR_STATUS(TR_OUT_OF_MEMORY, "keeping the build of kernel '%s'", type->key);
    } else {
      b->entries = grown;
      b->capacity = capacity;
    }
  }
  if (room) {
    b->entries[b->n++] = e;
    b->bytes += bytes;
  }
  tr_plat_mutex_unlock(&b->lock);
  if (!room) entry_free(e);
  if (kept != NULL) *kept = room;
  return status;
}

tr_intree_builds_stats tr_intree_builds_get_stats(tr_intree_builds *b) {
  tr_plat_mutex_lock(&b->lock);
  tr_intree_builds_stats s = {b->hits, b->n, b->bytes};
  tr_plat_mutex_unlock(&b->lock);
  return s;
}
