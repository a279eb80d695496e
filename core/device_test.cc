// device_test.cc: devices: construction, parsing, text, equality, hashing and DLPack mapping.
#include <catch2/catch.hpp>

#include "core/test_support.h"

#include <string>

#include "tilerun/device.h"

static std::string text_of(const tr_device &d) {
  char buf[TR_DEVICE_FORMAT_MAX];
  tr_device_format(&d, buf, sizeof(buf));
  return buf;
}

TEST_CASE("devices parse and print as type or type:index") {
  tr_device d;
  REQUIRE(tr_device_parse("cuda:0", &d) == nullptr);
  CHECK(std::string(d.type) == "cuda");
  CHECK(d.index == 0);
  CHECK(text_of(d) == "cuda:0");
  REQUIRE(tr_device_parse("cpu", &d) == nullptr);
  CHECK(d.index == TR_DEVICE_NO_INDEX);
  CHECK(text_of(d) == "cpu");
  REQUIRE(tr_device_parse("acme_npu2:17", &d) == nullptr);
  CHECK(text_of(d) == "acme_npu2:17");
  REQUIRE(tr_device_make("cuda", 3, &d) == nullptr);
  CHECK(text_of(d) == "cuda:3");
}

TEST_CASE("bad devices are refused with the value received, leaving the output untouched") {
  tr_device d;
  REQUIRE(tr_device_make("cpu", TR_DEVICE_NO_INDEX, &d) == nullptr);
  CHECK(tr_test::error_of(tr_device_make("cuda", -2, &d)) == "ValueError: device 'cuda': index -2 is negative");
  CHECK(tr_test::error_of(tr_device_parse("cuda:-1", &d)) == "ValueError: device 'cuda:-1': index -1 is negative");
  CHECK(tr_test::error_of(tr_device_parse("cuda:x", &d)) ==
        "ValueError: device 'cuda:x': index 'x' is not a number from 0 to 2147483647");
  CHECK(tr_test::error_of(tr_device_parse("cuda:", &d)) ==
        "ValueError: device 'cuda:': index '' is not a number from 0 to 2147483647");
  CHECK(tr_test::error_of(tr_device_parse("cuda:99999999999", &d)) ==
        "ValueError: device 'cuda:99999999999': index '99999999999' is not a number from 0 to 2147483647");
  CHECK(tr_test::error_of(tr_device_parse("", &d)) == "ValueError: device '': the device type is empty");
  CHECK(tr_test::error_of(tr_device_parse(":0", &d)) == "ValueError: device ':0': the device type is empty");
  CHECK(tr_test::error_of(tr_device_parse("Cuda:0", &d)) ==
        "ValueError: device 'Cuda:0': character 1 of the device type is 'C'; a device type is a "
        "lowercase letter followed by lowercase letters, digits or '_'");
  CHECK(tr_test::error_of(tr_device_make("my-dev", 0, &d)) ==
        "ValueError: device 'my-dev': character 3 of the device type is '-'; a device type is a "
        "lowercase letter followed by lowercase letters, digits or '_'");
  std::string long_type(40, 'a');
  CHECK(tr_test::error_of(tr_device_make(long_type.c_str(), 0, &d)) ==
        "ValueError: device '" + long_type + "': the device type is 40 characters long, at most 31");
  std::string longer = std::string(50, 'b') + ":1";
  CHECK(tr_test::error_of(tr_device_parse(longer.c_str(), &d)) ==
        "ValueError: device '" + std::string(40, 'b') + "...': the device type is 50 characters "
        "long, at most 31");
  CHECK(tr_test::error_of(tr_device_parse(nullptr, &d)) == "ValueError: device text is NULL");
  // Every failure above left d as the last success made it.
  CHECK(text_of(d) == "cpu");
  std::string longest(TR_DEVICE_TYPE_MAX, 'z');
  REQUIRE(tr_device_make(longest.c_str(), 2147483647, &d) == nullptr);
  CHECK(text_of(d) == longest + ":2147483647");
}

TEST_CASE("equality and hash look at type and index") {
  tr_device a, b, c, e;
  REQUIRE(tr_device_parse("cuda:0", &a) == nullptr);
  REQUIRE(tr_device_make("cuda", 0, &b) == nullptr);
  REQUIRE(tr_device_parse("cuda:1", &c) == nullptr);
  REQUIRE(tr_device_parse("cudb:0", &e) == nullptr);
  CHECK(tr_device_equal(&a, &b));
  CHECK(tr_device_hash(&a) == tr_device_hash(&b));
  CHECK_FALSE(tr_device_equal(&a, &c));
  CHECK_FALSE(tr_device_equal(&a, &e));
  CHECK(tr_device_hash(&a) != tr_device_hash(&c));
  CHECK(tr_device_hash(&a) != tr_device_hash(&e));
}

TEST_CASE("DLPack devices map both ways") {
  tr_device d;
  REQUIRE(tr_device_from_dl(DLDevice{kDLCUDA, 2}, &d) == nullptr);
  CHECK(text_of(d) == "cuda:2");
  DLDevice dl;
  REQUIRE(tr_device_to_dl(&d, &dl) == nullptr);
  CHECK(dl.device_type == kDLCUDA);
  CHECK(dl.device_id == 2);
  REQUIRE(tr_device_from_dl(DLDevice{kDLCPU, 0}, &d) == nullptr);
  CHECK(text_of(d) == "cpu");
  REQUIRE(tr_device_to_dl(&d, &dl) == nullptr);
  CHECK(dl.device_type == kDLCPU);
  CHECK(dl.device_id == 0);
  REQUIRE(tr_device_from_dl(DLDevice{kDLROCM, 1}, &d) == nullptr);
  CHECK(text_of(d) == "rocm:1");
  REQUIRE(tr_device_from_dl(DLDevice{kDLCUDAHost, 0}, &d) == nullptr);
  CHECK(text_of(d) == "cuda_host");
  REQUIRE(tr_device_from_dl(DLDevice{(DLDeviceType)14, 0}, &d) == nullptr);
  CHECK(text_of(d) == "xpu:0");
}

TEST_CASE("DLPack devices tilerun cannot name are refused naming them") {
  tr_device d;
  REQUIRE(tr_device_parse("cpu", &d) == nullptr);
  CHECK(tr_test::error_of(tr_device_from_dl(DLDevice{(DLDeviceType)99, 0}, &d)) ==
        "ValueError: DLDevice(device_type=99, device_id=0): tilerun has no name for DLPack "
        "device type 99");
  CHECK(tr_test::error_of(tr_device_from_dl(DLDevice{kDLCUDA, -1}, &d)) ==
        "ValueError: DLDevice(device_type=2, device_id=-1): device_id is negative");
  CHECK(text_of(d) == "cpu");
  tr_device acme;
  REQUIRE(tr_device_parse("acme:0", &acme) == nullptr);
  DLDevice dl{kDLCPU, 7};
  CHECK(tr_test::error_of(tr_device_to_dl(&acme, &dl)) ==
        "ValueError: device 'acme:0': DLPack has no device type for 'acme'");
  CHECK(dl.device_id == 7);
}
