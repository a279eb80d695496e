/* fuzz_messages.c: a libFuzzer target decoding arbitrary bytes as each component message and
 * handing them to the validate, settle, select and launch adapters, which must answer or refuse,
 * never crash. The first byte picks the message: 0 ValidateRequest (and the validate handler), 1
 * SettleRequest (and the settle handler), 2 SelectRequest (and the select handler, over one op
 * with two implementations), 3 BuildRequest, 4 LaunchRequest (and the launch handler as a launch
 * process runs it: references mapped, one real segment "/tilerun-fuzz" of 4096 bytes, and an op
 * that touches the first and last byte each tensor reaches, so an overrun crashes; a tune ask
 * answered, a config ask answered with the request's params as the config, which the reply
 * decoder reads back), 5 the replies, 6 an Envelope. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "components/launch/launch.h"
#include "components/select/select.h"
#include "components/settle/settle.h"
#include "components/validate/validate.h"
#include "proto/codec.h"
#include "proto/wire.h"

static tr_manifest *g_manifest;
static tr_share_maps *g_maps;
static void *g_segment;
static tr_launch_context g_launch;
static tr_registry *g_registry;
static tr_select_table g_select;

/* The select handler's op: a call type of every value kind, two implementations, one general. */
static const tr_call_field g_fields[] = {
    {"n", TR_VALUE_INT, 0, 0, {TR_VALUE_NONE, {.i = 0}}},
    {"eps", TR_VALUE_FLOAT, 0, 1, {TR_VALUE_FLOAT, {.f = 1e-5}}},
    {"fused", TR_VALUE_BOOL, 0, 1, {TR_VALUE_BOOL, {.b = false}}},
    {"dtype", TR_VALUE_DTYPE, 0, 1, {TR_VALUE_DTYPE, {.dtype = {kDLFloat, 16, 1}}}},
};
static const tr_call_spec_type g_call = {"FuzzCall", 4, g_fields};
static const tr_kernel_interface g_iface = {"FuzzFwdInterface", &g_call, 0, NULL, 0, NULL, "fuzzing"};

static const char *small_only(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  (void)self;
  if (tr_call_spec_int(call, "n") <= 4096) return NULL;
  snprintf(buf, size, "serves n <= 4096, got n %lld", (long long)tr_call_spec_int(call, "n"));
  return buf;
}

static tr_status *no_build(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out) {
  (void)self;
  (void)call;
  (void)out;
  return TR_STATUS(TR_INTERNAL, "the fuzzer selects, never builds");
}

static tr_status *facts(void *ctx, const tr_device *device, tr_device_facts *out) {
  (void)ctx;
  out->arch = strcmp(device->type, "cuda") == 0 ? 90 : -1;
  out->calibration = NULL;
  out->sm_count = 132;
  out->smem_budget = 232448;
  return NULL;
}

static void make_selector(void) {
  static const tr_kernel_type general = {sizeof(tr_kernel_type), "fuzz_general", &g_iface, NULL, NULL, 0, 1,
                                         NULL, NULL, NULL, NULL, no_build, NULL, NULL};
  static const tr_kernel_type small = {sizeof(tr_kernel_type), "fuzz_small", &g_iface, NULL, NULL, 0, 0,
                                       NULL, NULL, small_only, NULL, no_build, NULL, NULL};
  static const tr_kernel_interface *ifaces[] = {&g_iface};
  static const tr_kernel_type *types[] = {&general, &small};
  static tr_select_entry entry;
  tr_selector *sel = NULL;
  tr_status *s = tr_selector_new("FuzzFwdOp", ifaces, 1, types, 2, facts, NULL, &sel);
  if (s != NULL) abort();
  entry = (tr_select_entry){"FuzzFwdOp", sel, 1, ifaces};
  g_select = (tr_select_table){1, &entry};
}

/* The launch process's op: reads the first and last byte every tensor reaches. */
static tr_status *touch_op(void *ctx, const tr_launch_descriptor *d, DLTensor *const *inputs, size_t n_inputs,
                           DLTensor *const *outputs, size_t n_outputs) {
  (void)ctx, (void)d;
  volatile unsigned char sink = 0;
  for (size_t k = 0; k < n_inputs + n_outputs; k++) {
    const DLTensor *t = k < n_inputs ? inputs[k] : outputs[k - n_inputs];
    if (t == NULL || t->device.device_type != kDLCPU) continue;
    int64_t last = 0, first = 0, elem = (t->dtype.bits * t->dtype.lanes + 7) / 8;
    int empty = elem == 0;
    for (int32_t d = 0; d < t->ndim; d++) empty |= t->shape[d] == 0;
    if (empty) continue; /* no byte reached (the handler checked the others' span) */
    for (int32_t d = 0; d < t->ndim; d++) {
      int64_t stride = 1;
      if (t->strides) stride = t->strides[d];
      else for (int32_t e = d + 1; e < t->ndim; e++) stride *= t->shape[e];
      int64_t reach = (t->shape[d] - 1) * stride;
      if (reach < 0) first += reach;
      else last += reach;
    }
    const unsigned char *base = (const unsigned char *)t->data + t->byte_offset;
    sink ^= base[first * elem];
    sink ^= base[last * elem + elem - 1];
  }
  (void)sink;
  return NULL;
}

static tr_status *tune_op(void *ctx, const tr_launch_descriptor *d) {
  (void)ctx, (void)d;
  return NULL;
}

/* The op's params given back as its config: the reply encodes what the request decoded. */
static tr_status *config_op(void *ctx, const tr_launch_descriptor *d, tr_launch_config *out) {
  (void)ctx;
  return tr_launch_config_set(out, d->params, d->n_params);
}

static const tr_launch_ops g_ops = {touch_op, tune_op, config_op};

static void once(void) {
  if (g_manifest != NULL) return;
  tr_plat_shm_unlink("/tilerun-fuzz");
  tr_status *made = tr_plat_shm_create("/tilerun-fuzz", 4096, &g_segment);
  if (made != NULL) abort();
  made = tr_share_maps_new(&g_maps);
  if (made != NULL) abort();
  tr_status *s = tr_manifest_load_dir("manifest/spec", &g_manifest);
  if (s != NULL) abort(); /* the fuzzer runs from the runfiles root */
  s = tr_registry_new(NULL, NULL, &g_registry);
  if (s != NULL) abort();
  make_selector();
  g_launch = (tr_launch_context){g_registry, 0, g_maps, &g_ops, NULL};
}

static void decode_as(const pb_msgdesc_t *fields, size_t size, const uint8_t *data, size_t n) {
  void *msg = calloc(1, size);
  tr_status *s = tr_codec_decode(fields, data, n, msg, "a fuzzed message");
  tr_status_destroy(&s);
  free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  once();
  const uint8_t *body = data + 1;
  size_t n = size - 1;
  static uint8_t reply[TR_VALIDATE_MAX];
  size_t reply_size = 0;
  tr_status *s = NULL;
  switch (data[0] % 7) {
    case 0:
      s = tr_validate_handle(g_manifest, body, n, reply, sizeof(reply), &reply_size);
      if (s == NULL) { /* the reply it wrote must decode */
        tr_validated v;
        s = tr_validate_decode(reply, reply_size, &v);
        if (s == NULL) tr_validated_clear(&v);
      }
      break;
    case 1:
      s = tr_settle_handle(g_registry, body, n, reply, sizeof(reply), &reply_size);
      if (s == NULL) {
        char target[32];
        s = tr_settle_decode(reply, reply_size, target);
      }
      break;
    case 2:
      s = tr_select_handle(&g_select, body, n, reply, sizeof(reply), &reply_size);
      if (s == NULL) {
        char key[64];
        s = tr_select_decode(reply, reply_size, key);
      }
      break;
    case 3: decode_as(tilerun_BuildRequest_fields, sizeof(tilerun_BuildRequest), body, n); break;
    case 4: {
      s = tr_launch_handle(&g_launch, body, n, reply, sizeof(reply), &reply_size);
      static tr_launch_config config; /* a config ask's answer decodes too */
      if (s == NULL) s = tr_launch_decode(reply, reply_size, &config);
      tr_launch_config_clear(&config);
      break;
    }
    case 5:
      decode_as(tilerun_ValidateReply_fields, sizeof(tilerun_ValidateReply), body, n);
      decode_as(tilerun_SettleReply_fields, sizeof(tilerun_SettleReply), body, n);
      decode_as(tilerun_SelectReply_fields, sizeof(tilerun_SelectReply), body, n);
      decode_as(tilerun_BuildReply_fields, sizeof(tilerun_BuildReply), body, n);
      decode_as(tilerun_LaunchReply_fields, sizeof(tilerun_LaunchReply), body, n);
      break;
    default: {
      tilerun_Envelope env;
      s = tr_wire_decode_envelope(body, n, &env);
      if (s == NULL && env.has_status) s = tr_wire_status_to(&env.status);
      break;
    }
  }
  tr_status_destroy(&s);
  return 0;
}
