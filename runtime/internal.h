/* internal.h: the runtime's own structures, shared by its files (runtime.c, op.c, tensors.c,
 * compose.c). */
#ifndef TILERUN_RUNTIME_INTERNAL_H_
#define TILERUN_RUNTIME_INTERNAL_H_

#include <stdatomic.h>

#include "components/launch/launch.h"
#include "components/pipeline/pipeline.h"
#include "components/select/select.h"
#include "kernels/cuda/pool.h"
#include "kernels/intree/builds.h"
#include "manifest/manifest.h"
#include "memo/memo.h"
#include "platform/platform.h"
#include "registry/registry.h"
#include "tilerun/tilerun.h"

struct tr_runtime {
  tr_manifest *manifest;
  char *manifest_dir; /* the folder it was loaded from (tr_runtime_manifest_dir) */
  tr_registry *registry;
  tr_plat_mutex lock; /* discovery and the default target */
  int discovered;               /* discovery ran (once per runtime, whatever it found) */
  tr_status *discovery_failure; /* what it failed with (out of memory), given to every caller */
  atomic_int hinted;            /* tr__runtime_hint warned (once per runtime) */
  char searched[1024];          /* discovery found no backend: the folders it looked in ("" else) */
  char **backend_dirs; /* NULL: the search path */
  size_t n_backend_dirs;
  const char **builtin_names; /* copies of the options' arrays */
  tr_backend_init_fn *builtin_inits;
  size_t n_builtins;
  int builtins_loaded;
  const char *default_target; /* NULL, TR_BUILTIN or a registry-owned name */
  tr_pipeline *pipeline;      /* the components the miss path goes through */
  /* The in-tree ops' selectors (made at discovery, with the kernel types plugins added): the
   * select and build components' table. */
  tr_select_table *select_table;
  /* The artifacts built per in-tree build identity: a memo miss whose identity was built before
   * (another batch size, another op with the same parameters) loads them, not asking build. */
  tr_intree_builds *intree_builds;
  tr_cuda_pool *cuda_pool; /* cuda outputs: this runtime's blocks, kept for reuse and parked */
  /* Where launch runs: inline (kernels called directly), thread (by address through the
   * pipeline) or process (by descriptor; then outputs and copies are made in shareable memory). */
  tr_placement launch_placement;
  tr_launch_context launch_ctx; /* the launch handler's, for a thread placement */
  void (*warn)(void *ctx, const char *line);
  void *warn_ctx;
};

/* One memo entry: a built kernel and what validating its key found. */
typedef struct kernel_entry {
  atomic_int refs; /* the memo's reference plus one per call in flight */
  tr_kernel kernel;
  tr_device device;
  DLDevice dl_device; /* the same, as DLPack's: outputs are made on it */
  int32_t n_outputs;
  uint8_t output_present[TR_SIG_MAX_OUTPUTS];
  tr_tensor_spec outputs[TR_SIG_MAX_OUTPUTS];
  int tuned; /* request_tune ran on `device` */
  uint64_t built; /* the op's build count when it was memoised: build order, for kernel_config */
  uint32_t repeat_inputs; /* inputs the kernel reads in place when a block repeats (tr_intree_op's) */
} kernel_entry;

struct tr_op {
  tr_runtime *rt;
  const tr_op_def *def;
  size_t n_params;
  tr_value settled[TR_SIG_MAX_PARAMS];
  tr_named_value named[TR_SIG_MAX_PARAMS]; /* the same values by name: what validate and launch are sent */
  const char *requested; /* NULL, TR_BUILTIN or a registry-owned name */
  const char *target;    /* the settled target, NULL while none */
  tr_memo *memo;
  tr_plat_mutex lock;
  int tuned_mode;
  int warned_untunable;
  int has_mutated; /* an input the op writes in place: calls check it shares no memory */
  /* a composite op's decision at its first call, kept as its target is (under lock): 0 none yet
   * (or revoked), 1 served whole by its target, 2 runs its composition */
  int composite;
  tr_op **steps; /* a composite op's sub-op instances, made at its first call */
  tr_launch_config config; /* tr_op_kernel_config's answer, copied (kernels may be released) */
  uint64_t config_asks, config_answered; /* launch in another process: asks made, the last kept */
  uint64_t builds; /* kernels memoised so far (under lock): each entry's `built` */
};

/* The call's device made current while a kernel is built or tuned (cuda only). */
typedef struct tr_device_guard {
  int active;
  void *ctx, *previous; /* the driver's contexts: the device's, and the caller's to restore */
} tr_device_guard;
tr_status *tr__device_enter(const tr_device *device, tr_device_guard *guard) TR_MUST_USE;
void tr__device_leave(tr_device_guard *guard);

/* A cuda device's facts, read from the device: arch = major*10+minor, SM count, the opt-in shared
 * memory per block; calibration none. */
tr_status *tr__cuda_facts(const tr_device *device, tr_device_facts *out) TR_MUST_USE;

/* Makes `kernel` launch through the pipeline's launch component: by address (it keeps the built
 * kernel, which `kernel` then wraps), or by descriptor (nothing is built here; the launch
 * process builds its own). On failure `kernel` is left as it was. */
tr_status *tr__route_kernel(tr_op *op, int by_descriptor, tr_kernel *kernel) TR_MUST_USE;

/* Puts the op in the launch process in tuned mode (launch placement: process): its kernels
 * there built so far are tuned again, later ones before their first call. `target`: the op's
 * settled one. The process's error, with the note saying where it happened. */
tr_status *tr__route_tune(tr_op *op, const char *target) TR_MUST_USE;

/* The kernel config of the op in the launch process (launch placement: process), into `out`. */
tr_status *tr__route_config(tr_op *op, const char *target, tr_launch_config *out) TR_MUST_USE;

/* Whether the op is in tuned mode (tr_op_request_tune ran on it). */
int tr__op_in_tuned_mode(tr_op *op);

/* A public entry point's argument `arg` that must not be NULL: a ValueError naming the function
 * and the argument ("tr_op_call: 'op' is NULL"). */
#define TR__NOT_NULL(fn, arg) \
  do {                        \
    if ((arg) == NULL) return TR_STATUS(TR_VALUE, "%s: '%s' is NULL", fn, #arg); \
  } while (0)

/* Runs backend discovery once. */
tr_status *tr__runtime_discover(tr_runtime *rt);

/* An error carrying one of the spec's messages, returned unchanged (no count appended): the
 * first one while backends have failed to load also warns, through the runtime's sink, that
 * they may be why. Returns `status`. */
tr_status *tr__runtime_hint(tr_runtime *rt, tr_status *status);

/* Warns through the runtime's sink. */
void tr__runtime_warn(tr_runtime *rt, const char *fmt, ...) TR_PRINTF(2, 3);

/* Tensors: allocation of outputs and contiguous copies on the call's device. */
/* `dl`: the spec's device as DLPack's (NULL: looked up). */
tr_status *tr__alloc_tensor(const tr_runtime *rt, const tr_tensor_spec *spec, const DLDevice *dl,
                            DLManagedTensor **out) TR_MUST_USE;
/* A contiguous copy of `src` (or src itself when it already is): *out points at `src` or at
 * `*copy`, which the caller frees with its deleter when set. */
tr_status *tr__contiguous(const tr_runtime *rt, const tr_op *op, size_t input, const DLTensor *src,
                          DLManagedTensor **copy, const DLTensor **out) TR_MUST_USE;
/* Copies a contiguous tensor back into a strided one of the same shape (written-back inputs). */
tr_status *tr__copy_back(const tr_runtime *rt, const DLTensor *src, const DLTensor *dst) TR_MUST_USE;

/* A call's inputs as specs (with the device types backends registered): one per manifest input,
 * NULL in `ptrs` for an absent one. */
tr_status *tr__specs_from_dl(const tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                             tr_tensor_spec *specs, const tr_tensor_spec **ptrs) TR_MUST_USE;

/* The same, checked against the op's signature (in-process: compositions plan from it). */
tr_status *tr__check_call(const tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                          tr_tensor_spec *specs, const tr_tensor_spec **ptrs,
                          tr_call_check *check) TR_MUST_USE;

/* A composite op's call. */
tr_status *tr__compose_call(tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                            DLManagedTensor **outputs, size_t n_outputs) TR_MUST_USE;

#endif /* TILERUN_RUNTIME_INTERNAL_H_ */
