/* op_cache.h: ops run by name for a launch component by descriptor (`tilerun serve launch`): an
 * op instance per (op, params, target), made at its first call or tune request and kept (at
 * most 128; the least recently used goes), called into the outputs given. One instance serves
 * every caller op with the same op, params and target, whichever process it is in: tuning it
 * tunes it for all of them, and its config is theirs. The kernels are built here, by this
 * process's own pipeline: nothing the request carries is executed. */
#ifndef TILERUN_RUNTIME_OP_CACHE_H_
#define TILERUN_RUNTIME_OP_CACHE_H_

#include "components/launch/launch.h"
#include "registry/registry.h"
#include "tilerun/tilerun.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_op_cache tr_op_cache;

/* Runs the runtime's backend discovery now (its failures are the error). */
tr_status *tr_op_cache_new(tr_runtime *runtime, tr_op_cache **out) TR_MUST_USE;
/* Destroys the ops; before the runtime. */
void tr_op_cache_destroy(tr_op_cache **cache_p);

/* The launch handler's ops by descriptor (components/launch/launch.h), their context a
 * tr_op_cache; `target` "" lets the device decide; calls are serialised. A call runs
 * tr_op_call_into (its errors are the op's own), entering tuned mode first where the descriptor
 * says the caller's op is in it and this one is not (made again after it went from the cache);
 * tune is tr_op_request_tune (the op made if none is kept); config copies tr_op_kernel_config's
 * values (none where no op is kept: nothing is made for it). */
extern const tr_launch_ops tr_op_cache_ops;

/* The runtime's registry (device names to DLPack devices, for the launch handler). */
const tr_registry *tr_op_cache_registry(const tr_op_cache *cache);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_RUNTIME_OP_CACHE_H_ */
