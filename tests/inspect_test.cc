// inspect_test.cc: the public questions about a call that make none (tilerun/inspect.h), asked
// from outside: only public headers, the runtime library linked. Output specs inferred from input
// specs and params; key_for with the device facts stated (so no GPU is needed) across every
// in-tree range and boundary; kernel_for's refusal of stated facts; the inventory; and a plugin
// kernel type (tests/plugin_api) selected and built through kernel_for on cpu; the manifest's ops
// as op_def.h reads them; tr_now_ns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <time.h>

#include "tilerun/inspect.h"
#include "tilerun/tilerun.h"

namespace {

// Fails the test with a status's message (and frees it).
void ok(tr_status *s) {
  if (s == nullptr) return;
  char buf[2048];
  tr_status_format(s, buf, sizeof(buf));
  tr_status_destroy(&s);
  FAIL(buf);
}

// The status's code and message, freed.
struct Err {
  tr_code code = TR_OK;
  std::string message;
  explicit Err(tr_status *s) {
    REQUIRE(s != nullptr);
    code = tr_status_code(s);
    message = tr_status_message(s);
    tr_status_destroy(&s);
  }
};

tr_device dev(const char *text) {
  tr_device d;
  ok(tr_device_parse(text, &d));
  return d;
}

tr_tensor_spec spec(const char *device, tr_dtype dtype, std::vector<int64_t> shape) {
  tr_device d = dev(device);
  tr_tensor_spec s;
  ok(tr_tensor_spec_make(&d, dtype, (int32_t)shape.size(), shape.data(), &s));
  return s;
}

struct Runtime {
  tr_runtime *rt = nullptr;
  explicit Runtime(const char *backend_dir = nullptr) {
    tr_runtime_options o{};
    o.manifest_dir = "manifest/spec";
    const char *dirs[] = {backend_dir};
    o.backend_dirs = backend_dir ? dirs : nullptr;
    o.n_backend_dirs = backend_dir ? 1 : 0;
    static const char *const kNone[] = {""};
    if (backend_dir == nullptr) {  // no backends at all: an empty search path
      o.backend_dirs = kNone;
      o.n_backend_dirs = 0;
    }
    ok(tr_runtime_new(&o, &rt));
  }
  ~Runtime() { tr_runtime_destroy(&rt); }
};

struct Op {
  tr_op *op = nullptr;
  Op(tr_runtime *rt, const char *name, std::vector<tr_named_value> params = {}) {
    ok(tr_op_new(rt, name, params.data(), params.size(), nullptr, &op));
  }
  ~Op() { tr_op_destroy(&op); }
};

// A shape param (normalized_shape), freed by its holder.
struct IntList {
  tr_value v;
  explicit IntList(std::vector<int64_t> xs) { ok(tr_value_int_list(xs.data(), xs.size(), &v)); }
  ~IntList() { tr_value_clear(&v); }
};

// The four facts of an H200 (sm_90, 132 SMs, 227 KiB of opt-in shared memory), all stated.
const uint32_t kAll = TR_FACT_ARCH | TR_FACT_CALIBRATION | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET;
tr_device_facts facts(int32_t arch) { return tr_device_facts{arch, nullptr, 132, 232448}; }

std::string key_for(tr_op *op, const tr_tensor_spec &x, int32_t arch = 90) {
  const tr_tensor_spec *in[] = {&x};
  tr_device_facts f = facts(arch);
  tr_op_selection sel;
  ok(tr_op_key_for(op, in, 1, kAll, &f, &sel));
  CHECK(sel.kernel == nullptr);
  return sel.key;
}

}  // namespace

TEST_CASE("the manifest's ops (op_def.h): listed in name order, found by name, each read whole") {
  Runtime r;
  CHECK(std::string(tr_runtime_manifest_dir(r.rt)) == "manifest/spec");
  size_t n = tr_runtime_op_count(r.rt);
  REQUIRE(n > 10);
  std::vector<std::string> names;
  for (size_t i = 0; i < n; i++) names.emplace_back(tr_op_def_name(tr_runtime_op_at(r.rt, i)));
  CHECK(std::is_sorted(names.begin(), names.end()));
  CHECK(std::find(names.begin(), names.end(), "GQADecodeFwdOp") != names.end());
  CHECK(tr_runtime_op_at(r.rt, n) == nullptr);

  const tr_op_def *rms = tr_runtime_find_op(r.rt, "RMSNormFwdOp");
  REQUIRE(rms != nullptr);
  CHECK(std::string(tr_op_def_name(rms)) == "RMSNormFwdOp");
  CHECK(std::string(tr_op_def_doc(rms)).find("sqrt(mean(x^2") != std::string::npos);
  CHECK(tr_op_def_is_composite(rms) == 0);
  REQUIRE(tr_op_def_param_count(rms) == 2);
  CHECK(std::string(tr_op_def_param_name(rms, 0)) == "normalized_shape");
  CHECK(tr_op_def_param_default(rms, 0) == nullptr);  // required
  CHECK(std::string(tr_op_def_param_type(rms, 1)) == "float | None");
  REQUIRE(tr_op_def_param_default(rms, 1) != nullptr);
  CHECK(tr_op_def_param_default(rms, 1)->kind == TR_VALUE_NONE);
  REQUIRE(tr_op_def_input_count(rms) == 2);
  CHECK(std::string(tr_op_def_input_name(rms, 0)) == "x");
  CHECK(std::string(tr_op_def_input_name(rms, 1)) == "weight");
  CHECK(tr_op_def_input_optional(rms, 0) == 0);
  CHECK(tr_op_def_input_optional(rms, 1) == 1);
  CHECK(tr_op_def_input_mutated(rms, 0) == 0);
  REQUIRE(tr_op_def_output_count(rms) == 1);
  CHECK(std::string(tr_op_def_output_name(rms, 0)) == "y");

  // a workload row as a call: its specs on the device asked for, its params
  REQUIRE(tr_op_def_workload_count(rms) >= 2);
  CHECK(std::string(tr_op_def_workload_label(rms, 1)) == "llama3.1-8b decode");
  tr_device cuda = dev("cuda:1");
  tr_tensor_spec specs[2];
  uint8_t has[2] = {9, 9};
  tr_named_value params[2];
  size_t n_params = 0;
  ok(tr_op_def_workload(rms, 1, &cuda, specs, has, params, &n_params));
  CHECK((has[0] == 1 && has[1] == 1));
  CHECK(specs[0].rank == 2);
  CHECK((specs[0].shape[0] == 1 && specs[0].shape[1] == 4096));
  CHECK(tr_dtype_equal(specs[0].dtype, TR_BFLOAT16));
  CHECK(tr_device_equal(&specs[1].device, &cuda));
  REQUIRE(n_params == 1);
  CHECK(std::string(params[0].name) == "normalized_shape");
  REQUIRE(params[0].value.kind == TR_VALUE_INT_LIST);
  CHECK((params[0].value.as.list.len == 1 && params[0].value.as.list.items[0] == 4096));

  // which inputs an op writes in place; a composition
  const tr_op_def *bn = tr_runtime_find_op(r.rt, "BatchNormFwdOp");
  REQUIRE(bn != nullptr);
  CHECK(std::string(tr_op_def_input_name(bn, 1)) == "running_mean");
  CHECK(tr_op_def_input_mutated(bn, 1) == 1);
  CHECK(tr_op_def_input_mutated(bn, 3) == 0);
  CHECK(tr_op_def_output_count(bn) == 3);
  CHECK(tr_op_def_is_composite(tr_runtime_find_op(r.rt, "LinearFwdOp")) == 1);

  // absent ops, NULL handles and indexes past a count give NULL or 0; a bad row is a ValueError
  CHECK(tr_runtime_find_op(r.rt, "NoSuchFwdOp") == nullptr);
  CHECK(tr_runtime_find_op(r.rt, nullptr) == nullptr);
  CHECK(tr_runtime_find_op(nullptr, "RMSNormFwdOp") == nullptr);
  CHECK(tr_runtime_op_count(nullptr) == 0);
  CHECK(tr_runtime_manifest_dir(nullptr) == nullptr);
  CHECK(tr_op_def_name(nullptr) == nullptr);
  CHECK(tr_op_def_input_count(nullptr) == 0);
  CHECK(tr_op_def_input_name(rms, 2) == nullptr);
  CHECK(tr_op_def_input_optional(rms, 2) == 0);
  CHECK(tr_op_def_output_name(rms, 1) == nullptr);
  CHECK(tr_op_def_param_name(rms, 2) == nullptr);
  CHECK(tr_op_def_param_default(rms, 2) == nullptr);
  CHECK(tr_op_def_workload_label(rms, 99) == nullptr);
  size_t rows = tr_op_def_workload_count(rms);
  Err past(tr_op_def_workload(rms, rows, &cuda, specs, has, params, &n_params));
  CHECK(past.code == TR_VALUE);
  CHECK(past.message.find("RMSNormFwdOp has " + std::to_string(rows) + " workload rows") != std::string::npos);
  Err null(tr_op_def_workload(rms, 0, &cuda, specs, nullptr, params, &n_params));
  CHECK(null.code == TR_VALUE);
  CHECK(null.message == "tr_op_def_workload: 'has' is NULL");
}

TEST_CASE("the default manifest folder is the one the runtime reports") {
  // no manifest_dir given: $TILERUN_MANIFEST_DIR is read (spelled unlike the built-in fallback,
  // manifest/spec, so a runtime that ignored it would answer otherwise)
  REQUIRE(setenv("TILERUN_MANIFEST_DIR", "./manifest/../manifest/spec", 1) == 0);
  tr_runtime *rt = nullptr;
  tr_runtime_options o{};
  static const char *const kNone[] = {""};
  o.backend_dirs = kNone;
  tr_status *made = tr_runtime_new(&o, &rt);
  unsetenv("TILERUN_MANIFEST_DIR");
  ok(made);
  CHECK(std::string(tr_runtime_manifest_dir(rt)) == "./manifest/../manifest/spec");
  CHECK(tr_runtime_find_op(rt, "AddFwdOp") != nullptr);
  tr_runtime_destroy(&rt);
}

TEST_CASE("tr_now_ns is monotonic and counts nanoseconds") {
  uint64_t a = tr_now_ns();
  uint64_t b = tr_now_ns();
  CHECK(b >= a);
  struct timespec pause = {0, 2000000};  // 2 ms
  nanosleep(&pause, nullptr);
  uint64_t c = tr_now_ns();
  CHECK(c - b >= 2000000u);
  CHECK(c - b < 2000000000u);
}

TEST_CASE("output specs: shape and dtype of each output from input specs and params, no builder run") {
  Runtime r;
  SECTION("softmax with an output dtype") {
    tr_named_value p[] = {{"dim", tr_value_int(0)}, {"dtype", tr_value_dtype(TR_FLOAT32)}};
    Op op(r.rt, "SoftmaxFwdOp", {p[0], p[1]});
    tr_tensor_spec x = spec("cuda:1", TR_BFLOAT16, {3, 5, 7});
    const tr_tensor_spec *in[] = {&x};
    tr_tensor_spec out[1];
    uint8_t present[1] = {9};
    ok(tr_op_output_specs(op.op, in, 1, out, present, 1));
    CHECK(present[0] == 1);
    char text[128];
    tr_tensor_spec_format(&out[0], text, sizeof(text));
    CHECK(std::string(text) == "float32[3, 5, 7] on cuda:1");
    CHECK(tr_op_memo_count(op.op) == 0);  // nothing built
    CHECK(tr_op_target(op.op) == nullptr);  // nor settled
  }
  SECTION("outputs whose `when` is false are absent; the op-less form settles params itself") {
    tr_tensor_spec x = spec("cpu", TR_FLOAT32, {4, 3, 2}), c = spec("cpu", TR_FLOAT32, {3});
    const tr_tensor_spec *in[] = {&x, &c, &c};
    tr_tensor_spec out[3];
    uint8_t present[3];
    ok(tr_runtime_output_specs(r.rt, "BatchNormFwdOp", nullptr, 0, in, 3, out, present, 3));
    CHECK(present[0] == 1);
    CHECK(present[1] == 0);
    CHECK(present[2] == 0);
    tr_named_value training = {"training", tr_value_bool(1)};
    ok(tr_runtime_output_specs(r.rt, "BatchNormFwdOp", &training, 1, in, 1, out, present, 3));
    CHECK(present[1] == 1);
    CHECK(out[1].rank == 1);
    CHECK(out[1].shape[0] == 3);
    CHECK(tr_dtype_equal(out[1].dtype, TR_FLOAT32));
  }
  SECTION("a call the manifest refuses is its SignatureError; too little room a ValueError") {
    IntList shape({8});
    Op op(r.rt, "RMSNormFwdOp", {{"normalized_shape", shape.v}});
    tr_tensor_spec x = spec("cpu", TR_FLOAT16, {2, 4});
    const tr_tensor_spec *in[] = {&x};
    tr_tensor_spec out[1];
    uint8_t present[1];
    Err bad(tr_op_output_specs(op.op, in, 1, out, present, 1));
    CHECK(bad.code == TR_SIGNATURE_SHAPE);
    CHECK_THAT(bad.message, Catch::Contains("RMSNormFwdOp") && Catch::Contains("x"));
    x = spec("cpu", TR_FLOAT16, {2, 8});
    Err room(tr_op_output_specs(op.op, in, 1, out, present, 0));
    CHECK(room.code == TR_VALUE);
    Err unknown(tr_runtime_output_specs(r.rt, "NoSuchFwdOp", nullptr, 0, in, 1, out, present, 1));
    CHECK(unknown.code == TR_OP_NOT_AVAILABLE);
    tr_named_value bad_param = {"normalized_shape", tr_value_bool(true)};
    Err param(tr_runtime_output_specs(r.rt, "RMSNormFwdOp", &bad_param, 1, in, 1, out, present, 1));
    CHECK(param.code == TR_SIGNATURE_PARAM);
  }
  SECTION("specs filled in by hand are checked as tr_tensor_spec_make checks them, naming the input") {
    Op op(r.rt, "AddFwdOp");
    tr_tensor_spec a = spec("cpu", TR_FLOAT32, {4}), b = a;
    const tr_tensor_spec *in[] = {&a, &b};
    tr_tensor_spec out[1];
    uint8_t present[1];
    tr_op_selection sel;
    b.rank = 12;  // read past its 8 dims before
    Err rank(tr_op_output_specs(op.op, in, 2, out, present, 1));
    CHECK(rank.code == TR_SIGNATURE_SHAPE);
    CHECK(rank.message == "tensor rank 12 is out of range: tilerun handles ranks 0 to 8 (input 'b' of AddFwdOp)");
    Err rank_key(tr_op_key_for(op.op, in, 2, 0, nullptr, &sel));
    CHECK(rank_key.message == rank.message);
    b = a;
    b.shape[0] = -3;  // inferred as float32[-3] before
    Err negative(tr_runtime_output_specs(r.rt, "AddFwdOp", nullptr, 0, in, 2, out, present, 1));
    CHECK(negative.message == "tensor shape (-3,): axis 0 has extent -3, which is negative (input 'b' of AddFwdOp)");
    b = a;
    memset(&b.device, 0, sizeof(b.device));  // no device type
    Err zeroed(tr_op_output_specs(op.op, in, 2, out, present, 1));
    CHECK(zeroed.code == TR_VALUE);
    CHECK_THAT(zeroed.message, Catch::EndsWith("(input 'b' of AddFwdOp)"));
    b = a;
    memset(b.device.type, 'x', sizeof(b.device.type));  // no terminating NUL
    Err unterminated(tr_op_output_specs(op.op, in, 2, out, present, 1));
    CHECK(unterminated.message ==
          "device type is not a NUL-terminated string of at most " + std::to_string(TR_DEVICE_TYPE_MAX) +
              " bytes (input 'b' of AddFwdOp)");
    b = a;
    ok(tr_op_output_specs(op.op, in, 2, out, present, 1));  // the same op, specs made right: served
  }
  SECTION("NULL arguments are ValueErrors naming the function and the argument") {
    Op op(r.rt, "AddFwdOp");
    tr_tensor_spec a = spec("cpu", TR_FLOAT32, {4});
    const tr_tensor_spec *in[] = {&a, &a};
    tr_tensor_spec out[1];
    uint8_t present[1];
    tr_op_selection sel;
    tr_op_inventory inv;
    CHECK(Err(tr_op_output_specs(nullptr, in, 2, out, present, 1)).message == "tr_op_output_specs: 'op' is NULL");
    CHECK(Err(tr_op_output_specs(op.op, nullptr, 2, out, present, 1)).message ==
          "tr_op_output_specs: 'inputs' is NULL (2 inputs)");
    CHECK(Err(tr_op_output_specs(op.op, in, 2, nullptr, present, 1)).message ==
          "tr_op_output_specs: 'outputs' is NULL");
    CHECK(Err(tr_op_output_specs(op.op, in, 2, out, nullptr, 1)).message == "tr_op_output_specs: 'present' is NULL");
    CHECK(Err(tr_runtime_output_specs(nullptr, "AddFwdOp", nullptr, 0, in, 2, out, present, 1)).message ==
          "tr_runtime_output_specs: 'rt' is NULL");
    CHECK(Err(tr_runtime_output_specs(r.rt, nullptr, nullptr, 0, in, 2, out, present, 1)).message ==
          "tr_runtime_output_specs: 'op_name' is NULL");
    CHECK(Err(tr_runtime_output_specs(r.rt, "AddFwdOp", nullptr, 1, in, 2, out, present, 1)).message ==
          "tr_runtime_output_specs: 'params' is NULL");
    CHECK(Err(tr_op_key_for(nullptr, in, 2, 0, nullptr, &sel)).message == "tr_op_key_for: 'op' is NULL");
    CHECK(Err(tr_op_key_for(op.op, in, 2, 0, nullptr, nullptr)).message == "tr_op_key_for: 'out' is NULL");
    CHECK(Err(tr_op_key_for(op.op, nullptr, 2, 0, nullptr, &sel)).message == "AddFwdOp: 'inputs' is NULL (2 inputs)");
    CHECK(Err(tr_op_kernel_for(nullptr, in, 2, 0, nullptr, &sel)).message == "tr_op_kernel_for: 'op' is NULL");
    CHECK(Err(tr_op_kernel_for(op.op, in, 2, 0, nullptr, nullptr)).message == "tr_op_kernel_for: 'out' is NULL");
    CHECK(Err(tr_runtime_inventory_at(nullptr, 0, &inv)).message == "tr_runtime_inventory_at: 'rt' is NULL");
    CHECK(Err(tr_runtime_inventory_at(r.rt, 0, nullptr)).message == "tr_runtime_inventory_at: 'out' is NULL");
    CHECK(Err(tr_runtime_inventory_of(nullptr, "AddFwdOp", &inv)).message == "tr_runtime_inventory_of: 'rt' is NULL");
    CHECK(Err(tr_runtime_inventory_of(r.rt, nullptr, &inv)).message == "tr_runtime_inventory_of: 'op_name' is NULL");
    CHECK(Err(tr_runtime_inventory_of(r.rt, "AddFwdOp", nullptr)).message == "tr_runtime_inventory_of: 'out' is NULL");
  }
}

TEST_CASE("key_for with stated device facts: each softmax range and the boundaries between them") {
  Runtime r;
  Op last(r.rt, "SoftmaxFwdOp");
  CHECK(key_for(last.op, spec("cuda:0", TR_BFLOAT16, {4, 1024})) == "softmax_warp");
  CHECK(key_for(last.op, spec("cuda:0", TR_BFLOAT16, {4, 1025})) == "softmax_block");
  CHECK(key_for(last.op, spec("cuda:0", TR_FLOAT32, {4, 32768})) == "softmax_block");
  CHECK(key_for(last.op, spec("cuda:0", TR_FLOAT32, {4, 32769})) == "softmax_looped");
  CHECK(key_for(last.op, spec("cuda:0", TR_FLOAT16, {7})) == "softmax_warp");
  tr_named_value dim0 = {"dim", tr_value_int(0)};
  Op first(r.rt, "SoftmaxFwdOp", {dim0});
  CHECK(key_for(first.op, spec("cuda:0", TR_FLOAT32, {64, 3})) == "softmax_strided");
  SECTION("the interface comes back with the key") {
    tr_tensor_spec x = spec("cuda:0", TR_FLOAT32, {2, 8});
    const tr_tensor_spec *in[] = {&x};
    tr_device_facts f = facts(80);
    tr_op_selection sel;
    ok(tr_op_key_for(last.op, in, 1, kAll, &f, &sel));
    CHECK(std::string(sel.interface) == "SoftmaxRowFwdInterface");
  }
  SECTION("an architecture no implementation supports: no implementation serves this call") {
    tr_tensor_spec x = spec("cuda:0", TR_FLOAT32, {2, 8});
    const tr_tensor_spec *in[] = {&x};
    tr_device_facts f = facts(70);
    tr_op_selection sel;
    Err e(tr_op_key_for(last.op, in, 1, kAll, &f, &sel));
    CHECK(e.code == TR_VALUE);  // a selection refusal is a ValueError (the spec's tests catch ValueError)
    CHECK_THAT(e.message, Catch::Contains("no implementation serves this call") &&
                              Catch::Contains("softmax_warp: not available on arch 70"));
    CHECK(sel.key == nullptr);
  }
  SECTION("rows of no elements: served (their tensor is empty, nothing is launched)") {
    tr_tensor_spec x = spec("cuda:0", TR_FLOAT32, {2, 0});
    const tr_tensor_spec *in[] = {&x};
    tr_device_facts f = facts(90);
    tr_op_selection sel;
    ok(tr_op_key_for(last.op, in, 1, kAll, &f, &sel));
    CHECK(std::string(sel.key) == "softmax_warp");
  }
}

TEST_CASE("key_for: norms and add; the call is checked first; devices and ops with no in-tree kernels") {
  Runtime r;
  IntList shape({4096});
  Op rms(r.rt, "RMSNormFwdOp", {{"normalized_shape", shape.v}});
  tr_tensor_spec x = spec("cuda:0", TR_BFLOAT16, {2, 4096}), w = spec("cuda:0", TR_BFLOAT16, {4096});
  const tr_tensor_spec *in[] = {&x, &w};
  tr_device_facts f = facts(90);
  tr_op_selection sel;
  ok(tr_op_key_for(rms.op, in, 2, kAll, &f, &sel));
  CHECK(std::string(sel.interface) == "RMSNormRowFwdInterface");
  CHECK(std::string(sel.key) == "rms_norm_looped");
  Op add(r.rt, "AddFwdOp");
  tr_tensor_spec a = spec("cuda:0", TR_FLOAT16, {3, 5});
  const tr_tensor_spec *ab[] = {&a, &a};
  ok(tr_op_key_for(add.op, ab, 2, kAll, &f, &sel));
  CHECK(std::string(sel.key) == "add_elementwise");

  tr_tensor_spec wrong = spec("cuda:0", TR_BFLOAT16, {2, 4095});
  const tr_tensor_spec *bad[] = {&wrong};
  Err shape_err(tr_op_key_for(rms.op, bad, 1, kAll, &f, &sel));
  CHECK(shape_err.code == TR_SIGNATURE_SHAPE);

  tr_tensor_spec on_cpu = spec("cpu", TR_FLOAT32, {2, 4096});
  const tr_tensor_spec *cpu_in[] = {&on_cpu};
  Err cpu(tr_op_key_for(rms.op, cpu_in, 1, kAll, &f, &sel));
  CHECK(cpu.code == TR_OP_NOT_AVAILABLE);
  CHECK_THAT(cpu.message, Catch::Contains("in-tree kernels do not run on cpu"));

  tr_named_value groups = {"num_groups", tr_value_int(2)};
  Op gn(r.rt, "GroupNormFwdOp", {groups});
  tr_tensor_spec g = spec("cuda:0", TR_FLOAT32, {2, 4, 3});
  const tr_tensor_spec *gin[] = {&g};
  Err none(tr_op_key_for(gn.op, gin, 1, kAll, &f, &sel));
  CHECK(none.code == TR_OP_NOT_AVAILABLE);
  CHECK_THAT(none.message, Catch::Contains("GroupNormFwdOp has no in-tree kernels") &&
                               Catch::Contains("SoftmaxFwdOp"));

  Err no_facts(tr_op_key_for(rms.op, in, 2, TR_FACT_ARCH, nullptr, &sel));
  CHECK(no_facts.code == TR_VALUE);
}

TEST_CASE("kernel_for derives the device facts: a stated one is the spec's row 11 error") {
  Runtime r;
  Op op(r.rt, "SoftmaxFwdOp");
  tr_tensor_spec x = spec("cuda:0", TR_FLOAT32, {2, 8});
  const tr_tensor_spec *in[] = {&x};
  tr_device_facts f = facts(90);
  tr_op_selection sel;
  Err e(tr_op_kernel_for(op.op, in, 1, TR_FACT_ARCH, &f, &sel));
  CHECK(e.code == TR_SELECTION);
  CHECK_THAT(e.message, Catch::Contains("this call spec states ['arch']"));
  CHECK(sel.kernel == nullptr);
}

TEST_CASE("the inventory: each in-tree op's interfaces and implementation keys") {
  Runtime r;
  REQUIRE(tr_runtime_inventory_count(r.rt) == 8);
  std::vector<std::string> ops;
  for (size_t i = 0; i < tr_runtime_inventory_count(r.rt); i++) {
    tr_op_inventory inv;
    ok(tr_runtime_inventory_at(r.rt, i, &inv));
    ops.push_back(inv.op);
  }
  CHECK(ops == std::vector<std::string>{"RMSNormFwdOp", "LayerNormFwdOp", "SoftmaxFwdOp", "AddFwdOp", "GemmFwdOp",
                                        "RoPEFwdOp", "GQADecodeFwdOp", "GQAPrefillFwdOp"});
  tr_op_inventory inv;
  ok(tr_runtime_inventory_of(r.rt, "SoftmaxFwdOp", &inv));
  REQUIRE(inv.n_interfaces == 1);
  CHECK(std::string(inv.interfaces[0]->name) == "SoftmaxRowFwdInterface");
  CHECK(std::string(inv.interfaces[0]->request->name) == "SoftmaxCall");
  std::vector<std::string> keys;
  std::string general;
  for (size_t i = 0; i < inv.n_types; i++) {
    keys.push_back(inv.types[i]->key);
    CHECK(inv.types[i]->interface == inv.interfaces[0]);
    if (inv.types[i]->general) general = inv.types[i]->key;
  }
  CHECK(keys == std::vector<std::string>{"softmax_warp", "softmax_block", "softmax_looped", "softmax_strided"});
  CHECK(general == "softmax_strided");
  Err none(tr_runtime_inventory_of(r.rt, "GroupNormFwdOp", &inv));
  CHECK(none.code == TR_OP_NOT_AVAILABLE);
  CHECK(inv.op == nullptr);
  ok(tr_runtime_inventory_of(r.rt, "GQAPrefillFwdOp", &inv));  // its own family's two, the first general
  REQUIRE(inv.n_types == 2);
  CHECK(std::string(inv.interfaces[0]->name) == "GQAPrefillFwdInterface");
  CHECK(std::string(inv.types[0]->key) == "gqa_prefill_flash");
  CHECK(inv.types[0]->general);
  CHECK(std::string(inv.types[1]->key) == "gqa_prefill_wgmma");
  CHECK(!inv.types[1]->general);
  ok(tr_runtime_inventory_of(r.rt, "RoPEFwdOp", &inv));  // two implementations, neither general
  REQUIRE(inv.n_types == 2);
  CHECK(std::string(inv.types[0]->key) == "rope_neox");
  CHECK(std::string(inv.types[1]->key) == "rope_interleaved");
  CHECK((!inv.types[0]->general && !inv.types[1]->general));
  Err past(tr_runtime_inventory_at(r.rt, 8, &inv));
  CHECK(past.code == TR_VALUE);
}

TEST_CASE("a plugin's kernel type: listed in the inventory, selected and built by kernel_for on cpu") {
  const char *tmp = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(tmp ? tmp : "/tmp") / "inspect_backends";
  std::filesystem::create_directories(dir);
  {
    std::ofstream d(dir / "public.yaml");
    d << "name: public\nlibrary: "
      << std::filesystem::absolute("tests/plugin_api/libpublic_plugin.so").string() << "\n";
  }
  Runtime r(dir.c_str());
  REQUIRE(tr_load_failure_count(r.rt) == 0);
  tr_op_inventory inv;
  ok(tr_runtime_inventory_of(r.rt, "RMSNormFwdOp", &inv));
  REQUIRE(inv.n_types == 3);
  CHECK(std::string(inv.types[2]->key) == "public_rms_norm");

  IntList shape({4});
  Op op(r.rt, "RMSNormFwdOp", {{"normalized_shape", shape.v}, {"eps", tr_value_float(0.0)}});
  tr_tensor_spec xs = spec("cpu", TR_FLOAT32, {2, 4});
  const tr_tensor_spec *in[] = {&xs};
  tr_op_selection sel;
  ok(tr_op_key_for(op.op, in, 1, 0, nullptr, &sel));  // cpu's facts need no device
  CHECK(std::string(sel.key) == "public_rms_norm");
  ok(tr_op_kernel_for(op.op, in, 1, 0, nullptr, &sel));
  CHECK(std::string(sel.key) == "public_rms_norm");
  REQUIRE(sel.kernel != nullptr);
  float x[8] = {3, 4, 0, 0, 1, 1, 1, 1}, y[8] = {0};
  int64_t s[] = {2, 4};
  DLTensor tx = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, s, nullptr, 0};
  DLTensor ty = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, s, nullptr, 0};
  DLTensor *args[] = {&tx, nullptr}, *outs[] = {&ty};
  ok(sel.kernel->call(sel.kernel->self, args, 2, outs, 1));
  CHECK(y[0] == Approx(3 / 2.5));
  CHECK(y[4] == Approx(1.0));
  CHECK(tr_op_memo_count(op.op) == 0);  // kernel_for builds into the runtime, not the op's memo
}
