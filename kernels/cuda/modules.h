/* modules.h: cubins loaded once per device and artifact, and the entries tilerun looks for in
 * them. Thread-safe; nothing here compiles (kernels/artifact.h makes the cubins). */
#ifndef TILERUN_KERNELS_CUDA_MODULES_H_
#define TILERUN_KERNELS_CUDA_MODULES_H_

#include <stdint.h>

#include "kernels/artifact.h"
#include "kernels/cuda/driver.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one loaded artifact gives: its entry, its "<entry>_any" entry (for pointers of any
 * alignment; NULL where it has none), and whether its kernels begin by waiting for the previous
 * kernel (the marker entry `tr_awaits_previous_kernel` of kernels/src/common.cuh), and so may be
 * launched overlapped (tr_cu_launch_ex): an artifact built from sources without it never is. */
typedef struct tr_cuda_loaded {
  tr_cu_function function;
  tr_cu_function any;
  int awaits;
  tr_cu_function companion; /* a second kernel of the module ("<entry><suffix>"), or NULL */
} tr_cuda_loaded;

/* Loads `art` on device `index` (whose context the caller made current) the first time this
 * device sees its key, and returns its entries; `want_any`: look for the "<entry>_any" entry too
 * (else out->any is NULL, and the driver is not asked for a name the source does not define);
 * `companion`: a suffix naming a second kernel of the module ("<entry><companion>", in
 * out->companion; a BackendError where the module lacks it), or NULL. The driver's error (a
 * BackendError naming the kernel) or OutOfMemoryError; nothing is kept then. Modules stay loaded
 * for the process's life. */
tr_status *tr_cuda_module_load(int32_t index, const tr_artifact *art, int want_any, const char *companion,
                               tr_cuda_loaded *out) TR_MUST_USE;

/* Modules loaded so far in this process (once per device and artifact). */
uint64_t tr_cuda_modules_loaded(void);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_MODULES_H_ */
