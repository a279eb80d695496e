/* workload.c: a manifest workload row as the specs and params of a call. */
#include <string.h>

#include "manifest/internal.h"

size_t tr_op_def_workload_count(const tr_op_def *op) { return op ? (size_t)op->n_workloads : 0; }

const char *tr_op_def_workload_label(const tr_op_def *op, size_t i) {
  return op != NULL && i < (size_t)op->n_workloads ? op->workloads[i].label : NULL;
}

static tr_dtype first_of(uint32_t mask) {
  for (size_t i = 0; i < tr_dtype_count(); i++) {
    if (mask & (1u << i)) return tr_dtype_at(i);
  }
  return TR_FLOAT32;
}

tr_status *tr_op_def_workload(const tr_op_def *op, size_t i, const tr_device *device,
                              tr_tensor_spec *specs, uint8_t *has, tr_named_value *params,
                              size_t *n_params) {
  const char *null = op == NULL ? "op" : device == NULL ? "device" : n_params == NULL ? "n_params" : NULL;
  if (null == NULL && op->n_inputs > 0) null = specs == NULL ? "specs" : has == NULL ? "has" : NULL;
  if (null == NULL && op->n_params > 0 && params == NULL) null = "params";
  if (null != NULL) return TR_STATUS(TR_VALUE, "tr_op_def_workload: '%s' is NULL", null);
  if (i >= (size_t)op->n_workloads) {
    return TR_STATUS(TR_VALUE, "%s has %d workload rows; there is no row %zu", op->name,
                     op->n_workloads, i);
  }
  const workload_decl *w = &op->workloads[i];
  for (int k = 0; k < op->n_inputs; k++) {
    const input_decl *in = &op->inputs[k];
    has[k] = w->has_shape[k];
    if (!has[k]) {
      memset(&specs[k], 0, sizeof(specs[k])); /* so a later same_as input of it finds no dtype */
      continue;
    }
    tr_dtype dtype;
    if (w->has_input_dtype[k]) {
      dtype = w->input_dtype[k];
    } else if (in->dtype.kind == DT_VAR) {
      if (!w->has_dtype) {
        return TR_STATUS(TR_MANIFEST, "%s:%d:%d: %s: workload '%s' gives no dtype for input '%s' "
                         "(dtype: %s)", op->path, w->line, w->column, op->name, w->label, in->name,
                         in->dtype.text);
      }
      dtype = w->dtype;
    } else if (in->dtype.kind == DT_SAME_AS) {
      if (!has[in->dtype.input]) {
        return TR_STATUS(TR_MANIFEST, "%s:%d:%d: %s: workload '%s' leaves out input '%s', whose dtype input '%s' "
                         "takes (dtype: %s)", op->path, w->line, w->column, op->name, w->label,
                         op->inputs[in->dtype.input].name, in->name, in->dtype.text);
      }
      dtype = specs[in->dtype.input].dtype; /* an earlier input, already filled */
    } else {
      dtype = first_of(in->dtype.mask);
    }
    TR_RETURN_IF_ERROR(tr_tensor_spec_make(device, dtype, w->rank[k], w->shape[k], &specs[k]));
  }
  for (int p = 0; p < w->n_params; p++) params[p] = w->params[p];
  *n_params = (size_t)w->n_params;
  return NULL;
}
