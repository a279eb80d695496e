/* modules.c: a list of the modules loaded, per device and artifact key, under one lock. */
#include "kernels/cuda/modules.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "platform/platform.h"

typedef struct module_entry {
  int32_t index;
  uint64_t key[2];
  tr_cu_module module;
  tr_cuda_loaded loaded;
  struct module_entry *next;
} module_entry;

static tr_plat_mutex g_lock;
static int g_lock_ok;
static module_entry *g_modules;
static atomic_uint_fast64_t g_loaded;
static tr_plat_once g_once = TR_PLAT_ONCE_INIT;

static void init_once(void) {
  tr_status *failed = tr_plat_mutex_init(&g_lock);
  g_lock_ok = failed == NULL;
  tr_status_destroy(&failed);
}

tr_status *tr_cuda_module_load(int32_t index, const tr_artifact *art, int want_any, const char *companion,
                               tr_cuda_loaded *out) {
  *out = (tr_cuda_loaded){NULL, NULL, 0, NULL};
  TR_RETURN_IF_ERROR(tr_cu_load()); /* once loaded, a cheap check */
  tr_plat_once_run(&g_once, init_once);
  if (!g_lock_ok) return TR_STATUS(TR_OUT_OF_MEMORY, "the cuda module list's lock could not be made");
  tr_plat_mutex_lock(&g_lock);
  tr_status *status = NULL;
  module_entry *m = g_modules;
  while (m != NULL && !(m->index == index && m->key[0] == art->key[0] && m->key[1] == art->key[1])) m = m->next;
  if (m == NULL) {
    m = calloc(1, sizeof(*m));
    if (m == NULL) status = TR_STATUS(TR_OUT_OF_MEMORY, "a module entry for kernel '%s'", art->name);
    if (status == NULL) status = tr_cu_module_load(art->cubin, art->name, art->entry, &m->module, &m->loaded.function);
    if (status == NULL) {
      if (want_any) {
        char entry[80];
        snprintf(entry, sizeof(entry), "%s_any", art->entry);
        tr_cu_module_entry(m->module, entry, &m->loaded.any);
      }
      if (companion != NULL) {
        char entry[80];
        snprintf(entry, sizeof(entry), "%s%s", art->entry, companion);
        if (!tr_cu_module_entry(m->module, entry, &m->loaded.companion)) {
          status = TR_STATUS(TR_BACKEND, "kernel '%s' has no entry %s", art->name, entry);
        }
      }
    }
    if (status == NULL) {
      tr_cu_function marker;
      m->loaded.awaits = tr_cu_module_entry(m->module, "tr_awaits_previous_kernel", &marker);
      m->index = index;
      m->key[0] = art->key[0];
      m->key[1] = art->key[1];
      m->next = g_modules;
      g_modules = m;
      atomic_fetch_add(&g_loaded, 1);
    } else {
      free(m);
      m = NULL;
    }
  }
  if (m != NULL) *out = m->loaded;
  tr_plat_mutex_unlock(&g_lock);
  return status;
}

uint64_t tr_cuda_modules_loaded(void) { return atomic_load(&g_loaded); }
