/* sharing.h: tensor memory another process can reach, for launch out of process: CPU memory
 * from tilerun's shared-memory allocator, cuda memory through CUDA IPC handles; the reference
 * that names such memory, and on the other side, mappings of references (cached). No ZeroMQ
 * here: the launch component carries the references. */
#ifndef TILERUN_SHARING_SHARING_H_
#define TILERUN_SHARING_SHARING_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "platform/platform.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU memory another process can map -------------------------------------------------- */

/* Every segment tilerun makes is named "/tilerun-<pid>-<nonce>-<n>"; a launch process maps no
 * other. Segments lose their names when the process that made them exits. */
#define TR_SHARE_PREFIX "/tilerun-"

/* `bytes` (> 0) of zero-filled CPU memory in a shared segment of its own, 64-byte aligned: a
 * segment of that size freed earlier (the allocator keeps up to 16, 256 MiB in all, so that the
 * names another process mapped come back), else a new one. Sets *out to NULL first. Fails with
 * TR_VALUE for 0 bytes, TR_IO saying why (a full /dev/shm among them). Thread-safe. */
tr_status *tr_share_alloc(size_t bytes, void **out) TR_MUST_USE;

/* Frees memory from tr_share_alloc (NULL allowed; any other pointer is ignored): kept for reuse,
 * or unmapped and its name removed. Another process that mapped it keeps its mapping until it
 * drops it. Thread-safe. */
void tr_share_free(void *ptr);

/* 1 when `ptr` lies in memory from tr_share_alloc. Thread-safe. */
int tr_share_owns(const void *ptr);

/* ---- references ---------------------------------------------------------------------------- */

typedef enum tr_share_kind { TR_SHARE_NONE, TR_SHARE_SHM, TR_SHARE_CUDA_IPC } tr_share_kind;

/* Where another process finds the memory at a tensor's `data`: the segment (shm) or the cuda
 * allocation (its IPC handle), the offset of `data` in it and its size. */
typedef struct tr_share_ref {
  tr_share_kind kind;
  char name[TR_PLAT_SHM_NAME_MAX]; /* shm */
  uint8_t handle[64];              /* cuda ipc: the CUipcMemHandle */
  uint64_t offset;
  uint64_t size;
} tr_share_ref;

/* The reference of `data` on `device`: cpu memory must come from tr_share_alloc, cuda memory
 * from cuMemAlloc/cudaMalloc (PyTorch's allocator) on that device. Anything else is a ValueError
 * saying why the memory cannot be shared. Thread-safe. */
tr_status *tr_share_ref_of(DLDevice device, const void *data, tr_share_ref *out) TR_MUST_USE;

/* Waits until the work queued on the current stream of each cuda device the inputs and outputs
 * are on is done, once per device (NULL entries and other devices skipped): before a launch in
 * another process reads them, and before its reply. Errors are the driver's. */
tr_status *tr_share_finish_cuda(DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                                size_t n_outputs) TR_MUST_USE;

/* ---- the other side: mappings -------------------------------------------------------------- */

/* Mappings of references. Shared-memory segments are kept for the next call (at most 64: when a
 * new one is mapped, segments whose names are gone are dropped first, then the oldest; never one
 * the current launch uses). CUDA IPC mappings last one launch: tr_share_maps_unlock closes them,
 * so the other process may free that memory once answered. Opaque; single owner. */
typedef struct tr_share_maps tr_share_maps;

tr_status *tr_share_maps_new(tr_share_maps **out) TR_MUST_USE;
void tr_share_maps_destroy(tr_share_maps **maps_p);

/* Locks the maps for one launch (its mappings stay until unlock); unlock closes the launch's
 * CUDA IPC mappings. */
void tr_share_maps_lock(tr_share_maps *maps);
void tr_share_maps_unlock(tr_share_maps *maps);

/* The local address of the referenced data on `device` (the maps locked). The bytes a tensor
 * reaches, [lo, hi) relative to that address, must lie inside the referenced memory: anything
 * else is a ValueError naming both, and nothing is kept for it. A reference of the wrong kind
 * for the device or a segment name that is not tilerun's is a ValueError; one that cannot be
 * opened (the segment gone: IOError; a handle from this same process: the driver's
 * BackendError) keeps its error's code. */
tr_status *tr_share_map(tr_share_maps *maps, DLDevice device, const tr_share_ref *ref, int64_t lo, int64_t hi,
                        void **out) TR_MUST_USE;

/* How many mappings are held (for tests). */
size_t tr_share_maps_count(tr_share_maps *maps);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_SHARING_SHARING_H_ */
