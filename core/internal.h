/* internal.h: helpers shared by the core type implementations; not part of the public API. */
#ifndef TILERUN_CORE_INTERNAL_H_
#define TILERUN_CORE_INTERNAL_H_

#include <stddef.h>
#include <string.h>

#include "tilerun/backend.h"
#include "tilerun/status.h"

/* Appends formatted text at buf + *used, as snprintf would, and adds the length the text needs to
 * *used even once buf is full, so a caller can measure with (NULL, 0) and then write. */
void tr__appendf(char *buf, size_t size, size_t *used, const char *fmt, ...) TR_PRINTF(4, 5);

/* A tr_kernel a plugin filled in (its builder or a kernel type's factory): 0 when its struct_size
 * is below TR_KERNEL_MIN_SIZE (the caller refuses it unread); else 1, with the members past its
 * struct_size cleared (absent). Cannot fail. */
static inline int tr__kernel_fits(tr_kernel *k) {
  if (k->struct_size < TR_KERNEL_MIN_SIZE) return 0;
  if (k->struct_size < sizeof(*k)) memset((char *)k + k->struct_size, 0, sizeof(*k) - k->struct_size);
  return 1;
}

#endif /* TILERUN_CORE_INTERNAL_H_ */
