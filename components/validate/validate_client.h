/* validate_client.h: the runtime's side of the validate component: a request struct in, the
 * validated call out, through the pipeline in whatever placement it has. */
#ifndef TILERUN_COMPONENTS_VALIDATE_CLIENT_H_
#define TILERUN_COMPONENTS_VALIDATE_CLIENT_H_

#include <stddef.h>

#include "components/pipeline/pipeline.h"
#include "components/validate/validate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A call to validate: the op, its params as given, one spec per manifest input (NULL for an
 * absent optional input). The pointers are borrowed for the call only. */
typedef struct tr_validate_request {
  const char *op;
  const tr_named_value *params;
  size_t n_params;
  const tr_tensor_spec *const *inputs;
  size_t n_inputs;
} tr_validate_request;

/* Validates `req` through the pipeline's validate component. On success *out holds the
 * validated call (the device, the output specs, the settled params), which the caller frees
 * with tr_validated_clear; on failure *out holds nothing. The error is the component's (a
 * SignatureError naming input, axis, expected and got; OpNotAvailableError for an unknown op)
 * or the transport's. Inline with the builtin handler no message is made: the structs go to
 * tr_validate_run, with the same answer and errors (a request or answer a message could not carry
 * as it is goes the message way, which names the limit). Thread-safe as tr_pipeline_call. */
tr_status *tr_validate_call(tr_pipeline *pipeline, const tr_validate_request *req,
                            tr_validated *out) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_VALIDATE_CLIENT_H_ */
