/* tilerun.h: the caller's API. A runtime holds the manifest and the backends (discovered once,
 * when the first op is made); an op instance holds its params, its settled target and its memo
 * of built kernels; a call passes DLPack tensors.
 *
 * The C form of the spec's caller interface: `op = RMSNormFwdOp(normalized_shape=..., target=...)`
 * is tr_op_new; `op(x, w)` is tr_op_call; `registered_targets`, `set_default_target`,
 * `default_target`, `load_failures`, `op.request_tune()` and `op.kernel_config()` keep their
 * names with the tr_ prefix; BUILTIN is TR_BUILTIN.
 *
 * NULL handles: a function returning a status returns a ValueError naming the function and the
 * argument ("tr_op_call: 'op' is NULL"; an array left NULL with a count above 0 too), with its
 * out parameter set to NULL first where there is one to set. One returning no status returns its
 * neutral value: NULL for a name, 0 for a count or flag (tr_registered_targets with NULL names
 * counts only); the destroy functions, tr_free_shared and tr_cuda_trim accept NULL. */
#ifndef TILERUN_TILERUN_H_
#define TILERUN_TILERUN_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <dlpack/dlpack.h>

#include "tilerun/backend.h"
#include "tilerun/core.h"
#include "tilerun/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forces the in-tree kernels, as the spec's BUILTIN (no backend target can have this name). */
#define TR_BUILTIN "<builtin>"

typedef struct tr_runtime tr_runtime;
typedef struct tr_op tr_op;

typedef struct tr_runtime_options {
  const char *manifest_dir; /* NULL or "": $TILERUN_MANIFEST_DIR, else an installed tilerun's
                             * <prefix>/share/tilerun/manifest, else "manifest/spec" */
  /* The backend directories to search; NULL (with a count of 0): $TILERUN_BACKEND_PATH then the
   * install prefix's. An array NULL with a count above 0, or a NULL entry in one, is a ValueError
   * (the builtins' arrays too). */
  const char *const *backend_dirs;
  size_t n_backend_dirs;
  /* Backends linked into the program, loaded before the discovered ones (name, init); the
   * arrays are copied, the names must outlive the runtime (string literals, typically). */
  const char *const *builtin_names;
  const tr_backend_init_fn *builtin_inits;
  size_t n_builtins;
  /* The pipeline file placing the components (components/pipeline/pipeline.h); NULL:
   * $TILERUN_PIPELINE, else every component inline. */
  const char *pipeline_file;
  /* Warnings (a backend that failed to load; an untunable kernel): NULL writes them to stderr. */
  void (*warn)(void *ctx, const char *line);
  void *warn_ctx;
} tr_runtime_options;

/* A runtime: loads the manifest now (a ManifestError or IOError names the file); backends are
 * discovered when the first op is made. `options` may be NULL. Thread-safe once made. */
tr_status *tr_runtime_new(const tr_runtime_options *options, tr_runtime **out) TR_MUST_USE;
/* Destroys the runtime; every op made from it must be destroyed first. */
void tr_runtime_destroy(tr_runtime **runtime_p);

/* Makes an op instance: `op_name` from the manifest, params by name (checked, defaults
 * applied), `target` NULL (decide by device), a backend target's name, or TR_BUILTIN. Runs
 * backend discovery the first time. Errors: an op not in the manifest (OpNotAvailableError), a
 * bad param (SignatureError(param)), an unregistered target (UnknownTargetError). */
tr_status *tr_op_new(tr_runtime *runtime, const char *op_name, const tr_named_value *params,
                     size_t n_params, const char *target, tr_op **out) TR_MUST_USE;
void tr_op_destroy(tr_op **op_p);

/* Calls the op. `inputs` in the manifest's declaration order (NULL or left out for a trailing
 * absent optional input; a tensor with NULL data and elements is a ValueError, not absent; an
 * input the op writes in place sharing memory with another is a ValueError). Outputs are allocated by tilerun on the call's device and returned as
 * DLManagedTensors the caller frees with their deleter; `outputs[i]` is NULL for an output that
 * does not exist for this call (`when`). A rejected call never reaches a builder; any failure
 * revokes the op's target and drops its memo. Thread-safe on one op instance. */
tr_status *tr_op_call(tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                      DLManagedTensor **outputs, size_t n_outputs) TR_MUST_USE;

/* The same, writing into caller-provided outputs (their shape and dtype must be the ones the
 * manifest infers; they must be contiguous and on the call's device). */
tr_status *tr_op_call_into(tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                           DLTensor *const *outputs, size_t n_outputs) TR_MUST_USE;

/* Launch in another process (a pipeline placing launch in a process, `tilerun serve launch`)
 * reaches only memory it can map: cpu tensors whose data comes from tr_alloc_shared, cuda tensors
 * in device allocations (cuMemAlloc / cudaMalloc, as PyTorch's allocator makes; not a
 * stream-ordered pool's). Other memory is a ValueError naming the tensor. Outputs tilerun makes
 * are made so. tr_runtime_launch_remote says whether this runtime launches that way. */
int tr_runtime_launch_remote(const tr_runtime *runtime);
/* A new, uninitialised, contiguous tensor of `like`'s shape, dtype and device (its data,
 * strides and byte offset are not read), made as the runtime makes outputs: so a cpu tensor is
 * in shared memory when the runtime launches in another process, and a cuda one in memory a
 * launch process can open. For inputs: fill it, then pass its dl_tensor to a call. Sets *out to
 * NULL first; free it with its deleter. Fails as an output's allocation would: an unknown
 * device type or dtype (naming it), or memory refused (naming the size). */
tr_status *tr_runtime_empty(tr_runtime *runtime, const DLTensor *like, DLManagedTensor **out) TR_MUST_USE;
/* `bytes` of zero-filled cpu memory another process can map (64-byte aligned); free it with
 * tr_free_shared. Sets *out to NULL first. */
tr_status *tr_alloc_shared(size_t bytes, void **out) TR_MUST_USE;
void tr_free_shared(void *data);

/* The op's settled target (a name or TR_BUILTIN), or NULL while none is settled. */
const char *tr_op_target(const tr_op *op);
/* How many kernels the op instance has built and keeps (its memo's entries). */
size_t tr_op_memo_count(const tr_op *op);

/* Tuned mode (a composite op: its steps'): calls request_tune on every kernel built so far (once per device it was built
 * for, with that device current), and on each kernel built later before its first call. A kernel
 * without request_tune is not tuned and the op warns once. Returns the first failure. Where the
 * launch component runs in another process (placement: process), the kernels are built and kept
 * there: the request goes there (the op there is put in tuned mode, and each call says the op
 * is in it, so an op that process made again keeps it), its failure comes back with the note
 * "(Op, launched in another process)" (the op stays in tuned mode here, and its calls say so: a
 * launch process that made the op again, after its cache let it go, puts it in tuned mode at
 * the next call; a kernel there whose tuning failed is tuned again only at the next request),
 * and that process's warnings go to its own stderr. That process keeps one op instance
 * per op, params and target, shared by every caller op with the same: tuning one tunes it for
 * all of them. */
tr_status *tr_op_request_tune(tr_op *op) TR_MUST_USE;

/* The op's config: the first non-empty config of a kernel it built, in build order (count
 * returned, 0: none); a composite op gives its steps'. The values are the op's copy, valid until the next call of this
 * function on the op (from any thread: callers asking from several threads serialise their
 * calls) or its destruction. With launch in another process: asked of that process,
 * once per request, while calls go on (the config of its op instance for the same op, params
 * and target; at most 16 values, strings cut to 255 bytes; a failure to ask is warned, and 0). */
size_t tr_op_kernel_config(tr_op *op, const tr_named_value **out);

/* Registered targets, sorted (with `op_name`: those with a builder for it). Fills up to `max`
 * names (owned by the runtime) and returns the count. Runs discovery. */
size_t tr_registered_targets(tr_runtime *runtime, const char *op_name, const char **names,
                             size_t max);

/* The process default target, ahead of device detection: a name, TR_BUILTIN, or NULL to clear.
 * An unregistered name is an UnknownTargetError. */
tr_status *tr_set_default_target(tr_runtime *runtime, const char *target) TR_MUST_USE;
const char *tr_default_target(tr_runtime *runtime);

/* The facts kernel selection reads about a device: `cuda` read from the device (arch =
 * major*10+minor, SM count, opt-in shared memory per block, no calibration); a type a backend
 * registered facts for asks its read (a BackendError naming the read when it fails or returns
 * negative counts); any other type -1 / none / 0 / 0. Read only once a target is settled. */
tr_status *tr_device_facts_of(tr_runtime *runtime, const tr_device *device,
                              tr_device_facts *out) TR_MUST_USE;

/* The current stream of a cuda device, per calling thread: where tilerun launches in-tree
 * kernels and allocates outputs (stream-ordered). `stream` is a CUstream / cudaStream_t; NULL
 * selects the per-thread default stream (the default: tilerun launches on the legacy default
 * stream only where the caller sets it, as the handle 0x1). An output goes back, when freed, on
 * the stream it was made on, whichever thread frees it and whatever stream is current then (for
 * another thread's per-thread default stream: kept for that thread): a stream set here must
 * outlive the outputs made on it, and work on another stream that reads an output must be
 * ordered before its free by the caller. The legacy stream is also used when the runtime is
 * destroyed, to give kept blocks back. A device index outside 0..63 is a ValueError naming it. */
tr_status *tr_cuda_set_stream(int32_t device_index, void *stream) TR_MUST_USE;
/* The calling thread's current stream for that device (NULL: the per-thread default stream). */
void *tr_cuda_stream(int32_t device_index);

/* The runtime's cuda outputs come from its own pool: a freed output is kept for the next output
 * of its size on its stream, and one freed while a graph was being captured is parked (neither
 * reused nor freed: the graph may use it at every replay). This gives the runtime's kept and
 * parked blocks back to the driver (on the legacy default stream): call it when no graph that
 * used this runtime's outputs will replay again. tr_runtime_destroy gives kept blocks back, and
 * parked ones once the runtime's last output is freed; another runtime's blocks are never
 * touched. Accepts NULL; cannot fail. Thread-safe. */
void tr_cuda_trim(tr_runtime *runtime);

/* Backends that failed to load: how many, and each one's name, descriptor and reason. */
size_t tr_load_failure_count(tr_runtime *runtime);
const char *tr_load_failure_backend(tr_runtime *runtime, size_t i);
const char *tr_load_failure_reason(tr_runtime *runtime, size_t i);

/* A monotonic clock in nanoseconds from an arbitrary start: the one tilerun's own benchmarks time
 * calls with (tilerun run, the Python binding's C loop), for a caller timing calls beside them.
 * Cannot fail; thread-safe. */
uint64_t tr_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TILERUN_H_ */
