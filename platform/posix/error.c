/* error.c: the system's text for an errno value, thread-safe, for the POSIX platform layer. */
/* The XSI strerror_r (returning int): no _GNU_SOURCE in this file. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "platform/posix/internal.h"

const char *tr__plat_errtext(int err, char *buf, size_t size) {
  if (size == 0) return buf;
  buf[0] = '\0';
  if (strerror_r(err, buf, size) != 0 || buf[0] == '\0') snprintf(buf, size, "error %d", err);
  return buf;
}
