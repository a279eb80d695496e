/* check.c: settling params and checking calls against a compiled signature; nothing allocated on
 * the success path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "manifest/internal.h"

int tr__dtype_bit(tr_dtype dtype) {
  size_t n = tr_dtype_count();
  for (size_t i = 0; i < n; i++) {
    if (tr_dtype_equal(tr_dtype_at(i), dtype)) return (int)i;
  }
  return -1;
}

void tr__dtype_mask_format(uint32_t mask, char *buf, size_t size) {
  size_t used = 0;
  if (size > 0) buf[0] = '\0';
  for (size_t i = 0; i < tr_dtype_count(); i++) {
    if (mask & (1u << i)) {
      tr__appendf(buf, size, &used, "%s%s", used ? " | " : "", tr_dtype_name(tr_dtype_at(i)));
    }
  }
}

int tr__tensor_too_large(const char *what, int32_t rank, const int64_t *shape, const tr_dtype *dtype,
                         char *problem, size_t size) {
  int64_t numel = 1, bytes = 0;
  int elements_overflow = 0, empty = 0;
  for (int32_t axis = 0; axis < rank; axis++) {
    if (shape[axis] == 0) empty = 1; /* no elements, however many the other axes would hold */
    if (__builtin_mul_overflow(numel, shape[axis], &numel)) elements_overflow = 1;
  }
  if (empty) return 0;
  size_t elem = dtype != NULL ? tr_dtype_bytes(*dtype) : 1;
  int bytes_overflow = !elements_overflow && __builtin_mul_overflow(numel, (int64_t)elem, &bytes);
  if (!elements_overflow && !bytes_overflow) return 0;
  char type[TR_DTYPE_FORMAT_MAX] = "", text[256];
  if (dtype != NULL) tr_dtype_format(*dtype, type, sizeof(type));
  tr_shape_format(rank, shape, text, sizeof(text));
  if (elements_overflow) {
    snprintf(problem, size, "%s %s%s is too large: its element count overflows int64 (at most %lld "
             "elements)", what, type, text, (long long)INT64_MAX);
  } else {
    snprintf(problem, size, "%s %s%s is too large: its size, %lld elements of %zu bytes, overflows "
             "int64 (at most %lld bytes)", what, type, text, (long long)numel, elem, (long long)INT64_MAX);
  }
  return 1;
}

/* ---- params ---- */

static const char *value_text(const tr_value *v, char *buf, size_t size) {
  tr_value_format(v, buf, size);
  return buf;
}

/* Converts a given value to the param's type: an int where a float is expected becomes a float,
 * a dtype's name where a dtype is expected (and no str) that dtype. Returns 0 when the value's
 * kind is not allowed. */
static int accept_value(const param_decl *p, const tr_value *v, tr_value *out) {
  uint32_t bit = 0;
  switch (v->kind) {
    case TR_VALUE_NONE: bit = PT_NONE; break;
    case TR_VALUE_INT: bit = PT_INT; break;
    case TR_VALUE_FLOAT: bit = PT_FLOAT; break;
    case TR_VALUE_BOOL: bit = PT_BOOL; break;
    case TR_VALUE_STR: bit = PT_STR; break;
    case TR_VALUE_DTYPE: bit = PT_DTYPE; break;
    case TR_VALUE_INT_LIST: bit = PT_LIST; break;
  }
  if (p->types & bit) {
    *out = *v;
    return 1;
  }
  if (v->kind == TR_VALUE_INT && (p->types & PT_FLOAT)) {
    *out = tr_value_float((double)v->as.i);
    return 1;
  }
  /* a dtype by its name, as workload rows write it: "float32" */
  tr_dtype named;
  if (v->kind == TR_VALUE_STR && (p->types & PT_DTYPE) && !(p->types & PT_STR) && v->as.str.data != NULL) {
    tr_status *unknown = tr_dtype_parse(v->as.str.data, &named);
    if (unknown == NULL) {
      *out = tr_value_dtype(named);
      return 1;
    }
    tr_status_destroy(&unknown);
  }
  return 0;
}

void tr_op_params_clear(const tr_op_def *op, tr_value *settled) {
  for (int i = 0; i < op->n_params; i++) tr_value_clear(&settled[i]);
}

static tr_status *param_error(const tr_op_def *op, tr_status *status, tr_value *settled) {
  tr_op_params_clear(op, settled);
  return status;
}

tr_status *tr_op_def_bind_params(const tr_op_def *op, const tr_named_value *given, size_t n_given,
                                 tr_value *settled) {
  char text[256];
  for (int i = 0; i < op->n_params; i++) settled[i] = tr_value_none();
  uint8_t seen[TR_SIG_MAX_PARAMS] = {0};
  for (size_t g = 0; g < n_given; g++) {
    if (given[g].name == NULL) {
      return param_error(op, TR_STATUS(TR_SIGNATURE_PARAM, "%s: param %zu of the %zu given has no name (NULL)",
                                       op->name, g, n_given), settled);
    }
    int i = tr_op_def_param_index(op, given[g].name);
    if (i < 0) {
      char names[512];
      size_t used = 0;
      names[0] = '\0';
      for (int k = 0; k < op->n_params; k++) {
        tr__appendf(names, sizeof(names), &used, "%s%s", k ? ", " : "", op->params[k].name);
      }
      return param_error(op, TR_STATUS(TR_SIGNATURE_PARAM, "%s: unknown param '%s'; params: %s",
                                       op->name, given[g].name, op->n_params ? names : "none"),
                         settled);
    }
    if (seen[i]) {
      return param_error(op, TR_STATUS(TR_SIGNATURE_PARAM, "%s: param '%s' is given twice",
                                       op->name, given[g].name), settled);
    }
    seen[i] = 1;
    tr_value accepted;
    if (!accept_value(&op->params[i], &given[g].value, &accepted)) {
      return param_error(op, TR_STATUS(TR_SIGNATURE_PARAM, "%s: param '%s' expects %s, got %s (%s)",
                                       op->name, op->params[i].name, op->params[i].type_text,
                                       value_text(&given[g].value, text, sizeof(text)),
                                       tr_value_kind_name(given[g].value.kind)), settled);
    }
    tr_status *copied = tr_value_copy(&accepted, &settled[i]);
    if (copied != NULL) return param_error(op, copied, settled);
  }
  for (int i = 0; i < op->n_params; i++) {
    if (seen[i]) continue;
    if (!op->params[i].has_default) {
      return param_error(op, TR_STATUS(TR_SIGNATURE_PARAM, "%s: param '%s' (%s) is required",
                                       op->name, op->params[i].name, op->params[i].type_text),
                         settled);
    }
    tr_status *copied = tr_value_copy(&op->params[i].def, &settled[i]);
    if (copied != NULL) return param_error(op, copied, settled);
  }
  tr__eval_ctx ctx = {op, settled, NULL};
  for (int c = 0; c < op->n_constraints; c++) {
    if (!op->constraints[c].params_only) continue;
    tr_status *failed = tr__check_constraint(op, &op->constraints[c], &ctx);
    if (failed != NULL) return param_error(op, failed, settled);
  }
  return NULL;
}

/* ---- expressions over a call ---- */

static int eval_value(void *vctx, tr_expr_ref ref, tr_expr_num *out) {
  tr__eval_ctx *ctx = vctx;
  switch (ref.kind) {
    case REF_DIM:
      if (ctx->check == NULL || !(ctx->check->dim_bound & (1u << ref.index))) return 0;
      *out = tr_expr_int(ctx->check->dim[ref.index]);
      return 1;
    case REF_PARAM: {
      const tr_value *v = &ctx->settled[ref.index];
      if (v->kind == TR_VALUE_INT) *out = tr_expr_int(v->as.i);
      else if (v->kind == TR_VALUE_FLOAT) *out = tr_expr_float(v->as.f);
      else if (v->kind == TR_VALUE_BOOL) *out = tr_expr_int(v->as.b ? 1 : 0);
      else return 0;
      return 1;
    }
    case REF_ELEM_BYTES:
      if (ctx->check == NULL || ctx->op->elem_var < 0 ||
          !(ctx->check->var_bound & (1u << ctx->op->elem_var))) {
        return 0;
      }
      *out = tr_expr_int((int64_t)tr_dtype_bytes(ctx->check->var_dtype[ctx->op->elem_var]));
      return 1;
    default: return 0;
  }
}

/* The spec of an input or output for numel/rank/bytes; NULL when absent. */
static const tr_tensor_spec *tensor_of(const tr__eval_ctx *ctx, tr_expr_ref ref, int *known) {
  *known = ctx->check != NULL;
  if (!*known) return NULL;
  if (ref.kind == REF_INPUT) {
    return ref.index < ctx->check->n_inputs ? ctx->check->inputs[ref.index] : NULL;
  }
  if (ref.kind == REF_OUTPUT && ctx->check->output_present[ref.index]) {
    return &ctx->check->outputs[ref.index];
  }
  return NULL;
}

/* The product of `n` integers as Python computes it: exact, or the nearest float past int64. */
static tr_expr_num product_of(const int64_t *items, size_t n) {
  int64_t p = 1;
  size_t i = 0;
  for (; i < n; i++) {
    if (__builtin_mul_overflow(p, items[i], &p)) break;
  }
  if (i == n) return tr_expr_int(p);
  double f = 1;
  for (i = 0; i < n; i++) f *= (double)items[i];
  return tr_expr_float(f);
}

static int eval_call(void *vctx, tr_expr_fn fn, tr_expr_ref ref, tr_expr_num *out) {
  tr__eval_ctx *ctx = vctx;
  if (fn == TR_EXPR_FN_PROD || fn == TR_EXPR_FN_LEN) {
    const int64_t *items = NULL;
    size_t n = 0;
    if (ref.kind == REF_LIST_PARAM) {
      const tr_value *v = &ctx->settled[ref.index];
      if (v->kind != TR_VALUE_INT_LIST) return 0;
      items = v->as.list.items;
      n = v->as.list.len;
    } else {
      if (ctx->check == NULL || !(ctx->check->var_bound & (1u << ref.index))) return 0;
      items = ctx->check->run[ref.index];
      n = (size_t)ctx->check->run_len[ref.index];
    }
    *out = fn == TR_EXPR_FN_LEN ? tr_expr_int((int64_t)n) : product_of(items, n);
    return 1;
  }
  int known = 0;
  const tr_tensor_spec *spec = tensor_of(ctx, ref, &known);
  if (!known) return 0;
  if (fn == TR_EXPR_FN_RANK) {
    if (spec == NULL) return 0;
    *out = tr_expr_int(spec->rank);
    return 1;
  }
  if (spec == NULL) {
    *out = tr_expr_int(0);
    return 1;
  }
  *out = product_of(spec->shape, (size_t)spec->rank);
  if (fn == TR_EXPR_FN_BYTES) {
    int64_t elem = (int64_t)tr_dtype_bytes(spec->dtype), bytes = 0;
    *out = out->is_int && !__builtin_mul_overflow(out->i, elem, &bytes)
               ? tr_expr_int(bytes) : tr_expr_float(tr_expr_num_double(*out) * (double)elem);
  }
  return 1;
}

tr_expr_env tr__eval_env(tr__eval_ctx *ctx) {
  tr_expr_env env = {ctx, eval_value, eval_call};
  return env;
}

typedef struct values_acc {
  tr__eval_ctx *ctx;
  char *buf;
  size_t size, used;
} values_acc;

static const char *kFnNames[] = {"prod", "len", "numel", "rank", "bytes", "min", "max"};

static void add_value(void *vacc, int function, tr_expr_ref ref, const char *name) {
  values_acc *acc = vacc;
  tr_expr_num v = tr_expr_int(0);
  int ok = function < 0 ? eval_value(acc->ctx, ref, &v) : eval_call(acc->ctx, (tr_expr_fn)function, ref, &v);
  char label[160];
  if (function < 0) snprintf(label, sizeof(label), "%s", name);
  else snprintf(label, sizeof(label), "%s(%s)", kFnNames[function], name);
  const char *sep = acc->used ? ", " : "";
  if (!ok) tr__appendf(acc->buf, acc->size, &acc->used, "%s%s = None", sep, label);
  else if (v.is_int) tr__appendf(acc->buf, acc->size, &acc->used, "%s%s = %lld", sep, label, (long long)v.i);
  else tr__appendf(acc->buf, acc->size, &acc->used, "%s%s = %.17g", sep, label, v.f);
}

void tr__expr_values(const tr_expr *expr, tr__eval_ctx *ctx, char *buf, size_t size) {
  values_acc acc = {ctx, buf, size, 0};
  if (size > 0) buf[0] = '\0';
  tr_expr_visit_refs(expr, add_value, &acc);
}

tr_status *tr__check_constraint(const tr_op_def *op, const constraint_decl *c, tr__eval_ctx *ctx) {
  tr_expr_env env = tr__eval_env(ctx);
  tr_expr_num holds = tr_expr_int(0);
  tr_status *failed = tr_expr_eval(c->expr, &env, &holds);
  if (failed == NULL && tr_expr_num_truthy(holds)) return NULL;
  char values[512];
  tr__expr_values(c->expr, ctx, values, sizeof(values));
  tr_status *status = TR_STATUS(c->params_only ? TR_SIGNATURE_PARAM : TR_SIGNATURE_SHAPE,
                                "%s: constraint '%s' does not hold: %s",
                                op->name, tr_expr_text(c->expr), values);
  if (failed != NULL) {
    tr_status_append(status, " (%s)", tr_status_message(failed));
    tr_status_destroy(&failed);
  }
  return status;
}

/* ---- shapes ---- */

typedef struct shape_ctx {
  const tr_op_def *op;
  const tr_value *settled;
  tr_call_check *out;
  int input; /* the tensor being checked, for provenance */
} shape_ctx;

static const shape_pattern *pick_pattern(const shape_decl *s, const tr_value *settled) {
  if (s->cond_param < 0) return &s->then_pattern;
  const tr_value *cond = &settled[s->cond_param];
  return (cond->kind == TR_VALUE_BOOL && cond->as.b) ? &s->then_pattern : &s->else_pattern;
}

int tr__pattern_shape(const tr_op_def *op, const shape_pattern *pat, const tr_value *settled,
                      const tr_call_check *b, int32_t *rank, int64_t *shape) {
  int32_t n = 0;
  for (int32_t i = 0; i < pat->count; i++) {
    const shape_item *it = &pat->items[i];
    switch (it->kind) {
      case IT_LITERAL:
      case IT_DIM:
      case IT_INT_PARAM:
        if (n >= TR_MAX_RANK) return 0;
        if (it->kind == IT_LITERAL) shape[n++] = it->literal;
        else if (it->kind == IT_DIM) {
          if (!(b->dim_bound & (1u << it->index))) return 0;
          shape[n++] = b->dim[it->index];
        } else {
          if (settled[it->index].kind != TR_VALUE_INT) return 0;
          shape[n++] = settled[it->index].as.i;
        }
        break;
      case IT_SHAPE_VAR:
        if (!(b->var_bound & (1u << it->index))) return 0;
        for (int k = 0; k < b->run_len[it->index]; k++) {
          if (n >= TR_MAX_RANK) return 0;
          shape[n++] = b->run[it->index][k];
        }
        break;
      case IT_LIST_PARAM: {
        const tr_value *v = &settled[it->index];
        if (v->kind != TR_VALUE_INT_LIST) return 0;
        for (size_t k = 0; k < v->as.list.len; k++) {
          if (n >= TR_MAX_RANK) return 0;
          shape[n++] = v->as.list.items[k];
        }
        break;
      }
    }
  }
  (void)op;
  *rank = n;
  return 1;
}

static tr_status *shape_mismatch(const shape_ctx *c, const tr_tensor_spec *spec,
                                 const shape_pattern *pat, const char *detail) {
  const input_decl *in = &c->op->inputs[c->input];
  char got[256], expected[256];
  int32_t rank = 0;
  int64_t shape[TR_MAX_RANK];
  tr_shape_format(spec->rank, spec->shape, got, sizeof(got));
  int known = tr__pattern_shape(c->op, pat, c->settled, c->out, &rank, shape);
  if (known) tr_shape_format(rank, shape, expected, sizeof(expected));
  return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: input '%s' shape %s does not match %s%s%s%s%s",
                   c->op->name, in->name, got, in->shape.text, known ? " = " : "",
                   known ? expected : "", detail[0] ? ": " : "", detail);
}

/* Where a binding came from, for messages: " from input 'a' axis 1". */
static void provenance(const tr_op_def *op, int input, int axis, char *buf, size_t size) {
  snprintf(buf, size, " from input '%s' axis %d", op->inputs[input].name, axis);
}

static tr_status *match_pattern(shape_ctx *c, const tr_tensor_spec *spec) {
  const input_decl *in = &c->op->inputs[c->input];
  const shape_pattern *pat = pick_pattern(&in->shape, c->settled);
  tr_call_check *b = c->out;
  /* Lengths: every item's, with at most one run still unknown. */
  int32_t fixed = 0;
  int unknown = -1;
  for (int32_t i = 0; i < pat->count; i++) {
    const shape_item *it = &pat->items[i];
    if (it->kind == IT_SHAPE_VAR) {
      if (b->var_bound & (1u << it->index)) fixed += b->run_len[it->index];
      else if (unknown < 0) unknown = i;
      else {
        return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: input '%s' shape %s has two runs of unknown "
                         "length", c->op->name, in->name, in->shape.text);
      }
    } else if (it->kind == IT_LIST_PARAM) {
      const tr_value *v = &c->settled[it->index];
      if (v->kind != TR_VALUE_INT_LIST) {
        return TR_STATUS(TR_SIGNATURE_PARAM, "%s: param '%s' is None, but input '%s' shape %s "
                         "needs it", c->op->name, c->op->params[it->index].name, in->name,
                         in->shape.text);
      }
      fixed += (int32_t)v->as.list.len;
    } else {
      if (it->kind == IT_INT_PARAM && c->settled[it->index].kind != TR_VALUE_INT) {
        return TR_STATUS(TR_SIGNATURE_PARAM, "%s: param '%s' is None, but input '%s' shape %s "
                         "needs it", c->op->name, c->op->params[it->index].name, in->name,
                         in->shape.text);
      }
      fixed += 1;
    }
  }
  if (unknown < 0 ? spec->rank != fixed : spec->rank < fixed) {
    char got[256], detail[128];
    tr_shape_format(spec->rank, spec->shape, got, sizeof(got));
    snprintf(detail, sizeof(detail), "rank %d, expected %s%d", (int)spec->rank,
             unknown < 0 ? "" : "at least ", (int)fixed);
    return shape_mismatch(c, spec, pat, detail);
  }
  int32_t axis = 0;
  char detail[256], from[160];
  for (int32_t i = 0; i < pat->count; i++) {
    const shape_item *it = &pat->items[i];
    if (it->kind == IT_SHAPE_VAR || it->kind == IT_LIST_PARAM) {
      int is_var = it->kind == IT_SHAPE_VAR;
      int bound = is_var && (b->var_bound & (1u << it->index));
      const char *name = is_var ? c->op->vars[it->index].name : c->op->params[it->index].name;
      int32_t len;
      const int64_t *want = NULL;
      if (it->kind == IT_LIST_PARAM) {
        len = (int32_t)c->settled[it->index].as.list.len;
        want = c->settled[it->index].as.list.items;
      } else if (bound) {
        len = b->run_len[it->index];
        want = b->run[it->index];
      } else {
        len = spec->rank - fixed;
      }
      if (want == NULL) { /* bind the run */
        b->var_bound |= 1u << it->index;
        b->run_len[it->index] = (int8_t)len;
        b->var_src_input[it->index] = (int8_t)c->input;
        b->var_src_axis[it->index] = (int8_t)axis;
        memcpy(b->run[it->index], spec->shape + axis, (size_t)len * sizeof(int64_t));
      } else {
        for (int32_t k = 0; k < len; k++) {
          if (spec->shape[axis + k] == want[k]) continue;
          if (is_var) {
            provenance(c->op, b->var_src_input[it->index], b->var_src_axis[it->index] + k, from,
                       sizeof(from));
          } else {
            from[0] = '\0';
          }
          snprintf(detail, sizeof(detail), "axis %d is %lld, expected %s[%d] = %lld%s",
                   (int)(axis + k), (long long)spec->shape[axis + k], name, (int)k,
                   (long long)want[k], from);
          return shape_mismatch(c, spec, pat, detail);
        }
      }
      axis += len;
      continue;
    }
    int64_t got = spec->shape[axis];
    if (it->kind == IT_LITERAL) {
      if (got != it->literal) {
        snprintf(detail, sizeof(detail), "axis %d is %lld, expected %lld", (int)axis,
                 (long long)got, (long long)it->literal);
        return shape_mismatch(c, spec, pat, detail);
      }
    } else if (it->kind == IT_INT_PARAM) {
      int64_t want = c->settled[it->index].as.i;
      if (got != want) {
        snprintf(detail, sizeof(detail), "axis %d is %lld, expected %s = %lld", (int)axis,
                 (long long)got, c->op->params[it->index].name, (long long)want);
        return shape_mismatch(c, spec, pat, detail);
      }
    } else if (b->dim_bound & (1u << it->index)) {
      if (got != b->dim[it->index]) {
        provenance(c->op, b->dim_src_input[it->index], b->dim_src_axis[it->index], from,
                   sizeof(from));
        snprintf(detail, sizeof(detail), "axis %d is %lld, expected %s = %lld%s", (int)axis,
                 (long long)got, c->op->dims[it->index], (long long)b->dim[it->index], from);
        return shape_mismatch(c, spec, pat, detail);
      }
    } else {
      b->dim_bound |= 1u << it->index;
      b->dim[it->index] = got;
      b->dim_src_input[it->index] = (int8_t)c->input;
      b->dim_src_axis[it->index] = (int8_t)axis;
    }
    axis++;
  }
  return NULL;
}

/* ---- dtypes ---- */

static tr_status *check_dtype(const tr_op_def *op, int input, const tr_tensor_spec *spec,
                              tr_call_check *b) {
  const input_decl *in = &op->inputs[input];
  const dtype_decl *d = &in->dtype;
  char got[TR_DTYPE_FORMAT_MAX], want[256];
  int bit = tr__dtype_bit(spec->dtype);
  switch (d->kind) {
    case DT_SET:
      if (bit >= 0 && (d->mask & (1u << bit))) return NULL;
      tr_dtype_format(spec->dtype, got, sizeof(got));
      return TR_STATUS(TR_SIGNATURE_DTYPE, "%s: input '%s' dtype %s is not one of %s", op->name,
                       in->name, got, d->text);
    case DT_SAME_AS: {
      const tr_tensor_spec *other = b->inputs[d->input];
      if (other == NULL || tr_dtype_equal(other->dtype, spec->dtype)) return NULL;
      tr_dtype_format(spec->dtype, got, sizeof(got));
      tr_dtype_format(other->dtype, want, sizeof(want));
      return TR_STATUS(TR_SIGNATURE_DTYPE, "%s: input '%s' dtype %s does not match %s = %s",
                       op->name, in->name, got, d->text, want);
    }
    default: break;
  }
  const var_decl *v = &op->vars[d->var];
  if (b->var_bound & (1u << d->var)) {
    if (tr_dtype_equal(b->var_dtype[d->var], spec->dtype)) return NULL;
    tr_dtype_format(spec->dtype, got, sizeof(got));
    tr_dtype_format(b->var_dtype[d->var], want, sizeof(want));
    return TR_STATUS(TR_SIGNATURE_DTYPE, "%s: input '%s' dtype %s does not match %s = %s from "
                     "input '%s'", op->name, in->name, got, v->name, want,
                     op->inputs[b->var_src_input[d->var]].name);
  }
  if (bit < 0 || !(v->dtype_mask & (1u << bit))) {
    tr_dtype_format(spec->dtype, got, sizeof(got));
    return TR_STATUS(TR_SIGNATURE_DTYPE, "%s: input '%s' dtype %s is not one of %s (type variable "
                     "%s)", op->name, in->name, got, v->dtype_text, v->name);
  }
  b->var_bound |= 1u << d->var;
  b->var_dtype[d->var] = spec->dtype;
  b->var_src_input[d->var] = (int8_t)input;
  return NULL;
}

/* ---- outputs ---- */

static tr_status *infer_output(const tr_op_def *op, const tr_value *settled, int o,
                               tr_call_check *b) {
  const output_decl *out = &op->outputs[o];
  tr_tensor_spec *spec = &b->outputs[o];
  memset(spec, 0, sizeof(*spec));
  if (out->when >= 0 && !(settled[out->when].kind == TR_VALUE_BOOL && settled[out->when].as.b)) {
    b->output_present[o] = 0;
    return NULL;
  }
  b->output_present[o] = 1;
  spec->device = b->device;
  const dtype_decl *d = &out->dtype;
  if (d->or_param >= 0 && settled[d->or_param].kind == TR_VALUE_DTYPE) {
    spec->dtype = settled[d->or_param].as.dtype;
  } else if (d->kind == DT_VAR) {
    spec->dtype = b->var_dtype[d->var];
  } else if (d->kind == DT_SAME_AS) {
    spec->dtype = b->inputs[d->input]->dtype;
  } else {
    for (size_t i = 0; i < tr_dtype_count(); i++) {
      if (d->mask & (1u << i)) {
        spec->dtype = tr_dtype_at(i);
        break;
      }
    }
  }
  const shape_pattern *pat = pick_pattern(&out->shape, settled);
  if (!tr__pattern_shape(op, pat, settled, b, &spec->rank, spec->shape)) {
    return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: output '%s' shape %s cannot be inferred from this "
                     "call (rank above %d, or a param is None)", op->name, out->name,
                     out->shape.text, TR_MAX_RANK);
  }
  return NULL;
}

/* ---- the call ---- */

int tr_op_def_call_device(const tr_op_def *op, const tr_tensor_spec *const *inputs, size_t n_inputs,
                          tr_device *out) {
  for (int i = 0; i < op->n_inputs && (size_t)i < n_inputs; i++) {
    const tr_tensor_spec *spec = inputs[i];
    if (spec == NULL || (op->inputs[i].device_cpu && strcmp(spec->device.type, "cpu") == 0)) continue;
    *out = spec->device; /* input i's device is the call's */
    return i;
  }
  memset(out, 0, sizeof(*out)); /* every input given is a device: cpu one, or none is given */
  strcpy(out->type, "cpu");
  out->index = TR_DEVICE_NO_INDEX;
  return -1;
}

tr_status *tr_op_def_check(const tr_op_def *op, const tr_value *settled,
                           const tr_tensor_spec *const *inputs, size_t n_inputs,
                           tr_call_check *out) {
  out->dim_bound = 0;
  out->var_bound = 0;
  out->n_inputs = op->n_inputs;
  out->n_outputs = op->n_outputs;
  if (n_inputs > (size_t)op->n_inputs) {
    char names[512];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < op->n_inputs; i++) {
      tr__appendf(names, sizeof(names), &used, "%s%s", i ? ", " : "", op->inputs[i].name);
    }
    return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: takes %d inputs (%s), got %zu", op->name,
                     op->n_inputs, names, n_inputs);
  }
  int device_src = tr_op_def_call_device(op, inputs, n_inputs, &out->device);
  for (int i = 0; i < op->n_inputs; i++) {
    const tr_tensor_spec *spec = (size_t)i < n_inputs ? inputs[i] : NULL;
    const input_decl *in = &op->inputs[i];
    out->inputs[i] = spec;
    if (spec == NULL) {
      if (!in->optional) {
        return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: input '%s' is required", op->name, in->name);
      }
      if (in->required_unless >= 0) {
        const tr_value *p = &settled[in->required_unless];
        if (!(p->kind == TR_VALUE_BOOL && p->as.b)) {
          return TR_STATUS(TR_SIGNATURE_SHAPE, "%s: input '%s' is required when %s is False",
                           op->name, in->name, op->params[in->required_unless].name);
        }
      }
      continue;
    }
    if (!(in->device_cpu && strcmp(spec->device.type, "cpu") == 0) && !tr_device_equal(&spec->device, &out->device)) {
      char here[TR_DEVICE_FORMAT_MAX], there[TR_DEVICE_FORMAT_MAX];
      tr_device_format(&spec->device, here, sizeof(here));
      tr_device_format(&out->device, there, sizeof(there));
      return TR_STATUS(TR_SIGNATURE_DEVICE, "%s: input '%s' is on %s, but input '%s' is on %s; "
                       "all inputs of a call are on one device%s", op->name, in->name, here,
                       op->inputs[device_src].name, there,
                       in->device_cpu ? " (or on cpu, for this input)" : "");
    }
    TR_RETURN_IF_ERROR(check_dtype(op, i, spec, out));
    shape_ctx c = {op, settled, out, i};
    TR_RETURN_IF_ERROR(match_pattern(&c, spec));
  }
  tr__eval_ctx ctx = {op, settled, out};
  for (int c = 0; c < op->n_constraints; c++) {
    if (op->constraints[c].params_only) continue;
    TR_RETURN_IF_ERROR(tr__check_constraint(op, &op->constraints[c], &ctx));
  }
  for (int o = 0; o < op->n_outputs; o++) TR_RETURN_IF_ERROR(infer_output(op, settled, o, out));
  return NULL;
}

tr_status *tr_op_def_roofline(const tr_op_def *op, const tr_value *settled,
                              const tr_call_check *check, double *flops, double *bytes) {
  *flops = 0;
  *bytes = 0;
  tr__eval_ctx ctx = {op, settled, check};
  tr_expr_env env = tr__eval_env(&ctx);
  tr_expr_num v = tr_expr_int(0);
  if (op->flops != NULL) {
    TR_RETURN_IF_ERROR(tr_expr_eval(op->flops, &env, &v));
    *flops = tr_expr_num_double(v);
  }
  if (op->bytes != NULL) {
    TR_RETURN_IF_ERROR(tr_expr_eval(op->bytes, &env, &v));
    *bytes = tr_expr_num_double(v);
  }
  return NULL;
}

tr_status *tr_op_def_input_fill(const tr_op_def *op, size_t i, const tr_value *settled,
                                const tr_call_check *check, int *has, int64_t *max) {
  *has = 0;
  *max = 0;
  if (i >= (size_t)op->n_inputs || op->inputs[i].fill == NULL) return NULL;
  tr__eval_ctx ctx = {op, settled, check};
  tr_expr_env env = tr__eval_env(&ctx);
  tr_expr_num v = tr_expr_int(0);
  TR_RETURN_IF_ERROR(tr_expr_eval(op->inputs[i].fill, &env, &v));
  if (!v.is_int && isnan(v.f)) {
    return TR_STATUS(TR_VALUE, "%s: input '%s': its fill '%s' is not a number", op->name, op->inputs[i].name,
                     tr_expr_text(op->inputs[i].fill));
  }
  *has = 1;
  *max = v.is_int ? v.i : v.f >= 9223372036854775807.0 ? INT64_MAX : v.f <= -9223372036854775808.0 ? INT64_MIN
                                                                                                     : (int64_t)v.f;
  return NULL;
}
