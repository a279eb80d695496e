/* serve.c: `tilerun serve`: a component hosted out of process, behind the transport. */
#include "tools/serve.h"

#include <string.h>
#include <zmq.h>

#include "components/pipeline/pipeline.h"
#include "components/pipeline/transport.h"
#include "components/settle/settle.h"
#include "components/validate/validate.h"
#include "manifest/manifest.h"
#include "platform/platform.h"
#include "registry/registry.h"

static volatile int g_stop; /* set from a signal handler (the platform layer's) */

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

int tr_serve_main(const char *component, const char *endpoint, const char *manifest_dir,
                  const char *curve_secret, FILE *out, FILE *err) {
  int id = strcmp(component, "echo") == 0 ? TR_COMPONENT_COUNT : tr_component_id_of(component);
  if (id != TR_COMPONENT_VALIDATE && id != TR_COMPONENT_SETTLE && id != TR_COMPONENT_COUNT) {
    fprintf(err, "tilerun serve: component '%s' cannot be served out of process in this build "
            "(served: validate, settle)\n", component);
    return 2;
  }
  tr_manifest *m = NULL;
  tr_registry *reg = NULL;
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
  } else {
    status = tr_registry_new(NULL, NULL, &reg);
    if (status == NULL) status = load_backends(reg);
    handler = tr_settle_handle;
    ctx = reg;
  }
  tr_transport_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.component = component;
  char public_key[TR_CURVE_KEY_SIZE];
  if (status == NULL && curve_secret != NULL) {
    if (strlen(curve_secret) != 40) {
      status = TR_STATUS(TR_VALUE, "the Curve secret key must be 40 Z85 characters, got %zu characters",
                         strlen(curve_secret));
    } else if (zmq_curve_public(public_key, curve_secret) != 0) {
      status = TR_STATUS(TR_VALUE, "the Curve secret key is not a key libzmq accepts: %s",
                         zmq_strerror(zmq_errno()));
    }
    opts.curve_server_public = public_key;
    opts.curve_server_secret = curve_secret;
  }
  char resolved[TR_ENDPOINT_MAX];
  if (status == NULL) status = tr_endpoint_resolve(endpoint, resolved);
  if (status != NULL) {
    tr_manifest_destroy(&m);
    tr_registry_destroy(&reg);
    return fail(err, status);
  }
  g_stop = 0;
  tr_plat_on_terminate(&g_stop);
  if (curve_secret) fprintf(out, "serving %s at %s (CurveZMQ, server key %s)\n", component, resolved, public_key);
  else fprintf(out, "serving %s at %s\n", component, resolved);
  fflush(out);
  status = tr_server_run(resolved, handler, ctx, &opts, &g_stop);
  tr_manifest_destroy(&m);
  tr_registry_destroy(&reg);
  if (status != NULL) return fail(err, status);
  fprintf(out, "stopped\n");
  return 0;
}
