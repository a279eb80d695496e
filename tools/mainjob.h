/* mainjob.h: the main job's workload runner: each manifest op's workload rows through the
 * runtime on the default device, with timings against the roofline. */
#ifndef TILERUN_TOOLS_MAINJOB_H_
#define TILERUN_TOOLS_MAINJOB_H_

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs, for every op, its smallest workload row (by roofline bytes) or, with `all_rows`, every
 * row up to `max_bytes` of roofline traffic, on cpu tensors through tr_op_call: prints op, row,
 * target, build time, call time and achieved bandwidth. A row that fails is printed with its
 * error and counted. `pipeline`: a pipeline file, or NULL. Returns 0 when every row ran, 1
 * otherwise. */
int tr_mainjob_run(const char *manifest_dir, const char *pipeline, int all_rows, double max_bytes,
                   FILE *out, FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TOOLS_MAINJOB_H_ */
