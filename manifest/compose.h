/* compose.h: running a composite op's composition over tensor specs. */
#ifndef TILERUN_MANIFEST_COMPOSE_H_
#define TILERUN_MANIFEST_COMPOSE_H_

#include "manifest/manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the composition of `op` over the specs of a checked call: each step's inputs are wired
 * (names, views, broadcast views), its params bound and its call checked against the sub-op's
 * signature; finally what `returns` gives must equal the op's own output specs. The first
 * problem is returned (a ManifestError for wiring, or the sub-op's own signature error, prefixed
 * with the step). An op without a composition passes. Thread-safe; allocates only on failure. */
tr_status *tr_op_def_check_composition(const tr_op_def *op, const tr_value *settled,
                                       const tr_call_check *check) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_COMPOSE_H_ */
