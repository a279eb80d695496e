/* op_def.h: an op as the manifest declares it: its name and doc, params, inputs, outputs and
 * workload rows. A runtime's ops are listed by tr_runtime_op_count / tr_runtime_op_at and found by
 * tr_runtime_find_op (inspect.h). A tr_op_def and every string it gives belong to the runtime's
 * manifest: valid until tr_runtime_destroy, read-only, safe to read from several threads.
 *
 * NULL handles and indexes past a count: a function returning a string or value returns NULL, a
 * count or flag 0; tr_op_def_workload returns a ValueError naming the argument. */
#ifndef TILERUN_OP_DEF_H_
#define TILERUN_OP_DEF_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/device.h"
#include "tilerun/status.h"
#include "tilerun/tensor_spec.h"
#include "tilerun/value.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_op_def tr_op_def;

const char *tr_op_def_name(const tr_op_def *op);   /* "RMSNormFwdOp" */
const char *tr_op_def_doc(const tr_op_def *op);    /* "" when the manifest gives none */
int tr_op_def_is_composite(const tr_op_def *op);   /* 1: the op is a composition of other ops */

/* Params, in declaration order: name, type as the manifest writes it ("float | None"), default
 * (NULL for a required param). */
size_t tr_op_def_param_count(const tr_op_def *op);
const char *tr_op_def_param_name(const tr_op_def *op, size_t i);
const char *tr_op_def_param_type(const tr_op_def *op, size_t i);
const tr_value *tr_op_def_param_default(const tr_op_def *op, size_t i);

/* Inputs, in the order a call passes them: name, whether it may be left out, whether the op
 * writes it in place. */
size_t tr_op_def_input_count(const tr_op_def *op);
const char *tr_op_def_input_name(const tr_op_def *op, size_t i);
int tr_op_def_input_optional(const tr_op_def *op, size_t i);
int tr_op_def_input_mutated(const tr_op_def *op, size_t i);

/* Outputs, in the order a call returns them. */
size_t tr_op_def_output_count(const tr_op_def *op);
const char *tr_op_def_output_name(const tr_op_def *op, size_t i);

/* Workload rows (the shapes the manifest benchmarks the op at): a label each ("llama3.1-8b
 * decode"). */
size_t tr_op_def_workload_count(const tr_op_def *op);
const char *tr_op_def_workload_label(const tr_op_def *op, size_t i);

/* Row `i` as a call: specs[k] for each input k < tr_op_def_input_count(op), on `device` (has[k]
 * 0 and specs[k] zeroed for an optional input the row leaves out), and the row's params in
 * `params`, which has room for tr_op_def_param_count(op) (a row names each param at most once);
 * *n_params is set to how many. The params' values point into the manifest. A row past the count
 * is a ValueError naming the op and the row, a NULL argument a ValueError naming it; a row whose
 * input dtype does not settle (a manifest `tilerun manifest check` refuses) a ManifestError naming
 * the file, the row and the input. */
tr_status *tr_op_def_workload(const tr_op_def *op, size_t i, const tr_device *device, tr_tensor_spec *specs,
                              uint8_t *has, tr_named_value *params, size_t *n_params) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_OP_DEF_H_ */
