/* manifest.h: the manifest: every op's signature, loaded from spec files and compiled once into a
 * checker. Checking a call (params, then one tensor spec per input) gives the settled params and
 * the output specs, or a signature error naming the op, the tensor or param, the axis, what was
 * expected and what was received. The format is docs/manifest.md. */
#ifndef TILERUN_MANIFEST_MANIFEST_H_
#define TILERUN_MANIFEST_MANIFEST_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/op_def.h" /* tr_op_def and its public accessors */
#include "tilerun/status.h"
#include "tilerun/tensor_spec.h"
#include "tilerun/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of one signature (the loader refuses more, naming the limit). */
#define TR_SIG_MAX_PARAMS 32
#define TR_SIG_MAX_INPUTS 16
#define TR_SIG_MAX_OUTPUTS 8
#define TR_SIG_MAX_DIMS 32
#define TR_SIG_MAX_VARS 16

typedef struct tr_manifest tr_manifest;

/* What checking a call found: the bindings of named dims, Shape variables, dtype variables and
 * the device, and the output specs. A plain struct for the caller's stack; nothing to free. */
typedef struct tr_call_check {
  tr_device device;  /* the call's device */
  int32_t n_inputs;  /* inputs given */
  const tr_tensor_spec *inputs[TR_SIG_MAX_INPUTS]; /* NULL for an absent optional input */
  int32_t n_outputs;
  uint8_t output_present[TR_SIG_MAX_OUTPUTS]; /* 0 for an output whose `when` is false */
  tr_tensor_spec outputs[TR_SIG_MAX_OUTPUTS];
  /* Bindings (indexes are the signature's own). */
  uint32_t dim_bound;
  int64_t dim[TR_SIG_MAX_DIMS];
  int8_t dim_src_input[TR_SIG_MAX_DIMS], dim_src_axis[TR_SIG_MAX_DIMS];
  uint32_t var_bound;
  tr_dtype var_dtype[TR_SIG_MAX_VARS];
  int8_t var_src_input[TR_SIG_MAX_VARS], var_src_axis[TR_SIG_MAX_VARS];
  int8_t run_len[TR_SIG_MAX_VARS];
  int64_t run[TR_SIG_MAX_VARS][TR_MAX_RANK];
} tr_call_check;

/* Loading. Every problem in a spec file is a ManifestError naming file, line and column and
 * what was expected there; an unreadable file is an IOError naming it. *out is NULL on failure.
 * A loaded manifest is read-only: several threads may check calls against it at once. */
tr_status *tr_manifest_load(const char *const *paths, size_t n_paths, tr_manifest **out) TR_MUST_USE;
tr_status *tr_manifest_load_dir(const char *dir, tr_manifest **out) TR_MUST_USE; /* its *.yaml */
/* One spec file's text in memory (it need not end in NUL); `name` stands for the path in
 * messages and in tr_op_def_path. Fails as tr_manifest_load does, short of the IOError. */
tr_status *tr_manifest_load_string(const char *name, const char *text, size_t size,
                                   tr_manifest **out) TR_MUST_USE;
void tr_manifest_destroy(tr_manifest **manifest_p);

size_t tr_manifest_op_count(const tr_manifest *manifest);
const tr_op_def *tr_manifest_op_at(const tr_manifest *manifest, size_t i); /* sorted by name */
const tr_op_def *tr_manifest_find(const tr_manifest *manifest, const char *name); /* or NULL */

/* 1 when `name` has the form {Name}{Fwd|Bwd}Op. */
int tr_manifest_op_name_ok(const char *name);

/* An op's description beyond op_def.h's (name, doc, params, inputs, outputs, workload rows).
 * Strings are owned by the manifest. */
const char *tr_op_def_family(const tr_op_def *op);
const char *tr_op_def_ref_api(const tr_op_def *op);
const char *tr_op_def_path(const tr_op_def *op);
int tr_op_def_line(const tr_op_def *op);

int tr_op_def_param_index(const tr_op_def *op, const char *name);      /* -1 when unknown */

int tr_op_def_input_contiguous(const tr_op_def *op, size_t i);
int tr_op_def_input_device_cpu(const tr_op_def *op, size_t i);
const char *tr_op_def_input_dtype_text(const tr_op_def *op, size_t i);
const char *tr_op_def_input_shape_text(const tr_op_def *op, size_t i);

const char *tr_op_def_output_dtype_text(const tr_op_def *op, size_t i);
const char *tr_op_def_output_shape_text(const tr_op_def *op, size_t i);

/* Settles params for an op instance: every given param is known and of its type (an int is
 * accepted for a float and settled as a float), every required one is given, defaults fill the
 * rest, and the constraints that read params alone hold. `settled` has
 * tr_op_def_param_count(op) slots, in declaration order; on success the caller owns the values
 * (tr_op_params_clear). On failure it is a SignatureError(param) (or a constraint's
 * SignatureError(shape)) naming the op and the param with the value received, and `settled` is
 * left all none. Thread-safe. */
tr_status *tr_op_def_bind_params(const tr_op_def *op, const tr_named_value *given, size_t n_given,
                                 tr_value *settled) TR_MUST_USE;
void tr_op_params_clear(const tr_op_def *op, tr_value *settled);

/* Checks one call: `inputs` holds one spec per manifest input in declaration order (a trailing
 * absent optional input may be left out or NULL); `settled` comes from tr_op_def_bind_params.
 * On success *out holds the bindings and output specs; on failure a SignatureError naming op,
 * tensor, axis, expected and got. Allocates nothing on success. Thread-safe. */
tr_status *tr_op_def_check(const tr_op_def *op, const tr_value *settled,
                           const tr_tensor_spec *const *inputs, size_t n_inputs,
                           tr_call_check *out) TR_MUST_USE;

/* The device a call with these inputs is on, as tr_op_def_check sets it: that of the first
 * input given that is not a cpu tensor in an input allowed on cpu, else cpu. Reads nothing but
 * the inputs' devices; a call whose other inputs disagree fails tr_op_def_check. Returns the
 * index of the input it came from, or -1 for cpu by default. Thread-safe. */
int tr_op_def_call_device(const tr_op_def *op, const tr_tensor_spec *const *inputs, size_t n_inputs,
                          tr_device *out);

/* The largest value a benchmark or the main job should put in integer input `i` of a checked call
 * (its `fill` expression: positions below the cache's rows, lengths up to the cache's): *has is 0
 * when the input declares none. A fill that does not evaluate is a ValueError naming it. */
tr_status *tr_op_def_input_fill(const tr_op_def *op, size_t i, const tr_value *settled,
                                const tr_call_check *check, int *has, int64_t *max) TR_MUST_USE;

/* The roofline of a checked call: flops and bytes (0 and 0 when the op declares none). */
tr_status *tr_op_def_roofline(const tr_op_def *op, const tr_value *settled,
                              const tr_call_check *check, double *flops,
                              double *bytes) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_MANIFEST_H_ */
