/* fuzz_messages.c: a libFuzzer target decoding arbitrary bytes as each component message and
 * handing them to the validate and settle adapters, which must answer or refuse, never crash.
 * The first byte picks the message: 0 ValidateRequest (and the validate handler), 1
 * SettleRequest (and the settle handler), 2 SelectRequest, 3 BuildRequest, 4 LaunchRequest, 5
 * the replies, 6 an Envelope. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "components/settle/settle.h"
#include "components/validate/validate.h"
#include "proto/codec.h"
#include "proto/wire.h"

static tr_manifest *g_manifest;
static tr_registry *g_registry;

static void once(void) {
  if (g_manifest != NULL) return;
  tr_status *s = tr_manifest_load_dir("manifest/spec", &g_manifest);
  if (s != NULL) abort(); /* the fuzzer runs from the runfiles root */
  s = tr_registry_new(NULL, NULL, &g_registry);
  if (s != NULL) abort();
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
    case 2: decode_as(tilerun_SelectRequest_fields, sizeof(tilerun_SelectRequest), body, n); break;
    case 3: decode_as(tilerun_BuildRequest_fields, sizeof(tilerun_BuildRequest), body, n); break;
    case 4: decode_as(tilerun_LaunchRequest_fields, sizeof(tilerun_LaunchRequest), body, n); break;
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
