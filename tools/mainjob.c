/* mainjob.c: the main job: workload rows from the manifest run through the runtime on cpu tensors
 * (the CPU backend serves them), timed against each op's roofline. */
#include "tools/mainjob.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/manifest.h"
#include "platform/platform.h"
#include "tilerun/tilerun.h"

/* Exactly representable small values (k/8, |k| <= 16) in each float format's bits, so every
 * dtype gets the same numbers without a conversion library. */
static void fill_float(DLTensor *t, int64_t numel) {
  for (int64_t i = 0; i < numel; i++) {
    float v = (float)((i * 7919) % 33 - 16) / 8.0f;
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if (t->dtype.bits == 8) { /* float8: zeros (exact in both formats) */
      ((uint8_t *)t->data)[i] = 0;
    } else if (t->dtype.bits == 32) {
      ((float *)t->data)[i] = v;
    } else if (t->dtype.bits == 64) {
      ((double *)t->data)[i] = v;
    } else if (t->dtype.code == kDLBfloat) {
      ((uint16_t *)t->data)[i] = (uint16_t)(bits >> 16);
    } else { /* float16: exact for these values */
      uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
      int exp = (int)((bits >> 23) & 0xff);
      ((uint16_t *)t->data)[i] = v == 0 ? sign : (uint16_t)(sign | ((exp - 127 + 15) << 10) | ((bits >> 13) & 0x3ff));
    }
  }
}

static void fill_int(DLTensor *t, int64_t numel, int64_t max) {
  for (int64_t i = 0; i < numel; i++) {
    int64_t v = max > 0 ? max - (i * 7919) % (max / 4 + 1) : 0; /* near the top: long sequences */
    if (t->dtype.bits == 32) ((int32_t *)t->data)[i] = (int32_t)v;
    else if (t->dtype.bits == 64) ((int64_t *)t->data)[i] = v;
    else ((uint8_t *)t->data)[i] = (uint8_t)v;
  }
}

typedef struct row_run {
  const tr_op_def *def;
  size_t row;
  double bytes, flops;
} row_run;

/* Roofline of one row, on cpu. */
static tr_status *row_roofline(const tr_op_def *def, size_t row, double *bytes, double *flops) {
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS];
  uint8_t has[TR_SIG_MAX_INPUTS];
  tr_named_value params[TR_SIG_MAX_PARAMS];
  size_t n_params = 0;
  TR_RETURN_IF_ERROR(tr_op_def_workload(def, row, &cpu, specs, has, params, &n_params));
  size_t n = tr_op_def_input_count(def);
  for (size_t i = 0; i < n; i++) ptrs[i] = has[i] ? &specs[i] : NULL;
  tr_value settled[TR_SIG_MAX_PARAMS];
  TR_RETURN_IF_ERROR(tr_op_def_bind_params(def, params, n_params, settled));
  tr_call_check check;
  tr_status *status = tr_op_def_check(def, settled, ptrs, n, &check);
  if (status == NULL) status = tr_op_def_roofline(def, settled, &check, flops, bytes);
  tr_op_params_clear(def, settled);
  return status;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Runs one row; prints its line. Returns 0 on success. */
static int run_row(tr_runtime *rt, const row_run *r, FILE *out) {
  const tr_op_def *def = r->def;
  size_t n = tr_op_def_input_count(def);
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS];
  uint8_t has[TR_SIG_MAX_INPUTS];
  tr_named_value params[TR_SIG_MAX_PARAMS];
  size_t n_params = 0;
  DLTensor tensors[TR_SIG_MAX_INPUTS];
  const DLTensor *inputs[TR_SIG_MAX_INPUTS] = {0};
  void *buffers[TR_SIG_MAX_INPUTS] = {0};
  DLManagedTensor *outputs[TR_SIG_MAX_OUTPUTS] = {0};
  tr_op *op = NULL;
  tr_value settled[TR_SIG_MAX_PARAMS];
  int settled_ok = 0;
  tr_status *status = tr_op_def_workload(def, r->row, &cpu, specs, has, params, &n_params);
  if (status == NULL) status = tr_op_def_bind_params(def, params, n_params, settled);
  settled_ok = status == NULL;
  tr_call_check check;
  for (size_t i = 0; i < n; i++) ptrs[i] = has[i] ? &specs[i] : NULL;
  if (status == NULL) status = tr_op_def_check(def, settled, ptrs, n, &check);
  for (size_t i = 0; status == NULL && i < n; i++) {
    if (!has[i]) continue;
    int64_t numel = tr_tensor_spec_numel(&specs[i]);
    buffers[i] = malloc((size_t)numel * tr_dtype_bytes(specs[i].dtype) + 1);
    if (buffers[i] == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "inputs of %s", tr_op_def_name(def));
      break;
    }
    tensors[i] = (DLTensor){buffers[i], {kDLCPU, 0}, specs[i].rank, specs[i].dtype, specs[i].shape, NULL, 0};
    if (tr_dtype_is_floating(specs[i].dtype)) {
      fill_float(&tensors[i], numel);
    } else {
      int has_fill = 0;
      int64_t max = 0;
      status = tr_op_def_input_fill(def, i, settled, &check, &has_fill, &max);
      fill_int(&tensors[i], numel, max);
    }
    inputs[i] = &tensors[i];
  }
  if (status == NULL) status = tr_op_new(rt, tr_op_def_name(def), params, n_params, NULL, &op);
  size_t n_out = tr_op_def_output_count(def);
  double first_ms = 0, call_ms = 0;
  if (status == NULL) {
    uint64_t start = tr_plat_now_ns();
    status = tr_op_call(op, inputs, n, outputs, n_out);
    first_ms = (double)(tr_plat_now_ns() - start) / 1e6;
  }
  double samples[64];
  int n_samples = 0;
  uint64_t budget_start = tr_plat_now_ns();
  while (status == NULL && n_samples < 64 && (n_samples < 3 || tr_plat_now_ns() - budget_start < 200000000ull)) {
    for (size_t o = 0; o < n_out; o++) {
      if (outputs[o]) outputs[o]->deleter(outputs[o]);
      outputs[o] = NULL;
    }
    uint64_t start = tr_plat_now_ns();
    status = tr_op_call(op, inputs, n, outputs, n_out);
    samples[n_samples++] = (double)(tr_plat_now_ns() - start) / 1e6;
  }
  const char *label = tr_op_def_workload_label(def, r->row);
  int failed = status != NULL;
  if (status == NULL) {
    qsort(samples, (size_t)n_samples, sizeof(double), compare);
    call_ms = samples[n_samples / 2];
    const char *target = tr_op_target(op) ? tr_op_target(op) : "(composite)";
    fprintf(out, "  %-16s %-38.38s %-12s %10.3f %10.3f %9.2f %9.2f\n", tr_op_def_name(def), label,
            target, first_ms, call_ms,
            r->bytes / (call_ms * 1e6), r->flops / (call_ms * 1e6));
  } else {
    char text[1024];
    tr_status_format(status, text, sizeof(text));
    fprintf(out, "  %-16s %-38.38s FAILED: %s\n", tr_op_def_name(def), label, text);
    tr_status_destroy(&status);
  }
  for (size_t o = 0; o < n_out; o++) {
    if (outputs[o]) outputs[o]->deleter(outputs[o]);
  }
  tr_op_destroy(&op);
  for (size_t i = 0; i < n; i++) free(buffers[i]);
  if (settled_ok) tr_op_params_clear(def, settled);
  return failed;
}

int tr_mainjob_run(const char *manifest_dir, const char *pipeline, int all_rows, double max_bytes,
                   FILE *out, FILE *err) {
  tr_manifest *m = NULL;
  tr_runtime *rt = NULL;
  tr_runtime_options o;
  memset(&o, 0, sizeof(o));
  o.manifest_dir = manifest_dir;
  o.pipeline_file = pipeline;
  tr_status *status = tr_manifest_load_dir(manifest_dir, &m);
  if (status == NULL) status = tr_runtime_new(&o, &rt);
  if (status != NULL) {
    char text[1024];
    tr_status_format(status, text, sizeof(text));
    fprintf(err, "tilerun: %s\n", text);
    tr_status_destroy(&status);
    tr_manifest_destroy(&m);
    return 1;
  }
  fprintf(out, "workloads on cpu (%s row of each op%s), through tr_op_call:\n",
          all_rows ? "every" : "the smallest", all_rows ? " up to the byte limit" : "");
  fprintf(out, "  %-16s %-38s %-12s %10s %10s %9s %9s\n", "op", "row", "target", "first ms",
          "call ms", "GB/s", "GFLOP/s");
  fprintf(out, "  (first: the miss, validate + settle + build + call; call: the median memo hit)\n");
  int failures = 0, ran = 0;
  for (size_t i = 0; i < tr_manifest_op_count(m); i++) {
    const tr_op_def *def = tr_manifest_op_at(m, i);
    row_run best = {def, 0, -1, 0};
    for (size_t row = 0; row < tr_op_def_workload_count(def); row++) {
      row_run r = {def, row, 0, 0};
      tr_status *bad = row_roofline(def, row, &r.bytes, &r.flops);
      if (bad != NULL) {
        char text[1024];
        tr_status_format(bad, text, sizeof(text));
        fprintf(out, "  %-16s %-38.38s FAILED: %s\n", tr_op_def_name(def), tr_op_def_workload_label(def, row), text);
        tr_status_destroy(&bad);
        failures++;
        ran++;
        continue;
      }
      if (all_rows) {
        if (r.bytes <= max_bytes) {
          failures += run_row(rt, &r, out);
          ran++;
        }
      } else if (best.bytes < 0 || r.bytes < best.bytes) {
        best = r;
      }
    }
    if (!all_rows && best.bytes >= 0) {
      failures += run_row(rt, &best, out);
      ran++;
    }
  }
  fprintf(out, "%d rows ran, %d failed%s\n", ran, failures,
          tr_load_failure_count(rt) ? " (some backends failed to load: see 'tilerun targets')" : "");
  tr_runtime_destroy(&rt);
  tr_manifest_destroy(&m);
  return failures ? 1 : 0;
}
