/* intree_table.h: the select table of the in-tree ops (kernels/intree), with the kernel types
 * plugins added for them: what the runtime and `tilerun serve select|build` select and build
 * from. */
#ifndef TILERUN_COMPONENTS_SELECT_INTREE_TABLE_H_
#define TILERUN_COMPONENTS_SELECT_INTREE_TABLE_H_

#include "components/select/select.h"
#include "registry/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_intree_op; /* kernels/intree/intree.h */

/* Makes the table: each in-tree op's implementations, then those `registry`'s plugins
 * registered for it (NULL: none; at most 64 types an op, more are left out), reading device
 * facts through `facts`. The table owns what it was made from: free it with
 * tr_select_table_destroy. Errors as tr_select_table_new's. */
tr_status *tr_select_table_new_intree(const tr_registry *registry, tr_facts_fn facts, void *facts_ctx,
                                      tr_select_table **out) TR_MUST_USE;

/* The kernel types of in-tree op `op`, as its selector holds them: its own, then those plugins
 * registered in `registry` (NULL: none), at most `max` into `out`; returns how many were written.
 * Cannot fail. */
size_t tr_select_intree_types(const tr_registry *registry, const struct tr_intree_op *op,
                              const tr_kernel_type **out, size_t max);

/* The in-tree op `op`'s kernel interface named `name`, or NULL: a tr_interface_finder, what
 * plugins' find_interface answers from (tr_registry_set_interface_finder; `ctx` unused).
 * Static data; thread-safe. */
const tr_kernel_interface *tr_select_intree_interface(void *ctx, const char *op, const char *name);

/* The registry's load check (tr_registry_set_load_check; `ctx` unused): the in-tree select table
 * made from what the backends registered so far, which runs the selectors' construction checks,
 * then dropped. A backend whose kernel types fail it is one load failure, rolled back, so the
 * table made after discovery holds only types that pass. Errors as tr_select_table_new's. */
tr_status *tr_select_intree_load_check(void *ctx, const tr_registry *registry) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_SELECT_INTREE_TABLE_H_ */
