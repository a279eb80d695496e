// selector_testing.h: the spec's worked examples as test kernel types (GQA decode, BatchNorm's
// two interfaces, LayerNorm, GEMM), whose factories build test kernels that count their builds.
#ifndef TILERUN_SELECTOR_SELECTOR_TESTING_H_
#define TILERUN_SELECTOR_SELECTOR_TESTING_H_

#include <cstdio>
#include <cstring>
#include <string>

#include "core/test_support.h"
#include "selector/selector.h"

namespace tr_test {

inline int &builds() {
  static int n = 0;
  return n;
}

inline tr_status *test_factory(const tr_kernel_type *, const tr_call_spec *, tr_kernel *out) {
  builds()++;
  out->self = nullptr;
  out->call = [](void *, DLTensor *const *, size_t, DLTensor *const *, size_t) -> tr_status * { return nullptr; };
  return nullptr;
}

// ---- GQA decode (kernel-selection spec, section 2 and table 2) ----
inline const tr_call_spec_type *attention_call() {
  static const tr_call_field fields[] = {
      {"batch", TR_VALUE_INT, 0, 0, {}},       {"seqlen_kv", TR_VALUE_INT, 0, 0, {}},
      {"heads", TR_VALUE_INT, 0, 1, tr_value_int(32)}, {"heads_kv", TR_VALUE_INT, 0, 1, tr_value_int(4)},
      {"dim", TR_VALUE_INT, 0, 1, tr_value_int(128)},  {"dtype", TR_VALUE_DTYPE, 0, 1, tr_value_dtype(TR_FLOAT16)},
      {"softcap", TR_VALUE_FLOAT, 0, 1, tr_value_float(0.0)}, {"fuse_rope", TR_VALUE_BOOL, 0, 1, tr_value_bool(false)},
  };
  static const tr_call_spec_type type = {"AttentionCall", sizeof(fields) / sizeof(fields[0]), fields};
  return &type;
}

inline const tr_kernel_interface *gqa_decode_interface() {
  static const char *args[] = {"q", "k_cache", "v_cache", "seqlens"};
  static const char *returns[] = {"o"};
  static const tr_kernel_interface iface = {"GQADecodeDenseFwdInterface", attention_call(), 4, args, 1, returns,
                                            "one decode step over a dense KV cache; o is new, nothing written"};
  return &iface;
}

// The spec's AttentionCall.dense_decode_region: a property shared by the family.
inline bool dense_decode_region(const tr_call_spec *call) {
  return tr_call_spec_int(call, "seqlen_kv") >= 1 && tr_call_spec_int(call, "batch") >= 1;
}

inline const tr_kernel_type *gqa_decode() {  // general, SM80/89/90
  static const int32_t archs[] = {80, 89, 90};
  static tr_kernel_type t = {sizeof(tr_kernel_type), "gqa_dense_decode", gqa_decode_interface(), nullptr, archs, 3, 1,
                             nullptr, nullptr,
                             [](const tr_kernel_type *, const tr_call_spec *c, char *, size_t) -> const char * {
                               return dense_decode_region(c) ? nullptr : "not a dense decode call";
                             },
                             nullptr, test_factory, nullptr, nullptr};
  return &t;
}

inline const tr_kernel_type *gqa_decode_bs1() {  // batch 1, SM90 only
  static const int32_t archs[] = {90};
  static tr_kernel_type t = {sizeof(tr_kernel_type), "gqa_dense_decode_bs1", gqa_decode_interface(), nullptr, archs, 1,
                             0, nullptr, gqa_decode(),
                             [](const tr_kernel_type *, const tr_call_spec *c, char *buf, size_t n) -> const char * {
                               if (tr_call_spec_int(c, "batch") == 1) return nullptr;
                               snprintf(buf, n, "serves batch 1 only, got batch %lld", (long long)tr_call_spec_int(c, "batch"));
                               return buf;
                             },
                             nullptr, test_factory, nullptr, nullptr};
  return &t;
}

inline const tr_kernel_type *gqa_decode_long_context() {  // the spec's refusal, word for word
  static const char *preferred[] = {"gqa_dense_decode_bs1", nullptr};
  // as the spec's class: general False and preferred_over stated; SM80/89/90 inherited from its
  // base, GQADecodeKernel
  static tr_kernel_type t = {sizeof(tr_kernel_type), "gqa_dense_decode_long_context", gqa_decode_interface(), nullptr,
                             nullptr, 0, 0, preferred, gqa_decode(),
                             [](const tr_kernel_type *, const tr_call_spec *c, char *, size_t) -> const char * {
                               const tr_value *dt = tr_call_spec_get(c, "dtype");
                               bool served = dense_decode_region(c) && !tr_call_spec_get(c, "fuse_rope")->as.b &&
                                             tr_call_spec_int(c, "seqlen_kv") >= 1024 && tr_call_spec_int(c, "batch") == 1 &&
                                             tr_call_spec_int(c, "heads") == 32 && tr_call_spec_int(c, "heads_kv") == 4 &&
                                             tr_call_spec_int(c, "dim") == 128 && tr_dtype_equal(dt->as.dtype, TR_FLOAT16) &&
                                             tr_call_spec_float(c, "softcap") == 0.0;
                               return served ? nullptr : "does not serve this call";
                             },
                             nullptr, test_factory, nullptr, nullptr};
  return &t;
}

// ---- BatchNorm: two interfaces on one call spec (spec table 4, row 1) ----
inline const tr_call_spec_type *batch_norm_call() {
  static const tr_call_field fields[] = {
      {"n", TR_VALUE_INT, 0, 0, {}}, {"c", TR_VALUE_INT, 0, 0, {}}, {"spatial", TR_VALUE_INT, 0, 1, tr_value_int(1)},
      {"dtype", TR_VALUE_DTYPE, 0, 1, tr_value_dtype(TR_FLOAT16)}, {"eps", TR_VALUE_FLOAT, 0, 1, tr_value_float(1e-5)},
  };
  static const tr_call_spec_type type = {"BatchNormCall", 5, fields};
  return &type;
}

inline const tr_kernel_interface *batch_norm_train_interface() {
  static const char *args[] = {"x", "weight", "bias", "running_mean", "running_var"};
  static const char *returns[] = {"y", "mean", "rstd"};
  static const tr_kernel_interface iface = {"BatchNormTrainFwdInterface", batch_norm_call(), 5, args, 3, returns,
                                            "batch statistics; updates running stats in place"};
  return &iface;
}

inline const tr_kernel_interface *batch_norm_infer_interface() {
  static const char *args[] = {"x", "weight", "bias", "running_mean", "running_var"};
  static const char *returns[] = {"y"};
  static const tr_kernel_interface iface = {"BatchNormInferFwdInterface", batch_norm_call(), 5, args, 1, returns,
                                            "running statistics; nothing written in place"};
  return &iface;
}

inline const tr_kernel_type *batch_norm_train() {
  static tr_kernel_type t = {sizeof(tr_kernel_type), "fwd_train_kernel", batch_norm_train_interface(), nullptr, nullptr,
                             0, 1, nullptr, nullptr, nullptr, nullptr, test_factory, nullptr, nullptr};
  return &t;
}

inline const tr_kernel_type *batch_norm_train_whole() {  // a faster one: the whole batch in one block
  static tr_kernel_type t = {sizeof(tr_kernel_type), "fwd_train_whole", batch_norm_train_interface(), nullptr, nullptr,
                             0, 0, nullptr, nullptr,
                             [](const tr_kernel_type *, const tr_call_spec *c, char *, size_t) -> const char * {
                               return tr_call_spec_int(c, "n") * tr_call_spec_int(c, "spatial") <= 4096
                                          ? nullptr : "the batch does not fit one block";
                             },
                             nullptr, test_factory, nullptr, nullptr};
  return &t;
}

inline const tr_kernel_type *batch_norm_infer() {
  static tr_kernel_type t = {sizeof(tr_kernel_type), "fwd_infer_kernel", batch_norm_infer_interface(), nullptr, nullptr,
                             0, 0, nullptr, nullptr, nullptr, nullptr, test_factory, nullptr, nullptr};
  return &t;
}

// ---- LayerNorm: one implementation, its own entry_for (identity: n, eps, dtype) ----
inline const tr_call_spec_type *layer_norm_call() {
  static const tr_call_field fields[] = {
      {"n", TR_VALUE_INT, 0, 1, tr_value_int(0)}, {"eps", TR_VALUE_FLOAT, 0, 1, tr_value_float(1e-5)},
      {"dtype", TR_VALUE_DTYPE, 0, 1, tr_value_dtype(TR_FLOAT16)},
  };
  static const tr_call_spec_type type = {"LayerNormCall", 3, fields};
  return &type;
}

inline const tr_kernel_interface *layer_norm_interface() {
  static const char *args[] = {"x", "weight", "bias"};
  static const char *returns[] = {"y"};
  static const tr_kernel_interface iface = {"LayerNormFwdInterface", layer_norm_call(), 3, args, 1, returns,
                                            "normalizes each run of call.n trailing elements"};
  return &iface;
}

inline const tr_kernel_type *layer_norm() {
  static const int32_t archs[] = {80, 86, 89, 90};
  static const char *forward[] = {"x", "weight", "bias", nullptr};
  static tr_kernel_type t = {
      sizeof(tr_kernel_type), "layer_norm", layer_norm_interface(), nullptr, archs, 4, 0, nullptr, nullptr, nullptr,
      [](const tr_kernel_type *, const tr_call_spec *c, tr_build_identity *id) -> tr_status * {
        int64_t n = tr_call_spec_int(c, "n");
        double eps = tr_call_spec_float(c, "eps");
        tr_dtype dt = tr_call_spec_get(c, "dtype")->as.dtype;
        memcpy(id->bytes, &n, 8);
        memcpy(id->bytes + 8, &eps, 8);
        memcpy(id->bytes + 16, &dt, sizeof(dt));
        id->size = 16 + sizeof(dt);
        return nullptr;
      },
      test_factory, forward, nullptr};
  return &t;
}

// ---- GEMM: k too narrow to vectorise is refused during selection (spec section 5) ----
inline const tr_call_spec_type *gemm_call() {
  static const tr_call_field fields[] = {
      {"m", TR_VALUE_INT, 0, 0, {}}, {"n", TR_VALUE_INT, 0, 0, {}}, {"k", TR_VALUE_INT, 0, 0, {}},
      {"dtype", TR_VALUE_DTYPE, 0, 1, tr_value_dtype(TR_FLOAT16)}, {"trans_b", TR_VALUE_BOOL, 0, 1, tr_value_bool(false)},
  };
  static const tr_call_spec_type type = {"GemmCall", 5, fields};
  return &type;
}

inline const tr_kernel_interface *gemm_interface() {
  static const char *args[] = {"a", "b"};
  static const char *returns[] = {"d"};
  static const tr_kernel_interface iface = {"GemmFwdInterface", gemm_call(), 2, args, 1, returns, "d = a @ op(b)"};
  return &iface;
}

inline const tr_kernel_type *gemm() {
  static tr_kernel_type t = {
      sizeof(tr_kernel_type), "gemm", gemm_interface(), nullptr, nullptr, 0, 0, nullptr, nullptr,
      [](const tr_kernel_type *, const tr_call_spec *c, char *buf, size_t n) -> const char * {
        int64_t k = tr_call_spec_int(c, "k");
        size_t elem = tr_dtype_bytes(tr_call_spec_get(c, "dtype")->as.dtype);
        if (k * (int64_t)elem >= 16) return nullptr;
        snprintf(buf, n, "k must span at least one 16-byte vector (%zu elements of %zu bytes), got k=%lld",
                 16 / elem, elem, (long long)k);
        return buf;
      },
      nullptr, test_factory, nullptr, nullptr};
  return &t;
}

// A call spec on a device, from named values; facts stated when `arch` >= 0.
struct Call {
  tr_call_spec spec{};
  Call(const tr_call_spec_type *type, const char *device, std::initializer_list<tr_named_value> values,
       int32_t arch = -2, int32_t sm_count = 132) {
    tr_device d;
    ok(tr_device_parse(device, &d));
    std::vector<tr_named_value> v(values);
    ok(tr_call_spec_init(&spec, type, &d, v.data(), v.size()));
    if (arch != -2) {
      tr_device_facts f = {arch, nullptr, sm_count, 232448};
      tr_call_spec_state_facts(&spec, TR_FACT_ARCH | TR_FACT_SM_COUNT, &f);
    }
  }
  ~Call() { tr_call_spec_clear(&spec); }
};

}  // namespace tr_test

#endif  // TILERUN_SELECTOR_SELECTOR_TESTING_H_
