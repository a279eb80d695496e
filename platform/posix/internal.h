/* internal.h: helpers shared by the POSIX files of the platform layer; not part of its API. */
#ifndef TILERUN_PLATFORM_POSIX_INTERNAL_H_
#define TILERUN_PLATFORM_POSIX_INTERNAL_H_

#include <stddef.h>

/* Room for any system error text, NUL included. */
#define TR__PLAT_ERRTEXT_SIZE 128

/* Writes the system's text for errno value `err` ("No such file or directory") into buf, always
 * NUL-terminated, and returns buf. Cannot fail: an unknown value reads "error <n>". Thread-safe
 * (unlike strerror). */
const char *tr__plat_errtext(int err, char *buf, size_t size);

#endif /* TILERUN_PLATFORM_POSIX_INTERNAL_H_ */
