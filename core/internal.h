/* internal.h: helpers shared by the core type implementations; not part of the public API. */
#ifndef TILERUN_CORE_INTERNAL_H_
#define TILERUN_CORE_INTERNAL_H_

#include <stddef.h>

#include "tilerun/status.h"

/* Appends formatted text at buf + *used, as snprintf would, and adds the length the text needs to
 * *used even once buf is full, so a caller can measure with (NULL, 0) and then write. */
void tr__appendf(char *buf, size_t size, size_t *used, const char *fmt, ...) TR_PRINTF(4, 5);

#endif /* TILERUN_CORE_INTERNAL_H_ */
