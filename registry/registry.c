/* registry.c: plugins loaded through the platform layer, their registrations (rolled back when a
 * plugin fails part-way), load failures, and target settlement. */
#include "registry/registry.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "platform/platform.h"
#include "selector/selector.h"

typedef struct detector_entry {
  char *target;         /* one allocation with `backend` */
  const char *backend;  /* the backend that registered it, for the message of a second */
  tr_detect_fn detect;
  void *ctx;
  int owner;
} detector_entry;

/* A registered builder as tr_registry_builder hands it out: checked_build calls it and checks
 * the tr_kernel it fills in. Its own allocation, so its address outlives the array's growth. */
typedef struct builder_ref {
  tr_build_kernel_fn build;
  void *ctx;
  char backend[]; /* the backend's name, for messages */
} builder_ref;

typedef struct builder_entry {
  char *op, *target;
  builder_ref *ref;
  int owner;
} builder_entry;

typedef struct facts_entry {
  char *device_type;
  tr_read_facts_fn read;
  void *ctx;
  int owner;
} facts_entry;

typedef struct dltype_entry {
  char *device_type;
  int32_t dl_type;
  int owner;
} dltype_entry;

typedef struct alloc_entry {
  char *device_type;
  tr_alloc_fn alloc;
  tr_free_fn free_fn;
  tr_copy_fn copy;
  void *ctx;
  int owner;
} alloc_entry;

typedef struct ktype_entry {
  char *op;
  const tr_kernel_type *type;
  const char *key; /* the type's key, read when it was registered */
  int owner;
} ktype_entry;

typedef struct failure_entry {
  tr_load_failure f;
  char *storage;
} failure_entry;

/* A growable array of `T`: items, count, capacity. */
#define ARRAY(T) struct { T *items; size_t count, capacity; }

struct tr_registry {
  ARRAY(detector_entry) detectors;
  ARRAY(builder_entry) builders;
  ARRAY(facts_entry) facts;
  ARRAY(dltype_entry) dltypes;
  ARRAY(alloc_entry) allocs;
  ARRAY(ktype_entry) ktypes;
  ARRAY(failure_entry) failures;
  ARRAY(tr_plat_lib *) libs;
  tr_interface_finder find_interface; /* what the API table's find_interface asks; NULL: none */
  void *find_ctx;
  tr_op_known_fn op_known;     /* whether the manifest declares an op; NULL: not checked */
  void *op_known_ctx;
  tr_load_check_fn load_check; /* run after each init that registered kernel types; NULL: none */
  void *load_check_ctx;
  int owner;           /* the backend now registering (its pass), for rollback */
  int last_owner;      /* the last pass, for a rollback after init */
  const char *backend; /* its name, for messages */
  int refused;         /* a registration of this pass was refused */
  char refusal[512];   /* the first one's message */
  tr_warn_fn warn;
  void *warn_ctx;
};

static int grow(void **items, size_t *capacity, size_t count, size_t elem) {
  if (count < *capacity) return 1;
  size_t grown = *capacity ? *capacity * 2 : 8;
  void *bigger = realloc(*items, grown * elem);
  if (bigger == NULL) return 0;
  *items = bigger;
  *capacity = grown;
  return 1;
}

#define PUSH(array, value)                                                                    \
  (grow((void **)&(array).items, &(array).capacity, (array).count, sizeof(*(array).items))   \
       ? ((array).items[(array).count++] = (value), 1)                                       \
       : 0)

static char *dup_text(const char *s) {
  size_t n = strlen(s) + 1;
  char *copy = malloc(n);
  if (copy != NULL) memcpy(copy, s, n);
  return copy;
}

#define OOM() TR_STATUS(TR_OUT_OF_MEMORY, "registering backend '%s'", reg->backend)

/* Names follow the device-type rule, [a-z][a-z0-9_]* of at most 31 characters. */
static tr_status *check_name(const tr_registry *reg, const char *what, const char *name) {
  tr_device probe;
  if (name == NULL) {
    return TR_STATUS(TR_BACKEND, "backend '%s': the %s is NULL; a name is a lowercase letter followed by at most %d "
                     "lowercase letters, digits or '_'", reg->backend, what, TR_DEVICE_TYPE_MAX - 1);
  }
  tr_status *bad = tr_device_make(name, TR_DEVICE_NO_INDEX, &probe);
  if (bad == NULL) return NULL;
  tr_status_destroy(&bad);
  return TR_STATUS(TR_BACKEND, "backend '%s': %s '%s' must be a lowercase letter followed by at "
                   "most %d lowercase letters, digits or '_'", reg->backend, what, name, TR_DEVICE_TYPE_MAX - 1);
}

/* ---- the API table's functions ---- */

static tr_status *register_detector(void *host, const char *target, tr_detect_fn detect, void *ctx) {
  tr_registry *reg = host;
  if (reg == NULL) return TR_STATUS(TR_VALUE, "register_detector: 'host' is NULL (pass the API table's host)");
  TR_RETURN_IF_ERROR(check_name(reg, "target", target));
  if (detect == NULL) return TR_STATUS(TR_BACKEND, "backend '%s': detector of target '%s' is NULL", reg->backend, target);
  for (size_t i = 0; i < reg->detectors.count; i++) {
    if (strcmp(reg->detectors.items[i].target, target) == 0) {
      if (strcmp(reg->detectors.items[i].backend, reg->backend) == 0) {
        return TR_STATUS(TR_BACKEND, "backend '%s': target '%s' already has a detector (its own); a target has one",
                         reg->backend, target);
      }
      return TR_STATUS(TR_BACKEND, "backend '%s': target '%s' already has a detector, registered by backend "
                       "'%s' (loaded first); a target is one set of kernels from one provider", reg->backend, target,
                       reg->detectors.items[i].backend);
    }
  }
  size_t n_target = strlen(target) + 1, n_backend = strlen(reg->backend) + 1;
  detector_entry e = {malloc(n_target + n_backend), NULL, detect, ctx, reg->owner};
  if (e.target != NULL) {
    memcpy(e.target, target, n_target);
    memcpy(e.target + n_target, reg->backend, n_backend);
    e.backend = e.target + n_target;
  }
  if (e.target == NULL || !PUSH(reg->detectors, e)) {
    free(e.target);
    return OOM();
  }
  return NULL;
}

static tr_status *register_kernel_builder(void *host, const char *op, const char *target,
                                              tr_build_kernel_fn build, void *ctx) {
  tr_registry *reg = host;
  if (reg == NULL) return TR_STATUS(TR_VALUE, "register_kernel_builder: 'host' is NULL (pass the API table's host)");
  TR_RETURN_IF_ERROR(check_name(reg, "target", target));
  if (op == NULL || op[0] == '\0') return TR_STATUS(TR_BACKEND, "backend '%s': a builder for target '%s' names no op", reg->backend, target);
  if (build == NULL) return TR_STATUS(TR_BACKEND, "backend '%s': builder of (%s, %s) is NULL", reg->backend, op, target);
  for (size_t i = 0; i < reg->builders.count; i++) {
    const builder_entry *b = &reg->builders.items[i];
    if (strcmp(b->op, op) == 0 && strcmp(b->target, target) == 0) {
      const char *first = b->ref != NULL ? b->ref->backend : reg->backend;
      if (strcmp(first, reg->backend) == 0) {
        return TR_STATUS(TR_BACKEND, "backend '%s': (%s, %s) already has a kernel builder; registering the same "
                         "(op, target) twice is an error", reg->backend, op, target);
      }
      return TR_STATUS(TR_BACKEND, "backend '%s': (%s, %s) already has a kernel builder, registered by backend '%s' "
                       "(loaded first); registering the same (op, target) twice is an error", reg->backend, op,
                       target, first);
    }
  }
  size_t name_size = strlen(reg->backend) + 1;
  builder_ref *ref = malloc(sizeof(*ref) + name_size);
  if (ref != NULL) {
    ref->build = build;
    ref->ctx = ctx;
    memcpy(ref->backend, reg->backend, name_size);
  }
  builder_entry e = {dup_text(op), dup_text(target), ref, reg->owner};
  if (e.op == NULL || e.target == NULL || ref == NULL || !PUSH(reg->builders, e)) {
    free(e.op);
    free(e.target);
    free(ref);
    return OOM();
  }
  return NULL;
}

/* A plugin's builder, then the struct_size of the kernel it filled in: shorter than version 1
 * of tr_kernel is a BackendError, and the kernel is dropped unread (its release is not one
 * tilerun can trust); members past a shorter struct_size are cleared (absent). */
static tr_status *checked_build(void *ctx, const tr_build_request *req, tr_kernel *out) {
  const builder_ref *ref = ctx;
  TR_RETURN_IF_ERROR(ref->build(ref->ctx, req, out));
  size_t got = out->struct_size;
  if (!tr__kernel_fits(out)) {
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    return TR_STATUS(TR_BACKEND, "backend '%s': the kernel built for (%s, %s) has struct_size %zu, shorter "
                     "than the %zu bytes of tr_kernel version 1 that tilerun reads; rebuild the backend "
                     "against tilerun's headers", ref->backend, req->op, req->target, got,
                     (size_t)TR_KERNEL_MIN_SIZE);
  }
  return NULL;
}

static tr_status *register_device_facts(void *host, const char *device_type,
                                            tr_read_facts_fn read, void *ctx) {
  tr_registry *reg = host;
  if (reg == NULL) return TR_STATUS(TR_VALUE, "register_device_facts: 'host' is NULL (pass the API table's host)");
  TR_RETURN_IF_ERROR(check_name(reg, "device type", device_type));
  if (strcmp(device_type, "cuda") == 0) {
    return TR_STATUS(TR_BACKEND, "backend '%s': facts for device type 'cuda' cannot be registered; "
                     "tilerun reads them itself", reg->backend);
  }
  if (read == NULL) return TR_STATUS(TR_BACKEND, "backend '%s': facts read of '%s' is NULL", reg->backend, device_type);
  for (size_t i = 0; i < reg->facts.count; i++) {
    if (strcmp(reg->facts.items[i].device_type, device_type) == 0) {
      return TR_STATUS(TR_BACKEND, "backend '%s': device type '%s' already has facts; facts belong "
                       "to a device type and only one backend registers them", reg->backend, device_type);
    }
  }
  facts_entry e = {dup_text(device_type), read, ctx, reg->owner};
  if (e.device_type == NULL || !PUSH(reg->facts, e)) {
    free(e.device_type);
    return OOM();
  }
  return NULL;
}

static tr_status *register_device_type(void *host, const char *device_type, int32_t dl_type) {
  tr_registry *reg = host;
  if (reg == NULL) return TR_STATUS(TR_VALUE, "register_device_type: 'host' is NULL (pass the API table's host)");
  TR_RETURN_IF_ERROR(check_name(reg, "device type", device_type));
  tr_device known;
  tr_status *named = tr_device_from_dl((DLDevice){(DLDeviceType)dl_type, 0}, &known);
  int taken = named == NULL && strcmp(known.type, "ext_dev") != 0; /* kDLExtDev is for backends */
  tr_status_destroy(&named);
  if (taken || strcmp(device_type, "cpu") == 0 || strcmp(device_type, "cuda") == 0) {
    return TR_STATUS(TR_BACKEND, "backend '%s': device type '%s' on DLPack device type %d: tilerun "
                     "names %s itself", reg->backend, device_type, (int)dl_type,
                     taken ? "that DLPack device type" : "that device type");
  }
  for (size_t i = 0; i < reg->dltypes.count; i++) {
    const dltype_entry *d = &reg->dltypes.items[i];
    if (strcmp(d->device_type, device_type) == 0 || d->dl_type == dl_type) {
      return TR_STATUS(TR_BACKEND, "backend '%s': device type '%s' or DLPack device type %d is "
                       "already registered (as '%s' = %d)", reg->backend, device_type, (int)dl_type,
                       d->device_type, (int)d->dl_type);
    }
  }
  dltype_entry e = {dup_text(device_type), dl_type, reg->owner};
  if (e.device_type == NULL || !PUSH(reg->dltypes, e)) {
    free(e.device_type);
    return OOM();
  }
  return NULL;
}

static tr_status *register_allocator(void *host, const char *device_type, tr_alloc_fn alloc,
                                         tr_free_fn free_fn, tr_copy_fn copy, void *ctx) {
  tr_registry *reg = host;
  if (reg == NULL) return TR_STATUS(TR_VALUE, "register_allocator: 'host' is NULL (pass the API table's host)");
  TR_RETURN_IF_ERROR(check_name(reg, "device type", device_type));
  if (alloc == NULL || free_fn == NULL) {
    return TR_STATUS(TR_BACKEND, "backend '%s': the allocator of '%s' needs alloc and free", reg->backend, device_type);
  }
  if (strcmp(device_type, "cpu") == 0 || strcmp(device_type, "cuda") == 0) {
    return TR_STATUS(TR_BACKEND, "backend '%s': tilerun allocates '%s' memory itself", reg->backend, device_type);
  }
  for (size_t i = 0; i < reg->allocs.count; i++) {
    if (strcmp(reg->allocs.items[i].device_type, device_type) == 0) {
      return TR_STATUS(TR_BACKEND, "backend '%s': device type '%s' already has an allocator", reg->backend, device_type);
    }
  }
  alloc_entry e = {dup_text(device_type), alloc, free_fn, copy, ctx, reg->owner};
  if (e.device_type == NULL || !PUSH(reg->allocs, e)) {
    free(e.device_type);
    return OOM();
  }
  return NULL;
}

/* Bases followed when checking a registered type's chain: further is a chain that loops (the
 * selector refuses it by name when it is built). */
enum { MAX_BASES = 64 };

/* The type and each of its bases holds every member the selector reads (version 1's). Reads
 * struct_size and base only, and base only where struct_size covers it. */
static tr_status *check_type_sizes(const tr_registry *reg, const char *op, const tr_kernel_type *type) {
  const tr_kernel_type *t = type;
  for (int depth = 0; t != NULL && depth < MAX_BASES; depth++, t = t->base) {
    if (t->struct_size >= TR_KERNEL_TYPE_MIN_SIZE) continue;
    char which[64] = "its tr_kernel_type";
    if (depth > 0) snprintf(which, sizeof(which), "the tr_kernel_type of its base %d level%s up", depth, depth == 1 ? "" : "s");
    return TR_STATUS(TR_BACKEND, "backend '%s': register_kernel_type for %s: %s has struct_size %zu, shorter "
                     "than the %zu bytes of tr_kernel_type version 1 that tilerun reads; rebuild the "
                     "backend against tilerun's headers", reg->backend, op, which, t->struct_size,
                     (size_t)TR_KERNEL_TYPE_MIN_SIZE);
  }
  return NULL;
}

static tr_status *register_kernel_type(void *host, const char *op, const tr_kernel_type *type) {
  tr_registry *reg = host;
  if (reg == NULL) return TR_STATUS(TR_VALUE, "register_kernel_type: 'host' is NULL (pass the API table's host)");
  if (op == NULL || type == NULL) {
    return TR_STATUS(TR_BACKEND, "backend '%s': register_kernel_type needs an op and a kernel type", reg->backend);
  }
  TR_RETURN_IF_ERROR(check_type_sizes(reg, op, type)); /* before any member past struct_size */
  if (type->key == NULL) {
    return TR_STATUS(TR_BACKEND, "backend '%s': register_kernel_type for %s: the kernel type has no key", reg->backend, op);
  }
  const char *key = type->key;
  if (type->interface == NULL || type->interface->name == NULL) {
    return TR_STATUS(TR_BACKEND, "backend '%s': kernel type '%s' for %s names no kernel interface (find it "
                     "with the API table's find_interface)", reg->backend, key, op);
  }
  if (reg->find_interface != NULL && reg->find_interface(reg->find_ctx, op, type->interface->name) != type->interface) {
    return TR_STATUS(TR_BACKEND, "backend '%s': kernel type '%s' implements %s, which is not a kernel interface "
                     "of %s (find it with the API table's find_interface)", reg->backend, key,
                     type->interface->name, op);
  }
  for (size_t i = 0; i < reg->ktypes.count; i++) {
    if (strcmp(reg->ktypes.items[i].op, op) == 0 && strcmp(reg->ktypes.items[i].key, key) == 0) {
      return TR_STATUS(TR_BACKEND, "backend '%s': %s already has a kernel type '%s'", reg->backend, op, key);
    }
  }
  ktype_entry e = {dup_text(op), type, key, reg->owner};
  if (e.op == NULL || !PUSH(reg->ktypes, e)) {
    free(e.op);
    return OOM();
  }
  return NULL;
}

/* ---- the API table's register functions: in init only; a refusal fails the whole init ---- */

static tr_status *outside_init(const tr_registry *reg, const char *fn) {
  if (reg == NULL || reg->owner != 0) return NULL;
  return TR_STATUS(TR_BACKEND, "%s was called outside a backend's init: registrations are taken only while the "
                   "backend's init runs (the table's host and find_interface may be kept; the register functions "
                   "may not be called later)", fn);
}

static tr_status *noted(tr_registry *reg, tr_status *refused) {
  if (refused != NULL && reg != NULL && reg->owner != 0 && !reg->refused) {
    reg->refused = 1;
    snprintf(reg->refusal, sizeof(reg->refusal), "%s: %s", tr_code_name(tr_status_code(refused)),
             tr_status_message(refused));
  }
  return refused;
}

static tr_status *api_register_detector(void *host, const char *target, tr_detect_fn detect, void *ctx) {
  tr_status *outside = outside_init(host, "register_detector");
  return outside ? outside : noted(host, register_detector(host, target, detect, ctx));
}
static tr_status *api_register_kernel_builder(void *host, const char *op, const char *target,
                                              tr_build_kernel_fn build, void *ctx) {
  tr_status *outside = outside_init(host, "register_kernel_builder");
  if (outside != NULL) return outside;
  tr_status *refused = noted(host, register_kernel_builder(host, op, target, build, ctx));
  tr_registry *reg = host;
  if (refused == NULL && reg->op_known != NULL && !reg->op_known(reg->op_known_ctx, op)) {
    char line[512];
    snprintf(line, sizeof(line), "backend '%s': a kernel builder for '%s', an op the manifest does not declare "
             "(misspelt?), is never called", reg->backend, op);
    reg->warn(reg->warn_ctx, line);
  }
  return refused;
}
static tr_status *api_register_device_facts(void *host, const char *device_type, tr_read_facts_fn read, void *ctx) {
  tr_status *outside = outside_init(host, "register_device_facts");
  return outside ? outside : noted(host, register_device_facts(host, device_type, read, ctx));
}
static tr_status *api_register_device_type(void *host, const char *device_type, int32_t dl_type) {
  tr_status *outside = outside_init(host, "register_device_type");
  return outside ? outside : noted(host, register_device_type(host, device_type, dl_type));
}
static tr_status *api_register_allocator(void *host, const char *device_type, tr_alloc_fn alloc,
                                         tr_free_fn free_fn, tr_copy_fn copy, void *ctx) {
  tr_status *outside = outside_init(host, "register_allocator");
  return outside ? outside : noted(host, register_allocator(host, device_type, alloc, free_fn, copy, ctx));
}
static tr_status *api_register_kernel_type(void *host, const char *op, const tr_kernel_type *type) {
  tr_status *outside = outside_init(host, "register_kernel_type");
  return outside ? outside : noted(host, register_kernel_type(host, op, type));
}

void tr_registry_set_op_check(tr_registry *reg, tr_op_known_fn known, void *ctx) {
  reg->op_known = known;
  reg->op_known_ctx = ctx;
}

static const tr_kernel_interface *api_find_interface(void *host, const char *op, const char *name) {
  const tr_registry *reg = host;
  if (reg == NULL || reg->find_interface == NULL || op == NULL || name == NULL) return NULL;
  return reg->find_interface(reg->find_ctx, op, name);
}

void tr_registry_set_interface_finder(tr_registry *reg, tr_interface_finder find, void *ctx) {
  reg->find_interface = find;
  reg->find_ctx = ctx;
}

void tr_registry_set_load_check(tr_registry *reg, tr_load_check_fn check, void *ctx) {
  reg->load_check = check;
  reg->load_check_ctx = ctx;
}

/* Returns 1 from the function using it when an entry of `array` belongs to `owner`. */
#define RETURN_IF_OWNED(array, owner)                                \
  for (size_t i_ = 0; i_ < (array).count; i_++) {                    \
    if ((array).items[i_].owner == (owner)) return 1;                \
  }

/* 1 when the backend registering under `owner` added a kernel type. */
static int added_kernel_types(const tr_registry *reg, int owner) {
  RETURN_IF_OWNED(reg->ktypes, owner)
  return 0;
}

/* 1 when the backend registering under `owner` registered anything at all. */
static int registered_any(const tr_registry *reg, int owner) {
  RETURN_IF_OWNED(reg->detectors, owner)
  RETURN_IF_OWNED(reg->builders, owner)
  RETURN_IF_OWNED(reg->facts, owner)
  RETURN_IF_OWNED(reg->dltypes, owner)
  RETURN_IF_OWNED(reg->allocs, owner)
  return added_kernel_types(reg, owner);
}
#undef RETURN_IF_OWNED

size_t tr_registry_kernel_types(const tr_registry *reg, const char *op, const tr_kernel_type **types,
                                size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < reg->ktypes.count; i++) {
    if (strcmp(reg->ktypes.items[i].op, op) != 0) continue;
    if (n < max) types[n] = reg->ktypes.items[i].type;
    n++;
  }
  return n;
}

/* ---- loading ---- */

/* Removes every entry the given owner registered. */
static void rollback(tr_registry *reg, int owner) {
#define DROP(array, free_entry)                                             \
  do {                                                                      \
    size_t kept = 0;                                                        \
    for (size_t i = 0; i < (array).count; i++) {                            \
      if ((array).items[i].owner == owner) {                                \
        free_entry(&(array).items[i]);                                      \
      } else {                                                              \
        (array).items[kept++] = (array).items[i];                           \
      }                                                                     \
    }                                                                       \
    (array).count = kept;                                                   \
  } while (0)
#define FREE_DETECTOR(e) free((e)->target)
#define FREE_BUILDER(e) (free((e)->op), free((e)->target), free((e)->ref))
#define FREE_TYPE(e) free((e)->device_type)
#define FREE_KTYPE(e) free((e)->op)
  DROP(reg->detectors, FREE_DETECTOR);
  DROP(reg->builders, FREE_BUILDER);
  DROP(reg->facts, FREE_TYPE);
  DROP(reg->dltypes, FREE_TYPE);
  DROP(reg->allocs, FREE_TYPE);
  DROP(reg->ktypes, FREE_KTYPE);
#undef DROP
#undef FREE_KTYPE
#undef FREE_DETECTOR
#undef FREE_BUILDER
#undef FREE_TYPE
}

static void default_warn(void *ctx, const char *line) {
  (void)ctx;
  fprintf(stderr, "tilerun: warning: %s\n", line);
}

/* Records a failure and warns once. Takes ownership of `why`. */
static void record_failure(tr_registry *reg, const char *name, const char *descriptor, tr_status *why) {
  const char *reason = tr_status_message(why);
  size_t sizes[3] = {strlen(name) + 1, strlen(descriptor) + 1, strlen(reason) + 1};
  char *storage = malloc(sizes[0] + sizes[1] + sizes[2]);
  char line[2048];
  /* a descriptor that failed before it named its backend goes by its path: said once, and not
   * again where the reason starts with it (a parse error's "path:line:column: ...") */
  if (strcmp(name, descriptor) == 0 && strncmp(reason, descriptor, strlen(descriptor)) == 0) {
    snprintf(line, sizeof(line), "backend descriptor not loaded: %s", reason);
  } else if (strcmp(name, descriptor) == 0) {
    snprintf(line, sizeof(line), "backend descriptor %s not loaded: %s", descriptor, reason);
  } else {
    snprintf(line, sizeof(line), "backend '%s'%s%s%s not loaded: %s", name, descriptor[0] ? " (" : "", descriptor,
             descriptor[0] ? ")" : "", reason);
  }
  reg->warn(reg->warn_ctx, line);
  if (storage != NULL) {
    failure_entry e;
    memcpy(storage, name, sizes[0]);
    memcpy(storage + sizes[0], descriptor, sizes[1]);
    memcpy(storage + sizes[0] + sizes[1], reason, sizes[2]);
    e.storage = storage;
    e.f.backend = storage;
    e.f.descriptor = storage + sizes[0];
    e.f.reason = storage + sizes[0] + sizes[1];
    if (!PUSH(reg->failures, e)) free(storage);
  }
  tr_status_destroy(&why);
}

/* ---- the backend code in hand ---- */

static char g_in_hand[2][768]; /* two records, so the one published is never rewritten */
static uint64_t g_in_hand_since[2];   /* when each began (tr_plat_now_ns) */
static _Atomic int g_in_hand_at = -1;  /* the record published, or -1 */

/* Publishes what backend code runs from now until hand_back (`path` may be NULL). */
static void hand_to(const char *backend, const char *path, const char *what, const char *target) {
  int at = atomic_load(&g_in_hand_at) == 0 ? 1 : 0;
  snprintf(g_in_hand[at], sizeof(g_in_hand[at]), "backend '%s'%s%s%s: %s%s%s%s", backend, path ? " (" : "",
           path ? path : "", path ? ")" : "", what, target ? " '" : "", target ? target : "", target ? "'" : "");
  g_in_hand_since[at] = tr_plat_now_ns();
  atomic_store(&g_in_hand_at, at);
}

static void hand_back(void) { atomic_store(&g_in_hand_at, -1); }

const char *tr_registry_plugin_in_hand(void) {
  int at = atomic_load(&g_in_hand_at);
  return at < 0 ? NULL : g_in_hand[at];
}

const char *tr_registry_plugin_in_hand_since(uint64_t *since_ns) {
  int at = atomic_load(&g_in_hand_at);
  *since_ns = at < 0 ? 0 : g_in_hand_since[at];
  return at < 0 ? NULL : g_in_hand[at];
}

/* Runs an init under a fresh owner id (published as the backend code in hand, with the plugin's
 * `library`, or NULL for a builtin); rolls back and returns the failure (copied, so it stays
 * valid after the plugin is unloaded) when init fails. */
static tr_status *run_init(tr_registry *reg, const char *name, const char *library, tr_backend_init_fn init) {
  static _Atomic int next_owner = 1;
  reg->owner = next_owner++;
  reg->last_owner = reg->owner;
  reg->backend = name;
  tr_backend_api api;
  memset(&api, 0, sizeof(api));
  api.struct_size = sizeof(api);
  api.abi = TR_BACKEND_ABI;
  api.host = reg;
  api.backend = name;
  api.register_detector = api_register_detector;
  api.register_kernel_builder = api_register_kernel_builder;
  api.register_device_facts = api_register_device_facts;
  api.register_device_type = api_register_device_type;
  api.register_allocator = api_register_allocator;
  api.register_kernel_type = api_register_kernel_type;
  api.find_interface = api_find_interface;
  hand_to(name, library, "its init", NULL); /* library: NULL for a builtin */
  reg->refused = 0;
  tr_status *failed = init(&api);
  hand_back();
  tr_status *copy = NULL;
  if (failed == NULL && reg->refused) { /* went on after a refusal: nothing of it is kept */
    rollback(reg, reg->owner);
    copy = TR_STATUS(TR_BACKEND, "its init returned success after a registration was refused (%s); a refused "
                     "registration fails the whole backend", reg->refusal);
  } else if (failed != NULL) {
    rollback(reg, reg->owner);
    copy = TR_STATUS(TR_BACKEND, "its init failed: %s: %s", tr_code_name(tr_status_code(failed)),
                     tr_status_message(failed));
    tr_status_destroy(&failed);
  } else if (!registered_any(reg, reg->owner)) { /* loaded, but nothing of it would ever be seen */
    char line[512];
    snprintf(line, sizeof(line), "backend '%s' loaded but registered nothing (no detector, kernel builder, device "
             "type, facts, allocator or kernel type); it serves nothing", name);
    reg->warn(reg->warn_ctx, line);
  } else if (reg->load_check != NULL && added_kernel_types(reg, reg->owner)) {
    failed = reg->load_check(reg->load_check_ctx, reg);
    if (failed != NULL) {
      rollback(reg, reg->owner);
      copy = TR_STATUS(TR_BACKEND, "its kernel types fail selection's checks: %s: %s",
                       tr_code_name(tr_status_code(failed)), tr_status_message(failed));
      tr_status_destroy(&failed);
    }
  }
  reg->owner = 0;
  reg->backend = "";
  return copy;
}

int tr_registry_load_builtin(tr_registry *reg, const char *name, tr_backend_init_fn init) {
  tr_status *failed = run_init(reg, name, NULL, init);
  if (failed == NULL) return 1;
  record_failure(reg, name, "", failed);
  return 0;
}

int tr_registry_load_plugin(tr_registry *reg, const char *name, const char *library,
                            const char *descriptor) {
  tr_plat_lib *lib = NULL;
  hand_to(name, library, "loading its library", NULL); /* its constructors run */
  tr_status *why = tr_plat_lib_open(library, &lib);
  hand_back();
  if (why == NULL) {
    const uint32_t *abi = tr_plat_lib_symbol(lib, TR_BACKEND_ABI_SYMBOL);
    void *init = tr_plat_lib_symbol(lib, TR_BACKEND_INIT_SYMBOL);
    if (abi != NULL && *abi > 65535) { /* no ABI will get there: the symbol is not what it should be */
      why = TR_STATUS(TR_BACKEND, "%s: its '%s' reads as %u, no ABI version: declare it `const uint32_t %s = "
                      "TR_BACKEND_ABI;` (tilerun/backend.h)", library, TR_BACKEND_ABI_SYMBOL, (unsigned)*abi,
                      TR_BACKEND_ABI_SYMBOL);
    } else if (abi != NULL && *abi > TR_BACKEND_ABI) {
      why = TR_STATUS(TR_BACKEND, "%s was built for backend ABI %u; this tilerun supports ABI %d "
                      "(ABI too new: update tilerun)", library, (unsigned)*abi, TR_BACKEND_ABI);
    } else if (abi != NULL && *abi == 0) {
      why = TR_STATUS(TR_BACKEND, "%s declares backend ABI 0, which no tilerun has (the first is 1; "
                      "tilerun/backend.h's TR_BACKEND_ABI is this one's)", library);
    } else if (init == NULL) {
      why = TR_STATUS(TR_BACKEND, "%s has no symbol '%s'", library, TR_BACKEND_INIT_SYMBOL);
    } else {
      tr_backend_init_fn fn;
      memcpy(&fn, &init, sizeof(fn));
      why = run_init(reg, name, library, fn);
    }
  }
  if (why == NULL && PUSH(reg->libs, lib)) return 1;
  if (why == NULL) { /* registered, but cannot be kept loaded: nothing may point into it */
    rollback(reg, reg->last_owner);
    why = TR_STATUS(TR_OUT_OF_MEMORY, "recording backend '%s'", name);
  }
  tr_plat_lib_close(&lib);
  record_failure(reg, name, descriptor, why);
  return 0;
}

tr_status *tr_registry_load_all(tr_registry *reg, const tr_discovery *found) {
  for (size_t i = 0; i < tr_discovery_failure_count(found); i++) {
    const tr_discovery_failure *f = tr_discovery_failure_at(found, i);
    record_failure(reg, f->descriptor, f->descriptor, TR_STATUS(TR_BACKEND, "%s", f->reason));
  }
  for (size_t i = 0; i < tr_discovery_count(found); i++) {
    const tr_backend_descriptor *d = tr_discovery_at(found, i);
    tr_registry_load_plugin(reg, d->name, d->library, d->descriptor);
  }
  return NULL;
}

tr_status *tr_registry_new(tr_warn_fn warn, void *warn_ctx, tr_registry **out) {
  *out = NULL;
  tr_registry *reg = calloc(1, sizeof(*reg));
  if (reg == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "allocating the registry");
  reg->warn = warn ? warn : default_warn;
  reg->warn_ctx = warn_ctx;
  reg->backend = "";
  *out = reg;
  return NULL;
}

void tr_registry_destroy(tr_registry **registry_p) {
  if (registry_p == NULL || *registry_p == NULL) return;
  tr_registry *reg = *registry_p;
  *registry_p = NULL;
  for (size_t i = 0; i < reg->detectors.count; i++) free(reg->detectors.items[i].target);
  for (size_t i = 0; i < reg->builders.count; i++) {
    free(reg->builders.items[i].op);
    free(reg->builders.items[i].target);
    free(reg->builders.items[i].ref);
  }
  for (size_t i = 0; i < reg->facts.count; i++) free(reg->facts.items[i].device_type);
  for (size_t i = 0; i < reg->dltypes.count; i++) free(reg->dltypes.items[i].device_type);
  for (size_t i = 0; i < reg->allocs.count; i++) free(reg->allocs.items[i].device_type);
  for (size_t i = 0; i < reg->ktypes.count; i++) free(reg->ktypes.items[i].op);
  for (size_t i = 0; i < reg->failures.count; i++) free(reg->failures.items[i].storage);
  /* Plugins stay loaded until the registry goes: kernels they built may still be released. */
  for (size_t i = 0; i < reg->libs.count; i++) tr_plat_lib_close(&reg->libs.items[i]);
  free(reg->detectors.items);
  free(reg->builders.items);
  free(reg->facts.items);
  free(reg->dltypes.items);
  free(reg->allocs.items);
  free(reg->ktypes.items);
  free(reg->failures.items);
  free(reg->libs.items);
  free(reg);
}

/* ---- lookups ---- */

size_t tr_registry_failure_count(const tr_registry *reg) { return reg->failures.count; }

const tr_load_failure *tr_registry_failure_at(const tr_registry *reg, size_t i) {
  return i < reg->failures.count ? &reg->failures.items[i].f : NULL;
}

tr_status *tr_registry_annotate(const tr_registry *reg, tr_status *status) {
  size_t n = reg->failures.count;
  if (status == NULL || n == 0) return status;
  return tr_status_append(status, "; %zu backend%s failed to load (see tr_load_failure_reason)", n,
                          n == 1 ? "" : "s");
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every distinct target name (with `op`: those with a builder for it), sorted; returns count. */
static size_t collect_targets(const tr_registry *reg, const char *op, const char **names, size_t max) {
  size_t n = 0;
  const char *seen[256];
  size_t n_seen = 0;
#define CONSIDER(name)                                                         \
  do {                                                                         \
    int dup = 0;                                                               \
    for (size_t k = 0; k < n_seen && !dup; k++) dup = strcmp(seen[k], (name)) == 0; \
    if (!dup && n_seen < 256) seen[n_seen++] = (name);                         \
  } while (0)
  if (op == NULL) {
    for (size_t i = 0; i < reg->detectors.count; i++) CONSIDER(reg->detectors.items[i].target);
  }
  for (size_t i = 0; i < reg->builders.count; i++) {
    if (op == NULL || strcmp(reg->builders.items[i].op, op) == 0) CONSIDER(reg->builders.items[i].target);
  }
#undef CONSIDER
  qsort(seen, n_seen, sizeof(seen[0]), compare_names);
  for (size_t i = 0; i < n_seen; i++) {
    if (n < max) names[n] = seen[i];
    n++;
  }
  return n;
}

size_t tr_registry_targets(const tr_registry *reg, const char *op, const char **names, size_t max) {
  return collect_targets(reg, op, names, max);
}

/* "['a', 'b']" */
static void names_text(const char *const *names, size_t n, char *buf, size_t size) {
  size_t used = 0;
  if (size > 0) buf[0] = '\0';
  tr__appendf(buf, size, &used, "[");
  for (size_t i = 0; i < n; i++) tr__appendf(buf, size, &used, "%s'%s'", i ? ", " : "", names[i]);
  tr__appendf(buf, size, &used, "]");
}

void tr_registry_targets_text(const tr_registry *reg, const char *op, char *buf, size_t size) {
  const char *names[256];
  size_t n = collect_targets(reg, op, names, 256);
  names_text(names, n < 256 ? n : 256, buf, size);
}

const char *tr_registry_target_name(const tr_registry *reg, const char *target) {
  for (size_t i = 0; i < reg->detectors.count; i++) {
    if (strcmp(reg->detectors.items[i].target, target) == 0) return reg->detectors.items[i].target;
  }
  for (size_t i = 0; i < reg->builders.count; i++) {
    if (strcmp(reg->builders.items[i].target, target) == 0) return reg->builders.items[i].target;
  }
  return NULL;
}

int tr_registry_has_target(const tr_registry *reg, const char *target) {
  return tr_registry_target_name(reg, target) != NULL;
}

int tr_registry_has_builder(const tr_registry *reg, const char *op, const char *target) {
  tr_build_kernel_fn build;
  void *ctx;
  return tr_registry_builder(reg, op, target, &build, &ctx);
}

int tr_registry_builder(const tr_registry *reg, const char *op, const char *target,
                        tr_build_kernel_fn *build, void **ctx) {
  for (size_t i = 0; i < reg->builders.count; i++) {
    const builder_entry *b = &reg->builders.items[i];
    if (strcmp(b->op, op) == 0 && strcmp(b->target, target) == 0) {
      *build = checked_build;
      *ctx = b->ref;
      return 1;
    }
  }
  return 0;
}

/* A named target (or BUILTIN) as the op or the process asked for it. */
static tr_status *named_target(const tr_registry *reg, const char *name, const char **out) {
  if (strcmp(name, TR_BUILTIN) == 0) {
    *out = TR_BUILTIN;
    return NULL;
  }
  if ((*out = tr_registry_target_name(reg, name)) != NULL) return NULL;
  char known[1024];
  tr_registry_targets_text(reg, NULL, known, sizeof(known));
  return TR_STATUS(TR_UNKNOWN_TARGET, "no backend registered target '%s'; known targets: %s", name, known);
}

tr_status *tr_registry_settle(const tr_registry *reg, const char *requested,
                              const char *default_target, const tr_device *device,
                              const char **out) {
  *out = NULL;
  if (requested != NULL) return named_target(reg, requested, out);
  if (default_target != NULL) return named_target(reg, default_target, out);
  const char *claims[64];
  size_t n_claims = 0;
  for (size_t i = 0; i < reg->detectors.count; i++) {
    const detector_entry *d = &reg->detectors.items[i];
    int claimed = 0;
    hand_to(d->backend, NULL, "the detector of target", d->target);
    tr_status *failed = d->detect(d->ctx, device, &claimed);
    hand_back();
    if (failed != NULL) {
      char dev[TR_DEVICE_FORMAT_MAX];
      tr_device_format(device, dev, sizeof(dev));
      tr_status *status = TR_STATUS(TR_BACKEND, "the detector of target '%s' failed on device %s: "
                                    "%s: %s", d->target, dev, tr_code_name(tr_status_code(failed)),
                                    tr_status_message(failed));
      tr_status_destroy(&failed);
      return status;
    }
    if (claimed && n_claims < 64) claims[n_claims++] = d->target;
  }
  if (n_claims == 0) {
    *out = TR_BUILTIN;
    return NULL;
  }
  if (n_claims == 1) {
    *out = claims[0];
    return NULL;
  }
  qsort(claims, n_claims, sizeof(claims[0]), compare_names);
  char dev[TR_DEVICE_FORMAT_MAX], names[1024];
  tr_device_format(device, dev, sizeof(dev));
  names_text(claims, n_claims, names, sizeof(names));
  return TR_STATUS(TR_AMBIGUOUS_TARGET, "targets %s all claim device %s; name one with the op's "
                   "target or tr_set_default_target", names, dev);
}

tr_status *tr_registry_device_facts(const tr_registry *reg, const tr_device *device,
                                    tr_device_facts *out) {
  tr_device_facts facts = {-1, NULL, 0, 0};
  for (size_t i = 0; i < reg->facts.count; i++) {
    const facts_entry *f = &reg->facts.items[i];
    if (strcmp(f->device_type, device->type) != 0) continue;
    char dev[TR_DEVICE_FORMAT_MAX];
    tr_device_format(device, dev, sizeof(dev));
    tr_status *failed = f->read(f->ctx, device, &facts);
    if (failed != NULL) {
      tr_status *status = TR_STATUS(TR_BACKEND, "the device facts read of '%s' failed on %s: %s",
                                    f->device_type, dev, tr_status_message(failed));
      tr_status_destroy(&failed);
      return status;
    }
    if (facts.sm_count < 0 || facts.smem_budget < 0) {
      return TR_STATUS(TR_BACKEND, "the device facts read of '%s' returned invalid facts for %s: "
                       "sm_count %d, smem_budget %lld (neither may be negative)", f->device_type,
                       dev, (int)facts.sm_count, (long long)facts.smem_budget);
    }
    break;
  }
  *out = facts;
  return NULL;
}

const char *tr_registry_device_type_for_dl(const tr_registry *reg, int32_t dl_device_type) {
  for (size_t i = 0; i < reg->dltypes.count; i++) {
    if (reg->dltypes.items[i].dl_type == dl_device_type) return reg->dltypes.items[i].device_type;
  }
  return NULL;
}

int32_t tr_registry_dl_for_device_type(const tr_registry *reg, const char *device_type) {
  for (size_t i = 0; i < reg->dltypes.count; i++) {
    if (strcmp(reg->dltypes.items[i].device_type, device_type) == 0) return reg->dltypes.items[i].dl_type;
  }
  return -1;
}

tr_status *tr_registry_device_from_dl(const tr_registry *reg, DLDevice dl, tr_device *out) {
  const char *type = tr_registry_device_type_for_dl(reg, (int32_t)dl.device_type);
  if (type != NULL) return tr_device_make(type, dl.device_id, out);
  return tr_device_from_dl(dl, out);
}

tr_status *tr_registry_device_to_dl(const tr_registry *reg, const tr_device *device, DLDevice *out) {
  int32_t dl_type = tr_registry_dl_for_device_type(reg, device->type);
  if (dl_type >= 0) {
    out->device_type = (DLDeviceType)dl_type;
    out->device_id = device->index < 0 ? 0 : device->index;
    return NULL;
  }
  return tr_device_to_dl(device, out);
}

tr_status *tr_registry_spec_from_dl(const tr_registry *reg, const DLTensor *tensor, tr_tensor_spec *out) {
  tr_device device;
  TR_RETURN_IF_ERROR(tr_registry_device_from_dl(reg, tensor->device, &device));
  return tr_tensor_spec_make(&device, tensor->dtype, tensor->ndim, tensor->shape, out);
}

int tr_registry_allocator(const tr_registry *reg, const char *device_type, tr_alloc_fn *alloc,
                          tr_free_fn *free_fn, tr_copy_fn *copy, void **ctx) {
  for (size_t i = 0; i < reg->allocs.count; i++) {
    const alloc_entry *a = &reg->allocs.items[i];
    if (strcmp(a->device_type, device_type) == 0) {
      *alloc = a->alloc;
      *free_fn = a->free_fn;
      *copy = a->copy;
      *ctx = a->ctx;
      return 1;
    }
  }
  return 0;
}
