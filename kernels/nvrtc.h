/* nvrtc.h: CUDA C source to a cubin for a named architecture, through NVRTC (no GPU needed). */
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
 * architecture and NVRTC's whole log; a bad architecture is a CompileError naming it. On failure
 * *out is untouched. Thread-safe (NVRTC programs are independent). */
tr_status *tr_nvrtc_compile(const char *name, const char *source, const char *arch,
                            const char *const *options, size_t n_options,
                            tr_cubin *out) TR_MUST_USE;

/* NVRTC's version as major*1000 + minor*10 (13.0 -> 13000); part of every cache key. */
int tr_nvrtc_version(void);

/* Frees a cubin's storage and zeroes it. NULL allowed. */
void tr_cubin_clear(tr_cubin *cubin);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_NVRTC_H_ */
