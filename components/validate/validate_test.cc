// validate_test.cc: the validate component's contract, run against every placement: inline, a
// thread, and a `tilerun serve` process over ipc and over tcp.
#include <catch2/catch.hpp>

#include <vector>

#include "components/pipeline/pipeline_testing.h"
#include "components/validate/validate.h"
#include "components/validate/validate_client.h"

using namespace tr_test;

static tr_manifest *manifest() {
  static tr_manifest *m = [] {
    tr_manifest *loaded = nullptr;
    ok(tr_manifest_load_dir("manifest/spec", &loaded));
    return loaded;
  }();
  return m;
}

static tr_tensor_spec spec(const char *device, tr_dtype dt, std::vector<int64_t> shape) {
  tr_device d;
  ok(tr_device_parse(device, &d));
  tr_tensor_spec s;
  ok(tr_tensor_spec_make(&d, dt, (int32_t)shape.size(), shape.data(), &s));
  return s;
}

// Validates through the placed component; "" and *out on success, else "<Code>: <message>".
static std::string validate(Placed &p, const char *op, std::vector<tr_named_value> params,
                            std::vector<const tr_tensor_spec *> inputs, tr_validated *out) {
  std::vector<uint8_t> request(TR_VALIDATE_MAX);
  size_t n = 0;
  ok(tr_validate_encode(op, params.data(), params.size(), inputs.data(), inputs.size(), request.data(),
                        request.size(), &n));
  request.resize(n);
  std::string reply;
  tr_status *s = p.raw_call(request, &reply);
  if (s == nullptr) s = tr_validate_decode((const uint8_t *)reply.data(), reply.size(), out);
  return s ? error_of(s) : "";
}

TEST_CASE("the validate contract holds in every placement") {
  int64_t four[] = {4096};
  tr_value shape;
  ok(tr_value_int_list(four, 1, &shape));
  for (Where where : every_placement()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_VALIDATE, where, tr_validate_handle, manifest());
    tr_tensor_spec x = spec("cuda:0", TR_BFLOAT16, {2, 4096}), w = spec("cuda:0", TR_BFLOAT16, {4096});
    tr_validated v;
    REQUIRE(validate(p, "RMSNormFwdOp", {{"normalized_shape", shape}}, {&x, &w}, &v) == "");
    REQUIRE(v.n_outputs == 1);
    char text[128];
    tr_tensor_spec_format(&v.outputs[0], text, sizeof(text));
    CHECK(std::string(text) == "bfloat16[2, 4096] on cuda:0");
    REQUIRE(v.n_settled == 2);
    CHECK(std::string(v.settled[1].name) == "eps");
    CHECK(v.settled[1].value.kind == TR_VALUE_NONE);  // the null default, settled
    tr_validated_clear(&v);
    tr_tensor_spec bad = spec("cuda:0", TR_BFLOAT16, {4095});
    CHECK(validate(p, "RMSNormFwdOp", {{"normalized_shape", shape}}, {&x, &bad}, &v) ==
          "SignatureError(shape): RMSNormFwdOp: input 'weight' shape (4095,) does not match "
          "[*normalized_shape] = (4096,): axis 0 is 4095, expected normalized_shape[0] = 4096");
    CHECK(validate(p, "FrobFwdOp", {}, {&x}, &v) == "OpNotAvailableError: no op 'FrobFwdOp' in the manifest");
    CHECK(validate(p, "RMSNormFwdOp", {}, {&x}, &v) ==
          "SignatureError(param): RMSNormFwdOp: param 'normalized_shape' (list[int] | tuple[int, ...]) is required");
    std::string reply;
    tr_status *s = p.raw_call({0x0a, 0xff, 0x01}, &reply);  // a truncated message
    REQUIRE(s != nullptr);
    CHECK(tr_status_code(s) == TR_TRANSPORT);
    CHECK(std::string(tr_status_message(s)).find("decoding a ValidateRequest of 3 bytes") != std::string::npos);
    tr_status_destroy(&s);
  }
  tr_value_clear(&shape);
}

// Through the client: the same answers and errors in every placement (inline, the structs go
// straight to tr_validate_run; elsewhere, through messages).
static std::string validate_client(Placed &p, const char *op, std::vector<tr_named_value> params,
                                   std::vector<const tr_tensor_spec *> inputs, tr_validated *out) {
  tr_validate_request req = {op, params.data(), params.size(), inputs.data(), inputs.size()};
  tr_status *s = tr_validate_call(p.pipeline, &req, out);
  return s ? error_of(s) : "";
}

TEST_CASE("the validate client answers alike in every placement") {
  int64_t four[] = {4096};
  tr_value shape;
  ok(tr_value_int_list(four, 1, &shape));
  for (Where where : every_placement()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_VALIDATE, where, tr_validate_handle, manifest());
    tr_tensor_spec x = spec("cuda:0", TR_BFLOAT16, {2, 4096}), w = spec("cuda:0", TR_BFLOAT16, {4096});
    tr_validated v;
    REQUIRE(when_served([&] {
      tr_validate_request req = {"RMSNormFwdOp", nullptr, 0, nullptr, 0};
      tr_named_value given[] = {{"normalized_shape", shape}};
      const tr_tensor_spec *in[] = {&x, &w};
      req.params = given;
      req.n_params = 1;
      req.inputs = in;
      req.n_inputs = 2;
      return tr_validate_call(p.pipeline, &req, &v);
    }) == nullptr);
    REQUIRE(v.n_outputs == 1);
    char text[128];
    tr_tensor_spec_format(&v.outputs[0], text, sizeof(text));
    CHECK(std::string(text) == "bfloat16[2, 4096] on cuda:0");
    char dev[TR_DEVICE_FORMAT_MAX];
    tr_device_format(&v.device, dev, sizeof(dev));
    CHECK(std::string(dev) == "cuda:0");
    REQUIRE(v.n_settled == 2);
    CHECK(std::string(v.settled[0].name) == "normalized_shape");
    CHECK(tr_value_equal(&v.settled[0].value, &shape));  // the params as given, settled
    CHECK(std::string(v.settled[1].name) == "eps");
    CHECK(v.settled[1].value.kind == TR_VALUE_NONE);
    tr_validated_clear(&v);
    tr_tensor_spec bad = spec("cuda:0", TR_BFLOAT16, {4095});
    CHECK(validate_client(p, "RMSNormFwdOp", {{"normalized_shape", shape}}, {&x, &bad}, &v) ==
          "SignatureError(shape): RMSNormFwdOp: input 'weight' shape (4095,) does not match "
          "[*normalized_shape] = (4096,): axis 0 is 4095, expected normalized_shape[0] = 4096");
    CHECK(v.n_settled == 0);
    CHECK(validate_client(p, "FrobFwdOp", {}, {&x}, &v) == "OpNotAvailableError: no op 'FrobFwdOp' in the manifest");
    CHECK(validate_client(p, "RMSNormFwdOp", {}, {&x}, &v) ==
          "SignatureError(param): RMSNormFwdOp: param 'normalized_shape' (list[int] | tuple[int, ...]) is required");
    tr_value long_text;
    ok(tr_value_str(std::string(300, 'a').c_str(), &long_text));
    CHECK(validate_client(p, "RMSNormFwdOp", {{"normalized_shape", long_text}}, {&x}, &v) ==
          "ValueError: string value of 300 bytes does not fit a message (at most 255)");
    tr_value_clear(&long_text);
  }
  tr_value_clear(&shape);
}
