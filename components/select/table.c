/* table.c: a select table made from a list of ops' interfaces and implementations: one
 * selector per op, owned by the table. */
#include <stdlib.h>
#include <string.h>

#include "components/select/select.h"

tr_status *tr_select_table_new(const tr_select_source *sources, size_t n_sources, tr_facts_fn facts, void *facts_ctx,
                               tr_select_table **out) {
  *out = NULL;
  tr_select_table *t = calloc(1, sizeof(*t));
  tr_select_entry *entries = t ? calloc(n_sources ? n_sources : 1, sizeof(*entries)) : NULL;
  if (entries == NULL) {
    free(t);
    return TR_STATUS(TR_OUT_OF_MEMORY, "a select table of %zu ops", n_sources);
  }
  t->entries = entries;
  tr_status *status = NULL;
  for (size_t i = 0; i < n_sources && status == NULL; i++) {
    const tr_select_source *src = &sources[i];
    status = tr_selector_new(src->op, src->interfaces, src->n_interfaces, src->types, src->n_types, facts, facts_ctx,
                             &entries[i].selector);
    if (status != NULL) break;
    entries[i].op = src->op;
    entries[i].n_interfaces = src->n_interfaces;
    entries[i].interfaces = src->interfaces;
    t->n_entries = i + 1;
  }
  if (status != NULL) {
    tr_select_table_destroy(&t);
    return status;
  }
  *out = t;
  return NULL;
}

void tr_select_table_destroy(tr_select_table **table_p) {
  if (table_p == NULL || *table_p == NULL) return;
  tr_select_table *t = *table_p;
  *table_p = NULL;
  tr_select_entry *entries = (tr_select_entry *)t->entries;
  for (size_t i = 0; i < t->n_entries; i++) tr_selector_destroy(&entries[i].selector);
  free(entries);
  free(t->storage);
  free(t);
}
