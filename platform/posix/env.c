/* env.c: environment variables (getenv, setenv, unsetenv) for the POSIX platform layer. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"
#include "platform/posix/internal.h"

const char *tr_plat_getenv(const char *name) { return getenv(name); }

tr_status *tr_plat_setenv(const char *name, const char *value) {
  if (name == NULL || name[0] == '\0' || strchr(name, '=') != NULL) {
    return TR_STATUS(TR_VALUE, "environment variable name '%s' is not valid: it must be "
                     "non-empty and contain no '='", name == NULL ? "(null)" : name);
  }
  int rc = value == NULL ? unsetenv(name) : setenv(name, value, 1);
  if (rc != 0) {
    int err = errno;
    char text[TR__PLAT_ERRTEXT_SIZE];
    tr__plat_errtext(err, text, sizeof text);
    if (value == NULL) {
      return TR_STATUS(err == ENOMEM ? TR_OUT_OF_MEMORY : TR_INTERNAL,
                       "cannot unset environment variable '%s': %s", name, text);
    }
    return TR_STATUS(err == ENOMEM ? TR_OUT_OF_MEMORY : TR_INTERNAL,
                     "cannot set environment variable '%s' to '%s': %s", name, value, text);
  }
  return NULL;
}
