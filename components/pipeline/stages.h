/* stages.h: two shipped examples of composing a custom pipeline: a `trace` stage that wraps any
 * component and writes every message as one JSON line, and a `pinned` selector that swaps in for
 * `select` and answers from a file of (op, call-spec pattern) -> implementation key. */
#ifndef TILERUN_COMPONENTS_PIPELINE_STAGES_H_
#define TILERUN_COMPONENTS_PIPELINE_STAGES_H_

#include <stddef.h>
#include <stdint.h>

#include "components/pipeline/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- trace ---- */

typedef struct tr_trace tr_trace;

/* A trace stage in front of `inner` (with `inner_ctx`), appending to `path` one line per message:
 * {"op": ..., "component": ..., "request": "<hex>", "reply": "<hex>", "microseconds": ...,
 *  "error": ...}. A file that cannot be opened is an IOError naming it. Thread-safe (lines are
 * written whole). */
tr_status *tr_trace_new(const char *path, const char *component, tr_component_handler inner,
                        void *inner_ctx, tr_trace **out) TR_MUST_USE;
void tr_trace_destroy(tr_trace **trace_p);

/* The stage's handler: `ctx` is the tr_trace. */
tr_status *tr_trace_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                           size_t reply_cap, size_t *reply_size);

/* ---- pinned select ---- */

typedef struct tr_pins tr_pins;

/* Reads a pins file: a list of {op, interface, match: {field: value, ...}, key}; the first pin
 * whose op and interface are the request's and whose match fields all equal the call spec's
 * answers. A malformed file is a ManifestError naming file, line and column. */
tr_status *tr_pins_load(const char *path, tr_pins **out) TR_MUST_USE;
void tr_pins_destroy(tr_pins **pins_p);

/* The pinned selector's handler (`ctx`: the tr_pins): a SelectRequest in, a SelectReply with the
 * pinned key out, or a reply carrying a SelectionError "no pin covers ..." naming the call. */
tr_status *tr_pinned_select_handle(void *ctx, const uint8_t *request, size_t request_size,
                                   uint8_t *reply, size_t reply_cap, size_t *reply_size);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_PIPELINE_STAGES_H_ */
