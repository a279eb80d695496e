/* build_client.h: the runtime's side of the build component: an in-tree implementation and a
 * call spec in, its artifacts out, through the pipeline in whatever placement it has. */
#ifndef TILERUN_COMPONENTS_BUILD_CLIENT_H_
#define TILERUN_COMPONENTS_BUILD_CLIENT_H_

#include "components/build/build.h"
#include "components/pipeline/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A call to build: the op, the interface and the key select answered, the call spec (every
 * field and its device) and the architecture to compile for ("sm_90a"). Borrowed for the call
 * only. */
typedef struct tr_build_artifacts_request {
  const char *op;
  const char *interface;
  const char *key;
  const tr_call_spec *call;
  const char *arch;
} tr_build_artifacts_request;

/* What build answered: one or two artifacts (owned: tr_built_artifacts_clear). */
typedef struct tr_built_artifacts {
  size_t n;
  tr_artifact artifacts[2];
} tr_built_artifacts;

/* Builds `req` through the pipeline's build component. On success *out holds the artifacts
 * (the caller clears them); on failure none. The error is the component's (an unknown op,
 * interface or key, a key that refuses the call, NVRTC's log) or the transport's. Thread-safe
 * as tr_pipeline_call. */
tr_status *tr_build_call(tr_pipeline *pipeline, const tr_build_artifacts_request *req,
                         tr_built_artifacts *out) TR_MUST_USE;

/* Frees the artifacts; out->n is 0 after. Accepts a cleared one. */
void tr_built_artifacts_clear(tr_built_artifacts *built);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_BUILD_CLIENT_H_ */
