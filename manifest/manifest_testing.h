// manifest_testing.h: helpers for the manifest's tests: specs, params, the shipped manifest.
#ifndef TILERUN_MANIFEST_MANIFEST_TESTING_H_
#define TILERUN_MANIFEST_MANIFEST_TESTING_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "core/test_support.h"
#include "manifest/manifest.h"

namespace tr_test {

inline tr_tensor_spec spec(const char *device, const char *dtype, std::initializer_list<int64_t> shape) {
  tr_device d;
  tr_dtype dt;
  ok(tr_device_parse(device, &d));
  ok(tr_dtype_parse(dtype, &dt));
  std::vector<int64_t> dims(shape);
  tr_tensor_spec s;
  ok(tr_tensor_spec_make(&d, dt, (int32_t)dims.size(), dims.data(), &s));
  return s;
}

// Params for a call, owning their values.
struct Params {
  std::vector<tr_named_value> items;
  ~Params() {
    for (auto &nv : items) tr_value_clear(&nv.value);
  }
  Params &i(const char *name, int64_t v) { return add(name, tr_value_int(v)); }
  Params &f(const char *name, double v) { return add(name, tr_value_float(v)); }
  Params &b(const char *name, bool v) { return add(name, tr_value_bool(v)); }
  Params &none(const char *name) { return add(name, tr_value_none()); }
  Params &dt(const char *name, tr_dtype v) { return add(name, tr_value_dtype(v)); }
  Params &s(const char *name, const char *v) {
    tr_value value;
    ok(tr_value_str(v, &value));
    return add(name, value);
  }
  Params &list(const char *name, std::initializer_list<int64_t> v) {
    std::vector<int64_t> items_(v);
    tr_value value;
    ok(tr_value_int_list(items_.data(), items_.size(), &value));
    return add(name, value);
  }
  Params &add(const char *name, tr_value v) {
    items.push_back(tr_named_value{name, v});
    return *this;
  }
};

// An op instance's settled params.
struct Bound {
  const tr_op_def *op;
  tr_value settled[TR_SIG_MAX_PARAMS];
  Bound(const tr_op_def *op_, const Params &p) : op(op_) {
    ok(tr_op_def_bind_params(op, p.items.data(), p.items.size(), settled));
  }
  ~Bound() { tr_op_params_clear(op, settled); }
  // Checks a call; returns "" on success (out filled) or "<Code>: <message>".
  std::string check(std::initializer_list<const tr_tensor_spec *> inputs, tr_call_check *out = nullptr) {
    tr_call_check local;
    std::vector<const tr_tensor_spec *> in(inputs);
    tr_status *s = tr_op_def_check(op, settled, in.data(), in.size(), out ? out : &local);
    return s ? error_of(s) : "";
  }
};

// Binding params expected to fail: returns "<Code>: <message>".
inline std::string bind_error(const tr_op_def *op, const Params &p) {
  tr_value settled[TR_SIG_MAX_PARAMS];
  tr_status *s = tr_op_def_bind_params(op, p.items.data(), p.items.size(), settled);
  REQUIRE(s != nullptr);
  for (int i = 0; i < (int)tr_op_def_param_count(op); i++) CHECK(settled[i].kind == TR_VALUE_NONE);
  return error_of(s);
}

inline std::string shape_text(const tr_tensor_spec &s) {
  char buf[256];
  tr_tensor_spec_format(&s, buf, sizeof(buf));
  return buf;
}

// The shipped manifest, loaded once per test binary.
inline const tr_manifest *shipped() {
  static tr_manifest *m = [] {
    tr_manifest *loaded = nullptr;
    ok(tr_manifest_load_dir("manifest/spec", &loaded));
    return loaded;
  }();
  return m;
}

inline const tr_op_def *op(const char *name) {
  const tr_op_def *d = tr_manifest_find(shipped(), name);
  REQUIRE(d != nullptr);
  return d;
}

}  // namespace tr_test

#endif  // TILERUN_MANIFEST_MANIFEST_TESTING_H_
