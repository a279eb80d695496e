/* compose.c: a composite op's steps, run over tensor specs: the wiring (names, views, broadcast
 * views), each sub-op's check, and the results against the op's own outputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/compose.h"
#include "manifest/internal.h"

typedef struct scope_entry {
  const char *name;
  tr_tensor_spec spec;
} scope_entry;

#define SCOPE_MAX (TR_SIG_MAX_INPUTS + 64)

typedef struct scope {
  int count;
  scope_entry entries[SCOPE_MAX];
} scope;

static const tr_tensor_spec *lookup(const scope *sc, const char *name) {
  for (int i = sc->count - 1; i >= 0; i--) { /* the latest binding wins */
    if (strcmp(sc->entries[i].name, name) == 0) return &sc->entries[i].spec;
  }
  return NULL;
}

static tr_status *bind(scope *sc, const char *name, const tr_tensor_spec *spec) {
  if (sc->count == SCOPE_MAX) return TR_STATUS(TR_MANIFEST, "composition binds more than %d names", SCOPE_MAX);
  sc->entries[sc->count].name = name;
  sc->entries[sc->count].spec = *spec;
  sc->count++;
  return NULL;
}

/* a * b for extents (>= 0), saturating at INT64_MAX as tr_tensor_spec_numel does. */
static int64_t extent_product(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > INT64_MAX / b ? INT64_MAX : a * b;
}

static tr_status *wire(const tr_op_def *op, const tr_value *settled, const tr_call_check *check,
                       const scope *sc, const wire_decl *w, tr_tensor_spec *out,
                       tr_compose_wire *plan) {
  plan->source = w->source;
  plan->kind = w->kind == WIRE_NAME ? TR_WIRE_NAME : w->kind == WIRE_VIEW ? TR_WIRE_VIEW : TR_WIRE_EXPAND;
  plan->rank = 0;
  const tr_tensor_spec *src = lookup(sc, w->source);
  if (src == NULL) {
    return TR_STATUS(TR_MANIFEST, "%s: wiring '%s': '%s' is not in scope here", op->name, w->text, w->source);
  }
  *out = *src;
  if (w->kind == WIRE_NAME) return NULL;
  int32_t rank = 0;
  int64_t shape[TR_MAX_RANK];
  if (w->kind == WIRE_EXPAND_LIKE) {
    const tr_tensor_spec *like = lookup(sc, w->like);
    if (like == NULL) {
      return TR_STATUS(TR_MANIFEST, "%s: wiring '%s': '%s' is not in scope here", op->name, w->text, w->like);
    }
    rank = like->rank;
    memcpy(shape, like->shape, sizeof(shape));
  } else if (!tr__pattern_shape(op, &w->pattern, settled, check, &rank, shape)) {
    return TR_STATUS(TR_MANIFEST, "%s: wiring '%s': its shape is not known for this call", op->name, w->text);
  }
  char from[256], to[256];
  int64_t src_numel = tr_tensor_spec_numel(src);
  if (w->kind == WIRE_VIEW) {
    int infer = -1;
    int64_t known = 1;
    for (int32_t i = 0; i < rank; i++) {
      if (shape[i] == -1) {
        if (infer >= 0) return TR_STATUS(TR_MANIFEST, "%s: wiring '%s': two -1 dims", op->name, w->text);
        infer = i;
      } else if (shape[i] < 0) {
        tr_shape_format(rank, shape, to, sizeof(to));
        return TR_STATUS(TR_MANIFEST, "%s: wiring '%s': cannot view as %s: axis %d is negative",
                         op->name, w->text, to, (int)i);
      } else {
        known = extent_product(known, shape[i]);
      }
    }
    if (infer >= 0) shape[infer] = known == 0 ? 0 : src_numel / known;
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++) numel = extent_product(numel, shape[i]);
    if (numel != src_numel) {
      tr_shape_format(src->rank, src->shape, from, sizeof(from));
      tr_shape_format(rank, shape, to, sizeof(to));
      return TR_STATUS(TR_MANIFEST, "%s: wiring '%s': cannot view %s as %s", op->name, w->text, from, to);
    }
  } else { /* a broadcast view: right-aligned, each source dim 1 or equal */
    int ok = src->rank <= rank;
    for (int32_t i = 0; ok && i < src->rank; i++) {
      int64_t s = src->shape[src->rank - 1 - i], t = shape[rank - 1 - i];
      ok = s == t || s == 1;
    }
    if (!ok) {
      tr_shape_format(src->rank, src->shape, from, sizeof(from));
      tr_shape_format(rank, shape, to, sizeof(to));
      return TR_STATUS(TR_MANIFEST, "%s: wiring '%s': cannot broadcast %s to %s", op->name, w->text, from, to);
    }
  }
  out->rank = rank;
  memset(out->shape, 0, sizeof(out->shape));
  memcpy(out->shape, shape, (size_t)rank * sizeof(int64_t));
  plan->rank = rank;
  memcpy(plan->shape, out->shape, sizeof(plan->shape));
  return NULL;
}

static tr_status *run_step(const tr_op_def *op, const tr_value *settled, const tr_call_check *check,
                           scope *sc, int index, tr_compose_step *plan) {
  const step_decl *step = &op->composition->steps[index];
  const tr_op_def *sub = step->op;
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS] = {0};
  plan->op = sub;
  plan->runs = 1;
  for (int k = 0; k < step->n_inputs; k++) {
    int slot = -1;
    for (int s = 0; s < sub->n_inputs; s++) {
      if (strcmp(sub->inputs[s].name, step->input_names[k]) == 0) slot = s;
    }
    TR_RETURN_IF_ERROR(wire(op, settled, check, sc, &step->inputs[k], &specs[slot], &plan->inputs[slot]));
    ptrs[slot] = &specs[slot];
    plan->has_input[slot] = 1;
  }
  for (int k = 0; k < step->n_params; k++) {
    plan->params[k].name = step->params[k].name;
    plan->params[k].value = step->params[k].from_param >= 0 ? settled[step->params[k].from_param]
                                                            : step->params[k].literal;
  }
  plan->n_params = (size_t)step->n_params;
  tr_value sub_settled[TR_SIG_MAX_PARAMS];
  tr_status *status = tr_op_def_bind_params(sub, plan->params, plan->n_params, sub_settled);
  tr_call_check sub_check;
  if (status == NULL) {
    status = tr_op_def_check(sub, sub_settled, ptrs, (size_t)sub->n_inputs, &sub_check);
    tr_op_params_clear(sub, sub_settled);
  }
  if (status != NULL) {
    tr_status *wrapped = TR_STATUS(tr_status_code(status), "%s: composition step %d (%s): %s",
                                   op->name, index + 1, sub->name, tr_status_message(status));
    tr_status_destroy(&status);
    return wrapped;
  }
  for (int k = 0; k < step->n_outputs; k++) {
    for (int o = 0; o < sub->n_outputs; o++) {
      if (strcmp(sub->outputs[o].name, step->output_names[k]) != 0) continue;
      if (!sub_check.output_present[o]) {
        return TR_STATUS(TR_MANIFEST, "%s: composition step %d (%s): output '%s' is not produced "
                         "for this call", op->name, index + 1, sub->name, sub->outputs[o].name);
      }
      TR_RETURN_IF_ERROR(bind(sc, step->output_to[k], &sub_check.outputs[o]));
      plan->output_to[o] = step->output_to[k];
    }
  }
  return NULL;
}

size_t tr_op_def_step_count(const tr_op_def *op) {
  return op->composition ? (size_t)op->composition->n_steps : 0;
}

const tr_op_def *tr_op_def_step_op(const tr_op_def *op, size_t i) {
  return i < tr_op_def_step_count(op) ? op->composition->steps[i].op : NULL;
}

void tr_compose_plan_clear(tr_compose_plan *plan) {
  free(plan->steps);
  memset(plan, 0, sizeof(*plan));
}

static tr_status *plan_steps(const tr_op_def *op, const tr_value *settled, const tr_call_check *check,
                             tr_compose_plan *plan) {
  scope sc;
  sc.count = 0;
  for (int i = 0; i < op->n_inputs; i++) {
    if (check->inputs[i] != NULL) TR_RETURN_IF_ERROR(bind(&sc, op->inputs[i].name, check->inputs[i]));
  }
  for (int s = 0; s < op->composition->n_steps; s++) {
    int when = op->composition->steps[s].when_input;
    plan->steps[s].op = op->composition->steps[s].op;
    if (when >= 0 && check->inputs[when] == NULL) continue;
    TR_RETURN_IF_ERROR(run_step(op, settled, check, &sc, s, &plan->steps[s]));
  }
  for (int o = 0; o < op->n_outputs; o++) {
    if (!check->output_present[o]) continue;
    tr_tensor_spec got;
    TR_RETURN_IF_ERROR(wire(op, settled, check, &sc, &op->composition->returns[o], &got, &plan->returns[o]));
    const tr_tensor_spec *want = &check->outputs[o];
    if (!tr_tensor_spec_equal(&got, want)) {
      char g[256], w[256];
      tr_tensor_spec_format(&got, g, sizeof(g));
      tr_tensor_spec_format(want, w, sizeof(w));
      return TR_STATUS(TR_MANIFEST, "%s: composition returns %s for output '%s', but the signature "
                       "gives %s", op->name, g, op->outputs[o].name, w);
    }
  }
  return NULL;
}

tr_status *tr_op_def_compose_plan(const tr_op_def *op, const tr_value *settled,
                                  const tr_call_check *check, tr_compose_plan *out) {
  memset(out, 0, sizeof(*out));
  if (op->composition == NULL) return NULL;
  out->steps = calloc((size_t)op->composition->n_steps + 1, sizeof(tr_compose_step));
  if (out->steps == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "planning %s's composition", op->name);
  out->n_steps = (size_t)op->composition->n_steps;
  tr_status *status = plan_steps(op, settled, check, out);
  if (status != NULL) tr_compose_plan_clear(out);
  return status;
}

tr_status *tr_op_def_check_composition(const tr_op_def *op, const tr_value *settled,
                                       const tr_call_check *check) {
  tr_compose_plan plan;
  TR_RETURN_IF_ERROR(tr_op_def_compose_plan(op, settled, check, &plan));
  tr_compose_plan_clear(&plan);
  return NULL;
}
