/* nvrtc.h: CUDA C source to a cubin for a named architecture, through NVRTC (no GPU needed).
 *
 * libnvrtc is loaded at run time, on first use, so this builds and links with no CUDA Toolkit:
 * the first of "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so" (the loader's search path),
 * $TILERUN_CUDA_PATH/lib64/libnvrtc.so.13 (unless that variable is unset, empty or "none") and
 * /usr/local/cuda/lib64/libnvrtc.so.13 that loads and has every entry point used. The attempt is
 * made once per process; it is never retried and the library stays loaded. */
#ifndef TILERUN_KERNELS_NVRTC_H_
#define TILERUN_KERNELS_NVRTC_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compiled kernel image. Owned by the caller: free with tr_cubin_clear. */
typedef struct tr_cubin {
  uint8_t *data;
  size_t size;
  char *log; /* NVRTC's log, possibly empty; never NULL after a successful compile */
} tr_cubin;

/* Compiles `source` (named `name` in messages) for `arch` ("sm_90a", "sm_80"...), with extra
 * NVRTC options (e.g. "-DROW=4096"). A compile failure is a CompileError carrying the name, the
 * architecture and NVRTC's whole log; a bad architecture is a CompileError naming it; when
 * libnvrtc cannot be loaded it is a CompileError saying "NVRTC (libnvrtc) could not be loaded"
 * followed by the loader's text for each name tried. On failure *out is untouched. On success
 * the caller owns *out (tr_cubin_clear). Thread-safe (NVRTC programs are independent). */
tr_status *tr_nvrtc_compile(const char *name, const char *source, const char *arch,
                            const char *const *options, size_t n_options,
                            tr_cubin *out) TR_MUST_USE;

/* NVRTC's version as major*1000 + minor*10 (13.0 -> 13000); part of every cache key. -1 when
 * libnvrtc cannot be loaded (tr_nvrtc_compile then says why) or does not report its version.
 * Thread-safe. */
int tr_nvrtc_version(void);

/* Frees a cubin's storage and zeroes it. NULL allowed. */
void tr_cubin_clear(tr_cubin *cubin);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_NVRTC_H_ */
