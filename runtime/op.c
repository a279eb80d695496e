/* op.c: op instances: params settled once, the target settled at the first call, the memo of
 * built kernels, and the call itself (the hot path is a memo hit: key, lookup, contiguous
 * inputs, outputs, launch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "components/build/build_client.h"
#include "components/select/select_client.h"
#include "components/settle/settle_client.h"
#include "components/validate/validate_client.h"
#include "kernels/intree/intree.h"
#include "manifest/compose.h"
#include "runtime/internal.h"

/* ---- kernel entries ---- */

static void entry_unref(kernel_entry *e) {
  if (atomic_fetch_sub(&e->refs, 1) != 1) return;
  if (e->kernel.release != NULL) e->kernel.release(e->kernel.self);
  free(e);
}

static void drop_entry(void *ctx, void *value) {
  (void)ctx;
  entry_unref(value);
}

/* Revokes the op's target and drops its memo (the spec: a failed call leaves no decision). */
static void revoke(tr_op *op) {
  op->target = NULL;
  op->composite = 0;
  tr_memo_clear(op->memo, drop_entry, NULL);
}

static void clear_config(tr_op *op);

/* ---- making and destroying ---- */

tr_status *tr_op_new(tr_runtime *rt, const char *op_name, const tr_named_value *params,
                     size_t n_params, const char *target, tr_op **out) {
  TR__NOT_NULL("tr_op_new", out);
  *out = NULL;
  TR__NOT_NULL("tr_op_new", rt);
  TR__NOT_NULL("tr_op_new", op_name);
  if (n_params > 0) TR__NOT_NULL("tr_op_new", params);
  TR_RETURN_IF_ERROR(tr__runtime_discover(rt));
  const tr_op_def *def = tr_manifest_find(rt->manifest, op_name);
  if (def == NULL) {
    return tr_registry_annotate(rt->registry, TR_STATUS(TR_OP_NOT_AVAILABLE, "no op '%s' in the "
                                "manifest (%zu ops; see 'tilerun ops')", op_name,
                                tr_manifest_op_count(rt->manifest)));
  }
  const char *requested = NULL;
  if (target != NULL) {
    tr_device any = {"cpu", TR_DEVICE_NO_INDEX};
    tr_status *status = tr_registry_settle(rt->registry, target, NULL, &any, &requested);
    if (status != NULL) return tr__runtime_hint(rt, status); /* the spec's UnknownTargetError */
  }
  tr_op *op = calloc(1, sizeof(*op));
  if (op == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "making op %s", op_name);
  op->rt = rt;
  op->def = def;
  op->requested = requested;
  op->n_params = tr_op_def_param_count(def);
  for (size_t i = 0; i < tr_op_def_input_count(def); i++) op->has_mutated |= tr_op_def_input_mutated(def, i) != 0;
  tr_status *status = tr_op_def_bind_params(def, params, n_params, op->settled);
  if (status != NULL) {
    free(op);
    return tr_registry_annotate(rt->registry, status);
  }
  for (size_t i = 0; i < op->n_params; i++) {
    op->named[i].name = tr_op_def_param_name(def, i);
    op->named[i].value = op->settled[i];
    if (op->settled[i].kind == TR_VALUE_STR && op->settled[i].as.str.len > 255 && status == NULL) {
      status = TR_STATUS(TR_SIGNATURE_PARAM, "%s: param '%s' is a string of %zu bytes; calls carry at most 255",
                         op_name, op->named[i].name, op->settled[i].as.str.len);
    }
  }
  if (status == NULL) status = tr_memo_new(&op->memo);
  if (status == NULL) status = tr_plat_mutex_init(&op->lock);
  if (status != NULL) {
    tr_op_params_clear(def, op->settled);
    tr_memo_destroy(&op->memo);
    free(op);
    return status;
  }
  *out = op;
  return NULL;
}

void tr_op_destroy(tr_op **op_p) {
  if (op_p == NULL || *op_p == NULL) return;
  tr_op *op = *op_p;
  *op_p = NULL;
  if (op->steps != NULL) {
    size_t n = tr_op_def_step_count(op->def);
    for (size_t i = 0; i < n; i++) tr_op_destroy(&op->steps[i]);
    free(op->steps);
  }
  tr_memo_clear(op->memo, drop_entry, NULL);
  tr_memo_destroy(&op->memo);
  clear_config(op);
  tr_op_params_clear(op->def, op->settled);
  tr_plat_mutex_destroy(&op->lock);
  free(op);
}

const char *tr_op_target(const tr_op *op) {
  if (op == NULL) return NULL;
  tr_plat_mutex_lock((tr_plat_mutex *)&op->lock);
  const char *target = op->target;
  tr_plat_mutex_unlock((tr_plat_mutex *)&op->lock);
  return target;
}

size_t tr_op_memo_count(const tr_op *op) {
  if (op == NULL) return 0;
  tr_plat_mutex_lock((tr_plat_mutex *)&op->lock);
  size_t n = tr_memo_count(op->memo);
  tr_plat_mutex_unlock((tr_plat_mutex *)&op->lock);
  return n;
}

/* ---- the miss path ---- */

static tr_status *tune_entry(tr_op *op, kernel_entry *e) {
  if (e->kernel.request_tune == NULL) {
    if (!op->warned_untunable) {
      op->warned_untunable = 1;
      tr__runtime_warn(op->rt, "%s: a kernel of target '%s' has no request_tune; it is not tuned",
                       tr_op_def_name(op->def), op->target ? op->target : "?");
    }
    return NULL;
  }
  if (e->tuned) return NULL;
  tr_device_guard guard;
  TR_RETURN_IF_ERROR(tr__device_enter(&e->device, &guard));
  tr_status *status = e->kernel.request_tune(e->kernel.self, &e->device);
  tr__device_leave(&guard);
  TR_RETURN_IF_ERROR(status);
  e->tuned = 1;
  return NULL;
}

tr_status *tr__specs_from_dl(const tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                             tr_tensor_spec *specs, const tr_tensor_spec **ptrs) {
  const tr_op_def *def = op->def;
  size_t n_decl = tr_op_def_input_count(def);
  for (size_t i = 0; i < n_decl; i++) {
    ptrs[i] = NULL;
    if (i >= n_inputs || inputs[i] == NULL) continue;
    tr_status *status = tr_registry_spec_from_dl(op->rt->registry, inputs[i], &specs[i]);
    if (status != NULL) {
      return tr_status_append(status, " (input '%s' of %s)", tr_op_def_input_name(def, i),
                              tr_op_def_name(def));
    }
    ptrs[i] = &specs[i];
  }
  return NULL;
}

tr_status *tr__check_call(const tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                          tr_tensor_spec *specs, const tr_tensor_spec **ptrs, tr_call_check *check) {
  TR_RETURN_IF_ERROR(tr__specs_from_dl(op, inputs, n_inputs, specs, ptrs));
  /* the check refuses more inputs than the signature has before it reads any */
  return tr_op_def_check(op->def, op->settled, ptrs, n_inputs, check);
}

/* What a miss learns on its way: the call's specs, validate's answer, the kernel's source (a
 * target's builder, or the op's in-tree table entry) and, in-tree, the call spec and select's
 * key. */
typedef struct miss_call {
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS];
  size_t n_decl;
  tr_validated validated; /* the device, the outputs, the settled params */
  int builtin;
  tr_build_kernel_fn build; /* a target's builder */
  void *build_ctx;
  const tr_intree_op *fam; /* in-tree: the op's family and select entry */
  const tr_select_entry *entry;
  const char *iface;
  int has_call;
  tr_call_spec call;
  tr_selected_key key;
  const tr_kernel_type *type; /* the implementation select answered */
} miss_call;

static void miss_call_clear(miss_call *m) {
  tr_validated_clear(&m->validated);
  if (m->has_call) tr_call_spec_clear(&m->call);
  m->has_call = 0;
}

/* The in-tree path where it cannot run: the spec's message, naming the device's type. */
static tr_status *not_in_tree(const tr_op *op, const tr_device *device) {
  tr_settle_request asked = {tr_op_def_name(op->def), op->requested, tr_default_target(op->rt), *device};
  TR_RETURN_IF_ERROR(tr_settle_check_builtin(op->rt->pipeline, op->rt->registry, &asked)); /* served elsewhere */
  char known[1024];
  tr_registry_targets_text(op->rt->registry, tr_op_def_name(op->def), known, sizeof(known));
  return TR_STATUS(TR_OP_NOT_AVAILABLE, "%s's in-tree kernels do not run on %s; known targets for "
                   "this op: %s", tr_op_def_name(op->def), device->type, known);
}

/* Settle's answer as the op's target, which must be one this process registered (it builds and
 * launches here). */
static tr_status *take_target(tr_op *op, const tr_settled *settled) {
  if (strcmp(settled->target, TR_BUILTIN) == 0) {
    op->target = TR_BUILTIN;
    return NULL;
  }
  const char *here = tr_registry_target_name(op->rt->registry, settled->target);
  if (here == NULL) {
    return TR_STATUS(TR_BACKEND, "the settle component answered target '%s' for %s, which this process "
                     "has not registered", settled->target, tr_op_def_name(op->def));
  }
  op->target = here;
  return NULL;
}

/* The validate component (the call's specs checked against the manifest) and, while the op has
 * no target, the settle component. Settle needs only the call's device, which the tensors give
 * before validate answers, so both requests are in flight at once: through components in threads
 * or processes a miss waits for one round trip, not two. */
static tr_status *validate_and_settle(tr_op *op, const DLTensor *const *inputs, size_t n_inputs, miss_call *m) {
  const tr_op_def *def = op->def;
  m->n_decl = tr_op_def_input_count(def);
  if (n_inputs > m->n_decl) { /* named by the manifest's own check, before any tensor is read */
    tr_call_check check;
    return tr_op_def_check(def, op->settled, NULL, n_inputs, &check);
  }
  TR_RETURN_IF_ERROR(tr__specs_from_dl(op, inputs, n_inputs, m->specs, m->ptrs));
  tr_validate_request vreq = {tr_op_def_name(def), op->named, op->n_params, m->ptrs, m->n_decl};
  if (op->target != NULL) return tr_validate_call(op->rt->pipeline, &vreq, &m->validated);
  tr_settle_request sreq = {tr_op_def_name(def), op->requested, tr_default_target(op->rt), {"", 0}};
  tr_op_def_call_device(def, m->ptrs, m->n_decl, &sreq.device);
  tr_settled settled;
  TR_RETURN_IF_ERROR(tr_settle_call_with_validate(op->rt->pipeline, &vreq, &sreq, &m->validated, &settled));
  return take_target(op, &settled);
}

/* The op's select entry where an implementation of it (in-tree, or a plugin's kernel type) runs
 * on the device's type (in-tree ones: cuda; a plugin's: its devices), else NULL. */
static const tr_select_entry *in_tree_entry(const tr_op *op, const tr_device *device) {
  const char *name = tr_op_def_name(op->def);
  const tr_select_table *table = op->rt->select_table;
  const tr_select_entry *entry = tr_intree_find(name) != NULL && table != NULL ? tr_select_table_find(table, name) : NULL;
  return entry != NULL && tr_selector_runs_on(entry->selector, device->type) ? entry : NULL;
}

/* Where the settled target's kernel comes from: the target's builder, or the op's in-tree
 * implementations where they run on the call's device. */
static tr_status *kernel_source(const tr_op *op, miss_call *m) {
  const char *name = tr_op_def_name(op->def);
  m->builtin = strcmp(op->target, TR_BUILTIN) == 0;
  if (m->builtin) {
    m->fam = tr_intree_find(name);
    m->entry = in_tree_entry(op, &m->validated.device);
    return m->entry != NULL ? NULL : not_in_tree(op, &m->validated.device);
  }
  if (tr_registry_builder(op->rt->registry, name, op->target, &m->build, &m->build_ctx)) return NULL;
  char known[1024];
  tr_registry_targets_text(op->rt->registry, name, known, sizeof(known));
  return TR_STATUS(TR_OP_NOT_AVAILABLE, "target '%s' registers no kernel builder for %s; targets "
                   "that do: %s. There is no fall back to the in-tree implementation: those "
                   "kernels do not run on this target's devices.", op->target, name, known);
}

/* A memo entry for validate's answer: the call's device and the output specs, no kernel yet. */
static tr_status *new_entry(const tr_op *op, const miss_call *m, kernel_entry **out) {
  kernel_entry *e = calloc(1, sizeof(*e));
  if (e == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a memo entry of %s", tr_op_def_name(op->def));
  atomic_init(&e->refs, 1);
  e->device = m->validated.device;
  tr_status *status = tr_registry_device_to_dl(op->rt->registry, &e->device, &e->dl_device);
  if (status != NULL) {
    free(e);
    return status;
  }
  e->n_outputs = (int32_t)m->validated.n_outputs;
  memcpy(e->output_present, m->validated.output_present, sizeof(e->output_present));
  memcpy(e->outputs, m->validated.outputs, sizeof(e->outputs));
  e->kernel.struct_size = sizeof(e->kernel);
  *out = e;
  return NULL;
}

/* In-tree: the call spec of the call (from validate's settled params) and the select
 * component's key for it, with the implementation the key names. */
static tr_status *select_in_tree(tr_op *op, miss_call *m) {
  const char *name = tr_op_def_name(op->def);
  TR_RETURN_IF_ERROR(m->fam->call_spec(m->ptrs, m->n_decl, m->validated.settled, m->validated.n_settled,
                                       &m->validated.device, &m->iface, &m->call));
  m->has_call = 1;
  tr_select_request req = {name, m->iface, &m->call};
  TR_RETURN_IF_ERROR(tr_select_call(op->rt->pipeline, &req, &m->key));
  m->type = tr_selector_type(m->entry->selector, m->iface, m->key.key);
  if (m->type != NULL) return NULL;
  return TR_STATUS(TR_SELECTION, "the select component answered '%s' for %s, which %s's %s does not hold", m->key.key,
                   name, name, m->iface);
}

/* The kernel of select's key. A plugin's kernel type builds in this process, through the op's
 * selector, without selecting again: its factory runs only the first time its build identity
 * appears, whichever memo entry or op instance asks, and the selector keeps the kernel until the
 * runtime goes, so a memo entry's copy releases nothing. An in-tree implementation's artifacts
 * come from the build component (it may be elsewhere) with the device's facts, read only now
 * that the target is settled, and are loaded on the call's device; they are kept by the runtime
 * for their build identity (the type and the whole call spec), so that the next miss with it
 * loads them without asking build again. */
static tr_status *build_in_tree(tr_op *op, miss_call *m, tr_kernel *out) {
  if (!tr_intree_owns(m->type)) {
    tr_selected selected;
    TR_RETURN_IF_ERROR(tr_selector_kernel_of(m->entry->selector, m->iface, m->key.key, &m->call, &selected));
    *out = *selected.kernel;
    out->struct_size = sizeof(*out);
    out->release = NULL; /* the selector's */
    return NULL;
  }
  tr_device_facts facts;
  TR_RETURN_IF_ERROR(tr_device_facts_of(op->rt, &m->validated.device, &facts));
  tr_call_spec_state_facts(&m->call, TR_FACT_ARCH | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET, &facts);
  if (!tr_intree_has_source(m->type)) return tr_intree_kernel(m->type, &m->call, NULL, 0, out); /* cuBLASLt's */
  size_t n_kept = 0;
  const tr_artifact *kept = tr_intree_builds_find(op->rt->intree_builds, m->type, &m->call, &n_kept);
  if (kept != NULL) return tr_intree_kernel(m->type, &m->call, kept, n_kept, out);
  char arch[16];
  tr_intree_arch_name(facts.arch, arch, sizeof(arch));
  tr_build_artifacts_request req = {tr_op_def_name(op->def), m->iface, m->key.key, &m->call, arch};
  tr_built_artifacts built;
  TR_RETURN_IF_ERROR(tr_build_call(op->rt->pipeline, &req, &built));
  tr_status *status = tr_intree_kernel(m->type, &m->call, built.artifacts, built.n, out);
  if (status == NULL) { /* kept only once they loaded: they are this kernel's, for this card */
    tr_status *keeping = tr_intree_builds_add(op->rt->intree_builds, m->type, &m->call, built.artifacts, built.n, NULL);
    tr_status_destroy(&keeping); /* best effort: not kept, the next miss asks build again */
  }
  tr_built_artifacts_clear(&built);
  return status;
}

/* A target's kernel, from its builder: the call's specs and the op instance's params, which live
 * as long as the op (backend.h: a kernel may keep pointers into them; validate settled the same
 * values, which the miss clears when it ends). */
static tr_status *build_backend(tr_op *op, miss_call *m, tr_kernel *out) {
  tr_build_request req = {tr_op_def_name(op->def), op->target, &m->validated.device, m->ptrs, m->n_decl,
                          op->named, op->n_params};
  return m->build(m->build_ctx, &req, out);
}

/* In-tree, the select component's key for the call, asked with the call's device current. With
 * a target's builder nothing is selected; with launch in another process neither: that process
 * selects and builds its own. */
static tr_status *select_kernel(tr_op *op, miss_call *m) {
  if (!m->builtin || op->rt->launch_placement == TR_PLACE_PROCESS) return NULL;
  tr_device_guard guard;
  TR_RETURN_IF_ERROR(tr__device_enter(&m->validated.device, &guard));
  tr_status *status = select_in_tree(op, m);
  tr__device_leave(&guard);
  return status;
}

/* The kernel, built with the call's device current (in-tree: select's key), then routed to a
 * launch component in a thread; with launch in another process, a kernel that sends the op
 * there by descriptor. */
static tr_status *build_kernel(tr_op *op, miss_call *m, tr_kernel *out) {
  if (op->rt->launch_placement == TR_PLACE_PROCESS) return tr__route_kernel(op, 1, out);
  tr_device_guard guard;
  TR_RETURN_IF_ERROR(tr__device_enter(&m->validated.device, &guard));
  tr_status *status = m->builtin ? build_in_tree(op, m, out) : build_backend(op, m, out);
  tr__device_leave(&guard);
  if (status == NULL && out->call != NULL && op->rt->launch_placement == TR_PLACE_THREAD) {
    status = tr__route_kernel(op, 0, out);
    if (status != NULL && out->release != NULL) out->release(out->self);
    if (status != NULL) out->release = NULL;
  }
  if (status == NULL && out->call == NULL) {
    status = TR_STATUS(TR_BACKEND, "target '%s' built a kernel for %s with no call function", op->target,
                       tr_op_def_name(op->def));
  }
  return status;
}

/* The miss path: validate (and settle, while the op has no target), select, build, memoise;
 * called with the op's lock held. */
static tr_status *miss(tr_op *op, const DLTensor *const *inputs, size_t n_inputs, const tr_memo_key *key,
                       kernel_entry **out, int *spec_text) {
  *out = NULL;
  miss_call m;
  m.has_call = 0;
  memset(&m.validated, 0, sizeof(m.validated));
  kernel_entry *e = NULL;
  tr_status *status = validate_and_settle(op, inputs, n_inputs, &m);
  if (status == NULL) {
    status = kernel_source(op, &m);
    *spec_text = status != NULL; /* its errors are the spec's messages */
  }
  if (status == NULL) status = new_entry(op, &m, &e);
  if (status == NULL) status = select_kernel(op, &m);
  if (status == NULL) status = build_kernel(op, &m, &e->kernel);
  if (status == NULL && m.builtin && m.fam != NULL && op->rt->launch_placement != TR_PLACE_PROCESS && tr_intree_owns(m.type)) {
    e->repeat_inputs = m.fam->repeat_inputs; /* the in-tree kernel reads these in place */
  }
  if (status == NULL && op->tuned_mode) status = tune_entry(op, e);
  if (status == NULL) e->built = op->builds + 1;
  if (status == NULL) status = tr_memo_insert(op->memo, key, e);
  if (status == NULL) op->builds++;
  miss_call_clear(&m);
  if (status != NULL && e != NULL) entry_unref(e); /* built but not memoised: released now, built again next time */
  if (status == NULL) *out = e;
  return status;
}

/* NULL when caller-given output `o` is what the call makes, else a SignatureError of the kind that
 * is wrong (dtype, device, shape, layout or data), naming the output, what it got and what the
 * call makes. */
static tr_status *output_mismatch(const tr_op *op, const kernel_entry *e, size_t o, const DLTensor *t,
                                  const tr_tensor_spec *want) {
  const char *name = tr_op_def_name(op->def), *out = tr_op_def_output_name(op->def, o);
  char expected[256]; /* formatted only once a mismatch is found: this runs on every call */
#define TR__EXPECTED() (tr_tensor_spec_format(want, expected, sizeof(expected)), expected)
  if (t == NULL) return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: output '%s' is NULL; the call makes %s", name, out, TR__EXPECTED());
  if (!tr_dtype_equal(t->dtype, want->dtype)) {
    char got[64];
    tr_dtype_format(t->dtype, got, sizeof(got));
    return TR_STATUS(TR_SIGNATURE_DTYPE, "%s: output '%s' given is %s; the call makes %s", name, out, got,
                     TR__EXPECTED());
  }
  if (t->device.device_type != e->dl_device.device_type || t->device.device_id != e->dl_device.device_id) {
    char got[TR_DEVICE_FORMAT_MAX];
    tr_device given;
    tr_status *unknown = tr_device_from_dl(t->device, &given);
    if (unknown == NULL) tr_device_format(&given, got, sizeof(got));
    else snprintf(got, sizeof(got), "DLPack device type %d:%d", (int)t->device.device_type, (int)t->device.device_id);
    tr_status_destroy(&unknown);
    return TR_STATUS(TR_SIGNATURE_DEVICE, "%s: output '%s' given is on %s; the call makes %s", name, out, got, TR__EXPECTED());
  }
  if (t->ndim < 0 || t->ndim > TR_MAX_RANK || (t->ndim > 0 && t->shape == NULL)) { /* no dims to read */
    return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: output '%s' given has rank %d%s; the call makes %s", name, out,
                     (int)t->ndim, t->ndim > 0 && t->shape == NULL ? " and no shape" : "", TR__EXPECTED());
  }
  if (t->ndim != want->rank || memcmp(t->shape, want->shape, (size_t)want->rank * sizeof(int64_t)) != 0) {
    char got[256];
    int n = snprintf(got, sizeof(got), "[");
    for (int32_t d = 0; d < t->ndim && n < (int)sizeof(got); d++) {
      n += snprintf(got + n, sizeof(got) - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    }
    if (n < (int)sizeof(got)) snprintf(got + n, sizeof(got) - (size_t)n, "]");
    return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: output '%s' given has shape %s; the call makes %s", name, out, got,
                     TR__EXPECTED());
  }
  if (!tr_dl_tensor_is_contiguous(t)) {
    return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: output '%s' given is not contiguous; the call makes %s (contiguous)",
                     name, out, TR__EXPECTED());
  }
  /* an empty output may have no data (torch's empty tensors have none) */
  if (t->data == NULL && tr_tensor_spec_numel(want) != 0) {
    return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: output '%s' given has no data; the call makes %s", name, out, TR__EXPECTED());
  }
  return NULL;
#undef TR__EXPECTED
}

/* ---- the call ---- */

/* After a kernel ran: each output's DLTensor as it was handed (restored where the kernel changed
 * it, so a caller's own struct comes back as it was) and its shape as the signature inferred;
 * otherwise a BackendError naming the target, the op and the output. The inputs a kernel reads
 * are copies or the caller's own, whose description it has no use for either; only the outputs'
 * come back to the caller as the result's, so only they are checked (a few compares a call). */
static tr_status *kernel_kept_outputs(const tr_op *op, const kernel_entry *e, DLTensor *const *outputs,
                                      const DLTensor *given) {
  const char *which = NULL;
  for (int32_t o = 0; o < e->n_outputs; o++) {
    DLTensor *t = outputs[o];
    if (t == NULL) continue;
    int changed = memcmp(t, &given[o], sizeof(*t)) != 0;
    if (changed) *t = given[o];
    for (int32_t d = 0; d < e->outputs[o].rank; d++) { /* the shape validated (call_into) or made */
      if (t->shape[d] == e->outputs[o].shape[d]) continue;
      t->shape[d] = e->outputs[o].shape[d];
      changed = 1;
    }
    if (changed && which == NULL) which = tr_op_def_output_name(op->def, (size_t)o);
  }
  if (which == NULL) return NULL;
  return TR_STATUS(TR_BACKEND, "target '%s': its kernel for %s changed its output '%s' (its DLTensor: data, shape, "
                   "strides, dtype or device); a kernel writes the elements of its outputs, never their description",
                   op->target ? op->target : "?", tr_op_def_name(op->def), which);
}

static tr_status *launch(tr_op *op, kernel_entry *e, const DLTensor *const *inputs, size_t n_inputs,
                         DLTensor *const *outputs) {
  const tr_op_def *def = op->def;
  size_t n_decl = tr_op_def_input_count(def);
  DLTensor *args[TR_SIG_MAX_INPUTS] = {0};
  DLManagedTensor *copies[TR_SIG_MAX_INPUTS] = {0};
  tr_status *status = NULL;
  for (size_t i = 0; i < n_decl && status == NULL; i++) {
    const DLTensor *in = i < n_inputs ? inputs[i] : NULL;
    if (in == NULL) continue; /* absent: only a NULL tensor is (one without data is an error) */
    if (in->data == NULL) {
      int64_t numel = 1;
      for (int32_t d = 0; d < in->ndim; d++) numel *= in->shape[d]; /* validated: no overflow */
      if (numel != 0) {
        status = TR_STATUS(TR_VALUE, "%s: input '%s' has no data (a NULL pointer for its %lld elements)",
                           tr_op_def_name(def), tr_op_def_input_name(def, i), (long long)numel);
        break;
      }
    }
    int written_as_given = tr_op_def_input_mutated(def, i) && !tr_op_def_input_contiguous(def, i);
    const DLTensor *arg = in;
    /* a kernel that reads a repeating block in place (a bias expanded over rows) gets it as is */
    int read_in_place = ((e->repeat_inputs >> i) & 1u) && tr_dl_tensor_repeat_period(in) > 0;
    if (!written_as_given && !read_in_place) status = tr__contiguous(op->rt, op, i, in, &copies[i], &arg);
    args[i] = (DLTensor *)arg;
  }
  /* the outputs as handed: a kernel writes their elements, never their DLTensor (a changed shape,
   * dtype or data pointer would reach the caller as the result's) */
  DLTensor given[TR_SIG_MAX_OUTPUTS];
  for (int32_t o = 0; o < e->n_outputs; o++) {
    if (outputs[o] != NULL) given[o] = *outputs[o];
  }
  if (status == NULL) {
    status = e->kernel.call(e->kernel.self, args, n_decl, outputs, (size_t)e->n_outputs);
  }
  if (status == NULL) status = kernel_kept_outputs(op, e, outputs, given);
  for (size_t i = 0; i < n_decl; i++) {
    if (copies[i] == NULL) continue;
    if (status == NULL && tr_op_def_input_mutated(def, i)) status = tr__copy_back(op->rt, &copies[i]->dl_tensor, inputs[i]);
    copies[i]->deleter(copies[i]);
  }
  return status;
}

/* A miss path error as the caller gets it: the spec's messages (an unknown target, no builder,
 * in-tree kernels that do not run on the device) word for word, with the hint that backends
 * failed to load in the warning channel; tilerun's own messages count those backends. */
static tr_status *miss_error(tr_op *op, tr_status *status, int spec_text) {
  if (spec_text || tr_status_code(status) == TR_UNKNOWN_TARGET) return tr__runtime_hint(op->rt, status);
  return tr_registry_annotate(op->rt->registry, status);
}

/* Finds or builds the entry for this call, with a reference the caller drops; a failure as
 * miss_error gives it. */
static tr_status *entry_for(tr_op *op, const DLTensor *const *inputs, size_t n_inputs, kernel_entry **out) {
  /* The key covers every declared input, one not passed counted as absent (the spec: "recorded
   * as None"), so op(x) and op(x, NULL) share one entry. Padded on the stack, only when short. */
  size_t n_decl = tr_op_def_input_count(op->def);
  const DLTensor *padded[TR_SIG_MAX_INPUTS];
  const DLTensor *const *keyed = inputs;
  size_t n_keyed = n_inputs;
  if (n_inputs < n_decl) {
    for (size_t i = 0; i < n_decl; i++) padded[i] = i < n_inputs ? inputs[i] : NULL;
    keyed = padded;
    n_keyed = n_decl;
  }
  tr_memo_key key;
  tr_status *status = NULL;
  if (!tr_memo_key_from_dl(keyed, n_keyed, &key)) key.size = 0; /* never memoised */
  tr_plat_mutex_lock(&op->lock);
  kernel_entry *e = key.size ? tr_memo_find(op->memo, &key) : NULL;
  /* A key that does not fit (rank above 8, more than 16 inputs) fails validation in miss. */
  int spec_text = 0;
  if (e == NULL) status = miss(op, inputs, n_inputs, &key, &e, &spec_text);
  if (status == NULL) atomic_fetch_add(&e->refs, 1);
  else revoke(op);
  tr_plat_mutex_unlock(&op->lock);
  *out = e;
  return status != NULL ? miss_error(op, status, spec_text) : NULL;
}

/* The bytes a tensor of a call_into reaches, by address, on its device; `output` and `index` name
 * it. reach_of: 0 for a tensor absent, without data, of no bytes, or whose span 64 bits do not
 * count (the shape check or the copy refuses that one). */
typedef struct reach {
  uintptr_t lo, hi;
  DLDevice device;
  int output;
  size_t index;
} reach;

static int reach_of(const DLTensor *t, int output, size_t index, reach *out) {
  int64_t lo = 0, hi = 0;
  if (t == NULL || t->data == NULL || !tr_dl_tensor_span(t, &lo, &hi) || lo == hi) return 0;
  *out = (reach){(uintptr_t)t->data + (uintptr_t)lo, (uintptr_t)t->data + (uintptr_t)hi, t->device, output, index};
  return 1;
}

/* The reaches of the call's inputs, each counted once (at most TR_SIG_MAX_INPUTS: the call was
 * validated, so no more than the op declares); returns how many were written. */
static size_t input_reaches(const DLTensor *const *inputs, size_t n_inputs, reach *out) {
  size_t n = 0;
  for (size_t i = 0; i < n_inputs && i < TR_SIG_MAX_INPUTS; i++) n += (size_t)reach_of(inputs[i], 0, i, &out[n]);
  return n;
}

/* 1 when two reaches share a byte on one device. */
static int reaches_meet(const reach *a, const reach *b) {
  return a->device.device_type == b->device.device_type && a->device.device_id == b->device.device_id &&
         a->lo < b->hi && b->lo < a->hi;
}

/* A ValueError where output `r` (checked: contiguous, of the call's shape) shares memory with one
 * of `taken` (the call's inputs, and the outputs checked before it): a kernel reads its inputs
 * while it writes its outputs, so an output laid over an input (partly, or exactly) would be read
 * back half written. By byte ranges: an output in a gap of a strided input is refused too. */
static tr_status *output_overlap(const tr_op *op, const reach *r, const reach *taken, size_t n_taken) {
  for (size_t i = 0; i < n_taken; i++) {
    const reach *t = &taken[i];
    if (!reaches_meet(t, r)) continue;
    if (t->output) {
      return TR_STATUS(TR_VALUE, "%s: outputs '%s' and '%s' share memory; give each memory of its own",
                       tr_op_def_name(op->def), tr_op_def_output_name(op->def, t->index),
                       tr_op_def_output_name(op->def, r->index));
    }
    return TR_STATUS(TR_VALUE, "%s: output '%s' shares memory with input '%s'; give the output memory of its own "
                     "(the kernel reads its inputs while it writes)", tr_op_def_name(op->def),
                     tr_op_def_output_name(op->def, r->index), tr_op_def_input_name(op->def, t->index));
  }
  return NULL;
}

/* A ValueError where an input the op writes in place (the manifest's `mutated`) shares memory
 * with another input: the kernel would read that one while it writes (BatchNorm's running_mean
 * laid over x). Read-only inputs may share memory. `in`: the inputs' reaches (input_reaches). */
static tr_status *mutated_overlap(const tr_op *op, const reach *in, size_t n_in) {
  for (size_t m = 0; m < n_in; m++) {
    if (!tr_op_def_input_mutated(op->def, in[m].index)) continue;
    for (size_t i = 0; i < n_in; i++) {
      if (i == m || !reaches_meet(&in[i], &in[m])) continue;
      return TR_STATUS(TR_VALUE, "%s: input '%s', which the op writes in place, shares memory with input '%s'; give "
                       "it memory of its own", tr_op_def_name(op->def), tr_op_def_input_name(op->def, in[m].index),
                       tr_op_def_input_name(op->def, in[i].index));
    }
  }
  return NULL;
}

/* A call that failed after its kernel was found (its outputs, copies, or the kernel itself): no
 * count of backends that failed to load is added, which settling's and building's errors carry,
 * since none of these can come from a missing backend; so the kernel's own error (a ValueError
 * about the values it was given, say) reaches the caller unchanged, as the spec has it. */
static tr_status *failed(tr_op *op, tr_status *status) {
  tr_plat_mutex_lock(&op->lock);
  revoke(op);
  tr_plat_mutex_unlock(&op->lock);
  return status;
}

/* A composite op is served whole by a target that registered a builder for it (the spec's first
 * state); otherwise it runs its composition. Decided at the first call and kept, as a target is
 * (the spec: "this instance keeps it from here on"), so later calls run no detector; a call that
 * fails drops the decision. A detection that fails decides nothing: the composition runs, and
 * its steps give the error. */
static int fused(tr_op *op, const DLTensor *const *inputs, size_t n_inputs) {
  tr_plat_mutex_lock(&op->lock);
  int decided = op->composite;
  tr_plat_mutex_unlock(&op->lock);
  if (decided != 0) return decided == 1;
  tr_device device;
  int found = 0;
  for (size_t i = 0; i < n_inputs && !found; i++) {
    if (inputs[i] == NULL) continue;
    tr_status *bad = tr_registry_device_from_dl(op->rt->registry, inputs[i]->device, &device);
    found = bad == NULL;
    tr_status_destroy(&bad);
  }
  const char *target = NULL;
  tr_status *bad = found ? tr_registry_settle(op->rt->registry, op->requested, tr_default_target(op->rt),
                                              &device, &target) : NULL;
  int served = found && bad == NULL && strcmp(target, TR_BUILTIN) != 0 &&
               tr_registry_has_builder(op->rt->registry, tr_op_def_name(op->def), target);
  if (found && bad == NULL) {
    tr_plat_mutex_lock(&op->lock);
    if (op->composite == 0) op->composite = served ? 1 : 2; /* another thread's first call may have decided */
    served = op->composite == 1;
    tr_plat_mutex_unlock(&op->lock);
  }
  tr_status_destroy(&bad);
  return served;
}

tr_status *tr_op_call(tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                      DLManagedTensor **outputs, size_t n_outputs) {
  if (n_outputs > 0) TR__NOT_NULL("tr_op_call", outputs);
  for (size_t o = 0; o < n_outputs; o++) outputs[o] = NULL;
  TR__NOT_NULL("tr_op_call", op);
  if (n_inputs > 0) TR__NOT_NULL("tr_op_call", inputs);
  size_t n_out = tr_op_def_output_count(op->def);
  if (n_outputs < n_out) {
    return TR_STATUS(TR_VALUE, "%s returns %zu outputs; room for %zu was given",
                     tr_op_def_name(op->def), n_out, n_outputs);
  }
  if (tr_op_def_is_composite(op->def) && !fused(op, inputs, n_inputs)) {
    tr_status *status = tr__compose_call(op, inputs, n_inputs, outputs, n_outputs);
    if (status == NULL) return NULL;
    tr_plat_mutex_lock(&op->lock);
    op->composite = 0; /* a failed call leaves no decision */
    tr_plat_mutex_unlock(&op->lock);
    return status; /* a step's own: its settling and building errors counted there, its kernel's unchanged */
  }
  kernel_entry *e = NULL;
  tr_status *status = entry_for(op, inputs, n_inputs, &e);
  if (status != NULL) return status;
  if (op->has_mutated) {
    reach in[TR_SIG_MAX_INPUTS];
    status = mutated_overlap(op, in, input_reaches(inputs, n_inputs, in));
  }
  DLTensor *outs[TR_SIG_MAX_OUTPUTS] = {0};
  for (size_t o = 0; o < n_out && status == NULL; o++) {
    if (!e->output_present[o]) continue;
    status = tr__alloc_tensor(op->rt, &e->outputs[o], &e->dl_device, &outputs[o]);
    if (status == NULL) outs[o] = &outputs[o]->dl_tensor;
  }
  if (status == NULL) status = launch(op, e, inputs, n_inputs, outs);
  entry_unref(e);
  if (status == NULL) return NULL;
  for (size_t o = 0; o < n_out; o++) {
    if (outputs[o] != NULL) outputs[o]->deleter(outputs[o]);
    outputs[o] = NULL;
  }
  return failed(op, status);
}

tr_status *tr_op_call_into(tr_op *op, const DLTensor *const *inputs, size_t n_inputs,
                           DLTensor *const *outputs, size_t n_outputs) {
  TR__NOT_NULL("tr_op_call_into", op);
  if (n_inputs > 0) TR__NOT_NULL("tr_op_call_into", inputs);
  if (n_outputs > 0) TR__NOT_NULL("tr_op_call_into", outputs);
  size_t n_out = tr_op_def_output_count(op->def);
  if (tr_op_def_is_composite(op->def)) {
    return TR_STATUS(TR_VALUE, "%s is composite (its steps make their own outputs): call it with tr_op_call, or "
                     "op(...) from Python", tr_op_def_name(op->def));
  }
  if (n_outputs != n_out) {
    return TR_STATUS(TR_VALUE, "%s returns %zu outputs; %zu were given", tr_op_def_name(op->def), n_out, n_outputs);
  }
  kernel_entry *e = NULL;
  tr_status *status = entry_for(op, inputs, n_inputs, &e);
  if (status != NULL) return status;
  DLTensor *outs[TR_SIG_MAX_OUTPUTS] = {0}; /* NULL for an output that does not exist here */
  /* what the inputs reach, each counted once, then each output's as it is checked (the call was
   * validated: no more inputs than the op declares) */
  reach taken[TR_SIG_MAX_INPUTS + TR_SIG_MAX_OUTPUTS];
  size_t n_taken = input_reaches(inputs, n_inputs, taken);
  if (op->has_mutated) status = mutated_overlap(op, taken, n_taken);
  for (size_t o = 0; o < n_out && status == NULL; o++) {
    DLTensor *t = outputs[o];
    const tr_tensor_spec *want = &e->outputs[o];
    if (!e->output_present[o]) continue;
    status = output_mismatch(op, e, o, t, want);
    if (status == NULL && reach_of(t, 1, o, &taken[n_taken])) {
      status = output_overlap(op, &taken[n_taken], taken, n_taken);
      n_taken++;
    }
    outs[o] = t;
  }
  if (status == NULL) status = launch(op, e, inputs, n_inputs, outs);
  entry_unref(e);
  return status ? failed(op, status) : NULL;
}

/* ---- tuning and config ---- */

typedef struct tune_ctx {
  tr_op *op;
  tr_status *first;
} tune_ctx;

static void tune_one(void *vctx, void *value) {
  tune_ctx *t = vctx;
  tr_status *status = tune_entry(t->op, value);
  if (status == NULL) return;
  if (t->first == NULL) t->first = status;
  else tr_status_destroy(&status);
}

static void retune_one(void *vctx, void *value) {
  ((kernel_entry *)value)->tuned = 0;
  tune_one(vctx, value);
}

/* A composite op's step s, NULL while not made (a composite call makes its steps under the op's
 * lock; once made, a step stays until the op goes). */
static tr_op *step_at(tr_op *op, size_t s) {
  tr_plat_mutex_lock(&op->lock);
  tr_op *step = op->steps != NULL ? op->steps[s] : NULL;
  tr_plat_mutex_unlock(&op->lock);
  return step;
}

/* Under the op's lock, with launch in another process: whether the op has kernels there (a
 * settled target and a memo entry), its target then copied into `target`. */
static int built_elsewhere_locked(const tr_op *op, char (*target)[64]) {
  int built = op->rt->launch_placement == TR_PLACE_PROCESS && op->target != NULL && tr_memo_count(op->memo) > 0;
  snprintf(*target, sizeof(*target), "%s", built ? op->target : "");
  return built;
}

tr_status *tr_op_request_tune(tr_op *op) {
  TR__NOT_NULL("tr_op_request_tune", op);
  /* tuned mode first: steps made from now on are tuned, whatever a step below answers */
  tr_plat_mutex_lock(&op->lock);
  op->tuned_mode = 1;
  tr_plat_mutex_unlock(&op->lock);
  tr_status *first = NULL;
  for (size_t s = 0; s < tr_op_def_step_count(op->def); s++) { /* a composite: every step tried */
    tr_op *step = step_at(op, s);
    tr_status *status = step != NULL ? tr_op_request_tune(step) : NULL;
    if (first == NULL) first = status;
    else tr_status_destroy(&status);
  }
  tr_plat_mutex_lock(&op->lock);
  tune_ctx t = {op, first};
  /* idempotent per device: every request tunes every kernel built so far again */
  tr_memo_each(op->memo, retune_one, &t);
  /* launch in another process: its kernels are there (each call also carries the tuned mode) */
  char target[64];
  int remote = built_elsewhere_locked(op, &target);
  tr_plat_mutex_unlock(&op->lock);
  if (remote) {
    tr_status *there = tr__route_tune(op, target);
    if (t.first == NULL) t.first = there;
    else tr_status_destroy(&there);
  }
  return t.first;
}

int tr__op_in_tuned_mode(tr_op *op) {
  tr_plat_mutex_lock(&op->lock);
  int tuned = op->tuned_mode;
  tr_plat_mutex_unlock(&op->lock);
  return tuned;
}

typedef struct config_ctx {
  const tr_named_value *values;
  size_t n;
  uint64_t built; /* the entry the values are from */
} config_ctx;

/* The first non-empty config in build order (the memo's own order is its hash's). */
static void config_of(void *vctx, void *value) {
  config_ctx *c = vctx;
  kernel_entry *e = value;
  if ((c->n > 0 && c->built < e->built) || e->kernel.config == NULL) return;
  const tr_named_value *values = NULL;
  size_t n = e->kernel.config(e->kernel.self, &values);
  if (n == 0) return;
  c->values = values;
  c->n = n;
  c->built = e->built;
}

static void clear_config(tr_op *op) { tr_launch_config_clear(&op->config); }

/* Launch in another process: the config of its op, asked once per request, and not under the
 * op's lock (its calls go on meanwhile); nothing built yet, none. An answer is kept only if no
 * later ask's answer was kept before it. A failure (to ask, or to copy) is warned, and none.
 * Returns the count of the config kept. */
static size_t ask_config(tr_op *op) {
  char target[64];
  tr_plat_mutex_lock(&op->lock);
  int built = built_elsewhere_locked(op, &target);
  uint64_t ticket = ++op->config_asks;
  tr_plat_mutex_unlock(&op->lock);
  tr_launch_config *got = calloc(1, sizeof(*got));
  tr_status *status = got == NULL ? TR_STATUS(TR_OUT_OF_MEMORY, "%s: a kernel config", tr_op_def_name(op->def))
                      : built     ? tr__route_config(op, target, got)
                                  : NULL;
  tr_plat_mutex_lock(&op->lock);
  if (ticket > op->config_answered) {
    op->config_answered = ticket;
    if (status == NULL) status = tr_launch_config_set(&op->config, got->values, got->n);
    if (status != NULL) clear_config(op); /* none, not part of one */
  }
  size_t n = op->config.n;
  tr_plat_mutex_unlock(&op->lock);
  if (status != NULL) {
    tr__runtime_warn(op->rt, "%s: its kernel config from the launch process: %s", tr_op_def_name(op->def),
                     tr_status_message(status));
    tr_status_destroy(&status);
  }
  if (got != NULL) tr_launch_config_clear(got);
  free(got);
  return n;
}

size_t tr_op_kernel_config(tr_op *op, const tr_named_value **out) {
  if (out != NULL) *out = NULL;
  if (op == NULL || out == NULL) return 0;
  size_t n = 0;
  if (op->rt->launch_placement == TR_PLACE_PROCESS) {
    n = ask_config(op);
  } else {
    config_ctx c = {NULL, 0, 0};
    tr_plat_mutex_lock(&op->lock);
    tr_memo_each(op->memo, config_of, &c);
    tr_status *copied = tr_launch_config_set(&op->config, c.values, c.n); /* the kernel may be released later */
    if (copied != NULL) { /* out of memory: the values copied so far */
      tr__runtime_warn(op->rt, "%s: its kernel config: %s", tr_op_def_name(op->def), tr_status_message(copied));
      tr_status_destroy(&copied);
    }
    n = op->config.n;
    tr_plat_mutex_unlock(&op->lock);
  }
  if (n == 0 && tr_op_def_step_count(op->def) > 0) { /* a composite: its first step's config */
    for (size_t s = 0; s < tr_op_def_step_count(op->def) && n == 0; s++) {
      tr_op *step = step_at(op, s);
      if (step != NULL) n = tr_op_kernel_config(step, out);
    }
    if (n > 0) return n;
  }
  *out = op->config.values;
  return n;
}
