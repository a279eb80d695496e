/* kernel_type.h: what a backend writes to add an implementation to an in-tree op's kernel
 * interface (register_kernel_type): call specs, kernel interfaces and kernel types, in C
 * (../shared/spec/kernel-selection.txt). Needs nothing but the public headers: everything a
 * plugin calls at run time is inline here or reached through the API table (backend.h).
 *
 * The spec's Python in C: a CallSpec dataclass is a tr_call_spec_type (its fields) and a
 * tr_call_spec (their values, the device, and the device facts derived from it); a
 * KernelInterface class is a tr_kernel_interface; a Kernel class registered under a key is a
 * tr_kernel_type (class attributes and class methods are fields and function pointers). */
#ifndef TILERUN_KERNEL_TYPE_H_
#define TILERUN_KERNEL_TYPE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tilerun/backend.h"
#include "tilerun/device.h"
#include "tilerun/status.h"
#include "tilerun/value.h"

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

/* A call-spec type: its name ("AttentionCall") and fields. Static data of whoever declares it
 * (tilerun for the in-tree interfaces); never freed. */
typedef struct tr_call_spec_type {
  const char *name;
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

/* A call spec: immutable facts of one call, made by tilerun and lent to a kernel type's
 * refusal, entry_for and factory for the duration of that call (copy what you keep). Read it
 * with tr_call_spec_get / _int / _float below. */
typedef struct tr_call_spec {
  const tr_call_spec_type *type;
  tr_device device;
  tr_value values[TR_CALL_MAX_FIELDS]; /* in the type's field order */
  uint32_t stated_facts;               /* TR_FACT_* given explicitly */
  int facts_known;                     /* facts holds the device's facts (stated or derived) */
  tr_device_facts facts;
} tr_call_spec;

/* The value of `field` in `spec`, or NULL when its type has no such field. The value is the
 * spec's (valid while the spec is). Cannot fail; thread-safe (reads only). Inline, so a plugin
 * needs no tilerun library to call it. */
static inline const tr_value *tr_call_spec_get(const tr_call_spec *spec, const char *field) {
  for (size_t i = 0; i < spec->type->n_fields && i < TR_CALL_MAX_FIELDS; i++) {
    if (strcmp(spec->type->fields[i].name, field) == 0) return &spec->values[i];
  }
  return NULL;
}

/* An int field's value; 0 when there is no such field or it is not an int. Cannot fail. */
static inline int64_t tr_call_spec_int(const tr_call_spec *spec, const char *field) {
  const tr_value *v = tr_call_spec_get(spec, field);
  return v && v->kind == TR_VALUE_INT ? v->as.i : 0;
}

/* A float field's value (an int field's converted); 0 when there is no such field or it is
 * neither. Cannot fail. */
static inline double tr_call_spec_float(const tr_call_spec *spec, const char *field) {
  const tr_value *v = tr_call_spec_get(spec, field);
  return v && v->kind == TR_VALUE_FLOAT ? v->as.f : v && v->kind == TR_VALUE_INT ? (double)v->as.i : 0;
}

/* A kernel interface: the call-spec type its implementations take and the forward contract
 * (the argument names the op passes; the doc states each tensor's shape, dtype, layout, device,
 * whether written, and what is returned). Named {Name}{Variant}{Fwd|Bwd}Interface. The in-tree
 * ones are tilerun's static data: a plugin finds one with the API table's find_interface and
 * keeps the pointer for as long as it is loaded (never frees it). */
struct tr_kernel_interface {
  const char *name;
  const tr_call_spec_type *request;
  size_t n_args;
  const char *const *args;
  size_t n_returns;
  const char *const *returns; /* what forward returns, in order */
  const char *doc;
};

/* refusal: NULL when the implementation serves the call, else the reason (a static string, or
 * text written into `buf`, `size` bytes). It describes this implementation's own range only.
 * Called from any thread, possibly at once: must not block or keep state. */
typedef const char *(*tr_refusal_fn)(const tr_kernel_type *self, const tr_call_spec *call,
                                     char *buf, size_t size);

/* A build identity: every fact that changes the build (compared bytewise). */
typedef struct tr_build_identity {
  uint32_t size;
  uint8_t bytes[256];
} tr_build_identity;

/* entry_for: writes the call's build identity (at most 256 bytes). A status fails the call
 * (the caller receives it and frees it). NULL entry_for: the identity is the whole call spec
 * (compared whole: two call specs share a build only where they are equal). */
typedef tr_status *(*tr_entry_for_fn)(const tr_kernel_type *self, const tr_call_spec *call,
                                      tr_build_identity *identity);

/* The factory: builds the kernel into `out` (tilerun's memory, zeroed, struct_size set to
 * tilerun's sizeof(tr_kernel); fill in self, call and the optional members), run once per build
 * identity, serialised by the selector. tilerun keeps the kernel until the runtime is destroyed
 * and then calls its release. A status fails the call and nothing is kept. */
typedef tr_status *(*tr_factory_fn)(const tr_kernel_type *self, const tr_call_spec *call,
                                    tr_kernel *out);

/* An implementation of an interface, registered under a snake_case key. Zero/NULL fields take
 * the spec's defaults (table 3): devices {"cuda"}, any architecture, serves every call, not
 * general, wins over nothing. With a base, as a subclass in the spec: the base's refusal also
 * applies, and devices, supported_archs and preferred_over left NULL are the nearest base's that
 * states them; general is the type's own (not inherited: a zero field cannot say "unset"). A
 * chain of bases that comes back on itself is refused when the selector is built.
 *
 * struct_size is sizeof(tr_kernel_type) as the plugin was built: tilerun reads no member past
 * it, and refuses a type (and each of its bases) shorter than TR_KERNEL_TYPE_MIN_SIZE, the
 * members of version 1 (up to ctx), with a BackendError that fails the plugin's load. Members
 * are only ever appended: one added later is read only where struct_size covers it. A plugin
 * owns its types (static data) and they must stay unchanged while it is loaded. */
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

/* The smallest struct_size tilerun accepts for a registered tr_kernel_type: version 1's members,
 * key to ctx. */
#define TR_KERNEL_TYPE_MIN_SIZE TR_STRUCT_SIZE_TO(tr_kernel_type, ctx)

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNEL_TYPE_H_ */
