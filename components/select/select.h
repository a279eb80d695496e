/* select.h: the select component: which in-tree implementation (kernel key) serves a call spec,
 * as a message handler over the selectors of the in-tree ops, and the caller's side of the
 * contract. The selection itself lives in selector/; this is decode, select, encode. */
#ifndef TILERUN_COMPONENTS_SELECT_H_
#define TILERUN_COMPONENTS_SELECT_H_

#include <stddef.h>
#include <stdint.h>

#include "proto/components.pb.h"
#include "selector/selector.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One op's selector and the interfaces it was made with (the request names one by name). */
typedef struct tr_select_entry {
  const char *op;
  tr_selector *selector;
  size_t n_interfaces;
  const tr_kernel_interface *const *interfaces;
} tr_select_entry;

/* The handler's context: the in-tree ops that have selectors. */
typedef struct tr_select_table {
  size_t n_entries;
  const tr_select_entry *entries;
  void *storage; /* what a table made by tr_select_table_new_intree was made from; NULL otherwise */
} tr_select_table;

/* The entry of `op`, or NULL when the table holds none. */
const tr_select_entry *tr_select_table_find(const tr_select_table *table, const char *op);

/* What one op's selector is made from: its interfaces and implementations (in-tree ones and
 * those plugins added). The arrays must outlive the table made from them. */
typedef struct tr_select_source {
  const char *op;
  const tr_kernel_interface *const *interfaces;
  size_t n_interfaces;
  const tr_kernel_type *const *types;
  size_t n_types;
} tr_select_source;

/* Makes one selector per source (the checks of tr_selector_new run: the first failure is
 * returned, and nothing is made), reading device facts through `facts`. The caller frees the
 * table with tr_select_table_destroy (the in-tree ops' table: see intree_table.h). */
tr_status *tr_select_table_new(const tr_select_source *sources, size_t n_sources, tr_facts_fn facts, void *facts_ctx,
                               tr_select_table **out) TR_MUST_USE;
void tr_select_table_destroy(tr_select_table **table_p);

/* What select and build share: the op's entry and interface in the table, and the call spec of a
 * request's fields on `device` (the caller clears it). An op the table does not hold is an
 * OpNotAvailableError; an interface it does not have or a call type it does not take a
 * SelectionError; a field that does not fit a ValueError; a device that does not parse a
 * DeviceError. */
tr_status *tr_select_call_of(const tr_select_table *table, const char *op, const char *interface,
                             const char *call_type, const tilerun_NamedValue *fields, size_t n_fields,
                             const char *device, const tr_select_entry **entry_out,
                             const tr_kernel_interface **iface_out, tr_call_spec *call) TR_MUST_USE;

/* The handler: `ctx` is a const tr_select_table *. A request that does not decode is a
 * TransportError; an op without a selector (OpNotAvailableError), an interface the op does not
 * have or a call type it does not take (SelectionError), a field that does not fit the call
 * type (ValueError), a device that does not parse, and every error of the selection itself are
 * a reply carrying that error. Thread-safe (the selectors are). */
tr_status *tr_select_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size);

/* The caller's side: every field of `call` (in its type's order) and its device travel; stated
 * device facts do not (the component derives them from the device, as kernel_for does). */
tr_status *tr_select_encode(const char *op, const char *interface, const tr_call_spec *call, uint8_t *buf,
                            size_t size, size_t *out_size) TR_MUST_USE;

/* Decodes a reply into the selected key (at most 63 characters). */
tr_status *tr_select_decode(const uint8_t *reply, size_t size, char key[64]) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_SELECT_H_ */
