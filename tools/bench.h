/* bench.h: `tilerun bench pipeline`: the cost of the miss path through each placement, the hit
 * path, and the raw ZeroMQ round trip of each transport, measured in one run. */
#ifndef TILERUN_TOOLS_BENCH_H_
#define TILERUN_TOOLS_BENCH_H_

#include <stddef.h>
#include <stdio.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `self`: this program's path (to start `tilerun serve` for the process placements). Prints a
 * table; returns 0, or 1 when a measurement failed. */
int tr_bench_pipeline(const char *self, const char *manifest_dir, long iters, FILE *out, FILE *err);

/* `n` (at most 8) tcp endpoints on `host` (e.g. "127.0.0.1") whose ports the system hands out as
 * free now, as "tcp://HOST:PORT", all different. A host that cannot be bound is the bind's error. */
tr_status *tr_bench_free_tcp_endpoints(const char *host, size_t n, char out[][64]) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TOOLS_BENCH_H_ */
