/* self.c: where loaded code comes from (dladdr): tilerun's own, for finding an installed
 * tilerun's data beside its library, or a loaded library's (which libcuda a message names). */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

tr_status *tr_plat_code_path(const void *code, char *buf, size_t size) {
  if (buf == NULL || size == 0) return TR_STATUS(TR_VALUE, "tr_plat_code_path: no room for the path");
  buf[0] = '\0';
  Dl_info info;
  memset(&info, 0, sizeof(info));
  if (code == NULL || dladdr(code, &info) == 0 || info.dli_fname == NULL || info.dli_fname[0] == '\0') {
    return TR_STATUS(TR_IO, "the loader cannot say which file holds the code at %p (dladdr)", code);
  }
  char *resolved = realpath(info.dli_fname, NULL);
  const char *path = resolved != NULL ? resolved : info.dli_fname;
  size_t n = strlen(path);
  tr_status *status = NULL;
  if (n + 1 > size) status = TR_STATUS(TR_VALUE, "the path %s (%zu bytes) does not fit in %zu", path, n, size);
  else memcpy(buf, path, n + 1);
  free(resolved);
  return status;
}

tr_status *tr_plat_self_path(char *buf, size_t size) {
  return tr_plat_code_path((const void *)&tr_plat_self_path, buf, size);
}

tr_status *tr_plat_self_prefix(char *buf, size_t size) {
  TR_RETURN_IF_ERROR(tr_plat_self_path(buf, size));
  for (int up = 0; up < 2; up++) { /* <prefix>/lib/libtilerun.so.N -> <prefix>/lib -> <prefix> */
    char *slash = strrchr(buf, '/');
    if (slash == NULL) {
      buf[0] = '\0';
      return TR_STATUS(TR_IO, "tilerun's file path has no folder to stand in");
    }
    *slash = '\0';
  }
  if (buf[0] == '\0') snprintf(buf, size, "/");
  return NULL;
}
