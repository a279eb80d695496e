/* loader.c: spec files (libyaml) compiled into op definitions; every error names file, line and
 * column and what was expected there. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/internal.h"
#include "manifest/yaml_doc.h"
#include "platform/platform.h"

struct tr_manifest {
  tr_op_def **ops;
  size_t count, capacity;
};

/* ---- small helpers ---- */

static char *dup_text(const char *s) {
  size_t n = strlen(s) + 1;
  char *copy = malloc(n);
  if (copy != NULL) memcpy(copy, s, n);
  return copy;
}

static char *dup_len(const char *s, size_t n) {
  char *copy = malloc(n + 1);
  if (copy != NULL) {
    memcpy(copy, s, n);
    copy[n] = '\0';
  }
  return copy;
}

#define OOM(what) TR_STATUS(TR_OUT_OF_MEMORY, "loading the manifest: %s", what)

typedef struct loading {
  tr_yaml_doc *doc;
  tr_op_def *op;
} loading;

static tr_status *err_at(loading *l, const yaml_node_t *node, const char *fmt, ...) TR_PRINTF(3, 4);
static tr_status *err_at(loading *l, const yaml_node_t *node, const char *fmt, ...) {
  char message[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  return tr_yaml_error_at(l->doc, node, "%s: %s", l->op->name, message);
}

static yaml_node_t *key_node(loading *l, const yaml_node_pair_t *p) { return tr_yaml_node(l->doc, p->key); }
static yaml_node_t *value_node(loading *l, const yaml_node_pair_t *p) { return tr_yaml_node(l->doc, p->value); }

#define FOR_PAIRS(l, map_node, pair)                                       \
  for (yaml_node_pair_t *pair = (map_node)->data.mapping.pairs.start;     \
       pair < (map_node)->data.mapping.pairs.top; pair++)

/* A key given twice in a mapping: an error at the repetition, naming the key and the first. */
static tr_status *unique_keys(loading *l, const yaml_node_t *node, const char *what) {
  char prefix[256], where[256];
  snprintf(prefix, sizeof(prefix), "%s: ", l->op->name);
  snprintf(where, sizeof(where), " in %s", what);
  return tr_yaml_unique_keys(l->doc, node, prefix, where);
}

/* Requires a mapping whose keys are all in `known` (a NULL-terminated list) and given once. */
static tr_status *check_mapping(loading *l, const yaml_node_t *node, const char *what,
                                const char *const *known) {
  if (node == NULL || node->type != YAML_MAPPING_NODE) {
    return err_at(l, node, "%s must be a mapping", what);
  }
  if (known == NULL) return NULL;
  FOR_PAIRS(l, node, pair) {
    yaml_node_t *k = key_node(l, pair);
    const char *key = tr_yaml_scalar(k);
    int ok = 0;
    for (const char *const *kn = known; key != NULL && *kn != NULL && !ok; kn++) ok = strcmp(*kn, key) == 0;
    if (!ok) {
      char list[256];
      size_t used = 0;
      list[0] = '\0';
      for (const char *const *kn = known; *kn != NULL; kn++) {
        used += (size_t)snprintf(list + used, used < sizeof(list) ? sizeof(list) - used : 0,
                                 "%s%s", kn == known ? "" : ", ", *kn);
      }
      return err_at(l, k, "unknown key '%s' in %s (known: %s)", key ? key : "?", what, list);
    }
  }
  return unique_keys(l, node, what);
}

static tr_status *scalar_text(loading *l, const yaml_node_t *node, const char *what,
                              const char **out) {
  *out = tr_yaml_scalar(node);
  if (*out == NULL) return err_at(l, node, "%s must be a string", what);
  return NULL;
}

static int plain(const yaml_node_t *node) {
  return node->type == YAML_SCALAR_NODE && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static int parse_bool_text(const char *s, int *out) {
  if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) { *out = 1; return 1; }
  if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) { *out = 0; return 1; }
  return 0;
}

static int parse_int_text(const char *s, int64_t *out) {
  if (*s == '\0') return 0;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*end != '\0' || errno == ERANGE) return 0;
  *out = v;
  return 1;
}

static int parse_float_text(const char *s, double *out) {
  if (*s == '\0') return 0;
  char *end = NULL;
  double v = strtod(s, &end);
  if (*end != '\0') return 0;
  *out = v;
  return 1;
}

static tr_status *bool_field(loading *l, const yaml_node_t *node, const char *what, int *out) {
  const char *s = tr_yaml_scalar(node);
  if (s == NULL || !plain(node) || !parse_bool_text(s, out)) {
    return err_at(l, node, "%s must be true or false, got '%s'", what, s ? s : "?");
  }
  return NULL;
}

/* A YAML value as a param value of the allowed `types`. */
static tr_status *yaml_to_value(loading *l, const yaml_node_t *node, uint32_t types,
                                const char *type_text, const char *what, tr_value *out) {
  *out = tr_value_none();
  if (node->type == YAML_SEQUENCE_NODE) {
    if (!(types & PT_LIST)) return err_at(l, node, "%s must be %s, got a list", what, type_text);
    int64_t items[TR_VALUE_LIST_MAX];
    size_t n = 0;
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
      yaml_node_t *item = tr_yaml_node(l->doc, *it);
      const char *s = tr_yaml_scalar(item);
      if (n == TR_VALUE_LIST_MAX) return err_at(l, item, "%s has more than %d items", what, TR_VALUE_LIST_MAX);
      if (s == NULL || !plain(item) || !parse_int_text(s, &items[n])) {
        return err_at(l, item, "%s must be a list of ints, got item '%s'", what, s ? s : "?");
      }
      n++;
    }
    return tr_value_int_list(items, n, out);
  }
  const char *s = tr_yaml_scalar(node);
  if (s == NULL) return err_at(l, node, "%s must be %s, got a mapping", what, type_text);
  if (plain(node)) {
    int b;
    int64_t i;
    double f;
    tr_dtype dt;
    if (tr_yaml_is_null(node)) {
      if (types & PT_NONE) return NULL;
      return err_at(l, node, "%s must be %s, got null", what, type_text);
    }
    if ((types & PT_BOOL) && parse_bool_text(s, &b)) { *out = tr_value_bool(b); return NULL; }
    if ((types & PT_INT) && parse_int_text(s, &i)) { *out = tr_value_int(i); return NULL; }
    if ((types & PT_FLOAT) && parse_float_text(s, &f)) { *out = tr_value_float(f); return NULL; }
    if (types & PT_DTYPE) {
      tr_status *bad = tr_dtype_parse(s, &dt);
      if (bad == NULL) { *out = tr_value_dtype(dt); return NULL; }
      tr_status_destroy(&bad);
    }
  }
  if (types & PT_STR) return tr_value_str(s, out);
  return err_at(l, node, "%s must be %s, got '%s'", what, type_text, s);
}

/* ---- types ---- */

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *end = s + strlen(s);
  while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
  return s;
}

/* Splits "a | b | c" in place: returns the next part (untrimmed) or NULL at the end. */
static char *next_part(char **cursor) {
  char *start = *cursor;
  if (start == NULL) return NULL;
  char *bar = strchr(start, '|');
  if (bar != NULL) {
    *bar = '\0';
    *cursor = bar + 1;
  } else {
    *cursor = NULL;
  }
  return start;
}

static int type_atom(const char *atom, uint32_t *bit) {
  char squeezed[64];
  size_t n = 0;
  for (const char *c = atom; *c && n + 1 < sizeof(squeezed); c++) {
    if (!isspace((unsigned char)*c)) squeezed[n++] = *c;
  }
  squeezed[n] = '\0';
  static const struct { const char *name; uint32_t bit; } kTypes[] = {
      {"int", PT_INT}, {"float", PT_FLOAT}, {"bool", PT_BOOL}, {"str", PT_STR},
      {"dtype", PT_DTYPE}, {"None", PT_NONE}, {"list[int]", PT_LIST}, {"tuple[int,...]", PT_LIST},
  };
  for (size_t i = 0; i < sizeof(kTypes) / sizeof(kTypes[0]); i++) {
    if (strcmp(squeezed, kTypes[i].name) == 0) { *bit = kTypes[i].bit; return 1; }
  }
  return 0;
}

static tr_status *parse_type(loading *l, const yaml_node_t *node, const char *param, uint32_t *out) {
  const char *text;
  TR_RETURN_IF_ERROR(scalar_text(l, node, "a param's type", &text));
  char buf[256];
  if (strlen(text) >= sizeof(buf)) return err_at(l, node, "param '%s': type is too long", param);
  strcpy(buf, text);
  *out = 0;
  char *cursor = buf;
  for (char *part = next_part(&cursor); part; part = next_part(&cursor)) {
    uint32_t bit;
    char *atom = trim(part);
    if (!type_atom(atom, &bit)) {
      return err_at(l, node, "param '%s': unknown type '%s' in '%s' (types: int, float, bool, "
                    "str, dtype, list[int], tuple[int, ...], None)", param, atom, text);
    }
    *out |= bit;
  }
  if (*out == 0) return err_at(l, node, "param '%s': empty type", param);
  return NULL;
}

/* "float16 | bfloat16" into a mask; 0 when some part is not a dtype name (then *bad names it). */
static uint32_t dtype_union(const char *text, char *bad, size_t bad_size) {
  char buf[256];
  if (strlen(text) >= sizeof(buf)) return 0;
  strcpy(buf, text);
  uint32_t mask = 0;
  char *cursor = buf;
  for (char *part = next_part(&cursor); part; part = next_part(&cursor)) {
    char *name = trim(part);
    tr_dtype dt;
    tr_status *s = tr_dtype_parse(name, &dt);
    if (s != NULL) {
      tr_status_destroy(&s);
      snprintf(bad, bad_size, "%s", name);
      return 0;
    }
    mask |= 1u << tr__dtype_bit(dt);
  }
  return mask;
}

/* ---- names ---- */


/* Finds a declaration by name in an array of structs whose first member is the name. */
static int find_decl(const void *decls, size_t stride, int n, const char *name, size_t len) {
  for (int i = 0; i < n; i++) {
    const char *decl = *(char *const *)((const char *)decls + (size_t)i * stride);
    if (strlen(decl) == len && strncmp(decl, name, len) == 0) return i;
  }
  return -1;
}

static int find_name(char *const *names, int n, const char *name, size_t len) {
  return find_decl(names, sizeof(names[0]), n, name, len);
}

static int param_named(const tr_op_def *op, const char *name, size_t len) {
  return find_decl(op->params, sizeof(op->params[0]), op->n_params, name, len);
}

static int var_named(const tr_op_def *op, const char *name, size_t len) {
  return find_decl(op->vars, sizeof(op->vars[0]), op->n_vars, name, len);
}

static int input_named(const tr_op_def *op, const char *name, size_t len) {
  return find_decl(op->inputs, sizeof(op->inputs[0]), op->n_inputs, name, len);
}

static int output_named(const tr_op_def *op, const char *name, size_t len) {
  return find_decl(op->outputs, sizeof(op->outputs[0]), op->n_outputs, name, len);
}

static int is_identifier(const char *s) {
  if (!(isalpha((unsigned char)*s) || *s == '_')) return 0;
  for (; *s; s++) {
    if (!(isalnum((unsigned char)*s) || *s == '_')) return 0;
  }
  return 1;
}

/* ---- forall and params ---- */

static tr_status *load_forall(loading *l, const yaml_node_t *node) {
  if (node == NULL) return NULL;
  TR_RETURN_IF_ERROR(check_mapping(l, node, "'forall'", NULL));
  tr_op_def *op = l->op;
  FOR_PAIRS(l, node, pair) {
    yaml_node_t *k = key_node(l, pair), *v = value_node(l, pair);
    const char *name, *kind;
    TR_RETURN_IF_ERROR(scalar_text(l, k, "a type variable's name", &name));
    TR_RETURN_IF_ERROR(scalar_text(l, v, "a type variable's kind", &kind));
    if (!is_identifier(name)) return err_at(l, k, "type variable '%s' is not a name", name);
    if (var_named(op, name, strlen(name)) >= 0) return err_at(l, k, "type variable '%s' is declared twice", name);
    if (op->n_vars == TR_SIG_MAX_VARS) return err_at(l, k, "more than %d type variables", TR_SIG_MAX_VARS);
    var_decl *var = &op->vars[op->n_vars];
    if (strcmp(kind, "Shape") == 0) {
      var->is_shape = 1;
    } else if (strcmp(kind, "DType") == 0) {
      var->dtype_mask = (1u << tr_dtype_count()) - 1;
    } else if (strncmp(kind, "DType[", 6) == 0 && kind[strlen(kind) - 1] == ']') {
      char inner[256], bad[64] = "";
      snprintf(inner, sizeof(inner), "%.*s", (int)(strlen(kind) - 7), kind + 6);
      var->dtype_mask = dtype_union(inner, bad, sizeof(bad));
      if (var->dtype_mask == 0) {
        return err_at(l, v, "type variable '%s': '%s' in '%s' is not a dtype", name, bad, kind);
      }
    } else {
      return err_at(l, v, "type variable '%s' must be Shape, DType or DType[a | b | ...], got '%s'",
                    name, kind);
    }
    char text[256];
    tr__dtype_mask_format(var->dtype_mask, text, sizeof(text));
    var->name = dup_text(name);
    var->dtype_text = dup_text(text);
    op->n_vars++;
    if (var->name == NULL || var->dtype_text == NULL) return OOM("type variable");
    if (!var->is_shape && op->elem_var < 0) op->elem_var = op->n_vars - 1;
  }
  return NULL;
}

static tr_status *load_params(loading *l, const yaml_node_t *node) {
  if (node == NULL) return NULL;
  TR_RETURN_IF_ERROR(check_mapping(l, node, "'params'", NULL));
  static const char *const kKeys[] = {"type", "default", "doc", NULL};
  tr_op_def *op = l->op;
  FOR_PAIRS(l, node, pair) {
    yaml_node_t *k = key_node(l, pair), *v = value_node(l, pair);
    const char *name;
    TR_RETURN_IF_ERROR(scalar_text(l, k, "a param's name", &name));
    if (!is_identifier(name)) return err_at(l, k, "param '%s' is not a name", name);
    if (strlen(name) > 63) return err_at(l, k, "param name '%.40s...' is %zu characters long, at most 63", name, strlen(name));
    if (param_named(op, name, strlen(name)) >= 0) return err_at(l, k, "param '%s' is declared twice", name);
    if (var_named(op, name, strlen(name)) >= 0) return err_at(l, k, "param '%s' has a type variable's name", name);
    if (op->n_params == TR_SIG_MAX_PARAMS) return err_at(l, k, "more than %d params", TR_SIG_MAX_PARAMS);
    char what[128];
    snprintf(what, sizeof(what), "param '%s'", name);
    TR_RETURN_IF_ERROR(check_mapping(l, v, what, kKeys));
    yaml_node_t *type = tr_yaml_get(l->doc, v, "type");
    if (type == NULL) return err_at(l, v, "param '%s' has no 'type'", name);
    param_decl *p = &op->params[op->n_params];
    TR_RETURN_IF_ERROR(parse_type(l, type, name, &p->types));
    p->name = dup_text(name);
    p->type_text = dup_text(tr_yaml_scalar(type));
    op->n_params++;
    if (p->name == NULL || p->type_text == NULL) return OOM("param");
    yaml_node_t *def = tr_yaml_get(l->doc, v, "default");
    if (def != NULL) {
      snprintf(what, sizeof(what), "param '%s' default", name);
      TR_RETURN_IF_ERROR(yaml_to_value(l, def, p->types, p->type_text, what, &p->def));
      p->has_default = 1;
    }
  }
  return NULL;
}

/* ---- shapes and dtypes ---- */

typedef struct shape_scope {
  int allow_new_dims; /* inputs bind dims; outputs only read them */
  const char *owner;  /* "input 'x'", for messages */
} shape_scope;

static tr_status *resolve_pattern(loading *l, const yaml_node_t *node, const tr_shape_list *list,
                                  const shape_scope *scope, shape_pattern *out) {
  tr_op_def *op = l->op;
  out->count = list->count;
  for (int32_t i = 0; i < list->count; i++) {
    const tr_shape_item *it = &list->items[i];
    shape_item *r = &out->items[i];
    r->literal = it->literal;
    if (it->is_literal) {
      r->kind = IT_LITERAL;
      continue;
    }
    size_t len = strlen(it->name);
    int p = param_named(op, it->name, len), v = var_named(op, it->name, len);
    if (it->star) {
      if (v >= 0 && op->vars[v].is_shape) {
        r->kind = IT_SHAPE_VAR;
        r->index = (int16_t)v;
      } else if (p >= 0 && (op->params[p].types & PT_LIST)) {
        r->kind = IT_LIST_PARAM;
        r->index = (int16_t)p;
      } else {
        return err_at(l, node, "%s: '*%s' is neither a Shape variable nor a list param",
                      scope->owner, it->name);
      }
      continue;
    }
    if (p >= 0) {
      if (!(op->params[p].types & PT_INT) || (op->params[p].types & PT_LIST)) {
        return err_at(l, node, "%s: param '%s' in a shape must be an int param (its type is %s)",
                      scope->owner, it->name, op->params[p].type_text);
      }
      r->kind = IT_INT_PARAM;
      r->index = (int16_t)p;
      continue;
    }
    if (v >= 0) {
      return err_at(l, node, "%s: type variable '%s' in a shape must be written *%s (a Shape "
                    "variable)", scope->owner, it->name, it->name);
    }
    int d = find_name(op->dims, op->n_dims, it->name, len);
    if (d < 0) {
      if (!scope->allow_new_dims) {
        return err_at(l, node, "%s: dim '%s' is bound by no input (an undefined dim)",
                      scope->owner, it->name);
      }
      if (op->n_dims == TR_SIG_MAX_DIMS) return err_at(l, node, "more than %d named dims", TR_SIG_MAX_DIMS);
      op->dims[op->n_dims] = dup_text(it->name);
      if (op->dims[op->n_dims] == NULL) return OOM("dim");
      d = op->n_dims++;
    }
    r->kind = IT_DIM;
    r->index = (int16_t)d;
  }
  return NULL;
}

/* `node` the shape's value in the mapping `parent` (NULL where it has none) */
static tr_status *load_shape(loading *l, const yaml_node_t *parent, const yaml_node_t *node, const shape_scope *scope,
                             shape_decl *out) {
  const char *text;
  out->cond_param = -1;
  if (node == NULL) return err_at(l, parent, "%s has no 'shape'", scope->owner);
  TR_RETURN_IF_ERROR(scalar_text(l, node, "a shape", &text));
  tr_shape_expr expr;
  tr_status *bad = tr_shape_expr_parse(text, 0, &expr);
  if (bad != NULL) {
    tr_status *status = err_at(l, node, "%s: %s", scope->owner, tr_status_message(bad));
    tr_status_destroy(&bad);
    return status;
  }
  out->text = dup_text(text);
  if (out->text == NULL) return OOM("shape");
  if (expr.has_cond) {
    int p = param_named(l->op, expr.cond, strlen(expr.cond));
    if (p < 0 || l->op->params[p].types != PT_BOOL) {
      return err_at(l, node, "%s: '%s' in '%s' must be a bool param", scope->owner, expr.cond, text);
    }
    out->cond_param = p;
    TR_RETURN_IF_ERROR(resolve_pattern(l, node, &expr.else_list, scope, &out->else_pattern));
  }
  return resolve_pattern(l, node, &expr.then_list, scope, &out->then_pattern);
}

static tr_status *load_dtype(loading *l, const yaml_node_t *parent, const yaml_node_t *node, const char *owner,
                             int is_output, dtype_decl *out) {
  const char *text;
  out->or_param = -1;
  if (node == NULL) return err_at(l, parent, "%s has no 'dtype'", owner);
  TR_RETURN_IF_ERROR(scalar_text(l, node, "a dtype", &text));
  out->text = dup_text(text);
  if (out->text == NULL) return OOM("dtype");
  tr_op_def *op = l->op;
  const char *rest = text;
  const char *or_at = strstr(text, " or ");
  if (or_at != NULL) {
    if (!is_output) return err_at(l, node, "%s: 'P or ...' dtypes are for outputs only", owner);
    int p = param_named(op, text, (size_t)(or_at - text));
    if (p < 0 || !(op->params[p].types & PT_DTYPE)) {
      return err_at(l, node, "%s: '%.*s' in '%s' must be a dtype param", owner,
                    (int)(or_at - text), text, text);
    }
    out->or_param = p;
    rest = or_at + 4;
  }
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", rest);
  char *t = trim(buf);
  size_t len = strlen(t);
  if (strncmp(t, "same_as(", 8) == 0 && t[len - 1] == ')') {
    int i = input_named(op, t + 8, len - 9);
    if (i < 0) {
      return err_at(l, node, "%s: same_as(%.*s) names no earlier input", owner, (int)(len - 9), t + 8);
    }
    out->kind = DT_SAME_AS;
    out->input = (int16_t)i;
    return NULL;
  }
  int v = var_named(op, t, len);
  if (v >= 0) {
    if (op->vars[v].is_shape) return err_at(l, node, "%s: '%s' is a Shape variable, not a dtype", owner, t);
    out->kind = DT_VAR;
    out->var = (int16_t)v;
    return NULL;
  }
  char bad[64] = "";
  out->mask = dtype_union(t, bad, sizeof(bad));
  if (out->mask == 0) {
    return err_at(l, node, "%s: dtype '%s' is neither a type variable nor a dtype (in '%s')",
                  owner, bad[0] ? bad : t, text);
  }
  if (is_output && (out->mask & (out->mask - 1)) != 0) {
    return err_at(l, node, "%s: an output's dtype must be one dtype, got '%s'", owner, text);
  }
  out->kind = DT_SET;
  return NULL;
}

/* Runs of unknown length: at most one per shape, given what required inputs before bound. */
static tr_status *check_runs(loading *l, const yaml_node_t *node, const shape_pattern *pat,
                             uint32_t bound_vars, const char *owner, const char *text) {
  int unknown = 0;
  for (int32_t i = 0; i < pat->count; i++) {
    if (pat->items[i].kind == IT_SHAPE_VAR && !(bound_vars & (1u << pat->items[i].index))) unknown++;
  }
  if (unknown > 1) {
    return err_at(l, node, "%s: shape '%s' has %d runs of unknown length; at most one", owner,
                  text, unknown);
  }
  return NULL;
}

static void mark_bound(const shape_pattern *pat, uint32_t *vars, uint32_t *dims) {
  for (int32_t i = 0; i < pat->count; i++) {
    if (pat->items[i].kind == IT_SHAPE_VAR) *vars |= 1u << pat->items[i].index;
    if (pat->items[i].kind == IT_DIM) *dims |= 1u << pat->items[i].index;
  }
}

static tr_status *require_bound(loading *l, const yaml_node_t *node, const shape_pattern *pat,
                                uint32_t vars, uint32_t dims, const char *owner) {
  for (int32_t i = 0; i < pat->count; i++) {
    const shape_item *it = &pat->items[i];
    if (it->kind == IT_SHAPE_VAR && !(vars & (1u << it->index))) {
      return err_at(l, node, "%s: Shape variable '%s' is bound by no required input",
                    owner, l->op->vars[it->index].name);
    }
    if (it->kind == IT_DIM && !(dims & (1u << it->index))) {
      return err_at(l, node, "%s: dim '%s' is bound by no required input", owner,
                    l->op->dims[it->index]);
    }
  }
  return NULL;
}

static tr_status *load_inputs(loading *l, const yaml_node_t *sig, const yaml_node_t *node, uint32_t *bound_vars,
                              uint32_t *bound_dims, uint32_t *bound_dtypes) {
  if (node == NULL) return err_at(l, sig, "signature has no 'inputs'");
  TR_RETURN_IF_ERROR(check_mapping(l, node, "'inputs'", NULL));
  static const char *const kKeys[] = {"dtype", "shape", "optional", "mutated", "contiguous",
                                      "device", "required_unless", "fill", "doc", NULL};
  tr_op_def *op = l->op;
  int seen_optional = 0;
  FOR_PAIRS(l, node, pair) {
    yaml_node_t *k = key_node(l, pair), *v = value_node(l, pair);
    const char *name;
    TR_RETURN_IF_ERROR(scalar_text(l, k, "an input's name", &name));
    if (!is_identifier(name)) return err_at(l, k, "input '%s' is not a name", name);
    if (input_named(op, name, strlen(name)) >= 0) return err_at(l, k, "input '%s' is declared twice", name);
    if (op->n_inputs == TR_SIG_MAX_INPUTS) return err_at(l, k, "more than %d inputs", TR_SIG_MAX_INPUTS);
    char owner[128];
    snprintf(owner, sizeof(owner), "input '%s'", name);
    TR_RETURN_IF_ERROR(check_mapping(l, v, owner, kKeys));
    input_decl *in = &op->inputs[op->n_inputs];
    in->required_unless = -1;
    in->name = dup_text(name);
    op->n_inputs++;
    if (in->name == NULL) return OOM("input");
    yaml_node_t *f;
    if ((f = tr_yaml_get(l->doc, v, "optional"))) TR_RETURN_IF_ERROR(bool_field(l, f, "'optional'", &in->optional));
    if ((f = tr_yaml_get(l->doc, v, "mutated"))) TR_RETURN_IF_ERROR(bool_field(l, f, "'mutated'", &in->mutated));
    if ((f = tr_yaml_get(l->doc, v, "contiguous"))) TR_RETURN_IF_ERROR(bool_field(l, f, "'contiguous'", &in->contiguous));
    if ((f = tr_yaml_get(l->doc, v, "device"))) {
      const char *dev = tr_yaml_scalar(f);
      if (dev == NULL || strcmp(dev, "cpu") != 0) {
        return err_at(l, f, "%s: 'device' can only be cpu, got '%s'", owner, dev ? dev : "?");
      }
      in->device_cpu = 1;
    }
    if ((f = tr_yaml_get(l->doc, v, "required_unless"))) {
      const char *p = tr_yaml_scalar(f);
      int idx = p ? param_named(op, p, strlen(p)) : -1;
      if (idx < 0 || op->params[idx].types != PT_BOOL) {
        return err_at(l, f, "%s: 'required_unless' must name a bool param, got '%s'", owner, p ? p : "?");
      }
      if (!in->optional) return err_at(l, f, "%s: 'required_unless' needs optional: true", owner);
      in->required_unless = idx;
    }
    if ((f = tr_yaml_get(l->doc, v, "fill"))) { /* compiled once every dim is known */
      const char *text;
      TR_RETURN_IF_ERROR(scalar_text(l, f, "'fill'", &text));
      if ((in->fill_text = dup_text(text)) == NULL) return OOM("fill");
    }
    if (in->optional) seen_optional = 1;
    else if (seen_optional) return err_at(l, k, "%s: a required input follows an optional one; optional inputs are trailing", owner);
    TR_RETURN_IF_ERROR(load_dtype(l, v, tr_yaml_get(l->doc, v, "dtype"), owner, 0, &in->dtype));
    shape_scope scope = {1, owner};
    yaml_node_t *shape = tr_yaml_get(l->doc, v, "shape");
    TR_RETURN_IF_ERROR(load_shape(l, v, shape, &scope, &in->shape));
    TR_RETURN_IF_ERROR(check_runs(l, shape, &in->shape.then_pattern, *bound_vars, owner, in->shape.text));
    if (in->shape.cond_param >= 0) {
      TR_RETURN_IF_ERROR(check_runs(l, shape, &in->shape.else_pattern, *bound_vars, owner, in->shape.text));
    }
    if (!in->optional) {
      mark_bound(&in->shape.then_pattern, bound_vars, bound_dims);
      if (in->shape.cond_param >= 0) {
        /* a dim bound on one branch only is bound on both: each branch binds the same names */
        mark_bound(&in->shape.else_pattern, bound_vars, bound_dims);
      }
      if (in->dtype.kind == DT_VAR) *bound_dtypes |= 1u << in->dtype.var;
      op->n_required++;
    }
  }
  if (op->n_inputs == 0) return err_at(l, node, "an op takes at least one input");
  return NULL;
}

static tr_status *load_outputs(loading *l, const yaml_node_t *sig, const yaml_node_t *node, uint32_t bound_vars,
                               uint32_t bound_dims, uint32_t bound_dtypes) {
  if (node == NULL) return err_at(l, sig, "signature has no 'outputs'");
  TR_RETURN_IF_ERROR(check_mapping(l, node, "'outputs'", NULL));
  static const char *const kKeys[] = {"dtype", "shape", "when", "doc", NULL};
  tr_op_def *op = l->op;
  FOR_PAIRS(l, node, pair) {
    yaml_node_t *k = key_node(l, pair), *v = value_node(l, pair);
    const char *name;
    TR_RETURN_IF_ERROR(scalar_text(l, k, "an output's name", &name));
    if (!is_identifier(name)) return err_at(l, k, "output '%s' is not a name", name);
    if (output_named(op, name, strlen(name)) >= 0 || input_named(op, name, strlen(name)) >= 0) {
      return err_at(l, k, "output '%s' is declared twice (or is also an input)", name);
    }
    if (op->n_outputs == TR_SIG_MAX_OUTPUTS) return err_at(l, k, "more than %d outputs", TR_SIG_MAX_OUTPUTS);
    char owner[128];
    snprintf(owner, sizeof(owner), "output '%s'", name);
    TR_RETURN_IF_ERROR(check_mapping(l, v, owner, kKeys));
    output_decl *out = &op->outputs[op->n_outputs];
    out->when = -1;
    out->name = dup_text(name);
    op->n_outputs++;
    if (out->name == NULL) return OOM("output");
    yaml_node_t *when = tr_yaml_get(l->doc, v, "when");
    if (when != NULL) {
      const char *p = tr_yaml_scalar(when);
      int idx = p ? param_named(op, p, strlen(p)) : -1;
      if (idx < 0 || op->params[idx].types != PT_BOOL) {
        return err_at(l, when, "%s: 'when' must name a bool param, got '%s'", owner, p ? p : "?");
      }
      out->when = idx;
    }
    yaml_node_t *dt = tr_yaml_get(l->doc, v, "dtype");
    TR_RETURN_IF_ERROR(load_dtype(l, v, dt, owner, 1, &out->dtype));
    if (out->dtype.kind == DT_VAR && !(bound_dtypes & (1u << out->dtype.var))) {
      return err_at(l, dt, "%s: type variable '%s' is bound by no required input", owner,
                    op->vars[out->dtype.var].name);
    }
    if (out->dtype.kind == DT_SAME_AS && op->inputs[out->dtype.input].optional) {
      return err_at(l, dt, "%s: same_as(%s) names an optional input", owner,
                    op->inputs[out->dtype.input].name);
    }
    shape_scope scope = {0, owner};
    yaml_node_t *shape = tr_yaml_get(l->doc, v, "shape");
    TR_RETURN_IF_ERROR(load_shape(l, v, shape, &scope, &out->shape));
    TR_RETURN_IF_ERROR(require_bound(l, shape, &out->shape.then_pattern, bound_vars, bound_dims, owner));
    if (out->shape.cond_param >= 0) {
      TR_RETURN_IF_ERROR(require_bound(l, shape, &out->shape.else_pattern, bound_vars, bound_dims, owner));
    }
  }
  if (op->n_outputs == 0) return err_at(l, node, "an op has at least one output");
  return NULL;
}

/* ---- expressions ---- */

static int resolve_name(void *vctx, const char *name, size_t len, int as_run, int as_tensor,
                        tr_expr_ref *out) {
  const tr_op_def *op = vctx;
  int i;
  if (as_run) {
    if ((i = var_named(op, name, len)) >= 0 && op->vars[i].is_shape) {
      *out = (tr_expr_ref){REF_SHAPE_VAR, (uint16_t)i};
      return 1;
    }
    if ((i = param_named(op, name, len)) >= 0 && (op->params[i].types & PT_LIST)) {
      *out = (tr_expr_ref){REF_LIST_PARAM, (uint16_t)i};
      return 1;
    }
    return 0;
  }
  if (as_tensor) {
    if ((i = input_named(op, name, len)) >= 0) { *out = (tr_expr_ref){REF_INPUT, (uint16_t)i}; return 1; }
    if ((i = output_named(op, name, len)) >= 0) { *out = (tr_expr_ref){REF_OUTPUT, (uint16_t)i}; return 1; }
    return 0;
  }
  if ((i = find_name(op->dims, op->n_dims, name, len)) >= 0) {
    *out = (tr_expr_ref){REF_DIM, (uint16_t)i};
    return 1;
  }
  if ((i = param_named(op, name, len)) >= 0 &&
      (op->params[i].types & (PT_INT | PT_FLOAT | PT_BOOL)) && !(op->params[i].types & PT_LIST)) {
    *out = (tr_expr_ref){REF_PARAM, (uint16_t)i};
    return 1;
  }
  if (len == 10 && strncmp(name, "elem_bytes", 10) == 0 && op->elem_var >= 0) {
    *out = (tr_expr_ref){REF_ELEM_BYTES, 0};
    return 1;
  }
  return 0;
}

static tr_status *compile_expr(loading *l, const yaml_node_t *node, const char *what, tr_expr **out) {
  const char *text;
  TR_RETURN_IF_ERROR(scalar_text(l, node, what, &text));
  tr_status *bad = tr_expr_compile(text, resolve_name, l->op, out);
  if (bad == NULL) return NULL;
  tr_status *status = err_at(l, node, "%s: %s", what, tr_status_message(bad));
  tr_status_destroy(&bad);
  return status;
}

static void only_params(void *vflag, int function, tr_expr_ref ref, const char *name) {
  (void)name;
  int *flag = vflag;
  if (function >= 0 || ref.kind != REF_PARAM) *flag = 0;
}

static tr_status *load_constraints(loading *l, const yaml_node_t *node) {
  if (node == NULL) return NULL;
  if (node->type != YAML_SEQUENCE_NODE) return err_at(l, node, "'constraints' must be a list");
  size_t n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
  tr_op_def *op = l->op;
  op->constraints = calloc(n + 1, sizeof(constraint_decl));
  if (op->constraints == NULL) return OOM("constraints");
  for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
    constraint_decl *c = &op->constraints[op->n_constraints];
    TR_RETURN_IF_ERROR(compile_expr(l, tr_yaml_node(l->doc, *it), "constraint", &c->expr));
    op->n_constraints++;
    c->params_only = 1;
    tr_expr_visit_refs(c->expr, only_params, &c->params_only);
  }
  return NULL;
}

static tr_status *load_fills(loading *l, const yaml_node_t *inputs) {
  tr_op_def *op = l->op;
  for (int i = 0; i < op->n_inputs; i++) {
    if (op->inputs[i].fill_text == NULL) continue;
    yaml_node_t *node = tr_yaml_get(l->doc, tr_yaml_get(l->doc, inputs, op->inputs[i].name), "fill");
    char what[128];
    snprintf(what, sizeof(what), "input '%s' fill", op->inputs[i].name);
    TR_RETURN_IF_ERROR(compile_expr(l, node, what, &op->inputs[i].fill));
  }
  return NULL;
}

static tr_status *load_roofline(loading *l, const yaml_node_t *node) {
  if (node == NULL) return NULL;
  static const char *const kKeys[] = {"flops", "bytes", NULL};
  TR_RETURN_IF_ERROR(check_mapping(l, node, "'roofline'", kKeys));
  yaml_node_t *f = tr_yaml_get(l->doc, node, "flops"), *b = tr_yaml_get(l->doc, node, "bytes");
  if (f == NULL || b == NULL) return err_at(l, node, "'roofline' needs both 'flops' and 'bytes'");
  TR_RETURN_IF_ERROR(compile_expr(l, f, "roofline flops", &l->op->flops));
  return compile_expr(l, b, "roofline bytes", &l->op->bytes);
}

/* ---- workloads ---- */

/* Every input of the row just loaded (the last of op->workloads) has an element count and a size
 * in bytes that int64 holds. A row whose dtypes do not settle is lint's to report; only its
 * element counts are checked here. */
static tr_status *check_sizes(loading *l, const workload_decl *w, yaml_node_t *const *shape_node) {
  tr_op_def *op = l->op;
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  uint8_t has[TR_SIG_MAX_INPUTS];
  tr_named_value params[TR_SIG_MAX_PARAMS];
  size_t n_params = 0;
  tr_status *unsettled = tr_op_def_workload(op, (size_t)op->n_workloads - 1, &cpu, specs, has, params, &n_params);
  int settled = unsettled == NULL;
  tr_status_destroy(&unsettled);
  for (int i = 0; i < op->n_inputs; i++) {
    if (!w->has_shape[i]) continue;
    char what[96], problem[512];
    snprintf(what, sizeof(what), "input '%s'", op->inputs[i].name);
    if (tr__tensor_too_large(what, w->rank[i], w->shape[i], settled ? &specs[i].dtype : NULL, problem, sizeof(problem))) {
      return err_at(l, shape_node[i], "workload '%s': %s", w->label, problem);
    }
  }
  return NULL;
}

static tr_status *load_workload(loading *l, const yaml_node_t *node, workload_decl *w) {
  static const char *const kKeys[] = {"label", "dtype", "shapes", "dtypes", "params", NULL};
  TR_RETURN_IF_ERROR(check_mapping(l, node, "a workload row", kKeys));
  tr_op_def *op = l->op;
  w->line = tr_yaml_line(node);
  w->column = (int)node->start_mark.column + 1;
  const char *label;
  yaml_node_t *f = tr_yaml_get(l->doc, node, "label");
  if (f == NULL) return err_at(l, node, "a workload row has no 'label'");
  TR_RETURN_IF_ERROR(scalar_text(l, f, "'label'", &label));
  w->label = dup_text(label);
  if (w->label == NULL) return OOM("workload");
  if ((f = tr_yaml_get(l->doc, node, "dtype"))) {
    const char *name;
    TR_RETURN_IF_ERROR(scalar_text(l, f, "'dtype'", &name));
    tr_status *bad = tr_dtype_parse(name, &w->dtype);
    if (bad != NULL) {
      tr_status *status = err_at(l, f, "workload '%s': %s", label, tr_status_message(bad));
      tr_status_destroy(&bad);
      return status;
    }
    w->has_dtype = 1;
  }
  yaml_node_t *shapes = tr_yaml_get(l->doc, node, "shapes");
  if (shapes == NULL) return err_at(l, node, "workload '%s' has no 'shapes'", label);
  TR_RETURN_IF_ERROR(check_mapping(l, shapes, "'shapes'", NULL));
  char where[160];
  snprintf(where, sizeof(where), "'shapes' of workload '%s'", label);
  TR_RETURN_IF_ERROR(unique_keys(l, shapes, where));
  yaml_node_t *shape_node[TR_SIG_MAX_INPUTS] = {NULL};
  FOR_PAIRS(l, shapes, pair) {
    yaml_node_t *k = key_node(l, pair), *v = value_node(l, pair);
    const char *name = tr_yaml_scalar(k);
    int i = name ? input_named(op, name, strlen(name)) : -1;
    if (i < 0) return err_at(l, k, "workload '%s': '%s' is not an input", label, name ? name : "?");
    if (v->type != YAML_SEQUENCE_NODE) return err_at(l, v, "workload '%s': the shape of '%s' must be a list", label, name);
    int32_t rank = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
      yaml_node_t *item = tr_yaml_node(l->doc, *it);
      const char *s = tr_yaml_scalar(item);
      int64_t dim;
      if (rank == TR_MAX_RANK) return err_at(l, item, "workload '%s': '%s' has more than %d dims", label, name, TR_MAX_RANK);
      if (s == NULL || !parse_int_text(s, &dim) || dim < 0) {
        return err_at(l, item, "workload '%s': a dim of '%s' must be an int >= 0, got '%s'", label, name, s ? s : "?");
      }
      w->shape[i][rank++] = dim;
    }
    w->rank[i] = rank;
    w->has_shape[i] = 1;
    shape_node[i] = v;
  }
  if ((f = tr_yaml_get(l->doc, node, "dtypes"))) {
    TR_RETURN_IF_ERROR(check_mapping(l, f, "'dtypes'", NULL));
    snprintf(where, sizeof(where), "'dtypes' of workload '%s'", label);
    TR_RETURN_IF_ERROR(unique_keys(l, f, where));
    FOR_PAIRS(l, f, pair) {
      yaml_node_t *k = key_node(l, pair), *v = value_node(l, pair);
      const char *name = tr_yaml_scalar(k), *dt = tr_yaml_scalar(v);
      int i = name ? input_named(op, name, strlen(name)) : -1;
      if (i < 0) return err_at(l, k, "workload '%s': '%s' is not an input", label, name ? name : "?");
      tr_status *bad = dt ? tr_dtype_parse(dt, &w->input_dtype[i]) : TR_STATUS(TR_VALUE, "a dtype name is expected");
      if (bad != NULL) {
        tr_status *status = err_at(l, v, "workload '%s': %s", label, tr_status_message(bad));
        tr_status_destroy(&bad);
        return status;
      }
      w->has_input_dtype[i] = 1;
    }
  }
  if ((f = tr_yaml_get(l->doc, node, "params"))) {
    TR_RETURN_IF_ERROR(check_mapping(l, f, "'params'", NULL));
    size_t n = (size_t)(f->data.mapping.pairs.top - f->data.mapping.pairs.start);
    w->params = calloc(n + 1, sizeof(tr_named_value));
    if (w->params == NULL) return OOM("workload params");
    FOR_PAIRS(l, f, pair) {
      yaml_node_t *k = key_node(l, pair), *v = value_node(l, pair);
      const char *name = tr_yaml_scalar(k);
      int p = name ? param_named(op, name, strlen(name)) : -1;
      if (p < 0) return err_at(l, k, "workload '%s': '%s' is not a param", label, name ? name : "?");
      for (int q = 0; q < w->n_params; q++) { /* so a row has at most TR_SIG_MAX_PARAMS */
        if (w->params[q].name == op->params[p].name) {
          return err_at(l, k, "workload '%s': param '%s' is given twice", label, name);
        }
      }
      char what[128];
      snprintf(what, sizeof(what), "workload '%s' param '%s'", label, name);
      tr_named_value *nv = &w->params[w->n_params];
      nv->name = op->params[p].name;
      TR_RETURN_IF_ERROR(yaml_to_value(l, v, op->params[p].types, op->params[p].type_text, what, &nv->value));
      w->n_params++;
    }
  }
  return check_sizes(l, w, shape_node);
}

static tr_status *load_workloads(loading *l, const yaml_node_t *node) {
  if (node == NULL) return NULL;
  if (node->type != YAML_SEQUENCE_NODE) return err_at(l, node, "'workloads' must be a list");
  size_t n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
  l->op->workloads = calloc(n + 1, sizeof(workload_decl));
  if (l->op->workloads == NULL) return OOM("workloads");
  for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
    workload_decl *w = &l->op->workloads[l->op->n_workloads++];
    TR_RETURN_IF_ERROR(load_workload(l, tr_yaml_node(l->doc, *it), w));
  }
  return NULL;
}

/* ---- composition ---- */

/* name | view(name, [shape]) | expand(name, [shape] | shape(other)) */
static tr_status *load_wire(loading *l, const yaml_node_t *node, const char *owner, wire_decl *w) {
  const char *text;
  TR_RETURN_IF_ERROR(scalar_text(l, node, "a wiring", &text));
  w->text = dup_text(text);
  w->line = tr_yaml_line(node);
  if (w->text == NULL) return OOM("wiring");
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", text);
  char *t = trim(buf);
  size_t len = strlen(t);
  int is_view = strncmp(t, "view(", 5) == 0, is_expand = strncmp(t, "expand(", 7) == 0;
  if (!is_view && !is_expand) {
    if (!is_identifier(t)) return err_at(l, node, "%s: '%s' is not a name, view(...) or expand(...)", owner, text);
    w->kind = WIRE_NAME;
    w->source = dup_text(t);
    return w->source ? NULL : OOM("wiring");
  }
  if (t[len - 1] != ')') return err_at(l, node, "%s: '%s' does not end with ')'", owner, text);
  t[len - 1] = '\0';
  char *args = t + (is_view ? 5 : 7);
  char *comma = strchr(args, ',');
  if (comma == NULL) return err_at(l, node, "%s: '%s' needs two arguments", owner, text);
  *comma = '\0';
  char *source = trim(args), *shape = trim(comma + 1);
  if (!is_identifier(source)) return err_at(l, node, "%s: '%s' is not a name", owner, source);
  w->source = dup_text(source);
  if (w->source == NULL) return OOM("wiring");
  size_t slen = strlen(shape);
  if (is_expand && strncmp(shape, "shape(", 6) == 0 && shape[slen - 1] == ')') {
    w->kind = WIRE_EXPAND_LIKE;
    w->like = dup_len(shape + 6, slen - 7);
    if (w->like == NULL) return OOM("wiring");
    if (!is_identifier(w->like)) return err_at(l, node, "%s: shape(%s) needs a name", owner, w->like);
    return NULL;
  }
  w->kind = is_view ? WIRE_VIEW : WIRE_EXPAND;
  tr_shape_expr expr;
  tr_status *bad = tr_shape_expr_parse(shape, 1, &expr);
  if (bad == NULL && expr.has_cond) {
    bad = TR_STATUS(TR_MANIFEST, "a wiring's shape cannot be conditional");
  }
  if (bad != NULL) {
    tr_status *status = err_at(l, node, "%s: %s", owner, tr_status_message(bad));
    tr_status_destroy(&bad);
    return status;
  }
  shape_scope scope = {0, owner};
  return resolve_pattern(l, node, &expr.then_list, &scope, &w->pattern);
}

static tr_status *load_step(loading *l, const yaml_node_t *node, step_decl *s) {
  static const char *const kKeys[] = {"op", "when", "inputs", "params", "outputs", NULL};
  TR_RETURN_IF_ERROR(check_mapping(l, node, "a composition step", kKeys));
  s->when_input = -1;
  s->line = tr_yaml_line(node);
  s->column = (int)node->start_mark.column + 1;
  const char *op_name;
  yaml_node_t *f = tr_yaml_get(l->doc, node, "op");
  if (f == NULL) return err_at(l, node, "a composition step has no 'op'");
  TR_RETURN_IF_ERROR(scalar_text(l, f, "'op'", &op_name));
  s->op_name = dup_text(op_name);
  if (s->op_name == NULL) return OOM("step");
  char owner[160];
  snprintf(owner, sizeof(owner), "step %s", op_name);
  if ((f = tr_yaml_get(l->doc, node, "when"))) {
    const char *in = tr_yaml_scalar(f);
    int i = in ? input_named(l->op, in, strlen(in)) : -1;
    if (i < 0 || !l->op->inputs[i].optional) {
      return err_at(l, f, "%s: 'when' must name an optional input, got '%s'", owner, in ? in : "?");
    }
    s->when_input = i;
  }
  yaml_node_t *inputs = tr_yaml_get(l->doc, node, "inputs");
  if (inputs == NULL) return err_at(l, node, "%s has no 'inputs'", owner);
  TR_RETURN_IF_ERROR(check_mapping(l, inputs, "a step's 'inputs'", NULL));
  char where[192];
  snprintf(where, sizeof(where), "'inputs' of %s", owner);
  TR_RETURN_IF_ERROR(unique_keys(l, inputs, where));
  size_t n = (size_t)(inputs->data.mapping.pairs.top - inputs->data.mapping.pairs.start);
  s->input_names = calloc(n + 1, sizeof(char *));
  s->inputs = calloc(n + 1, sizeof(wire_decl));
  if (s->input_names == NULL || s->inputs == NULL) return OOM("step");
  FOR_PAIRS(l, inputs, pair) {
    const char *name;
    TR_RETURN_IF_ERROR(scalar_text(l, key_node(l, pair), "a sub-op input's name", &name));
    s->input_names[s->n_inputs] = dup_text(name);
    if (s->input_names[s->n_inputs] == NULL) return OOM("step");
    wire_decl *w = &s->inputs[s->n_inputs++];
    TR_RETURN_IF_ERROR(load_wire(l, value_node(l, pair), owner, w));
  }
  if ((f = tr_yaml_get(l->doc, node, "params"))) {
    TR_RETURN_IF_ERROR(check_mapping(l, f, "a step's 'params'", NULL));
    n = (size_t)(f->data.mapping.pairs.top - f->data.mapping.pairs.start);
    s->params = calloc(n + 1, sizeof(step_param));
    if (s->params == NULL) return OOM("step");
    FOR_PAIRS(l, f, pair) {
      const char *name;
      yaml_node_t *v = value_node(l, pair);
      TR_RETURN_IF_ERROR(scalar_text(l, key_node(l, pair), "a sub-op param's name", &name));
      for (int q = 0; q < s->n_params; q++) { /* so a step gives at most TR_SIG_MAX_PARAMS */
        if (strcmp(s->params[q].name, name) == 0) {
          return err_at(l, key_node(l, pair), "%s: param '%s' is given twice", owner, name);
        }
      }
      step_param *p = &s->params[s->n_params++];
      p->from_param = -1;
      p->name = dup_text(name);
      if (p->name == NULL) return OOM("step");
      const char *text = tr_yaml_scalar(v);
      if (text != NULL && text[0] == '$') {
        p->from_param = param_named(l->op, text + 1, strlen(text + 1));
        if (p->from_param < 0) return err_at(l, v, "%s: '%s' names no param of %s", owner, text, l->op->name);
      } else {
        /* the literal is typed against the sub-op's param once it is resolved */
        uint32_t any = PT_INT | PT_FLOAT | PT_BOOL | PT_LIST | PT_NONE | PT_DTYPE | PT_STR;
        TR_RETURN_IF_ERROR(yaml_to_value(l, v, any, "a literal", owner, &p->literal));
      }
    }
  }
  yaml_node_t *outputs = tr_yaml_get(l->doc, node, "outputs");
  if (outputs == NULL) return err_at(l, node, "%s has no 'outputs'", owner);
  TR_RETURN_IF_ERROR(check_mapping(l, outputs, "a step's 'outputs'", NULL));
  snprintf(where, sizeof(where), "'outputs' of %s", owner);
  TR_RETURN_IF_ERROR(unique_keys(l, outputs, where));
  n = (size_t)(outputs->data.mapping.pairs.top - outputs->data.mapping.pairs.start);
  s->output_names = calloc(n + 1, sizeof(char *));
  s->output_to = calloc(n + 1, sizeof(char *));
  if (s->output_names == NULL || s->output_to == NULL) return OOM("step");
  FOR_PAIRS(l, outputs, pair) {
    const char *from, *to;
    TR_RETURN_IF_ERROR(scalar_text(l, key_node(l, pair), "a sub-op output's name", &from));
    TR_RETURN_IF_ERROR(scalar_text(l, value_node(l, pair), "a name in scope", &to));
    if (!is_identifier(to)) return err_at(l, value_node(l, pair), "%s: '%s' is not a name", owner, to);
    s->output_names[s->n_outputs] = dup_text(from);
    s->output_to[s->n_outputs] = dup_text(to);
    s->n_outputs++;
    if (s->output_names[s->n_outputs - 1] == NULL || s->output_to[s->n_outputs - 1] == NULL) return OOM("step");
  }
  return NULL;
}

static tr_status *load_composition(loading *l, const yaml_node_t *node) {
  if (node == NULL) return NULL;
  static const char *const kKeys[] = {"steps", "returns", NULL};
  TR_RETURN_IF_ERROR(check_mapping(l, node, "'composition'", kKeys));
  tr_op_def *op = l->op;
  composition_decl *c = calloc(1, sizeof(*c));
  if (c == NULL) return OOM("composition");
  op->composition = c;
  yaml_node_t *steps = tr_yaml_get(l->doc, node, "steps");
  if (steps == NULL || steps->type != YAML_SEQUENCE_NODE) return err_at(l, steps ? steps : node, "'composition' needs a list of 'steps'");
  size_t n = (size_t)(steps->data.sequence.items.top - steps->data.sequence.items.start);
  c->steps = calloc(n + 1, sizeof(step_decl));
  c->returns = calloc((size_t)op->n_outputs + 1, sizeof(wire_decl));
  if (c->steps == NULL || c->returns == NULL) return OOM("composition");
  for (yaml_node_item_t *it = steps->data.sequence.items.start; it < steps->data.sequence.items.top; it++) {
    TR_RETURN_IF_ERROR(load_step(l, tr_yaml_node(l->doc, *it), &c->steps[c->n_steps++]));
  }
  yaml_node_t *returns = tr_yaml_get(l->doc, node, "returns");
  if (returns == NULL) return err_at(l, node, "'composition' has no 'returns'");
  TR_RETURN_IF_ERROR(check_mapping(l, returns, "'returns'", NULL));
  TR_RETURN_IF_ERROR(unique_keys(l, returns, "'returns'"));
  uint32_t seen = 0;
  FOR_PAIRS(l, returns, pair) {
    yaml_node_t *k = key_node(l, pair);
    const char *name = tr_yaml_scalar(k);
    int o = name ? output_named(op, name, strlen(name)) : -1;
    if (o < 0) return err_at(l, k, "'returns': '%s' is not an output", name ? name : "?");
    char owner[128];
    snprintf(owner, sizeof(owner), "'returns' of '%s'", name);
    TR_RETURN_IF_ERROR(load_wire(l, value_node(l, pair), owner, &c->returns[o]));
    seen |= 1u << o;
  }
  for (int o = 0; o < op->n_outputs; o++) {
    if (!(seen & (1u << o))) return err_at(l, returns, "'returns' gives no value for output '%s'", op->outputs[o].name);
  }
  return NULL;
}

/* ---- entries ---- */

static void destroy_op(tr_op_def *op);

static tr_status *load_entry(tr_yaml_doc *doc, const yaml_node_t *key, const yaml_node_t *entry,
                             tr_op_def *op) {
  loading l = {doc, op};
  static const char *const kEntry[] = {"family", "ref_api", "doc", "signature", "composition",
                                       "workloads", "roofline", NULL};
  static const char *const kSignature[] = {"forall", "params", "inputs", "outputs", "constraints", NULL};
  op->elem_var = -1;
  op->line = tr_yaml_line(key);
  TR_RETURN_IF_ERROR(check_mapping(&l, entry, "an op's entry", kEntry));
  const char *family = NULL, *ref_api = NULL, *text_doc = "";
  yaml_node_t *f;
  if ((f = tr_yaml_get(doc, entry, "family")) == NULL) return err_at(&l, entry, "the entry has no 'family'");
  TR_RETURN_IF_ERROR(scalar_text(&l, f, "'family'", &family));
  if ((f = tr_yaml_get(doc, entry, "ref_api")) == NULL) return err_at(&l, entry, "the entry has no 'ref_api' (write 'none' when there is no reference)");
  TR_RETURN_IF_ERROR(scalar_text(&l, f, "'ref_api'", &ref_api));
  if ((f = tr_yaml_get(doc, entry, "doc"))) TR_RETURN_IF_ERROR(scalar_text(&l, f, "'doc'", &text_doc));
  op->family = dup_text(family);
  op->ref_api = dup_text(ref_api);
  op->doc = dup_text(text_doc);
  op->path = dup_text(tr_yaml_path(doc));
  if (!op->family || !op->ref_api || !op->doc || !op->path) return OOM("entry");
  yaml_node_t *sig = tr_yaml_get(doc, entry, "signature");
  if (sig == NULL) return err_at(&l, entry, "the entry has no 'signature'");
  TR_RETURN_IF_ERROR(check_mapping(&l, sig, "'signature'", kSignature));
  TR_RETURN_IF_ERROR(load_forall(&l, tr_yaml_get(doc, sig, "forall")));
  TR_RETURN_IF_ERROR(load_params(&l, tr_yaml_get(doc, sig, "params")));
  uint32_t vars = 0, dims = 0, dtypes = 0;
  TR_RETURN_IF_ERROR(load_inputs(&l, sig, tr_yaml_get(doc, sig, "inputs"), &vars, &dims, &dtypes));
  TR_RETURN_IF_ERROR(load_outputs(&l, sig, tr_yaml_get(doc, sig, "outputs"), vars, dims, dtypes));
  TR_RETURN_IF_ERROR(load_constraints(&l, tr_yaml_get(doc, sig, "constraints")));
  TR_RETURN_IF_ERROR(load_fills(&l, tr_yaml_get(doc, sig, "inputs")));
  TR_RETURN_IF_ERROR(load_composition(&l, tr_yaml_get(doc, entry, "composition")));
  TR_RETURN_IF_ERROR(load_workloads(&l, tr_yaml_get(doc, entry, "workloads")));
  return load_roofline(&l, tr_yaml_get(doc, entry, "roofline"));
}

int tr_manifest_op_name_ok(const char *name) {
  size_t len = strlen(name);
  if (len < 6 || name[0] < 'A' || name[0] > 'Z') return 0;
  const char *suffix = name + len - 5;
  if (strcmp(suffix, "FwdOp") != 0 && strcmp(suffix, "BwdOp") != 0) return 0;
  for (const char *c = name; c < suffix; c++) {
    if (!isalnum((unsigned char)*c)) return 0;
  }
  return 1;
}

static tr_status *add_op(tr_manifest *m, tr_op_def *op) {
  if (m->count == m->capacity) {
    size_t capacity = m->capacity ? m->capacity * 2 : 16;
    tr_op_def **ops = realloc(m->ops, capacity * sizeof(*ops));
    if (ops == NULL) return OOM("op table");
    m->ops = ops;
    m->capacity = capacity;
  }
  m->ops[m->count++] = op;
  return NULL;
}

static tr_status *load_doc(tr_manifest *m, tr_yaml_doc *doc) {
  TR_RETURN_IF_ERROR(tr_yaml_one_document(doc, "a manifest file"));
  yaml_node_t *root = tr_yaml_root(doc);
  if (root == NULL) return NULL;
  if (root->type != YAML_MAPPING_NODE) {
    return tr_yaml_error_at(doc, root, "a spec file is a mapping of op names to entries; found a %s",
                            root->type == YAML_SEQUENCE_NODE ? "sequence" : "scalar");
  }
  for (yaml_node_pair_t *pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++) {
    yaml_node_t *key = tr_yaml_node(doc, pair->key), *entry = tr_yaml_node(doc, pair->value);
    const char *name = tr_yaml_scalar(key);
    if (name == NULL) return tr_yaml_error_at(doc, key, "an op name must be a string");
    if (!tr_manifest_op_name_ok(name)) {
      return tr_yaml_error_at(doc, key, "op name '%s' does not have the form {Name}{Fwd|Bwd}Op "
                              "(e.g. RMSNormFwdOp)", name);
    }
    if (strlen(name) > 63) {
      return tr_yaml_error_at(doc, key, "op name '%.40s...' is %zu characters long, at most 63", name, strlen(name));
    }
    const tr_op_def *seen = tr_manifest_find(m, name);
    if (seen != NULL) {
      return tr_yaml_error_at(doc, key, "op '%s' is already declared at %s:%d", name, seen->path, seen->line);
    }
    tr_op_def *op = calloc(1, sizeof(*op));
    if (op == NULL || (op->name = dup_text(name)) == NULL) {
      free(op);
      return OOM("op");
    }
    tr_status *status = load_entry(doc, key, entry, op);
    if (status == NULL) status = add_op(m, op);
    if (status != NULL) {
      destroy_op(op);
      return status;
    }
  }
  return NULL;
}

/* Second pass: each composition step names a known, non-composite op and its inputs, params and
 * outputs, with literals of the sub-op's types. */
static tr_status *resolve_compositions(tr_manifest *m) {
  for (size_t i = 0; i < m->count; i++) {
    tr_op_def *op = m->ops[i];
    if (op->composition == NULL) continue;
    for (int s = 0; s < op->composition->n_steps; s++) {
      step_decl *step = &op->composition->steps[s];
      const tr_op_def *sub = tr_manifest_find(m, step->op_name);
      const char *where_fmt = "%s:%d:%d: %s: composition step %d: ";
      char where[512];
      snprintf(where, sizeof(where), where_fmt, op->path, step->line, step->column, op->name, s + 1);
      if (sub == NULL) return TR_STATUS(TR_MANIFEST, "%sop '%s' is not in the manifest", where, step->op_name);
      if (sub->composition != NULL) {
        return TR_STATUS(TR_MANIFEST, "%sop '%s' is itself composite; compositions do not nest", where, sub->name);
      }
      step->op = sub;
      for (int k = 0; k < step->n_inputs; k++) {
        if (input_named(sub, step->input_names[k], strlen(step->input_names[k])) < 0) {
          return TR_STATUS(TR_MANIFEST, "%s%s has no input '%s'", where, sub->name, step->input_names[k]);
        }
      }
      for (int k = 0; k < step->n_params; k++) {
        step_param *p = &step->params[k];
        int idx = param_named(sub, p->name, strlen(p->name));
        if (idx < 0) return TR_STATUS(TR_MANIFEST, "%s%s has no param '%s'", where, sub->name, p->name);
        if (p->from_param >= 0) continue;
        tr_value accepted = p->literal;
        uint32_t types = sub->params[idx].types;
        int ok = (p->literal.kind == TR_VALUE_INT && (types & (PT_INT | PT_FLOAT))) ||
                 (p->literal.kind == TR_VALUE_FLOAT && (types & PT_FLOAT)) ||
                 (p->literal.kind == TR_VALUE_BOOL && (types & PT_BOOL)) ||
                 (p->literal.kind == TR_VALUE_NONE && (types & PT_NONE)) ||
                 (p->literal.kind == TR_VALUE_INT_LIST && (types & PT_LIST)) ||
                 (p->literal.kind == TR_VALUE_DTYPE && (types & PT_DTYPE)) ||
                 (p->literal.kind == TR_VALUE_STR && (types & PT_STR));
        if (!ok) {
          char text[128];
          tr_value_format(&accepted, text, sizeof(text));
          return TR_STATUS(TR_MANIFEST, "%sparam '%s' of %s expects %s, got %s", where, p->name,
                           sub->name, sub->params[idx].type_text, text);
        }
      }
      for (int k = 0; k < step->n_outputs; k++) {
        if (output_named(sub, step->output_names[k], strlen(step->output_names[k])) < 0) {
          return TR_STATUS(TR_MANIFEST, "%s%s has no output '%s'", where, sub->name, step->output_names[k]);
        }
      }
    }
  }
  return NULL;
}

static int compare_ops(const void *a, const void *b) {
  return strcmp((*(tr_op_def *const *)a)->name, (*(tr_op_def *const *)b)->name);
}

/* Compiles loaded documents, in order, into a manifest: each document's ops, then the
 * compositions across all of them. The documents stay the caller's. */
static tr_status *load_docs(tr_yaml_doc *const *docs, size_t n_docs, tr_manifest **out) {
  *out = NULL;
  tr_manifest *m = calloc(1, sizeof(*m));
  if (m == NULL) return OOM("manifest");
  tr_status *status = NULL;
  for (size_t i = 0; i < n_docs && status == NULL; i++) status = load_doc(m, docs[i]);
  if (status == NULL) status = resolve_compositions(m);
  if (status != NULL) {
    tr_manifest_destroy(&m);
    return status;
  }
  if (m->count > 1) qsort(m->ops, m->count, sizeof(*m->ops), compare_ops);
  *out = m;
  return NULL;
}

tr_status *tr_manifest_load(const char *const *paths, size_t n_paths, tr_manifest **out) {
  *out = NULL;
  tr_yaml_doc **docs = calloc(n_paths + 1, sizeof(*docs));
  if (docs == NULL) return OOM("documents");
  tr_status *status = NULL;
  for (size_t i = 0; i < n_paths && status == NULL; i++) status = tr_yaml_load_file(paths[i], &docs[i]);
  if (status == NULL) status = load_docs(docs, n_paths, out);
  for (size_t i = 0; i < n_paths; i++) tr_yaml_doc_destroy(&docs[i]);
  free(docs);
  return status;
}

tr_status *tr_manifest_load_string(const char *name, const char *text, size_t size,
                                   tr_manifest **out) {
  *out = NULL;
  tr_yaml_doc *doc = NULL;
  TR_RETURN_IF_ERROR(tr_yaml_load_string(name, text, size, &doc));
  tr_status *status = load_docs(&doc, 1, out);
  tr_yaml_doc_destroy(&doc);
  return status;
}

tr_status *tr_manifest_load_dir(const char *dir, tr_manifest **out) {
  *out = NULL;
  char **paths = NULL;
  size_t n = 0;
  TR_RETURN_IF_ERROR(tr_plat_list_files(dir, ".yaml", &paths, &n));
  tr_status *status = tr_manifest_load((const char *const *)paths, n, out);
  tr_plat_free_names(&paths, n);
  return status;
}

/* ---- teardown ---- */

static void free_wire(wire_decl *w) {
  free(w->text);
  free(w->source);
  free(w->like);
}

static void destroy_op(tr_op_def *op) {
  if (op == NULL) return;
  free(op->name);
  free(op->family);
  free(op->ref_api);
  free(op->doc);
  free(op->path);
  for (int i = 0; i < op->n_params; i++) {
    free(op->params[i].name);
    free(op->params[i].type_text);
    tr_value_clear(&op->params[i].def);
  }
  for (int i = 0; i < op->n_vars; i++) {
    free(op->vars[i].name);
    free(op->vars[i].dtype_text);
  }
  for (int i = 0; i < op->n_dims; i++) free(op->dims[i]);
  for (int i = 0; i < op->n_inputs; i++) {
    free(op->inputs[i].name);
    free(op->inputs[i].dtype.text);
    free(op->inputs[i].shape.text);
    free(op->inputs[i].fill_text);
    tr_expr_destroy(&op->inputs[i].fill);
  }
  for (int i = 0; i < op->n_outputs; i++) {
    free(op->outputs[i].name);
    free(op->outputs[i].dtype.text);
    free(op->outputs[i].shape.text);
  }
  for (int i = 0; i < op->n_constraints; i++) tr_expr_destroy(&op->constraints[i].expr);
  free(op->constraints);
  if (op->composition != NULL) {
    composition_decl *c = op->composition;
    for (int s = 0; s < c->n_steps; s++) {
      step_decl *step = &c->steps[s];
      free(step->op_name);
      for (int k = 0; k < step->n_inputs; k++) {
        free(step->input_names[k]);
        free_wire(&step->inputs[k]);
      }
      for (int k = 0; k < step->n_params; k++) {
        free(step->params[k].name);
        tr_value_clear(&step->params[k].literal);
      }
      for (int k = 0; k < step->n_outputs; k++) {
        free(step->output_names[k]);
        free(step->output_to[k]);
      }
      free(step->input_names);
      free(step->inputs);
      free(step->params);
      free(step->output_names);
      free(step->output_to);
    }
    if (c->returns != NULL) {
      for (int o = 0; o < op->n_outputs; o++) free_wire(&c->returns[o]);
    }
    free(c->returns);
    free(c->steps);
    free(c);
  }
  for (int w = 0; w < op->n_workloads; w++) {
    workload_decl *wl = &op->workloads[w];
    free(wl->label);
    for (int p = 0; p < wl->n_params; p++) tr_value_clear(&wl->params[p].value);
    free(wl->params);
  }
  free(op->workloads);
  tr_expr_destroy(&op->flops);
  tr_expr_destroy(&op->bytes);
  free(op);
}

void tr_manifest_destroy(tr_manifest **manifest_p) {
  if (manifest_p == NULL || *manifest_p == NULL) return;
  tr_manifest *m = *manifest_p;
  *manifest_p = NULL;
  for (size_t i = 0; i < m->count; i++) destroy_op(m->ops[i]);
  free(m->ops);
  free(m);
}

/* ---- lookups and accessors ---- */

size_t tr_manifest_op_count(const tr_manifest *m) { return m->count; }

const tr_op_def *tr_manifest_op_at(const tr_manifest *m, size_t i) {
  return i < m->count ? m->ops[i] : NULL;
}

const tr_op_def *tr_manifest_find(const tr_manifest *m, const char *name) {
  for (size_t i = 0; i < m->count; i++) {
    if (strcmp(m->ops[i]->name, name) == 0) return m->ops[i];
  }
  return NULL;
}

/* The public accessors (op_def.h) answer NULL or 0 for a NULL op or an index past the count. */
static int has_param(const tr_op_def *op, size_t i) { return op != NULL && i < (size_t)op->n_params; }
static int has_input(const tr_op_def *op, size_t i) { return op != NULL && i < (size_t)op->n_inputs; }

const char *tr_op_def_name(const tr_op_def *op) { return op ? op->name : NULL; }
const char *tr_op_def_family(const tr_op_def *op) { return op->family; }
const char *tr_op_def_ref_api(const tr_op_def *op) { return op->ref_api; }
const char *tr_op_def_doc(const tr_op_def *op) { return op ? op->doc : NULL; }
const char *tr_op_def_path(const tr_op_def *op) { return op->path; }
int tr_op_def_line(const tr_op_def *op) { return op->line; }
int tr_op_def_is_composite(const tr_op_def *op) { return op != NULL && op->composition != NULL; }

size_t tr_op_def_param_count(const tr_op_def *op) { return op ? (size_t)op->n_params : 0; }
const char *tr_op_def_param_name(const tr_op_def *op, size_t i) { return has_param(op, i) ? op->params[i].name : NULL; }
const char *tr_op_def_param_type(const tr_op_def *op, size_t i) {
  return has_param(op, i) ? op->params[i].type_text : NULL;
}
const tr_value *tr_op_def_param_default(const tr_op_def *op, size_t i) {
  return has_param(op, i) && op->params[i].has_default ? &op->params[i].def : NULL;
}
int tr_op_def_param_index(const tr_op_def *op, const char *name) {
  return param_named(op, name, strlen(name));
}

size_t tr_op_def_input_count(const tr_op_def *op) { return op ? (size_t)op->n_inputs : 0; }
const char *tr_op_def_input_name(const tr_op_def *op, size_t i) { return has_input(op, i) ? op->inputs[i].name : NULL; }
int tr_op_def_input_optional(const tr_op_def *op, size_t i) { return has_input(op, i) && op->inputs[i].optional; }
int tr_op_def_input_mutated(const tr_op_def *op, size_t i) { return has_input(op, i) && op->inputs[i].mutated; }
int tr_op_def_input_contiguous(const tr_op_def *op, size_t i) { return op->inputs[i].contiguous; }
int tr_op_def_input_device_cpu(const tr_op_def *op, size_t i) { return op->inputs[i].device_cpu; }
const char *tr_op_def_input_dtype_text(const tr_op_def *op, size_t i) { return op->inputs[i].dtype.text; }
const char *tr_op_def_input_shape_text(const tr_op_def *op, size_t i) { return op->inputs[i].shape.text; }

size_t tr_op_def_output_count(const tr_op_def *op) { return op ? (size_t)op->n_outputs : 0; }
const char *tr_op_def_output_name(const tr_op_def *op, size_t i) {
  return op != NULL && i < (size_t)op->n_outputs ? op->outputs[i].name : NULL;
}
const char *tr_op_def_output_dtype_text(const tr_op_def *op, size_t i) { return op->outputs[i].dtype.text; }
const char *tr_op_def_output_shape_text(const tr_op_def *op, size_t i) { return op->outputs[i].shape.text; }
