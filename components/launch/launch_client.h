/* launch_client.h: the runtime's side of the launch component: a call (a kernel by address, or
 * an op by descriptor, on tensors) or an ask of the op there (tune, config) in, its answer out,
 * through the pipeline in whatever placement it has. */
#ifndef TILERUN_COMPONENTS_LAUNCH_CLIENT_H_
#define TILERUN_COMPONENTS_LAUNCH_CLIENT_H_

#include "components/launch/launch.h"
#include "components/pipeline/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A request to launch. With `kernel`, a call by address (inline and thread placements); else by
 * `descriptor`: with action 0 a call whose tensors travel as shared references (the work queued
 * on them here is finished before it is sent), with TR_LAUNCH_TUNE or TR_LAUNCH_CONFIG an ask
 * with no tensors. Borrowed for the call only. */
typedef struct tr_launch_request {
  const char *op;              /* the op, for messages */
  const tr_registry *registry; /* names the tensors' devices (calls only) */
  const tr_kernel *kernel;
  const tr_launch_descriptor *descriptor;
  int action; /* 0, TR_LAUNCH_TUNE or TR_LAUNCH_CONFIG */
  DLTensor *const *inputs;
  size_t n_inputs;
  DLTensor *const *outputs;
  size_t n_outputs;
} tr_launch_request;

/* Sends `req` to the pipeline's launch component. NULL when the kernel ran (or the ask was
 * answered); else the kernel's own error, unchanged, a tensor that cannot travel (ValueError
 * naming it), or the transport's error. With `config` (a TR_LAUNCH_CONFIG ask), what it held is
 * replaced by the answer. Thread-safe as tr_pipeline_call. */
tr_status *tr_launch_call(tr_pipeline *pipeline, const tr_launch_request *req, tr_launch_config *config) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_LAUNCH_CLIENT_H_ */
