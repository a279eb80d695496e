/* backend.h: what a backend author writes against. A backend is a shared object that exports
 * one init function; tilerun calls it with a versioned API table through which the backend
 * registers its detector, its kernel builders, and (when it needs them) device facts, a DLPack
 * device type and an allocator for its own kind of device, and kernel types that join an
 * in-tree op's selection (tilerun/kernel_type.h, included at the end). Registering and running
 * kernels needs these headers alone (every host function is reached through the table); a status
 * of the backend's own making (TR_STATUS) and the core's helpers (tr_value_*, tr_dtype_*,
 * tr_status_*) need tilerun's core linked in: statically in the repository, or the installed
 * libtilerun.so ($(pkg-config --libs tilerun); docs/writing-a-backend.md).
 *
 * The C form of ../shared/spec/backend-protocol.txt: `detect`, `build_kernel`,
 * `register_detector`, `register_kernel_builder` and `register_device_facts` are the functions of
 * the same names below; an entry point is a descriptor file plus this shared object (see
 * registry/discovery.h); a Python callable is a tr_kernel (a struct of function pointers);
 * `torch.device` is tr_device; TensorSpec is tr_tensor_spec. */
#ifndef TILERUN_BACKEND_H_
#define TILERUN_BACKEND_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <dlpack/dlpack.h>

#include "tilerun/device.h"
#include "tilerun/status.h"
#include "tilerun/tensor_spec.h"
#include "tilerun/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. A backend built against a newer ABI than the host's is not
 * loaded ("ABI too new"). Fields of the tables below are only ever appended. */
#define TR_BACKEND_ABI 1

/* The symbols a backend exports: its init function (required) and, optionally, the ABI it was
 * built for (a `const uint32_t`; absent means 1). */
#define TR_BACKEND_INIT_SYMBOL "tilerun_backend_init"
#define TR_BACKEND_ABI_SYMBOL "tilerun_backend_abi"

/* An implementation of an in-tree kernel interface, and an interface (tilerun/kernel_type.h
 * defines both; this header includes it at its end). */
typedef struct tr_kernel_type tr_kernel_type;
typedef struct tr_kernel_interface tr_kernel_interface;

/* The size of `type` up to and including `member`: a struct_size at least this large holds the
 * member. */
#define TR_STRUCT_SIZE_TO(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* 1 when the struct `s` points to (its first field struct_size) is long enough to hold `member`
 * of `type`: how a plugin checks the API table before calling an appended member, and how
 * tilerun checks what a plugin wrote. */
#define TR_STRUCT_HAS(s, type, member) ((s)->struct_size >= TR_STRUCT_SIZE_TO(type, member))

/* The four facts kernel selection reads about a device (kernel-selection spec). */
typedef struct tr_device_facts {
  int32_t arch;            /* -1: unknown */
  const char *calibration; /* NULL: none; a static string otherwise */
  int32_t sm_count;
  int64_t smem_budget;
} tr_device_facts;

/* A built kernel: what a builder fills in. The host keeps it in the op instance's memo and calls
 * `call` for every call with that device and input signature; `release` when the memo drops it
 * (the op failed a call, or was destroyed). Each memo entry is one kernel to the host: a builder
 * that hands the same `self` to several (its own cache, keyed coarser than the input signature)
 * gets `release` once per entry, and `request_tune` once per entry per tuning request, and so
 * counts its references and tunes idempotently. */
typedef struct tr_kernel {
  size_t struct_size; /* set by tilerun to its sizeof(tr_kernel) before a builder or factory
                       * runs; a backend may lower it to its own sizeof, never below
                       * TR_KERNEL_MIN_SIZE (a BackendError); members past it count as absent */
  void *self;         /* the backend's own state */
  /* Runs the kernel. `inputs` in the manifest's declaration order (NULL for an absent optional
   * input; every input the call does not write is contiguous); `outputs` in declaration order,
   * allocated by the host on the call's device (NULL for an output whose `when` is false).
   * Mutated inputs are written in place. A condition on tensor values (RoPE's out-of-range
   * positions) is a ValueError naming the item and the value; the host passes it on unchanged. */
  tr_status *(*call)(void *self, DLTensor *const *inputs, size_t n_inputs,
                     DLTensor *const *outputs, size_t n_outputs);
  /* Optional (NULL: the kernel is not tuned, and the op warns once). Tunes for `device` (which
   * is current while it runs); idempotent per device. */
  tr_status *(*request_tune)(void *self, const tr_device *device);
  /* Optional: the kernel's config as named values (count returned; 0 means empty). The array
   * stays valid while the kernel lives. */
  size_t (*config)(void *self, const tr_named_value **out);
  /* Optional: frees `self`. */
  void (*release)(void *self);
} tr_kernel;

/* The smallest struct_size tilerun accepts in a built tr_kernel: version 1's members, self to
 * release. */
#define TR_KERNEL_MIN_SIZE TR_STRUCT_SIZE_TO(tr_kernel, release)

/* What a builder receives: one spec per manifest input in declaration order (NULL for an
 * optional input the call omitted) and the op instance's params by their manifest names
 * (defaults applied; a null default arrives as none). */
typedef struct tr_build_request {
  const char *op;
  const char *target;
  const tr_device *device; /* the call's device, current while the builder runs */
  const tr_tensor_spec *const *inputs;
  size_t n_inputs;
  const tr_named_value *params;
  size_t n_params;
} tr_build_request;

/* The param of that name in a build request, or NULL. */
static inline const tr_value *tr_build_param(const tr_build_request *req, const char *name) {
  for (size_t i = 0; i < req->n_params; i++) {
    if (strcmp(req->params[i].name, name) == 0) return &req->params[i].value;
  }
  return NULL;
}

/* detect: is this device one this target's kernels are for? Looks at the device only; sets
 * *claims to 1 or 0. Returning a status means the detector failed (a BackendError naming it is
 * raised to the caller). Must not block or take locks. */
typedef tr_status *(*tr_detect_fn)(void *ctx, const tr_device *device, int *claims);

/* build_kernel: builds a kernel for one (device, input signature) of an op. A call this target
 * cannot serve (dtype, shape, params) is a status naming the item and the value received. May
 * compile and allocate; is called once per specialisation. */
typedef tr_status *(*tr_build_kernel_fn)(void *ctx, const tr_build_request *req, tr_kernel *out);

/* read: the facts of one device of a registered device type. */
typedef tr_status *(*tr_read_facts_fn)(void *ctx, const tr_device *device, tr_device_facts *out);

/* An allocator for a backend's own device type: the host allocates outputs (and contiguous
 * copies) with it. alloc returns NULL when out of memory. */
typedef void *(*tr_alloc_fn)(void *ctx, const tr_device *device, size_t bytes);
typedef void (*tr_free_fn)(void *ctx, const tr_device *device, void *ptr);
/* A copy between two tensors of one shape on the backend's device (optional), either of them
 * strided: how the host makes a strided input contiguous and writes a copied input back. */
typedef tr_status *(*tr_copy_fn)(void *ctx, const DLTensor *src, DLTensor *dst);

/* The table a backend's init receives, valid during init only (`host` and find_interface may be
 * kept for later calls of find_interface; a register_* called after init returned is a
 * BackendError saying so). Every register_* fails with a BackendError naming
 * what clashed: a detector for a target twice, the same (op, target) twice, facts for a device
 * type twice, facts for `cuda` (tilerun reads those itself), a device type or allocator twice, a
 * kernel type too short (struct_size). The status returned is the backend's to free or to return
 * from init. When init returns an error, or a registration was refused (whether or not init
 * passes it on), everything the backend registered is rolled back and the backend is reported in
 * the load failures (tr_load_failure_count, _backend, _reason). Calls come from the thread
 * running init, one at a time. A NULL `host` is a ValueError naming it (find_interface: NULL).
 *
 * Members are only ever appended, and an older tilerun passes a shorter table: before calling a
 * member added after register_kernel_type, a backend checks
 * TR_STRUCT_HAS(api, tr_backend_api, member) (the ABI number stays 1 for appended members). */
typedef struct tr_backend_api {
  size_t struct_size; /* sizeof(tr_backend_api) as this tilerun knows it */
  uint32_t abi;
  void *host;
  const char *backend; /* the backend's name, from its descriptor */
  tr_status *(*register_detector)(void *host, const char *target, tr_detect_fn detect, void *ctx);
  tr_status *(*register_kernel_builder)(void *host, const char *op, const char *target,
                                        tr_build_kernel_fn build, void *ctx);
  tr_status *(*register_device_facts)(void *host, const char *device_type, tr_read_facts_fn read,
                                      void *ctx);
  /* Names the DLPack device type (DLDeviceType's number) whose tensors are this device type's,
   * e.g. ("acme", kDLExtDev). */
  tr_status *(*register_device_type)(void *host, const char *device_type, int32_t dl_device_type);
  tr_status *(*register_allocator)(void *host, const char *device_type, tr_alloc_fn alloc,
                                   tr_free_fn free_fn, tr_copy_fn copy, void *ctx);
  /* Adds an implementation to one of an in-tree op's kernel interfaces; it takes part in
   * selection exactly like the in-tree ones. The type must outlive the registry (a static in the
   * plugin). A BackendError: a key registered twice for one op; a type, or any of its bases,
   * whose struct_size is below TR_KERNEL_TYPE_MIN_SIZE (nothing past struct_size is read); no
   * key; no interface, or one that is not among the op's (take it from find_interface). */
  tr_status *(*register_kernel_type)(void *host, const char *op, const tr_kernel_type *type);
  /* Appended (check TR_STRUCT_HAS first). The kernel interface named `interface_name` of the
   * in-tree op `op` ("RMSNormFwdOp", "RMSNormRowFwdInterface"), to put in a kernel type; NULL
   * when the op has no in-tree kernels or no such interface. tilerun owns the interface; it
   * stays valid for the life of the process. Cannot fail otherwise; thread-safe. */
  const tr_kernel_interface *(*find_interface)(void *host, const char *op, const char *interface_name);
} tr_backend_api;

/* The function a backend exports as TR_BACKEND_INIT_SYMBOL. */
typedef tr_status *(*tr_backend_init_fn)(const tr_backend_api *api);

#ifdef __cplusplus
}
#endif

/* The kernel type and its call spec and interface, which register_kernel_type takes. */
#include "tilerun/kernel_type.h"

#endif /* TILERUN_BACKEND_H_ */
