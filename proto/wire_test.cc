// wire_test.cc: envelopes and statuses survive the wire; bad bytes give a TransportError.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "proto/wire.h"

TEST_CASE("an envelope round-trips through nanopb") {
  tilerun_Envelope env = tilerun_Envelope_init_zero;
  env.request_id = 123456789012345ull;
  std::strcpy(env.component, "validate");
  env.deadline_unix_ns = 42;
  env.trace_id = 7;
  env.has_status = true;
  tr_status *s = TR_STATUS(TR_SIGNATURE_SHAPE, "RMSNormFwdOp: input 'weight' shape (4095,)");
  tr_wire_status_from(s, &env.status);
  tr_status_destroy(&s);

  uint8_t buf[tilerun_Envelope_size];
  size_t n = 0;
  REQUIRE(tr_wire_encode_envelope(&env, buf, sizeof(buf), &n) == nullptr);
  REQUIRE(n > 0);
  tilerun_Envelope back;
  REQUIRE(tr_wire_decode_envelope(buf, n, &back) == nullptr);
  CHECK(back.request_id == env.request_id);
  CHECK(std::string(back.component) == "validate");
  CHECK(back.deadline_unix_ns == 42);
  CHECK(back.trace_id == 7);
  REQUIRE(back.has_status);
  tr_status *again = tr_wire_status_to(&back.status);
  CHECK(tr_status_code(again) == TR_SIGNATURE_SHAPE);
  CHECK(std::string(tr_status_message(again)) == "RMSNormFwdOp: input 'weight' shape (4095,)");
  tr_status_destroy(&again);
}

TEST_CASE("success crosses as code 0 and comes back as NULL") {
  tilerun_Status msg;
  tr_wire_status_from(nullptr, &msg);
  CHECK(msg.code == 0);
  CHECK(std::string(msg.code_name) == "Ok");
  CHECK(tr_wire_status_to(&msg) == nullptr);
}

TEST_CASE("a message longer than the field is cut with an ellipsis, never overflowing") {
  std::string long_text(5000, 'm');
  tr_status *s = TR_STATUS(TR_COMPILE, "%s", long_text.c_str());
  tilerun_Status msg;
  tr_wire_status_from(s, &msg);
  tr_status_destroy(&s);
  std::string text(msg.message);
  CHECK(text.size() == sizeof(msg.message) - 1);
  CHECK(text.substr(text.size() - 3) == "...");
}

TEST_CASE("an unknown peer code keeps the peer's name and message") {
  tilerun_Status msg = tilerun_Status_init_zero;
  msg.code = 999;
  std::strcpy(msg.code_name, "FutureError");
  std::strcpy(msg.message, "something new");
  tr_status *s = tr_wire_status_to(&msg);
  CHECK(tr_status_code(s) == TR_TRANSPORT);
  CHECK(std::string(tr_status_message(s)) ==
        "peer sent status code 999 (FutureError), unknown here: something new");
  tr_status_destroy(&s);
}

TEST_CASE("truncated and malformed bytes are a TransportError, not a crash") {
  tilerun_Envelope env = tilerun_Envelope_init_zero;
  env.request_id = 1;
  std::strcpy(env.component, "launch");
  uint8_t buf[tilerun_Envelope_size];
  size_t n = 0;
  REQUIRE(tr_wire_encode_envelope(&env, buf, sizeof(buf), &n) == nullptr);
  tilerun_Envelope back;
  tr_status *s = tr_wire_decode_envelope(buf, n - 2, &back);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_TRANSPORT);
  CHECK(std::string(tr_status_message(s)).find("decoding an envelope of " + std::to_string(n - 2) +
                                               " bytes: ") == 0);
  tr_status_destroy(&s);
  CHECK(back.request_id == 0);
  uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  s = tr_wire_decode_envelope(junk, sizeof(junk), &back);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_TRANSPORT);
  tr_status_destroy(&s);
}

TEST_CASE("a buffer too small to encode into names the size needed") {
  tilerun_Envelope env = tilerun_Envelope_init_zero;
  std::strcpy(env.component, "settle");
  uint8_t small[3];
  size_t n = 0;
  tr_status *s = tr_wire_encode_envelope(&env, small, sizeof(small), &n);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_TRANSPORT);
  CHECK(std::string(tr_status_message(s)) ==
        "encoding an envelope: stream full (buffer 3 bytes, needs 8)");
  tr_status_destroy(&s);
}
