// test_support.h: helpers for tilerun's Catch2 tests (C++ only, never linked into the library).
#ifndef TILERUN_CORE_TEST_SUPPORT_H_
#define TILERUN_CORE_TEST_SUPPORT_H_

#include <catch2/catch.hpp>

#include <string>

#include "tilerun/status.h"

namespace tr_test {

// For a call expected to fail: requires a status, returns "<CodeName>: <message>", frees it.
inline std::string error_of(tr_status *s) {
  REQUIRE(s != nullptr);
  size_t need = tr_status_format(s, nullptr, 0);
  std::string text(need + 1, '\0');
  tr_status_format(s, &text[0], text.size());
  text.resize(need);
  tr_status_destroy(&s);
  return text;
}

// For a call expected to succeed: fails the test with the status's text otherwise.
inline void ok(tr_status *s) {
  if (s == nullptr) return;
  std::string text = error_of(s);
  FAIL(text);
}

}  // namespace tr_test

#endif  // TILERUN_CORE_TEST_SUPPORT_H_
