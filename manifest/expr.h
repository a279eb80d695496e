/* expr.h: the small arithmetic language of manifest constraints and rooflines: numbers, names,
 * + - * / // % **, comparisons, and/or/not, parentheses and a few functions. Names are resolved
 * once, when an expression is compiled, so evaluating one does no string work and allocates
 * nothing unless it fails. */
#ifndef TILERUN_MANIFEST_EXPR_H_
#define TILERUN_MANIFEST_EXPR_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The functions an expression may call, each on one argument unless noted. */
typedef enum tr_expr_fn {
  TR_EXPR_FN_PROD,  /* product of a run's dims (a Shape variable or a list param) */
  TR_EXPR_FN_LEN,   /* length of a run */
  TR_EXPR_FN_NUMEL, /* element count of a tensor */
  TR_EXPR_FN_RANK,  /* rank of a tensor */
  TR_EXPR_FN_BYTES, /* numel * element size of a tensor */
  TR_EXPR_FN_MIN,   /* two arguments */
  TR_EXPR_FN_MAX,   /* two arguments */
} tr_expr_fn;

/* What a name stands for, as the resolver decides: a kind of its own choosing (a small
 * integer) and an index. */
typedef struct tr_expr_ref {
  uint16_t kind;
  uint16_t index;
} tr_expr_ref;

/* Resolves a name while compiling: returns 1 and sets *out when the name is known, 0 when not.
 * `as_run` is 1 when the name is the argument of prod/len, `as_tensor` when it is the argument of
 * numel/rank/bytes, so one name can mean different things in those places. */
typedef int (*tr_expr_resolve_fn)(void *ctx, const char *name, size_t len, int as_run,
                                  int as_tensor, tr_expr_ref *out);

/* A value, as Python has two kinds of number: an integer (exact) or a float. Integer arithmetic
 * stays exact; a result past int64 becomes the nearest float (where Python's integers would grow),
 * and `/` gives a float, as in Python. */
typedef struct tr_expr_num {
  int is_int;
  int64_t i; /* is_int */
  double f;  /* otherwise */
} tr_expr_num;

static inline tr_expr_num tr_expr_int(int64_t i) {
  tr_expr_num n = {1, i, 0};
  return n;
}
static inline tr_expr_num tr_expr_float(double f) {
  tr_expr_num n = {0, 0, f};
  return n;
}
/* The value as a double (exact for integers up to 2^53). */
static inline double tr_expr_num_double(tr_expr_num n) { return n.is_int ? (double)n.i : n.f; }
/* Whether the value counts as true (nonzero), as Python's bool() of a number. */
static inline int tr_expr_num_truthy(tr_expr_num n) { return n.is_int ? n.i != 0 : n.f != 0; }

/* Supplies values while evaluating: a plain name's value, or a function of a name's ref. Return
 * 1 on success, 0 when the value is unavailable (then evaluation fails naming the name). */
typedef struct tr_expr_env {
  void *ctx;
  int (*value)(void *ctx, tr_expr_ref ref, tr_expr_num *out);
  int (*call)(void *ctx, tr_expr_fn fn, tr_expr_ref ref, tr_expr_num *out);
} tr_expr_env;

/* A compiled expression. Single owner; evaluating it from several threads at once is safe. */
typedef struct tr_expr tr_expr;

/* Compiles `text`. A syntax error or an unknown name is a ManifestError
 * "expression '<text>': <what> at column <c>" (1-based column; an unknown name is named:
 * "unknown name 'Q' at column 1"); *out is then NULL. */
tr_status *tr_expr_compile(const char *text, tr_expr_resolve_fn resolve, void *ctx,
                           tr_expr **out) TR_MUST_USE;

/* Evaluates with Python's arithmetic on its two kinds of number (tr_expr_num). Comparisons and
 * and/or/not give the integer 1 or 0; an integer and a float compare exactly, as in Python.
 * Division or modulo by zero, zero to a negative power, or a value the env cannot give, is a
 * ValueError naming the expression and the cause. Allocates only on failure. */
tr_status *tr_expr_eval(const tr_expr *expr, const tr_expr_env *env, tr_expr_num *out) TR_MUST_USE;

/* The text the expression was compiled from. */
const char *tr_expr_text(const tr_expr *expr);

/* Calls `fn` once for every distinct ref the expression reads as a plain name or a function
 * argument (with the function, or -1 for a plain name), in order of first appearance; for
 * messages that show the values an expression saw. */
void tr_expr_visit_refs(const tr_expr *expr, void (*fn)(void *ctx, int function,
                                                        tr_expr_ref ref, const char *name),
                        void *ctx);

void tr_expr_destroy(tr_expr **expr_p);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_EXPR_H_ */
