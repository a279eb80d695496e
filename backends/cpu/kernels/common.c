/* common.c: the CPU kernels' shared part: conversions, argument checks, the parallel loop. */
#include <errno.h>
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

static int tr__cpu_default_threads_value = 1;
static tr_plat_once tr__cpu_default_threads_once = TR_PLAT_ONCE_INIT;

static void tr__cpu_read_default_threads(void) {
  const int cores = tr_plat_cpu_count();
  tr__cpu_default_threads_value = cores < TR_CPU_MAX_THREADS ? cores : TR_CPU_MAX_THREADS;
  const char *text = tr_plat_getenv("TILERUN_CPU_THREADS");
  if (text == NULL || *text == '\0') return;
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 1 || value > TR_CPU_MAX_THREADS) {
    /* read once a process: said once, on stderr (the CPU backend has no other channel here) */
    fprintf(stderr, "tilerun: warning: TILERUN_CPU_THREADS='%s' is not a number from 1 to %d; the CPU "
            "backend uses %d threads (the cores, at most %d)\n", text, TR_CPU_MAX_THREADS,
            tr__cpu_default_threads_value, TR_CPU_MAX_THREADS);
    return;
  }
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

/* ---- Parallel loop: a persistent pool ----------------------------------------------------
 * One pool per process (per loaded copy of the backend): tr_cpu_default_threads() - 1 workers,
 * started lazily by the first call that has enough work, and the caller itself. A call splits
 * its items into fixed ranges (as many as it asked threads for, whatever the pool's size) and
 * every participating thread takes the next range until none are left, so results never depend
 * on which thread ran what. One call at a time owns the pool: a call arriving while another owns
 * it (another thread's, or a range function's own nested call) runs inline on its thread rather
 * than waiting. The pool stops at exit, or when the backend's shared object is unloaded (atexit
 * in a shared object runs at its dlclose): the workers finish the range they hold and are
 * joined; calls after that run inline. */

typedef struct tr__cpu_range {
  int64_t begin, end;
  tr_status *status;
} tr__cpu_range;

typedef struct tr__cpu_pool {
  tr_plat_mutex lock;
  tr_plat_cond wake; /* workers wait for a new job (or stop) */
  tr_plat_cond idle; /* the owner waits for the job's last range */
  tr_plat_thread *workers[TR_CPU_MAX_THREADS];
  int n_workers;
  int usable;  /* lock and conditions initialised */
  int stopped; /* shut down: every call runs inline */
  int busy;    /* a call owns the pool */
  uint64_t job; /* bumped per job: a worker runs each job once */
  /* The job (valid while busy): fn over ranges[0, n_ranges), next to hand out, running counts
   * ranges handed out and not yet finished. */
  tr__cpu_range_fn fn;
  void *ctx;
  tr__cpu_range *ranges;
  int n_ranges, next, running;
} tr__cpu_pool;

static tr__cpu_pool tr__cpu_the_pool;
static tr_plat_once tr__cpu_pool_once = TR_PLAT_ONCE_INIT;

/* Runs the job's ranges until none are left to take; called and returns with the lock held. */
static void tr__cpu_pool_take_ranges(tr__cpu_pool *pool) {
  while (pool->next < pool->n_ranges) {
    tr__cpu_range *range = &pool->ranges[pool->next++];
    pool->running++;
    tr__cpu_range_fn fn = pool->fn;
    void *ctx = pool->ctx;
    tr_plat_mutex_unlock(&pool->lock);
    range->status = fn(ctx, range->begin, range->end);
    tr_plat_mutex_lock(&pool->lock);
    if (--pool->running == 0 && pool->next == pool->n_ranges) tr_plat_cond_signal(&pool->idle);
  }
}

static void tr__cpu_pool_worker(void *arg) {
  tr__cpu_pool *pool = arg;
  tr_plat_mutex_lock(&pool->lock);
  uint64_t seen = pool->job;
  for (;;) {
    while (!pool->stopped && pool->job == seen) tr_plat_cond_wait(&pool->wake, &pool->lock);
    if (pool->stopped) break;
    seen = pool->job;
    if (pool->busy) tr__cpu_pool_take_ranges(pool); /* a job already done leaves none */
  }
  tr_plat_mutex_unlock(&pool->lock);
}

static void tr__cpu_pool_stop(void) {
  tr__cpu_pool *pool = &tr__cpu_the_pool;
  tr_plat_mutex_lock(&pool->lock);
  pool->stopped = 1;
  tr_plat_cond_broadcast(&pool->wake);
  tr_plat_mutex_unlock(&pool->lock);
  for (int i = 0; i < pool->n_workers; i++) tr_plat_thread_join(&pool->workers[i]);
  /* The lock and conditions stay: a call from another thread may still come (and run inline). */
}

static void tr__cpu_pool_start(void) {
  tr__cpu_pool *pool = &tr__cpu_the_pool;
  tr_status *status = tr_plat_mutex_init(&pool->lock);
  if (status == NULL) {
    status = tr_plat_cond_init(&pool->wake);
    if (status == NULL) {
      status = tr_plat_cond_init(&pool->idle);
      if (status != NULL) tr_plat_cond_destroy(&pool->wake);
    }
    if (status != NULL) tr_plat_mutex_destroy(&pool->lock);
  }
  if (status != NULL) { /* no pool: every call runs inline */
    tr_status_destroy(&status);
    return;
  }
  pool->usable = 1;
  if (atexit(tr__cpu_pool_stop) != 0) return; /* no way to stop workers: start none */
  const int wanted = tr_cpu_default_threads() - 1;
  tr_plat_mutex_lock(&pool->lock);
  for (int i = 0; i < wanted && i < TR_CPU_MAX_THREADS; i++) {
    status = tr_plat_thread_start(tr__cpu_pool_worker, pool, &pool->workers[pool->n_workers]);
    if (status != NULL) { /* fewer workers; the callers' ranges still all run */
      tr_status_destroy(&status);
      break;
    }
    pool->n_workers++;
  }
  tr_plat_mutex_unlock(&pool->lock);
}

/* Runs fn over `ranges` on the pool and the calling thread; 0 when the pool is not to be had
 * (busy, stopped, never started, no workers), and then nothing has run. */
static int tr__cpu_pool_run(tr__cpu_range *ranges, int n_ranges, tr__cpu_range_fn fn, void *ctx) {
  tr_plat_once_run(&tr__cpu_pool_once, tr__cpu_pool_start);
  tr__cpu_pool *pool = &tr__cpu_the_pool;
  if (!pool->usable) return 0;
  tr_plat_mutex_lock(&pool->lock);
  if (pool->busy || pool->stopped || pool->n_workers == 0) {
    tr_plat_mutex_unlock(&pool->lock);
    return 0;
  }
  pool->busy = 1;
  pool->fn = fn;
  pool->ctx = ctx;
  pool->ranges = ranges;
  pool->n_ranges = n_ranges;
  pool->next = 0;
  pool->running = 0;
  pool->job++;
  tr_plat_cond_broadcast(&pool->wake);
  tr__cpu_pool_take_ranges(pool);
  while (pool->running > 0) tr_plat_cond_wait(&pool->idle, &pool->lock);
  pool->busy = 0;
  pool->ranges = NULL;
  tr_plat_mutex_unlock(&pool->lock);
  return 1;
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
  for (int64_t t = 0; t < nt; t++) {
    ranges[t].begin = items / nt * t + (t < items % nt ? t : items % nt);
    ranges[t].end = ranges[t].begin + items / nt + (t < items % nt ? 1 : 0);
    ranges[t].status = NULL;
  }
  if (!tr__cpu_pool_run(ranges, (int)nt, fn, ctx)) { /* inline, the same ranges in order */
    for (int64_t t = 0; t < nt; t++) ranges[t].status = fn(ctx, ranges[t].begin, ranges[t].end);
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
