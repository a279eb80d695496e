/* transport.c: tilerun's message transport over ZeroMQ: ROUTER servers, pooled DEALER clients. */
#include "components/pipeline/transport.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "platform/platform.h"

/* ---- Wire format ---------------------------------------------------------------------------
 * Request: [id: 8 bytes, little-endian][payload]. Reply: [id][kind: 1 byte][payload]. */
enum {
  TR__ID_SIZE = 8,
  TR__REPLY_HEADER_SIZE = 9,
  TR__KIND_REPLY = 0,
  TR__KIND_ERROR = 1,
};

/* How long a server waits in one poll before it looks at its stop flag again. */
#define TR__SERVER_POLL_MS 100

#define TR__UNNAMED "(unnamed)"

static void tr__put_id(uint8_t *out, uint64_t id) {
  for (int i = 0; i < TR__ID_SIZE; i++) out[i] = (uint8_t)(id >> (8 * i));
}

static uint64_t tr__get_id(const uint8_t *in) {
  uint64_t id = 0;
  for (int i = 0; i < TR__ID_SIZE; i++) id |= (uint64_t)in[i] << (8 * i);
  return id;
}

/* ---- The process-wide ZeroMQ context --------------------------------------------------------
 * Made once, never terminated: inproc endpoints only meet inside one context, and terminating
 * it would wait for every socket of every component. */
static tr_plat_once tr__zmq_once = TR_PLAT_ONCE_INIT;
static void *tr__zmq_ctx;
static int tr__zmq_ctx_errno;

static void tr__zmq_ctx_make(void) {
  tr__zmq_ctx = zmq_ctx_new();
  if (tr__zmq_ctx == NULL) tr__zmq_ctx_errno = zmq_errno();
}

static tr_status *tr__zmq_context(void **out) {
  tr_plat_once_run(&tr__zmq_once, tr__zmq_ctx_make);
  *out = tr__zmq_ctx;
  if (tr__zmq_ctx == NULL) {
    return TR_STATUS(TR_TRANSPORT, "cannot create the ZeroMQ context: %s",
                     zmq_strerror(tr__zmq_ctx_errno));
  }
  return NULL;
}

/* ---- Endpoints ------------------------------------------------------------------------------ */

static int tr__starts_with(const char *text, const char *prefix) {
  return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* 1 when `text` is a bare port: digits, or "*" (any free port). */
static int tr__is_bare_port(const char *text) {
  if (strcmp(text, "*") == 0) return 1;
  if (*text == '\0') return 0;
  for (; *text != '\0'; text++) {
    if (*text < '0' || *text > '9') return 0;
  }
  return 1;
}

/* A tcp endpoint's port (after the last ':', or all of a bare port): "*" or a number from 0 to
 * 65535. ZeroMQ would take 99999 as 99999 mod 65536, and -5 as 65531. */
static tr_status *tr__check_tcp_port(const char *endpoint, const char *rest) {
  const char *port = rest;
  if (!tr__is_bare_port(rest)) {
    const char *host_end = rest[0] == '[' ? strchr(rest, ']') : NULL; /* an IPv6 address's colons */
    port = strrchr(host_end != NULL ? host_end : rest, ':');
    if (port == NULL || port[1] == '\0') {
      return TR_STATUS(TR_VALUE, "endpoint '%s' names no port (tcp://HOST:PORT, tcp://:PORT or "
                                 "tcp://PORT)", endpoint);
    }
    port++;
  }
  if (strcmp(port, "*") == 0) return NULL;
  long value = 0;
  const char *c = port;
  for (; *c >= '0' && *c <= '9' && value <= 65535; c++) value = value * 10 + (*c - '0');
  if (*c != '\0' || value > 65535) {
    return TR_STATUS(TR_VALUE, "endpoint '%s': port '%s' is not a number from 0 to 65535 (or *, any "
                               "free port)", endpoint, port);
  }
  return NULL;
}

tr_status *tr_endpoint_resolve(const char *endpoint, char resolved[TR_ENDPOINT_MAX]) {
  resolved[0] = '\0';
  if (endpoint == NULL || endpoint[0] == '\0') {
    return TR_STATUS(TR_VALUE, "an endpoint is needed (inproc://name, ipc:///path or "
                               "tcp://host:port), got an empty one");
  }
  static const char *const transports[] = {"inproc://", "ipc://", "tcp://"};
  const char *transport = NULL;
  for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++) {
    if (tr__starts_with(endpoint, transports[i])) transport = transports[i];
  }
  if (transport == NULL) {
    return TR_STATUS(TR_VALUE, "endpoint '%s' has a transport tilerun does not use: expected "
                               "inproc://, ipc:// or tcp://", endpoint);
  }
  const char *rest = endpoint + strlen(transport);
  if (rest[0] == '\0' || (strcmp(transport, "tcp://") == 0 && strcmp(rest, ":") == 0)) {
    return TR_STATUS(TR_VALUE, "endpoint '%s' names no %s", endpoint,
                     strcmp(transport, "tcp://") == 0 ? "port" : "address");
  }
  if (strcmp(transport, "tcp://") == 0) TR_RETURN_IF_ERROR(tr__check_tcp_port(endpoint, rest));
  int n;
  if (strcmp(transport, "tcp://") == 0 && rest[0] == ':') {
    n = snprintf(resolved, TR_ENDPOINT_MAX, "tcp://127.0.0.1%s", rest);
  } else if (strcmp(transport, "tcp://") == 0 && tr__is_bare_port(rest)) {
    n = snprintf(resolved, TR_ENDPOINT_MAX, "tcp://127.0.0.1:%s", rest);
  } else {
    n = snprintf(resolved, TR_ENDPOINT_MAX, "%s", endpoint);
  }
  if (n < 0 || n >= TR_ENDPOINT_MAX) {
    resolved[0] = '\0';
    return TR_STATUS(TR_VALUE, "endpoint '%.60s...' is %zu characters long; at most %d fit",
                     endpoint, strlen(endpoint), TR_ENDPOINT_MAX - 1);
  }
  return NULL;
}

/* ---- Options -------------------------------------------------------------------------------- */

/* The options a server or client keeps: copies, with the defaults applied. */
typedef struct tr__config {
  char *component; /* owned */
  uint32_t deadline_ms;
  size_t max_message;
  size_t max_request; /* server */
  int curve; /* server: require CurveZMQ; client: speak it */
  int allow_listed;   /* server: only the clients in `allowed` are served */
  size_t n_allowed;
  uint8_t (*allowed)[32]; /* owned: binary public keys */
  char server_public[TR_CURVE_KEY_SIZE];
  char server_secret[TR_CURVE_KEY_SIZE];
  char client_public[TR_CURVE_KEY_SIZE];
  char client_secret[TR_CURVE_KEY_SIZE];
} tr__config;

static void tr__wipe(void *data, size_t size) {
  volatile unsigned char *p = data;
  while (size-- > 0) *p++ = 0;
}

static void tr__config_clear(tr__config *cfg) {
  free(cfg->component);
  free(cfg->allowed);
  tr__wipe(cfg, sizeof *cfg);
}

int tr_curve_available(void) { return zmq_has("curve") ? 1 : 0; }

size_t tr_curve_key_line(const char *text, size_t n, char key[TR_CURVE_KEY_SIZE]) {
  size_t len = 0;
  while (len < n && text[len] != '\n' && text[len] != '\r') len++;
  while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\t')) len--;
  key[0] = '\0';
  if (len == TR_CURVE_KEY_SIZE - 1) {
    memcpy(key, text, len);
    key[len] = '\0';
  }
  return len;
}

tr_status *tr_curve_keypair(char public_key[TR_CURVE_KEY_SIZE],
                            char secret_key[TR_CURVE_KEY_SIZE]) {
  public_key[0] = secret_key[0] = '\0';
  if (!tr_curve_available() || zmq_curve_keypair(public_key, secret_key) != 0) {
    int err = tr_curve_available() ? zmq_errno() : ENOTSUP;
    public_key[0] = secret_key[0] = '\0';
    return TR_STATUS(TR_TRANSPORT, "cannot make a CurveZMQ keypair: %s (libzmq %d.%d.%d, "
                                   "CurveZMQ %s)", zmq_strerror(err), ZMQ_VERSION_MAJOR,
                     ZMQ_VERSION_MINOR, ZMQ_VERSION_PATCH,
                     tr_curve_available() ? "available" : "not built in");
  }
  return NULL;
}

/* Copies a Z85 key given as option `which` into out, checking its form. */
static tr_status *tr__copy_key(const char *key, const char *which, char out[TR_CURVE_KEY_SIZE]) {
  size_t len = strlen(key);
  uint8_t binary[32];
  if (len != TR_CURVE_KEY_SIZE - 1) {
    return TR_STATUS(TR_VALUE, "option %s: a CurveZMQ key is %d Z85 characters, got %zu",
                     which, TR_CURVE_KEY_SIZE - 1, len);
  }
  if (zmq_z85_decode(binary, key) == NULL) {
    return TR_STATUS(TR_VALUE, "option %s: not a Z85-encoded CurveZMQ key", which);
  }
  tr__wipe(binary, sizeof binary);
  memcpy(out, key, TR_CURVE_KEY_SIZE);
  return NULL;
}

/* Checks that `public_key` belongs to `secret_key` (options `pub_name`, `sec_name`). */
static tr_status *tr__check_pair(const char *public_key, const char *secret_key,
                                 const char *pub_name, const char *sec_name) {
  char derived[TR_CURVE_KEY_SIZE];
  if (zmq_curve_public(derived, secret_key) != 0) {
    return TR_STATUS(TR_TRANSPORT, "cannot check option %s against %s: %s", pub_name, sec_name,
                     zmq_strerror(zmq_errno()));
  }
  int same = strcmp(derived, public_key) == 0;
  tr__wipe(derived, sizeof derived);
  if (!same) {
    return TR_STATUS(TR_VALUE, "option %s is not the public key of option %s", pub_name,
                     sec_name);
  }
  return NULL;
}

static tr_status *tr__need_curve(const char *why) {
  if (tr_curve_available()) return NULL;
  return TR_STATUS(TR_TRANSPORT, "CurveZMQ was asked for (%s is set) but libzmq %d.%d.%d was "
                                 "built without it", why, ZMQ_VERSION_MAJOR, ZMQ_VERSION_MINOR,
                   ZMQ_VERSION_PATCH);
}

/* Reads curve_clients (one Z85 public key per line; blank lines and '#' lines skipped) into
 * cfg->allowed. */
static tr_status *tr__parse_allowed(const char *text, tr__config *cfg) {
  cfg->allow_listed = 1;
  size_t lines = 1;
  for (const char *c = text; *c; c++) lines += *c == '\n';
  cfg->allowed = calloc(lines, sizeof *cfg->allowed);
  if (cfg->allowed == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "component '%s': cannot hold %zu client keys",
                     cfg->component, lines);
  }
  size_t line_no = 0;
  for (const char *line = text; *line != '\0';) {
    const char *end = strchr(line, '\n');
    if (end == NULL) end = line + strlen(line);
    line_no++;
    const char *a = line, *b = end;
    while (a < b && (*a == ' ' || *a == '\t' || *a == '\r')) a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r')) b--;
    if (a < b && *a != '#') {
      char key[TR_CURVE_KEY_SIZE];
      size_t len = (size_t)(b - a);
      if (len != TR_CURVE_KEY_SIZE - 1) {
        return TR_STATUS(TR_VALUE, "option curve_clients, line %zu: a CurveZMQ public key is %d "
                                   "Z85 characters, got %zu", line_no, TR_CURVE_KEY_SIZE - 1, len);
      }
      memcpy(key, a, len);
      key[len] = '\0';
      if (zmq_z85_decode(cfg->allowed[cfg->n_allowed], key) == NULL) {
        return TR_STATUS(TR_VALUE, "option curve_clients, line %zu: not a Z85-encoded CurveZMQ "
                                   "key", line_no);
      }
      cfg->n_allowed++;
    }
    line = *end == '\n' ? end + 1 : end;
  }
  return NULL;
}

static tr_status *tr__config_init(const tr_transport_options *opts, int is_server,
                                  tr__config *cfg) {
  static const tr_transport_options defaults;
  if (opts == NULL) opts = &defaults;
  memset(cfg, 0, sizeof *cfg);
  cfg->deadline_ms = opts->deadline_ms ? opts->deadline_ms : TR_TRANSPORT_DEFAULT_DEADLINE_MS;
  cfg->max_message = opts->max_message ? opts->max_message : TR_TRANSPORT_DEFAULT_MAX_MESSAGE;
  if (cfg->max_message > ((size_t)1 << 31)) {
    return TR_STATUS(TR_VALUE, "option max_message: %zu bytes is more than the 2 GiB a message "
                               "may carry", cfg->max_message);
  }
  const char *component = opts->component ? opts->component : TR__UNNAMED;
  size_t len = strlen(component);
  cfg->component = malloc(len + 1);
  if (cfg->component == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot copy component name '%s': out of memory",
                     component);
  }
  memcpy(cfg->component, component, len + 1);
  cfg->max_request = opts->max_request ? opts->max_request : cfg->max_message;
  if (cfg->max_request > ((size_t)1 << 31)) {
    return TR_STATUS(TR_VALUE, "option max_request: %zu bytes is more than the 2 GiB a message "
                               "may carry", cfg->max_request);
  }

  if (is_server) {
    if (opts->curve_clients != NULL && opts->curve_server_public == NULL) {
      return TR_STATUS(TR_VALUE, "component '%s': curve_clients is set but curve_server_public "
                                 "and curve_server_secret are not", component);
    }
    if ((opts->curve_server_public == NULL) != (opts->curve_server_secret == NULL)) {
      return TR_STATUS(TR_VALUE, "component '%s': a server needs both curve_server_public and "
                                 "curve_server_secret, or neither; got only %s", component,
                       opts->curve_server_public ? "curve_server_public" : "curve_server_secret");
    }
    if (opts->curve_server_public == NULL) return NULL;
    TR_RETURN_IF_ERROR(tr__need_curve("curve_server_secret"));
    TR_RETURN_IF_ERROR(
        tr__copy_key(opts->curve_server_public, "curve_server_public", cfg->server_public));
    TR_RETURN_IF_ERROR(
        tr__copy_key(opts->curve_server_secret, "curve_server_secret", cfg->server_secret));
    TR_RETURN_IF_ERROR(tr__check_pair(cfg->server_public, cfg->server_secret,
                                      "curve_server_public", "curve_server_secret"));
    if (opts->curve_clients != NULL) TR_RETURN_IF_ERROR(tr__parse_allowed(opts->curve_clients, cfg));
    cfg->curve = 1;
    return NULL;
  }

  int has_pub = opts->curve_client_public != NULL, has_sec = opts->curve_client_secret != NULL;
  if (has_pub != has_sec) {
    return TR_STATUS(TR_VALUE, "component '%s': a client needs both curve_client_public and "
                               "curve_client_secret, or neither; got only %s", component,
                     has_pub ? "curve_client_public" : "curve_client_secret");
  }
  if (opts->curve_server_public == NULL) {
    if (has_pub) {
      return TR_STATUS(TR_VALUE, "component '%s': curve_client_public and curve_client_secret "
                                 "are set but curve_server_public is not", component);
    }
    return NULL;
  }
  TR_RETURN_IF_ERROR(tr__need_curve("curve_server_public"));
  TR_RETURN_IF_ERROR(
      tr__copy_key(opts->curve_server_public, "curve_server_public", cfg->server_public));
  if (has_pub) {
    TR_RETURN_IF_ERROR(
        tr__copy_key(opts->curve_client_public, "curve_client_public", cfg->client_public));
    TR_RETURN_IF_ERROR(
        tr__copy_key(opts->curve_client_secret, "curve_client_secret", cfg->client_secret));
    TR_RETURN_IF_ERROR(tr__check_pair(cfg->client_public, cfg->client_secret,
                                      "curve_client_public", "curve_client_secret"));
  } else {
    TR_RETURN_IF_ERROR(tr_curve_keypair(cfg->client_public, cfg->client_secret));
  }
  cfg->curve = 1;
  return NULL;
}

/* ---- Sockets -------------------------------------------------------------------------------- */

/* Opens a socket of `type` with ZMQ_LINGER 0 (closing never waits for unsent messages). */
static tr_status *tr__socket_open(int type, const char *component, const char *endpoint,
                                  void **out) {
  *out = NULL;
  void *ctx;
  TR_RETURN_IF_ERROR(tr__zmq_context(&ctx));
  void *sock = zmq_socket(ctx, type);
  if (sock == NULL) {
    return TR_STATUS(TR_TRANSPORT, "cannot open a socket for component '%s' at %s: %s",
                     component, endpoint, zmq_strerror(zmq_errno()));
  }
  int linger = 0;
  if (zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger) != 0) {
    int err = zmq_errno();
    zmq_close(sock);
    return TR_STATUS(TR_TRANSPORT, "cannot set ZMQ_LINGER on a socket for component '%s' at "
                                   "%s: %s", component, endpoint, zmq_strerror(err));
  }
  *out = sock;
  return NULL;
}

static tr_status *tr__setsockopt(void *sock, int option, const char *option_name,
                                 const void *value, size_t size, const tr__config *cfg,
                                 const char *endpoint) {
  if (zmq_setsockopt(sock, option, value, size) == 0) return NULL;
  return TR_STATUS(TR_TRANSPORT, "cannot set %s on a socket for component '%s' at %s: %s",
                   option_name, cfg->component, endpoint, zmq_strerror(zmq_errno()));
}

/* Receives the rest of a multi-frame message and throws it away. */
static void tr__drain(void *sock) {
  int more = 1;
  while (more) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) more = 0;
    else more = zmq_msg_more(&part);
    zmq_msg_close(&part);
  }
}

/* Milliseconds left until deadline_ns (rounded up), 0 when it has passed. */
static long tr__ms_left(uint64_t deadline_ns) {
  uint64_t now = tr_plat_now_ns();
  if (now >= deadline_ns) return 0;
  return (long)((deadline_ns - now + 999999u) / 1000000u);
}

/* ---- Servers -------------------------------------------------------------------------------- */

struct tr_server {
  tr__config cfg;
  tr_handler_fn handler;
  void *handler_ctx;
  char endpoint[TR_ENDPOINT_MAX]; /* as bound (ZMQ_LAST_ENDPOINT) */
  void *router;
  uint8_t *reply; /* the reply frame under construction: header + max_message bytes */
  _Atomic uint64_t dropped;
  _Atomic uint64_t disconnects;
  _Atomic uint64_t refused;
  int refused_logged;         /* under tr__zap_lock: whether, and when, a refusal was logged */
  uint64_t refused_logged_ns;
  void *monitor;        /* ipc, tcp: ZMQ_EVENT_DISCONNECTED of the router */
  char zap_domain[48];  /* CurveZMQ: this server's ZAP domain */
  char ipc_path[TR_ENDPOINT_MAX]; /* ipc: the socket file this server made, removed when it stops */
  /* The actor's pipe and thread (tr_server_start only). */
  void *pipe_parent; /* the owner's end */
  void *pipe_child;  /* the server thread's end */
  tr_plat_thread *thread;
};

/* A name no other inproc endpoint of this process has: "inproc://tilerun-<what>-<n>". */
static void tr__unique_inproc(const char *what, char *out, size_t size) {
  static _Atomic uint64_t counter;
  snprintf(out, size, "inproc://tilerun-%s-%llu", what,
           (unsigned long long)atomic_fetch_add(&counter, 1));
}

/* ---- ZAP: which CurveZMQ clients a server serves -------------------------------------------
 * ZeroMQ asks one handler per context (a REP socket bound to inproc://zeromq.zap.01) about every
 * CurveZMQ handshake once one is bound. tilerun binds it in a thread when its first CurveZMQ
 * server starts; each such server registers under its own ZAP domain, with its allow-list (or
 * none: every client that knows the server's key). An unknown domain is refused. */
#define TR__ZAP_ENDPOINT "inproc://zeromq.zap.01"

static tr_plat_once tr__zap_once = TR_PLAT_ONCE_INIT;
static tr_plat_mutex tr__zap_lock;
static tr_status *tr__zap_failed; /* why the handler could not start */
static void *tr__zap_socket;
static tr_plat_thread *tr__zap_thread;
static tr_server **tr__zap_servers; /* guarded by tr__zap_lock */
static size_t tr__zap_count, tr__zap_cap;

/* Decides one handshake: 1 when the server registered under `domain` serves `key`. */
static int tr__zap_allows(const char *domain, size_t domain_size, const uint8_t *key,
                          size_t key_size, char *why, size_t why_size) {
  int allowed = 0;
  tr_plat_mutex_lock(&tr__zap_lock);
  tr_server *found = NULL;
  for (size_t i = 0; i < tr__zap_count && found == NULL; i++) {
    const char *d = tr__zap_servers[i]->zap_domain;
    if (strlen(d) == domain_size && memcmp(d, domain, domain_size) == 0) found = tr__zap_servers[i];
  }
  char z85[TR_CURVE_KEY_SIZE] = "?";
  if (key_size == 32) zmq_z85_encode(z85, key, 32);
  if (found == NULL) {
    snprintf(why, why_size, "no tilerun server has ZAP domain '%.*s'", (int)domain_size, domain);
  } else if (!found->cfg.allow_listed) {
    allowed = 1;
  } else {
    for (size_t i = 0; i < found->cfg.n_allowed && !allowed; i++) {
      allowed = key_size == 32 && memcmp(found->cfg.allowed[i], key, 32) == 0;
    }
    if (!allowed) {
      /* A refused client retries every 100 ms: one line a second says so, with the count. */
      uint64_t refused = atomic_fetch_add(&found->refused, 1) + 1, now = tr_plat_now_ns();
      if (found->refused_logged == 0 || now - found->refused_logged_ns >= 1000000000u) {
        snprintf(why, why_size, "component '%s' at %s refused a CurveZMQ client: its key %s is "
                 "not on the server's client list (%llu refused so far)", found->cfg.component,
                 found->endpoint, z85, (unsigned long long)refused);
        found->refused_logged = 1;
        found->refused_logged_ns = now;
      }
    }
  }
  tr_plat_mutex_unlock(&tr__zap_lock);
  return allowed;
}

/* Answers ZAP requests for the life of the process. */
static void tr__zap_run(void *arg) {
  (void)arg;
  for (;;) {
    zmq_msg_t parts[8];
    size_t n = 0;
    int more = 1, failed = 0;
    while (more) {
      zmq_msg_t part;
      zmq_msg_init(&part);
      if (zmq_msg_recv(&part, tr__zap_socket, 0) < 0) {
        zmq_msg_close(&part);
        if (zmq_errno() == ETERM) return;
        failed = 1;
        break;
      }
      more = zmq_msg_more(&part);
      if (n < 8) parts[n++] = part;
      else zmq_msg_close(&part);
    }
    if (failed) {
      for (size_t i = 0; i < n; i++) zmq_msg_close(&parts[i]);
      continue;
    }
    /* version, request id, domain, address, routing id, mechanism, credentials */
    char why[640] = "";
    int allowed = 0;
    if (n >= 7 && zmq_msg_size(&parts[5]) == 5 && memcmp(zmq_msg_data(&parts[5]), "CURVE", 5) == 0) {
      allowed = tr__zap_allows(zmq_msg_data(&parts[2]), zmq_msg_size(&parts[2]),
                               zmq_msg_data(&parts[6]), zmq_msg_size(&parts[6]), why, sizeof why);
    } else {
      snprintf(why, sizeof why, "a ZAP request tilerun does not handle (%zu frames)", n);
    }
    if (!allowed && why[0] != '\0') fprintf(stderr, "tilerun: %s\n", why);
    const char *code = allowed ? "200" : "400";
    (void)zmq_send(tr__zap_socket, "1.0", 3, ZMQ_SNDMORE);
    if (n >= 2) {
      (void)zmq_send(tr__zap_socket, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), ZMQ_SNDMORE);
    } else {
      (void)zmq_send(tr__zap_socket, "", 0, ZMQ_SNDMORE);
    }
    (void)zmq_send(tr__zap_socket, code, 3, ZMQ_SNDMORE);
    (void)zmq_send(tr__zap_socket, allowed ? "OK" : "not on the client list",
                   allowed ? 2 : 22, ZMQ_SNDMORE);
    (void)zmq_send(tr__zap_socket, "", 0, ZMQ_SNDMORE); /* user id */
    (void)zmq_send(tr__zap_socket, "", 0, 0);           /* metadata */
    for (size_t i = 0; i < n; i++) zmq_msg_close(&parts[i]);
  }
}

static void tr__zap_start(void) {
  tr__zap_failed = tr_plat_mutex_init(&tr__zap_lock);
  void *ctx = NULL;
  if (tr__zap_failed == NULL) tr__zap_failed = tr__zmq_context(&ctx);
  if (tr__zap_failed == NULL) {
    tr__zap_socket = zmq_socket(ctx, ZMQ_REP);
    int linger = 0;
    if (tr__zap_socket == NULL ||
        zmq_setsockopt(tr__zap_socket, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_bind(tr__zap_socket, TR__ZAP_ENDPOINT) != 0) {
      tr__zap_failed = TR_STATUS(TR_TRANSPORT, "cannot start the CurveZMQ client check (ZAP "
                                 "handler at %s): %s", TR__ZAP_ENDPOINT, zmq_strerror(zmq_errno()));
    }
  }
  /* The socket moves to the thread; starting it orders the memory. */
  if (tr__zap_failed == NULL) tr__zap_failed = tr_plat_thread_start(tr__zap_run, NULL, &tr__zap_thread);
}

/* Registers a CurveZMQ server with the ZAP handler, starting the handler first if need be. */
static tr_status *tr__zap_register(tr_server *s) {
  static _Atomic uint64_t counter;
  tr_plat_once_run(&tr__zap_once, tr__zap_start);
  if (tr__zap_failed != NULL) {
    return TR_STATUS(tr_status_code(tr__zap_failed), "%s", tr_status_message(tr__zap_failed));
  }
  snprintf(s->zap_domain, sizeof s->zap_domain, "tilerun-%lld-%llu",
           (long long)tr_plat_process_id(), (unsigned long long)atomic_fetch_add(&counter, 1));
  tr_plat_mutex_lock(&tr__zap_lock);
  tr_status *status = NULL;
  if (tr__zap_count == tr__zap_cap) {
    size_t cap = tr__zap_cap ? 2 * tr__zap_cap : 8;
    tr_server **grown = realloc(tr__zap_servers, cap * sizeof *grown);
    if (grown == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "cannot register component '%s' with the ZAP handler",
                         s->cfg.component);
    } else {
      tr__zap_servers = grown;
      tr__zap_cap = cap;
    }
  }
  if (status == NULL) tr__zap_servers[tr__zap_count++] = s;
  tr_plat_mutex_unlock(&tr__zap_lock);
  if (status != NULL) s->zap_domain[0] = '\0';
  return status;
}

static void tr__zap_unregister(tr_server *s) {
  if (s->zap_domain[0] == '\0') return;
  tr_plat_mutex_lock(&tr__zap_lock);
  for (size_t i = 0; i < tr__zap_count; i++) {
    if (tr__zap_servers[i] == s) tr__zap_servers[i] = tr__zap_servers[--tr__zap_count];
  }
  tr_plat_mutex_unlock(&tr__zap_lock);
  s->zap_domain[0] = '\0';
}

/* Stops watching `sock` and closes its monitor socket (NULL: nothing). */
static void tr__monitor_close(void *sock, void *monitor) {
  if (monitor == NULL) return;
  (void)zmq_socket_monitor(sock, NULL, 0);
  zmq_close(monitor);
}

/* Opens a PAIR socket receiving `events` of `sock` (zmq_socket_monitor). */
static tr_status *tr__monitor_open(void *sock, int events, const char *component,
                                   const char *endpoint, void **out) {
  *out = NULL;
  char name[64];
  tr__unique_inproc("monitor", name, sizeof name);
  if (zmq_socket_monitor(sock, name, events) != 0) {
    return TR_STATUS(TR_TRANSPORT, "cannot watch the connections of component '%s' at %s: %s",
                     component, endpoint, zmq_strerror(zmq_errno()));
  }
  void *monitor;
  tr_status *opened = tr__socket_open(ZMQ_PAIR, component, name, &monitor);
  if (opened != NULL) {
    (void)zmq_socket_monitor(sock, NULL, 0);
    return opened;
  }
  if (zmq_connect(monitor, name) != 0) {
    int err = zmq_errno();
    tr__monitor_close(sock, monitor);
    return TR_STATUS(TR_TRANSPORT, "cannot watch the connections of component '%s' at %s: %s",
                     component, endpoint, zmq_strerror(err));
  }
  *out = monitor;
  return NULL;
}

/* Reads one monitor event without waiting: its code, or 0 when none is queued. */
static int tr__monitor_event(void *monitor) {
  zmq_msg_t part;
  zmq_msg_init(&part);
  int event = 0;
  if (zmq_msg_recv(&part, monitor, ZMQ_DONTWAIT) >= 0) {
    if (zmq_msg_size(&part) >= 2) { /* a uint16 in host order, then the value */
      uint16_t code;
      memcpy(&code, zmq_msg_data(&part), sizeof code);
      event = code;
    }
    if (zmq_msg_more(&part)) tr__drain(monitor); /* the endpoint frame */
  }
  zmq_msg_close(&part);
  return event;
}

/* For an ipc endpoint whose socket file exists: whether a server answers there. A connect that
 * succeeds is a live server; one refused is a file a dead server left. Waits at most a second. */
static tr_status *tr__ipc_check_free(const char *component, const char *endpoint) {
  const char *path = endpoint + strlen("ipc://");
  if (path[0] == '@' || !tr_plat_file_exists(path)) return NULL; /* abstract, or nothing there */
  if (!tr_plat_is_socket(path)) { /* ZeroMQ's bind would unlink whatever is there */
    return TR_STATUS(TR_TRANSPORT, "cannot bind component '%s' to %s: %s is a %s, not a socket a server left "
                     "(move it, or choose another path)", component, endpoint, path,
                     tr_plat_is_dir(path) ? "directory" : "file");
  }
  void *probe = NULL, *monitor = NULL;
  TR_RETURN_IF_ERROR(tr__socket_open(ZMQ_DEALER, component, endpoint, &probe));
  tr_status *status = tr__monitor_open(probe, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                                       ZMQ_EVENT_CONNECT_DELAYED, component, endpoint, &monitor);
  int live = 0;
  if (status == NULL && zmq_connect(probe, endpoint) == 0) {
    uint64_t deadline = tr_plat_now_ns() + 1000000000u;
    int decided = 0;
    while (!decided) {
      zmq_pollitem_t item = {monitor, 0, ZMQ_POLLIN, 0};
      long left = tr__ms_left(deadline);
      if (left == 0 || zmq_poll(&item, 1, left) <= 0) break;
      int event = tr__monitor_event(monitor);
      if (event == ZMQ_EVENT_CONNECTED) live = decided = 1;
      else if (event == ZMQ_EVENT_CONNECT_RETRIED) decided = 1;
    }
  }
  tr__monitor_close(probe, monitor);
  zmq_close(probe);
  if (status == NULL && live) {
    status = TR_STATUS(TR_TRANSPORT, "cannot bind component '%s' to %s: the path is in use by a "
                                     "live server (stop it, or choose another path)", component,
                       endpoint);
  }
  return status;
}

/* Unbinds the server's endpoint and, for ipc and tcp, waits (at most a second) until ZeroMQ's
 * I/O thread has closed the listening socket: closing a ZeroMQ socket only asks for that, so
 * without the wait an immediate bind of the same address could find it still in use. An inproc
 * endpoint is released at once by the unbind. */
static void tr__server_unbind(tr_server *s) {
  if (tr__starts_with(s->endpoint, "inproc://")) {
    (void)zmq_unbind(s->router, s->endpoint);
    return;
  }
  void *monitor = NULL; /* without one, the unbind is not waited for */
  tr_status *status = tr__monitor_open(s->router, ZMQ_EVENT_CLOSED, s->cfg.component, s->endpoint, &monitor);
  tr_status_destroy(&status);
  if (zmq_unbind(s->router, s->endpoint) == 0 && monitor != NULL) {
    /* The only event asked for is ZMQ_EVENT_CLOSED: its arrival is the signal. */
    zmq_pollitem_t item = {monitor, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 1000) == 1) tr__drain(monitor);
  }
  tr__monitor_close(s->router, monitor);
}

/* Releases the server's endpoint, closes its sockets and frees it. */
static void tr__server_free(tr_server *s) {
  if (s == NULL) return;
  tr__zap_unregister(s);
  tr__monitor_close(s->router, s->monitor);
  if (s->router != NULL && s->endpoint[0] != '\0') tr__server_unbind(s);
  if (s->ipc_path[0] != '\0' && tr_plat_file_exists(s->ipc_path) && !tr_plat_is_dir(s->ipc_path)) {
    tr_status *removed = tr_plat_remove_tree(s->ipc_path); /* ZeroMQ leaves the file */
    tr_status_destroy(&removed);
  }
  if (s->router != NULL) zmq_close(s->router);
  if (s->pipe_child != NULL) zmq_close(s->pipe_child);
  if (s->pipe_parent != NULL) zmq_close(s->pipe_parent);
  free(s->reply);
  tr__config_clear(&s->cfg);
  free(s);
}

/* Makes a server and binds its ROUTER socket in the calling thread. */
static tr_status *tr__server_open(const char *endpoint, tr_handler_fn handler, void *ctx,
                                  const tr_transport_options *opts, tr_server **out) {
  *out = NULL;
  assert(handler != NULL);
  char resolved[TR_ENDPOINT_MAX];
  TR_RETURN_IF_ERROR(tr_endpoint_resolve(endpoint, resolved));
  tr_server *s = calloc(1, sizeof *s);
  if (s == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot make a server for %s: out of memory", resolved);
  }
  atomic_init(&s->dropped, 0);
  atomic_init(&s->disconnects, 0);
  atomic_init(&s->refused, 0);
  s->handler = handler;
  s->handler_ctx = ctx;
  tr_status *status = tr__config_init(opts, 1, &s->cfg);
  if (status == NULL) {
    s->reply = malloc(TR__REPLY_HEADER_SIZE + s->cfg.max_message);
    if (s->reply == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "cannot allocate the %zu-byte reply buffer of "
                                           "component '%s' at %s", s->cfg.max_message,
                         s->cfg.component, resolved);
    }
  }
  if (status == NULL) {
    status = tr__socket_open(ZMQ_ROUTER, s->cfg.component, resolved, &s->router);
  }
  if (status == NULL && s->cfg.curve) {
    int on = 1;
    status = tr__setsockopt(s->router, ZMQ_CURVE_SERVER, "ZMQ_CURVE_SERVER", &on, sizeof on,
                            &s->cfg, resolved);
    if (status == NULL) {
      status = tr__setsockopt(s->router, ZMQ_CURVE_SECRETKEY, "ZMQ_CURVE_SECRETKEY",
                              s->cfg.server_secret, TR_CURVE_KEY_SIZE, &s->cfg, resolved);
    }
    if (status == NULL) status = tr__zap_register(s);
    if (status == NULL) {
      status = tr__setsockopt(s->router, ZMQ_ZAP_DOMAIN, "ZMQ_ZAP_DOMAIN", s->zap_domain,
                              strlen(s->zap_domain), &s->cfg, resolved);
    }
  }
  int is_inproc = tr__starts_with(resolved, "inproc://");
  if (status == NULL && !is_inproc) {
    /* ZeroMQ refuses a larger message before allocating it, and drops the peer. Under CurveZMQ
     * the cap applies to the encrypted frame: its command name, nonce and MAC come on top. */
    int64_t cap = (int64_t)(TR__ID_SIZE + s->cfg.max_request) + (s->cfg.curve ? 64 : 0);
    status = tr__setsockopt(s->router, ZMQ_MAXMSGSIZE, "ZMQ_MAXMSGSIZE", &cap, sizeof cap,
                            &s->cfg, resolved);
  }
  if (status == NULL && tr__starts_with(resolved, "ipc://")) {
    status = tr__ipc_check_free(s->cfg.component, resolved);
  }
  if (status == NULL && !is_inproc) {
    status = tr__monitor_open(s->router, ZMQ_EVENT_DISCONNECTED, s->cfg.component, resolved,
                              &s->monitor);
  }
  /* Named before the bind: the ZAP handler may name the server as soon as it is bound. */
  if (status == NULL) snprintf(s->endpoint, sizeof s->endpoint, "%s", resolved);
  if (status == NULL && zmq_bind(s->router, resolved) != 0) {
    int e = zmq_errno();
    s->endpoint[0] = '\0';
    status = TR_STATUS(TR_TRANSPORT, "cannot bind component '%s' to %s: %s%s", s->cfg.component, resolved,
                       zmq_strerror(e),
                       e == ENODEV && tr__starts_with(resolved, "tcp://")
                           ? " (a server binds an IP address or an interface's name, not a host name: "
                             "tcp://127.0.0.1:PORT, or tcp://:PORT for loopback)"
                           : "");
  }
  if (status == NULL && tr__starts_with(resolved, "ipc://") && resolved[6] != '@') {
    snprintf(s->ipc_path, sizeof s->ipc_path, "%s", resolved + 6);
  }
  if (status != NULL) {
    tr__server_free(s);
    return status;
  }
  char bound[TR_ENDPOINT_MAX];
  size_t size = sizeof bound;
  if (zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, bound, &size) != 0) {
    snprintf(bound, sizeof bound, "%s", resolved);
  }
  if (s->zap_domain[0] != '\0') tr_plat_mutex_lock(&tr__zap_lock); /* the handler reads it */
  memcpy(s->endpoint, bound, sizeof bound);
  if (s->zap_domain[0] != '\0') tr_plat_mutex_unlock(&tr__zap_lock);
  *out = s;
  return NULL;
}

/* Receives one message from the ROUTER socket (if one is there) and answers it. */
static void tr__server_answer(tr_server *s) {
  zmq_msg_t identity, body;
  zmq_msg_init(&identity);
  if (zmq_msg_recv(&identity, s->router, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&identity);
    return;
  }
  if (!zmq_msg_more(&identity)) { /* a ROUTER always adds a peer's identity frame first */
    zmq_msg_close(&identity);
    atomic_fetch_add(&s->dropped, 1);
    return;
  }
  zmq_msg_init(&body);
  if (zmq_msg_recv(&body, s->router, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&body);
    zmq_msg_close(&identity);
    return;
  }
  size_t size = zmq_msg_size(&body);
  int malformed = size < TR__ID_SIZE || size - TR__ID_SIZE > s->cfg.max_request;
  if (zmq_msg_more(&body)) {
    tr__drain(s->router);
    malformed = 1;
  }
  if (malformed) {
    zmq_msg_close(&body);
    zmq_msg_close(&identity);
    atomic_fetch_add(&s->dropped, 1);
    return;
  }

  const uint8_t *request = zmq_msg_data(&body);
  size_t cap = s->cfg.max_message, reply_size = 0;
  uint8_t *payload = s->reply + TR__REPLY_HEADER_SIZE;
  memcpy(s->reply, request, TR__ID_SIZE); /* echo the request id */
  tr_status *status = s->handler(s->handler_ctx, request + TR__ID_SIZE, size - TR__ID_SIZE,
                                 payload, cap, &reply_size);
  zmq_msg_close(&body);
  if (status == NULL && reply_size > cap) {
    status = TR_STATUS(TR_INTERNAL, "the handler of component '%s' reported a reply of %zu "
                                    "bytes in room for %zu", s->cfg.component, reply_size, cap);
  }
  if (status == NULL) {
    s->reply[TR__ID_SIZE] = TR__KIND_REPLY;
  } else {
    /* The error text replaces the reply: "<CodeName>: <message>", cut to fit. */
    s->reply[TR__ID_SIZE] = TR__KIND_ERROR;
    char *text = (char *)payload;
    size_t need = tr_status_format(status, cap > 0 ? text : NULL, cap);
    reply_size = cap == 0 ? 0 : (need < cap ? need : cap - 1);
    tr_status_destroy(&status);
  }
  /* A ROUTER drops a reply whose peer has gone, or whose queue is full: it never blocks. */
  if (zmq_msg_send(&identity, s->router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&identity);
    return;
  }
  (void)zmq_send(s->router, s->reply, TR__REPLY_HEADER_SIZE + reply_size, ZMQ_DONTWAIT);
}

/* Answers requests until the pipe (when there is one) says stop or *stop becomes nonzero. */
static tr_status *tr__server_loop(tr_server *s, volatile int *stop) {
  zmq_pollitem_t items[3] = {{s->router, 0, ZMQ_POLLIN, 0}};
  int count = 1, pipe_at = -1, monitor_at = -1;
  if (s->pipe_child != NULL) {
    pipe_at = count;
    items[count++] = (zmq_pollitem_t){s->pipe_child, 0, ZMQ_POLLIN, 0};
  }
  if (s->monitor != NULL) {
    monitor_at = count;
    items[count++] = (zmq_pollitem_t){s->monitor, 0, ZMQ_POLLIN, 0};
  }
  for (;;) {
    if (stop != NULL && *stop) return NULL;
    int rc = zmq_poll(items, count, TR__SERVER_POLL_MS);
    if (rc < 0) {
      int err = zmq_errno();
      if (err == EINTR) continue;
      return TR_STATUS(TR_TRANSPORT, "component '%s' at %s cannot poll its socket: %s",
                       s->cfg.component, s->endpoint, zmq_strerror(err));
    }
    if (pipe_at >= 0 && (items[pipe_at].revents & ZMQ_POLLIN)) return NULL;
    if (monitor_at >= 0 && (items[monitor_at].revents & ZMQ_POLLIN)) {
      while (tr__monitor_event(s->monitor) == ZMQ_EVENT_DISCONNECTED) {
        atomic_fetch_add(&s->disconnects, 1);
      }
    }
    if (items[0].revents & ZMQ_POLLIN) tr__server_answer(s);
  }
}

static void tr__server_thread(void *arg) {
  tr_server *s = arg;
  tr_status *status = tr__server_loop(s, NULL);
  if (status != NULL) {
    /* Nobody waits for this thread's result until it is stopped: say why it ended. */
    char text[512];
    tr_status_format(status, text, sizeof text);
    fprintf(stderr, "tilerun: server thread ended: %s\n", text);
    tr_status_destroy(&status);
  }
}

tr_status *tr_server_start(const char *endpoint, tr_handler_fn handler, void *ctx,
                           const tr_transport_options *opts, tr_server **out) {
  *out = NULL;
  tr_server *s;
  TR_RETURN_IF_ERROR(tr__server_open(endpoint, handler, ctx, opts, &s));

  /* The pipe: a PAIR of inproc sockets under a name no other server uses. */
  char pipe_name[64];
  tr__unique_inproc("server-pipe", pipe_name, sizeof pipe_name);
  tr_status *status = tr__socket_open(ZMQ_PAIR, s->cfg.component, pipe_name, &s->pipe_parent);
  if (status == NULL && zmq_bind(s->pipe_parent, pipe_name) != 0) {
    status = TR_STATUS(TR_TRANSPORT, "cannot bind the pipe of component '%s' to %s: %s",
                       s->cfg.component, pipe_name, zmq_strerror(zmq_errno()));
  }
  if (status == NULL) {
    status = tr__socket_open(ZMQ_PAIR, s->cfg.component, pipe_name, &s->pipe_child);
  }
  if (status == NULL && zmq_connect(s->pipe_child, pipe_name) != 0) {
    status = TR_STATUS(TR_TRANSPORT, "cannot connect the pipe of component '%s' to %s: %s",
                       s->cfg.component, pipe_name, zmq_strerror(zmq_errno()));
  }
  /* The router and the child's pipe move to the server thread; starting a thread orders the
   * memory, as ZeroMQ asks of a socket that changes threads. */
  if (status == NULL) status = tr_plat_thread_start(tr__server_thread, s, &s->thread);
  if (status != NULL) {
    tr__server_free(s);
    return status;
  }
  *out = s;
  return NULL;
}

const char *tr_server_endpoint(const tr_server *server) { return server->endpoint; }

uint64_t tr_server_dropped(const tr_server *server) {
  return atomic_load(&((tr_server *)server)->dropped);
}

void tr_server_stop(tr_server **server_p) {
  if (server_p == NULL || *server_p == NULL) return;
  tr_server *s = *server_p;
  *server_p = NULL;
  /* One empty message on the pipe says stop. The pipe's queue is empty and its peer is there
   * until the thread is joined, so this send does not wait. */
  if (s->thread != NULL) { /* tr_server_start's; tr_server_bind's has none */
    (void)zmq_send(s->pipe_parent, "", 0, 0);
    tr_plat_thread_join(&s->thread);
  }
  tr__server_free(s);
}

tr_status *tr_server_run(const char *endpoint, tr_handler_fn handler, void *ctx,
                         const tr_transport_options *opts, volatile int *stop) {
  assert(stop != NULL);
  tr_server *s;
  TR_RETURN_IF_ERROR(tr__server_open(endpoint, handler, ctx, opts, &s));
  tr_status *status = tr__server_loop(s, stop);
  tr__server_free(s);
  return status;
}

tr_status *tr_server_bind(const char *endpoint, tr_handler_fn handler, void *ctx,
                          const tr_transport_options *opts, tr_server **out) {
  return tr__server_open(endpoint, handler, ctx, opts, out);
}

tr_status *tr_server_serve(tr_server *server, volatile int *stop) {
  assert(stop != NULL && server->thread == NULL);
  return tr__server_loop(server, stop);
}

uint64_t tr_server_disconnects(const tr_server *server) {
  return atomic_load(&((tr_server *)server)->disconnects);
}

uint64_t tr_server_refused(const tr_server *server) {
  return atomic_load(&((tr_server *)server)->refused);
}

/* ---- Clients -------------------------------------------------------------------------------- */

/* One pooled DEALER socket. */
typedef struct tr__slot {
  void *socket;
  void *monitor; /* ipc, tcp: the socket's handshakes and disconnections */
  int up;        /* a handshake succeeded and no disconnection followed */
  int ever_up;   /* a handshake succeeded once: the server was reached through this socket */
  int dropped;   /* a connection that was up dropped since the last send */
  struct tr__slot *next;
} tr__slot;

/* Heartbeats on ipc and tcp connections: a peer silent this long is disconnected (at most; a
 * client whose deadline is shorter takes half its deadline, at least TR__HEARTBEAT_LEAST_MS, so a
 * server that stops answering is seen as gone within the first call's deadline: a call that runs
 * out its deadline closes its socket, and a fresh one to a silent server never counts as up). A
 * ping goes out every third of it. */
#define TR__HEARTBEAT_TIMEOUT_MS 3000
#define TR__HEARTBEAT_LEAST_MS 100

struct tr_client {
  tr__config cfg;
  char endpoint[TR_ENDPOINT_MAX]; /* resolved */
  tr_plat_mutex lock;             /* guards the fields below */
  tr__slot *idle;                 /* sockets no call is using */
  size_t busy;                    /* sockets calls are using */
  uint64_t last_id;
  int lost; /* a connection to the server was up and dropped, and none is up since */
};

/* Opens and connects one DEALER socket for the client, in a new slot. Thread-safe. */
static tr_status *tr__slot_open(tr_client *c, tr__slot **out) {
  *out = NULL;
  tr__slot *slot = malloc(sizeof *slot);
  if (slot == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot open a socket for component '%s' at %s: out of "
                                       "memory", c->cfg.component, c->endpoint);
  }
  slot->next = NULL;
  slot->monitor = NULL;
  slot->up = 0;
  slot->ever_up = 0;
  slot->dropped = 0;
  tr_status *status = tr__socket_open(ZMQ_DEALER, c->cfg.component, c->endpoint, &slot->socket);
  if (status == NULL && !tr__starts_with(c->endpoint, "inproc://")) {
    int timeout = TR__HEARTBEAT_TIMEOUT_MS;
    if (c->cfg.deadline_ms / 2 < (uint32_t)timeout) timeout = (int)(c->cfg.deadline_ms / 2);
    if (timeout < TR__HEARTBEAT_LEAST_MS) timeout = TR__HEARTBEAT_LEAST_MS;
    int ivl = timeout / 3;
    status = tr__setsockopt(slot->socket, ZMQ_HEARTBEAT_IVL, "ZMQ_HEARTBEAT_IVL", &ivl,
                            sizeof ivl, &c->cfg, c->endpoint);
    if (status == NULL) {
      status = tr__setsockopt(slot->socket, ZMQ_HEARTBEAT_TIMEOUT, "ZMQ_HEARTBEAT_TIMEOUT",
                              &timeout, sizeof timeout, &c->cfg, c->endpoint);
    }
    if (status == NULL) {
      status = tr__monitor_open(slot->socket, ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                ZMQ_EVENT_DISCONNECTED, c->cfg.component, c->endpoint,
                                &slot->monitor);
    }
  }
  if (status == NULL && c->cfg.curve) {
    status = tr__setsockopt(slot->socket, ZMQ_CURVE_SERVERKEY, "ZMQ_CURVE_SERVERKEY",
                            c->cfg.server_public, TR_CURVE_KEY_SIZE, &c->cfg, c->endpoint);
    if (status == NULL) {
      status = tr__setsockopt(slot->socket, ZMQ_CURVE_PUBLICKEY, "ZMQ_CURVE_PUBLICKEY",
                              c->cfg.client_public, TR_CURVE_KEY_SIZE, &c->cfg, c->endpoint);
    }
    if (status == NULL) {
      status = tr__setsockopt(slot->socket, ZMQ_CURVE_SECRETKEY, "ZMQ_CURVE_SECRETKEY",
                              c->cfg.client_secret, TR_CURVE_KEY_SIZE, &c->cfg, c->endpoint);
    }
  }
  if (status == NULL && zmq_connect(slot->socket, c->endpoint) != 0) {
    status = TR_STATUS(TR_TRANSPORT, "cannot connect to component '%s' at %s: %s",
                       c->cfg.component, c->endpoint, zmq_strerror(zmq_errno()));
  }
  if (status != NULL) {
    tr__monitor_close(slot->socket, slot->monitor);
    if (slot->socket != NULL) zmq_close(slot->socket);
    free(slot);
    return status;
  }
  *out = slot;
  return NULL;
}

static void tr__slot_close(tr__slot *slot) {
  tr__monitor_close(slot->socket, slot->monitor);
  zmq_close(slot->socket);
  free(slot);
}

/* Takes one monitor event of the slot into its state and the client's; returns it. */
static int tr__slot_event(tr_client *c, tr__slot *slot, int event) {
  if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
    slot->up = 1;
    slot->ever_up = 1;
    tr_plat_mutex_lock(&c->lock);
    c->lost = 0;
    tr_plat_mutex_unlock(&c->lock);
  } else if (event == ZMQ_EVENT_DISCONNECTED && slot->up) {
    slot->up = 0;
    slot->dropped = 1;
    tr_plat_mutex_lock(&c->lock);
    c->lost = 1;
    tr_plat_mutex_unlock(&c->lock);
  }
  return event;
}

/* Reads the slot's queued monitor events; 1 when the server is known gone for this slot: its
 * connection was up and dropped, and none is up now (a slot that never reached the server waits
 * for its handshake, or the deadline: the server may be back while the client's flag says lost). */
static int tr__slot_lost(tr_client *c, tr__slot *slot) {
  if (slot->monitor == NULL) return 0;
  while (tr__slot_event(c, slot, tr__monitor_event(slot->monitor)) != 0) {}
  tr_plat_mutex_lock(&c->lock);
  int lost = c->lost && !slot->up && slot->ever_up;
  tr_plat_mutex_unlock(&c->lock);
  return lost;
}

/* While a reply is awaited: 1 when the connection the request went out on dropped since the send
 * (the request is lost with it, even where the socket reconnected since: a restarted server never
 * got it). */
static int tr__slot_dropped(tr_client *c, tr__slot *slot) {
  if (slot->monitor == NULL) return 0;
  while (tr__slot_event(c, slot, tr__monitor_event(slot->monitor)) != 0) {}
  return slot->dropped;
}

tr_status *tr_client_new(const char *endpoint, const tr_transport_options *opts,
                         tr_client **out) {
  *out = NULL;
  tr_client *c = calloc(1, sizeof *c);
  if (c == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot make a client for '%s': out of memory",
                     endpoint ? endpoint : "");
  }
  tr_status *status = tr_endpoint_resolve(endpoint, c->endpoint);
  if (status == NULL) status = tr__config_init(opts, 0, &c->cfg);
  if (status != NULL) {
    tr__config_clear(&c->cfg);
    free(c);
    return status;
  }
  status = tr_plat_mutex_init(&c->lock);
  if (status != NULL) {
    tr__config_clear(&c->cfg);
    free(c);
    return status;
  }
  /* The first socket now, so a bad endpoint fails here rather than at the first call. */
  status = tr__slot_open(c, &c->idle);
  if (status != NULL) {
    tr_plat_mutex_destroy(&c->lock);
    tr__config_clear(&c->cfg);
    free(c);
    return status;
  }
  *out = c;
  return NULL;
}

const char *tr_client_endpoint(const tr_client *client) { return client->endpoint; }

void tr_client_destroy(tr_client **client_p) {
  if (client_p == NULL || *client_p == NULL) return;
  tr_client *c = *client_p;
  *client_p = NULL;
  assert(c->busy == 0 && "tr_client_destroy while a call is running");
  while (c->idle != NULL) {
    tr__slot *slot = c->idle;
    c->idle = slot->next;
    tr__slot_close(slot);
  }
  tr_plat_mutex_destroy(&c->lock);
  tr__config_clear(&c->cfg);
  free(c);
}

/* Takes an idle socket (NULL when none) and a fresh request id. */
static tr__slot *tr__client_take(tr_client *c, uint64_t *id) {
  tr_plat_mutex_lock(&c->lock);
  tr__slot *slot = c->idle;
  if (slot != NULL) c->idle = slot->next;
  c->busy++;
  *id = ++c->last_id;
  tr_plat_mutex_unlock(&c->lock);
  return slot;
}

/* Gives a socket back to the pool (slot != NULL) or just ends the call's claim (slot == NULL,
 * after the call closed its socket). */
static void tr__client_give(tr_client *c, tr__slot *slot) {
  tr_plat_mutex_lock(&c->lock);
  if (slot != NULL) {
    slot->next = c->idle;
    c->idle = slot;
  }
  c->busy--;
  tr_plat_mutex_unlock(&c->lock);
}

static tr_status *tr__deadline_error(const tr_client *c) {
  return TR_STATUS(TR_TRANSPORT, "component '%s' at %s did not answer within %u ms",
                   c->cfg.component, c->endpoint, (unsigned)c->cfg.deadline_ms);
}

static tr_status *tr__lost_error(const tr_client *c) {
  return TR_STATUS(TR_TRANSPORT, "component '%s' at %s dropped the connection (the server ended "
                                 "or stopped answering); calls fail at once until it is back",
                   c->cfg.component, c->endpoint);
}

/* 1 when the socket can take a message now. A pooled socket that cannot has lost its peer for
 * good (an inproc server that was stopped: inproc never reconnects). */
static int tr__writable_now(void *sock) {
  zmq_pollitem_t item = {sock, 0, ZMQ_POLLOUT, 0};
  return zmq_poll(&item, 1, 0) == 1 && (item.revents & ZMQ_POLLOUT);
}

/* Sends `msg` on `sock` before deadline_ns. Returns 0 when sent, 1 when the deadline passed,
 * -1 on another failure (*err set). On success `msg` is consumed. */
static int tr__send_by(void *sock, zmq_msg_t *msg, uint64_t deadline_ns, int *err) {
  for (;;) {
    if (zmq_msg_send(msg, sock, ZMQ_DONTWAIT) >= 0) return 0;
    *err = zmq_errno();
    if (*err != EAGAIN && *err != EINTR) return -1;
    long left = tr__ms_left(deadline_ns);
    if (left == 0) return 1;
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLOUT, 0};
    if (zmq_poll(&item, 1, left) < 0 && zmq_errno() != EINTR) {
      *err = zmq_errno();
      return -1;
    }
  }
}

/* Waits until deadline_ns for the reply to request `id`, discarding any other message. A reply
 * already queued counts even when the deadline has passed (the caller may have done other work
 * since sending): with no time left the socket is still read without waiting. Returns 0 with
 * *reply holding the reply frame, 1 when the deadline passed, -1 on another failure (*err set). */
static int tr__recv_by(tr_client *c, tr__slot *slot, uint64_t id, uint64_t deadline_ns,
                       zmq_msg_t *reply, int *err) {
  void *sock = slot->socket;
  for (;;) {
    long left = tr__ms_left(deadline_ns);
    zmq_pollitem_t items[2] = {{sock, 0, ZMQ_POLLIN, 0}, {slot->monitor, 0, ZMQ_POLLIN, 0}};
    int rc = zmq_poll(items, slot->monitor != NULL ? 2 : 1, left); /* left 0: a look only */
    if (rc < 0) {
      *err = zmq_errno();
      if (*err == EINTR) continue;
      return -1;
    }
    if (!(items[0].revents & ZMQ_POLLIN)) {
      if ((items[1].revents & ZMQ_POLLIN) && tr__slot_dropped(c, slot)) return 2;
      if (left == 0) return 1; /* nothing queued, and no time left */
      continue; /* the loop's top decides whether time is up */
    }
    if (zmq_msg_recv(reply, sock, ZMQ_DONTWAIT) < 0) {
      *err = zmq_errno();
      if (*err == EAGAIN || *err == EINTR) continue;
      return -1;
    }
    int more = zmq_msg_more(reply);
    if (more) tr__drain(sock); /* never sent by a tilerun server: discard it whole */
    if (!more && zmq_msg_size(reply) >= TR__REPLY_HEADER_SIZE &&
        tr__get_id(zmq_msg_data(reply)) == id) {
      return 0;
    }
    /* A stale reply (to an earlier call) or a malformed one: not ours. */
  }
}

/* Ends a call that failed on its socket: closing it (linger 0) drops whatever the server may
 * still send there, so a late reply never reaches another call. rc as tr__send_by's. */
static tr_status *tr__call_failed(tr_client *c, tr__slot *slot, int rc, int err) {
  if (rc == 2) {
    /* The server went: nothing will answer on this connection. The socket stays in the pool,
     * so that its monitor sees ZeroMQ reconnect when a server is back. */
    tr__client_give(c, slot);
    return tr__lost_error(c);
  }
  tr__slot_close(slot);
  tr__client_give(c, NULL);
  if (rc == 1) return tr__deadline_error(c);
  return TR_STATUS(TR_TRANSPORT, "cannot reach component '%s' at %s: %s", c->cfg.component,
                   c->endpoint, zmq_strerror(err));
}

tr_status *tr_client_send(tr_client *client, const uint8_t *request, size_t request_size,
                          tr_client_pending *pending) {
  assert(client != NULL && pending != NULL);
  assert(request != NULL || request_size == 0);
  memset(pending, 0, sizeof(*pending));
  tr_client *c = client;
  if (request_size > c->cfg.max_message) {
    return TR_STATUS(TR_TRANSPORT, "a request of %zu bytes for component '%s' at %s is larger "
                                   "than the transport's max_message of %zu bytes",
                     request_size, c->cfg.component, c->endpoint, c->cfg.max_message);
  }
  uint64_t deadline_ns = tr_plat_now_ns() + (uint64_t)c->cfg.deadline_ms * 1000000u;

  zmq_msg_t msg;
  if (zmq_msg_init_size(&msg, TR__ID_SIZE + request_size) != 0) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot make a %zu-byte request for component '%s' at "
                                       "%s: %s", request_size, c->cfg.component, c->endpoint,
                     zmq_strerror(zmq_errno()));
  }
  uint64_t id;
  tr__slot *slot = tr__client_take(c, &id);
  uint8_t *frame = zmq_msg_data(&msg);
  tr__put_id(frame, id);
  if (request_size > 0) memcpy(frame + TR__ID_SIZE, request, request_size);

  if (slot != NULL && !tr__writable_now(slot->socket)) {
    tr__slot_close(slot);
    slot = NULL;
  }
  if (slot == NULL) {
    tr_status *status = tr__slot_open(c, &slot);
    if (status != NULL) {
      zmq_msg_close(&msg);
      tr__client_give(c, NULL);
      return status;
    }
  }

  if (tr__slot_lost(c, slot)) {
    zmq_msg_close(&msg);
    return tr__call_failed(c, slot, 2, 0);
  }
  slot->dropped = 0; /* from here on, a drop loses this request */
  int err = 0;
  int rc = tr__send_by(slot->socket, &msg, deadline_ns, &err);
  zmq_msg_close(&msg); /* a no-op once sent */
  if (rc != 0) return tr__call_failed(c, slot, rc, err);
  pending->client = c;
  pending->slot = slot;
  pending->id = id;
  pending->deadline_ns = deadline_ns;
  return NULL;
}

tr_status *tr_client_receive(tr_client_pending *pending, uint8_t *reply, size_t reply_cap,
                             size_t *reply_size) {
  assert(pending != NULL && pending->client != NULL && reply_size != NULL);
  assert(reply != NULL || reply_cap == 0);
  *reply_size = 0;
  tr_client *c = pending->client;
  tr__slot *slot = pending->slot;
  uint64_t id = pending->id, deadline_ns = pending->deadline_ns;
  memset(pending, 0, sizeof(*pending)); /* received once */
  int err = 0;
  zmq_msg_t in;
  zmq_msg_init(&in);
  int rc = tr__recv_by(c, slot, id, deadline_ns, &in, &err);
  if (rc != 0) {
    zmq_msg_close(&in);
    return tr__call_failed(c, slot, rc, err);
  }

  /* The exchange is complete: the socket is clean and goes back to the pool. */
  tr__client_give(c, slot);
  const uint8_t *data = zmq_msg_data(&in);
  size_t size = zmq_msg_size(&in) - TR__REPLY_HEADER_SIZE;
  const uint8_t *payload = data + TR__REPLY_HEADER_SIZE;
  tr_status *status = NULL;
  if (data[TR__ID_SIZE] == TR__KIND_ERROR) {
    status = TR_STATUS(TR_TRANSPORT, "component '%s' at %s failed: %.*s", c->cfg.component,
                       c->endpoint, (int)size, (const char *)payload);
  } else if (data[TR__ID_SIZE] != TR__KIND_REPLY) {
    status = TR_STATUS(TR_TRANSPORT, "component '%s' at %s sent a reply of unknown kind %u",
                       c->cfg.component, c->endpoint, (unsigned)data[TR__ID_SIZE]);
  } else if (size > reply_cap) {
    status = TR_STATUS(TR_TRANSPORT, "component '%s' at %s sent a reply of %zu bytes, larger "
                                     "than the caller's buffer of %zu bytes", c->cfg.component,
                       c->endpoint, size, reply_cap);
  } else {
    if (size > 0) memcpy(reply, payload, size);
    *reply_size = size;
  }
  zmq_msg_close(&in);
  return status;
}

void tr_client_abandon(tr_client_pending *pending) {
  if (pending == NULL || pending->client == NULL) return;
  tr__slot_close(pending->slot); /* linger 0: the late reply goes nowhere */
  tr__client_give(pending->client, NULL);
  memset(pending, 0, sizeof(*pending));
}

tr_status *tr_client_call(tr_client *client, const uint8_t *request, size_t request_size,
                          uint8_t *reply, size_t reply_cap, size_t *reply_size) {
  assert(reply_size != NULL);
  *reply_size = 0;
  tr_client_pending pending;
  TR_RETURN_IF_ERROR(tr_client_send(client, request, request_size, &pending));
  return tr_client_receive(&pending, reply, reply_cap, reply_size);
}
