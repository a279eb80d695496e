/* transport.h: the message transport tilerun's components talk over (ZeroMQ request/reply). */
#ifndef TILERUN_COMPONENTS_PIPELINE_TRANSPORT_H_
#define TILERUN_COMPONENTS_PIPELINE_TRANSPORT_H_

/* The transport moves byte messages and knows nothing of what they mean (the components encode
 * them with nanopb). A server answers requests one at a time with a handler; a client sends a
 * request and waits, at most a deadline, for the matching reply.
 *
 * Endpoints are ZeroMQ's: inproc://name (threads of this process; all share one process-wide
 * ZeroMQ context), ipc:///path (processes of one machine) and tcp://host:port. A tcp endpoint
 * that names no host ("tcp://:5555", "tcp://5555") means the loopback address 127.0.0.1;
 * listening on every interface must be asked for by name ("tcp://0.0.0.0:5555", or the
 * wildcard host: tcp, "://", "*:5555").
 *
 * On the wire each request is one frame: an 8-byte request id (little-endian, chosen by the
 * client, unique per client) then the request bytes. Each reply is one frame: the request's id,
 * one kind byte (0: a reply, 1: the handler failed and the bytes are its error text), then the
 * reply bytes. Anything else a server receives is dropped and counted. */

#include <stddef.h>
#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for an endpoint after resolution, with its NUL. */
#define TR_ENDPOINT_MAX 256

/* Room for a Z85 CurveZMQ key (40 characters) and its NUL. */
#define TR_CURVE_KEY_SIZE 41

/* The deadline and message limit used when the options leave them 0. */
#define TR_TRANSPORT_DEFAULT_DEADLINE_MS 3000u
#define TR_TRANSPORT_DEFAULT_MAX_MESSAGE ((size_t)1 << 20)

/* Answers one request: writes at most reply_cap bytes into `reply` and sets *reply_size. A
 * returned status is a failure of this request as a whole: the client then receives no reply
 * bytes but a TR_TRANSPORT error naming the component and carrying the status's code name and
 * message (the transport frees the status). `request` and `reply` belong to the transport and
 * are valid only during the call. Called on the server's thread, one request at a time, so a
 * handler needs no lock for state only it touches. Setting *reply_size above reply_cap is a
 * broken contract; the transport answers it with an error instead of the reply. */
typedef tr_status *(*tr_handler_fn)(void *ctx, const uint8_t *request, size_t request_size,
                                    uint8_t *reply, size_t reply_cap, size_t *reply_size);

/* Options for servers and clients. A zeroed struct (or NULL for the whole struct) gives the
 * defaults. The strings are copied by the call they are passed to. */
typedef struct tr_transport_options {
  /* The component's name, as errors print it ("component 'select' at ipc://..."); NULL gives
   * "(unnamed)". */
  const char *component;
  /* Client: how long a call waits for its reply; 0 gives TR_TRANSPORT_DEFAULT_DEADLINE_MS.
   * Unused by servers. */
  uint32_t deadline_ms;
  /* Server: both set (Z85, 40 characters) makes the server require CurveZMQ on ipc and tcp;
   * both NULL turns it off; one alone is an error. Client: curve_server_public set makes the
   * client speak CurveZMQ to the server holding that key; curve_server_secret is unused. */
  const char *curve_server_public;
  const char *curve_server_secret;
  /* Client: its own keypair for CurveZMQ. Both NULL while curve_server_public is set: a fresh
   * keypair is made for the client. One alone is an error. Unused by servers. */
  const char *curve_client_public;
  const char *curve_client_secret;
  /* The largest request or reply payload (excluding the transport's header); 0 gives
   * TR_TRANSPORT_DEFAULT_MAX_MESSAGE. A server drops larger requests, a client refuses to send
   * them, and a server's handler is given this much room for its reply. */
  size_t max_message;
  /* Server: the largest request payload it takes; 0 gives max_message. Over ipc and tcp ZeroMQ
   * itself refuses a larger message (ZMQ_MAXMSGSIZE) before allocating it, and disconnects
   * the peer that sent it; tr_server_disconnects counts that. Unused by clients. */
  size_t max_request;
  /* Server with CurveZMQ: NULL serves every client that knows the server's public key; else
   * the only clients served, as text: one Z85 public key per line (blank lines and lines
   * starting with '#' ignored). A client not on it gets no reply (its handshake is refused
   * through tilerun's ZAP handler); tr_server_refused counts it and stderr names its key (a
   * line a second at most).
   * Client: its own keypair for CurveZMQ comes from curve_client_public/secret. */
  const char *curve_clients;
} tr_transport_options;

/* ---- Endpoints --------------------------------------------------------------------------- */

/* Writes into `resolved` the endpoint the transport actually binds or connects to for
 * `endpoint`: a tcp endpoint without a host gets 127.0.0.1 ("tcp://:5555" and "tcp://5555"
 * give "tcp://127.0.0.1:5555"; "tcp://:*" gives "tcp://127.0.0.1:*", any free port); any other
 * endpoint is copied unchanged. Fails with TR_VALUE naming the endpoint when it is NULL or
 * empty, its transport is not inproc://, ipc:// or tcp://, it names nothing after the
 * transport, a tcp endpoint names no port or a port that is not * or a number from 0 to 65535,
 * or the result does not fit TR_ENDPOINT_MAX; `resolved` is then "". Thread-safe.
 * The caller frees a returned status. */
tr_status *tr_endpoint_resolve(const char *endpoint, char resolved[TR_ENDPOINT_MAX]) TR_MUST_USE;

/* ---- CurveZMQ ---------------------------------------------------------------------------- */

/* 1 when this libzmq supports CurveZMQ, 0 otherwise. Cannot fail. Thread-safe. */
int tr_curve_available(void);

/* Makes a new CurveZMQ keypair, each key 40 Z85 characters and a NUL. Fails with TR_TRANSPORT
 * when libzmq has no CurveZMQ (the message says so); both keys are then "". Thread-safe. The
 * caller frees a returned status. */
tr_status *tr_curve_keypair(char public_key[TR_CURVE_KEY_SIZE],
                            char secret_key[TR_CURVE_KEY_SIZE]) TR_MUST_USE;

/* A key given as text (a file's contents, a variable): the length of its first line, line end
 * and trailing blanks dropped; where that is TR_CURVE_KEY_SIZE - 1 (40) characters, `key` holds
 * them and a NUL, else "". Checks nothing else (zmq_curve_public does). Cannot fail. */
size_t tr_curve_key_line(const char *text, size_t n, char key[TR_CURVE_KEY_SIZE]);

/* ---- Servers ----------------------------------------------------------------------------- */

/* A running server: an actor (a thread plus a pipe) answering on one endpoint. Opaque; single
 * owner: stop it with tr_server_stop. */
typedef struct tr_server tr_server;

/* Binds a server to `endpoint` (after tr_endpoint_resolve) and starts its thread, which calls
 * handler(ctx, ...) for each request until the server is stopped. Returns once the endpoint is
 * bound: requests sent from then on are answered. Sets *out to NULL first; on success *out is
 * the caller's, to stop with tr_server_stop, and `ctx` must stay valid until then. Fails with
 * TR_VALUE for a malformed endpoint or options (naming which), TR_TRANSPORT when the endpoint
 * cannot be bound (naming the endpoint and ZeroMQ's reason, e.g. "Address already in use") or
 * CurveZMQ is asked for but unavailable, TR_OUT_OF_MEMORY when memory or a thread is refused.
 * An ipc:// path where a live server answers is refused ("in use by a live server"), and one
 * holding a file or folder that is not a socket (never replaced); a socket file left by a server
 * that has gone is taken over. Stopping the server removes its ipc socket
 * file. Thread-safe. The caller frees a returned status. */
tr_status *tr_server_start(const char *endpoint, tr_handler_fn handler, void *ctx,
                           const tr_transport_options *opts, tr_server **out) TR_MUST_USE;

/* The endpoint the server is bound to, as ZeroMQ reports it ("tcp://127.0.0.1:5555"; a
 * wildcard port shows the port chosen). Owned by the server. Cannot fail. Thread-safe. */
const char *tr_server_endpoint(const tr_server *server);

/* How many received messages the server dropped as malformed: a frame shorter than the 8-byte
 * request id, a payload larger than max_message, or a message of more than one frame. Cannot
 * fail. Thread-safe (the count may lag a message being handled). */
uint64_t tr_server_dropped(const tr_server *server);

/* How many peers disconnected from the server over ipc or tcp: clients that closed, and peers
 * ZeroMQ dropped for a message over max_request. Cannot fail. Thread-safe (it may lag). */
uint64_t tr_server_disconnects(const tr_server *server);

/* How many CurveZMQ handshakes the server refused: clients whose key is not on curve_clients.
 * Cannot fail. Thread-safe (it may lag). */
uint64_t tr_server_refused(const tr_server *server);

/* Binds as tr_server_start does but starts no thread: the caller answers requests with
 * tr_server_serve, then stops the server with tr_server_stop. For `tilerun serve`, which says
 * it serves only once the bind succeeded. Fails as tr_server_start does. The caller frees a
 * returned status. */
tr_status *tr_server_bind(const char *endpoint, tr_handler_fn handler, void *ctx,
                          const tr_transport_options *opts, tr_server **out) TR_MUST_USE;

/* Answers requests of a server made by tr_server_bind in the calling thread until *stop becomes
 * nonzero (read at least every 100 ms while no handler runs). Returns NULL after a requested
 * stop; TR_TRANSPORT when polling the socket fails (naming the endpoint and ZeroMQ's reason).
 * One thread serves a server at a time. The caller frees a returned status. */
tr_status *tr_server_serve(tr_server *server, volatile int *stop) TR_MUST_USE;

/* Stops *server_p (NULL allowed) and sets *server_p to NULL: asks its thread to stop, waits for
 * it (a handler running finishes first), and closes its socket without waiting for unsent
 * replies, however many clients are connected. Afterwards the endpoint can be bound again.
 * Cannot fail. Not thread-safe on one server: one caller stops it, once. */
void tr_server_stop(tr_server **server_p);

/* Runs a server in the calling thread: binds as tr_server_start does, then answers requests
 * until *stop becomes nonzero (read at least every 100 ms while no handler runs; set it from a
 * signal handler or another thread). Returns NULL after a requested stop; fails as
 * tr_server_start does, and with TR_TRANSPORT when polling the socket fails (naming the
 * endpoint and ZeroMQ's reason). For `tilerun serve`. Thread-safe (each call runs its own server). The caller frees a returned
 * status. */
tr_status *tr_server_run(const char *endpoint, tr_handler_fn handler, void *ctx,
                         const tr_transport_options *opts, volatile int *stop) TR_MUST_USE;

/* ---- Clients ----------------------------------------------------------------------------- */

/* A connection to one server endpoint: a pool of sockets, one per concurrent call. Opaque;
 * single owner: destroy it with tr_client_destroy. */
typedef struct tr_client tr_client;

/* Makes a client for `endpoint` (after tr_endpoint_resolve) and opens its first socket. The
 * server need not be up yet: requests wait for it until their deadline. Sets *out to NULL
 * first; on success *out is the caller's, to destroy with tr_client_destroy. Fails with
 * TR_VALUE for a malformed endpoint or options (naming which), TR_TRANSPORT when ZeroMQ refuses
 * the endpoint or the socket (naming the endpoint and ZeroMQ's reason) or CurveZMQ is asked
 * for but unavailable, TR_OUT_OF_MEMORY when memory is refused. Thread-safe. The caller frees a
 * returned status. */
tr_status *tr_client_new(const char *endpoint, const tr_transport_options *opts,
                         tr_client **out) TR_MUST_USE;

/* Sends `request` to the server and copies its reply into `reply` (at most reply_cap bytes),
 * setting *reply_size. Sets *reply_size to 0 first. Fails with TR_TRANSPORT when:
 * - no reply arrives within the deadline: "component '<component>' at <endpoint> did not
 *   answer within <N> ms" (also when the request cannot even be queued in that time); the
 *   socket used is closed, so its late reply is lost and never reaches another call;
 * - over ipc or tcp, the server the client was connected to dropped the connection (it ended,
 *   or stopped answering ZeroMQ's heartbeats): "component '<component>' at <endpoint> dropped
 *   the connection ..." at once, not at the deadline, for a call waiting then and for every
 *   call until a server is back (ZeroMQ reconnects on its own). A server never reached yet is
 *   waited for until the deadline;
 * - the server's handler failed: "component '<component>' at <endpoint> failed: <its code name
 *   and message>";
 * - the reply does not fit reply_cap, or the request exceeds max_message (naming both sizes);
 * - ZeroMQ fails otherwise (naming its reason).
 * A reply is matched to its request by id; any other reply arriving on the socket (a stale
 * one) is discarded. Thread-safe: many threads may call one client at once, each on its own
 * socket. The caller frees a returned status. */
tr_status *tr_client_call(tr_client *client, const uint8_t *request, size_t request_size,
                          uint8_t *reply, size_t reply_cap, size_t *reply_size) TR_MUST_USE;

/* A request sent and not yet answered, between tr_client_send and tr_client_receive. Its fields
 * are the transport's; it holds one of the client's sockets until received. */
typedef struct tr_client_pending {
  tr_client *client;
  void *slot;
  uint64_t id;
  uint64_t deadline_ns;
} tr_client_pending;

/* tr_client_call in two halves, so that one thread can have requests to several components in
 * flight at once: tr_client_send queues `request` (its deadline starts now) and fills *pending;
 * tr_client_receive waits for that request's reply, as tr_client_call does (a reply already
 * queued is taken even after the deadline), and tr_client_abandon drops the request (its socket
 * is closed, so a late reply reaches no other call). Exactly one of the two ends each successful
 * send. A failed send leaves nothing pending and fails as tr_client_call does. Thread-safe as
 * tr_client_call; a pending request is its caller's, and is received or abandoned on the thread
 * that sent it (a ZeroMQ socket may change threads only across a full memory barrier). The
 * caller frees a returned status. */
tr_status *tr_client_send(tr_client *client, const uint8_t *request, size_t request_size,
                          tr_client_pending *pending) TR_MUST_USE;
tr_status *tr_client_receive(tr_client_pending *pending, uint8_t *reply, size_t reply_cap,
                             size_t *reply_size) TR_MUST_USE;
void tr_client_abandon(tr_client_pending *pending);

/* The endpoint the client connects to (after tr_endpoint_resolve). Owned by the client. Cannot
 * fail. Thread-safe. */
const char *tr_client_endpoint(const tr_client *client);

/* Closes every socket of *client_p (NULL allowed), frees it and sets *client_p to NULL; pending
 * messages are discarded. Cannot fail. Not thread-safe: no call may be running on the client. */
void tr_client_destroy(tr_client **client_p);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_PIPELINE_TRANSPORT_H_ */
