/* inspect.c: the public questions about a call that make none (include/tilerun/inspect.h): the
 * output specs the manifest infers, in-tree key_for / kernel_for on the runtime's select table,
 * and the in-tree ops' inventory. */
#include "tilerun/inspect.h"

#include <stdio.h>
#include <string.h>

#include "components/select/intree_table.h"
#include "core/internal.h"
#include "kernels/intree/intree.h"
#include "runtime/internal.h"

/* ---- output specs ---- */

static void copy_outputs(const tr_op_def *def, const tr_call_check *check, tr_tensor_spec *outputs,
                         uint8_t *present) {
  size_t n = tr_op_def_output_count(def);
  for (size_t o = 0; o < n; o++) {
    present[o] = check->output_present[o];
    if (present[o]) outputs[o] = check->outputs[o];
    else memset(&outputs[o], 0, sizeof(outputs[o]));
  }
}

/* ---- the manifest ---- */

const char *tr_runtime_manifest_dir(const tr_runtime *runtime) { return runtime ? runtime->manifest_dir : NULL; }

size_t tr_runtime_op_count(const tr_runtime *runtime) { return runtime ? tr_manifest_op_count(runtime->manifest) : 0; }

const tr_op_def *tr_runtime_op_at(const tr_runtime *runtime, size_t i) {
  return runtime ? tr_manifest_op_at(runtime->manifest, i) : NULL;
}

const tr_op_def *tr_runtime_find_op(const tr_runtime *runtime, const char *op_name) {
  return runtime != NULL && op_name != NULL ? tr_manifest_find(runtime->manifest, op_name) : NULL;
}

/* ---- the caller's arguments ---- */

/* The specs a caller filled in, checked as tr_tensor_spec_make and tr_device_make check theirs
 * (a rank past TR_MAX_RANK would be read past its shape; a negative extent or a device no
 * tr_device_make made would be inferred from), each error naming the input. */
static tr_status *given_specs(const tr_op_def *def, const tr_tensor_spec *const *inputs, size_t n_inputs) {
  for (size_t i = 0; i < n_inputs; i++) {
    const tr_tensor_spec *s = inputs[i];
    if (s == NULL) continue;
    tr_status *status = NULL;
    tr_tensor_spec copy;
    tr_device device;
    if (memchr(s->device.type, '\0', sizeof(s->device.type)) == NULL) {
      status = TR_STATUS(TR_VALUE, "device type is not a NUL-terminated string of at most %d bytes",
                         TR_DEVICE_TYPE_MAX);
    } else {
      status = tr_device_make(s->device.type, s->device.index, &device);
    }
    if (status == NULL) status = tr_tensor_spec_make(&s->device, s->dtype, s->rank, s->shape, &copy);
    if (status != NULL) {
      const char *name = i < tr_op_def_input_count(def) ? tr_op_def_input_name(def, i) : NULL;
      return name ? tr_status_append(status, " (input '%s' of %s)", name, tr_op_def_name(def))
                  : tr_status_append(status, " (input %zu of %s)", i, tr_op_def_name(def));
    }
  }
  return NULL;
}

/* The arguments of the output-spec and selection questions: none NULL that is read. */
static tr_status *given_args(const char *fn, const tr_op_def *def, const tr_tensor_spec *const *inputs,
                             size_t n_inputs) {
  if (n_inputs > 0 && inputs == NULL) return TR_STATUS(TR_VALUE, "%s: 'inputs' is NULL (%zu inputs)", fn, n_inputs);
  return given_specs(def, inputs, n_inputs);
}

/* ---- output specs ---- */

static tr_status *room_for(const tr_op_def *def, size_t n_outputs) {
  size_t n = tr_op_def_output_count(def);
  if (n_outputs >= n) return NULL;
  return TR_STATUS(TR_VALUE, "%s returns %zu outputs; room for %zu was given", tr_op_def_name(def), n, n_outputs);
}

tr_status *tr_op_output_specs(const tr_op *op, const tr_tensor_spec *const *inputs, size_t n_inputs,
                              tr_tensor_spec *outputs, uint8_t *present, size_t n_outputs) {
  TR__NOT_NULL("tr_op_output_specs", op);
  if (n_outputs > 0) {
    TR__NOT_NULL("tr_op_output_specs", outputs);
    TR__NOT_NULL("tr_op_output_specs", present);
  }
  TR_RETURN_IF_ERROR(room_for(op->def, n_outputs));
  TR_RETURN_IF_ERROR(given_args("tr_op_output_specs", op->def, inputs, n_inputs));
  tr_call_check check;
  TR_RETURN_IF_ERROR(tr_op_def_check(op->def, op->settled, inputs, n_inputs, &check));
  copy_outputs(op->def, &check, outputs, present);
  return NULL;
}

tr_status *tr_runtime_output_specs(tr_runtime *rt, const char *op_name, const tr_named_value *params,
                                   size_t n_params, const tr_tensor_spec *const *inputs, size_t n_inputs,
                                   tr_tensor_spec *outputs, uint8_t *present, size_t n_outputs) {
  TR__NOT_NULL("tr_runtime_output_specs", rt);
  TR__NOT_NULL("tr_runtime_output_specs", op_name);
  if (n_params > 0) TR__NOT_NULL("tr_runtime_output_specs", params);
  if (n_outputs > 0) {
    TR__NOT_NULL("tr_runtime_output_specs", outputs);
    TR__NOT_NULL("tr_runtime_output_specs", present);
  }
  const tr_op_def *def = tr_manifest_find(rt->manifest, op_name);
  if (def == NULL) {
    return TR_STATUS(TR_OP_NOT_AVAILABLE, "no op '%s' in the manifest (%zu ops; see 'tilerun ops')", op_name,
                     tr_manifest_op_count(rt->manifest));
  }
  TR_RETURN_IF_ERROR(room_for(def, n_outputs));
  TR_RETURN_IF_ERROR(given_args("tr_runtime_output_specs", def, inputs, n_inputs));
  tr_value settled[TR_SIG_MAX_PARAMS];
  TR_RETURN_IF_ERROR(tr_op_def_bind_params(def, params, n_params, settled));
  tr_call_check check;
  tr_status *status = tr_op_def_check(def, settled, inputs, n_inputs, &check);
  if (status == NULL) copy_outputs(def, &check, outputs, present);
  tr_op_params_clear(def, settled);
  return status;
}

/* ---- selection ---- */

/* The in-tree ops' names, for a message: "RMSNormFwdOp, LayerNormFwdOp, ...". */
static void intree_names(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < tr_intree_op_count(); i++) tr__appendf(buf, size, &used, "%s%s", i ? ", " : "", tr_intree_op_at(i)->op);
}

static tr_status *no_intree(const char *op_name) {
  char names[512];
  intree_names(names, sizeof(names));
  return TR_STATUS(TR_OP_NOT_AVAILABLE, "%s has no in-tree kernels; the ops that have them: %s", op_name, names);
}

/* The call spec of a call of `op` (checked against the manifest first) and the op's selector
 * entry; the caller clears `call` on success. */
static tr_status *call_of(const tr_op *op, const tr_tensor_spec *const *inputs, size_t n_inputs, uint32_t stated,
                          const tr_device_facts *facts, const tr_select_entry **entry, const char **iface,
                          tr_call_spec *call) {
  const char *name = tr_op_def_name(op->def);
  TR_RETURN_IF_ERROR(given_args(name, op->def, inputs, n_inputs));
  tr_call_check check;
  TR_RETURN_IF_ERROR(tr_op_def_check(op->def, op->settled, inputs, n_inputs, &check));
  const tr_intree_op *fam = tr_intree_find(name);
  *entry = fam != NULL && op->rt->select_table != NULL ? tr_select_table_find(op->rt->select_table, name) : NULL;
  if (*entry == NULL) return no_intree(name);
  if (stated != 0 && facts == NULL) {
    return TR_STATUS(TR_VALUE, "%s: device facts stated (mask %u) but none given", name, (unsigned)stated);
  }
  /* the declared inputs, padded with NULL for trailing absent ones (as the miss path passes them) */
  size_t n_decl = tr_op_def_input_count(op->def);
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS] = {0};
  for (size_t i = 0; i < n_decl && i < n_inputs; i++) ptrs[i] = inputs[i];
  TR_RETURN_IF_ERROR(fam->call_spec(ptrs, n_decl, op->named, op->n_params, &check.device, iface, call));
  if (stated != 0) tr_call_spec_state_facts(call, stated, facts);
  return NULL;
}

tr_status *tr_op_key_for(const tr_op *op, const tr_tensor_spec *const *inputs, size_t n_inputs, uint32_t stated,
                         const tr_device_facts *facts, tr_op_selection *out) {
  TR__NOT_NULL("tr_op_key_for", out);
  memset(out, 0, sizeof(*out));
  TR__NOT_NULL("tr_op_key_for", op);
  const tr_select_entry *entry = NULL;
  const char *iface = NULL;
  tr_call_spec call;
  TR_RETURN_IF_ERROR(call_of(op, inputs, n_inputs, stated, facts, &entry, &iface, &call));
  const char *key = NULL;
  tr_status *status = tr_selector_key_for(entry->selector, iface, &call, &key);
  tr_call_spec_clear(&call);
  if (status != NULL) return status;
  out->interface = iface;
  out->key = key;
  return NULL;
}

tr_status *tr_op_kernel_for(const tr_op *op, const tr_tensor_spec *const *inputs, size_t n_inputs, uint32_t stated,
                            const tr_device_facts *facts, tr_op_selection *out) {
  TR__NOT_NULL("tr_op_kernel_for", out);
  memset(out, 0, sizeof(*out));
  TR__NOT_NULL("tr_op_kernel_for", op);
  const tr_select_entry *entry = NULL;
  const char *iface = NULL;
  tr_call_spec call;
  TR_RETURN_IF_ERROR(call_of(op, inputs, n_inputs, stated, facts, &entry, &iface, &call));
  tr_selected selected = {NULL, NULL};
  /* a factory builds with the call's device current, as the miss path; stated facts are refused
   * by the selector before anything is asked of the device */
  tr_device_guard guard = {0};
  tr_status *status = stated != 0 ? NULL : tr__device_enter(&call.device, &guard);
  if (status == NULL) {
    status = tr_selector_kernel_for(entry->selector, iface, &call, &selected);
    tr__device_leave(&guard);
  }
  tr_call_spec_clear(&call);
  if (status != NULL) return status;
  out->interface = iface;
  out->key = selected.key;
  out->kernel = selected.kernel;
  return NULL;
}

/* ---- the inventory ---- */

size_t tr_runtime_inventory_count(const tr_runtime *runtime) {
  (void)runtime;
  return tr_intree_op_count();
}

/* The inventory of in-tree op `fam`: the types its selector holds (its own, then those plugins
 * registered). */
static void inventory_of(const tr_runtime *rt, const tr_intree_op *fam, tr_op_inventory *out) {
  out->op = fam->op;
  out->n_interfaces = fam->n_interfaces;
  out->interfaces = fam->interfaces;
  out->n_types = tr_select_intree_types(rt->registry, fam, out->types, TR_INVENTORY_MAX_TYPES);
}

tr_status *tr_runtime_inventory_at(tr_runtime *rt, size_t i, tr_op_inventory *out) {
  TR__NOT_NULL("tr_runtime_inventory_at", out);
  memset(out, 0, sizeof(*out));
  TR__NOT_NULL("tr_runtime_inventory_at", rt);
  if (i >= tr_intree_op_count()) {
    return TR_STATUS(TR_VALUE, "the inventory holds %zu in-tree ops; got index %zu", tr_intree_op_count(), i);
  }
  TR_RETURN_IF_ERROR(tr__runtime_discover(rt));
  inventory_of(rt, tr_intree_op_at(i), out);
  return NULL;
}

tr_status *tr_runtime_inventory_of(tr_runtime *rt, const char *op_name, tr_op_inventory *out) {
  TR__NOT_NULL("tr_runtime_inventory_of", out);
  memset(out, 0, sizeof(*out));
  TR__NOT_NULL("tr_runtime_inventory_of", rt);
  TR__NOT_NULL("tr_runtime_inventory_of", op_name);
  const tr_intree_op *fam = tr_intree_find(op_name);
  if (fam == NULL) return no_intree(op_name);
  TR_RETURN_IF_ERROR(tr__runtime_discover(rt));
  inventory_of(rt, fam, out);
  return NULL;
}
