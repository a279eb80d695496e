/* compose.h: a composite op's composition, planned over the tensor specs of a checked call:
 * which steps run, each step's sub-op params and how each of its inputs is wired (a name in
 * scope, a view with a new shape, a broadcast view), and what the op returns. The plan is data:
 * the linter checks it on every workload row; the runtime runs it over real tensors. */
#ifndef TILERUN_MANIFEST_COMPOSE_H_
#define TILERUN_MANIFEST_COMPOSE_H_

#include "manifest/manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TR_WIRE_NAME, TR_WIRE_VIEW, TR_WIRE_EXPAND };

typedef struct tr_compose_wire {
  const char *source; /* a name in scope (owned by the manifest) */
  int kind;           /* TR_WIRE_NAME: as it is; VIEW: reshaped; EXPAND: broadcast */
  int32_t rank;       /* VIEW and EXPAND: the resolved shape */
  int64_t shape[TR_MAX_RANK];
} tr_compose_wire;

typedef struct tr_compose_step {
  const tr_op_def *op;
  int runs; /* 0: skipped (its `when` input is absent) */
  size_t n_params;
  tr_named_value params[TR_SIG_MAX_PARAMS]; /* values borrowed from the manifest or `settled` */
  uint8_t has_input[TR_SIG_MAX_INPUTS];     /* by the sub-op's input index */
  tr_compose_wire inputs[TR_SIG_MAX_INPUTS];
  const char *output_to[TR_SIG_MAX_OUTPUTS]; /* by the sub-op's output index; NULL: unused */
} tr_compose_step;

typedef struct tr_compose_plan {
  size_t n_steps;
  tr_compose_step *steps;
  tr_compose_wire returns[TR_SIG_MAX_OUTPUTS];
} tr_compose_plan;

/* Number of steps of a composite op (0 for an op that builds its own kernels). */
size_t tr_op_def_step_count(const tr_op_def *op);
/* The op of step i (in declaration order); NULL past the last. */
const tr_op_def *tr_op_def_step_op(const tr_op_def *op, size_t i);

/* Plans the composition for a checked call: wires every running step's inputs (names, views,
 * broadcast views), binds its params and checks its call against the sub-op's signature; what
 * `returns` gives must equal the op's own output specs. The first problem is returned (a
 * ManifestError for wiring, or the sub-op's own signature error, prefixed with the step); *out is
 * then empty. Thread-safe. The caller frees the plan with tr_compose_plan_clear. */
tr_status *tr_op_def_compose_plan(const tr_op_def *op, const tr_value *settled,
                                  const tr_call_check *check, tr_compose_plan *out) TR_MUST_USE;
void tr_compose_plan_clear(tr_compose_plan *plan);

/* The plan's check alone (the linter's rule): the plan is made and dropped. */
tr_status *tr_op_def_check_composition(const tr_op_def *op, const tr_value *settled,
                                       const tr_call_check *check) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_COMPOSE_H_ */
