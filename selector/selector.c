/* selector.c: building an op's selector (the construction checks), selection (availability,
 * applicability, precedence), and the caches: call spec -> selected kernel, build identity ->
 * built kernel. */
#include "selector/selector.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "platform/platform.h"
#include "tilerun/hash.h"

#define MAX_TYPES 64

typedef struct iface_entry {
  const tr_kernel_interface *iface;
  size_t n_types;
  const tr_kernel_type *types[MAX_TYPES];
} iface_entry;

typedef struct built {
  const tr_kernel_type *type;
  tr_build_identity identity; /* from entry_for */
  int whole_call;             /* no entry_for: the identity is `call`, the whole call spec */
  tr_call_spec call;
  uint64_t hash;
  tr_kernel kernel;
} built;

typedef struct cached {
  uint64_t hash; /* 0: empty */
  const iface_entry *iface;
  tr_call_spec call;
  const char *key;
  const tr_kernel *kernel;
} cached;

struct tr_selector {
  char *op_name;
  size_t n_ifaces;
  iface_entry *ifaces;
  tr_facts_fn facts;
  void *facts_ctx;
  tr_plat_mutex lock;
  cached *cache; /* open addressing, power-of-two capacity */
  size_t cache_capacity, cache_count;
  built **builds;
  size_t n_builds, builds_capacity;
  tr_selector_stats stats;
};

int tr_interface_name_ok(const char *name) {
  size_t len = strlen(name);
  const char *suffixes[] = {"FwdInterface", "BwdInterface"};
  if (len < 13 || name[0] < 'A' || name[0] > 'Z') return 0;
  for (int s = 0; s < 2; s++) {
    if (strcmp(name + len - 12, suffixes[s]) != 0) continue;
    for (size_t i = 0; i < len - 12; i++) {
      char c = name[i];
      if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 0;
    }
    return 1;
  }
  return 0;
}

tr_status *tr_selector_inventory_check(const char *op_name, size_t n_interfaces, size_t n_types) {
  if (n_types > 0 && n_interfaces == 0) {
    return TR_STATUS(TR_SELECTION, "%s holds %zu kernel type%s but does not declare interfaces: "
                     "declare interfaces", op_name, n_types, n_types == 1 ? "" : "s");
  }
  return NULL;
}

static int in_list(const char *const *list, const char *name) {
  for (; list != NULL && *list != NULL; list++) {
    if (strcmp(*list, name) == 0) return 1;
  }
  return 0;
}

/* The spec's class attributes are inherited: devices, supported_archs and preferred_over a type
 * leaves NULL are its nearest base's that states them (general is the type's own: a C field
 * cannot be left unset, and a subclass of the general implementation is usually not general,
 * which the spec's example has to state). Base chains are checked for cycles when the selector is
 * built (check_type), before any of these runs. */
static const char *const *devices_of(const tr_kernel_type *t) {
  for (; t != NULL; t = t->base) {
    if (t->devices != NULL) return t->devices;
  }
  return NULL;
}

/* The type whose supported_archs apply to `t` (NULL: every architecture). */
static const tr_kernel_type *archs_of(const tr_kernel_type *t) {
  for (; t != NULL; t = t->base) {
    if (t->supported_archs != NULL) return t;
  }
  return NULL;
}

static const char *const *preferred_of(const tr_kernel_type *t) {
  for (; t != NULL; t = t->base) {
    if (t->preferred_over != NULL) return t->preferred_over;
  }
  return NULL;
}

static int runs_on(const tr_kernel_type *t, const char *device_type) {
  const char *const *devices = devices_of(t);
  return devices == NULL ? strcmp(device_type, "cuda") == 0 : in_list(devices, device_type);
}

static const tr_kernel_type *find_key(const iface_entry *e, const char *key) {
  for (size_t i = 0; i < e->n_types; i++) {
    if (strcmp(e->types[i]->key, key) == 0) return e->types[i];
  }
  return NULL;
}

/* Follows preferred_over from `t`; writes a cycle through it into `path` when there is one. */
static int find_cycle(const iface_entry *e, const tr_kernel_type *t, const tr_kernel_type **stack,
                      size_t depth, char *path, size_t size) {
  for (size_t i = 0; i < depth; i++) {
    if (stack[i] != t) continue;
    size_t used = 0;
    path[0] = '\0';
    for (size_t k = i; k < depth; k++) tr__appendf(path, size, &used, "%s -> ", stack[k]->key);
    tr__appendf(path, size, &used, "%s", t->key);
    return 1;
  }
  if (depth >= MAX_TYPES) return 0;
  stack[depth] = t;
  for (const char *const *p = preferred_of(t); p != NULL && *p != NULL; p++) {
    const tr_kernel_type *next = find_key(e, *p);
    if (next != NULL && find_cycle(e, next, stack, depth + 1, path, size)) return 1;
  }
  return 0;
}

#define MAX_BASES 16

static tr_status *check_type(const char *op, const tr_kernel_type *t) {
  const tr_kernel_interface *iface = t->interface;
  /* its bases: a chain that comes back to a type it passed (or goes on past any real depth)
   * would make every walk up the chain endless */
  const tr_kernel_type *chain[MAX_BASES + 1];
  size_t depth = 0;
  for (const tr_kernel_type *b = t; b != NULL; b = b->base) {
    int seen = 0;
    for (size_t i = 0; i < depth && !seen; i++) seen = chain[i] == b;
    if (seen || depth == MAX_BASES) {
      char path[512];
      size_t used = 0;
      path[0] = '\0';
      for (size_t i = 0; i < depth; i++) tr__appendf(path, sizeof(path), &used, "%s -> ", chain[i]->key ? chain[i]->key : "?");
      tr__appendf(path, sizeof(path), &used, "%s", b->key ? b->key : "?");
      if (seen) return TR_STATUS(TR_SELECTION, "%s: kernel type '%s': its bases form a cycle: %s", op, t->key, path);
      return TR_STATUS(TR_SELECTION, "%s: kernel type '%s': its bases are more than %d deep: %s", op, t->key,
                       MAX_BASES, path);
    }
    chain[depth++] = b;
  }
  if (t->factory == NULL) {
    return TR_STATUS(TR_SELECTION, "%s: kernel type '%s' does not implement %s: it has no factory "
                     "(a kernel builds through entry_for and its factory)", op, t->key, iface->name);
  }
  if (t->forward_args != NULL) { /* positionally, as the spec: the count decides, not the names */
    size_t n = 0;
    for (const char *const *a = t->forward_args; *a != NULL; a++) n++;
    if (n != iface->n_args) {
      char want[256];
      size_t used = 0;
      want[0] = '\0';
      for (size_t i = 0; i < iface->n_args; i++) tr__appendf(want, sizeof(want), &used, "%s%s", i ? ", " : "", iface->args[i]);
      return TR_STATUS(TR_SELECTION, "%s: kernel type '%s': forward does not take %s's arguments: it takes %zu, "
                       "and %s's forward passes %zu positionally (%s)", op, t->key, iface->name, n, iface->name,
                       iface->n_args, want);
    }
  }
  const char *const *devices = devices_of(t);
  const tr_kernel_type *archs = archs_of(t);
  if (archs != NULL && (devices == NULL ? 0 : (devices[0] == NULL || devices[1] != NULL))) {
    if (archs != t) {
      return TR_STATUS(TR_SELECTION, "%s: kernel type '%s' has supported_archs (from its base '%s'), so it "
                       "lists exactly one device type in devices", op, t->key, archs->key);
    }
    return TR_STATUS(TR_SELECTION, "%s: kernel type '%s' declares supported_archs, so it lists "
                     "exactly one device type in devices", op, t->key);
  }
  return NULL;
}

tr_status *tr_selector_new(const char *op_name, const tr_kernel_interface *const *interfaces,
                           size_t n_interfaces, const tr_kernel_type *const *types, size_t n_types,
                           tr_facts_fn facts, void *facts_ctx, tr_selector **out) {
  *out = NULL;
  TR_RETURN_IF_ERROR(tr_selector_inventory_check(op_name, n_interfaces, n_types));
  for (size_t i = 0; i < n_interfaces; i++) {
    if (!tr_interface_name_ok(interfaces[i]->name)) {
      return TR_STATUS(TR_SELECTION, "%s: interface name '%s' does not have the form "
                       "{Name}{Variant}{Fwd|Bwd}Interface", op_name, interfaces[i]->name);
    }
  }
  /* Row 5: keys that implement none of the op's interfaces. */
  char stray[512];
  size_t used = 0;
  stray[0] = '\0';
  for (size_t t = 0; t < n_types; t++) {
    int found = 0;
    for (size_t i = 0; i < n_interfaces && !found; i++) found = types[t]->interface == interfaces[i];
    if (!found) {
      tr__appendf(stray, sizeof(stray), &used, "%s%s (implements %s)", used ? ", " : "", types[t]->key,
                  types[t]->interface ? types[t]->interface->name : "nothing");
    }
  }
  if (used) return TR_STATUS(TR_SELECTION, "%s: keys implement none of its kernel interfaces: %s", op_name, stray);
  for (size_t t = 0; t < n_types; t++) {
    TR_RETURN_IF_ERROR(check_type(op_name, types[t]));
    for (size_t u = 0; u < t; u++) {
      if (strcmp(types[t]->key, types[u]->key) == 0) {
        return TR_STATUS(TR_SELECTION, "%s: key '%s' is registered twice", op_name, types[t]->key);
      }
    }
  }
  tr_selector *sel = calloc(1, sizeof(*sel));
  iface_entry *ifaces = sel ? calloc(n_interfaces + 1, sizeof(iface_entry)) : NULL;
  size_t name_len = strlen(op_name) + 1;
  char *name = ifaces ? malloc(name_len) : NULL;
  tr_status *status = name ? tr_plat_mutex_init(&sel->lock) : TR_STATUS(TR_OUT_OF_MEMORY, "a selector for %s", op_name);
  if (status != NULL) {
    free(name);
    free(ifaces);
    free(sel);
    return status;
  }
  memcpy(name, op_name, name_len);
  sel->op_name = name;
  sel->ifaces = ifaces;
  sel->n_ifaces = n_interfaces;
  sel->facts = facts;
  sel->facts_ctx = facts_ctx;
  for (size_t i = 0; i < n_interfaces && status == NULL; i++) {
    iface_entry *e = &ifaces[i];
    e->iface = interfaces[i];
    const tr_kernel_type *general = NULL;
    for (size_t t = 0; t < n_types && status == NULL; t++) {
      if (types[t]->interface != interfaces[i]) continue;
      if (e->n_types == MAX_TYPES) {
        status = TR_STATUS(TR_SELECTION, "%s: %s has more than %d implementations", op_name, interfaces[i]->name, MAX_TYPES);
        break;
      }
      e->types[e->n_types++] = types[t];
      if (types[t]->general && general != NULL) { /* row 3 */
        status = TR_STATUS(TR_SELECTION, "%s: %s has more than one general implementation: %s, %s",
                           op_name, interfaces[i]->name, general->key, types[t]->key);
      }
      if (types[t]->general) general = types[t];
    }
    for (size_t t = 0; t < e->n_types && status == NULL; t++) {
      for (const char *const *p = preferred_of(e->types[t]); p && *p && status == NULL; p++) {
        if (find_key(e, *p) == NULL) {
          status = TR_STATUS(TR_SELECTION, "%s: '%s' is preferred over '%s', which is no "
                             "implementation of %s", op_name, e->types[t]->key, *p, interfaces[i]->name);
        }
      }
      const tr_kernel_type *stack[MAX_TYPES];
      char path[512];
      if (status == NULL && find_cycle(e, e->types[t], stack, 0, path, sizeof(path))) { /* row 4 */
        status = TR_STATUS(TR_SELECTION, "%s: preferences form a cycle through %s", op_name, path);
      }
    }
  }
  if (status != NULL) {
    tr_selector_destroy(&sel);
    return status;
  }
  *out = sel;
  return NULL;
}

static void release_built(built *b) {
  if (b->kernel.release != NULL) b->kernel.release(b->kernel.self);
  if (b->whole_call) tr_call_spec_clear(&b->call);
  free(b);
}

void tr_selector_destroy(tr_selector **selector_p) {
  if (selector_p == NULL || *selector_p == NULL) return;
  tr_selector *sel = *selector_p;
  *selector_p = NULL;
  for (size_t i = 0; i < sel->cache_capacity; i++) {
    if (sel->cache[i].hash != 0) tr_call_spec_clear(&sel->cache[i].call);
  }
  for (size_t i = 0; i < sel->n_builds; i++) release_built(sel->builds[i]);
  free(sel->cache);
  free(sel->builds);
  free(sel->ifaces);
  free(sel->op_name);
  tr_plat_mutex_destroy(&sel->lock);
  free(sel);
}

/* ---- selection ---- */

static const iface_entry *find_iface(const tr_selector *sel, const char *name, tr_status **error) {
  for (size_t i = 0; i < sel->n_ifaces; i++) {
    if (strcmp(sel->ifaces[i].iface->name, name) == 0) return &sel->ifaces[i];
  }
  char names[512];
  size_t used = 0;
  names[0] = '\0';
  for (size_t i = 0; i < sel->n_ifaces; i++) tr__appendf(names, sizeof(names), &used, "%s%s", i ? ", " : "", sel->ifaces[i].iface->name);
  *error = TR_STATUS(TR_SELECTION, "%s has no kernel interface '%s'; its interfaces: %s", sel->op_name, name, names);
  return NULL;
}

/* Rows 9 and 10: the call spec's type, and no mutable field. */
static tr_status *check_call(const tr_selector *sel, const iface_entry *e, const tr_call_spec *call) {
  const tr_call_spec_type *want = e->iface->request;
  if (call->type != want) {
    return TR_STATUS(TR_SELECTION, "%s: %s takes a %s call spec, got a %s", sel->op_name,
                     e->iface->name, want->name, call->type ? call->type->name : "(none)");
  }
  for (size_t f = 0; f < want->n_fields; f++) {
    if (want->fields[f].is_mutable) {
      return TR_STATUS(TR_SELECTION, "%s: %s.%s is mutable, so %s cannot key a dispatch cache; make "
                       "the field immutable", sel->op_name, want->name, want->fields[f].name, want->name);
    }
  }
  return NULL;
}

/* The refusal of a type and of its bases, first reason wins. */
static const char *refusal_of(const tr_kernel_type *t, const tr_call_spec *call, char *buf, size_t size) {
  for (; t != NULL; t = t->base) {
    if (t->refusal == NULL) continue;
    const char *why = t->refusal(t, call, buf, size);
    if (why != NULL) return why;
  }
  return NULL;
}

static int available_arch(const tr_kernel_type *t, int32_t arch) {
  const tr_kernel_type *a = archs_of(t);
  if (a == NULL) return 1;
  for (size_t i = 0; i < a->n_archs; i++) {
    if (a->supported_archs[i] == arch) return 1;
  }
  return 0;
}

static tr_status *select_type(const tr_selector *sel, const iface_entry *e, const tr_call_spec *call,
                              const tr_kernel_type **out) {
  char dev[TR_DEVICE_FORMAT_MAX], text[1024];
  tr_device_format(&call->device, dev, sizeof(dev));
  const tr_kernel_type *applicable[MAX_TYPES];
  size_t n_app = 0, n_on_device = 0;
  char reasons[4096];
  size_t used = 0;
  reasons[0] = '\0';
  for (size_t i = 0; i < e->n_types; i++) {
    const tr_kernel_type *t = e->types[i];
    if (!runs_on(t, call->device.type)) {
      tr__appendf(reasons, sizeof(reasons), &used, "; %s: does not run on device type '%s'", t->key, call->device.type);
      continue;
    }
    n_on_device++;
    if (!available_arch(t, call->facts.arch)) {
      tr__appendf(reasons, sizeof(reasons), &used, "; %s: not available on arch %d (supports", t->key, (int)call->facts.arch);
      const tr_kernel_type *a = archs_of(t);
      for (size_t k = 0; k < a->n_archs; k++) tr__appendf(reasons, sizeof(reasons), &used, " %d", (int)a->supported_archs[k]);
      tr__appendf(reasons, sizeof(reasons), &used, ")");
      continue;
    }
    char buf[512];
    const char *why = refusal_of(t, call, buf, sizeof(buf));
    if (why != NULL) {
      tr__appendf(reasons, sizeof(reasons), &used, "; %s: %s", t->key, why);
      continue;
    }
    applicable[n_app++] = t;
  }
  if (n_on_device == 0) { /* row 6 */
    return TR_STATUS(TR_OP_NOT_AVAILABLE, "%s's in-tree kernels do not run on %s: no implementation "
                     "of %s runs on device type '%s'", sel->op_name, dev, e->iface->name, call->device.type);
  }
  if (n_app == 0) { /* row 7: a ValueError, as the spec's selection tests catch it */
    tr_call_spec_format(call, text, sizeof(text));
    return TR_STATUS(TR_VALUE, "%s: no implementation serves this call %s%s", sel->op_name, text, reasons);
  }
  /* Precedence: a general implementation ranks below every other, so it takes part (and its
   * preferred_over counts) only where no other applies; among those that take part,
   * preferred_over decides an overlap; what remains must be one. */
  const tr_kernel_type *part[MAX_TYPES], *best[MAX_TYPES];
  size_t n_part = 0, n_best = 0;
  for (size_t i = 0; i < n_app; i++) {
    if (!applicable[i]->general) part[n_part++] = applicable[i];
  }
  if (n_part == 0) {
    memcpy(part, applicable, n_app * sizeof(part[0]));
    n_part = n_app;
  }
  for (size_t i = 0; i < n_part; i++) {
    int beaten = 0;
    for (size_t j = 0; j < n_part && !beaten; j++) beaten = j != i && in_list(preferred_of(part[j]), part[i]->key);
    if (!beaten) best[n_best++] = part[i];
  }
  if (n_best == 1) {
    *out = best[0];
    return NULL;
  }
  char names[512];
  used = 0;
  names[0] = '\0';
  for (size_t i = 0; i < n_best; i++) tr__appendf(names, sizeof(names), &used, "%s%s", i ? ", " : "", best[i]->key);
  tr_call_spec_format(call, text, sizeof(text));
  return TR_STATUS(TR_SELECTION, "%s: dispatch is ambiguous for %s: %s all apply and none is "
                   "preferred over the others; declare preferred_over", sel->op_name, text, names);
}

/* The call's device facts: stated ones kept, the rest derived from its device. */
static tr_status *with_facts(const tr_selector *sel, const tr_call_spec *call, tr_call_spec *out) {
  *out = *call;
  tr_device_facts derived = {-1, NULL, 0, 0};
  if (sel->facts != NULL && call->stated_facts != (TR_FACT_ARCH | TR_FACT_CALIBRATION | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET)) {
    TR_RETURN_IF_ERROR(sel->facts(sel->facts_ctx, &call->device, &derived));
  }
  if (!(call->stated_facts & TR_FACT_ARCH)) out->facts.arch = derived.arch;
  if (!(call->stated_facts & TR_FACT_CALIBRATION)) out->facts.calibration = derived.calibration;
  if (!(call->stated_facts & TR_FACT_SM_COUNT)) out->facts.sm_count = derived.sm_count;
  if (!(call->stated_facts & TR_FACT_SMEM_BUDGET)) out->facts.smem_budget = derived.smem_budget;
  out->facts_known = 1;
  return NULL;
}

tr_status *tr_selector_key_for(tr_selector *sel, const char *interface, const tr_call_spec *call,
                               const char **key) {
  *key = NULL;
  tr_status *error = NULL;
  const iface_entry *e = find_iface(sel, interface, &error);
  if (e == NULL) return error;
  TR_RETURN_IF_ERROR(check_call(sel, e, call));
  tr_call_spec full;
  TR_RETURN_IF_ERROR(with_facts(sel, call, &full));
  const tr_kernel_type *t = NULL;
  TR_RETURN_IF_ERROR(select_type(sel, e, &full, &t));
  *key = t->key;
  return NULL;
}

/* ---- kernel_for and its caches ---- */

static uint64_t cache_hash(const iface_entry *e, const tr_call_spec *call) {
  uint64_t h = tr_hash_u64(tr_call_spec_hash(call), (uint64_t)(uintptr_t)e);
  return h ? h : 1;
}

static int grow_cache(tr_selector *sel) {
  size_t capacity = sel->cache_capacity ? sel->cache_capacity * 2 : 16;
  cached *table = calloc(capacity, sizeof(cached));
  if (table == NULL) return 0;
  for (size_t i = 0; i < sel->cache_capacity; i++) {
    if (sel->cache[i].hash == 0) continue;
    size_t j = (size_t)sel->cache[i].hash & (capacity - 1);
    while (table[j].hash != 0) j = (j + 1) & (capacity - 1);
    table[j] = sel->cache[i];
  }
  free(sel->cache);
  sel->cache = table;
  sel->cache_capacity = capacity;
  return 1;
}

static tr_status *build_for(tr_selector *sel, const tr_kernel_type *t, const tr_call_spec *call,
                            const tr_kernel **out) {
  built probe;
  memset(&probe, 0, sizeof(probe));
  probe.type = t;
  if (t->entry_for != NULL) {
    TR_RETURN_IF_ERROR(t->entry_for(t, call, &probe.identity));
    probe.hash = tr_hash_bytes(TR_HASH_SEED ^ (uint64_t)(uintptr_t)t, probe.identity.bytes, probe.identity.size);
  } else { /* the default identity: the whole call spec (compared whole: its hash only finds it) */
    probe.whole_call = 1;
    probe.hash = tr_hash_u64(tr_call_spec_hash(call), (uint64_t)(uintptr_t)t);
  }
  for (size_t i = 0; i < sel->n_builds; i++) {
    built *b = sel->builds[i];
    if (b->type != t || b->hash != probe.hash || b->whole_call != probe.whole_call) continue;
    if (b->whole_call ? tr_call_spec_equal(&b->call, call)
                      : b->identity.size == probe.identity.size &&
                            memcmp(b->identity.bytes, probe.identity.bytes, probe.identity.size) == 0) {
      *out = &b->kernel;
      return NULL;
    }
  }
  if (sel->n_builds == sel->builds_capacity) {
    size_t capacity = sel->builds_capacity ? sel->builds_capacity * 2 : 8;
    built **grown = realloc(sel->builds, capacity * sizeof(built *));
    if (grown == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: recording a build", sel->op_name);
    sel->builds = grown;
    sel->builds_capacity = capacity;
  }
  built *b = malloc(sizeof(*b));
  if (b == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%s: recording a build", sel->op_name);
  *b = probe;
  if (b->whole_call) {
    tr_status *copied = tr_call_spec_copy(call, &b->call);
    if (copied != NULL) {
      free(b);
      return copied;
    }
  }
  b->kernel.struct_size = sizeof(b->kernel);
  tr_status *status = t->factory(t, call, &b->kernel); /* the first time this identity appears */
  if (status == NULL && !tr__kernel_fits(&b->kernel)) { /* dropped unread */
    status = TR_STATUS(TR_BACKEND, "%s: the factory of kernel type '%s' filled in a tr_kernel with "
                       "struct_size %zu, shorter than the %zu bytes of tr_kernel version 1",
                       sel->op_name, t->key, b->kernel.struct_size, (size_t)TR_KERNEL_MIN_SIZE);
  }
  if (status != NULL) {
    if (b->whole_call) tr_call_spec_clear(&b->call);
    free(b);
    return status;
  }
  sel->builds[sel->n_builds++] = b;
  sel->stats.builds++;
  *out = &b->kernel;
  return NULL;
}

tr_status *tr_selector_kernel_for(tr_selector *sel, const char *interface, const tr_call_spec *call,
                                  tr_selected *out) {
  out->key = NULL;
  out->kernel = NULL;
  tr_status *error = NULL;
  const iface_entry *e = find_iface(sel, interface, &error);
  if (e == NULL) return error;
  if (call->stated_facts != 0) { /* row 11 */
    static const char *const names[] = {"arch", "calibration", "sm_count", "smem_budget"};
    char stated[128];
    size_t used = 0;
    stated[0] = '\0';
    for (int i = 0; i < 4; i++) {
      if (call->stated_facts & (1u << i)) tr__appendf(stated, sizeof(stated), &used, "%s'%s'", used ? ", " : "", names[i]);
    }
    return TR_STATUS(TR_SELECTION, "%s: this call spec states [%s]; device facts are derived from "
                     "its device, and only key_for accepts them stated", sel->op_name, stated);
  }
  uint64_t h = cache_hash(e, call);
  tr_plat_mutex_lock(&sel->lock);
  if (sel->cache_capacity > 0) {
    size_t mask = sel->cache_capacity - 1;
    for (size_t i = (size_t)h & mask; sel->cache[i].hash != 0; i = (i + 1) & mask) {
      const cached *c = &sel->cache[i];
      if (c->hash == h && c->iface == e && tr_call_spec_equal(&c->call, call)) {
        out->key = c->key;
        out->kernel = c->kernel;
        sel->stats.hits++;
        tr_plat_mutex_unlock(&sel->lock);
        return NULL;
      }
    }
  }
  tr_status *status = check_call(sel, e, call);
  tr_call_spec full;
  const tr_kernel_type *t = NULL;
  const tr_kernel *kernel = NULL;
  if (status == NULL) status = with_facts(sel, call, &full);
  if (status == NULL) status = select_type(sel, e, &full, &t);
  if (status == NULL) status = build_for(sel, t, &full, &kernel);
  if (status == NULL) sel->stats.selections++;
  if (status == NULL && (sel->cache_count + 1) * 4 > sel->cache_capacity * 3 && !grow_cache(sel)) {
    status = TR_STATUS(TR_OUT_OF_MEMORY, "%s: growing the dispatch cache", sel->op_name);
  }
  if (status == NULL) {
    size_t mask = sel->cache_capacity - 1, i = (size_t)h & mask;
    while (sel->cache[i].hash != 0) i = (i + 1) & mask;
    status = tr_call_spec_copy(call, &sel->cache[i].call);
    if (status == NULL) {
      sel->cache[i].hash = h;
      sel->cache[i].iface = e;
      sel->cache[i].key = t->key;
      sel->cache[i].kernel = kernel;
      sel->cache_count++;
      out->key = t->key;
      out->kernel = kernel;
    }
  }
  tr_plat_mutex_unlock(&sel->lock);
  return status;
}

int tr_selector_runs_on(const tr_selector *sel, const char *device_type) {
  for (size_t i = 0; i < sel->n_ifaces; i++) {
    for (size_t t = 0; t < sel->ifaces[i].n_types; t++) {
      if (runs_on(sel->ifaces[i].types[t], device_type)) return 1;
    }
  }
  return 0;
}

tr_selector_stats tr_selector_get_stats(const tr_selector *sel) { return sel->stats; }

const tr_kernel_type *tr_selector_type(const tr_selector *sel, const char *interface, const char *key) {
  for (size_t i = 0; i < sel->n_ifaces; i++) {
    const iface_entry *e = &sel->ifaces[i];
    if (strcmp(e->iface->name, interface) != 0) continue;
    for (size_t t = 0; t < e->n_types; t++) {
      if (strcmp(e->types[t]->key, key) == 0) return e->types[t];
    }
  }
  return NULL;
}

tr_status *tr_selector_kernel_of(tr_selector *sel, const char *interface, const char *key, const tr_call_spec *call,
                                 tr_selected *out) {
  out->key = NULL;
  out->kernel = NULL;
  const tr_kernel_type *t = tr_selector_type(sel, interface, key);
  if (t == NULL) return TR_STATUS(TR_SELECTION, "%s: %s has no implementation '%s'", sel->op_name, interface, key);
  tr_call_spec full;
  TR_RETURN_IF_ERROR(with_facts(sel, call, &full));
  tr_plat_mutex_lock(&sel->lock);
  const tr_kernel *kernel = NULL;
  tr_status *status = build_for(sel, t, &full, &kernel);
  tr_plat_mutex_unlock(&sel->lock);
  if (status == NULL) {
    out->key = t->key;
    out->kernel = kernel;
  }
  return status;
}
