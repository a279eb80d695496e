/* compose.c: a composite op's call: its plan (manifest/compose.h) run over real tensors, each
 * step a sub-op instance that settles its own target; views and broadcast views copy nothing. */
#include <stdlib.h>
#include <string.h>

#include "manifest/compose.h"
#include "runtime/internal.h"

/* A tensor in scope: a DLTensor (a view's shape and strides live here) and the sub-op output
 * that owns its memory, if any. */
typedef struct value {
  const char *name;
  DLTensor t;
  int64_t shape[TR_MAX_RANK], strides[TR_MAX_RANK];
  struct holder *owner;
} value;

/* Shared ownership of one sub-op output: scope entries and returned views hold it. */
typedef struct holder {
  DLManagedTensor *managed;
  atomic_int refs; /* returned outputs may be freed on different threads */
} holder;

/* A returned output: a view that keeps its holder alive. */
typedef struct returned {
  DLManagedTensor managed;
  int64_t shape[TR_MAX_RANK], strides[TR_MAX_RANK];
  holder *owner;
} returned;

static void holder_unref(holder *h) {
  if (h == NULL || atomic_fetch_sub(&h->refs, 1) > 1) return;
  h->managed->deleter(h->managed);
  free(h);
}

static void delete_returned(DLManagedTensor *self) {
  returned *r = (returned *)self;
  holder_unref(r->owner);
  free(r);
}

#define SCOPE_MAX 64

typedef struct scope {
  int count;
  value values[SCOPE_MAX];
} scope;

static value *lookup(scope *sc, const char *name) {
  for (int i = sc->count - 1; i >= 0; i--) {
    if (strcmp(sc->values[i].name, name) == 0) return &sc->values[i];
  }
  return NULL;
}

static tr_status *bind(scope *sc, const char *name, const DLTensor *t, holder *owner) {
  if (sc->count == SCOPE_MAX) return TR_STATUS(TR_VALUE, "a composition binds more than %d names", SCOPE_MAX);
  value *v = &sc->values[sc->count++];
  v->name = name;
  v->t = *t;
  memcpy(v->shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
  v->t.shape = v->shape;
  if (t->strides != NULL) {
    memcpy(v->strides, t->strides, (size_t)t->ndim * sizeof(int64_t));
    v->t.strides = v->strides;
  }
  v->owner = owner;
  if (owner != NULL) atomic_fetch_add(&owner->refs, 1);
  return NULL;
}

/* Applies a wire to a value: the same tensor, a reshaped one, or a broadcast one. */
static tr_status *apply(const tr_op *op, const tr_compose_wire *w, const value *src, value *out) {
  *out = *src;
  out->t.shape = out->shape;
  out->t.strides = src->t.strides ? out->strides : NULL;
  if (w->kind == TR_WIRE_NAME) return NULL;
  if (w->kind == TR_WIRE_VIEW && !tr_dl_tensor_is_contiguous(&src->t)) {
    return TR_STATUS(TR_VALUE, "%s: input '%s' is reshaped by its composition and must be contiguous; make it so "
                     "first (torch: .contiguous(), NumPy: numpy.ascontiguousarray)", tr_op_def_name(op->def),
                     w->source);
  }
  int64_t compact[TR_MAX_RANK], step = 1;
  for (int32_t d = src->t.ndim - 1; d >= 0; d--) {
    compact[d] = step;
    step *= src->t.shape[d];
  }
  const int64_t *src_strides = src->t.strides ? src->t.strides : compact;
  out->t.ndim = w->rank;
  memcpy(out->shape, w->shape, sizeof(out->shape));
  if (w->kind == TR_WIRE_VIEW) {
    out->t.strides = NULL;
    return NULL;
  }
  for (int32_t d = 0; d < w->rank; d++) { /* right-aligned; a size-1 or missing axis repeats */
    int32_t s = d - (w->rank - src->t.ndim);
    out->strides[d] = (s < 0 || src->t.shape[s] == 1) ? 0 : src_strides[s];
  }
  out->t.strides = out->strides;
  return NULL;
}

static tr_status *ensure_steps(tr_op *op) {
  if (op->steps != NULL) return NULL;
  size_t n = tr_op_def_step_count(op->def);
  op->steps = calloc(n + 1, sizeof(tr_op *));
  return op->steps ? NULL : TR_STATUS(TR_OUT_OF_MEMORY, "sub-ops of %s", tr_op_def_name(op->def));
}

static tr_status *run(tr_op *op, const tr_compose_plan *plan, scope *sc, DLManagedTensor **outputs) {
  for (size_t s = 0; s < plan->n_steps; s++) {
    const tr_compose_step *step = &plan->steps[s];
    if (!step->runs) continue;
    if (op->steps[s] == NULL) { /* made once; it settles its own target */
      TR_RETURN_IF_ERROR(tr_op_new(op->rt, tr_op_def_name(step->op), step->params, step->n_params,
                                   op->requested, &op->steps[s]));
      if (op->tuned_mode) TR_RETURN_IF_ERROR(tr_op_request_tune(op->steps[s]));
    }
    size_t n_in = tr_op_def_input_count(step->op), n_out = tr_op_def_output_count(step->op);
    value args[TR_SIG_MAX_INPUTS];
    const DLTensor *ins[TR_SIG_MAX_INPUTS] = {0};
    for (size_t i = 0; i < n_in; i++) {
      if (!step->has_input[i]) continue;
      const value *src = lookup(sc, step->inputs[i].source);
      if (src == NULL) return TR_STATUS(TR_INTERNAL, "'%s' is not in scope", step->inputs[i].source);
      TR_RETURN_IF_ERROR(apply(op, &step->inputs[i], src, &args[i]));
      ins[i] = &args[i].t;
    }
    DLManagedTensor *outs[TR_SIG_MAX_OUTPUTS] = {0};
    TR_RETURN_IF_ERROR(tr_op_call(op->steps[s], ins, n_in, outs, n_out));
    tr_status *status = NULL;
    for (size_t o = 0; o < n_out; o++) {
      if (outs[o] == NULL) continue;
      holder *h = malloc(sizeof(*h));
      if (h == NULL) {
        outs[o]->deleter(outs[o]);
        status = status ? status : TR_STATUS(TR_OUT_OF_MEMORY, "composition of %s", tr_op_def_name(op->def));
        continue;
      }
      h->managed = outs[o];
      atomic_init(&h->refs, 1);
      if (status == NULL && step->output_to[o] != NULL) status = bind(sc, step->output_to[o], &outs[o]->dl_tensor, h);
      holder_unref(h); /* the scope holds it now, or nobody does */
    }
    TR_RETURN_IF_ERROR(status);
  }
  for (size_t o = 0; o < tr_op_def_output_count(op->def); o++) {
    if (plan->returns[o].source == NULL) continue;
    const value *src = lookup(sc, plan->returns[o].source);
    if (src == NULL) return TR_STATUS(TR_INTERNAL, "'%s' is not in scope", plan->returns[o].source);
    value view;
    TR_RETURN_IF_ERROR(apply(op, &plan->returns[o], src, &view));
    returned *r = calloc(1, sizeof(*r));
    if (r == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "outputs of %s", tr_op_def_name(op->def));
    r->managed.dl_tensor = view.t;
    memcpy(r->shape, view.shape, sizeof(r->shape));
    memcpy(r->strides, view.strides, sizeof(r->strides));
    r->managed.dl_tensor.shape = r->shape;
    r->managed.dl_tensor.strides = view.t.strides ? r->strides : NULL;
    r->owner = src->owner;
    if (r->owner != NULL) atomic_fetch_add(&r->owner->refs, 1);
    r->managed.manager_ctx = r;
    r->managed.deleter = delete_returned;
    outputs[o] = &r->managed;
  }
  return NULL;
}

tr_status *tr__compose_call(tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                            DLManagedTensor **outputs, size_t n_outputs) {
  const tr_op_def *def = op->def;
  size_t n_decl = tr_op_def_input_count(def);
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS];
  tr_call_check check;
  TR_RETURN_IF_ERROR(tr__check_call(op, inputs, n_inputs, specs, ptrs, &check));
  tr_compose_plan plan;
  TR_RETURN_IF_ERROR(tr_op_def_compose_plan(def, op->settled, &check, &plan));
  tr_plat_mutex_lock(&op->lock);
  tr_status *status = ensure_steps(op);
  scope *sc = status ? NULL : calloc(1, sizeof(scope));
  if (status == NULL && sc == NULL) status = TR_STATUS(TR_OUT_OF_MEMORY, "composition of %s", tr_op_def_name(def));
  for (size_t i = 0; status == NULL && i < n_decl && i < n_inputs; i++) {
    if (inputs[i] != NULL) status = bind(sc, tr_op_def_input_name(def, i), inputs[i], NULL);
  }
  if (status == NULL) status = run(op, &plan, sc, outputs);
  for (int i = 0; sc != NULL && i < sc->count; i++) holder_unref(sc->values[i].owner);
  free(sc);
  tr_plat_mutex_unlock(&op->lock);
  tr_compose_plan_clear(&plan);
  if (status != NULL) {
    for (size_t o = 0; o < n_outputs; o++) {
      if (outputs[o] != NULL) outputs[o]->deleter(outputs[o]);
      outputs[o] = NULL;
    }
  }
  return status;
}
