/* mainjob.c: the main job: every workload row of the manifest through the runtime, on cuda where
 * there is a GPU and the op has in-tree kernels (a composition: each of its steps), else on cpu
 * (the CPU backend), with the target and implementation chosen, build and call time, the error
 * against the CPU backend's result and the achieved rate against the roofline. */
#include "tools/mainjob.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/pool.h"
#include "kernels/intree/intree.h"
#include "manifest/compose.h"
#include "manifest/manifest.h"
#include "platform/platform.h"
#include "tilerun/tilerun.h"

/* Exactly representable small values (k/8, |k| <= 16) in each float format's bits, so every
 * dtype gets the same numbers without a conversion library. */
static void fill_float(void *data, tr_dtype dt, int64_t numel) {
  for (int64_t i = 0; i < numel; i++) {
    float v = (float)((i * 7919) % 33 - 16) / 8.0f;
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if (dt.bits == 8) { /* float8: zeros (exact in both formats) */
      ((uint8_t *)data)[i] = 0;
    } else if (dt.bits == 32) {
      ((float *)data)[i] = v;
    } else if (dt.bits == 64) {
      ((double *)data)[i] = v;
    } else if (dt.code == kDLBfloat) {
      ((uint16_t *)data)[i] = (uint16_t)(bits >> 16);
    } else { /* float16: exact for these values */
      uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
      int exp = (int)((bits >> 23) & 0xff);
      ((uint16_t *)data)[i] = v == 0 ? sign : (uint16_t)(sign | ((exp - 127 + 15) << 10) | ((bits >> 13) & 0x3ff));
    }
  }
}

static void fill_int(void *data, tr_dtype dt, int64_t numel, int64_t max) {
  for (int64_t i = 0; i < numel; i++) {
    int64_t v = max > 0 ? max - (i * 7919) % (max / 4 + 1) : 0; /* near the top: long sequences */
    if (dt.bits == 32) ((int32_t *)data)[i] = (int32_t)v;
    else if (dt.bits == 64) ((int64_t *)data)[i] = v;
    else ((uint8_t *)data)[i] = (uint8_t)v;
  }
}

/* Element i of a contiguous buffer as a double (the dtypes ops produce). */
static double element(const void *data, tr_dtype dt, int64_t i) {
  if (dt.code == kDLFloat && dt.bits == 32) return ((const float *)data)[i];
  if (dt.code == kDLFloat && dt.bits == 64) return ((const double *)data)[i];
  if (dt.code == kDLBfloat && dt.bits == 16) {
    uint32_t bits = (uint32_t)((const uint16_t *)data)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  if (dt.code == kDLFloat && dt.bits == 16) {
    uint16_t h = ((const uint16_t *)data)[i];
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : exp == 31 ? (mant ? NAN : INFINITY) : ldexp(mant + 1024, exp - 25);
    return (h & 0x8000) ? -v : v;
  }
  if (dt.code == kDLInt && dt.bits == 32) return ((const int32_t *)data)[i];
  if (dt.code == kDLInt && dt.bits == 64) return (double)((const int64_t *)data)[i];
  if (dt.bits == 8) return ((const uint8_t *)data)[i];
  return NAN;
}

/* The error a dtype's result may carry against the CPU backend's: |got - ref| <= tol * (1 + |ref|). */
static double tolerance(tr_dtype dt) {
  if (dt.code == kDLBfloat) return 3e-2;
  if (dt.code == kDLFloat && dt.bits == 16) return 4e-3;
  if (dt.code == kDLFloat && dt.bits == 32) return 1e-4;
  if (dt.code == kDLFloat && dt.bits == 64) return 1e-10;
  return 0;
}

typedef struct job {
  tr_runtime *rt;
  tr_cuda_pool *pool; /* cuda: the rows' inputs, and the copy test's blocks */
  int on_gpu;         /* cuda rows run where the op has in-tree kernels */
  double max_bytes;   /* rows moving more are skipped (cpu) or not checked (cuda) */
  double max_flops;   /* cpu rows computing more are skipped */
  double copy_gbps;   /* cuda: the device's copy rate, measured at the start; 0 on cpu */
  FILE *out;
} job;

typedef struct row_data {
  size_t n;
  tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
  uint8_t has[TR_SIG_MAX_INPUTS];
  tr_named_value params[TR_SIG_MAX_PARAMS];
  size_t n_params;
  tr_value settled[TR_SIG_MAX_PARAMS];
  int settled_ok;
  tr_call_check check;
  void *host[TR_SIG_MAX_INPUTS];
  void *dev[TR_SIG_MAX_INPUTS];
  size_t bytes[TR_SIG_MAX_INPUTS];
  tr_cuda_origin origin[TR_SIG_MAX_INPUTS];
  tr_cuda_pool *pool;
  DLTensor host_t[TR_SIG_MAX_INPUTS], dev_t[TR_SIG_MAX_INPUTS];
  int shared; /* launch in another process: inputs in memory it can map */
} row_data;

/* The row's specs, params and check, on cpu (the roofline and the fills need no device). */
static tr_status *row_prepare(const tr_op_def *def, size_t row, row_data *d) {
  memset(d, 0, sizeof(*d));
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  d->n = tr_op_def_input_count(def);
  TR_RETURN_IF_ERROR(tr_op_def_workload(def, row, &cpu, d->specs, d->has, d->params, &d->n_params));
  TR_RETURN_IF_ERROR(tr_op_def_bind_params(def, d->params, d->n_params, d->settled));
  d->settled_ok = 1;
  const tr_tensor_spec *ptrs[TR_SIG_MAX_INPUTS];
  for (size_t i = 0; i < d->n; i++) ptrs[i] = d->has[i] ? &d->specs[i] : NULL;
  return tr_op_def_check(def, d->settled, ptrs, d->n, &d->check);
}

static void row_release(const tr_op_def *def, row_data *d) {
  for (size_t i = 0; i < d->n; i++) {
    if (d->shared) tr_free_shared(d->host[i]);
    else free(d->host[i]);
    if (d->dev[i] != NULL && d->shared) tr_cu_free((tr_cu_ptr)(uintptr_t)d->dev[i]);
    else if (d->dev[i] != NULL) tr_cuda_pool_free(0, d->dev[i], d->bytes[i], &d->origin[i]);
  }
  if (d->settled_ok) tr_op_params_clear(def, d->settled);
}

/* Host inputs filled; on cuda, device copies too. */
static tr_status *row_inputs(const tr_op_def *def, row_data *d, int cuda) {
  for (size_t i = 0; i < d->n; i++) {
    if (!d->has[i]) continue;
    int64_t numel = tr_tensor_spec_numel(&d->specs[i]);
    d->bytes[i] = (size_t)numel * tr_dtype_bytes(d->specs[i].dtype);
    if (d->shared) { /* launch in another process: memory it can map */
      TR_RETURN_IF_ERROR(tr_alloc_shared(d->bytes[i] + 1, &d->host[i]));
    } else if ((d->host[i] = malloc(d->bytes[i] + 1)) == NULL) {
      return TR_STATUS(TR_OUT_OF_MEMORY, "inputs of %s: %zu bytes", tr_op_def_name(def), d->bytes[i]);
    }
    if (tr_dtype_is_floating(d->specs[i].dtype)) {
      fill_float(d->host[i], d->specs[i].dtype, numel);
    } else {
      int has_fill = 0;
      int64_t max = 0;
      TR_RETURN_IF_ERROR(tr_op_def_input_fill(def, i, d->settled, &d->check, &has_fill, &max));
      fill_int(d->host[i], d->specs[i].dtype, numel, max);
    }
    d->host_t[i] = (DLTensor){d->host[i], {kDLCPU, 0}, d->specs[i].rank, d->specs[i].dtype, d->specs[i].shape, NULL, 0};
    if (!cuda) continue;
    if (d->shared) {
      tr_cu_ptr p = 0;
      TR_RETURN_IF_ERROR(tr_cu_alloc(d->bytes[i] ? d->bytes[i] : 1, &p));
      d->dev[i] = (void *)(uintptr_t)p;
    } else {
      TR_RETURN_IF_ERROR(tr_cuda_pool_alloc(d->pool, 0, d->bytes[i], &d->dev[i], &d->origin[i]));
    }
    TR_RETURN_IF_ERROR(tr_cu_stream_sync(tr_cu_current_stream(0)));
    TR_RETURN_IF_ERROR(tr_cu_copy_to_device((tr_cu_ptr)(uintptr_t)d->dev[i], d->host[i], d->bytes[i]));
    d->dev_t[i] = d->host_t[i];
    d->dev_t[i].data = d->dev[i];
    d->dev_t[i].device = (DLDevice){kDLCUDA, 0};
  }
  return NULL;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void free_outputs(DLManagedTensor **outputs, size_t n) {
  for (size_t o = 0; o < n; o++) {
    if (outputs[o]) outputs[o]->deleter(outputs[o]);
    outputs[o] = NULL;
  }
}

/* Times memo-hit calls: the median of single calls on cpu; on cuda, calls back to back then one
 * wait, per call (the device's rate once the queue is full, the host's for tiny rows). */
static tr_status *time_calls(tr_op *op, const DLTensor *const *inputs, size_t n, size_t n_out, int cuda,
                             double *us) {
  DLManagedTensor *outputs[TR_SIG_MAX_OUTPUTS] = {0};
  tr_status *status = NULL;
  if (cuda) {
    long calls = 0;
    uint64_t start = tr_plat_now_ns();
    while (status == NULL && (calls < 3 || tr_plat_now_ns() - start < 200000000ull) && calls < 100000) {
      status = tr_op_call(op, inputs, n, outputs, n_out);
      free_outputs(outputs, n_out);
      calls++;
    }
    if (status == NULL) status = tr_cu_stream_sync(tr_cu_current_stream(0));
    *us = (double)(tr_plat_now_ns() - start) / 1e3 / (double)calls;
    return status;
  }
  double samples[64];
  int k = 0;
  uint64_t budget = tr_plat_now_ns();
  while (status == NULL && k < 64 && (k < 3 || tr_plat_now_ns() - budget < 200000000ull)) {
    uint64_t start = tr_plat_now_ns();
    status = tr_op_call(op, inputs, n, outputs, n_out);
    samples[k++] = (double)(tr_plat_now_ns() - start) / 1e3;
    free_outputs(outputs, n_out);
  }
  qsort(samples, (size_t)k, sizeof(double), compare);
  *us = k ? samples[k / 2] : 0;
  return status;
}

/* The largest error of the cuda outputs against the CPU backend's on the same inputs, as
 * max |got - ref| / (1 + |ref|), and whether it is within the dtype's tolerance. */
static tr_status *reference_error(job *j, const tr_op_def *def, row_data *d, DLManagedTensor **got, double *err,
                                  int *ok) {
  tr_op *ref = NULL;
  DLManagedTensor *want[TR_SIG_MAX_OUTPUTS] = {0};
  const DLTensor *inputs[TR_SIG_MAX_INPUTS] = {0};
  for (size_t i = 0; i < d->n; i++) inputs[i] = d->has[i] ? &d->host_t[i] : NULL;
  size_t n_out = tr_op_def_output_count(def);
  tr_status *status = tr_op_new(j->rt, tr_op_def_name(def), d->params, d->n_params, "cpu", &ref);
  if (status == NULL) status = tr_op_call(ref, inputs, d->n, want, n_out);
  *err = 0;
  *ok = 1;
  for (size_t o = 0; status == NULL && o < n_out; o++) {
    if (got[o] == NULL || want[o] == NULL) continue;
    const DLTensor *g = &got[o]->dl_tensor, *w = &want[o]->dl_tensor;
    int64_t numel = 1;
    for (int32_t a = 0; a < w->ndim; a++) numel *= w->shape[a];
    size_t bytes = (size_t)numel * tr_dtype_bytes(w->dtype);
    void *host = malloc(bytes + 1);
    if (host == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "a host copy of %zu bytes", bytes);
      break;
    }
    status = tr_cu_stream_sync(tr_cu_current_stream(0));
    if (status == NULL) status = tr_cu_copy_to_host(host, (tr_cu_ptr)(uintptr_t)g->data, bytes);
    double tol = tolerance(w->dtype);
    for (int64_t i = 0; status == NULL && i < numel; i++) {
      double a = element(host, g->dtype, i), b = element(w->data, w->dtype, i);
      double e = fabs(a - b) / (1 + fabs(b));
      if (!(e <= *err)) *err = isnan(e) ? INFINITY : e;
    }
    if (!(*err <= tol)) *ok = 0;
    free(host);
  }
  free_outputs(want, n_out);
  tr_op_destroy(&ref);
  return status;
}

static void print_failed(job *j, const tr_op_def *def, size_t row, tr_status *status) {
  char text[1024];
  tr_status_format(status, text, sizeof(text));
  fprintf(j->out, "  %-16s %-38.38s FAILED: %s\n", tr_op_def_name(def), tr_op_def_workload_label(def, row), text);
  fflush(j->out);
}

/* 1 when the op has in-tree kernels, or is a composition whose every step has them. */
static int in_tree(const tr_op_def *def) {
  size_t steps = tr_op_def_step_count(def);
  if (steps == 0) return tr_intree_find(tr_op_def_name(def)) != NULL;
  for (size_t s = 0; s < steps; s++) {
    if (!in_tree(tr_op_def_step_op(def, s))) return 0;
  }
  return 1;
}

/* Runs one row; prints its line. Returns 0 when it ran, 1 when it failed, 2 when skipped. */
static int run_row(job *j, const tr_op_def *def, size_t row, double bytes, double flops) {
  const char *name = tr_op_def_name(def), *label = tr_op_def_workload_label(def, row);
  int cuda = j->on_gpu && in_tree(def);
  if (!cuda && bytes > j->max_bytes) {
    fprintf(j->out, "  %-16s %-38.38s skipped on cpu: moves %.3g GB (over --max-gb %g)\n", name, label, bytes / 1e9,
            j->max_bytes / 1e9);
    return 2;
  }
  if (!cuda && flops > j->max_flops) {
    fprintf(j->out, "  %-16s %-38.38s skipped on cpu: %.3g GFLOP (over --max-gflop %g)\n", name, label, flops / 1e9,
            j->max_flops / 1e9);
    return 2;
  }
  row_data d;
  tr_op *op = NULL;
  size_t n_out = tr_op_def_output_count(def);
  DLManagedTensor *outputs[TR_SIG_MAX_OUTPUTS] = {0};
  const DLTensor *inputs[TR_SIG_MAX_INPUTS] = {0};
  double first_ms = 0, call_us = 0, err = 0;
  int ok = 1, checked = 0;
  tr_status *status = row_prepare(def, row, &d);
  d.shared = tr_runtime_launch_remote(j->rt);
  d.pool = j->pool;
  if (status == NULL) status = row_inputs(def, &d, cuda);
  for (size_t i = 0; i < d.n; i++) inputs[i] = d.has[i] ? (cuda ? &d.dev_t[i] : &d.host_t[i]) : NULL;
  if (status == NULL) status = tr_op_new(j->rt, name, d.params, d.n_params, NULL, &op);
  if (status == NULL) {
    uint64_t start = tr_plat_now_ns();
    status = tr_op_call(op, inputs, d.n, outputs, n_out);
    if (status == NULL && cuda) status = tr_cu_stream_sync(tr_cu_current_stream(0));
    first_ms = (double)(tr_plat_now_ns() - start) / 1e6;
  }
  if (status == NULL && cuda && bytes <= j->max_bytes) {
    status = reference_error(j, def, &d, outputs, &err, &ok);
    checked = status == NULL;
  }
  free_outputs(outputs, n_out);
  if (status == NULL) status = time_calls(op, inputs, d.n, n_out, cuda, &call_us);
  int failed = status != NULL || !ok;
  if (status == NULL) {
    const tr_named_value *config = NULL;
    size_t n_config = tr_op_kernel_config(op, &config);
    const char *impl = "-";
    for (size_t c = 0; c < n_config; c++) {
      if (strcmp(config[c].name, "implementation") == 0 && config[c].value.kind == TR_VALUE_STR) {
        impl = config[c].value.as.str.data;
      }
    }
    const char *target = tr_op_target(op) ? tr_op_target(op) : "(composite)";
    char rate[64] = "", error[48] = "-";
    double gbps = bytes / (call_us * 1e3), gflops = flops / (call_us * 1e3);
    if (j->copy_gbps > 0 && cuda) snprintf(rate, sizeof(rate), " (%3.0f%%)", 100 * gbps / j->copy_gbps);
    if (checked) snprintf(error, sizeof(error), "%.1e %s", err, ok ? "ok" : "TOO LARGE");
    else if (cuda) snprintf(error, sizeof(error), "not checked (> --max-gb)");
    fprintf(j->out, "  %-16s %-38.38s %-5s %-11s %-18s %9.2f %10.2f %8.1f%s %9.1f  %s\n", name, label, cuda ? "cuda" : "cpu",
            target, impl, first_ms, call_us, gbps, rate, gflops, error);
    fflush(j->out);
  } else {
    print_failed(j, def, row, status);
    tr_status_destroy(&status);
  }
  tr_op_destroy(&op);
  row_release(def, &d);
  return failed;
}

/* The device's copy rate (read + write of 256 MiB, device to device, median of 5). */
static tr_status *copy_rate(tr_cuda_pool *pool, double *gbps) {
  size_t bytes = (size_t)256 << 20;
  void *a = NULL, *b = NULL;
  tr_cuda_origin reuse_a, reuse_b;
  tr_cu_stream s = tr_cu_current_stream(0);
  tr_status *status = tr_cuda_pool_alloc(pool, 0, bytes, &a, &reuse_a);
  if (status == NULL) status = tr_cuda_pool_alloc(pool, 0, bytes, &b, &reuse_b);
  double best[5];
  for (int r = 0; status == NULL && r < 5; r++) {
    status = tr_cu_stream_sync(s);
    uint64_t start = tr_plat_now_ns();
    for (int k = 0; status == NULL && k < 4; k++) {
      status = tr_cu_copy_device((tr_cu_ptr)(uintptr_t)b, (tr_cu_ptr)(uintptr_t)a, bytes, s);
    }
    if (status == NULL) status = tr_cu_stream_sync(s);
    best[r] = 2.0 * 4 * (double)bytes / (double)(tr_plat_now_ns() - start);
  }
  if (status == NULL) {
    qsort(best, 5, sizeof(double), compare);
    *gbps = best[2];
  }
  if (a) tr_cuda_pool_free(0, a, bytes, &reuse_a);
  if (b) tr_cuda_pool_free(0, b, bytes, &reuse_b);
  return status;
}

/* The first name of the comma-separated names at `p`: its length; *next is where the next name
 * starts, NULL after the last (so "A," and "A,,B" hold empty names). */
static size_t first_name(const char *p, const char **next) {
  const char *end = strchr(p, ',');
  *next = end ? end + 1 : NULL;
  return end ? (size_t)(end - p) : strlen(p);
}

/* Whether `name` is one of the comma-separated names of `list` (NULL: every name is). */
static int op_listed(const char *list, const char *name) {
  if (list == NULL) return 1;
  const size_t n = strlen(name);
  for (const char *p = list, *next; p != NULL; p = next) {
    if (first_name(p, &next) == n && strncmp(p, name, n) == 0) return 1;
  }
  return 0;
}

/* Each name of `list` is an op of `m`: else prints the first that is not (an empty one too), and
 * returns 0. */
static int ops_known(const tr_manifest *m, const char *list, const char *manifest_dir, FILE *err) {
  for (const char *p = list, *next; p != NULL; p = next) {
    const size_t len = first_name(p, &next);
    int found = 0;
    for (size_t i = 0; i < tr_manifest_op_count(m) && !found; i++) {
      const char *name = tr_op_def_name(tr_manifest_op_at(m, i));
      found = strlen(name) == len && strncmp(p, name, len) == 0;
    }
    if (!found) {
      fprintf(err, "tilerun: --ops: the manifest (%s) has no op '%.*s' ('tilerun ops' lists them)\n",
              manifest_dir, (int)len, p);
      return 0;
    }
  }
  return 1;
}

int tr_mainjob_check_ops(const char *manifest_dir, const char *ops, FILE *err) {
  tr_manifest *m = NULL;
  tr_status *status = ops != NULL ? tr_manifest_load_dir(manifest_dir, &m) : NULL;
  if (status != NULL) { /* reported by whatever loads it next */
    tr_status_destroy(&status);
    return 0;
  }
  int known = ops == NULL || ops_known(m, ops, manifest_dir, err);
  tr_manifest_destroy(&m);
  return known ? 0 : 2;
}

int tr_mainjob_run(const tr_mainjob_options *options, FILE *out, FILE *err) {
  tr_manifest *m = NULL;
  job j;
  memset(&j, 0, sizeof(j));
  j.out = out;
  j.max_bytes = options->max_bytes;
  j.max_flops = options->max_flops;
  tr_runtime_options o;
  memset(&o, 0, sizeof(o));
  o.manifest_dir = options->manifest_dir;
  o.pipeline_file = options->pipeline;
  tr_status *status = tr_manifest_load_dir(options->manifest_dir, &m);
  if (status == NULL && !ops_known(m, options->ops, options->manifest_dir, err)) {
    tr_manifest_destroy(&m);
    return 2;
  }
  if (status == NULL && tr_manifest_op_count(m) == 0) { /* nothing would run: an empty or wrong folder */
    fprintf(err, "tilerun: the manifest folder %s declares no op (its *.yaml files; --manifest or "
            "TILERUN_MANIFEST_DIR names another)\n", options->manifest_dir);
    tr_manifest_destroy(&m);
    return 1;
  }
  if (status == NULL) status = tr_runtime_new(&o, &j.rt);
  if (status == NULL && options->target != NULL) {
    status = tr_set_default_target(j.rt, options->target);
    if (status != NULL) { /* --target names no target: a bad argument, as --ops naming no op */
      char text[1024];
      tr_status_format(status, text, sizeof(text));
      fprintf(err, "tilerun: --target: %s\n", text);
      tr_status_destroy(&status);
      tr_runtime_destroy(&j.rt);
      tr_manifest_destroy(&m);
      return 2;
    }
  }
  int gpus = options->device == TR_MAINJOB_CPU ? 0 : tr_cu_device_count();
  if (status == NULL && options->device == TR_MAINJOB_CUDA && gpus == 0) {
    tr_status *why = tr_cu_load();
    status = TR_STATUS(TR_OP_NOT_AVAILABLE, "--device cuda: no cuda device here%s%s (on this machine, --device cpu "
                       "or auto runs every row on the CPU backend)", why ? ": " : "", why ? tr_status_message(why) : "");
    tr_status_destroy(&why);
  }
  j.on_gpu = gpus > 0;
  tr_cu_ctx ctx = NULL, previous = NULL;
  if (status == NULL && j.on_gpu) { /* cuda:0's context current on this thread for the copies */
    status = tr_cu_enter_device(0, &ctx, &previous);
    if (status == NULL) status = tr_cuda_pool_new(&j.pool);
    if (status == NULL) status = copy_rate(j.pool, &j.copy_gbps);
    tr_cuda_pool_trim(j.pool); /* the copy test's two 256 MiB blocks: not kept for the rows */
  }
  if (status != NULL) {
    char text[1024];
    tr_status_format(status, text, sizeof(text));
    fprintf(err, "tilerun: %s\n", text);
    tr_status_destroy(&status);
    tr_cuda_pool_destroy(&j.pool);
    tr_runtime_destroy(&j.rt);
    tr_manifest_destroy(&m);
    return 1;
  }
  /* which rows: "every row", "each op's smallest row", either followed by " of " and the --ops list */
  const char *rows = options->smallest ? "each op's smallest row" : "every row";
  const char *of = options->ops ? " of " : "", *ops = options->ops ? options->ops : "";
  if (j.on_gpu) {
    fprintf(out, "workloads on cuda:0 where the op has in-tree kernels (else on cpu), %s%s%s; the device copies "
            "at %.0f GB/s\n", rows, of, ops, j.copy_gbps);
  } else {
    fprintf(out, "workloads on cpu (no cuda device%s), %s%s%s; rows over --max-gb or --max-gflop are skipped\n",
            options->device == TR_MAINJOB_CPU ? " asked for" : " here", rows, of, ops);
  }
  fprintf(out, "  %-16s %-38s %-5s %-11s %-18s %9s %10s %8s%s %9s  %s\n", "op", "row", "dev", "target",
          "implementation", "build ms", "call us", "GB/s", j.on_gpu ? " (%copy)" : "", "GFLOP/s", "error vs cpu");
  fprintf(out, "  (build: the first call, validate + settle + select + build + call; call: a memo hit%s; GB/s and "
          "GFLOP/s: the roofline's bytes and flops over the call time)\n",
          j.on_gpu ? ", on cuda calls back to back then one wait, per call" : ", the median");
  fflush(out);
  int failures = 0, ran = 0, skipped = 0;
  for (size_t i = 0; i < tr_manifest_op_count(m); i++) {
    const tr_op_def *def = tr_manifest_op_at(m, i);
    if (!op_listed(options->ops, tr_op_def_name(def))) continue;
    size_t best = SIZE_MAX;
    double best_bytes = -1, best_flops = 0;
    for (size_t row = 0; row < tr_op_def_workload_count(def); row++) {
      row_data d;
      double bytes = 0, flops = 0;
      tr_status *bad = row_prepare(def, row, &d);
      if (bad == NULL) bad = tr_op_def_roofline(def, d.settled, &d.check, &flops, &bytes);
      row_release(def, &d);
      if (bad != NULL) {
        print_failed(&j, def, row, bad);
        tr_status_destroy(&bad);
        failures++;
        ran++;
        continue;
      }
      if (!options->smallest) {
        int rc = run_row(&j, def, row, bytes, flops);
        failures += rc == 1;
        ran += rc != 2;
        skipped += rc == 2;
      } else if (best_bytes < 0 || bytes < best_bytes) {
        best = row;
        best_bytes = bytes;
        best_flops = flops;
      }
    }
    if (options->smallest && best != SIZE_MAX) {
      int rc = run_row(&j, def, best, best_bytes, best_flops);
      failures += rc == 1;
      ran += rc != 2;
      skipped += rc == 2;
    }
  }
  fprintf(out, "%d rows ran, %d failed, %d skipped%s\n", ran, failures, skipped,
          tr_load_failure_count(j.rt) ? " (some backends failed to load: see 'tilerun targets')" : "");
  tr_cuda_pool_destroy(&j.pool);
  tr_runtime_destroy(&j.rt);
  tr_manifest_destroy(&m);
  if (ctx != NULL) tr_cu_restore_context(ctx, previous);
  return failures ? 1 : 0;
}
