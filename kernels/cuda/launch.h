/* launch.h: the launch geometry the in-tree kernels share: a grid over rows, a grid over
 * elements capped per SM. Thread-safe; each launch is the driver's (tr_cu_launch_ex). */
#ifndef TILERUN_KERNELS_CUDA_LAUNCH_H_
#define TILERUN_KERNELS_CUDA_LAUNCH_H_

#include <stdint.h>

#include "kernels/cuda/driver.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The grid for `rows` rows, `rows_per_block` a block: x up to 2^30 blocks, the rest in y
 * (gx * gy >= blocks). 0 blocks for no rows. Cannot fail. */
void tr_cuda_rows_grid(int64_t rows, uint32_t rows_per_block, uint32_t *grid_x, uint32_t *grid_y);

/* Launches `function` over `rows` rows (nothing for none) with `threads` threads a block on
 * `stream`; `overlap`: with programmatic dependent launch. The driver's error names `what`. */
tr_status *tr_cuda_launch_rows(tr_cu_function function, const char *what, int64_t rows, uint32_t rows_per_block,
                               uint32_t threads, tr_cu_stream stream, void **args, int overlap) TR_MUST_USE;

/* Blocks for `n` elements, `per_block` a block, at most `cap` (a grid-stride kernel covers the
 * rest); 0 for none. Cannot fail. */
uint32_t tr_cuda_elements_grid(int64_t n, int64_t per_block, int64_t cap);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_LAUNCH_H_ */
