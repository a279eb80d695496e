/* launch.h: the launch component: a built kernel run on tensors, as a message handler, and the
 * caller's side of the contract.
 *
 * By pointer: the request carries the address of a tr_kernel and of each tensor's data in the
 * caller's process, so this handler serves the inline and thread placements only. It trusts
 * those addresses as a function call would; it is never served on a socket (`tilerun serve`
 * offers no launch), and launch in another process (shared memory, CUDA IPC) is still to come. */
#ifndef TILERUN_COMPONENTS_LAUNCH_H_
#define TILERUN_COMPONENTS_LAUNCH_H_

#include <stddef.h>
#include <stdint.h>

#include "registry/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The handler: `ctx` is a const tr_registry * (device type names back to DLPack devices). A
 * request that does not decode is a TransportError; a null kernel, a tensor whose spec does not
 * parse, or null data for a present tensor is a reply carrying a ValueError naming it; the
 * kernel's own error is the reply's, unchanged. Thread-safe when the kernel is. */
tr_status *tr_launch_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size);

/* The caller's side: NULL entries in `inputs` (an absent optional input) or `outputs` travel as
 * absent. More than 16 inputs or 8 outputs, a rank above TR_MAX_RANK or a device the registry
 * cannot name is a ValueError. */
tr_status *tr_launch_encode(const tr_registry *registry, const tr_kernel *kernel, DLTensor *const *inputs,
                            size_t n_inputs, DLTensor *const *outputs, size_t n_outputs, uint8_t *buf,
                            size_t size, size_t *out_size) TR_MUST_USE;

/* Decodes a reply: NULL when the kernel ran, else its error. */
tr_status *tr_launch_decode(const uint8_t *reply, size_t size) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_LAUNCH_H_ */
