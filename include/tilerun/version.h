/* version.h: the version of tilerun these headers come with, and the library's own. Semantic
 * versioning: the library's soname carries the major version (libtilerun.so.0). */
#ifndef TILERUN_VERSION_H_
#define TILERUN_VERSION_H_

#ifdef __cplusplus
extern "C" {
#endif

#define TILERUN_VERSION_MAJOR 0
#define TILERUN_VERSION_MINOR 4
#define TILERUN_VERSION_PATCH 0
#define TILERUN_VERSION "0.4.0"
/* One number for comparisons: 400 for 0.4.0. */
#define TILERUN_VERSION_NUMBER (TILERUN_VERSION_MAJOR * 10000 + TILERUN_VERSION_MINOR * 100 + TILERUN_VERSION_PATCH)

/* The loaded library's version ("0.4.0"), which may be newer than the headers' TILERUN_VERSION
 * (a program built against older headers). A static string; cannot fail. */
const char *tr_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_VERSION_H_ */
