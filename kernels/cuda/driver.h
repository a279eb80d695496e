/* driver.h: the CUDA driver API, loaded at run time (libcuda.so.1 through the platform layer), so
 * that tilerun builds and runs where there is no GPU or no CUDA Toolkit. Only what tilerun uses:
 * primary contexts, modules, launches, stream-ordered memory, per-thread current streams. */
#ifndef TILERUN_KERNELS_CUDA_DRIVER_H_
#define TILERUN_KERNELS_CUDA_DRIVER_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque driver handles (CUcontext, CUmodule, CUfunction, CUstream, CUgraph...). */
typedef void *tr_cu_ctx;
typedef void *tr_cu_module;
typedef void *tr_cu_function;
typedef void *tr_cu_stream;
typedef uint64_t tr_cu_ptr; /* CUdeviceptr */
typedef void *tr_cu_event;

/* The most devices tilerun addresses (indices 0..TR_CUDA_MAX_DEVICES-1). */
#define TR_CUDA_MAX_DEVICES 64

/* Loads libcuda and initialises it (once per process); fails with a BackendError saying why
 * (the library missing, cuInit's error). Thread-safe. Called on the miss path only. */
tr_status *tr_cu_load(void) TR_MUST_USE;

/* The primary context of device `index`, retained once per process and device. Thread-safe. */
tr_status *tr_cu_device_context(int32_t index, tr_cu_ctx *out) TR_MUST_USE;
/* That context where it has been retained already, else NULL; never loads or calls the driver
 * (for code that must not start CUDA: a thread's exit hook). Thread-safe. */
tr_cu_ctx tr_cu_retained_context(int32_t index);

/* Makes device `index`'s primary context current on this thread (loading the driver and
 * retaining the context first if needed); *ctx and *previous are for tr_cu_restore_context. */
tr_status *tr_cu_enter_device(int32_t index, tr_cu_ctx *ctx, tr_cu_ctx *previous) TR_MUST_USE;

/* Makes `ctx` current on this thread when it is not; *previous receives what was current (to
 * pass to tr_cu_restore_context). Cheap when already current. */
tr_status *tr_cu_enter_context(tr_cu_ctx ctx, tr_cu_ctx *previous) TR_MUST_USE;
void tr_cu_restore_context(tr_cu_ctx ctx, tr_cu_ctx previous);

/* Loads a cubin into the current context and finds its entry. */
tr_status *tr_cu_module_load(const void *image, const char *name, const char *entry,
                             tr_cu_module *module, tr_cu_function *function) TR_MUST_USE;
/* Another entry of a loaded module: 1 and *out when the module has `entry`, else 0 (*out NULL). */
int tr_cu_module_entry(tr_cu_module module, const char *entry, tr_cu_function *out);
/* Raises a function's dynamic shared memory limit (bytes above 48 KiB need it). */
tr_status *tr_cu_function_set_smem(tr_cu_function function, int bytes) TR_MUST_USE;
/* Lets `function` launch in clusters of more than 8 blocks (up to 16 on sm_90, where its shared
 * memory and threads allow): 1 when the driver took it, else 0 (clusters of 8 at most). */
int tr_cu_function_allow_wide_clusters(tr_cu_function function);

/* Launches on `stream` (an already current context). `what` names the kernel in errors. */
tr_status *tr_cu_launch(tr_cu_function function, const char *what, uint32_t grid_x, uint32_t grid_y,
                        uint32_t block_x, uint32_t smem, tr_cu_stream stream, void **args) TR_MUST_USE;
/* The same with programmatic dependent launch (sm_90 and later) when `overlap` is nonzero: the
 * kernel may begin launching while the kernel before it on the stream ends, so back-to-back
 * calls hide a launch. The kernel must then wait for that kernel before it touches memory
 * (await_previous_kernel in kernels/src/common.cuh: every in-tree kernel does). A driver
 * without cuLaunchKernelEx launches plainly; one that refuses the attribute where a plain launch
 * works does too, from then on. */
tr_status *tr_cu_launch_ex(tr_cu_function function, const char *what, uint32_t grid_x, uint32_t grid_y,
                           uint32_t block_x, uint32_t smem, tr_cu_stream stream, void **args, int overlap) TR_MUST_USE;

/* Launches `grid_x` blocks in thread-block clusters of `cluster_x` (sm_90 and later; grid_x a
 * multiple of it) with `smem` bytes of dynamic shared memory a block, overlapped as
 * tr_cu_launch_ex when `overlap` is nonzero. A driver without cuLaunchKernelEx, or a device
 * without clusters, gives a BackendError. */
tr_status *tr_cu_launch_cluster(tr_cu_function function, const char *what, uint32_t grid_x, uint32_t cluster_x,
                                uint32_t block_x, uint32_t smem, tr_cu_stream stream, void **args,
                                int overlap) TR_MUST_USE;

/* Stream-ordered memory on `stream` (current context must be the device's). The free returns 1
 * when the driver took it (a 0 pointer included), else 0. */
tr_status *tr_cu_alloc_async(size_t bytes, tr_cu_stream stream, tr_cu_ptr *out) TR_MUST_USE;
int tr_cu_free_async(tr_cu_ptr ptr, tr_cu_stream stream);

/* A TMA tensor map (CUtensorMap): what a kernel's bulk tensor copies read a tensor's layout from. */
#ifdef __cplusplus
#define TR_CU_ALIGN128 alignas(128)
#else
#define TR_CU_ALIGN128 _Alignas(128)
#endif
typedef struct tr_cu_tensor_map {
  TR_CU_ALIGN128 uint64_t opaque[16];
} tr_cu_tensor_map;
/* Encodes a tiled map of 16-bit elements: `rank` dims (innermost first), the byte strides of
 * dims 1..rank-1 (multiples of 16; `base` 16-byte aligned), the box a copy moves; swizzle_128b:
 * the box lands in shared memory with its 16-byte chunks XORed by the row (mod 8) within each
 * 1024 bytes (the box's inner extent then 128 bytes at most). Out-of-bounds elements read as
 * zeros. A driver without maps (before CUDA 12.0) or a layout it refuses is a BackendError. */
tr_status *tr_cu_tensor_map_u16(tr_cu_tensor_map *out, const void *base, uint32_t rank, const uint64_t *dims,
                                const uint64_t *strides, const uint32_t *box, int swizzle_128b) TR_MUST_USE;
/* 1 when the loaded driver encodes tensor maps (cuTensorMapEncodeTiled, CUDA 12.0 on). */
int tr_cu_has_tensor_maps(void);

/* CU_STREAM_PER_THREAD: the per-thread default stream's handle. */
#define TR_CU_PER_THREAD_STREAM ((tr_cu_stream)0x2)

/* Copies between host and device memory (blocking; the current context must be the device's),
 * waits for a stream, and counts the devices. For tools and tests, never on the hot path. */
tr_status *tr_cu_copy_to_device(tr_cu_ptr dst, const void *src, size_t bytes) TR_MUST_USE;
tr_status *tr_cu_copy_to_host(void *dst, tr_cu_ptr src, size_t bytes) TR_MUST_USE;
tr_status *tr_cu_copy_device(tr_cu_ptr dst, tr_cu_ptr src, size_t bytes, tr_cu_stream stream) TR_MUST_USE;
tr_status *tr_cu_stream_sync(tr_cu_stream stream) TR_MUST_USE;
/* A device's compute capability (major*10+minor), SM count and opt-in shared memory per block. */
tr_status *tr_cu_device_facts(int32_t index, int32_t *arch, int32_t *sm_count, int64_t *smem) TR_MUST_USE;

/* Memory another process can open (CUDA IPC): plain device allocations (not stream-ordered
 * pools), and their handles. The current context must be the device's. */
typedef struct tr_cu_ipc_handle {
  char bytes[64]; /* CUipcMemHandle */
} tr_cu_ipc_handle;
tr_status *tr_cu_alloc(size_t bytes, tr_cu_ptr *out) TR_MUST_USE;
void tr_cu_free(tr_cu_ptr ptr);
/* The handle of the allocation holding `ptr`, the offset of `ptr` in it and its size. Memory the
 * driver cannot share (a stream-ordered pool's, host memory) is a BackendError saying so. */
tr_status *tr_cu_ipc_handle_of(tr_cu_ptr ptr, tr_cu_ipc_handle *out, uint64_t *offset, uint64_t *size) TR_MUST_USE;
/* Opens another process's allocation in the current context (once per handle and context). */
tr_status *tr_cu_ipc_open(const tr_cu_ipc_handle *handle, tr_cu_ptr *out) TR_MUST_USE;
void tr_cu_ipc_close(tr_cu_ptr ptr);
/* The allocation holding `ptr`: its base and size. */
tr_status *tr_cu_address_range(tr_cu_ptr ptr, tr_cu_ptr *base, uint64_t *size) TR_MUST_USE;

/* 1 when `stream` is being captured into a CUDA graph (0 on any error). */
int tr_cu_stream_capturing(tr_cu_stream stream);

/* How many cuda devices there are (0 when the driver cannot be loaded or sees none). */
int tr_cu_device_count(void);

/* The stream tilerun works on for device `index` in this thread: the one set with
 * tr_cu_set_stream, else the per-thread default stream (CU_STREAM_PER_THREAD). */
tr_cu_stream tr_cu_current_stream(int32_t index);
tr_status *tr_cu_set_stream(int32_t index, tr_cu_stream stream) TR_MUST_USE;

/* Events that time work on a stream (tuning: never on the hot path). The elapsed time waits for
 * `end`. The current context must be the device's. */
tr_status *tr_cu_event_new(tr_cu_event *out) TR_MUST_USE;
tr_status *tr_cu_event_record(tr_cu_event event, tr_cu_stream stream) TR_MUST_USE;
tr_status *tr_cu_event_elapsed(tr_cu_event start, tr_cu_event end, float *ms) TR_MUST_USE;
void tr_cu_event_destroy(tr_cu_event event); /* accepts NULL */

/* `bytes` bytes at `dst` set to `value`, ordered on `stream`. */
tr_status *tr_cu_memset_async(tr_cu_ptr dst, unsigned char value, size_t bytes, tr_cu_stream stream) TR_MUST_USE;

/* The driver's text for an error code ("CUDA_ERROR_INVALID_VALUE: invalid argument"). */
const char *tr_cu_error_text(int code, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_DRIVER_H_ */
