/* shape_expr.h: the parser of shape expressions: "[*B, *normalized_shape]", "[M, K]", "[]",
 * "[3]", "trans_a ? [K, M] : [M, K]". Names stay names here; the signature compiler resolves
 * them to dims, Shape variables and params. */
#ifndef TILERUN_MANIFEST_SHAPE_EXPR_H_
#define TILERUN_MANIFEST_SHAPE_EXPR_H_

#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_SHAPE_NAME_MAX 63
#define TR_SHAPE_ITEMS_MAX 16

typedef struct tr_shape_item {
  uint8_t star;       /* *Name: a run */
  uint8_t is_literal; /* an integer literal (then `literal` holds it) */
  int64_t literal;
  char name[TR_SHAPE_NAME_MAX + 1];
} tr_shape_item;

typedef struct tr_shape_list {
  int32_t count;
  tr_shape_item items[TR_SHAPE_ITEMS_MAX];
} tr_shape_list;

typedef struct tr_shape_expr {
  int32_t has_cond;                       /* "cond ? [..] : [..]" */
  char cond[TR_SHAPE_NAME_MAX + 1];       /* the bool param's name */
  tr_shape_list then_list;                /* the shape, or the one chosen when cond is true */
  tr_shape_list else_list;
} tr_shape_expr;

/* Parses a shape expression. `allow_minus_one` admits the literal -1 (wiring views only). A
 * malformed expression is a ManifestError "shape '<text>': <what> at column <c>" (1-based);
 * *out is then unspecified. Allocates nothing. Thread-safe. */
tr_status *tr_shape_expr_parse(const char *text, int allow_minus_one,
                               tr_shape_expr *out) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_SHAPE_EXPR_H_ */
