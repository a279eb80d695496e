/* internal.h: the compiled form of a manifest entry, shared by the loader, the checker and the
 * linter. Not part of the manifest's API. */
#ifndef TILERUN_MANIFEST_INTERNAL_H_
#define TILERUN_MANIFEST_INTERNAL_H_

#include <stdint.h>

#include "manifest/expr.h"
#include "manifest/manifest.h"
#include "manifest/shape_expr.h"

/* Param types: a union of these bits. */
enum {
  PT_INT = 1 << 0,
  PT_FLOAT = 1 << 1,
  PT_BOOL = 1 << 2,
  PT_STR = 1 << 3,
  PT_DTYPE = 1 << 4,
  PT_LIST = 1 << 5,
  PT_NONE = 1 << 6,
};

typedef struct param_decl {
  char *name;
  char *type_text;
  uint32_t types;
  int has_default;
  tr_value def;
} param_decl;

/* A type variable from `forall`. */
typedef struct var_decl {
  char *name;
  int is_shape;       /* Shape; otherwise DType */
  uint32_t dtype_mask; /* DType: the allowed dtypes (bits over tr_dtype_at) */
  char *dtype_text;    /* "float16 | bfloat16" */
} var_decl;

/* A resolved shape item. */
enum { IT_LITERAL, IT_DIM, IT_INT_PARAM, IT_SHAPE_VAR, IT_LIST_PARAM };

typedef struct shape_item {
  uint8_t kind;
  int16_t index;
  int64_t literal;
} shape_item;

typedef struct shape_pattern {
  int32_t count;
  shape_item items[TR_SHAPE_ITEMS_MAX];
} shape_pattern;

typedef struct shape_decl {
  char *text;
  int cond_param; /* -1: no condition */
  shape_pattern then_pattern, else_pattern;
} shape_decl;

/* A dtype rule. */
enum { DT_VAR, DT_SET, DT_SAME_AS };

typedef struct dtype_decl {
  char *text;
  uint8_t kind;
  int16_t var;      /* DT_VAR */
  int16_t input;    /* DT_SAME_AS */
  uint32_t mask;    /* DT_SET */
  int16_t or_param; /* outputs: "P or ..." takes P's dtype when set; -1 otherwise */
} dtype_decl;

typedef struct input_decl {
  char *name;
  dtype_decl dtype;
  shape_decl shape;
  int optional, mutated, contiguous, device_cpu;
  int required_unless; /* a bool param, or -1 */
  char *fill_text;     /* `fill`: the largest value a benchmark puts in an integer input */
  tr_expr *fill;
} input_decl;

typedef struct output_decl {
  char *name;
  dtype_decl dtype;
  shape_decl shape;
  int when; /* a bool param, or -1 */
} output_decl;

typedef struct constraint_decl {
  tr_expr *expr;
  int params_only;
} constraint_decl;

/* Expression refs (tr_expr_ref.kind). */
enum { REF_DIM, REF_PARAM, REF_SHAPE_VAR, REF_LIST_PARAM, REF_INPUT, REF_OUTPUT, REF_ELEM_BYTES };

/* Composition wiring: a name, view(name, [shape]) or expand(name, [shape] | shape(other)). */
enum { WIRE_NAME, WIRE_VIEW, WIRE_EXPAND, WIRE_EXPAND_LIKE };

typedef struct wire_decl {
  char *text;
  uint8_t kind;
  char *source; /* the name in scope */
  char *like;   /* WIRE_EXPAND_LIKE: the name whose shape to take */
  shape_pattern pattern;
  int line, column;
} wire_decl;

typedef struct step_param {
  char *name;      /* the sub-op's param */
  int from_param;  /* "$name": the composite's param index; -1 for a literal */
  tr_value literal;
} step_param;

typedef struct step_decl {
  char *op_name;
  const tr_op_def *op; /* resolved once every file is loaded */
  int when_input;      /* -1: always */
  int n_inputs;
  char **input_names;  /* the sub-op's input names, as written */
  wire_decl *inputs;
  int n_params;
  step_param *params;
  int n_outputs;
  char **output_names; /* the sub-op's output names */
  char **output_to;    /* the names they get in scope */
  int line, column;
} step_decl;

typedef struct composition_decl {
  int n_steps;
  step_decl *steps;
  wire_decl *returns; /* one per output of the op */
} composition_decl;

typedef struct workload_decl {
  char *label;
  int line, column; /* the row's, for messages */
  int has_dtype;
  tr_dtype dtype;
  uint8_t has_shape[TR_SIG_MAX_INPUTS];
  int32_t rank[TR_SIG_MAX_INPUTS];
  int64_t shape[TR_SIG_MAX_INPUTS][TR_MAX_RANK];
  uint8_t has_input_dtype[TR_SIG_MAX_INPUTS];
  tr_dtype input_dtype[TR_SIG_MAX_INPUTS];
  int n_params;
  tr_named_value *params;
} workload_decl;

struct tr_op_def {
  char *name, *family, *ref_api, *doc, *path;
  int line;
  int n_params;
  param_decl params[TR_SIG_MAX_PARAMS];
  int n_vars;
  var_decl vars[TR_SIG_MAX_VARS];
  int elem_var; /* the first DType variable, or -1 */
  int n_dims;
  char *dims[TR_SIG_MAX_DIMS];
  int n_inputs, n_required;
  input_decl inputs[TR_SIG_MAX_INPUTS];
  int n_outputs;
  output_decl outputs[TR_SIG_MAX_OUTPUTS];
  int n_constraints;
  constraint_decl *constraints;
  composition_decl *composition;
  int n_workloads;
  workload_decl *workloads;
  tr_expr *flops, *bytes;
};

/* The bit of a named dtype in a mask (its index in tr_dtype_at), or -1 for an unnamed one. */
int tr__dtype_bit(tr_dtype dtype);

/* Text of a dtype mask: "float16 | bfloat16". */
void tr__dtype_mask_format(uint32_t mask, char *buf, size_t size);

/* The shape a pattern stands for under a call's bindings and settled params; 0 when some item is
 * unknown (or the rank passes TR_MAX_RANK). Literals are copied as they are (a view's -1 too). */
int tr__pattern_shape(const tr_op_def *op, const shape_pattern *pat, const tr_value *settled,
                      const tr_call_check *b, int32_t *rank, int64_t *shape);

/* Whether a tensor of this shape (and dtype; NULL: its element count only) is too large for
 * int64 to count its elements or its bytes: 1, with "<what> float32(a, b) is too large: ..." in
 * `problem` naming the count that overflows and the limit; else 0. Cannot fail. */
int tr__tensor_too_large(const char *what, int32_t rank, const int64_t *shape, const tr_dtype *dtype,
                         char *problem, size_t size);

/* The evaluation environment of an expression over a checked call. */
typedef struct tr__eval_ctx {
  const tr_op_def *op;
  const tr_value *settled;
  const tr_call_check *check; /* NULL while binding params */
} tr__eval_ctx;

tr_expr_env tr__eval_env(tr__eval_ctx *ctx);

/* "name = value, rank(x) = 2" for the refs an expression reads, for messages. */
void tr__expr_values(const tr_expr *expr, tr__eval_ctx *ctx, char *buf, size_t size);

/* Checks a constraint; a failure is a SignatureError naming it and the values it saw. */
tr_status *tr__check_constraint(const tr_op_def *op, const constraint_decl *c,
                                tr__eval_ctx *ctx);

#endif /* TILERUN_MANIFEST_INTERNAL_H_ */
