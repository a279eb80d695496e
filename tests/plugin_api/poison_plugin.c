/* poison_plugin.c: a backend (public headers alone) whose kernel types fail one of the selector's
 * construction checks, chosen by $TR_POISON_MODE; each init appends a line to $TR_POISON_LOG, so
 * a test counts how many times it was loaded. It also registers a detector (target 'a', claiming
 * device type 'acme') and a builder, which the rollback must take away with the kernel types. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tilerun/backend.h"
#include "tilerun/kernel_type.h"

static tr_status *claim_acme(void *ctx, const tr_device *device, int *claims) {
  (void)ctx;
  *claims = strcmp(device->type, "acme") == 0;
  return NULL;
}

static tr_status *noop_call(void *self, DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                            size_t n_outputs) {
  (void)self;
  (void)inputs;
  (void)n_inputs;
  (void)outputs;
  (void)n_outputs;
  return NULL;
}

static tr_status *build_noop(void *ctx, const tr_build_request *req, tr_kernel *out) {
  (void)ctx;
  (void)req;
  out->call = noop_call;
  return NULL;
}

static tr_status *factory(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out) {
  (void)self;
  (void)call;
  out->call = noop_call;
  return NULL;
}

static const char *const kCpu[] = {"cpu", NULL};
static const char *const kOneArg[] = {"x", NULL};
static const char *const kOverB[] = {"poison_b", NULL};
static const char *const kOverA[] = {"poison_a", NULL};
static const char *const kOverNobody[] = {"nobody", NULL};
static const char *const kTwo[] = {"cpu", "acme", NULL};
static const int32_t kArchs[] = {90};

/* struct_size, key, interface (set at init), devices, archs, n_archs, general, preferred_over,
 * base, refusal, entry_for, factory, forward_args, ctx */
static const tr_kernel_type kA = {sizeof(tr_kernel_type), "poison_a", NULL, kCpu, NULL, 0, 0, NULL, NULL,
                                  NULL, NULL, factory, NULL, NULL};
static const tr_kernel_type kB = {sizeof(tr_kernel_type), "poison_b", NULL, kCpu, NULL, 0, 0, NULL, NULL,
                                  NULL, NULL, factory, NULL, NULL};
static tr_kernel_type g_a, g_b; /* made from kA and kB at each init (the object may stay loaded) */

__attribute__((visibility("default"))) const uint32_t tilerun_backend_abi = TR_BACKEND_ABI;

__attribute__((visibility("default"))) tr_status *tilerun_backend_init(const tr_backend_api *api) {
  const char *log = getenv("TR_POISON_LOG");
  FILE *f = log != NULL ? fopen(log, "a") : NULL;
  if (f != NULL) {
    fputs("init\n", f);
    fclose(f);
  }
  const char *mode = getenv("TR_POISON_MODE");
  if (mode == NULL) mode = "";
  tr_status *status = api->register_detector(api->host, "a", claim_acme, NULL);
  if (status == NULL) status = api->register_kernel_builder(api->host, "AddFwdOp", "a", build_noop, NULL);
  if (status != NULL) return status;
  const tr_kernel_interface *rms = api->find_interface(api->host, "RMSNormFwdOp", "RMSNormRowFwdInterface");
  g_a = kA;
  g_b = kB;
  g_a.interface = g_b.interface = rms;
  int two = 0;
  if (strcmp(mode, "no_factory") == 0) { /* row 1: does not implement the interface */
    g_a.factory = NULL;
  } else if (strcmp(mode, "forward_args") == 0) { /* row 2: forward does not take the arguments */
    g_a.forward_args = kOneArg;
  } else if (strcmp(mode, "general") == 0) { /* row 3: the in-tree rms_norm_looped is general too */
    g_a.general = 1;
  } else if (strcmp(mode, "cycle") == 0) { /* row 4: a -> b -> a */
    g_a.preferred_over = kOverB;
    g_b.preferred_over = kOverA;
    two = 1;
  } else if (strcmp(mode, "stray") == 0) { /* row 5: another op's interface */
    g_a.interface = api->find_interface(api->host, "LayerNormFwdOp", "LayerNormRowFwdInterface");
  } else if (strcmp(mode, "in_tree_key") == 0) { /* a key the in-tree implementations hold */
    g_a.key = "rms_norm_warp";
  } else if (strcmp(mode, "archs") == 0) { /* supported_archs on two device types */
    g_a.devices = kTwo;
    g_a.supported_archs = kArchs;
    g_a.n_archs = 1;
  } else if (strcmp(mode, "base_cycle") == 0) { /* bases a -> b -> a */
    g_a.base = &g_b;
    g_b.base = &g_a;
  } else if (strcmp(mode, "unknown_preference") == 0) { /* preferred over a key nobody holds */
    g_a.preferred_over = kOverNobody;
  }
  status = api->register_kernel_type(api->host, "RMSNormFwdOp", &g_a);
  if (status == NULL && two) status = api->register_kernel_type(api->host, "RMSNormFwdOp", &g_b);
  return status;
}
