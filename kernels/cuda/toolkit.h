/* toolkit.h: where the CUDA Toolkit's libraries that tilerun loads at run time (NVRTC, cuBLASLt)
 * are looked for, and the loading of the first that serves. */
#ifndef TILERUN_KERNELS_CUDA_TOOLKIT_H_
#define TILERUN_KERNELS_CUDA_TOOLKIT_H_

#include <stddef.h>

#include "platform/platform.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_CUDA_LIB_PLACES 5

/* The places to try for library `stem` ("libnvrtc"), in order. */
typedef struct tr_cuda_lib_places {
  char at[TR_CUDA_LIB_PLACES][1024];
  size_t n;
} tr_cuda_lib_places;

/* Fills `out` with: stem.so.13, stem.so.12 and, where `unversioned`, stem.so (these three by the
 * system loader's search), then $TILERUN_CUDA_PATH/lib64/stem.so.13 (unless that variable is
 * unset, empty or "none") and /usr/local/cuda/lib64/stem.so.13. Cannot fail. Thread-safe as
 * tr_plat_getenv is. */
void tr_cuda_lib_places_of(const char *stem, int unversioned, tr_cuda_lib_places *out);

/* Opens those places in order and returns the first library that loads and that `bind` accepts
 * (bind sets up what it needs from it and returns 1; else 0, having noted why); a place that
 * does not load gets note(the loader's text), a refused library is closed. NULL where none
 * serves. The library returned is the caller's. Thread-safe as far as `bind` and `note` are. */
tr_plat_lib *tr_cuda_lib_open_first(const char *stem, int unversioned, int (*bind)(tr_plat_lib *lib),
                                    void (*note)(const char *text));

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_TOOLKIT_H_ */
