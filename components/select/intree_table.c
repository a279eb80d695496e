/* intree_table.c: the in-tree ops' select table, with the kernel types plugins added. */
#include "components/select/intree_table.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/intree/intree.h"

enum { MAX_OPS = 16, MAX_TYPES = 64 };

/* What the table is made from; it owns this (tr_select_table.storage). */
typedef struct intree_sources {
  tr_select_source sources[MAX_OPS];
  const tr_kernel_type *types[MAX_OPS][MAX_TYPES];
} intree_sources;

size_t tr_select_intree_types(const tr_registry *registry, const tr_intree_op *op, const tr_kernel_type **out,
                              size_t max) {
  size_t k = 0;
  for (; k < op->n_types && k < max; k++) out[k] = op->types[k];
  if (registry != NULL) { /* the count is the total registered; at most max - k were written */
    size_t added = tr_registry_kernel_types(registry, op->op, out + k, max - k);
    k += added < max - k ? added : max - k;
  }
  return k;
}

tr_status *tr_select_table_new_intree(const tr_registry *registry, tr_facts_fn facts, void *facts_ctx,
                                      tr_select_table **out) {
  *out = NULL;
  size_t n = tr_intree_op_count();
  if (n > MAX_OPS) return TR_STATUS(TR_BACKEND, "a select table holds %d in-tree ops, there are %zu", MAX_OPS, n);
  intree_sources *s = calloc(1, sizeof(*s));
  if (s == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "the in-tree selectors");
  for (size_t i = 0; i < n; i++) {
    const tr_intree_op *op = tr_intree_op_at(i);
    size_t k = tr_select_intree_types(registry, op, s->types[i], MAX_TYPES);
    s->sources[i] = (tr_select_source){op->op, op->interfaces, op->n_interfaces, s->types[i], k};
  }
  tr_status *status = tr_select_table_new(s->sources, n, facts, facts_ctx, out);
  if (status != NULL) free(s);
  else (*out)->storage = s;
  return status;
}

const tr_kernel_interface *tr_select_intree_interface(void *ctx, const char *op, const char *name) {
  (void)ctx;
  const tr_intree_op *found = tr_intree_find(op);
  for (size_t i = 0; found != NULL && i < found->n_interfaces; i++) {
    if (strcmp(found->interfaces[i]->name, name) == 0) return found->interfaces[i];
  }
  return NULL;
}

/* Facts for the load check's selectors, which select nothing: every device unregistered. */
static tr_status *no_facts(void *ctx, const tr_device *device, tr_device_facts *out) {
  (void)ctx;
  (void)device;
  *out = (tr_device_facts){-1, NULL, 0, 0};
  return NULL;
}

tr_status *tr_select_intree_load_check(void *ctx, const tr_registry *registry) {
  (void)ctx;
  tr_select_table *table = NULL;
  TR_RETURN_IF_ERROR(tr_select_table_new_intree(registry, no_facts, NULL, &table));
  tr_select_table_destroy(&table);
  return NULL;
}
