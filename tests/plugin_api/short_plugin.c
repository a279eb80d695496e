/* short_plugin.c: a backend built against the public headers whose kernel type is shorter than
 * tr_kernel_type version 1 (as one built against an older, shorter struct would be): its
 * struct_size ends after `interface`, and so does the memory it lies in. tilerun must refuse it,
 * naming this backend, roll back the valid type registered before it, and read nothing past it
 * (under ASan a read past the end is an error). */
#include <stddef.h>
#include <string.h>

#include "tilerun/backend.h"

static const char *const kCpu[] = {"cpu", NULL};

static const char *refuse_all(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  (void)call;
  (void)buf;
  (void)size;
  return "never serves";
}

static tr_status *no_kernel(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out) {
  (void)self;
  (void)call;
  (void)out;
  return NULL;
}

/* Registered first, and valid: the refusal of the next must roll it back. */
static tr_kernel_type g_valid = {
    sizeof(tr_kernel_type), "short_valid_first", NULL, kCpu, NULL, 0, 0, NULL, NULL,
    refuse_all, NULL, no_kernel, NULL, NULL,
};

/* The short type: struct_size, key and interface, in exactly that many bytes. */
#define SHORT_SIZE offsetof(tr_kernel_type, devices)
static _Alignas(tr_kernel_type) unsigned char g_short[SHORT_SIZE];

__attribute__((visibility("default"))) tr_status *tilerun_backend_init(const tr_backend_api *api) {
  const tr_kernel_interface *iface = NULL;
  if (TR_STRUCT_HAS(api, tr_backend_api, find_interface)) {
    iface = api->find_interface(api->host, "RMSNormFwdOp", "RMSNormRowFwdInterface");
  }
  g_valid.interface = iface;
  tr_kernel_type whole = {SHORT_SIZE, "short_rms_norm", iface, kCpu, NULL, 0, 0, NULL, NULL,
                          NULL, NULL, no_kernel, NULL, NULL};
  memcpy(g_short, &whole, SHORT_SIZE);
  tr_status *status = api->register_kernel_type(api->host, "RMSNormFwdOp", &g_valid);
  if (status != NULL) return status;
  return api->register_kernel_type(api->host, "RMSNormFwdOp", (const tr_kernel_type *)(const void *)g_short);
}
