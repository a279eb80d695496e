/* expr.c: a precedence-climbing parser into a flat node array, and its evaluator. */
#include "manifest/expr.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum node_op {
  N_NUM,
  N_NAME,
  N_CALL,
  N_NEG,
  N_NOT,
  N_ADD,
  N_SUB,
  N_MUL,
  N_DIV,
  N_FLOORDIV,
  N_MOD,
  N_POW,
  N_EQ,
  N_NE,
  N_LT,
  N_LE,
  N_GT,
  N_GE,
  N_AND,
  N_OR,
} node_op;

typedef struct node {
  uint8_t op;
  uint8_t fn;      /* N_CALL */
  int32_t a, b;    /* children, -1 when absent */
  tr_expr_num num; /* N_NUM */
  tr_expr_ref ref; /* N_NAME, and N_CALL on a name */
  uint16_t name_at, name_len; /* where the name stands in the text */
} node;

struct tr_expr {
  char *text;
  node *nodes;
  int32_t count;
  int32_t root;
};

typedef struct parser {
  const char *text;
  size_t pos;
  node *nodes;
  int32_t count, capacity;
  tr_expr_resolve_fn resolve;
  void *ctx;
  tr_status *error;
  int depth; /* nesting of parentheses, unary operators and 'not', bounded */
} parser;

#define MAX_DEPTH 64

static const struct {
  const char *name;
  tr_expr_fn fn;
  int args;    /* 1 or 2 */
  int run;     /* the argument is a run (prod, len) */
  int tensor;  /* the argument is a tensor (numel, rank, bytes) */
} kFunctions[] = {
    {"prod", TR_EXPR_FN_PROD, 1, 1, 0},   {"len", TR_EXPR_FN_LEN, 1, 1, 0},
    {"numel", TR_EXPR_FN_NUMEL, 1, 0, 1}, {"rank", TR_EXPR_FN_RANK, 1, 0, 1},
    {"bytes", TR_EXPR_FN_BYTES, 1, 0, 1}, {"min", TR_EXPR_FN_MIN, 2, 0, 0},
    {"max", TR_EXPR_FN_MAX, 2, 0, 0},
};
#define FUNCTION_COUNT (sizeof(kFunctions) / sizeof(kFunctions[0]))

static void fail(parser *p, size_t at, const char *what) {
  if (p->error != NULL) return;
  p->error = TR_STATUS(TR_MANIFEST, "expression '%s': %s at column %zu", p->text, what, at + 1);
}

static void skip_space(parser *p) {
  while (p->text[p->pos] == ' ' || p->text[p->pos] == '\t') p->pos++;
}

static int32_t add_node(parser *p, node_op op, int32_t a, int32_t b) {
  if (p->error != NULL) return -1;
  if (p->count == p->capacity) {
    int32_t capacity = p->capacity ? p->capacity * 2 : 16;
    node *nodes = realloc(p->nodes, (size_t)capacity * sizeof(node));
    if (nodes == NULL) {
      p->error = TR_STATUS(TR_OUT_OF_MEMORY, "compiling expression '%s'", p->text);
      return -1;
    }
    p->nodes = nodes;
    p->capacity = capacity;
  }
  node *n = &p->nodes[p->count];
  memset(n, 0, sizeof(*n));
  n->op = (uint8_t)op;
  n->a = a;
  n->b = b;
  return p->count++;
}

/* Matches a keyword or operator at the cursor (after spaces); keywords must end a word. */
static int accept(parser *p, const char *token) {
  skip_space(p);
  size_t len = strlen(token);
  if (strncmp(p->text + p->pos, token, len) != 0) return 0;
  if (isalpha((unsigned char)token[0])) {
    char next = p->text[p->pos + len];
    if (isalnum((unsigned char)next) || next == '_') return 0;
  }
  p->pos += len;
  return 1;
}

static int32_t parse_or(parser *p);
static int enter(parser *p);

static int32_t parse_atom(parser *p) {
  skip_space(p);
  size_t at = p->pos;
  char c = p->text[at];
  if (c == '(') {
    p->pos++;
    if (!enter(p)) return -1;
    int32_t inner = parse_or(p);
    p->depth--;
    if (!accept(p, ")")) fail(p, p->pos, "expected ')'");
    return inner;
  }
  if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)p->text[at + 1]))) {
    char *end = NULL;
    tr_expr_num value = tr_expr_float(strtod(p->text + at, &end));
    const char *digits = p->text + at;
    int base = (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) ? 16 : 10;
    const char *q = digits + (base == 16 ? 2 : 0);
    while (q < end && (base == 16 ? isxdigit((unsigned char)*q) : isdigit((unsigned char)*q))) q++;
    if (q == end) { /* an integer literal: exact where int64 holds it */
      char *iend = NULL;
      errno = 0;
      long long i = strtoll(digits, &iend, base);
      if (errno == 0 && iend == end) value = tr_expr_int((int64_t)i);
    }
    p->pos = (size_t)(end - p->text);
    int32_t n = add_node(p, N_NUM, -1, -1);
    if (n >= 0) p->nodes[n].num = value;
    return n;
  }
  if (isalpha((unsigned char)c) || c == '_') {
    size_t end = at;
    while (isalnum((unsigned char)p->text[end]) || p->text[end] == '_') end++;
    size_t len = end - at;
    p->pos = end;
    skip_space(p);
    if (p->text[p->pos] == '(') {
      size_t f = 0;
      while (f < FUNCTION_COUNT &&
             !(strlen(kFunctions[f].name) == len && strncmp(kFunctions[f].name, p->text + at, len) == 0)) {
        f++;
      }
      if (f == FUNCTION_COUNT) {
        fail(p, at, "unknown function (functions: prod, len, numel, rank, bytes, min, max)");
        return -1;
      }
      p->pos++;
      int32_t n;
      if (kFunctions[f].args == 2) {
        int32_t a = parse_or(p);
        if (!accept(p, ",")) fail(p, p->pos, "expected ',' between two arguments");
        int32_t b = parse_or(p);
        n = add_node(p, N_CALL, a, b);
      } else {
        skip_space(p);
        size_t arg_at = p->pos, arg_end = arg_at;
        while (isalnum((unsigned char)p->text[arg_end]) || p->text[arg_end] == '_') arg_end++;
        if (arg_end == arg_at || isdigit((unsigned char)p->text[arg_at])) {
          fail(p, arg_at, kFunctions[f].tensor ? "expected a tensor name" : "expected a run name");
          return -1;
        }
        p->pos = arg_end;
        n = add_node(p, N_CALL, -1, -1);
        if (n >= 0) {
          p->nodes[n].name_at = (uint16_t)arg_at;
          p->nodes[n].name_len = (uint16_t)(arg_end - arg_at);
          if (!p->resolve(p->ctx, p->text + arg_at, arg_end - arg_at, kFunctions[f].run,
                          kFunctions[f].tensor, &p->nodes[n].ref)) {
            fail(p, arg_at, kFunctions[f].tensor ? "unknown tensor" : "unknown run");
          }
        }
      }
      if (n >= 0) p->nodes[n].fn = (uint8_t)kFunctions[f].fn;
      if (!accept(p, ")")) fail(p, p->pos, "expected ')'");
      return n;
    }
    int32_t n = add_node(p, N_NAME, -1, -1);
    if (n >= 0) {
      p->nodes[n].name_at = (uint16_t)at;
      p->nodes[n].name_len = (uint16_t)len;
      if (!p->resolve(p->ctx, p->text + at, len, 0, 0, &p->nodes[n].ref)) {
        char what[128];
        snprintf(what, sizeof(what), "unknown name '%.*s%s'", len > 64 ? 64 : (int)len, p->text + at,
                 len > 64 ? "..." : "");
        fail(p, at, what);
      }
    }
    return n;
  }
  fail(p, at, c == '\0' ? "expected a value, found the end" : "expected a value");
  return -1;
}

static int32_t parse_unary(parser *p);

static int32_t parse_power(parser *p) {
  int32_t base = parse_atom(p);
  if (accept(p, "**")) return add_node(p, N_POW, base, parse_unary(p));
  return base;
}

static int enter(parser *p) {
  if (++p->depth <= MAX_DEPTH) return 1;
  fail(p, p->pos, "nested too deeply (more than 64 levels)");
  return 0;
}

static int32_t parse_unary(parser *p) {
  int32_t result = -1;
  if (!enter(p)) return -1;
  if (accept(p, "-")) result = add_node(p, N_NEG, parse_unary(p), -1);
  else if (accept(p, "+")) result = parse_unary(p);
  else result = parse_power(p);
  p->depth--;
  return result;
}

static int32_t parse_term(parser *p) {
  int32_t left = parse_unary(p);
  for (;;) {
    if (accept(p, "**")) { /* only reached after a complete power: not an operator here */
      fail(p, p->pos - 2, "unexpected '**'");
      return -1;
    }
    node_op op;
    if (accept(p, "//")) op = N_FLOORDIV;
    else if (accept(p, "*")) op = N_MUL;
    else if (accept(p, "/")) op = N_DIV;
    else if (accept(p, "%")) op = N_MOD;
    else return left;
    left = add_node(p, op, left, parse_unary(p));
  }
}

static int32_t parse_sum(parser *p) {
  int32_t left = parse_term(p);
  for (;;) {
    node_op op;
    if (accept(p, "+")) op = N_ADD;
    else if (accept(p, "-")) op = N_SUB;
    else return left;
    left = add_node(p, op, left, parse_term(p));
  }
}

static int accept_comparison(parser *p, node_op *op) {
  if (accept(p, "==")) *op = N_EQ;
  else if (accept(p, "!=")) *op = N_NE;
  else if (accept(p, "<=")) *op = N_LE;
  else if (accept(p, ">=")) *op = N_GE;
  else if (accept(p, "<")) *op = N_LT;
  else if (accept(p, ">")) *op = N_GT;
  else return 0;
  return 1;
}

/* a < b < c is (a < b) and (b < c), as in Python. */
static int32_t parse_comparison(parser *p) {
  int32_t left = parse_sum(p);
  int32_t result = -1;
  node_op op;
  while (accept_comparison(p, &op)) {
    int32_t right = parse_sum(p);
    int32_t cmp = add_node(p, op, left, right);
    result = result < 0 ? cmp : add_node(p, N_AND, result, cmp);
    left = right;
  }
  return result < 0 ? left : result;
}

static int32_t parse_not(parser *p) {
  if (!accept(p, "not")) return parse_comparison(p);
  if (!enter(p)) return -1;
  int32_t result = add_node(p, N_NOT, parse_not(p), -1);
  p->depth--;
  return result;
}

static int32_t parse_and(parser *p) {
  int32_t left = parse_not(p);
  while (accept(p, "and")) left = add_node(p, N_AND, left, parse_not(p));
  return left;
}

static int32_t parse_or(parser *p) {
  int32_t left = parse_and(p);
  while (accept(p, "or")) left = add_node(p, N_OR, left, parse_and(p));
  return left;
}

tr_status *tr_expr_compile(const char *text, tr_expr_resolve_fn resolve, void *ctx,
                           tr_expr **out) {
  *out = NULL;
  if (text == NULL) return TR_STATUS(TR_MANIFEST, "expression is NULL");
  size_t len = strlen(text);
  if (len > 4000) {
    return TR_STATUS(TR_MANIFEST, "expression '%.40s...' is %zu characters long, at most 4000",
                     text, len);
  }
  parser p = {text, 0, NULL, 0, 0, resolve, ctx, NULL, 0};
  int32_t root = parse_or(&p);
  skip_space(&p);
  if (p.error == NULL && text[p.pos] != '\0') fail(&p, p.pos, "unexpected text");
  tr_expr *expr = p.error ? NULL : malloc(sizeof(*expr));
  char *copy = expr ? malloc(len + 1) : NULL;
  if (p.error == NULL && copy == NULL) {
    p.error = TR_STATUS(TR_OUT_OF_MEMORY, "compiling expression '%s'", text);
  }
  if (p.error != NULL) {
    free(p.nodes);
    free(expr);
    return p.error;
  }
  memcpy(copy, text, len + 1);
  expr->text = copy;
  expr->nodes = p.nodes;
  expr->count = p.count;
  expr->root = root;
  *out = expr;
  return NULL;
}

/* Evaluation: recursive over the node array; depth is bounded by the text length. Python's
 * arithmetic on integers and floats (tr_expr_num). */
static tr_status *eval_node(const tr_expr *expr, int32_t i, const tr_expr_env *env, tr_expr_num *out);

static tr_status *unavailable(const tr_expr *expr, const node *n) {
  return TR_STATUS(TR_VALUE, "expression '%s': no value for '%.*s'", expr->text, (int)n->name_len,
                   expr->text + n->name_at);
}

/* -1, 0 or 1 as an integer compares with a float, exactly (Python compares them so); 2 when f is
 * NaN (unordered). */
static int compare_int_float(int64_t i, double f) {
  if (isnan(f)) return 2;
  if (f >= 9223372036854775808.0) return -1; /* 2^63: above every int64 */
  if (f < -9223372036854775808.0) return 1;
  double whole = floor(f);
  int64_t w = (int64_t)whole; /* in range: -2^63 <= whole < 2^63 */
  if (i != w) return i < w ? -1 : 1;
  return whole == f ? 0 : -1; /* i == floor(f) < f when f has a fraction */
}

/* -1, 0, 1, or 2 when unordered (a NaN) */
static int compare(tr_expr_num a, tr_expr_num b) {
  if (a.is_int && b.is_int) return a.i < b.i ? -1 : a.i > b.i;
  if (a.is_int) return compare_int_float(a.i, b.f);
  if (b.is_int) {
    int c = compare_int_float(b.i, a.f);
    return c == 2 ? 2 : -c;
  }
  if (isnan(a.f) || isnan(b.f)) return 2;
  return a.f < b.f ? -1 : a.f > b.f;
}

/* Python's floor division and modulo of integers (b != 0); 0 when the quotient overflows. */
static int int_floordiv(int64_t a, int64_t b, int64_t *q, int64_t *r) {
  if (a == INT64_MIN && b == -1) return 0;
  int64_t qq = a / b, rr = a % b;
  if (rr != 0 && ((rr < 0) != (b < 0))) {
    qq -= 1;
    rr += b;
  }
  *q = qq;
  *r = rr;
  return 1;
}

/* a ** b for integers, b >= 0; 0 on overflow. */
static int int_pow(int64_t a, int64_t b, int64_t *out) {
  int64_t result = 1, base = a;
  while (b > 0) {
    if ((b & 1) && __builtin_mul_overflow(result, base, &result)) return 0;
    b >>= 1;
    if (b > 0 && __builtin_mul_overflow(base, base, &base)) return 0;
  }
  *out = result;
  return 1;
}

static tr_status *arith(const tr_expr *expr, node_op op, tr_expr_num a, tr_expr_num b, tr_expr_num *out) {
  const int ints = a.is_int && b.is_int;
  const double x = tr_expr_num_double(a), y = tr_expr_num_double(b);
  int64_t r = 0, rem = 0;
  switch (op) {
    case N_ADD: *out = ints && !__builtin_add_overflow(a.i, b.i, &r) ? tr_expr_int(r) : tr_expr_float(x + y); return NULL;
    case N_SUB: *out = ints && !__builtin_sub_overflow(a.i, b.i, &r) ? tr_expr_int(r) : tr_expr_float(x - y); return NULL;
    case N_MUL: *out = ints && !__builtin_mul_overflow(a.i, b.i, &r) ? tr_expr_int(r) : tr_expr_float(x * y); return NULL;
    case N_POW:
      if (x == 0 && y < 0) {
        return TR_STATUS(TR_VALUE, "expression '%s': zero to a negative power", expr->text);
      }
      *out = ints && b.i >= 0 && int_pow(a.i, b.i, &r) ? tr_expr_int(r) : tr_expr_float(pow(x, y));
      return NULL;
    case N_DIV:
    case N_FLOORDIV:
    case N_MOD:
      if (y == 0) return TR_STATUS(TR_VALUE, "expression '%s': division by zero", expr->text);
      if (op == N_DIV) {
        *out = tr_expr_float(x / y);
      } else if (ints && int_floordiv(a.i, b.i, &r, &rem)) {
        *out = tr_expr_int(op == N_FLOORDIV ? r : rem);
      } else {
        double q = floor(x / y);
        *out = tr_expr_float(op == N_FLOORDIV ? q : x - y * q); /* the modulo takes the divisor's sign */
      }
      return NULL;
    default: break;
  }
  int c = compare(a, b);
  int holds;
  switch (op) {
    case N_EQ: holds = c == 0; break;
    case N_NE: holds = c != 0; break;
    case N_LT: holds = c == -1; break;
    case N_LE: holds = c == -1 || c == 0; break;
    case N_GT: holds = c == 1; break;
    case N_GE: holds = c == 1 || c == 0; break;
    default: return TR_STATUS(TR_INTERNAL, "expression '%s': bad node %d", expr->text, op);
  }
  *out = tr_expr_int(holds);
  return NULL;
}

static tr_status *eval_node(const tr_expr *expr, int32_t i, const tr_expr_env *env, tr_expr_num *out) {
  const node *n = &expr->nodes[i];
  tr_expr_num a = tr_expr_int(0), b = tr_expr_int(0);
  switch ((node_op)n->op) {
    case N_NUM: *out = n->num; return NULL;
    case N_NAME:
      return env->value(env->ctx, n->ref, out) ? NULL : unavailable(expr, n);
    case N_CALL:
      if (n->fn == TR_EXPR_FN_MIN || n->fn == TR_EXPR_FN_MAX) {
        TR_RETURN_IF_ERROR(eval_node(expr, n->a, env, &a));
        TR_RETURN_IF_ERROR(eval_node(expr, n->b, env, &b));
        /* Python's min and max keep the first of equals and of unordered pairs */
        int c = compare(b, a);
        *out = (n->fn == TR_EXPR_FN_MIN ? c == -1 : c == 1) ? b : a;
        return NULL;
      }
      return env->call(env->ctx, (tr_expr_fn)n->fn, n->ref, out) ? NULL : unavailable(expr, n);
    case N_AND:
      TR_RETURN_IF_ERROR(eval_node(expr, n->a, env, &a));
      if (!tr_expr_num_truthy(a)) { *out = tr_expr_int(0); return NULL; }
      TR_RETURN_IF_ERROR(eval_node(expr, n->b, env, &b));
      *out = tr_expr_int(tr_expr_num_truthy(b));
      return NULL;
    case N_OR:
      TR_RETURN_IF_ERROR(eval_node(expr, n->a, env, &a));
      if (tr_expr_num_truthy(a)) { *out = tr_expr_int(1); return NULL; }
      TR_RETURN_IF_ERROR(eval_node(expr, n->b, env, &b));
      *out = tr_expr_int(tr_expr_num_truthy(b));
      return NULL;
    default: break;
  }
  TR_RETURN_IF_ERROR(eval_node(expr, n->a, env, &a));
  if (n->op == N_NEG) {
    *out = a.is_int && a.i != INT64_MIN ? tr_expr_int(-a.i) : tr_expr_float(-tr_expr_num_double(a));
    return NULL;
  }
  if (n->op == N_NOT) {
    *out = tr_expr_int(!tr_expr_num_truthy(a));
    return NULL;
  }
  TR_RETURN_IF_ERROR(eval_node(expr, n->b, env, &b));
  return arith(expr, (node_op)n->op, a, b, out);
}

tr_status *tr_expr_eval(const tr_expr *expr, const tr_expr_env *env, tr_expr_num *out) {
  return eval_node(expr, expr->root, env, out);
}

const char *tr_expr_text(const tr_expr *expr) { return expr->text; }

void tr_expr_visit_refs(const tr_expr *expr,
                        void (*fn)(void *ctx, int function, tr_expr_ref ref, const char *name),
                        void *ctx) {
  for (int32_t i = 0; i < expr->count; i++) {
    const node *n = &expr->nodes[i];
    int is_ref = n->op == N_NAME || (n->op == N_CALL && n->a < 0);
    if (!is_ref) continue;
    int function = n->op == N_NAME ? -1 : n->fn;
    int seen = 0;
    for (int32_t j = 0; j < i && !seen; j++) {
      const node *m = &expr->nodes[j];
      int m_function = m->op == N_NAME ? -1 : m->fn;
      seen = (m->op == N_NAME || (m->op == N_CALL && m->a < 0)) && m_function == function &&
             m->ref.kind == n->ref.kind && m->ref.index == n->ref.index;
    }
    if (seen) continue;
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)n->name_len, expr->text + n->name_at);
    fn(ctx, function, n->ref, name);
  }
}

void tr_expr_destroy(tr_expr **expr_p) {
  if (expr_p == NULL || *expr_p == NULL) return;
  tr_expr *expr = *expr_p;
  *expr_p = NULL;
  free(expr->nodes);
  free(expr->text);
  free(expr);
}
