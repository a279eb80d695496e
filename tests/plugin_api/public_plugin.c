/* public_plugin.c: a backend built against tilerun's public headers alone (no tilerun library
 * linked): it adds a float32 RMSNorm on "cpu" to RMSNormFwdOp's in-tree interface, found through
 * the API table's find_interface, so in-tree selection picks it for cpu calls. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dlpack/dlpack.h>

#include "tilerun/backend.h"

/* What the test reads back (through the loader): factories run and kernel calls made. */
typedef struct public_plugin_stats {
  int factories;
  int calls;
} public_plugin_stats;
__attribute__((visibility("default"))) public_plugin_stats public_plugin_stats_v = {0, 0};

/* The kernel's state: what its build identity fixed. */
typedef struct rms_state {
  int64_t row;
  double eps;
  int weight;
} rms_state;

static const char *const kCpu[] = {"cpu", NULL};

static int is_float32(DLDataType t) { return t.code == kDLFloat && t.bits == 32 && t.lanes == 1; }

/* y = x / sqrt(mean(x^2) + eps) * weight, row by row; x and y contiguous float32 on cpu. */
static tr_status *rms_call(void *self, DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                           size_t n_outputs) {
  const rms_state *s = self;
  public_plugin_stats_v.calls++;
  const DLTensor *x = inputs[0];
  const DLTensor *w = n_inputs > 1 ? inputs[1] : NULL;
  DLTensor *y = n_outputs > 0 ? outputs[0] : NULL;
  if (y == NULL) return NULL;
  int64_t n = 1;
  for (int32_t d = 0; d < x->ndim; d++) n *= x->shape[d];
  const float *xs = (const float *)((const char *)x->data + x->byte_offset);
  const float *ws = w != NULL && s->weight ? (const float *)((const char *)w->data + w->byte_offset) : NULL;
  float *ys = (float *)((char *)y->data + y->byte_offset);
  for (int64_t r = 0; r < n / s->row; r++) {
    double sum = 0;
    for (int64_t i = 0; i < s->row; i++) sum += (double)xs[r * s->row + i] * xs[r * s->row + i];
    double scale = 1.0 / sqrt(sum / (double)s->row + s->eps);
    for (int64_t i = 0; i < s->row; i++) {
      ys[r * s->row + i] = (float)(xs[r * s->row + i] * scale * (ws ? ws[i] : 1.0f));
    }
  }
  return NULL;
}

static const char *rms_refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  (void)buf;
  (void)size;
  const tr_value *dtype = tr_call_spec_get(call, "dtype");
  if (dtype == NULL || dtype->kind != TR_VALUE_DTYPE || !is_float32(dtype->as.dtype)) return "serves float32 only";
  return tr_call_spec_int(call, "row") > 0 ? NULL : "needs rows of at least one element";
}

static tr_status *rms_entry_for(const tr_kernel_type *self, const tr_call_spec *call, tr_build_identity *id) {
  (void)self;
  rms_state s = {tr_call_spec_int(call, "row"), tr_call_spec_float(call, "eps"), 0};
  const tr_value *weight = tr_call_spec_get(call, "weight");
  s.weight = weight != NULL && weight->kind == TR_VALUE_BOOL && weight->as.b;
  memset(id, 0, sizeof(*id));
  id->size = sizeof(s);
  memcpy(id->bytes, &s, sizeof(s));
  return NULL;
}

static tr_status *rms_factory(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out) {
  tr_build_identity id;
  rms_entry_for(self, call, &id);
  rms_state *s = malloc(sizeof(*s));
  if (s == NULL) return NULL; /* out->call stays NULL: tilerun reports a kernel with no call */
  memcpy(s, id.bytes, sizeof(*s));
  public_plugin_stats_v.factories++;
  out->self = s;
  out->call = rms_call;
  out->release = free;
  return NULL;
}

static tr_kernel_type g_type = {
    sizeof(tr_kernel_type), "public_rms_norm", NULL, kCpu, NULL, 0, 0, NULL, NULL,
    rms_refusal, rms_entry_for, rms_factory, NULL, NULL,
};

__attribute__((visibility("default"))) const uint32_t tilerun_backend_abi = TR_BACKEND_ABI;

__attribute__((visibility("default"))) tr_status *tilerun_backend_init(const tr_backend_api *api) {
  /* An older tilerun's table may end before find_interface: then the type names no interface,
   * and registration fails with tilerun's own message naming this backend. */
  if (TR_STRUCT_HAS(api, tr_backend_api, find_interface)) {
    g_type.interface = api->find_interface(api->host, "RMSNormFwdOp", "RMSNormRowFwdInterface");
  }
  return api->register_kernel_type(api->host, "RMSNormFwdOp", &g_type);
}
