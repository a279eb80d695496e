// status_test.cc: the status object: codes and names from one table, messages, origin, append.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "tilerun/status.h"

static tr_status *fails_with_shape(int *reached) {
  TR_RETURN_IF_ERROR(TR_STATUS(TR_SIGNATURE_SHAPE, "axis %d: expected %d, got %d", 1, 4096, 4095));
  *reached = 1;
  return NULL;
}

static tr_status *succeeds(int *reached) {
  TR_RETURN_IF_ERROR(NULL);
  *reached = 1;
  return NULL;
}

TEST_CASE("every code has a distinct printable name that parses back") {
  for (int i = 0; i < TR_CODE_COUNT; i++) {
    const char *name = tr_code_name((tr_code)i);
    REQUIRE(std::strlen(name) > 0);
    REQUIRE(std::string(name) != "UnknownCode");
    tr_code back = TR_OK;
    REQUIRE(tr_code_from_name(name, &back) == 1);
    CHECK(back == (tr_code)i);
    for (int j = 0; j < i; j++) CHECK(std::string(tr_code_name((tr_code)j)) != name);
  }
  CHECK(std::string(tr_code_name((tr_code)TR_CODE_COUNT)) == "UnknownCode");
  CHECK(std::string(tr_code_name((tr_code)-1)) == "UnknownCode");
  tr_code untouched = TR_VALUE;
  CHECK(tr_code_from_name("NoSuchError", &untouched) == 0);
  CHECK(untouched == TR_VALUE);
}

TEST_CASE("the codes the protocol needs are all in the table") {
  CHECK(std::string(tr_code_name(TR_BACKEND)) == "BackendError");
  CHECK(std::string(tr_code_name(TR_UNKNOWN_TARGET)) == "UnknownTargetError");
  CHECK(std::string(tr_code_name(TR_AMBIGUOUS_TARGET)) == "AmbiguousTargetError");
  CHECK(std::string(tr_code_name(TR_OP_NOT_AVAILABLE)) == "OpNotAvailableError");
  CHECK(std::string(tr_code_name(TR_SIGNATURE_DTYPE)) == "SignatureError(dtype)");
  CHECK(std::string(tr_code_name(TR_SIGNATURE_SHAPE)) == "SignatureError(shape)");
  CHECK(std::string(tr_code_name(TR_SIGNATURE_PARAM)) == "SignatureError(param)");
  CHECK(std::string(tr_code_name(TR_SELECTION)) == "SelectionError");
  CHECK(std::string(tr_code_name(TR_VALUE)) == "ValueError");
  CHECK(std::string(tr_code_name(TR_MANIFEST)) == "ManifestError");
  CHECK(std::string(tr_code_name(TR_TRANSPORT)) == "TransportError");
  CHECK(std::string(tr_code_name(TR_COMPILE)) == "CompileError");
  CHECK(std::string(tr_code_name(TR_OUT_OF_MEMORY)) == "OutOfMemoryError");
  CHECK(std::string(tr_code_name(TR_SIGNATURE_DEVICE)) == "SignatureError(device)");
  CHECK(tr_code_is_signature_error(TR_SIGNATURE_DTYPE));
  CHECK(tr_code_is_signature_error(TR_SIGNATURE_PARAM));
  CHECK(tr_code_is_signature_error(TR_SIGNATURE_DEVICE));
  CHECK_FALSE(tr_code_is_signature_error(TR_VALUE));
}

TEST_CASE("a status carries its code, message and origin") {
  int line = __LINE__ + 1;
  tr_status *s = TR_STATUS(TR_UNKNOWN_TARGET, "no backend registered target '%s'", "nope");
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_UNKNOWN_TARGET);
  CHECK(std::string(tr_status_message(s)) == "no backend registered target 'nope'");
  CHECK(std::string(tr_status_file(s)).find("status_test.cc") != std::string::npos);
  CHECK(tr_status_line(s) == line);
  char buf[128];
  size_t need = tr_status_format(s, buf, sizeof(buf));
  CHECK(std::string(buf) == "UnknownTargetError: no backend registered target 'nope'");
  CHECK(need == std::strlen(buf));
  char small[8];
  CHECK(tr_status_format(s, small, sizeof(small)) == need);  // measures past the end
  CHECK(std::string(small) == "Unknown");
  tr_status_destroy(&s);
  CHECK(s == nullptr);
  tr_status_destroy(&s);  // NULL is fine
  tr_status_destroy(nullptr);
}

TEST_CASE("NULL is success") {
  CHECK(tr_status_code(nullptr) == TR_OK);
  CHECK(std::string(tr_status_message(nullptr)) == "");
  char buf[8];
  tr_status_format(nullptr, buf, sizeof(buf));
  CHECK(std::string(buf) == "Ok");
}

TEST_CASE("a status made with TR_OK is an internal error, never a disguised success") {
  tr_status *s = TR_STATUS(TR_OK, "oops");
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_INTERNAL);
  tr_status_destroy(&s);
}

TEST_CASE("append adds context and keeps code and origin") {
  tr_status *s = TR_STATUS(TR_OP_NOT_AVAILABLE, "target 'acme' registers no kernel builder");
  int line = tr_status_line(s);
  CHECK(tr_status_append(s, "; %d backends failed to load", 2) == s);
  CHECK(std::string(tr_status_message(s)) ==
        "target 'acme' registers no kernel builder; 2 backends failed to load");
  CHECK(tr_status_code(s) == TR_OP_NOT_AVAILABLE);
  CHECK(tr_status_line(s) == line);
  CHECK(tr_status_append(nullptr, "x") == nullptr);
  tr_status_destroy(&s);
}

TEST_CASE("long messages are kept whole") {
  std::string long_text(10000, 'x');
  tr_status *s = TR_STATUS(TR_COMPILE, "%s", long_text.c_str());
  CHECK(std::string(tr_status_message(s)) == long_text);
  tr_status_destroy(&s);
}

TEST_CASE("TR_RETURN_IF_ERROR returns the error and goes on after success") {
  int reached = 0;
  tr_status *s = fails_with_shape(&reached);
  CHECK(reached == 0);
  CHECK(tr_status_code(s) == TR_SIGNATURE_SHAPE);
  CHECK(std::string(tr_status_message(s)) == "axis 1: expected 4096, got 4095");
  tr_status_destroy(&s);
  CHECK(succeeds(&reached) == nullptr);
  CHECK(reached == 1);
}
