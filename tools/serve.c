/* serve.c: `tilerun serve`: a component hosted out of process, behind the transport. */
#include "tools/serve.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "components/build/build.h"
#include "components/launch/launch.h"
#include "components/pipeline/pipeline.h"
#include "components/pipeline/transport.h"
#include "components/select/intree_table.h"
#include "components/settle/settle.h"
#include "components/validate/validate.h"
#include "manifest/manifest.h"
#include "platform/platform.h"
#include "proto/components.pb.h"
#include "kernels/cuda/driver.h"
#include "registry/registry.h"
#include "runtime/op_cache.h"
#include "sharing/sharing.h"
#include "tilerun/tilerun.h"

static volatile int g_stop; /* set from a signal handler (the platform layer's) */

/* A usage error: "tilerun serve: <message>"; returns exit status 2. */
static int usage_error(FILE *err, const char *option, tr_status *status) {
  fprintf(err, "tilerun serve: %s%s%s\n", option ? option : "", option ? ": " : "", tr_status_message(status));
  tr_status_destroy(&status);
  return 2;
}

static int fail(FILE *err, tr_status *status) {
  char text[1024];
  tr_status_format(status, text, sizeof(text));
  fprintf(err, "tilerun serve: %s\n", text);
  tr_status_destroy(&status);
  return 1;
}

static tr_status *load_backends(tr_registry *reg) {
  char **dirs = NULL;
  size_t n = 0;
  tr_registry_set_interface_finder(reg, tr_select_intree_interface, NULL); /* for plugins' kernel types */
  tr_registry_set_load_check(reg, tr_select_intree_load_check, NULL);     /* a refused type: one load failure */
  TR_RETURN_IF_ERROR(tr_backend_search_path(&dirs, &n));
  tr_discovery *found = NULL;
  tr_status *status = tr_backend_discover((const char *const *)dirs, n, &found);
  if (status == NULL) status = tr_registry_load_all(reg, found);
  tr_discovery_destroy(&found);
  tr_discovery_free_dirs(&dirs, n);
  return status;
}

/* The benchmark's echo: the raw round trip of a transport, through a real process. */
static tr_status *echo(void *ctx, const uint8_t *req, size_t n, uint8_t *reply, size_t cap, size_t *size) {
  (void)ctx;
  if (n > cap) n = cap;
  memcpy(reply, req, n);
  *size = n;
  return NULL;
}

/* Where the select component reads device facts: the facts stated on the command line, else
 * cuda's from the device, else the backend's that registered the device type. */
#define MAX_STATED 8
typedef struct serve_facts {
  tr_registry *registry;
  size_t n;
  tr_device devices[MAX_STATED];
  tr_device_facts facts[MAX_STATED];
} serve_facts;

static tr_status *facts_of(void *ctx, const tr_device *device, tr_device_facts *out) {
  const serve_facts *f = ctx;
  for (size_t i = 0; i < f->n; i++) {
    if (strcmp(f->devices[i].type, device->type) == 0 && f->devices[i].index == (device->index < 0 ? 0 : device->index)) {
      *out = f->facts[i];
      return NULL;
    }
  }
  if (strcmp(device->type, "cuda") == 0) {
    out->calibration = NULL;
    return tr_cu_device_facts(device->index < 0 ? 0 : device->index, &out->arch, &out->sm_count, &out->smem_budget);
  }
  return tr_registry_device_facts(f->registry, device, out);
}

#define FACTS_FORMAT "DEVICE=ARCH,SMS,SHARED_BYTES, e.g. cuda:0=90,132,232448"

/* The field `name` of --device-facts `all`, at *text: a whole number from 0 to `max`, ended by a
 * comma or the end (the `last` field: the end). Advances *text past it and its comma. Fails with
 * TR_VALUE naming the field and the value. */
static tr_status *facts_field(const char *all, const char **text, const char *name, long long max, int last,
                              long long *out) {
  const char *start = *text, *end = start + strcspn(start, ",");
  long long value = 0;
  int too_large = 0;
  const char *c = start;
  for (; c < end && *c >= '0' && *c <= '9'; c++) {
    too_large |= value > (max - (*c - '0')) / 10;
    if (!too_large) value = value * 10 + (*c - '0');
  }
  if (start == end) {
    return TR_STATUS(TR_VALUE, "--device-facts '%s': %s is missing (" FACTS_FORMAT ")", all, name);
  }
  if (c != end || too_large) {
    return TR_STATUS(TR_VALUE, "--device-facts '%s': %s must be a whole number from 0 to %lld, got '%.*s' ("
                     FACTS_FORMAT ")", all, name, max, (int)(end - start), start);
  }
  if (last && *end != '\0') {
    return TR_STATUS(TR_VALUE, "--device-facts '%s': more than the three fields ARCH,SMS,SHARED_BYTES ("
                     FACTS_FORMAT ")", all);
  }
  *text = *end == ',' ? end + 1 : end;
  *out = value;
  return NULL;
}

/* "cuda:0=90,132,232448": DEVICE=ARCH,SMS,SHARED_BYTES. Fails with TR_VALUE naming the field that
 * is wrong and its value. */
static tr_status *parse_facts(const char *text, tr_device *device, tr_device_facts *facts) {
  const char *eq = strchr(text, '=');
  char dev[64];
  if (eq == NULL || eq == text || (size_t)(eq - text) >= sizeof(dev)) {
    return TR_STATUS(TR_VALUE, "--device-facts '%s': %s (" FACTS_FORMAT ")", text,
                     eq == NULL ? "no '=' after the DEVICE" : eq == text ? "DEVICE is missing" : "DEVICE is too long");
  }
  memcpy(dev, text, (size_t)(eq - text));
  dev[eq - text] = '\0';
  tr_status *status = tr_device_parse(dev, device);
  if (status != NULL) {
    tr_status *named = TR_STATUS(TR_VALUE, "--device-facts '%s': DEVICE: %s", text, tr_status_message(status));
    tr_status_destroy(&status);
    return named;
  }
  if (device->index < 0) device->index = 0;
  long long arch = 0, sms = 0, smem = 0;
  const char *p = eq + 1;
  TR_RETURN_IF_ERROR(facts_field(text, &p, "ARCH", INT32_MAX, 0, &arch));
  TR_RETURN_IF_ERROR(facts_field(text, &p, "SMS", INT32_MAX, 0, &sms));
  TR_RETURN_IF_ERROR(facts_field(text, &p, "SHARED_BYTES", INT64_MAX, 1, &smem));
  *facts = (tr_device_facts){(int32_t)arch, NULL, (int32_t)sms, (int64_t)smem};
  return NULL;
}

/* The largest request a component's client sends: the largest of the five requests nanopb can
 * encode (a launch request carries tensors by reference, never their data). ZeroMQ refuses a
 * larger message before allocating it. */
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define SERVE_MAX_REQUEST                                                                       \
  MAX(MAX(MAX(tilerun_ValidateRequest_size, tilerun_SettleRequest_size),                        \
          MAX(tilerun_SelectRequest_size, tilerun_BuildRequest_size)),                          \
      tilerun_LaunchRequest_size)

/* Reads a whole file named by option `what` into *out (NUL-terminated; the caller frees). */
static tr_status *read_text(const char *path, const char *what, char **out) {
  *out = NULL;
  size_t size = 0;
  tr_status *status = tr_plat_read_file(path, out, &size);
  if (status != NULL) {
    tr_status *named = TR_STATUS(tr_status_code(status), "%s: %s", what, tr_status_message(status));
    tr_status_destroy(&status);
    return named;
  }
  char *text = realloc(*out, size + 1);
  if (text == NULL) {
    free(*out);
    *out = NULL;
    return TR_STATUS(TR_OUT_OF_MEMORY, "%s: %zu bytes", what, size);
  }
  text[size] = '\0';
  *out = text;
  return NULL;
}

/* The server's Curve secret: $TILERUN_CURVE_SECRET, else the first line of the file
 * $TILERUN_CURVE_SECRET_FILE names; "" when neither is set. Never from the command line, where
 * every local user can read it (ps). */
static tr_status *curve_secret_of(char secret[TR_CURVE_KEY_SIZE], const char **source) {
  secret[0] = '\0';
  *source = NULL;
  const char *env = tr_plat_getenv("TILERUN_CURVE_SECRET");
  const char *file = tr_plat_getenv("TILERUN_CURVE_SECRET_FILE");
  char *text = NULL;
  if (env != NULL && env[0] != '\0') {
    *source = "TILERUN_CURVE_SECRET";
    size_t n = strlen(env) + 1;
    text = malloc(n);
    if (text == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "the Curve secret key");
    memcpy(text, env, n);
  } else if (file != NULL && file[0] != '\0') {
    *source = "TILERUN_CURVE_SECRET_FILE";
    TR_RETURN_IF_ERROR(read_text(file, "TILERUN_CURVE_SECRET_FILE", &text));
  } else {
    return NULL;
  }
  size_t len = tr_curve_key_line(text, strlen(text), secret);
  tr_status *status = NULL;
  if (secret[0] == '\0') {
    status = TR_STATUS(TR_VALUE, "the Curve secret key must be 40 Z85 characters, got %zu characters (from %s)",
                       len, *source);
  }
  memset(text, 0, strlen(text));
  free(text);
  return status;
}

/* The in-tree ops' select table (select and build serve from it), with its facts. */
typedef struct serve_select {
  serve_facts facts;
  tr_select_table *table;
} serve_select;

int tr_serve_main(const char *component, const char *endpoint, const char *manifest_dir,
                  const char *curve_secret, const char *const *device_facts, size_t n_device_facts, FILE *out,
                  FILE *err) {
  /* every argument is checked before anything is loaded: a bad one is a usage error (2) */
  int id = strcmp(component, "echo") == 0 ? TR_COMPONENT_COUNT : tr_component_id_of(component);
  if (id < 0) {
    fprintf(err, "tilerun serve: no component '%s' (served: validate, settle, select, build, launch, echo)\n",
            component);
    return 2;
  }
  if (n_device_facts > 0 && id != TR_COMPONENT_SELECT) { /* build compiles for the arch it is asked */
    fprintf(err, "tilerun serve: --device-facts is for select, not %s\n", component);
    return 2;
  }
  if (n_device_facts > MAX_STATED) {
    fprintf(err, "tilerun serve: at most %d --device-facts, got %zu\n", MAX_STATED, n_device_facts);
    return 2;
  }
  if (curve_secret != NULL) {
    fprintf(err, "tilerun serve: --curve-secret is no longer read: on the command line every local user sees the "
            "key (ps); give it in TILERUN_CURVE_SECRET, or in a file named by TILERUN_CURVE_SECRET_FILE\n");
    return 2;
  }
  serve_facts stated;
  memset(&stated, 0, sizeof(stated));
  for (; stated.n < n_device_facts; stated.n++) {
    tr_status *bad = parse_facts(device_facts[stated.n], &stated.devices[stated.n], &stated.facts[stated.n]);
    for (size_t k = 0; bad == NULL && k < stated.n; k++) { /* one entry a device: a second would be ignored */
      if (tr_device_equal(&stated.devices[k], &stated.devices[stated.n])) {
        char dev[TR_DEVICE_FORMAT_MAX];
        tr_device_format(&stated.devices[k], dev, sizeof(dev));
        bad = TR_STATUS(TR_VALUE, "--device-facts '%s': %s is given twice (once, as '%s')", device_facts[stated.n], dev,
                        device_facts[k]);
      }
    }
    if (bad != NULL) return usage_error(err, NULL, bad);
  }
  char resolved[TR_ENDPOINT_MAX];
  tr_status *bad_endpoint = tr_endpoint_resolve(endpoint, resolved);
  if (bad_endpoint != NULL) return usage_error(err, "--endpoint", bad_endpoint);
  if (strncmp(resolved, "inproc://", 9) == 0) { /* no other process could reach it */
    fprintf(err, "tilerun serve: --endpoint '%s': an inproc:// endpoint is reachable only inside this process; "
            "serve at ipc://PATH or tcp://:PORT\n", endpoint);
    return 2;
  }
  tr_manifest *m = NULL;
  tr_registry *reg = NULL;
  serve_select *sel = NULL;
  tr_runtime *rt = NULL; /* launch: ops built and run here */
  tr_op_cache *ops = NULL;
  tr_launch_context launch_ctx;
  memset(&launch_ctx, 0, sizeof(launch_ctx));
  tr_status *status = NULL;
  tr_handler_fn handler;
  void *ctx;
  if (id == TR_COMPONENT_COUNT) {
    handler = echo;
    ctx = NULL;
  } else if (id == TR_COMPONENT_VALIDATE) {
    status = tr_manifest_load_dir(manifest_dir, &m);
    handler = tr_validate_handle;
    ctx = m;
  } else if (id == TR_COMPONENT_LAUNCH) { /* by descriptor only: its own runtime, every component inline */
    tr_runtime_options o;
    memset(&o, 0, sizeof(o));
    o.manifest_dir = manifest_dir;
    o.pipeline_file = "";
    status = tr_runtime_new(&o, &rt);
    if (status == NULL) status = tr_op_cache_new(rt, &ops);
    if (status == NULL) status = tr_share_maps_new(&launch_ctx.maps);
    launch_ctx.registry = ops ? tr_op_cache_registry(ops) : NULL;
    launch_ctx.ops = &tr_op_cache_ops;
    launch_ctx.ops_ctx = ops;
    handler = tr_launch_handle;
    ctx = &launch_ctx;
  } else if (id == TR_COMPONENT_SETTLE) {
    status = tr_registry_new(NULL, NULL, &reg);
    if (status == NULL) status = load_backends(reg);
    handler = tr_settle_handle;
    ctx = reg;
  } else {
    sel = calloc(1, sizeof(*sel));
    status = sel ? tr_registry_new(NULL, NULL, &reg) : TR_STATUS(TR_OUT_OF_MEMORY, "the select table");
    if (status == NULL) sel->facts = stated;
    if (status == NULL) status = load_backends(reg);
    if (status == NULL) {
      sel->facts.registry = reg;
      status = tr_select_table_new_intree(reg, facts_of, &sel->facts, &sel->table);
    }
    handler = id == TR_COMPONENT_BUILD ? tr_build_handle : tr_select_handle; /* build: the same table */
    ctx = sel ? sel->table : NULL;
  }
  tr_transport_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.component = component;
  opts.max_request = SERVE_MAX_REQUEST;
  char public_key[TR_CURVE_KEY_SIZE], secret[TR_CURVE_KEY_SIZE];
  const char *secret_from = NULL;
  char *clients = NULL;
  const char *clients_file = tr_plat_getenv("TILERUN_CURVE_CLIENTS");
  if (status == NULL) status = curve_secret_of(secret, &secret_from);
  if (status == NULL && secret[0] != '\0') {
    if (zmq_curve_public(public_key, secret) != 0) {
      status = TR_STATUS(TR_VALUE, "the Curve secret key (from %s) is not a key libzmq accepts: %s", secret_from,
                         zmq_strerror(zmq_errno()));
    }
    opts.curve_server_public = public_key;
    opts.curve_server_secret = secret;
  }
  if (status == NULL && clients_file != NULL && clients_file[0] != '\0') {
    if (secret[0] == '\0') {
      status = TR_STATUS(TR_VALUE, "TILERUN_CURVE_CLIENTS names a client list, but no Curve secret key is given "
                         "(TILERUN_CURVE_SECRET or TILERUN_CURVE_SECRET_FILE)");
    } else {
      status = read_text(clients_file, "TILERUN_CURVE_CLIENTS", &clients);
    }
    opts.curve_clients = clients;
  }
  tr_server *server = NULL;
  if (status == NULL) status = tr_server_bind(resolved, handler, ctx, &opts, &server);
  memset(secret, 0, sizeof(secret));
  free(clients);
  if (status != NULL) {
    if (sel != NULL) tr_select_table_destroy(&sel->table);
    free(sel);
    tr_manifest_destroy(&m);
    tr_registry_destroy(&reg);
    tr_share_maps_destroy(&launch_ctx.maps);
    tr_op_cache_destroy(&ops);
    tr_runtime_destroy(&rt);
    return fail(err, status);
  }
  g_stop = 0;
  tr_plat_on_terminate(&g_stop);
  if (opts.curve_server_public != NULL) {
    fprintf(out, "serving %s at %s (CurveZMQ, server key %s%s)\n", component, tr_server_endpoint(server), public_key,
            opts.curve_clients != NULL ? "; listed clients only" : "");
  } else { /* the endpoint bound: a tcp port of 0 or * as the port the system chose */
    fprintf(out, "serving %s at %s\n", component, tr_server_endpoint(server));
  }
  fflush(out);
  status = tr_server_serve(server, &g_stop);
  fprintf(out, "served: %llu malformed messages dropped, %llu peers disconnected (a request over %zu bytes "
          "disconnects its peer), %llu CurveZMQ clients refused\n",
          (unsigned long long)tr_server_dropped(server), (unsigned long long)tr_server_disconnects(server),
          (size_t)SERVE_MAX_REQUEST, (unsigned long long)tr_server_refused(server));
  tr_server_stop(&server);
  tr_share_maps_destroy(&launch_ctx.maps);
  tr_op_cache_destroy(&ops);
  tr_runtime_destroy(&rt);
  if (sel != NULL) tr_select_table_destroy(&sel->table);
  free(sel);
  tr_manifest_destroy(&m);
  tr_registry_destroy(&reg);
  if (status != NULL) return fail(err, status);
  fprintf(out, "stopped\n");
  return 0;
}
