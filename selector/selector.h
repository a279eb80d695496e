/* selector.h: in-tree kernel selection (../shared/spec/kernel-selection.txt in C): call specs and
 * kernel interfaces, implementations (kernel types) with availability, applicability and
 * precedence, the checks made when an op's selector is built and at each call, and a cache that
 * makes a repeated call one hash lookup. The `select` component's library; no ZeroMQ inside.
 *
 * The call spec, interface and kernel type themselves are public (tilerun/kernel_type.h, so a
 * plugin can write one); this header is the selector's own API: `op.key_for` and
 * `op.kernel_for` are tr_selector_key_for and tr_selector_kernel_for. */
#ifndef TILERUN_SELECTOR_SELECTOR_H_
#define TILERUN_SELECTOR_SELECTOR_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/backend.h"
#include "tilerun/core.h"
#include "tilerun/kernel_type.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The call-spec, interface and kernel-type structs, and tr_call_spec_get / _int / _float, are
 * public: tilerun/kernel_type.h. */

/* Makes a call spec of `type` on `device` from named values (fields not given take their
 * defaults; a field without a default is required). Unknown names, missing fields and values of
 * the wrong kind are a ValueError naming the field and the value. An int is accepted for a float
 * field. On failure *out is cleared. */
tr_status *tr_call_spec_init(tr_call_spec *out, const tr_call_spec_type *type, const tr_device *device,
                             const tr_named_value *values, size_t n_values) TR_MUST_USE;

/* States device facts explicitly (for key_for in tests): `which` is a TR_FACT_* mask. */
void tr_call_spec_state_facts(tr_call_spec *spec, uint32_t which, const tr_device_facts *facts);

/* Hash and equality over type, device, values and stated facts. */
uint64_t tr_call_spec_hash(const tr_call_spec *spec);
int tr_call_spec_equal(const tr_call_spec *a, const tr_call_spec *b);

/* "AttentionCall(batch=1, seqlen_kv=4096, ..., device=cuda:0)"; returns the length needed. */
size_t tr_call_spec_format(const tr_call_spec *spec, char *buf, size_t size);

/* Deep copy (values own their storage). OutOfMemoryError leaves *dst cleared. */
tr_status *tr_call_spec_copy(const tr_call_spec *src, tr_call_spec *dst) TR_MUST_USE;
void tr_call_spec_clear(tr_call_spec *spec);

/* Where a device's facts come from: cuda from the device, other registered types from their
 * backend's read, unregistered types -1 / none / 0 / 0. */
typedef tr_status *(*tr_facts_fn)(void *ctx, const tr_device *device, tr_device_facts *out);

typedef struct tr_selector tr_selector;

/* A selector for one op: its interfaces (by name) and its kernel types (in-tree ones and those
 * plugins registered). The checks of table 5, rows 1-5, run here; the first failure is a
 * SelectionError with the spec's fragment: "does not implement <Interface>", "forward does not
 * take <Interface>'s arguments", "has more than one general implementation", "preferences form
 * a cycle through a -> b -> a", "keys implement none of its kernel interfaces". */
tr_status *tr_selector_new(const char *op_name, const tr_kernel_interface *const *interfaces,
                           size_t n_interfaces, const tr_kernel_type *const *types, size_t n_types,
                           tr_facts_fn facts, void *facts_ctx, tr_selector **out) TR_MUST_USE;
void tr_selector_destroy(tr_selector **selector_p);

/* Selects the key serving `call` for `interface`: availability (device type, then architecture
 * from the device facts, which `call` may state explicitly), applicability (refusals), then
 * precedence. Errors (rows 6-10): OpNotAvailableError "... in-tree kernels do not run on <dev>";
 * ValueError "no implementation serves this call" listing every key with its reason (the spec's
 * selection tests catch it as a ValueError); SelectionError "dispatch is ambiguous", "takes a
 * <Request> call spec", "cannot key a dispatch cache". */
tr_status *tr_selector_key_for(tr_selector *selector, const char *interface,
                               const tr_call_spec *call, const char **key) TR_MUST_USE;

/* What kernel_for gives: the key and the kernel built for the call's build identity (owned by
 * the selector). */
typedef struct tr_selected {
  const char *key;
  const tr_kernel *kernel;
} tr_selected;

/* Whether any implementation of the op (of every interface) runs on `device_type`: the spec's
 * "in-tree kernels do not run on" comes before anything else is asked. Cannot fail;
 * thread-safe (the selector's types do not change once it is built). */
int tr_selector_runs_on(const tr_selector *selector, const char *device_type);

/* Selects and builds (the factory runs once per build identity). The device facts are derived
 * from the call's device; a call spec stating them is refused (row 11: "this call spec states
 * ['arch']"). A repeated call with an equal call spec is one hash lookup. A factory whose
 * tr_kernel's struct_size is below TR_KERNEL_MIN_SIZE is a BackendError (nothing of it kept).
 * Thread-safe. */
tr_status *tr_selector_kernel_for(tr_selector *selector, const char *interface,
                                  const tr_call_spec *call, tr_selected *out) TR_MUST_USE;

/* The kernel of the implementation `key` for `call`, built as kernel_for builds it (the factory
 * once per build identity; the selector owns the kernel), without selecting: for a key the select
 * component answered. A key `interface` does not hold is a SelectionError; otherwise errors as
 * kernel_for's factory and facts give them. Thread-safe. */
tr_status *tr_selector_kernel_of(tr_selector *selector, const char *interface, const char *key,
                                 const tr_call_spec *call, tr_selected *out) TR_MUST_USE;

/* The implementation registered under `key` for `interface`, or NULL (what the build step runs
 * once select has answered a key). */
const tr_kernel_type *tr_selector_type(const tr_selector *selector, const char *interface, const char *key);

/* Counters for tests and benchmarks: selections made, factories run, cache hits. */
typedef struct tr_selector_stats {
  uint64_t selections, builds, hits;
} tr_selector_stats;
tr_selector_stats tr_selector_get_stats(const tr_selector *selector);

/* 1 when an interface name has the form {Name}{Variant}{Fwd|Bwd}Interface. */
int tr_interface_name_ok(const char *name);

/* The inventory lint: an op that holds kernel types declares interfaces. Returns a
 * SelectionError "<op> holds kernels but does not declare interfaces: declare interfaces" or
 * NULL. */
tr_status *tr_selector_inventory_check(const char *op_name, size_t n_interfaces,
                                       size_t n_types) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_SELECTOR_SELECTOR_H_ */
