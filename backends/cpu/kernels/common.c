/* common.c: the CPU kernels' shared part: conversions, argument checks, the parallel loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"
#include "platform/platform.h"

/* ---- Conversions ------------------------------------------------------------------------ */

float tr_cpu_f16_to_f32(uint16_t bits) { return tr__cpu_f16_to_f32(bits); }
float tr_cpu_bf16_to_f32(uint16_t bits) { return tr__cpu_bf16_to_f32(bits); }
uint16_t tr_cpu_f32_to_f16(float value) { return tr__cpu_f32_to_f16(value); }
uint16_t tr_cpu_f32_to_bf16(float value) { return tr__cpu_f32_to_bf16(value); }

/* ---- Default thread count ---------------------------------------------------------------- */

#define TR__CPU_DEFAULT_THREADS 4

static int tr__cpu_default_threads_value = TR__CPU_DEFAULT_THREADS;
static tr_plat_once tr__cpu_default_threads_once = TR_PLAT_ONCE_INIT;

static void tr__cpu_read_default_threads(void) {
  const char *text = tr_plat_getenv("TILERUN_CPU_THREADS");
  if (text == NULL || *text == '\0') return;
  char *end = NULL;
  long value = strtol(text, &end, 10);
  if (*end != '\0' || value < 1 || value > TR_CPU_MAX_THREADS) return;
  tr__cpu_default_threads_value = (int)value;
}

int tr_cpu_default_threads(void) {
  tr_plat_once_run(&tr__cpu_default_threads_once, tr__cpu_read_default_threads);
  return tr__cpu_default_threads_value;
}

/* ---- Argument checks --------------------------------------------------------------------- */

static const struct {
  tr_dtype dtype;
  const char *name;
} tr__cpu_kinds[TR__CPU_KIND_COUNT] = {
    [TR__CPU_F16] = {{kDLFloat, 16, 1}, "float16"},
    [TR__CPU_BF16] = {{kDLBfloat, 16, 1}, "bfloat16"},
    [TR__CPU_F32] = {{kDLFloat, 32, 1}, "float32"},
    [TR__CPU_F64] = {{kDLFloat, 64, 1}, "float64"},
    [TR__CPU_I32] = {{kDLInt, 32, 1}, "int32"},
    [TR__CPU_I64] = {{kDLInt, 64, 1}, "int64"},
};

tr_status *tr__cpu_check_dtype(const char *op, const char *item, tr_dtype dtype,
                               unsigned allowed, tr__cpu_kind *out) {
  for (int k = 0; k < TR__CPU_KIND_COUNT; k++) {
    if ((allowed & TR__CPU_SET(k)) && tr_dtype_equal(dtype, tr__cpu_kinds[k].dtype)) {
      *out = (tr__cpu_kind)k;
      return NULL;
    }
  }
  char names[128] = "";
  size_t used = 0;
  for (int k = 0; k < TR__CPU_KIND_COUNT; k++) {
    if (!(allowed & TR__CPU_SET(k))) continue;
    int n = snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                     tr__cpu_kinds[k].name);
    if (n > 0) used += (size_t)n;
    if (used >= sizeof names) break;
  }
  char got[TR_DTYPE_FORMAT_MAX];
  tr_dtype_format(dtype, got, sizeof got);
  return TR_STATUS(TR_VALUE, "%s: %s %s is not supported (%s)", op, item, got, names);
}

tr_status *tr__cpu_check_size(const char *op, const char *item, int64_t value) {
  if (value >= 0) return NULL;
  return TR_STATUS(TR_VALUE, "%s: %s must be >= 0, got %lld", op, item, (long long)value);
}

tr_status *tr__cpu_check_threads(const char *op, int threads) {
  if (threads >= 0) return NULL;
  return TR_STATUS(TR_VALUE, "%s: threads must be >= 0, got %d", op, threads);
}

tr_status *tr__cpu_check_ptr(const char *op, const char *item, const void *p, int64_t numel) {
  if (p != NULL || numel == 0) return NULL;
  return TR_STATUS(TR_VALUE, "%s: %s is NULL (it holds %lld elements)", op, item,
                   (long long)numel);
}

tr_status *tr__cpu_mul(const char *op, const char *what, int64_t a, int64_t b, int64_t *out) {
  if (a != 0 && b > INT64_MAX / a) {
    return TR_STATUS(TR_VALUE, "%s: %s = %lld * %lld overflows int64", op, what, (long long)a,
                     (long long)b);
  }
  *out = a * b;
  return NULL;
}

/* ---- Parallel loop ----------------------------------------------------------------------- */

typedef struct tr__cpu_range {
  tr__cpu_range_fn fn;
  void *ctx;
  int64_t begin, end;
  tr_status *status;
} tr__cpu_range;

static void tr__cpu_range_main(void *arg) {
  tr__cpu_range *range = arg;
  range->status = range->fn(range->ctx, range->begin, range->end);
}

tr_status *tr__cpu_parallel_for(int threads, int64_t items, int64_t work_per_item,
                                tr__cpu_range_fn fn, void *ctx) {
  if (items <= 0) return NULL;
  int64_t nt = threads == 0 ? tr_cpu_default_threads() : threads;
  if (nt > TR_CPU_MAX_THREADS) nt = TR_CPU_MAX_THREADS;
  if (nt > items) nt = items;
  if (work_per_item < 1) work_per_item = 1;
  if (items <= TR_CPU_PARALLEL_MIN / work_per_item) nt = 1; /* items * work <= the minimum */
  if (nt <= 1) return fn(ctx, 0, items);

  tr__cpu_range ranges[TR_CPU_MAX_THREADS];
  tr_plat_thread *handles[TR_CPU_MAX_THREADS];
  for (int64_t t = 0; t < nt; t++) {
    ranges[t].fn = fn;
    ranges[t].ctx = ctx;
    ranges[t].begin = items / nt * t + (t < items % nt ? t : items % nt);
    ranges[t].end = ranges[t].begin + items / nt + (t < items % nt ? 1 : 0);
    ranges[t].status = NULL;
    handles[t] = NULL;
  }
  for (int64_t t = 1; t < nt; t++) {
    tr_status *start = tr_plat_thread_start(tr__cpu_range_main, &ranges[t], &handles[t]);
    if (start != NULL) tr_status_destroy(&start); /* the caller runs this range below */
  }
  tr__cpu_range_main(&ranges[0]);
  for (int64_t t = 1; t < nt; t++) {
    if (handles[t] != NULL) {
      tr_plat_thread_join(&handles[t]);
    } else {
      tr__cpu_range_main(&ranges[t]);
    }
  }
  tr_status *first = NULL;
  for (int64_t t = 0; t < nt; t++) {
    if (first == NULL) {
      first = ranges[t].status;
    } else if (ranges[t].status != NULL) {
      tr_status_destroy(&ranges[t].status);
    }
  }
  return first;
}
