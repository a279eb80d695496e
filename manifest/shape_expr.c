/* shape_expr.c: a hand-written scanner for shape expressions; fixed-size output, no allocation. */
#include "manifest/shape_expr.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct scan {
  const char *text;
  size_t pos;
} scan;

static void skip_space(scan *s) {
  while (s->text[s->pos] == ' ' || s->text[s->pos] == '\t') s->pos++;
}

static tr_status *fail(const scan *s, size_t at, const char *what) {
  return TR_STATUS(TR_MANIFEST, "shape '%s': %s at column %zu", s->text, what, at + 1);
}

/* A name: [A-Za-z_][A-Za-z0-9_]*, at most TR_SHAPE_NAME_MAX characters. */
static tr_status *scan_name(scan *s, char *out) {
  size_t at = s->pos;
  if (!(isalpha((unsigned char)s->text[at]) || s->text[at] == '_')) {
    return fail(s, at, "expected a name");
  }
  size_t end = at;
  while (isalnum((unsigned char)s->text[end]) || s->text[end] == '_') end++;
  if (end - at > TR_SHAPE_NAME_MAX) return fail(s, at, "name longer than 63 characters");
  memcpy(out, s->text + at, end - at);
  out[end - at] = '\0';
  s->pos = end;
  return NULL;
}

static tr_status *scan_list(scan *s, int allow_minus_one, tr_shape_list *out) {
  memset(out, 0, sizeof(*out));
  skip_space(s);
  if (s->text[s->pos] != '[') return fail(s, s->pos, "expected '['");
  s->pos++;
  skip_space(s);
  if (s->text[s->pos] == ']') {
    s->pos++;
    return NULL;
  }
  for (;;) {
    skip_space(s);
    if (out->count == TR_SHAPE_ITEMS_MAX) return fail(s, s->pos, "more than 16 items");
    tr_shape_item *item = &out->items[out->count];
    size_t at = s->pos;
    char c = s->text[at];
    if (c == '*') {
      s->pos++;
      item->star = 1;
      TR_RETURN_IF_ERROR(scan_name(s, item->name));
    } else if (isdigit((unsigned char)c) || c == '-') {
      char *end = NULL;
      errno = 0;
      long long value = strtoll(s->text + at, &end, 10);
      if (end == s->text + at || errno == ERANGE) return fail(s, at, "expected an integer");
      if (value < 0 && !(allow_minus_one && value == -1)) {
        return fail(s, at, "a dim cannot be negative");
      }
      item->is_literal = 1;
      item->literal = value;
      s->pos = (size_t)(end - s->text);
    } else {
      TR_RETURN_IF_ERROR(scan_name(s, item->name));
    }
    out->count++;
    skip_space(s);
    if (s->text[s->pos] == ',') {
      s->pos++;
      continue;
    }
    if (s->text[s->pos] == ']') {
      s->pos++;
      return NULL;
    }
    return fail(s, s->pos, s->text[s->pos] ? "expected ',' or ']'" : "expected ']', found the end");
  }
}

tr_status *tr_shape_expr_parse(const char *text, int allow_minus_one, tr_shape_expr *out) {
  memset(out, 0, sizeof(*out));
  if (text == NULL) return TR_STATUS(TR_MANIFEST, "shape expression is NULL");
  scan s = {text, 0};
  skip_space(&s);
  if (text[s.pos] != '[') {
    out->has_cond = 1;
    TR_RETURN_IF_ERROR(scan_name(&s, out->cond));
    skip_space(&s);
    if (text[s.pos] != '?') return fail(&s, s.pos, "expected '[' or 'name ? [...] : [...]'");
    s.pos++;
    TR_RETURN_IF_ERROR(scan_list(&s, allow_minus_one, &out->then_list));
    skip_space(&s);
    if (text[s.pos] != ':') return fail(&s, s.pos, "expected ':'");
    s.pos++;
    TR_RETURN_IF_ERROR(scan_list(&s, allow_minus_one, &out->else_list));
  } else {
    TR_RETURN_IF_ERROR(scan_list(&s, allow_minus_one, &out->then_list));
  }
  skip_space(&s);
  if (text[s.pos] != '\0') return fail(&s, s.pos, "unexpected text after the shape");
  return NULL;
}
