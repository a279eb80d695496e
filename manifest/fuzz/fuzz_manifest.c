/* fuzz_manifest.c: libFuzzer target for the manifest's YAML loader, shape parser and expressions. */
/* The first byte of an input picks what the rest is fed to:
 *   's'  a shape expression (tr_shape_expr_parse, with and without -1 allowed);
 *   'e'  an expression (tr_expr_compile over single-letter names, then tr_expr_eval);
 *   else a spec file (tr_manifest_load_string; on success tr_manifest_lint, which binds, checks
 *        and evaluates the rooflines of every workload row).
 * Built with clang -fsanitize=fuzzer,address,undefined; see BUILD. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/expr.h"
#include "manifest/lint.h"
#include "manifest/manifest.h"
#include "manifest/shape_expr.h"
#include "tilerun/status.h"

/* Names are single lowercase letters; the kind says where the name stood. */
enum { REF_PLAIN = 0, REF_RUN = 1, REF_TENSOR = 2 };

static int resolve_letter(void *ctx, const char *name, size_t len, int as_run, int as_tensor,
                          tr_expr_ref *out) {
  (void)ctx;
  if (len != 1 || name[0] < 'a' || name[0] > 'z') return 0;
  out->kind = (uint16_t)(as_run ? REF_RUN : as_tensor ? REF_TENSOR : REF_PLAIN);
  out->index = (uint16_t)(name[0] - 'a');
  return 1;
}

/* 'z' is 0 (divisions by it fail), 'u' has no value (evaluation fails naming it), 'm' is int64's
 * least (its negation and floor division by -1 overflow), 'f' the float 0.5, the others their
 * position in the alphabet. */
static int value_of(void *ctx, tr_expr_ref ref, tr_expr_num *out) {
  (void)ctx;
  if (ref.index == 'u' - 'a') return 0;
  if (ref.index == 'm' - 'a') *out = tr_expr_int(INT64_MIN);
  else if (ref.index == 'f' - 'a') *out = tr_expr_float(0.5);
  else *out = tr_expr_int(ref.index == 'z' - 'a' ? 0 : ref.index + 1);
  return 1;
}

static int call_of(void *ctx, tr_expr_fn fn, tr_expr_ref ref, tr_expr_num *out) {
  (void)ctx;
  if (ref.index == 'u' - 'a') return 0;
  *out = tr_expr_int(((int64_t)fn + 1) * (ref.index + 1));
  return 1;
}

static void count_ref(void *ctx, int function, tr_expr_ref ref, const char *name) {
  (void)function;
  (void)ref;
  *(size_t *)ctx += strlen(name);
}

static void ignore(tr_status *status) { tr_status_destroy(&status); }

static void fuzz_shape(const char *text) {
  tr_shape_expr expr;
  ignore(tr_shape_expr_parse(text, 0, &expr));
  ignore(tr_shape_expr_parse(text, 1, &expr));
}

static void fuzz_expr(const char *text) {
  tr_expr *expr = NULL;
  tr_status *status = tr_expr_compile(text, resolve_letter, NULL, &expr);
  if (status != NULL) {
    tr_status_destroy(&status);
    return;
  }
  tr_expr_env env = {NULL, value_of, call_of};
  tr_expr_num value = tr_expr_int(0);
  ignore(tr_expr_eval(expr, &env, &value));
  size_t names = 0;
  tr_expr_visit_refs(expr, count_ref, &names);
  if (strcmp(tr_expr_text(expr), text) != 0) abort();
  tr_expr_destroy(&expr);
}

static void fuzz_manifest(const char *text, size_t size) {
  tr_manifest *m = NULL;
  tr_status *status = tr_manifest_load_string("fuzz.yaml", text, size, &m);
  if (status != NULL) {
    tr_status_destroy(&status);
    return;
  }
  tr_lint_report report = {0, NULL};
  ignore(tr_manifest_lint(m, &report));
  tr_lint_report_clear(&report);
  tr_manifest_destroy(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const char *rest = (const char *)data + 1;
  size_t n = size - 1;
  if (data[0] != 's' && data[0] != 'e') {
    /* The YAML text is read by length, in the fuzzer's own buffer, so ASan sees any over-read. */
    fuzz_manifest(rest, n);
    return 0;
  }
  /* The shape and expression parsers read NUL-terminated text: an exact-size copy. */
  char *text = malloc(n + 1);
  if (text == NULL) return 0;
  memcpy(text, rest, n);
  text[n] = '\0';
  if (data[0] == 's') fuzz_shape(text);
  else fuzz_expr(text);
  free(text);
  return 0;
}
