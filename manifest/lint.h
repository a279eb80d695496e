/* lint.h: `tilerun manifest check`: the rules a manifest must keep beyond loading. */
#ifndef TILERUN_MANIFEST_LINT_H_
#define TILERUN_MANIFEST_LINT_H_

#include <stddef.h>

#include "manifest/manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A list of problems, each one line "file:line: Op: what is wrong" (an op's own), or
 * "file:line:column: Op: workload 'label': what is wrong" (one of its workload rows). */
typedef struct tr_lint_report {
  size_t count;
  char **problems;
} tr_lint_report;

/* Checks every op: it has workload rows and a roofline; every forall variable is used; every
 * workload row is a legal call (params bound, specs checked); the roofline evaluates to finite,
 * non-negative numbers on every row; a composite op's composition checks on every row. Problems
 * are collected, never stopping at the first. Fails only on OutOfMemoryError. */
tr_status *tr_manifest_lint(const tr_manifest *manifest, tr_lint_report *out) TR_MUST_USE;

void tr_lint_report_clear(tr_lint_report *report);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_LINT_H_ */
