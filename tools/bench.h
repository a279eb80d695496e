/* bench.h: `tilerun bench pipeline`: the cost of the miss path through each placement, the hit
 * path, and the raw ZeroMQ round trip of each transport, measured in one run. */
#ifndef TILERUN_TOOLS_BENCH_H_
#define TILERUN_TOOLS_BENCH_H_

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* `self`: this program's path (to start `tilerun serve` for the process placements). Prints a
 * table; returns 0, or 1 when a measurement failed. */
int tr_bench_pipeline(const char *self, const char *manifest_dir, long iters, FILE *out, FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TOOLS_BENCH_H_ */
