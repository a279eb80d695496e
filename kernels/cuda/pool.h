/* pool.h: stream-ordered cuda memory for outputs, with freed blocks kept for reuse, in pools an
 * owner makes and destroys (a runtime owns one). Rules of reuse, threads and graphs: docs/calling-ops.md. */
#ifndef TILERUN_KERNELS_CUDA_POOL_H_
#define TILERUN_KERNELS_CUDA_POOL_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/driver.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Freed blocks a pool keeps per device for reuse, at most (and at most 1 GiB). */
#define TR_CUDA_POOL_BLOCKS 64

typedef struct tr_cuda_pool tr_cuda_pool;

/* Where a block was made: its pool, the stream (the device's current stream then), the thread
 * that made it (the per-thread default stream is one handle for a stream per thread; 0 for other
 * streams), and whether the stream was being captured into a graph. Filled by the allocation;
 * passed back unchanged to the free. */
typedef struct tr_cuda_origin {
  tr_cuda_pool *pool;
  void *stream;
  uintptr_t thread;
  int graph;
} tr_cuda_origin;

/* A pool with nothing in it. Only OutOfMemoryError. Thread-safe. */
tr_status *tr_cuda_pool_new(tr_cuda_pool **out) TR_MUST_USE;

/* The owner lets go: the pool's kept blocks go back to the driver now; a block still out goes
 * back as it is freed; the pool's parked blocks (below) go back once its last block is freed.
 * Another pool's blocks are never touched. Accepts NULL; nulls the caller's pointer. */
void tr_cuda_pool_destroy(tr_cuda_pool **pool_p);

/* `bytes` on device `index`, ordered on the device's current stream (this thread's). A block
 * made on the per-thread or legacy default stream, outside a capture, is kept when freed for
 * the next allocation of its size on its stream (per-thread: by the thread that made it, which
 * gives its kept blocks back to the driver as it ends, where the platform has a thread exit
 * hook). A block made while the stream is captured is the graph's: never kept. A block made
 * outside a capture and freed while its stream or the current one is captured is parked:
 * neither reused nor freed until tr_cuda_pool_trim (the graph may use it at every replay).
 * Errors: the driver's (BackendError, OutOfMemoryError). Thread-safe. */
tr_status *tr_cuda_pool_alloc(tr_cuda_pool *pool, int32_t index, size_t bytes, void **out,
                              tr_cuda_origin *origin) TR_MUST_USE;

/* Gives back a block tr_cuda_pool_alloc made (`bytes` and `origin` as it gave them), in the order
 * of the stream it was made on, whichever thread frees it; work on another stream that uses it
 * must be ordered before the free by the caller. Cannot fail (a block the driver refuses is kept
 * for good rather than freed out of order). Thread-safe. */
void tr_cuda_pool_free(int32_t index, void *ptr, size_t bytes, const tr_cuda_origin *origin);

/* Gives the pool's kept and parked blocks back to the driver: call it when no graph that used a
 * parked block of this pool will replay. Accepts NULL. Thread-safe. */
void tr_cuda_pool_trim(tr_cuda_pool *pool);

/* Work is about to be queued on `stream` by this thread (a launch, a copy): where the thread's
 * exit hook already ran (exit-time code), it is registered again so that the thread's end waits
 * for that work too. One thread-local load otherwise. */
void tr_cuda_pool_before_work(tr_cu_stream stream);

/* Counts, for tests and benchmarks. kept: blocks kept for reuse now (not parked ones), in one
 * pool or over the live pools of the process; the others count over the process's life. */
typedef struct tr_cuda_pool_stats {
  uint64_t hits;          /* allocations served from a pool */
  uint64_t kept;          /* blocks kept for reuse now */
  uint64_t parked;        /* blocks parked now */
  uint64_t released;      /* blocks given back to the driver as the thread they were kept for ended */
  uint64_t thread_ends;   /* runs of the thread exit hook */
  uint64_t orphans_freed; /* blocks another thread freed after their maker had ended, freed at once */
} tr_cuda_pool_stats;
tr_cuda_pool_stats tr_cuda_pool_get_stats(const tr_cuda_pool *pool); /* NULL: the whole process */

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_POOL_H_ */
