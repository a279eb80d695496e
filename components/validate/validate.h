/* validate.h: the validate component: a call checked against its op's manifest signature, as a
 * message handler (request bytes in, reply bytes out), and the caller's side of the contract. */
#ifndef TILERUN_COMPONENTS_VALIDATE_H_
#define TILERUN_COMPONENTS_VALIDATE_H_

#include <stddef.h>
#include <stdint.h>

#include "manifest/manifest.h"
#include "proto/components.pb.h"

/* Room for any encoded ValidateRequest or ValidateReply. */
#define TR_VALIDATE_MAX                                                                   \
  (tilerun_ValidateRequest_size > tilerun_ValidateReply_size ? tilerun_ValidateRequest_size \
                                                             : tilerun_ValidateReply_size)

#ifdef __cplusplus
extern "C" {
#endif

/* The handler: `ctx` is a const tr_manifest *. A request that does not decode is a
 * TransportError (returned); a call the manifest rejects is a reply carrying the signature
 * error. Allocates only its message structs. Thread-safe. */
tr_status *tr_validate_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                              size_t reply_cap, size_t *reply_size);

/* The caller's side: encodes a request for (op, params as given, one spec per input, NULL for an
 * absent optional input). */
tr_status *tr_validate_encode(const char *op, const tr_named_value *params, size_t n_params,
                              const tr_tensor_spec *const *inputs, size_t n_inputs, uint8_t *buf,
                              size_t size, size_t *out_size) TR_MUST_USE;

/* What validation answered. */
typedef struct tr_validated {
  tr_device device;
  size_t n_outputs;
  uint8_t output_present[TR_SIG_MAX_OUTPUTS];
  tr_tensor_spec outputs[TR_SIG_MAX_OUTPUTS];
  size_t n_settled;
  tr_named_value settled[TR_SIG_MAX_PARAMS]; /* names point into `names`; values owned */
  char names[TR_SIG_MAX_PARAMS][64];
} tr_validated;

/* The validation itself, on structs: `op`'s params bound (defaults applied) and the inputs (one
 * spec per manifest input, NULL for an absent one) checked against `manifest`. What the handler
 * answers for the same request, before encoding: an unknown op is an OpNotAvailableError, an
 * unmet signature a SignatureError naming tensor, axis, expected and got. On success *out holds
 * the answer (the caller frees it with tr_validated_clear); on failure nothing. Thread-safe. */
tr_status *tr_validate_run(const tr_manifest *manifest, const char *op, const tr_named_value *params,
                           size_t n_params, const tr_tensor_spec *const *inputs, size_t n_inputs,
                           tr_validated *out) TR_MUST_USE;

/* Decodes a reply: the error it carries, or the validated call (the caller then frees the
 * settled values with tr_validated_clear). */
tr_status *tr_validate_decode(const uint8_t *reply, size_t size, tr_validated *out) TR_MUST_USE;
void tr_validated_clear(tr_validated *validated);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_VALIDATE_H_ */
