/* mainjob.h: the main job's workload runner: each manifest op's workload rows through the
 * runtime (cuda where there is a GPU, else cpu), timed against the roofline, checked against the
 * CPU backend. */
#ifndef TILERUN_TOOLS_MAINJOB_H_
#define TILERUN_TOOLS_MAINJOB_H_

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_mainjob_device { TR_MAINJOB_AUTO, TR_MAINJOB_CPU, TR_MAINJOB_CUDA } tr_mainjob_device;

typedef struct tr_mainjob_options {
  const char *manifest_dir;
  const char *pipeline;      /* a pipeline file, or NULL */
  tr_mainjob_device device;  /* auto: cuda:0 when there is a cuda device, else cpu */
  int smallest;              /* each op's smallest row (by roofline bytes) only */
  double max_bytes;          /* cpu rows moving more are skipped; cuda rows are not checked */
  double max_flops;          /* cpu rows computing more are skipped */
  const char *ops;           /* only these ops' rows: names separated by commas; NULL: every op */
  const char *target;        /* the default target of every row (tr_set_default_target), or NULL */
} tr_mainjob_options;

/* Runs every op's workload rows (or each op's smallest) through tr_op_call: on cuda:0 where
 * there is a GPU and the op has in-tree kernels, else on cpu tensors. Prints, one line per row as
 * it completes: op, row, device, target, implementation, build time (the first call), call time
 * (a memo hit), achieved GB/s and GFLOP/s from the roofline (on cuda with the share of the
 * device's copy rate, measured first), and on cuda the error against the CPU backend's result on
 * the same inputs. A row that fails, or whose error is over its dtype's tolerance, is counted and
 * printed with its error; a skipped row says why. Returns 0 when no row failed, 1 otherwise (a
 * manifest declaring no op included), 2
 * when `ops` names an op the manifest does not have or `target` a target no backend registered
 * (printed to `err`, nothing run). */
int tr_mainjob_run(const tr_mainjob_options *options, FILE *out, FILE *err);

/* Checks that each comma-separated name of `ops` (NULL: none to check) is an op of the manifest at
 * `manifest_dir`, so a caller can refuse the list before it prints anything. Returns 0 when they
 * all are, or when the manifest does not load (tr_mainjob_run reports that); 2 when one is not,
 * printing the first such name to `err` as tr_mainjob_run does. */
int tr_mainjob_check_ops(const char *manifest_dir, const char *ops, FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TOOLS_MAINJOB_H_ */
