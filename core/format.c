/* format.c: the snprintf-style appender behind every tr_*_format function. */
#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"

void tr__appendf(char *buf, size_t size, size_t *used, const char *fmt, ...) {
  size_t at = *used < size ? *used : size;
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(buf != NULL ? buf + at : NULL, buf != NULL ? size - at : 0, fmt, args);
  va_end(args);
  if (n > 0) *used += (size_t)n;
}
