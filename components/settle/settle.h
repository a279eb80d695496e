/* settle.h: the settle component: which target serves a call (the op's target, the process
 * default, detection), as a message handler, and the caller's side of the contract. */
#ifndef TILERUN_COMPONENTS_SETTLE_H_
#define TILERUN_COMPONENTS_SETTLE_H_

#include <stddef.h>
#include <stdint.h>

#include "registry/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The handler: `ctx` is a const tr_registry * (its backends loaded). A request that does not
 * decode is a TransportError; an unknown or ambiguous target, or a failing detector, is a reply
 * carrying that error. Thread-safe. */
tr_status *tr_settle_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size);

/* The caller's side: `requested` and `default_target` are NULL, TR_BUILTIN or a name. */
tr_status *tr_settle_encode(const char *op, const char *requested, const char *default_target,
                            const tr_device *device, uint8_t *buf, size_t size,
                            size_t *out_size) TR_MUST_USE;

/* Decodes a reply into the target's name (a name or TR_BUILTIN; at most 31 characters). */
tr_status *tr_settle_decode(const uint8_t *reply, size_t size, char target[32]) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_SETTLE_H_ */
