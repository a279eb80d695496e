/* pipeline.h: the five components wired by configuration: for each its implementation and its
 * placement (inline: the caller's thread, no thread switch; thread: an actor on an inproc://
 * socket; process: an ipc:// or tcp:// endpoint hosted by `tilerun serve`), read from a pipeline
 * file (YAML). A call hands a request's bytes to a component and gets the reply's bytes back. */
#ifndef TILERUN_COMPONENTS_PIPELINE_H_
#define TILERUN_COMPONENTS_PIPELINE_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_component_id {
  TR_COMPONENT_VALIDATE,
  TR_COMPONENT_SETTLE,
  TR_COMPONENT_SELECT,
  TR_COMPONENT_BUILD,
  TR_COMPONENT_LAUNCH,
  TR_COMPONENT_COUNT
} tr_component_id;

typedef enum tr_placement { TR_PLACE_INLINE, TR_PLACE_THREAD, TR_PLACE_PROCESS } tr_placement;

/* "validate", "settle", ...; NULL for an id out of range. */
const char *tr_component_name(tr_component_id id);
/* The id of a component name; -1 when unknown. */
int tr_component_id_of(const char *name);

/* Which implementation a component runs: the builtin adapter, the trace stage wrapping it, or
 * (select only) the pinned selector. */
typedef enum tr_implementation { TR_IMPL_BUILTIN, TR_IMPL_TRACE, TR_IMPL_PINNED } tr_implementation;

typedef struct tr_component_config {
  tr_implementation implementation;
  char option_path[256]; /* trace: the file it appends to; pinned: the pins file */
  tr_placement placement;
  char endpoint[256];       /* process: where `tilerun serve` listens */
  char curve_server_key[41]; /* process over tcp: the server's public key (Z85), or "" */
  /* process with curve_server_key: a file holding this client's Curve secret key (Z85; its
   * public key is what a server's client list names), or "" for a fresh keypair per client */
  char curve_client_secret_file[256];
} tr_component_config;

typedef struct tr_pipeline_config {
  uint32_t deadline_ms; /* per call; default 3000 */
  tr_component_config components[TR_COMPONENT_COUNT];
} tr_pipeline_config;

/* The default pipeline: every component inline, deadline 3000 ms. */
void tr_pipeline_config_default(tr_pipeline_config *out);

/* Reads a pipeline file. Every problem is a ManifestError naming file, line and column (an
 * unknown component or key, a key given twice, a placement other than inline/thread/process, a
 * process placement without an endpoint, an endpoint of another scheme, curve_client_secret_file
 * without curve_server_key, nesting deeper than TR_YAML_MAX_DEPTH); an unreadable file is an
 * IOError. */
tr_status *tr_pipeline_config_load(const char *path, tr_pipeline_config *out) TR_MUST_USE;

/* The handler a component runs: request bytes in, reply bytes out (see each component's header:
 * components/validate/validate.h ...). */
typedef tr_status *(*tr_component_handler)(void *ctx, const uint8_t *request, size_t request_size,
                                           uint8_t *reply, size_t reply_cap, size_t *reply_size);

typedef struct tr_pipeline tr_pipeline;

/* Makes a pipeline: inline components call `handlers[i]` (with `contexts[i]`) directly (a
 * component configured `trace` calls it through a trace stage; `pinned` select answers from its
 * pins file instead); thread
 * components start an actor around the same handler (returning once it is ready); process
 * components connect to their endpoint (which need not be up yet). A handler may be NULL for a
 * component the caller never uses. */
tr_status *tr_pipeline_new(const tr_pipeline_config *config, const tr_component_handler *handlers,
                           void *const *contexts, tr_pipeline **out) TR_MUST_USE;

/* Stops the actors (waiting for them) and closes the connections. */
void tr_pipeline_destroy(tr_pipeline **pipeline_p);

/* Calls a component. Thread-safe: many threads may call one pipeline at once; replies are
 * matched to requests. A component that does not answer within the deadline is a
 * TransportError naming it and its endpoint. */
tr_status *tr_pipeline_call(tr_pipeline *pipeline, tr_component_id id, const uint8_t *request,
                            size_t request_size, uint8_t *reply, size_t reply_cap,
                            size_t *reply_size) TR_MUST_USE;

/* One exchange of tr_pipeline_call_each: the component, its request, room for its reply; the
 * call fills reply_size, status (NULL on success; the caller frees it) and made (0: skipped). */
typedef struct tr_pipeline_exchange {
  tr_component_id id;
  const uint8_t *request;
  size_t request_size;
  uint8_t *reply;
  size_t reply_cap;
  size_t reply_size;
  tr_status *status;
  int made;
} tr_pipeline_exchange;

/* Makes the exchanges x[0..n) as tr_pipeline_call would, with every request to a thread or
 * process component sent first, so that they are in flight at once; then, in index order, calls
 * each inline (or traced) component and takes each reply. So a caller whose requests do not
 * depend on one another waits for the slowest round trip, not for their sum. Each exchange gets
 * its own status. With `until_failure`, the first failure in index order ends the call: later
 * exchanges are not made (made 0), and a request of theirs already sent is abandoned (its socket
 * closed), so the failure waits for no other reply. Thread-safe as tr_pipeline_call. */
void tr_pipeline_call_each(tr_pipeline *pipeline, tr_pipeline_exchange *x, size_t n, int until_failure);

tr_placement tr_pipeline_placement(const tr_pipeline *pipeline, tr_component_id id);

/* The endpoint a component placed in another process is reached at (after resolution); NULL for
 * a component in this process. Owned by the pipeline. Cannot fail; thread-safe. */
const char *tr_pipeline_endpoint(const tr_pipeline *pipeline, tr_component_id id);

/* Where tr_pipeline_call of component `id` is a plain call of its handler (placed inline, its
 * builtin implementation: no trace stage, not pinned): 1, with that handler and its context, so
 * that a client that knows the handler can pass structs to the component's library instead of
 * bytes. Otherwise 0, and both NULL. Cannot fail; thread-safe. */
int tr_pipeline_inline_handler(const tr_pipeline *pipeline, tr_component_id id, tr_component_handler *handler,
                               void **ctx);

/* `status` as a component's reply carries it back: its code and message kept (a message longer
 * than a reply holds cut as the wire cuts it). For a client that called its component's library
 * directly, so that its errors read as those that came through a message. Takes `status`; NULL
 * stays NULL. */
tr_status *tr_pipeline_as_replied(tr_status *status) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_PIPELINE_H_ */
