/* sharing.c: tilerun's shared-memory allocator (a segment per allocation, found again by
 * address), references of cpu and cuda memory, and the cached mappings of references. */
#include "sharing/sharing.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/driver.h"

/* ---- the allocator ---- */

typedef struct segment {
  void *base;
  size_t size;
  char name[TR_PLAT_SHM_NAME_MAX];
} segment;

/* Freed segments kept for the next allocation of the same size (so that their names, and the
 * other process's mappings of them, are reused): at most KEEP_MAX of them, KEEP_BYTES in all. */
enum { KEEP_MAX = 16 };
#define KEEP_BYTES ((size_t)256 << 20)

static struct {
  tr_plat_mutex lock;
  int lock_ok;
  segment *items;
  size_t n, cap;
  segment kept[KEEP_MAX];
  size_t n_kept, kept_bytes;
} g_segments;

static tr_plat_once g_once = TR_PLAT_ONCE_INIT;
static atomic_uint_fast64_t g_counter;
static unsigned long long g_nonce; /* with the pid, keeps a restarted process off old names */

/* At exit every segment of this process loses its name (a launch process's mappings stay). */
static void unlink_all(void) {
  if (!g_segments.lock_ok) return;
  tr_plat_mutex_lock(&g_segments.lock);
  for (size_t i = 0; i < g_segments.n; i++) tr_plat_shm_unlink(g_segments.items[i].name);
  for (size_t i = 0; i < g_segments.n_kept; i++) tr_plat_shm_unlink(g_segments.kept[i].name);
  tr_plat_mutex_unlock(&g_segments.lock);
}

static void init_once(void) {
  tr_status *s = tr_plat_mutex_init(&g_segments.lock);
  g_segments.lock_ok = s == NULL;
  tr_status_destroy(&s);
  g_nonce = (unsigned long long)(tr_plat_now_ns() & 0xffffffffffull);
  if (g_segments.lock_ok) atexit(unlink_all);
}

static int segments_ready(void) {
  tr_plat_once_run(&g_once, init_once);
  return g_segments.lock_ok;
}

tr_status *tr_share_alloc(size_t bytes, void **out) {
  *out = NULL;
  if (bytes == 0) return TR_STATUS(TR_VALUE, "shared memory: an allocation of 0 bytes");
  if (!segments_ready()) return TR_STATUS(TR_OUT_OF_MEMORY, "shared memory: no lock for the allocator");
  segment s;
  int reused = 0;
  tr_plat_mutex_lock(&g_segments.lock);
  for (size_t i = 0; i < g_segments.n_kept && !reused; i++) {
    if (g_segments.kept[i].size != bytes) continue;
    s = g_segments.kept[i];
    g_segments.kept[i] = g_segments.kept[--g_segments.n_kept];
    g_segments.kept_bytes -= bytes;
    reused = 1;
  }
  tr_plat_mutex_unlock(&g_segments.lock);
  if (reused) memset(s.base, 0, bytes);
  s.size = bytes;
  if (!reused) {
    snprintf(s.name, sizeof(s.name), "%s%lld-%llx-%llu", TR_SHARE_PREFIX, (long long)tr_plat_process_id(), g_nonce,
             (unsigned long long)atomic_fetch_add(&g_counter, 1));
  }
  if (!reused) TR_RETURN_IF_ERROR(tr_plat_shm_create(s.name, bytes, &s.base));
  tr_plat_mutex_lock(&g_segments.lock);
  if (g_segments.n == g_segments.cap) {
    size_t cap = g_segments.cap ? 2 * g_segments.cap : 16;
    segment *grown = realloc(g_segments.items, cap * sizeof(*grown));
    if (grown == NULL) {
      tr_plat_mutex_unlock(&g_segments.lock);
      tr_plat_shm_unmap(s.base, s.size);
      tr_plat_shm_unlink(s.name);
      return TR_STATUS(TR_OUT_OF_MEMORY, "shared memory: the allocator's table");
    }
    g_segments.items = grown;
    g_segments.cap = cap;
  }
  g_segments.items[g_segments.n++] = s;
  tr_plat_mutex_unlock(&g_segments.lock);
  *out = s.base;
  return NULL;
}

/* The segment holding [ptr, ptr+1), copied out; 0 when none. Called with the lock held. */
static int find_segment(const void *ptr, segment *out, size_t *index) {
  uintptr_t p = (uintptr_t)ptr;
  for (size_t i = 0; i < g_segments.n; i++) {
    uintptr_t b = (uintptr_t)g_segments.items[i].base;
    if (p >= b && p < b + g_segments.items[i].size) {
      if (out) *out = g_segments.items[i];
      if (index) *index = i;
      return 1;
    }
  }
  return 0;
}

void tr_share_free(void *ptr) {
  if (ptr == NULL || !segments_ready()) return;
  segment s;
  size_t i = 0;
  tr_plat_mutex_lock(&g_segments.lock);
  int found = find_segment(ptr, &s, &i) && s.base == ptr;
  if (found) g_segments.items[i] = g_segments.items[--g_segments.n];
  int keep = found && g_segments.n_kept < KEEP_MAX && s.size <= KEEP_BYTES - g_segments.kept_bytes;
  if (keep) {
    g_segments.kept[g_segments.n_kept++] = s;
    g_segments.kept_bytes += s.size;
  }
  tr_plat_mutex_unlock(&g_segments.lock);
  if (!found || keep) return;
  tr_plat_shm_unlink(s.name);
  tr_plat_shm_unmap(s.base, s.size);
}

int tr_share_owns(const void *ptr) {
  if (ptr == NULL || !segments_ready()) return 0;
  tr_plat_mutex_lock(&g_segments.lock);
  int found = find_segment(ptr, NULL, NULL);
  tr_plat_mutex_unlock(&g_segments.lock);
  return found;
}

/* ---- references ---- */

static tr_status *cuda_ref(int32_t index, const void *data, tr_share_ref *out) {
  tr_cu_ctx ctx = NULL, previous = NULL;
  TR_RETURN_IF_ERROR(tr_cu_enter_device(index, &ctx, &previous));
  tr_cu_ipc_handle h;
  tr_status *status = tr_cu_ipc_handle_of((tr_cu_ptr)(uintptr_t)data, &h, &out->offset, &out->size);
  tr_cu_restore_context(ctx, previous);
  if (status != NULL) {
    tr_status *why = TR_STATUS(TR_VALUE, "cannot be shared with another process: %s", tr_status_message(status));
    tr_status_destroy(&status);
    return why;
  }
  memcpy(out->handle, h.bytes, sizeof(out->handle));
  out->kind = TR_SHARE_CUDA_IPC;
  return NULL;
}

tr_status *tr_share_ref_of(DLDevice device, const void *data, tr_share_ref *out) {
  memset(out, 0, sizeof(*out));
  if (device.device_type == kDLCPU) {
    segment s;
    int found = 0;
    if (data != NULL && segments_ready()) {
      tr_plat_mutex_lock(&g_segments.lock);
      found = find_segment(data, &s, NULL);
      tr_plat_mutex_unlock(&g_segments.lock);
    }
    if (!found) {
      return TR_STATUS(TR_VALUE, "cpu memory at %p cannot be shared with another process: it is not from "
                       "tilerun's shared-memory allocator (tr_alloc_shared)", data);
    }
    out->kind = TR_SHARE_SHM;
    snprintf(out->name, sizeof(out->name), "%s", s.name);
    out->offset = (uint64_t)((uintptr_t)data - (uintptr_t)s.base);
    out->size = s.size;
    return NULL;
  }
  if (device.device_type == kDLCUDA) return cuda_ref(device.device_id, data, out);
  return TR_STATUS(TR_VALUE, "memory of DLPack device type %d cannot be shared with another process (cpu memory "
                   "from tr_share_alloc and cuda device memory can)", (int)device.device_type);
}

tr_status *tr_share_finish_cuda(DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                                size_t n_outputs) {
  uint64_t done = 0;
  for (size_t i = 0; i < n_inputs + n_outputs; i++) {
    const DLTensor *t = i < n_inputs ? inputs[i] : outputs[i - n_inputs];
    if (t == NULL || t->device.device_type != kDLCUDA || t->device.device_id < 0 || t->device.device_id >= 64) continue;
    if (done & (1ull << t->device.device_id)) continue;
    done |= 1ull << t->device.device_id;
    tr_cu_ctx ctx = NULL, previous = NULL;
    TR_RETURN_IF_ERROR(tr_cu_enter_device(t->device.device_id, &ctx, &previous));
    tr_status *status = tr_cu_stream_sync(tr_cu_current_stream(t->device.device_id));
    tr_cu_restore_context(ctx, previous);
    TR_RETURN_IF_ERROR(status);
  }
  return NULL;
}

/* ---- mappings ---- */

enum { MAPS_MAX = 64 };

typedef struct mapping {
  tr_share_kind kind;
  int32_t device; /* cuda */
  char name[TR_PLAT_SHM_NAME_MAX];
  uint8_t handle[64];
  void *base;
  uint64_t size;
  uint64_t used; /* a tick: the oldest goes first */
} mapping;

struct tr_share_maps {
  tr_plat_mutex lock;
  mapping items[MAPS_MAX];
  size_t n;
  uint64_t tick;
  uint64_t locked_at; /* the tick when the maps were locked: mappings used since are in use */
};

tr_status *tr_share_maps_new(tr_share_maps **out) {
  *out = NULL;
  tr_share_maps *m = calloc(1, sizeof(*m));
  if (m == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "shared memory mappings");
  tr_status *status = tr_plat_mutex_init(&m->lock);
  if (status != NULL) {
    free(m);
    return status;
  }
  *out = m;
  return NULL;
}

static void unmap(mapping *e) {
  if (e->kind == TR_SHARE_SHM) {
    tr_plat_shm_unmap(e->base, e->size);
  } else {
    tr_cu_ctx ctx = NULL, previous = NULL;
    tr_status *s = tr_cu_enter_device(e->device, &ctx, &previous);
    if (s == NULL) {
      tr_cu_ipc_close((tr_cu_ptr)(uintptr_t)e->base);
      tr_cu_restore_context(ctx, previous);
    }
    tr_status_destroy(&s);
  }
}

static void drop(tr_share_maps *m, size_t i) {
  unmap(&m->items[i]);
  m->items[i] = m->items[--m->n];
}

void tr_share_maps_destroy(tr_share_maps **maps_p) {
  if (maps_p == NULL || *maps_p == NULL) return;
  tr_share_maps *m = *maps_p;
  *maps_p = NULL;
  while (m->n > 0) drop(m, m->n - 1);
  tr_plat_mutex_destroy(&m->lock);
  free(m);
}

void tr_share_maps_lock(tr_share_maps *maps) {
  tr_plat_mutex_lock(&maps->lock);
  maps->locked_at = maps->tick;
}

/* CUDA IPC mappings are closed here: the other process may free its memory once the launch has
 * answered, and memory must not be freed while another process has it open. */
void tr_share_maps_unlock(tr_share_maps *maps) {
  for (size_t i = maps->n; i-- > 0;) {
    if (maps->items[i].kind == TR_SHARE_CUDA_IPC) drop(maps, i);
  }
  tr_plat_mutex_unlock(&maps->lock);
}

size_t tr_share_maps_count(tr_share_maps *maps) { return maps->n; }

static mapping *find(tr_share_maps *m, DLDevice device, const tr_share_ref *ref) {
  for (size_t i = 0; i < m->n; i++) {
    mapping *e = &m->items[i];
    if (e->kind != ref->kind) continue;
    if (e->kind == TR_SHARE_SHM && strcmp(e->name, ref->name) == 0 && e->size == ref->size) return e;
    if (e->kind == TR_SHARE_CUDA_IPC && e->device == device.device_id &&
        memcmp(e->handle, ref->handle, sizeof(e->handle)) == 0) {
      return e;
    }
  }
  return NULL;
}

/* Room for one more: segments whose names are gone first, then the oldest; never a mapping this
 * launch uses (used since the maps were locked). 0 when there is no room. */
static int make_room(tr_share_maps *m) {
  for (size_t i = m->n; i-- > 0;) {
    const mapping *e = &m->items[i];
    if (e->kind == TR_SHARE_SHM && e->used <= m->locked_at && !tr_plat_shm_exists(e->name)) drop(m, i);
  }
  if (m->n < MAPS_MAX) return 1;
  size_t oldest = m->n;
  for (size_t i = 0; i < m->n; i++) {
    if (m->items[i].used <= m->locked_at && (oldest == m->n || m->items[i].used < m->items[oldest].used)) oldest = i;
  }
  if (oldest == m->n) return 0;
  drop(m, oldest);
  return 1;
}

static tr_status *open_ref(DLDevice device, const tr_share_ref *ref, mapping *e) {
  memset(e, 0, sizeof(*e));
  e->kind = ref->kind;
  e->device = device.device_id;
  if (ref->kind == TR_SHARE_SHM) {
    snprintf(e->name, sizeof(e->name), "%s", ref->name);
    size_t size = 0;
    TR_RETURN_IF_ERROR(tr_plat_shm_map(ref->name, &e->base, &size));
    e->size = size;
    return NULL;
  }
  memcpy(e->handle, ref->handle, sizeof(e->handle));
  tr_cu_ctx ctx = NULL, previous = NULL;
  TR_RETURN_IF_ERROR(tr_cu_enter_device(device.device_id, &ctx, &previous));
  tr_cu_ipc_handle h;
  memcpy(h.bytes, ref->handle, sizeof(h.bytes));
  tr_cu_ptr base = 0, check = 0;
  tr_status *status = tr_cu_ipc_open(&h, &base);
  if (status == NULL) status = tr_cu_address_range(base, &check, &e->size);
  if (status != NULL && base != 0) tr_cu_ipc_close(base);
  tr_cu_restore_context(ctx, previous);
  TR_RETURN_IF_ERROR(status);
  e->base = (void *)(uintptr_t)base;
  return NULL;
}

/* Whether [offset + lo, offset + hi) lies within [0, size), without overflow. */
static int inside(uint64_t offset, int64_t lo, int64_t hi, uint64_t size) {
  if (lo > hi || lo == INT64_MIN || offset > size) return 0;
  if (lo < 0 && (uint64_t)(-lo) > offset) return 0;
  if (hi > 0 && (uint64_t)hi > size - offset) return 0;
  return 1;
}

tr_status *tr_share_map(tr_share_maps *m, DLDevice device, const tr_share_ref *ref, int64_t lo, int64_t hi,
                        void **out) {
  *out = NULL;
  int want = device.device_type == kDLCPU ? TR_SHARE_SHM : device.device_type == kDLCUDA ? TR_SHARE_CUDA_IPC : -1;
  if (want < 0) {
    return TR_STATUS(TR_VALUE, "memory of DLPack device type %d cannot come from another process",
                     (int)device.device_type);
  }
  if ((int)ref->kind != want) {
    return TR_STATUS(TR_VALUE, "a %s tensor needs %s memory, and its reference is %s",
                     want == TR_SHARE_SHM ? "cpu" : "cuda", want == TR_SHARE_SHM ? "shared (shm)" : "CUDA IPC",
                     ref->kind == TR_SHARE_SHM ? "shm" : ref->kind == TR_SHARE_CUDA_IPC ? "CUDA IPC" : "none");
  }
  if (ref->kind == TR_SHARE_SHM && strncmp(ref->name, TR_SHARE_PREFIX, strlen(TR_SHARE_PREFIX)) != 0) {
    return TR_STATUS(TR_VALUE, "shared memory '%s' is not tilerun's (its names start with '%s')", ref->name,
                     TR_SHARE_PREFIX);
  }
  mapping *e = find(m, device, ref);
  mapping fresh;
  if (e == NULL) {
    TR_RETURN_IF_ERROR(open_ref(device, ref, &fresh));
    e = &fresh;
  }
  /* the tensor's bytes, relative to base: [offset + lo, offset + hi) within [0, size) */
  if (!inside(ref->offset, lo, hi, e->size)) {
    tr_status *bad = TR_STATUS(TR_VALUE, "the tensor reaches bytes %lld to %lld around offset %llu of %s memory of "
                               "%llu bytes: outside it", (long long)lo, (long long)hi,
                               (unsigned long long)ref->offset,
                               ref->kind == TR_SHARE_SHM ? ref->name : "a CUDA IPC allocation's",
                               (unsigned long long)e->size);
    if (e == &fresh) unmap(&fresh); /* nothing kept for a refused tensor */
    return bad;
  }
  if (e == &fresh) {
    if (m->n == MAPS_MAX || m->n > 0) {
      if (!make_room(m)) {
        unmap(&fresh);
        return TR_STATUS(TR_VALUE, "a launch reaches more than %d shared memory blocks", MAPS_MAX);
      }
    }
    m->items[m->n] = fresh;
    e = &m->items[m->n++];
  }
  e->used = ++m->tick;
  *out = (char *)e->base + ref->offset;
  return NULL;
}
