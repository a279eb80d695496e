/* lint.c: the manifest's own checks: workloads are legal calls, rooflines evaluate, compositions
 * wire up, type variables are used. */
#include "manifest/lint.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/compose.h"
#include "manifest/internal.h"

static tr_status *add(tr_lint_report *r, const char *fmt, ...) TR_PRINTF(2, 3);
static tr_status *add(tr_lint_report *r, const char *fmt, ...) {
  char text[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  char **grown = realloc(r->problems, (r->count + 1) * sizeof(char *));
  if (grown == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "collecting lint problems");
  r->problems = grown;
  size_t n = strlen(text) + 1;
  if ((r->problems[r->count] = malloc(n)) == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "collecting lint problems");
  memcpy(r->problems[r->count++], text, n);
  return NULL;
}

/* Adds a failed status as a problem of a workload row, and frees it. */
static tr_status *row_problem(tr_lint_report *r, const tr_op_def *op, int row, tr_status *why) {
  const workload_decl *w = &op->workloads[row];
  char where[512]; /* a message that names the row already (tr_op_def_workload's) is not named twice */
  int n = snprintf(where, sizeof(where), "%s:%d:%d: %s: workload '%s'", op->path, w->line, w->column, op->name,
                   w->label);
  const char *message = tr_status_message(why);
  tr_status *status = n > 0 && (size_t)n < sizeof(where) && strncmp(message, where, (size_t)n) == 0
                          ? add(r, "%s", message)
                          : add(r, "%s: %s", where, message);
  tr_status_destroy(&why);
  return status;
}

static int var_used(const tr_op_def *op, int v) {
  const shape_decl *shapes[TR_SIG_MAX_INPUTS + TR_SIG_MAX_OUTPUTS];
  int n = 0;
  for (int i = 0; i < op->n_inputs; i++) {
    if (op->inputs[i].dtype.kind == DT_VAR && op->inputs[i].dtype.var == v) return 1;
    shapes[n++] = &op->inputs[i].shape;
  }
  for (int i = 0; i < op->n_outputs; i++) {
    if (op->outputs[i].dtype.kind == DT_VAR && op->outputs[i].dtype.var == v) return 1;
    shapes[n++] = &op->outputs[i].shape;
  }
  for (int s = 0; s < n; s++) {
    const shape_pattern *pats[2] = {&shapes[s]->then_pattern, &shapes[s]->else_pattern};
    for (int p = 0; p < 2; p++) {
      for (int32_t k = 0; k < pats[p]->count; k++) {
        if (pats[p]->items[k].kind == IT_SHAPE_VAR && pats[p]->items[k].index == v) return 1;
      }
    }
  }
  return 0;
}

static tr_status *lint_row(tr_lint_report *r, const tr_op_def *op, int row) {
  tr_device cpu;
  TR_RETURN_IF_ERROR(tr_device_make("cpu", TR_DEVICE_NO_INDEX, &cpu));
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS];
  uint8_t has[TR_SIG_MAX_INPUTS];
  tr_named_value given[TR_SIG_MAX_PARAMS];
  size_t n_given = 0;
  tr_status *why = tr_op_def_workload(op, (size_t)row, &cpu, specs, has, given, &n_given);
  if (why != NULL) return row_problem(r, op, row, why);
  for (int i = 0; i < op->n_inputs; i++) ptrs[i] = has[i] ? &specs[i] : NULL;
  tr_value settled[TR_SIG_MAX_PARAMS];
  if ((why = tr_op_def_bind_params(op, given, n_given, settled)) != NULL) return row_problem(r, op, row, why);
  tr_call_check check;
  why = tr_op_def_check(op, settled, ptrs, (size_t)op->n_inputs, &check);
  for (int o = 0; why == NULL && o < op->n_outputs; o++) {
    char what[96], problem[512];
    snprintf(what, sizeof(what), "output '%s'", op->outputs[o].name);
    const tr_tensor_spec *spec = &check.outputs[o];
    if (check.output_present[o] && tr__tensor_too_large(what, spec->rank, spec->shape, &spec->dtype, problem, sizeof(problem))) {
      why = TR_STATUS(TR_MANIFEST, "%s", problem);
    }
  }
  if (why == NULL) why = tr_op_def_check_composition(op, settled, &check);
  double flops = 0, bytes = 0;
  if (why == NULL) why = tr_op_def_roofline(op, settled, &check, &flops, &bytes);
  if (why == NULL && (!isfinite(flops) || !isfinite(bytes) || flops < 0 || bytes < 0)) {
    why = TR_STATUS(TR_MANIFEST, "roofline gives flops %g and bytes %g; both must be finite and "
                    ">= 0", flops, bytes);
  }
  for (int i = 0; why == NULL && i < op->n_inputs; i++) {
    int has = 0;
    int64_t max = 0;
    why = tr_op_def_input_fill(op, (size_t)i, settled, &check, &has, &max);
    if (why == NULL && has && max < 0) {
      why = TR_STATUS(TR_MANIFEST, "input '%s' fill '%s' gives %lld, below 0", op->inputs[i].name,
                      op->inputs[i].fill_text, (long long)max);
    }
  }
  if (why == NULL && op->bytes != NULL && bytes == 0) {
    why = TR_STATUS(TR_MANIFEST, "roofline bytes is 0 for this row");
  }
  tr_op_params_clear(op, settled);
  return why ? row_problem(r, op, row, why) : NULL;
}

tr_status *tr_manifest_lint(const tr_manifest *manifest, tr_lint_report *out) {
  out->count = 0;
  out->problems = NULL;
  tr_status *status = NULL;
  for (size_t i = 0; status == NULL && i < tr_manifest_op_count(manifest); i++) {
    const tr_op_def *op = tr_manifest_op_at(manifest, i);
    if (op->n_workloads == 0) {
      status = add(out, "%s:%d: %s: has no workload rows", op->path, op->line, op->name);
    }
    if (status == NULL && (op->flops == NULL || op->bytes == NULL)) {
      status = add(out, "%s:%d: %s: has no roofline (flops and bytes)", op->path, op->line, op->name);
    }
    for (int v = 0; status == NULL && v < op->n_vars; v++) {
      if (!var_used(op, v)) {
        status = add(out, "%s:%d: %s: type variable '%s' is declared but no tensor uses it",
                     op->path, op->line, op->name, op->vars[v].name);
      }
    }
    for (int row = 0; status == NULL && row < op->n_workloads; row++) status = lint_row(out, op, row);
    for (int row = 1; status == NULL && row < op->n_workloads; row++) { /* a label names one row */
      const workload_decl *w = &op->workloads[row];
      for (int before = 0; status == NULL && before < row; before++) {
        const workload_decl *first = &op->workloads[before];
        if (strcmp(first->label, w->label) != 0) continue;
        status = add(out, "%s:%d:%d: %s: workload '%s' is labelled as the row at line %d already is; a label names "
                     "one row", op->path, w->line, w->column, op->name, w->label, first->line);
        break;
      }
    }
  }
  if (status != NULL) tr_lint_report_clear(out);
  return status;
}

void tr_lint_report_clear(tr_lint_report *report) {
  for (size_t i = 0; i < report->count; i++) free(report->problems[i]);
  free(report->problems);
  report->problems = NULL;
  report->count = 0;
}
