/* intree.c: the table of in-tree kernel families, and what every family shares: the ops'
 * lookup, the build (NVRTC artifacts, the disk cache), the kernel made from artifacts on a
 * device, and its call. A family's own code is in its file (norm.c, softmax.c, elementwise.c). */
#include "kernels/intree/intree.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/artifact.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/modules.h"
#include "kernels/cuda/pool.h"
#include "kernels/intree/family.h"
#include "platform/platform.h"

/* ---- the table: one line per family ---- */

static const tr_intree_family *const kFamilies[] = {
    &tr_intree_norm_family,
    &tr_intree_softmax_family,
    &tr_intree_elementwise_family,
    &tr_intree_gemm_family,
    &tr_intree_rope_family,
    &tr_intree_attention_family,
    &tr_intree_attention_prefill_family,
};
#define N_FAMILIES (sizeof(kFamilies) / sizeof(kFamilies[0]))

size_t tr_intree_op_count(void) {
  size_t n = 0;
  for (size_t f = 0; f < N_FAMILIES; f++) n += kFamilies[f]->n_ops;
  return n;
}

const tr_intree_op *tr_intree_op_at(size_t i) {
  for (size_t f = 0; f < N_FAMILIES; f++) {
    if (i < kFamilies[f]->n_ops) return &kFamilies[f]->ops[i];
    i -= kFamilies[f]->n_ops;
  }
  return NULL;
}

const tr_intree_op *tr_intree_find(const char *op) {
  for (size_t f = 0; f < N_FAMILIES; f++) {
    for (size_t i = 0; i < kFamilies[f]->n_ops; i++) {
      if (strcmp(kFamilies[f]->ops[i].op, op) == 0) return &kFamilies[f]->ops[i];
    }
  }
  return NULL;
}

int tr_intree_owns(const tr_kernel_type *type) {
  if (type == NULL || type->factory != tr__intree_factory || type->ctx == NULL) return 0;
  const tr_intree_family *family = ((const tr_intree_impl *)type->ctx)->family;
  for (size_t f = 0; f < N_FAMILIES; f++) {
    if (kFamilies[f] == family) return 1;
  }
  return 0;
}

int tr_intree_has_source(const tr_kernel_type *type) {
  return tr_intree_owns(type) && !((const tr_intree_impl *)type->ctx)->no_source;
}

void tr_intree_arch_name(int32_t arch, char *buf, size_t size) {
  /* Hopper's arch-specific features need the "a" target; a cubin for sm_90a runs on SM90 only */
  snprintf(buf, size, arch == 90 ? "sm_%da" : "sm_%d", (int)arch);
}

/* ---- helpers the families share ---- */

/* bf16 conversions (cvt.rn.bf16.f32) need SM80 or later. */
const int32_t tr_intree_archs[TR_INTREE_N_ARCHS] = {80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121};

const tr_value *tr_intree_param(const tr_named_value *params, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(params[i].name, name) == 0) return &params[i].value;
  }
  return NULL;
}

int64_t tr_intree_spec_numel(const tr_tensor_spec *s, int32_t from, int32_t to) {
  int64_t n = 1;
  for (int32_t d = from; d < to; d++) n *= s->shape[d];
  return n;
}

int64_t tr_intree_numel(const DLTensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

void *tr_intree_data(const DLTensor *t) { return t ? (char *)t->data + t->byte_offset : NULL; }

int tr_intree_is_float16ish(tr_dtype d) {
  return tr_dtype_equal(d, TR_FLOAT16) || tr_dtype_equal(d, TR_BFLOAT16) || tr_dtype_equal(d, TR_FLOAT32);
}

const char *tr_intree_c_type(tr_dtype d) {
  if (tr_dtype_equal(d, TR_FLOAT16)) return "f16";
  if (tr_dtype_equal(d, TR_BFLOAT16)) return "bf16";
  if (tr_dtype_equal(d, TR_FLOAT32)) return "float";
  if (tr_dtype_equal(d, TR_FLOAT64)) return "double";
  if (tr_dtype_equal(d, TR_INT32)) return "int";
  if (tr_dtype_equal(d, TR_INT64)) return "i64";
  return NULL;
}

void tr_intree_add_int(tr_intree_source *s, const char *fmt, long long value) {
  if (s->n_options >= 16) return;
  snprintf(s->option_text[s->n_options], 64, fmt, value);
  s->options[s->n_options] = s->option_text[s->n_options];
  s->n_options++;
}

void tr_intree_add_text(tr_intree_source *s, const char *fmt, const char *value) {
  if (s->n_options >= 16) return;
  snprintf(s->option_text[s->n_options], 64, fmt, value);
  s->options[s->n_options] = s->option_text[s->n_options];
  s->n_options++;
}

uint32_t tr_intree_clamp_threads(int64_t n) {
  n = (n + 31) / 32 * 32;
  return (uint32_t)(n < 64 ? 64 : n > 1024 ? 1024 : n);
}

const char *tr_intree_row_refusal(int64_t row, char *buf, size_t size) {
  if (row < 0) {
    snprintf(buf, size, "rows hold no negative count of elements; got row %lld", (long long)row);
    return buf;
  }
  if (row > INT32_MAX - 1024) { /* the kernels index a row with 32-bit ints */
    snprintf(buf, size, "rows hold at most %d elements; got row %lld", INT32_MAX - 1024, (long long)row);
    return buf;
  }
  return NULL;
}

tr_status *tr_intree_smem_fits(const tr_intree_built *k, const tr_call_spec *call, int64_t smem) {
  int64_t budget = call->facts.smem_budget;
  if (budget > 0 && smem > budget) {
    return TR_STATUS(TR_BACKEND, "kernel '%s' needs %lld bytes of shared memory a block; the device allows %lld",
                     k->key, (long long)smem, (long long)budget);
  }
  return NULL;
}

int64_t tr_intree_compiled_row(int64_t row) { return row > 0 ? row : 1; }

/* ---- specialisations and artifacts ---- */

static struct {
  tr_plat_mutex lock;
  atomic_uint_fast64_t compiled, from_cache, kernels, split_launches, copies;
  tr_artifact_cache cache;
} g;
static tr_plat_once g_once = TR_PLAT_ONCE_INIT;
static int g_lock_ok;

static void init_once(void) {
  tr_status *failed = tr_plat_mutex_init(&g.lock);
  g_lock_ok = failed == NULL;
  tr_status_destroy(&failed);
  tr_artifact_cache_default(&g.cache);
}

void tr__intree_count_split(void) { atomic_fetch_add_explicit(&g.split_launches, 1, memory_order_relaxed); }
void tr__intree_count_copy(void) { atomic_fetch_add_explicit(&g.copies, 1, memory_order_relaxed); }

tr_intree_stats tr_intree_get_stats(void) {
  tr_cuda_pool_stats pool = tr_cuda_pool_get_stats(NULL);
  tr_intree_stats s = {atomic_load(&g.compiled), atomic_load(&g.from_cache), tr_cuda_modules_loaded(),
                       atomic_load(&g.kernels), atomic_load(&g.split_launches), atomic_load(&g.copies),
                       pool.hits, pool.kept,
                       pool.released, pool.thread_ends, pool.orphans_freed};
  return s;
}

void tr_intree_reload_cache(void) {
  tr_plat_once_run(&g_once, init_once);
  if (g_lock_ok) tr_plat_mutex_lock(&g.lock);
  tr_artifact_cache_default(&g.cache);
  if (g_lock_ok) tr_plat_mutex_unlock(&g.lock);
}

tr_status *tr_intree_source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                                tr_intree_source *out) {
  memset(out, 0, sizeof(*out));
  if (!tr_intree_owns(type)) {
    return TR_STATUS(TR_SELECTION, "implementation '%s' is not an in-tree kernel: it has no source to compile",
                     type ? type->key : "(none)");
  }
  out->name = type->key;
  return ((const tr_intree_impl *)type->ctx)->family->source_for(type, call, arch, out);
}

int tr_intree_has_wide(const tr_intree_source *src, int32_t arch) {
  return src->wide_block > 0 && (src->wide_min_arch == 0 || arch >= src->wide_min_arch);
}

/* 90 for "sm_90a" (tr_intree_arch_name's form); -1 for another. */
static int32_t arch_number(const char *arch) {
  int n = -1;
  return sscanf(arch, "sm_%d", &n) == 1 ? (int32_t)n : -1;
}

void tr_intree_wide_source(const tr_intree_source *src, tr_intree_source *w) {
  *w = *src;
  size_t at = w->n_options; /* the -DTR_BLOCK= option, wherever the family put it */
  for (size_t i = 0; i < w->n_options; i++) {
    w->options[i] = w->option_text[i];
    if (strncmp(w->option_text[i], "-DTR_BLOCK=", 11) == 0) at = i;
  }
  if (at < w->n_options) snprintf(w->option_text[at], 64, "-DTR_BLOCK=%u", w->wide_block);
  else tr_intree_add_int(w, "-DTR_BLOCK=%lld", (long long)w->wide_block);
  if (w->wide_split) tr_intree_add_text(w, "%s", "-DTR_SPLIT");
  for (size_t i = 0; i < w->n_options; i++) { /* no register cap: few rows, latency */
    if (strncmp(w->option_text[i], "-DTR_MINB=", 10) == 0) snprintf(w->option_text[i], 64, "-DTR_MINB=1");
  }
}

tr_status *tr__intree_artifact(const char *arch, const tr_intree_source *src, tr_artifact *out) {
  tr_plat_once_run(&g_once, init_once);
  tr_artifact_source as = {src->name, src->source, arch, src->options, src->n_options, src->entry};
  int from_cache = 0;
  char *warning = NULL;
  tr_artifact_cache cache;
  if (g_lock_ok) tr_plat_mutex_lock(&g.lock);
  cache = g.cache;
  if (g_lock_ok) tr_plat_mutex_unlock(&g.lock);
  TR_RETURN_IF_ERROR(tr_artifact_build(&as, &cache, out, &from_cache, &warning));
  free(warning); /* the cache is best effort; the build went on */
  atomic_fetch_add(from_cache ? &g.from_cache : &g.compiled, 1);
  return NULL;
}

tr_status *tr_intree_build(const tr_kernel_type *type, const tr_call_spec *call, const char *arch, tr_artifact out[2],
                           size_t *n_out) {
  *n_out = 0;
  if (!tr_intree_owns(type)) {
    return TR_STATUS(TR_SELECTION, "implementation '%s' is not an in-tree kernel: it has no source to compile "
                     "(a plugin's kernel type is built in the process that launches it)", type->key);
  }
  if (call->type != type->interface->request) {
    return TR_STATUS(TR_SELECTION, "kernel '%s' takes a %s call spec, got a %s", type->key,
                     type->interface->request->name, call->type->name);
  }
  char reason[256];
  const char *refused = type->refusal(type, call, reason, sizeof(reason));
  if (refused != NULL) return TR_STATUS(TR_SELECTION, "kernel '%s' does not serve this call: %s", type->key, refused);
  tr_intree_source src;
  TR_RETURN_IF_ERROR(tr_intree_source_for(type, call, arch_number(arch), &src));
  if (src.source == NULL) return NULL; /* a library's kernels: nothing to compile */
  TR_RETURN_IF_ERROR(tr__intree_artifact(arch, &src, &out[0]));
  *n_out = 1;
  if (tr_intree_has_wide(&src, arch_number(arch))) {
    tr_intree_source w;
    tr_intree_wide_source(&src, &w);
    tr_status *status = tr__intree_artifact(arch, &w, &out[1]);
    if (status != NULL) {
      tr_artifact_clear(&out[0]);
      *n_out = 0;
      return status;
    }
    *n_out = 2;
  }
  return NULL;
}

/* ---- kernels ---- */

/* Programmatic dependent launch for in-tree kernels on sm_90 and later, unless
 * TILERUN_CUDA_OVERLAP=0 (read when a kernel is made). */
static int overlap_enabled(void) {
  const char *v = tr_plat_getenv("TILERUN_CUDA_OVERLAP");
  return v == NULL || strcmp(v, "0") != 0;
}

static tr_status *kernel_call(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out, size_t n_out) {
  const tr_intree_built *k = self;
  (void)n_out;
  if (tr_intree_numel(out[0]) == 0) return NULL; /* an empty output: nothing to compute (and no row count) */
  tr_cu_stream stream = tr_cu_current_stream(k->index);
  tr_cuda_pool_before_work(stream);
  tr_cu_ctx previous;
  TR_RETURN_IF_ERROR(tr_cu_enter_context(k->ctx, &previous));
  tr_status *status = k->impl->family->launch(k, in, n_in, out, stream);
  tr_cu_restore_context(k->ctx, previous);
  return status;
}

static size_t kernel_config(void *self, const tr_named_value **out) {
  tr_intree_built *k = self;
  *out = k->config;
  return k->n_config;
}

/* request_tune: the family's tuning with the kernel's context current, then its config again. */
static tr_status *kernel_tune(void *self, const tr_device *device) {
  tr_intree_built *k = self;
  (void)device; /* the kernel's own: one device per kernel */
  tr_cu_ctx previous;
  TR_RETURN_IF_ERROR(tr_cu_enter_context(k->ctx, &previous));
  tr_status *status = k->impl->family->tune(k);
  tr_cu_restore_context(k->ctx, previous);
  if (k->impl->family->describe != NULL) k->n_config = 4 + k->impl->family->describe(k);
  return status;
}

void tr__intree_with_context(tr_intree_built *k, void (*fn)(tr_intree_built *k)) {
  tr_cu_ctx previous = NULL;
  tr_status *entered = tr_cu_enter_context(k->ctx, &previous);
  if (entered == NULL) {
    fn(k);
    tr_cu_restore_context(k->ctx, previous);
  }
  tr_status_destroy(&entered);
}

static void kernel_release(void *self) {
  tr_intree_built *k = self;
  if (k->impl->family->release != NULL) k->impl->family->release(k);
  tr_value_clear(&k->config[0].value);
  tr_value_clear(&k->config[3].value);
  free(k);
}

/* The kernel's config: implementation (the key), threads a block, overlap, and the build
 * launched for fewer rows than SMs ("split": a row over a cluster, "wide": more threads a row,
 * "none"). */
static tr_status *set_config(tr_intree_built *k) {
  k->config[0].name = "implementation";
  TR_RETURN_IF_ERROR(tr_value_str(k->key, &k->config[0].value));
  k->config[1].name = "block";
  k->config[1].value = tr_value_int(k->block);
  k->config[2].name = "overlap"; /* launched with programmatic dependent launch */
  k->config[2].value = tr_value_bool(k->overlap);
  k->config[3].name = "few_rows";
  const char *few = k->wide.function == NULL ? "none" : k->wide_split ? "split" : "wide";
  tr_status *status = tr_value_str(few, &k->config[3].value);
  if (status != NULL) tr_value_clear(&k->config[0].value);
  k->n_config = 4;
  if (status == NULL && k->impl->family->describe != NULL) k->n_config += k->impl->family->describe(k);
  return status;
}

tr_status *tr_intree_kernel(const tr_kernel_type *self, const tr_call_spec *call, const tr_artifact *arts, size_t n,
                            tr_kernel *out) {
  tr_plat_once_run(&g_once, init_once);
  if (!g_lock_ok) return TR_STATUS(TR_BACKEND, "the in-tree kernels could not make their lock");
  if (strcmp(call->device.type, "cuda") != 0) {
    char dev[TR_DEVICE_FORMAT_MAX];
    tr_device_format(&call->device, dev, sizeof(dev));
    return TR_STATUS(TR_OP_NOT_AVAILABLE, "kernel '%s' runs on cuda devices; the call is on %s", self->key, dev);
  }
  if (!(call->facts_known || (call->stated_facts & TR_FACT_ARCH)) || call->facts.arch < 0) {
    return TR_STATUS(TR_BACKEND, "building kernel '%s': the device's architecture is not known", self->key);
  }
  int32_t index = call->device.index < 0 ? 0 : call->device.index;
  char arch[16];
  tr_intree_arch_name(call->facts.arch, arch, sizeof(arch));
  tr_intree_source src;
  TR_RETURN_IF_ERROR(tr_intree_source_for(self, call, call->facts.arch, &src));
  size_t want = src.source == NULL ? 0 : tr_intree_has_wide(&src, call->facts.arch) ? 2 : 1;
  for (size_t i = 0; i < n; i++) { /* artifacts from elsewhere must be this kernel's, for this card */
    if (strcmp(arts[i].name, self->key) != 0 || strcmp(arts[i].entry, src.entry) != 0 || strcmp(arts[i].arch, arch) != 0) {
      return TR_STATUS(TR_BACKEND, "kernel '%s' for %s was given an artifact of '%s' (entry %s) for %s", self->key,
                       arch, arts[i].name, arts[i].entry, arts[i].arch);
    }
  }
  if (n != want) {
    return TR_STATUS(TR_BACKEND, "kernel '%s' needs %zu artifacts, was given %zu", self->key, want, n);
  }
  tr_intree_built *k = calloc(1, sizeof(*k));
  if (k == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "kernel '%s'", self->key);
  k->impl = self->ctx;
  k->key = self->key;
  k->index = index;
  k->block = src.block;
  k->wide_threads = src.wide_block;
  k->wide_split = src.wide_split;
  k->sm_count = call->facts.sm_count > 0 ? call->facts.sm_count : 1;
  tr_cu_ctx previous = NULL;
  tr_status *status = tr_cu_enter_device(index, &k->ctx, &previous);
  if (status == NULL) {
    const tr_intree_family *fam = k->impl->family;
    if (n > 0) status = tr_cuda_module_load(index, &arts[0], fam->any_entry, fam->companion, &k->narrow);
    if (status == NULL && n > 1) status = tr_cuda_module_load(index, &arts[1], fam->any_entry, fam->companion, &k->wide);
    if (status == NULL) status = k->impl->family->prepare(call, k);
    if (status == NULL) status = tr__intree_load_copies(index, arch);
    tr_cu_restore_context(k->ctx, previous);
  }
  k->overlap = call->facts.arch >= 90 && n > 0 && k->narrow.awaits && (n < 2 || k->wide.awaits) && overlap_enabled();
  if (status == NULL) status = set_config(k);
  if (status != NULL) {
    if (k->impl->family->release != NULL) k->impl->family->release(k);
    free(k);
    return status;
  }
  out->self = k;
  out->call = kernel_call;
  out->config = kernel_config;
  out->release = kernel_release;
  if (k->impl->family->tune != NULL) out->request_tune = kernel_tune;
  atomic_fetch_add(&g.kernels, 1);
  return NULL;
}

/* The selector's factory: build here, then load. */
tr_status *tr__intree_factory(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out) {
  if (!(call->facts_known || (call->stated_facts & TR_FACT_ARCH)) || call->facts.arch < 0) {
    return TR_STATUS(TR_BACKEND, "building kernel '%s': the device's architecture is not known", self->key);
  }
  char arch[16];
  tr_intree_arch_name(call->facts.arch, arch, sizeof(arch));
  tr_artifact arts[2];
  size_t n = 0;
  TR_RETURN_IF_ERROR(tr_intree_build(self, call, arch, arts, &n));
  tr_status *status = tr_intree_kernel(self, call, arts, n, out);
  for (size_t i = 0; i < n; i++) tr_artifact_clear(&arts[i]);
  return status;
}
