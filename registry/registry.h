/* registry.h: the registry of backends: plugins loaded from their descriptors, what each
 * registered (detectors by target, builders by (op, target), device facts, device types,
 * allocators), the plugins that failed to load, and target settlement. Loading happens once;
 * afterwards every lookup is read-only and safe from many threads. No ZeroMQ inside. */
#ifndef TILERUN_REGISTRY_REGISTRY_H_
#define TILERUN_REGISTRY_REGISTRY_H_

#include <stddef.h>

#include "registry/discovery.h"
#include "tilerun/backend.h"
#include "tilerun/status.h"
#include "tilerun/tilerun.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_registry tr_registry;

typedef struct tr_load_failure {
  const char *backend;    /* the descriptor's name, or the descriptor path when unnamed */
  const char *descriptor; /* the descriptor file ("" for a backend loaded by path) */
  const char *reason;     /* what went wrong, whole */
} tr_load_failure;

/* Receives one warning line (no trailing newline) for each backend that fails to load. */
typedef void (*tr_warn_fn)(void *ctx, const char *line);

/* An empty registry. Warnings go to `warn` (NULL: stderr, prefixed "tilerun: warning: "). */
tr_status *tr_registry_new(tr_warn_fn warn, void *warn_ctx, tr_registry **out) TR_MUST_USE;
void tr_registry_destroy(tr_registry **registry_p);

/* What the API table's find_interface asks: the kernel interface `name` of op `op`, or NULL.
 * Must be thread-safe and return data that outlives every plugin (static data). */
typedef const tr_kernel_interface *(*tr_interface_finder)(void *ctx, const char *op, const char *name);

/* Sets where plugins find kernel interfaces (the in-tree ops' table: tr_select_intree_interface);
 * without one, find_interface answers NULL. Set it before loading; not thread-safe. */
void tr_registry_set_interface_finder(tr_registry *registry, tr_interface_finder find, void *ctx);

/* Says whether the manifest declares `op`: a kernel builder registered for an op it does not (a
 * misspelt name) is warned about, as it would never be called. Without one, nothing is checked.
 * Set it before loading; not thread-safe. */
typedef int (*tr_op_known_fn)(void *ctx, const char *op);
void tr_registry_set_op_check(tr_registry *registry, tr_op_known_fn known, void *ctx);

/* Checks what the registry holds once a backend's init has returned successfully, when that
 * backend registered kernel types: the runtime builds the in-tree select table from it (the
 * selector's construction checks, table 5 rows 1-5 of the selection spec). A failure fails that
 * backend's load: it is rolled back and recorded like any other load failure, and the backends
 * before and after it are unaffected. `check` must not keep `registry`. Set it before loading;
 * not thread-safe. */
typedef tr_status *(*tr_load_check_fn)(void *ctx, const tr_registry *registry);
void tr_registry_set_load_check(tr_registry *registry, tr_load_check_fn check, void *ctx);

/* Loads every discovered backend in order, and records the descriptors discovery skipped as
 * failures too. A backend that fails to load (missing file, missing init symbol, ABI too new,
 * init returning an error, a registration failing part-way, the load check refusing what it
 * registered) is skipped with one warning and
 * recorded; everything it registered is rolled back. Fails only on OutOfMemoryError. */
tr_status *tr_registry_load_all(tr_registry *registry, const tr_discovery *found) TR_MUST_USE;

/* The backend code running now in this process (a plugin's library loading, a backend's init,
 * a detector), as "backend 'x' (/path/libx.so): its init", or NULL: for a program's last words
 * (tr_plat_last_words) should that code end the process. Async-signal-safe; one record for the
 * process (with loads on several threads at once, it names one of them). */
const char *tr_registry_plugin_in_hand(void);

/* The same, with when that code began (tr_plat_now_ns; 0 with NULL): for a watchdog that says
 * which backend's code has not returned for long. */
const char *tr_registry_plugin_in_hand_since(uint64_t *since_ns);

/* Loads one backend's shared object; returns 1 when it loaded, 0 when it was skipped (and
 * recorded). */
int tr_registry_load_plugin(tr_registry *registry, const char *name, const char *library,
                            const char *descriptor);

/* Runs an init function in-process as if it were a plugin's (tests, and backends linked into
 * the program); same rollback and failure recording. Returns 1 when it registered. */
int tr_registry_load_builtin(tr_registry *registry, const char *name, tr_backend_init_fn init);

size_t tr_registry_failure_count(const tr_registry *registry);
const tr_load_failure *tr_registry_failure_at(const tr_registry *registry, size_t i);

/* Appends "; N backend(s) failed to load (see tr_load_failure_reason)" to a status when any
 * did: for tilerun's own messages only, never the spec's (docs/messages.md). Returns the status. */
tr_status *tr_registry_annotate(const tr_registry *registry, tr_status *status);

/* Registered target names, sorted, that have a detector or a builder; with `op`, only the ones
 * with a builder for it. Fills up to `max` pointers (owned by the registry) and returns the
 * total. */
size_t tr_registry_targets(const tr_registry *registry, const char *op, const char **names,
                           size_t max);

/* Writes "['a', 'b']" for the same list, as the spec's messages show it. */
void tr_registry_targets_text(const tr_registry *registry, const char *op, char *buf, size_t size);

int tr_registry_has_target(const tr_registry *registry, const char *target);

/* The registry's own copy of a registered target's name, or NULL when it is not registered. */
const char *tr_registry_target_name(const tr_registry *registry, const char *target);

/* 1 when (op, target) has a builder. */
int tr_registry_has_builder(const tr_registry *registry, const char *op, const char *target);

/* The builder registered for (op, target), wrapped: it calls the backend's builder, then
 * checks the tr_kernel's struct_size (shorter than TR_KERNEL_MIN_SIZE: a BackendError naming
 * the backend, and *out is left empty). `ctx` is valid while the registry is; 0 when there is
 * no builder. */
int tr_registry_builder(const tr_registry *registry, const char *op, const char *target,
                        tr_build_kernel_fn *build, void **ctx);

/* Settles a call's target: `requested` (the op's target: NULL, TR_BUILTIN or a name), then
 * `default_target` (same forms), then detection over every detector with `device`. *out is a
 * registered name (owned by the registry) or TR_BUILTIN (none claimed, or BUILTIN asked).
 * UnknownTargetError for an unregistered name, listing the known ones; AmbiguousTargetError
 * naming the claimants; BackendError naming a detector that failed. */
tr_status *tr_registry_settle(const tr_registry *registry, const char *requested,
                              const char *default_target, const tr_device *device,
                              const char **out) TR_MUST_USE;

/* Device facts of a device: `cuda` is not the registry's (see the selector); a registered type
 * asks its read (a BackendError naming the read when it fails or returns negative counts); an
 * unregistered type reports -1 / none / 0 / 0. */
tr_status *tr_registry_device_facts(const tr_registry *registry, const tr_device *device,
                                    tr_device_facts *out) TR_MUST_USE;

/* The device type a backend named for a DLPack device type, or NULL. */
const char *tr_registry_device_type_for_dl(const tr_registry *registry, int32_t dl_device_type);
/* The DLPack device type registered for a device type name; -1 when none. */
int32_t tr_registry_dl_for_device_type(const tr_registry *registry, const char *device_type);
/* A DLPack device as a tilerun device and back: a backend's registered type first, then
 * tilerun's own names (cpu, cuda, ...); an unknown one is the error tr_device_from_dl or
 * tr_device_to_dl gives. */
tr_status *tr_registry_device_from_dl(const tr_registry *registry, DLDevice dl, tr_device *out) TR_MUST_USE;
tr_status *tr_registry_device_to_dl(const tr_registry *registry, const tr_device *device,
                                    DLDevice *out) TR_MUST_USE;
/* Describes a DLTensor (its strides and data are not looked at), its device named as
 * tr_registry_device_from_dl names it; fails as that or tr_tensor_spec_make does. */
tr_status *tr_registry_spec_from_dl(const tr_registry *registry, const DLTensor *tensor,
                                    tr_tensor_spec *out) TR_MUST_USE;

/* The kernel types plugins added to an op's in-tree interfaces (register_kernel_type): fills up
 * to `max` and returns the count. */
size_t tr_registry_kernel_types(const tr_registry *registry, const char *op,
                                const tr_kernel_type **types, size_t max);

/* The allocator registered for a device type; 0 when none. */
int tr_registry_allocator(const tr_registry *registry, const char *device_type, tr_alloc_fn *alloc,
                          tr_free_fn *free_fn, tr_copy_fn *copy, void **ctx);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_REGISTRY_REGISTRY_H_ */
