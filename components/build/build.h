/* build.h: the build component: the artifacts of an in-tree implementation for a call spec and a
 * named architecture, as a message handler over the in-tree ops, and the caller's side of the
 * contract. The building itself lives in kernels/intree (NVRTC, the disk cache); this is decode,
 * build, encode. Nothing a request carries is compiled or executed: it names a kernel this
 * component holds the source of. */
#ifndef TILERUN_COMPONENTS_BUILD_H_
#define TILERUN_COMPONENTS_BUILD_H_

#include <stddef.h>
#include <stdint.h>

#include "components/select/select.h"
#include "kernels/artifact.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest BuildReply (two artifacts and the envelope). */
#define TR_BUILD_REPLY_MAX ((size_t)1 << 20)

/* The handler: `ctx` is a const tr_select_table * (the in-tree ops; the request names the
 * implementation by interface and key). A request that does not decode is a TransportError; an
 * op, interface, call type or key the table does not hold, a field that does not fit, a request
 * without a key (a backend target's build, which happens where its kernel is launched), a key
 * that refuses the call, and a compile error (NVRTC's log) are a reply carrying that error.
 * Thread-safe. */
tr_status *tr_build_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                           size_t reply_cap, size_t *reply_size);

/* The caller's side: the op, the interface and the key select answered, every field of `call`,
 * its device and the architecture to compile for ("sm_90a"). */
tr_status *tr_build_encode(const char *op, const char *interface, const char *key, const tr_call_spec *call,
                           const char *arch, uint8_t *buf, size_t size, size_t *out_size) TR_MUST_USE;

/* Decodes a reply into its artifacts (each validated as tr_artifact_decode does); the caller
 * clears them. The reply's error, if it carries one, is returned. */
tr_status *tr_build_decode(const uint8_t *reply, size_t size, tr_artifact out[2], size_t *n_out) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_BUILD_H_ */
