/* settle_client.h: the runtime's side of the settle component: a request struct in, the
 * settled target out, alone or sent beside a validate request so that both are in flight at
 * once. */
#ifndef TILERUN_COMPONENTS_SETTLE_CLIENT_H_
#define TILERUN_COMPONENTS_SETTLE_CLIENT_H_

#include "components/pipeline/pipeline.h"
#include "components/settle/settle.h"
#include "components/validate/validate_client.h"
#include "registry/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A call to settle: the op, the target it asked for and the process default (each NULL,
 * TR_BUILTIN or a name), and the call's device. Borrowed for the call only. */
typedef struct tr_settle_request {
  const char *op;
  const char *requested;
  const char *default_target;
  tr_device device;
} tr_settle_request;

/* What settle answered: a target's name or TR_BUILTIN. */
typedef struct tr_settled {
  char target[32];
} tr_settled;

/* Settles `req` through the pipeline's settle component. On failure out->target is "". The
 * error is the component's (UnknownTargetError, AmbiguousTargetError, a detector's
 * BackendError) or the transport's. Inline with the builtin handler no message is made: the
 * registry settles the struct, with the same answer and errors. Thread-safe as tr_pipeline_call. */
tr_status *tr_settle_call(tr_pipeline *pipeline, const tr_settle_request *req, tr_settled *out) TR_MUST_USE;

/* Validates `vreq` and settles `sreq`. With either component in a thread or a process, both
 * requests are in flight at once (one round trip, not two); validate answers first, and when it
 * refuses the call that is the error and no settle reply is waited for. Where settle's answer
 * would be for another device than validate's (it never is for a valid call), or its request
 * does not encode, settle is asked again, alone, for validate's device. With both inline, settle
 * is asked once validate has passed, for validate's device. On success *vout is validate's
 * answer (the caller clears it with tr_validated_clear) and *sout settle's; on failure neither
 * holds anything. Thread-safe as tr_pipeline_call_each. */
tr_status *tr_settle_call_with_validate(tr_pipeline *pipeline, const tr_validate_request *vreq,
                                        const tr_settle_request *sreq, tr_validated *vout,
                                        tr_settled *sout) TR_MUST_USE;

/* For a call whose settle answered TR_BUILTIN where the in-tree kernels do not run: when settle
 * is served in another process and `registry` (this process's) settles `req` to a target, the
 * two disagree because the server knows no such target (it lacks that backend). Returns that
 * error (OpNotAvailableError naming the op, the device, the server's endpoint and this process's
 * target); NULL otherwise. Thread-safe. The caller frees a returned status. */
tr_status *tr_settle_check_builtin(const tr_pipeline *pipeline, const tr_registry *registry,
                                   const tr_settle_request *req) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_SETTLE_CLIENT_H_ */
