/* op_cache.h: ops run by name for a launch component by descriptor (`tilerun serve launch`): an
 * op instance per (op, params, target), made at its first call and kept (at most 128; the least
 * recently used goes), called into the outputs given. The kernels are built here, by this
 * process's own pipeline: nothing the request carries is executed. */
#ifndef TILERUN_RUNTIME_OP_CACHE_H_
#define TILERUN_RUNTIME_OP_CACHE_H_

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

/* A tr_launch_op_fn (components/launch/launch.h): `cache` is a tr_op_cache. `target` "" lets the
 * device decide. The op's errors are its own (tr_op_call_into's). Calls are serialised. */
tr_status *tr_op_cache_call(void *cache, const char *op, const tr_named_value *params, size_t n_params,
                            const char *target, DLTensor *const *inputs, size_t n_inputs,
                            DLTensor *const *outputs, size_t n_outputs) TR_MUST_USE;

/* The runtime's registry (device names to DLPack devices, for the launch handler). */
const tr_registry *tr_op_cache_registry(const tr_op_cache *cache);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_RUNTIME_OP_CACHE_H_ */
