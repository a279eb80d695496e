/* pool.c: stream-ordered cuda blocks kept for reuse per pool and device, given back per thread
 * as threads end, and parked while a graph may still use them. */
#include "kernels/cuda/pool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

#define POOL_MAX_BYTES ((size_t)1 << 30)
#define LEGACY_STREAM ((tr_cu_stream)0x1)

typedef struct pool_block {
  void *ptr;
  size_t bytes;
  tr_cu_stream stream;
  const void *thread; /* the per-thread default stream is each thread's own: who made it */
} pool_block;

/* A block made outside a capture and freed while the current stream or its own was captured, or
 * made on another thread's per-thread stream and freed when the pool was full: neither reused nor
 * freed until tr_cuda_pool_trim (or the pool's end). */
typedef struct parked_block {
  void *ptr;
  struct parked_block *next;
} parked_block;

/* One device's share of a pool. */
typedef struct device_pool {
  tr_plat_mutex lock;
  size_t n, held, n_parked;
  uint64_t hits; /* allocations served here: counted under the lock the hit takes anyway */
  pool_block blocks[TR_CUDA_POOL_BLOCKS];
  parked_block *parked;
} device_pool;

struct tr_cuda_pool {
  atomic_size_t refs;  /* the owner's, and one per block out */
  atomic_int closed;   /* the owner let go: freed blocks are not kept */
  _Atomic(device_pool *) devices[TR_CUDA_MAX_DEVICES]; /* made on the device's first allocation */
  tr_cuda_pool *prev, *next; /* the process's live pools (g_list_lock) */
};

/* The process's live pools: what a thread's exit hook walks. */
static tr_plat_mutex g_list_lock;
static int g_list_ok;
static tr_cuda_pool *g_pools;
static tr_plat_once g_once = TR_PLAT_ONCE_INIT;
static int64_t g_pid; /* the process the pools are of (a forked child's are its parent's) */
static atomic_uint_fast64_t g_released, g_thread_ends, g_orphans_freed;
static uint64_t g_ended_hits; /* the hits of pools that have ended (g_list_lock) */

/* Blocks a pool's end could not free because this thread was capturing a graph then (the legacy
 * stream must not be used under a capture): freed by the next pool made, destroyed or trimmed
 * outside a capture (g_list_lock). */
typedef struct deferred_block {
  void *ptr;
  int device;
  struct deferred_block *next;
} deferred_block;
static deferred_block *g_deferred;
static tr_plat_mutex g_deferred_lock; /* taken after a device pool's lock, never before */
static void flush_deferred(void);

static void init_once(void) {
  g_pid = tr_plat_process_id();
  tr_status *failed = tr_plat_mutex_init(&g_list_lock);
  if (failed == NULL) failed = tr_plat_mutex_init(&g_deferred_lock);
  g_list_ok = failed == NULL;
  tr_status_destroy(&failed);
}

static int poolable(tr_cu_stream stream) { return stream == TR_CU_PER_THREAD_STREAM || stream == LEGACY_STREAM; }

/* A stream being captured into a graph gets no kept block, and gives none back (the legacy stream
 * cannot be captured). */
static int capturing(tr_cu_stream stream) { return stream != LEGACY_STREAM && tr_cu_stream_capturing(stream); }

/* The same for a stream of the device whose context is `ctx`, whichever context is current: the
 * per-thread default stream names the current context's, so for it `ctx` is made current while
 * asked (a cuda:1 output made or freed with cuda:0 current asks about cuda:1's stream). Where
 * `ctx` cannot be made current, the current context's is asked. */
static int capturing_in(tr_cu_ctx ctx, tr_cu_stream stream) {
  if (stream != TR_CU_PER_THREAD_STREAM) return capturing(stream);
  tr_cu_ctx previous;
  tr_status *entered = tr_cu_enter_context(ctx, &previous);
  if (entered != NULL) {
    tr_status_destroy(&entered);
    return capturing(stream);
  }
  int captured = capturing(stream);
  tr_cu_restore_context(ctx, previous);
  return captured;
}

/* ---- the pool ---- */

tr_status *tr_cuda_pool_new(tr_cuda_pool **out) {
  *out = NULL;
  tr_plat_once_run(&g_once, init_once);
  if (!g_list_ok) return TR_STATUS(TR_OUT_OF_MEMORY, "the cuda pools' lock could not be made");
  tr_cuda_pool *p = calloc(1, sizeof(*p));
  if (p == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a cuda pool");
  atomic_init(&p->refs, 1);
  flush_deferred();
  tr_plat_mutex_lock(&g_list_lock);
  p->next = g_pools;
  if (g_pools != NULL) g_pools->prev = p;
  g_pools = p;
  tr_plat_mutex_unlock(&g_list_lock);
  *out = p;
  return NULL;
}

/* Device i's share of `p`, made on first use; NULL where it could not be made. */
static device_pool *device_of(tr_cuda_pool *p, int32_t i) {
  device_pool *d = atomic_load_explicit(&p->devices[i], memory_order_acquire);
  if (d != NULL) return d;
  device_pool *made = calloc(1, sizeof(*made));
  if (made == NULL) return NULL;
  tr_status *failed = tr_plat_mutex_init(&made->lock);
  if (failed != NULL) {
    tr_status_destroy(&failed);
    free(made);
    return NULL;
  }
  if (!atomic_compare_exchange_strong_explicit(&p->devices[i], &d, made, memory_order_acq_rel,
                                               memory_order_acquire)) {
    tr_plat_mutex_destroy(&made->lock);
    free(made); /* another thread made it first: `d` is that one */
    return d;
  }
  return made;
}

/* Parks `ptr` (d's lock held). With no room to note it, the block is kept for good rather than
 * freed where that would be wrong. */
static void park_locked(device_pool *d, void *ptr) {
  parked_block *b = malloc(sizeof(*b));
  if (b == NULL) return;
  *b = (parked_block){ptr, d->parked};
  d->parked = b;
  d->n_parked++;
}

/* Takes block i out of the device's pool (its lock held) and returns it. */
static void *take_locked(device_pool *d, size_t i) {
  void *ptr = d->blocks[i].ptr;
  d->held -= d->blocks[i].bytes;
  d->blocks[i] = d->blocks[--d->n];
  return ptr;
}

/* Gives device i's kept blocks of `p` back to the driver, and its parked ones too where `parked`,
 * on the legacy stream, which waits for every blocking stream: a block of another thread's
 * per-thread stream may still be in use there. */
/* 1 when this thread is capturing a graph on device i (its current stream, or its per-thread
 * stream); device i's context is current. */
static int capturing_here(int i) {
  return capturing(tr_cu_current_stream(i)) || tr_cu_stream_capturing(TR_CU_PER_THREAD_STREAM);
}

/* Moves device i's kept (and, with `parked`, parked) blocks of d to g_deferred (d's lock held). */
static void defer_locked(device_pool *d, int i, int parked) {
  tr_plat_mutex_lock(&g_deferred_lock);
  for (size_t b = 0; b < d->n; b++) {
    deferred_block *x = malloc(sizeof(*x));
    if (x == NULL) continue; /* kept for good rather than freed under the graph */
    *x = (deferred_block){d->blocks[b].ptr, i, g_deferred};
    g_deferred = x;
  }
  d->n = 0;
  d->held = 0;
  while (parked && d->parked != NULL) {
    parked_block *b = d->parked;
    d->parked = b->next;
    deferred_block *x = malloc(sizeof(*x));
    if (x != NULL) {
      *x = (deferred_block){b->ptr, i, g_deferred};
      g_deferred = x;
    }
    free(b);
  }
  if (parked) d->n_parked = 0;
  tr_plat_mutex_unlock(&g_deferred_lock);
}

/* Frees g_deferred's blocks of the devices this thread is not capturing on. */
static void flush_deferred(void) {
  if (!g_list_ok) return;
  tr_plat_mutex_lock(&g_deferred_lock);
  deferred_block **at = &g_deferred;
  while (*at != NULL) {
    deferred_block *x = *at;
    tr_cu_ctx ctx = tr_cu_retained_context(x->device), previous;
    tr_status *status = ctx != NULL ? tr_cu_enter_context(ctx, &previous) : NULL;
    int freed = 0;
    if (status == NULL && ctx != NULL) {
      if (!capturing_here(x->device)) {
        tr_cu_free_async((tr_cu_ptr)(uintptr_t)x->ptr, LEGACY_STREAM); /* refused: nothing more to do */
        freed = 1;
      }
      tr_cu_restore_context(ctx, previous);
    }
    tr_status_destroy(&status);
    if (freed) {
      *at = x->next;
      free(x);
    } else {
      at = &x->next;
    }
  }
  tr_plat_mutex_unlock(&g_deferred_lock);
}

/* Gives device i's kept blocks of `p` back to the driver, and its parked ones too where `parked`;
 * where this thread is capturing a graph, defers them instead (g_deferred). */
static void trim_device(tr_cuda_pool *p, int i, int parked) {
  device_pool *d = atomic_load_explicit(&p->devices[i], memory_order_acquire);
  if (d == NULL) return;
  tr_plat_mutex_lock(&d->lock);
  tr_cu_ctx ctx = tr_cu_retained_context(i), previous;
  int some = d->n > 0 || (parked && d->parked != NULL);
  tr_status *status = some && ctx != NULL ? tr_cu_enter_context(ctx, &previous) : NULL;
  if (status == NULL && some && ctx != NULL && capturing_here(i)) {
    defer_locked(d, i, parked);
    tr_cu_restore_context(ctx, previous);
  } else if (status == NULL && some && ctx != NULL) {
    for (size_t b = 0; b < d->n; b++) tr_cu_free_async((tr_cu_ptr)(uintptr_t)d->blocks[b].ptr, LEGACY_STREAM);
    d->n = 0;
    d->held = 0;
    while (parked && d->parked != NULL) {
      parked_block *b = d->parked;
      d->parked = b->next;
      tr_cu_free_async((tr_cu_ptr)(uintptr_t)b->ptr, LEGACY_STREAM);
      free(b);
    }
    if (parked) d->n_parked = 0;
    tr_cu_restore_context(ctx, previous);
  }
  tr_status_destroy(&status);
  tr_plat_mutex_unlock(&d->lock);
}

void tr_cuda_pool_trim(tr_cuda_pool *pool) {
  if (pool == NULL) return;
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) trim_device(pool, i, 1);
  flush_deferred();
}

/* Drops a reference; the last one unlinks the pool and gives back what it still holds. */
static void pool_unref(tr_cuda_pool *p) {
  if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1) return;
  tr_plat_mutex_lock(&g_list_lock); /* no exit hook walks it from now on */
  if (p->prev != NULL) p->prev->next = p->next;
  else g_pools = p->next;
  if (p->next != NULL) p->next->prev = p->prev;
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) { /* its hits still count for the process */
    device_pool *d = atomic_load_explicit(&p->devices[i], memory_order_acquire);
    if (d == NULL) continue;
    tr_plat_mutex_lock(&d->lock);
    g_ended_hits += d->hits;
    tr_plat_mutex_unlock(&d->lock);
  }
  tr_plat_mutex_unlock(&g_list_lock);
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) {
    trim_device(p, i, 1);
    device_pool *d = atomic_load(&p->devices[i]);
    if (d == NULL) continue;
    while (d->parked != NULL) { /* no driver to free them with: noted no more */
      parked_block *b = d->parked;
      d->parked = b->next;
      free(b);
    }
    tr_plat_mutex_destroy(&d->lock);
    free(d);
  }
  free(p);
}

void tr_cuda_pool_destroy(tr_cuda_pool **pool_p) {
  if (pool_p == NULL || *pool_p == NULL) return;
  tr_cuda_pool *p = *pool_p;
  *pool_p = NULL;
  atomic_store(&p->closed, 1);
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) trim_device(p, i, 0);
  flush_deferred();
  pool_unref(p);
}

/* ---- threads ---- */

/* A tag of the calling thread: the per-thread default stream has one handle but a stream per
 * thread, so a block made on it is reused by the same thread only (the legacy stream is one
 * stream per device, shared). */
static atomic_uintptr_t g_next_thread_tag = 1;
static _Thread_local uintptr_t t_thread_tag; /* 0 until first asked; never reused by another thread */
static _Thread_local int t_thread_ended;     /* release_thread_blocks ran: keep none of its blocks now */
static _Thread_local int t_hook_armed;       /* release_thread_blocks is registered and has not run */
/* the devices on whose per-thread default stream this thread made or freed stream-ordered blocks */
static _Thread_local uint64_t t_alloc_devices;
_Static_assert(TR_CUDA_MAX_DEVICES <= 64, "t_alloc_devices has a bit per device");
static void release_thread_blocks(void *tag);
static void set_ended(uintptr_t tag, int ended);

/* Registers release_thread_blocks for this (tagged) thread's end; where the system has no such
 * hook, the thread's blocks stay until their pool is trimmed. Called again by exit-time code after
 * the hook ran, before it queues work on its per-thread stream. `uses_blocks`: that work may read
 * or write blocks (a call, not a free), so the thread is no longer marked ended (another thread's
 * free keeps its blocks for it again) until the hook has run and waited for that work. */
static void arm_exit_hook(int uses_blocks) {
  if (t_thread_ended && uses_blocks) set_ended(t_thread_tag, 0);
  t_hook_armed = tr_plat_at_thread_exit(release_thread_blocks, (void *)t_thread_tag);
}

static const void *stream_owner(tr_cu_stream stream) {
  if (stream != TR_CU_PER_THREAD_STREAM) return NULL;
  if (t_thread_tag == 0) {
    t_thread_tag = atomic_fetch_add(&g_next_thread_tag, 1);
    arm_exit_hook(0);
  }
  return (const void *)t_thread_tag;
}

/* The threads that have ended: a bit per tag, set by release_thread_blocks once the thread has
 * waited for its per-thread streams (and cleared by arm_exit_hook when exit-time code queues work
 * there after that), in chunks made as tags reach them and kept for the process's life. A tag
 * past the last chunk (2^28 threads), or one whose chunk could not be made, is never marked: its
 * blocks are treated as those of a thread that still runs. */
#define ENDED_CHUNK_TAGS 65536
#define ENDED_CHUNKS 4096
static _Atomic(atomic_uint_least64_t *) g_ended[ENDED_CHUNKS];

static void set_ended(uintptr_t tag, int ended) {
  if (tag / ENDED_CHUNK_TAGS >= ENDED_CHUNKS) return;
  _Atomic(atomic_uint_least64_t *) *slot = &g_ended[tag / ENDED_CHUNK_TAGS];
  atomic_uint_least64_t *chunk = atomic_load_explicit(slot, memory_order_acquire);
  if (chunk == NULL && !ended) return; /* never marked */
  if (chunk == NULL) {
    atomic_uint_least64_t *made = calloc(ENDED_CHUNK_TAGS / 64, sizeof(*made));
    if (made == NULL) return;
    if (atomic_compare_exchange_strong_explicit(slot, &chunk, made, memory_order_acq_rel, memory_order_acquire)) {
      chunk = made;
    } else {
      free(made); /* another thread made it first: `chunk` is that one */
    }
  }
  size_t bit = tag % ENDED_CHUNK_TAGS;
  uint_least64_t mask = (uint_least64_t)1 << (bit % 64);
  if (ended) atomic_fetch_or_explicit(&chunk[bit / 64], mask, memory_order_release);
  else atomic_fetch_and_explicit(&chunk[bit / 64], ~mask, memory_order_release);
}

static int has_ended(uintptr_t tag) {
  if (tag / ENDED_CHUNK_TAGS >= ENDED_CHUNKS) return 0;
  atomic_uint_least64_t *chunk = atomic_load_explicit(&g_ended[tag / ENDED_CHUNK_TAGS], memory_order_acquire);
  if (chunk == NULL) return 0;
  size_t bit = tag % ENDED_CHUNK_TAGS;
  return (atomic_load_explicit(&chunk[bit / 64], memory_order_acquire) >> (bit % 64) & 1) != 0;
}

/* Device i's blocks every live pool keeps for `tag` (the calling thread's) go back to the driver
 * on the thread's per-thread stream, in order after the work that used them; those the driver
 * does not take, or all of them while the stream is captured, are parked. Then, where it gave some
 * back or `wait` is set, the thread waits for that stream. Returns 0 where that stream may still
 * have work of the thread's (it could not be waited for: captured, no driver, or the wait failed),
 * else 1. Called with g_list_lock held. */
static int release_device_blocks(int i, void *tag, int wait) {
  size_t n = 0;
  for (tr_cuda_pool *p = g_pools; p != NULL; p = p->next) {
    device_pool *d = atomic_load_explicit(&p->devices[i], memory_order_acquire);
    if (d == NULL) continue;
    tr_plat_mutex_lock(&d->lock);
    for (size_t b = 0; b < d->n; b++) n += d->blocks[b].stream == TR_CU_PER_THREAD_STREAM && d->blocks[b].thread == tag;
    tr_plat_mutex_unlock(&d->lock);
  }
  if (n == 0 && !wait) return 1;
  tr_cu_ctx ctx = tr_cu_retained_context(i), previous;
  tr_status *status = ctx != NULL ? tr_cu_enter_context(ctx, &previous) : NULL;
  int usable = ctx != NULL && status == NULL;
  int captured = usable && tr_cu_stream_capturing(TR_CU_PER_THREAD_STREAM);
  for (tr_cuda_pool *p = g_pools; p != NULL && n > 0; p = p->next) {
    device_pool *d = atomic_load_explicit(&p->devices[i], memory_order_acquire);
    if (d == NULL) continue;
    tr_plat_mutex_lock(&d->lock);
    for (size_t b = d->n; b-- > 0;) {
      if (d->blocks[b].stream != TR_CU_PER_THREAD_STREAM || d->blocks[b].thread != tag) continue;
      void *ptr = take_locked(d, b);
      /* not freed where it cannot be ordered, or where the driver refused: parked */
      if (usable && !captured && tr_cu_free_async((tr_cu_ptr)(uintptr_t)ptr, TR_CU_PER_THREAD_STREAM)) {
        atomic_fetch_add_explicit(&g_released, 1, memory_order_relaxed);
      } else {
        park_locked(d, ptr);
      }
    }
    tr_plat_mutex_unlock(&d->lock);
  }
  int idle = 0;
  if (usable && !captured) { /* a capture cannot be waited for; its end is the caller's */
    tr_status *waited = tr_cu_stream_sync(TR_CU_PER_THREAD_STREAM);
    idle = waited == NULL;
    tr_status_destroy(&waited);
  }
  if (usable) tr_cu_restore_context(ctx, previous);
  tr_status_destroy(&status);
  return idle;
}

/* Runs as the thread tagged `tag` ends, before the driver's own clean-up of the thread (so its
 * context and per-thread default stream, with the work it queued there, are still there): the
 * blocks the pools keep for that thread, which no other thread may take, go back to the driver
 * on that stream. Then the thread waits for that stream, on every device where it made blocks
 * there: on the H200 (driver 580) a thread that ended with a long kernel still queued on its
 * per-thread stream after a stream-ordered allocation there never finished ending, and one that
 * waited first did. Once it has, the thread is marked ended: a block of its own that another
 * thread frees from then on is nobody's to reuse and is freed at once, and one another thread
 * kept for it meanwhile goes back here. Exit-time code that runs after this hook re-registers it
 * on its next allocation, launch or free on the per-thread stream (tr_cuda_pool_before_work),
 * where the system still runs hooks then (glibc runs one registered by another exit hook, not one
 * registered by a key destructor or atexit code). In a forked child: nothing (the blocks and the
 * driver are the parent's). */
static void release_thread_blocks(void *tag) {
  t_thread_ended = 1;
  t_hook_armed = 0;
  tr_plat_once_run(&g_once, init_once);
  if (tr_plat_process_id() != g_pid || !g_list_ok) return;
  atomic_fetch_add_explicit(&g_thread_ends, 1, memory_order_relaxed);
  tr_plat_mutex_lock(&g_list_lock);
  int idle = 1;
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) idle &= release_device_blocks(i, tag, t_alloc_devices >> i & 1);
  if (idle) {
    set_ended((uintptr_t)tag, 1);
    /* blocks another thread kept for this one before the mark (tr_cuda_pool_free looks at it
     * under the device pool's lock, as this does after it) */
    for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) release_device_blocks(i, tag, 0);
  }
  tr_plat_mutex_unlock(&g_list_lock);
}

static void rearm_if_ended(tr_cu_stream stream, int uses_blocks) {
  if (t_thread_ended && !t_hook_armed && stream == TR_CU_PER_THREAD_STREAM && !capturing(stream)) {
    arm_exit_hook(uses_blocks);
  }
}

void tr_cuda_pool_before_work(tr_cu_stream stream) { rearm_if_ended(stream, 1); }

/* ---- blocks ---- */

tr_status *tr_cuda_pool_alloc(tr_cuda_pool *pool, int32_t index, size_t bytes, void **out, tr_cuda_origin *origin) {
  *out = NULL;
  memset(origin, 0, sizeof(*origin));
  tr_cu_ctx ctx, previous;
  TR_RETURN_IF_ERROR(tr_cu_device_context(index, &ctx));
  tr_cu_stream stream = tr_cu_current_stream(index);
  if (bytes == 0) bytes = 1;
  device_pool *d = device_of(pool, index);
  int captured = capturing_in(ctx, stream);
  origin->pool = pool;
  origin->stream = (void *)stream;
  origin->thread = (uintptr_t)stream_owner(stream);
  origin->graph = captured;
  if (stream == TR_CU_PER_THREAD_STREAM && !captured) {
    t_alloc_devices |= (uint64_t)1 << index;
    rearm_if_ended(stream, 1); /* exit-time code after the thread's hook ran */
  }
  if (poolable(stream) && d != NULL && !captured) {
    const void *owner = (const void *)origin->thread;
    tr_plat_mutex_lock(&d->lock);
    for (size_t i = d->n; i-- > 0;) {
      if (d->blocks[i].bytes == bytes && d->blocks[i].stream == stream && d->blocks[i].thread == owner) {
        *out = take_locked(d, i);
        d->hits++;
        break;
      }
    }
    tr_plat_mutex_unlock(&d->lock);
    if (*out != NULL) {
      atomic_fetch_add_explicit(&pool->refs, 1, memory_order_relaxed);
      return NULL;
    }
  }
  TR_RETURN_IF_ERROR(tr_cu_enter_context(ctx, &previous));
  tr_cu_ptr ptr = 0;
  tr_status *status = tr_cu_alloc_async(bytes, stream, &ptr);
  tr_cu_restore_context(ctx, previous);
  if (status == NULL) {
    *out = (void *)(uintptr_t)ptr;
    atomic_fetch_add_explicit(&pool->refs, 1, memory_order_relaxed);
  }
  return status;
}

/* Where a freed block goes (free_block). */
static void free_block(int32_t index, void *ptr, size_t bytes, const tr_cuda_origin *origin) {
  tr_cuda_pool *pool = origin->pool;
  tr_cu_ctx ctx, previous;
  tr_status *status = tr_cu_device_context(index, &ctx);
  tr_cu_stream current = tr_cu_current_stream(index);
  device_pool *d = device_of(pool, index);
  /* the stream the block goes back on: its own (a graph's block: the current one, where the
   * capture, or the code after it, frees it) */
  tr_cu_stream home = origin->graph ? current : (tr_cu_stream)origin->stream;
  uintptr_t me = (uintptr_t)stream_owner(TR_CU_PER_THREAD_STREAM);
  /* made on another thread's per-thread default stream: not ours to name */
  int other_thread = !origin->graph && home == TR_CU_PER_THREAD_STREAM && origin->thread != me;
  if (status == NULL && !origin->graph) {
    /* made outside a capture, freed while the current stream or its own is captured: parked */
    int captured = capturing_in(ctx, current) || (home != current && !other_thread && capturing_in(ctx, home));
    if (captured) {
      if (d != NULL) {
        tr_plat_mutex_lock(&d->lock);
        park_locked(d, ptr);
        tr_plat_mutex_unlock(&d->lock);
      }
      return; /* not freed under the graph */
    }
  }
  void *evicted = NULL; /* a block of this thread's made room for another thread's */
  int orphan = 0;       /* made by a thread that has ended */
  if (status == NULL && !origin->graph && poolable(home) && d != NULL) {
    /* kept for the next allocation on its stream: by the thread that made it, for the
     * per-thread default stream, whichever thread frees it */
    tr_plat_mutex_lock(&d->lock);
    /* a block of this thread's own stream, freed after its blocks went back as it ended: freed */
    int ending = home == TR_CU_PER_THREAD_STREAM && !other_thread && t_thread_ended;
    /* made by a thread that has ended and waited for its stream, and queued nothing there since:
     * nobody could take it, and only work on other streams, which the caller orders before the
     * free, can still use it: freed now (looked at under the lock: see release_thread_blocks; in
     * a forked child the blocks are the parent's) */
    orphan = other_thread && has_ended(origin->thread) && tr_plat_process_id() == g_pid;
    if (orphan) {
      /* on the current stream; not on the legacy stream, which waits for every blocking stream
       * and so must not be used while one may be captured, but on this thread's per-thread
       * stream, which is ordered after the legacy stream's work (parked while that is captured) */
      home = current == LEGACY_STREAM ? TR_CU_PER_THREAD_STREAM : current;
      other_thread = 0;
      if (home != current && capturing_in(ctx, home)) {
        park_locked(d, ptr);
        tr_plat_mutex_unlock(&d->lock);
        return;
      }
    }
    int closed = atomic_load_explicit(&pool->closed, memory_order_acquire);
    int kept = !closed && !ending && !orphan && d->n < TR_CUDA_POOL_BLOCKS && d->held + bytes <= POOL_MAX_BYTES;
    if (!kept && other_thread) {
      /* full: make room by freeing one of this thread's own blocks (on its own stream), else park
       * the block: another thread's stream cannot be named here, and the legacy stream, which
       * would wait for it, must not be used while any stream is captured */
      for (size_t i = 0; i < d->n && evicted == NULL && !closed; i++) {
        if (d->blocks[i].stream == TR_CU_PER_THREAD_STREAM && (uintptr_t)d->blocks[i].thread == me &&
            d->held - d->blocks[i].bytes + bytes <= POOL_MAX_BYTES) {
          evicted = take_locked(d, i);
        }
      }
      kept = evicted != NULL;
      if (!kept) {
        park_locked(d, ptr);
        tr_plat_mutex_unlock(&d->lock);
        return;
      }
    }
    if (kept) {
      d->blocks[d->n++] = (pool_block){ptr, bytes, home, (const void *)origin->thread};
      d->held += bytes;
    }
    tr_plat_mutex_unlock(&d->lock);
    if (kept && evicted == NULL) return;
    if (kept) { /* this thread's evicted block goes back on its own stream */
      ptr = evicted;
      home = TR_CU_PER_THREAD_STREAM;
      other_thread = 0;
    }
  }
  if (other_thread) return; /* no pool to keep it in: kept for good rather than freed out of order */
  if (status == NULL) status = tr_cu_enter_context(ctx, &previous);
  if (status != NULL) { /* nothing can be freed without the driver */
    tr_status_destroy(&status);
    return;
  }
  /* a graph's block, or one whose stream this thread can name: freed on it (on this thread's
   * per-thread stream, the free is waited for as the thread ends) */
  if (home == TR_CU_PER_THREAD_STREAM) t_alloc_devices |= (uint64_t)1 << index;
  rearm_if_ended(home, 0);
  if (tr_cu_free_async((tr_cu_ptr)(uintptr_t)ptr, home) && orphan) {
    atomic_fetch_add_explicit(&g_orphans_freed, 1, memory_order_relaxed);
  }
  tr_cu_restore_context(ctx, previous);
}

void tr_cuda_pool_free(int32_t index, void *ptr, size_t bytes, const tr_cuda_origin *origin) {
  if (ptr == NULL || origin->pool == NULL) return;
  free_block(index, ptr, bytes == 0 ? 1 : bytes, origin);
  pool_unref(origin->pool);
}

/* ---- counts ---- */

/* Adds p's hits to s, and its kept and parked blocks where `blocks`. */
static void count_pool(const tr_cuda_pool *p, int blocks, tr_cuda_pool_stats *s) {
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) {
    device_pool *d = atomic_load_explicit(&p->devices[i], memory_order_acquire);
    if (d == NULL) continue;
    tr_plat_mutex_lock(&d->lock);
    s->hits += d->hits;
    if (blocks) {
      s->kept += d->n;
      s->parked += d->n_parked;
    }
    tr_plat_mutex_unlock(&d->lock);
  }
}

tr_cuda_pool_stats tr_cuda_pool_get_stats(const tr_cuda_pool *pool) {
  tr_plat_once_run(&g_once, init_once);
  tr_cuda_pool_stats s = {0, 0, 0, atomic_load(&g_released), atomic_load(&g_thread_ends),
                          atomic_load(&g_orphans_freed)};
  if (!g_list_ok) return s; /* no pool could be made */
  tr_plat_mutex_lock(&g_list_lock); /* hits are the process's: the live pools' and the ended ones' */
  s.hits = g_ended_hits;
  for (const tr_cuda_pool *p = g_pools; p != NULL; p = p->next) count_pool(p, pool == NULL || p == pool, &s);
  tr_plat_mutex_unlock(&g_list_lock);
  return s;
}
