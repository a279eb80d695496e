/* cublaslt.h: row-major GEMMs through cuBLASLt (the CUDA Toolkit's libcublasLt), loaded at run
 * time through the platform layer like the driver and NVRTC: tilerun builds without it and a
 * GEMM where it is absent fails with a BackendError saying where it looked. Everything a call
 * needs (the matmul descriptor, the three layouts, the algorithm and its workspace) is made when
 * the GEMM is made, never at call time. */
#ifndef TILERUN_KERNELS_CUDA_CUBLASLT_H_
#define TILERUN_KERNELS_CUDA_CUBLASLT_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/driver.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Loads libcublasLt once per process (libcublasLt.so.13, .so.12, then under TILERUN_CUDA_PATH and
 * /usr/local/cuda/lib64); a BackendError naming each place tried where it cannot. Thread-safe. */
tr_status *tr_lt_load(void) TR_MUST_USE;

/* cuBLASLt's version (e.g. 130100), 0 when not loaded. */
size_t tr_lt_version(void);

/* The element types (float32 computes in float32 without TF32, as torch does by default; the
 * 16-bit types accumulate in float32). */
typedef enum tr_lt_type { TR_LT_FLOAT32, TR_LT_FLOAT16, TR_LT_BFLOAT16 } tr_lt_type;

/* d [m, n] = op(a) @ op(b), row-major and contiguous: a is [m, k] ([k, m] with trans_a), b is
 * [k, n] ([n, k] with trans_b). */
typedef struct tr_lt_shape {
  tr_lt_type type;
  int trans_a, trans_b;
  int64_t m, n, k;
} tr_lt_shape;

typedef struct tr_lt_gemm tr_lt_gemm;

/* The GEMM for device `index` (its context current): descriptors, layouts, cuBLASLt's top
 * heuristic algorithm and that algorithm's workspace. m, n, k at least 1. Errors: BackendError
 * (cuBLASLt absent, or it offers no algorithm, with its status), OutOfMemoryError. */
tr_status *tr_lt_gemm_new(int32_t index, const tr_lt_shape *shape, tr_lt_gemm **out) TR_MUST_USE;

/* Runs it on `stream` (the device's context current). */
tr_status *tr_lt_gemm_run(tr_lt_gemm *g, const void *a, const void *b, void *d, tr_cu_stream stream) TR_MUST_USE;

/* Times the top heuristic algorithms (at most `candidates`) on buffers of the GEMM's own (never the
 * caller's tensors: values spread over [-1, 1), in up to 8 sets of operands rotated so that about
 * 128 MB are read, as a model's layers each bring their own weight), each `reps` runs after a
 * warm-up, on `stream` outside any capture, and keeps the fastest (its workspace too).
 * Idempotent: a tuned GEMM returns at once. */
tr_status *tr_lt_gemm_tune(tr_lt_gemm *g, int candidates, int reps, tr_cu_stream stream) TR_MUST_USE;

/* What it runs: the algorithm's place in the heuristic's list (0: the top one), how many the
 * heuristic offered, its workspace bytes, and whether it was tuned. */
typedef struct tr_lt_choice {
  int index, offered, tuned;
  size_t workspace;
  float tuned_us; /* the winner's time per run when tuned, else 0 */
} tr_lt_choice;
tr_lt_choice tr_lt_gemm_choice(const tr_lt_gemm *g);

/* Fills `count` elements of `type` at `dst` (device memory; its context current) with values
 * spread over [-1, 1): what tuning times on (zeros draw less power and run at higher clocks than
 * real data, and would pick another algorithm). Blocking; for tuning, never on a call's path. */
tr_status *tr_lt_fill_random(tr_cu_ptr dst, size_t count, tr_lt_type type) TR_MUST_USE;

/* Accepts NULL. The device's context must be current (the workspace is freed). */
void tr_lt_gemm_destroy(tr_lt_gemm *g);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_CUBLASLT_H_ */
