/* select_client.h: the runtime's side of the select component: a call spec in, the key of the
 * in-tree implementation that serves it out, through the pipeline in whatever placement it
 * has. */
#ifndef TILERUN_COMPONENTS_SELECT_CLIENT_H_
#define TILERUN_COMPONENTS_SELECT_CLIENT_H_

#include "components/pipeline/pipeline.h"
#include "components/select/select.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A call to select: the op, the interface and the call spec (every field and its device
 * travel; stated device facts do not). Borrowed for the call only. */
typedef struct tr_select_request {
  const char *op;
  const char *interface;
  const tr_call_spec *call;
} tr_select_request;

/* What select answered: the implementation's key. */
typedef struct tr_selected_key {
  char key[64];
} tr_selected_key;

/* Selects for `req` through the pipeline's select component. On failure out->key is "". The
 * error is the component's (the selection's own: OpNotAvailableError, SelectionError with the
 * refusal table; a field that does not fit a message is a ValueError) or the transport's.
 * Thread-safe as tr_pipeline_call. */
tr_status *tr_select_call(tr_pipeline *pipeline, const tr_select_request *req, tr_selected_key *out) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_SELECT_CLIENT_H_ */
