/* launch.c: grids over rows and elements, and a launch over rows. */
#include "kernels/cuda/launch.h"

void tr_cuda_rows_grid(int64_t rows, uint32_t rows_per_block, uint32_t *grid_x, uint32_t *grid_y) {
  int64_t blocks = rows <= 0 ? 0 : (rows + rows_per_block - 1) / rows_per_block;
  uint32_t gx = blocks > INT32_MAX ? (1u << 30) : (uint32_t)blocks;
  *grid_x = gx;
  *grid_y = gx == 0 ? 0 : (uint32_t)((blocks + gx - 1) / gx);
}

tr_status *tr_cuda_launch_rows(tr_cu_function function, const char *what, int64_t rows, uint32_t rows_per_block,
                               uint32_t threads, tr_cu_stream stream, void **args, int overlap) {
  uint32_t gx = 0, gy = 0;
  tr_cuda_rows_grid(rows, rows_per_block, &gx, &gy);
  if (gx == 0) return NULL;
  return tr_cu_launch_ex(function, what, gx, gy, threads, 0, stream, args, overlap);
}

uint32_t tr_cuda_elements_grid(int64_t n, int64_t per_block, int64_t cap) {
  int64_t blocks = n <= 0 ? 0 : (n + per_block - 1) / per_block;
  if (blocks > cap) blocks = cap;
  return (uint32_t)blocks;
}
