/* version.c: the library's version (include/tilerun/version.h). */
#include "tilerun/version.h"

const char *tr_version(void) { return TILERUN_VERSION; }
