/* runtime.c: the runtime: the manifest, the registry filled once by discovery, the process
 * default target, and the device types backends brought. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "components/build/build.h"
#include "components/select/intree_table.h"
#include "components/settle/settle.h"
#include "components/validate/validate.h"
#include "kernels/cuda/driver.h"
#include "kernels/intree/intree.h"
#include "registry/discovery.h"
#include "runtime/internal.h"
#include "sharing/sharing.h"

static tr_status *select_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                                size_t reply_cap, size_t *reply_size);
static tr_status *build_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                               size_t reply_cap, size_t *reply_size);

static void default_warn(void *ctx, const char *line) {
  (void)ctx;
  fprintf(stderr, "tilerun: warning: %s\n", line);
}

void tr__runtime_warn(tr_runtime *rt, const char *fmt, ...) {
  char line[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  rt->warn(rt->warn_ctx, line);
}

tr_status *tr__runtime_hint(tr_runtime *rt, tr_status *status) {
  size_t n = tr_registry_failure_count(rt->registry);
  if (status != NULL && n == 0 && rt->searched[0] != '\0' && !atomic_exchange(&rt->hinted, 1)) {
    tr__runtime_warn(rt, "no backend was found, which may be why: %s: %s (looked for backend descriptors, *.yaml, in "
                     "%s: TILERUN_BACKEND_PATH's folders, then the install's lib/tilerun/backends; "
                     "docs/writing-a-backend.md)", tr_code_name(tr_status_code(status)), tr_status_message(status),
                     rt->searched);
    return status;
  }
  if (status == NULL || n == 0 || atomic_exchange(&rt->hinted, 1)) return status;
  tr__runtime_warn(rt, "%zu backend%s failed to load, which may be why: %s: %s (tr_load_failure_backend and "
                   "tr_load_failure_reason say which and why)", n, n == 1 ? "" : "s",
                   tr_code_name(tr_status_code(status)), tr_status_message(status));
  return status;
}

/* The options' arrays: each as long as its count says, with no NULL entry (each would be read). */
static tr_status *options_check(const tr_runtime_options *o) {
  if (o->n_backend_dirs > 0 && o->backend_dirs == NULL) {
    return TR_STATUS(TR_VALUE, "tr_runtime_new: options->backend_dirs is NULL with n_backend_dirs %zu",
                     o->n_backend_dirs);
  }
  for (size_t i = 0; o->backend_dirs != NULL && i < o->n_backend_dirs; i++) {
    if (o->backend_dirs[i] == NULL) return TR_STATUS(TR_VALUE, "tr_runtime_new: options->backend_dirs[%zu] is NULL", i);
  }
  if (o->n_builtins > 0 && (o->builtin_names == NULL || o->builtin_inits == NULL)) {
    return TR_STATUS(TR_VALUE, "tr_runtime_new: options->%s is NULL with n_builtins %zu",
                     o->builtin_names == NULL ? "builtin_names" : "builtin_inits", o->n_builtins);
  }
  for (size_t i = 0; i < o->n_builtins; i++) {
    if (o->builtin_names[i] == NULL) return TR_STATUS(TR_VALUE, "tr_runtime_new: options->builtin_names[%zu] is NULL", i);
    if (o->builtin_inits[i] == NULL) {
      return TR_STATUS(TR_VALUE, "tr_runtime_new: options->builtin_inits[%zu] (backend '%s') is NULL", i,
                       o->builtin_names[i]);
    }
  }
  return NULL;
}

static int manifest_declares(void *manifest, const char *op) { return tr_manifest_find(manifest, op) != NULL; }

tr_status *tr_runtime_new(const tr_runtime_options *options, tr_runtime **out) {
  TR__NOT_NULL("tr_runtime_new", out);
  *out = NULL;
  tr_runtime_options none;
  memset(&none, 0, sizeof(none));
  const tr_runtime_options *o = options ? options : &none;
  TR_RETURN_IF_ERROR(options_check(o));
  tr_runtime *rt = calloc(1, sizeof(*rt));
  if (rt == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "allocating a runtime");
  rt->warn = o->warn ? o->warn : default_warn;
  rt->warn_ctx = o->warn_ctx;
  if (o->n_builtins > 0) { /* copied: discovery runs later, at the first op */
    rt->builtin_names = calloc(o->n_builtins, sizeof(char *));
    rt->builtin_inits = calloc(o->n_builtins, sizeof(tr_backend_init_fn));
    if (rt->builtin_names == NULL || rt->builtin_inits == NULL) {
      free(rt->builtin_names);
      free(rt->builtin_inits);
      free(rt);
      return TR_STATUS(TR_OUT_OF_MEMORY, "copying the builtin backends");
    }
    memcpy(rt->builtin_names, o->builtin_names, o->n_builtins * sizeof(char *));
    memcpy(rt->builtin_inits, o->builtin_inits, o->n_builtins * sizeof(tr_backend_init_fn));
    rt->n_builtins = o->n_builtins;
  }
  tr_status *status = tr_plat_mutex_init(&rt->lock);
  if (status != NULL) {
    free(rt);
    return status;
  }
  const char *dir = o->manifest_dir;
  char installed[4096];
  if (dir == NULL || dir[0] == '\0') dir = tr_discovery_manifest_dir(installed, sizeof(installed));
  status = tr_intree_builds_new(TR_INTREE_BUILDS_MAX_ENTRIES, TR_INTREE_BUILDS_MAX_BYTES, &rt->intree_builds);
  if (status == NULL) status = tr_cuda_pool_new(&rt->cuda_pool);
  if (status == NULL) {
    status = tr_manifest_load_dir(dir, &rt->manifest);
    if (status != NULL && (o->manifest_dir == NULL || o->manifest_dir[0] == '\0')) {
      status = tr_status_append(status, " (the manifest folder by default, from %s; give manifest_dir or set "
                                "TILERUN_MANIFEST_DIR)", tr_discovery_manifest_dir_source());
    }
  }
  if (status == NULL) {
    size_t n = strlen(dir) + 1;
    if ((rt->manifest_dir = malloc(n)) != NULL) memcpy(rt->manifest_dir, dir, n);
    else status = TR_STATUS(TR_OUT_OF_MEMORY, "copying the manifest folder's name");
  }
  if (status == NULL) status = tr_registry_new(rt->warn, rt->warn_ctx, &rt->registry);
  if (status == NULL) {
    tr_registry_set_interface_finder(rt->registry, tr_select_intree_interface, NULL);
    tr_registry_set_load_check(rt->registry, tr_select_intree_load_check, NULL);
    tr_registry_set_op_check(rt->registry, manifest_declares, rt->manifest);
  }
  if (status == NULL && o->backend_dirs != NULL) {
    rt->backend_dirs = calloc(o->n_backend_dirs + 1, sizeof(char *));
    if (rt->backend_dirs == NULL) status = TR_STATUS(TR_OUT_OF_MEMORY, "copying backend dirs");
    for (size_t i = 0; status == NULL && i < o->n_backend_dirs; i++) {
      size_t n = strlen(o->backend_dirs[i]) + 1;
      if ((rt->backend_dirs[i] = malloc(n)) == NULL) {
        status = TR_STATUS(TR_OUT_OF_MEMORY, "copying backend dirs");
        break;
      }
      memcpy(rt->backend_dirs[i], o->backend_dirs[i], n);
      rt->n_backend_dirs = i + 1;
    }
  }
  if (status == NULL) {
    tr_pipeline_config config;
    const char *file = o->pipeline_file ? o->pipeline_file : tr_plat_getenv("TILERUN_PIPELINE");
    if (file != NULL && file[0] != '\0') status = tr_pipeline_config_load(file, &config);
    else tr_pipeline_config_default(&config);
    tr_component_handler handlers[TR_COMPONENT_COUNT] = {tr_validate_handle, tr_settle_handle, select_handle,
                                                         build_handle, tr_launch_handle};
    rt->launch_ctx = (tr_launch_context){rt->registry, 1, NULL, NULL, NULL}; /* by address, in this process */
    void *contexts[TR_COMPONENT_COUNT] = {rt->manifest, rt->registry, rt, rt, &rt->launch_ctx};
    if (status == NULL) status = tr_pipeline_new(&config, handlers, contexts, &rt->pipeline);
    if (status == NULL) rt->launch_placement = tr_pipeline_placement(rt->pipeline, TR_COMPONENT_LAUNCH);
  }
  if (status != NULL) {
    tr_runtime_destroy(&rt);
    return status;
  }
  *out = rt;
  return NULL;
}

void tr_runtime_destroy(tr_runtime **runtime_p) {
  if (runtime_p == NULL || *runtime_p == NULL) return;
  tr_runtime *rt = *runtime_p;
  *runtime_p = NULL;
  tr_pipeline_destroy(&rt->pipeline); /* its actors read the manifest, registry and selectors */
  tr_select_table_destroy(&rt->select_table);
  tr_intree_builds_destroy(&rt->intree_builds);
  tr_cuda_pool_destroy(&rt->cuda_pool); /* its kept blocks now; the rest as its outputs are freed */
  tr_manifest_destroy(&rt->manifest);
  free(rt->manifest_dir);
  tr_registry_destroy(&rt->registry);
  tr_status_destroy(&rt->discovery_failure);
  if (rt->backend_dirs != NULL) tr_plat_free_names(&rt->backend_dirs, rt->n_backend_dirs);
  free(rt->builtin_names);
  free(rt->builtin_inits);
  tr_plat_mutex_destroy(&rt->lock);
  free(rt);
}

static tr_status *facts_of(void *ctx, const tr_device *device, tr_device_facts *out) {
  return tr_device_facts_of(ctx, device, out);
}

static tr_status *make_selectors(tr_runtime *rt) {
  return tr_select_table_new_intree(rt->registry, facts_of, rt, &rt->select_table);
}

/* The select component's handler: the runtime's table, made at discovery (before any op can
 * call select). */
static tr_status *select_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                                size_t reply_cap, size_t *reply_size) {
  tr_runtime *rt = ctx;
  if (rt->select_table == NULL) return TR_STATUS(TR_TRANSPORT, "select was asked before backend discovery");
  return tr_select_handle(rt->select_table, request, request_size, reply, reply_cap, reply_size);
}

/* The build component's handler: the in-tree kernels of the same table. */
static tr_status *build_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                               size_t reply_cap, size_t *reply_size) {
  tr_runtime *rt = ctx;
  if (rt->select_table == NULL) return TR_STATUS(TR_TRANSPORT, "build was asked before backend discovery");
  return tr_build_handle(rt->select_table, request, request_size, reply, reply_cap, reply_size);
}

tr_status *tr__runtime_discover(tr_runtime *rt) {
  tr_plat_mutex_lock(&rt->lock);
  tr_status *status = NULL;
  if (!rt->discovered) {
    for (size_t i = 0; i < rt->n_builtins && !rt->builtins_loaded; i++) {
      tr_registry_load_builtin(rt->registry, rt->builtin_names[i], rt->builtin_inits[i]);
    }
    rt->builtins_loaded = 1;
    char **dirs = rt->backend_dirs;
    size_t n_dirs = rt->n_backend_dirs;
    char **searched = NULL;
    if (dirs == NULL) {
      status = tr_backend_search_path(&searched, &n_dirs);
      dirs = searched;
    }
    tr_discovery *found = NULL;
    if (status == NULL) status = tr_backend_discover((const char *const *)dirs, n_dirs, &found);
    if (status == NULL) status = tr_registry_load_all(rt->registry, found);
    if (status == NULL && tr_registry_targets(rt->registry, NULL, NULL, 0) == 0) { /* for the hint */
      size_t used = 0;
      for (size_t i = 0; i < n_dirs && used + 1 < sizeof(rt->searched); i++) {
        int w = snprintf(rt->searched + used, sizeof(rt->searched) - used, "%s%s", i ? ", " : "", dirs[i]);
        if (w < 0) break;
        used += (size_t)w;
      }
      if (n_dirs == 0) snprintf(rt->searched, sizeof(rt->searched), "no folder (an empty search path)");
    }
    if (status == NULL && rt->select_table == NULL) status = make_selectors(rt);
    tr_discovery_destroy(&found);
    if (searched != NULL) tr_discovery_free_dirs(&searched, n_dirs);
    /* Once, whatever happened: a failure here (out of memory) is kept and given to every later
     * caller, never a second load of the backends. */
    rt->discovered = 1;
    rt->discovery_failure = status;
  }
  status = rt->discovery_failure == NULL ? NULL
           : TR_STATUS(tr_status_code(rt->discovery_failure), "%s", tr_status_message(rt->discovery_failure));
  tr_plat_mutex_unlock(&rt->lock);
  return status;
}

size_t tr_registered_targets(tr_runtime *rt, const char *op_name, const char **names, size_t max) {
  if (rt == NULL) return 0;
  if (names == NULL) max = 0; /* the count only */
  tr_status *status = tr__runtime_discover(rt);
  if (status != NULL) {
    tr_status_destroy(&status);
    return 0;
  }
  return tr_registry_targets(rt->registry, op_name, names, max);
}

tr_status *tr_set_default_target(tr_runtime *rt, const char *target) {
  TR__NOT_NULL("tr_set_default_target", rt);
  TR_RETURN_IF_ERROR(tr__runtime_discover(rt));
  const char *settled = NULL;
  if (target != NULL) {
    tr_device any = {"cpu", TR_DEVICE_NO_INDEX};
    tr_status *status = tr_registry_settle(rt->registry, target, NULL, &any, &settled);
    if (status != NULL) return tr__runtime_hint(rt, status); /* the spec's UnknownTargetError */
  }
  tr_plat_mutex_lock(&rt->lock);
  rt->default_target = settled;
  tr_plat_mutex_unlock(&rt->lock);
  return NULL;
}

const char *tr_default_target(tr_runtime *rt) {
  if (rt == NULL) return NULL;
  tr_plat_mutex_lock(&rt->lock);
  const char *target = rt->default_target;
  tr_plat_mutex_unlock(&rt->lock);
  return target;
}

size_t tr_load_failure_count(tr_runtime *rt) {
  if (rt == NULL) return 0;
  tr_status *status = tr__runtime_discover(rt);
  tr_status_destroy(&status);
  return tr_registry_failure_count(rt->registry);
}

const char *tr_load_failure_backend(tr_runtime *rt, size_t i) {
  const tr_load_failure *f = rt != NULL ? tr_registry_failure_at(rt->registry, i) : NULL;
  return f ? f->backend : NULL;
}

const char *tr_load_failure_reason(tr_runtime *rt, size_t i) {
  const tr_load_failure *f = rt != NULL ? tr_registry_failure_at(rt->registry, i) : NULL;
  return f ? f->reason : NULL;
}

tr_status *tr_device_facts_of(tr_runtime *rt, const tr_device *device, tr_device_facts *out) {
  TR__NOT_NULL("tr_device_facts_of", rt);
  TR__NOT_NULL("tr_device_facts_of", device);
  TR__NOT_NULL("tr_device_facts_of", out);
  TR_RETURN_IF_ERROR(tr__runtime_discover(rt));
  if (strcmp(device->type, "cuda") == 0) return tr__cuda_facts(device, out);
  return tr_registry_device_facts(rt->registry, device, out);
}

tr_status *tr_cuda_set_stream(int32_t device_index, void *stream) { return tr_cu_set_stream(device_index, stream); }

void *tr_cuda_stream(int32_t device_index) {
  void *s = tr_cu_current_stream(device_index);
  return s == TR_CU_PER_THREAD_STREAM ? NULL : s;
}

void tr_cuda_trim(tr_runtime *runtime) {
  if (runtime != NULL) tr_cuda_pool_trim(runtime->cuda_pool);
}

int tr_runtime_launch_remote(const tr_runtime *runtime) {
  return runtime != NULL && runtime->launch_placement == TR_PLACE_PROCESS;
}

tr_status *tr_alloc_shared(size_t bytes, void **out) {
  TR__NOT_NULL("tr_alloc_shared", out);
  return tr_share_alloc(bytes, out);
}

void tr_free_shared(void *data) { tr_share_free(data); }

uint64_t tr_now_ns(void) { return tr_plat_now_ns(); }
