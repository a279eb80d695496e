/* selector.h: in-tree kernel selection (../shared/spec/kernel-selection.txt in C): call specs and
 * kernel interfaces, implementations (kernel types) with availability, applicability and
 * precedence, the checks made when an op's selector is built and at each call, and a cache that
 * makes a repeated call one hash lookup. The `select` component's library; no ZeroMQ inside.
 *
 * The spec's Python in C: a CallSpec dataclass is a tr_call_spec_type (its fields) and a
 * tr_call_spec (their values, the device, and device facts derived from it); a KernelInterface
 * class is a tr_kernel_interface; a Kernel class registered under a key is a tr_kernel_type (its
 * class attributes and class methods are fields and function pointers); `op.key_for` and
 * `op.kernel_for` are tr_selector_key_for and tr_selector_kernel_for. */
#ifndef TILERUN_SELECTOR_SELECTOR_H_
#define TILERUN_SELECTOR_SELECTOR_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/backend.h"
#include "tilerun/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_CALL_MAX_FIELDS 24

/* One field of a call-spec type. A `mutable` field (a Python list) cannot key a cache: a type
 * declaring one is refused at selection. */
typedef struct tr_call_field {
  const char *name;
  tr_value_kind kind;
  int is_mutable;
  int has_default;
  tr_value default_value; /* int, float, bool or dtype; a string or list default is not allowed */
} tr_call_field;

typedef struct tr_call_spec_type {
  const char *name; /* "AttentionCall" */
  size_t n_fields;
  const tr_call_field *fields;
} tr_call_spec_type;

/* Which device facts a call spec states (only key_for accepts stated facts). */
enum {
  TR_FACT_ARCH = 1,
  TR_FACT_CALIBRATION = 2,
  TR_FACT_SM_COUNT = 4,
  TR_FACT_SMEM_BUDGET = 8,
};

/* A call spec: immutable facts of one call. A plain struct; tr_call_spec_clear frees its values. */
typedef struct tr_call_spec {
  const tr_call_spec_type *type;
  tr_device device;
  tr_value values[TR_CALL_MAX_FIELDS]; /* in the type's field order */
  uint32_t stated_facts;               /* TR_FACT_* given explicitly */
  int facts_known;                     /* facts holds the device's facts (stated or derived) */
  tr_device_facts facts;
} tr_call_spec;

/* Makes a call spec of `type` on `device` from named values (fields not given take their
 * defaults; a field without a default is required). Unknown names, missing fields and values of
 * the wrong kind are a ValueError naming the field and the value. An int is accepted for a float
 * field. On failure *out is cleared. */
tr_status *tr_call_spec_init(tr_call_spec *out, const tr_call_spec_type *type, const tr_device *device,
                             const tr_named_value *values, size_t n_values) TR_MUST_USE;

/* States device facts explicitly (for key_for in tests): `which` is a TR_FACT_* mask. */
void tr_call_spec_state_facts(tr_call_spec *spec, uint32_t which, const tr_device_facts *facts);

const tr_value *tr_call_spec_get(const tr_call_spec *spec, const char *field); /* NULL: none */
int64_t tr_call_spec_int(const tr_call_spec *spec, const char *field); /* 0 when not an int */
double tr_call_spec_float(const tr_call_spec *spec, const char *field);

/* Hash and equality over type, device, values and stated facts. */
uint64_t tr_call_spec_hash(const tr_call_spec *spec);
int tr_call_spec_equal(const tr_call_spec *a, const tr_call_spec *b);

/* "AttentionCall(batch=1, seqlen_kv=4096, ..., device=cuda:0)"; returns the length needed. */
size_t tr_call_spec_format(const tr_call_spec *spec, char *buf, size_t size);

/* Deep copy (values own their storage). OutOfMemoryError leaves *dst cleared. */
tr_status *tr_call_spec_copy(const tr_call_spec *src, tr_call_spec *dst) TR_MUST_USE;
void tr_call_spec_clear(tr_call_spec *spec);

/* A kernel interface: the call-spec type its implementations take and the forward contract
 * (the argument names the op passes; the doc states each tensor's shape, dtype, layout, device,
 * whether written, and what is returned). Named {Name}{Variant}{Fwd|Bwd}Interface. */
typedef struct tr_kernel_interface {
  const char *name;
  const tr_call_spec_type *request;
  size_t n_args;
  const char *const *args;
  size_t n_returns;
  const char *const *returns; /* what forward returns, in order */
  const char *doc;
} tr_kernel_interface;

/* tr_kernel_type is declared in backend.h (plugins register them). */

/* refusal: NULL when the implementation serves the call, else the reason (a static string, or
 * text written into `buf`). It describes this implementation's own range only. */
typedef const char *(*tr_refusal_fn)(const tr_kernel_type *self, const tr_call_spec *call,
                                     char *buf, size_t size);

/* A build identity: every fact that changes the build (hashable). */
typedef struct tr_build_identity {
  uint32_t size;
  uint8_t bytes[256];
} tr_build_identity;

/* entry_for: writes the call's build identity. NULL entry_for: the identity is the whole call
 * spec (compared whole: two call specs share a build only where they are equal). */
typedef tr_status *(*tr_entry_for_fn)(const tr_kernel_type *self, const tr_call_spec *call,
                                      tr_build_identity *identity);

/* The factory: builds the kernel, run only the first time an identity appears. */
typedef tr_status *(*tr_factory_fn)(const tr_kernel_type *self, const tr_call_spec *call,
                                    tr_kernel *out);

/* An implementation of an interface, registered under a snake_case key. Zero/NULL fields take
 * the spec's defaults (table 3): devices {"cuda"}, any architecture, serves every call, not
 * general, wins over nothing. With a base, as a subclass in the spec: the base's refusal also
 * applies, and devices, supported_archs and preferred_over left NULL are the nearest base's that
 * states them; general is the type's own (not inherited: a zero field cannot say "unset"). A
 * chain of bases that comes back on itself is refused when the selector is built. */
struct tr_kernel_type {
  size_t struct_size;
  const char *key;
  const tr_kernel_interface *interface;
  const char *const *devices; /* NULL-terminated; NULL: {"cuda"} */
  const int32_t *supported_archs; /* n_archs entries; NULL: any architecture */
  size_t n_archs;
  int general;
  const char *const *preferred_over; /* NULL-terminated keys; NULL: none */
  const tr_kernel_type *base;        /* its refusal also applies (the spec's super().refusal) */
  tr_refusal_fn refusal;
  tr_entry_for_fn entry_for;
  tr_factory_fn factory; /* NULL: not a kernel ("does not implement <Interface>") */
  const char *const *forward_args; /* NULL-terminated; NULL: the interface's. As many as the
                                    * interface's args (they pass positionally: names may differ) */
  void *ctx;
};

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
 * SelectionError "no implementation serves this call" listing every key with its reason,
 * "dispatch is ambiguous", "takes a <Request> call spec", "cannot key a dispatch cache". */
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
 * ['arch']"). A repeated call with an equal call spec is one hash lookup. Thread-safe. */
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
