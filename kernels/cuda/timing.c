/* timing.c: warm-up runs, then timed runs between an event pair. */
#include "kernels/cuda/timing.h"

#include <assert.h>

tr_status *tr_cuda_time_runs(tr_cuda_timed_run run, void *ctx, int warmups, int reps, tr_cu_stream stream,
                             tr_cu_event start, tr_cu_event end, float *us) {
  assert(warmups >= 0 && reps > 0);
  *us = 0.f;
  for (int r = 0; r < warmups + reps; r++) {
    if (r == warmups) TR_RETURN_IF_ERROR(tr_cu_event_record(start, stream));
    TR_RETURN_IF_ERROR(run(ctx, r, stream));
  }
  TR_RETURN_IF_ERROR(tr_cu_event_record(end, stream));
  float ms = 0.f;
  TR_RETURN_IF_ERROR(tr_cu_event_elapsed(start, end, &ms));
  *us = ms * 1000.f / (float)reps;
  return NULL;
}
