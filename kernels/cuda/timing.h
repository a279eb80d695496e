/* timing.h: microseconds per run of work queued on a stream, timed between two events after
 * warm-up runs; what tuning compares candidates by (never on a call's path). */
#ifndef TILERUN_KERNELS_CUDA_TIMING_H_
#define TILERUN_KERNELS_CUDA_TIMING_H_

#include "kernels/cuda/driver.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Warm-up runs tuning makes before the timed ones. */
#define TR_CUDA_TUNE_WARMUPS 2

/* One run: queues the work on `stream`; `rep` counts runs from 0, the warm-ups first (a caller
 * rotates its buffers by it). NULL on success. */
typedef tr_status *(*tr_cuda_timed_run)(void *ctx, int rep, tr_cu_stream stream);

/* Calls run(ctx, r, stream) for r = 0 .. warmups + reps - 1 (warmups >= 0, reps >= 1: asserted),
 * records `start` before run `warmups` and `end` after the last, waits for `end`, and sets *us to
 * the microseconds per timed run. `start` and `end` are the caller's events (tr_cu_event_new),
 * reusable across calls; the device's context must be current. Fails with run's first error, or
 * the driver's (recording, waiting), *us then 0. Thread-safe as far as `run` is. */
tr_status *tr_cuda_time_runs(tr_cuda_timed_run run, void *ctx, int warmups, int reps, tr_cu_stream stream,
                             tr_cu_event start, tr_cu_event end, float *us) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_CUDA_TIMING_H_ */
