/* lib.c: loading shared objects and finding their symbols (dlopen, dlsym) for POSIX. */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

struct tr_plat_lib {
  void *handle;
  char *path; /* owned: the path given to tr_plat_lib_open */
};

/* The loader's text for the last failure on this thread (glibc keeps it per thread). */
static const char *tr__plat_dlerror(void) {
  const char *text = dlerror();
  return text != NULL ? text : "no reason given by the loader";
}

tr_status *tr_plat_lib_open(const char *path, tr_plat_lib **out) {
  *out = NULL;
  if (path == NULL || path[0] == '\0') {
    return TR_STATUS(TR_IO, "cannot load shared object '%s': the path is empty",
                     path == NULL ? "(null)" : path);
  }
  tr_plat_lib *lib = calloc(1, sizeof *lib);
  size_t path_len = strlen(path);
  char *path_copy = malloc(path_len + 1);
  if (lib == NULL || path_copy == NULL) {
    free(lib);
    free(path_copy);
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot load shared object '%s': out of memory", path);
  }
  memcpy(path_copy, path, path_len + 1);
  lib->path = path_copy;
  /* a file (not a name the loader searches for) is checked first: a truncated one would kill
   * the process inside dlopen */
  tr_status *bad = strchr(path, '/') != NULL ? tr_plat_lib_check(path) : NULL;
  if (bad != NULL) {
    free(lib->path);
    free(lib);
    return bad;
  }
  dlerror(); /* forget any earlier failure */
  lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib->handle == NULL) {
    tr_status *status =
        TR_STATUS(TR_IO, "cannot load shared object '%s': %s", path, tr__plat_dlerror());
    free(lib->path);
    free(lib);
    return status;
  }
  *out = lib;
  return NULL;
}

void *tr_plat_lib_symbol(tr_plat_lib *lib, const char *name) {
  return dlsym(lib->handle, name);
}

tr_status *tr_plat_lib_find(tr_plat_lib *lib, const char *name, void **out) {
  *out = NULL;
  dlerror(); /* forget any earlier failure */
  void *address = dlsym(lib->handle, name);
  if (address == NULL) {
    /* dlerror is NULL when the symbol exists and its value is NULL; that is still unusable. */
    const char *text = dlerror();
    return TR_STATUS(TR_IO, "symbol '%s' not found in shared object '%s': %s", name, lib->path,
                     text != NULL ? text : "its address is NULL");
  }
  *out = address;
  return NULL;
}

tr_status *tr_plat_lib_bind(tr_plat_lib *lib, const tr_plat_lib_entry *symbols, size_t n, void *table) {
  _Static_assert(sizeof(void *) == sizeof(void (*)(void)), "function and data pointers differ");
  for (size_t i = 0; i < n; i++) {
    void *address = NULL;
    TR_RETURN_IF_ERROR(tr_plat_lib_find(lib, symbols[i].name, &address));
    memcpy((char *)table + symbols[i].offset, &address, sizeof(address));
  }
  return NULL;
}

const char *tr_plat_lib_path(const tr_plat_lib *lib) { return lib->path; }

void tr_plat_lib_close(tr_plat_lib **lib_p) {
  if (lib_p == NULL || *lib_p == NULL) return;
  tr_plat_lib *lib = *lib_p;
  /* A dlclose failure leaves nothing the caller could do; the handle is gone either way. */
  (void)dlclose(lib->handle);
  free(lib->path);
  free(lib);
  *lib_p = NULL;
}
