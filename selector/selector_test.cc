// selector_test.cc: the kernel-selection spec's worked examples, one test per applicability range
// and per boundary, and every error of its table 5 with its message fragment. Device facts are
// given explicitly (key_for), so nothing depends on the machine.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "selector/selector_testing.h"

using namespace tr_test;

static tr_status *facts_none(void *, const tr_device *, tr_device_facts *out) {
  *out = tr_device_facts{-1, nullptr, 0, 0};  // an unregistered device type
  return nullptr;
}

struct Sel {
  tr_selector *sel = nullptr;
  Sel(std::vector<const tr_kernel_interface *> ifaces, std::vector<const tr_kernel_type *> types,
      tr_facts_fn facts = facts_none) {
    ok(tr_selector_new("TestFwdOp", ifaces.data(), ifaces.size(), types.data(), types.size(), facts, nullptr, &sel));
  }
  ~Sel() { tr_selector_destroy(&sel); }
  std::string key(const char *iface, const Call &c) {
    const char *k = nullptr;
    tr_status *s = tr_selector_key_for(sel, iface, &c.spec, &k);
    return s ? error_of(s) : std::string(k);
  }
};

static std::string new_error(std::vector<const tr_kernel_interface *> ifaces,
                             std::vector<const tr_kernel_type *> types) {
  tr_selector *sel = nullptr;
  std::string e = error_of(tr_selector_new("TestFwdOp", ifaces.data(), ifaces.size(), types.data(),
                                           types.size(), facts_none, nullptr, &sel));
  CHECK(sel == nullptr);
  return e;
}

static Sel gqa() {
  return Sel({gqa_decode_interface()}, {gqa_decode(), gqa_decode_bs1(), gqa_decode_long_context()});
}

static Call decode(int64_t batch, int64_t kv, int32_t arch) {
  return Call(attention_call(), "cuda:0", {{"batch", tr_value_int(batch)}, {"seqlen_kv", tr_value_int(kv)}}, arch);
}

static const char *kGqa = "GQADecodeDenseFwdInterface";

TEST_CASE("GQA decode, the spec's table 2: batch-1 decode on each architecture") {
  Sel s = gqa();
  CHECK(s.key(kGqa, decode(1, 4096, 90)) == "gqa_dense_decode_long_context");  // row 1
  CHECK(s.key(kGqa, decode(1, 512, 90)) == "gqa_dense_decode_bs1");            // row 2
  CHECK(s.key(kGqa, decode(1, 4096, 80)) == "gqa_dense_decode_long_context");  // row 3
  CHECK(s.key(kGqa, decode(1, 512, 80)) == "gqa_dense_decode");                // row 4
}

TEST_CASE("GQA decode: each range and each boundary between ranges") {
  Sel s = gqa();
  CHECK(s.key(kGqa, decode(1, 1023, 90)) == "gqa_dense_decode_bs1");            // just short of long
  CHECK(s.key(kGqa, decode(1, 1024, 90)) == "gqa_dense_decode_long_context");   // long begins
  CHECK(s.key(kGqa, decode(2, 4096, 90)) == "gqa_dense_decode");                // batch 2: general
  CHECK(s.key(kGqa, decode(1, 1023, 89)) == "gqa_dense_decode");                // bs1 not on SM89
  CHECK(s.key(kGqa, decode(1, 1024, 89)) == "gqa_dense_decode_long_context");
  Call fp16_softcap(attention_call(), "cuda:0",
                    {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(4096)}, {"softcap", tr_value_float(30.0)}}, 90);
  CHECK(s.key(kGqa, fp16_softcap) == "gqa_dense_decode_bs1");  // long-context refuses a softcap
  Call heads64(attention_call(), "cuda:0",
               {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(4096)}, {"heads", tr_value_int(64)}}, 80);
  CHECK(s.key(kGqa, heads64) == "gqa_dense_decode");
}

TEST_CASE("availability filters before precedence; no available implementation lists each reason") {
  Sel s = gqa();
  CHECK(s.key(kGqa, decode(1, 4096, 75)) ==
        "ValueError: TestFwdOp: no implementation serves this call AttentionCall(batch=1, "
        "seqlen_kv=4096, heads=32, heads_kv=4, dim=128, dtype=float16, softcap=0.0, "
        "fuse_rope=False, arch=75, sm_count=132, device=cuda:0); gqa_dense_decode: not available "
        "on arch 75 (supports 80 89 90); gqa_dense_decode_bs1: not available on arch 75 (supports "
        "90); gqa_dense_decode_long_context: not available on arch 75 (supports 80 89 90)");
  // An empty cache: bs1's own range (batch 1) holds, but its base's refusal applies too.
  Call zero(attention_call(), "cuda:0", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(0)}}, 90);
  CHECK(s.key(kGqa, zero).find("; gqa_dense_decode: not a dense decode call; gqa_dense_decode_bs1: "
                               "not a dense decode call; gqa_dense_decode_long_context: does not "
                               "serve this call") != std::string::npos);
}

TEST_CASE("a device type with no facts: an implementation with supported_archs is never available") {
  Sel s = gqa();
  Call acme(attention_call(), "cuda:0", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(512)}});
  // no stated facts: derived from the device; this provider knows none (-1)
  CHECK(s.key(kGqa, acme).find("not available on arch -1") != std::string::npos);
}

TEST_CASE("BatchNorm: two interfaces on one call spec; training returns mean and rstd") {
  Sel s({batch_norm_train_interface(), batch_norm_infer_interface()},
        {batch_norm_train(), batch_norm_train_whole(), batch_norm_infer()});
  Call small(batch_norm_call(), "cuda:0", {{"n", tr_value_int(8)}, {"c", tr_value_int(64)}, {"spatial", tr_value_int(16)}}, 90);
  Call big(batch_norm_call(), "cuda:0", {{"n", tr_value_int(32)}, {"c", tr_value_int(64)}, {"spatial", tr_value_int(3136)}}, 90);
  CHECK(s.key("BatchNormTrainFwdInterface", small) == "fwd_train_whole");   // within one block
  CHECK(s.key("BatchNormTrainFwdInterface", big) == "fwd_train_kernel");    // the general one
  CHECK(s.key("BatchNormInferFwdInterface", big) == "fwd_infer_kernel");
  CHECK(batch_norm_train_interface()->n_returns == 3);
  CHECK(std::string(batch_norm_train_interface()->returns[1]) == "mean");
  CHECK(std::string(batch_norm_train_interface()->returns[2]) == "rstd");
  CHECK(batch_norm_infer_interface()->n_returns == 1);
  Call edge(batch_norm_call(), "cuda:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}, {"spatial", tr_value_int(4096)}}, 90);
  Call past(batch_norm_call(), "cuda:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}, {"spatial", tr_value_int(4097)}}, 90);
  CHECK(s.key("BatchNormTrainFwdInterface", edge) == "fwd_train_whole");   // the boundary: 4096
  CHECK(s.key("BatchNormTrainFwdInterface", past) == "fwd_train_kernel");
}

static tr_status *facts_sm90(void *, const tr_device *, tr_device_facts *out) {
  *out = tr_device_facts{90, nullptr, 132, 232448};
  return nullptr;
}

TEST_CASE("LayerNorm: one implementation; its factory runs once per build identity") {
  builds() = 0;
  Sel s({layer_norm_interface()}, {layer_norm()}, facts_sm90);
  Call a(layer_norm_call(), "cuda:0", {{"n", tr_value_int(4096)}});
  Call b(layer_norm_call(), "cuda:1", {{"n", tr_value_int(4096)}});  // same identity (n, eps, dtype)
  Call c(layer_norm_call(), "cuda:0", {{"n", tr_value_int(8192)}});
  tr_selected out;
  ok(tr_selector_kernel_for(s.sel, "LayerNormFwdInterface", &a.spec, &out));
  CHECK(std::string(out.key) == "layer_norm");
  const tr_kernel *first = out.kernel;
  ok(tr_selector_kernel_for(s.sel, "LayerNormFwdInterface", &b.spec, &out));
  CHECK(out.kernel == first);
  CHECK(builds() == 1);
  ok(tr_selector_kernel_for(s.sel, "LayerNormFwdInterface", &c.spec, &out));
  CHECK(builds() == 2);
  CHECK(s.key("LayerNormFwdInterface", Call(layer_norm_call(), "cuda:0", {{"n", tr_value_int(64)}}, 75))
            .find("not available on arch 75 (supports 80 86 89 90)") != std::string::npos);
}

TEST_CASE("GEMM: a k too narrow to vectorise is refused during selection") {
  Sel s({gemm_interface()}, {gemm()});
  Call narrow(gemm_call(), "cuda:0", {{"m", tr_value_int(64)}, {"n", tr_value_int(64)}, {"k", tr_value_int(1)},
                                      {"trans_b", tr_value_bool(true)}}, 90);
  CHECK(s.key("GemmFwdInterface", narrow).find("k must span at least one 16-byte vector (8 elements of 2 bytes), got k=1") !=
        std::string::npos);
  Call edge(gemm_call(), "cuda:0", {{"m", tr_value_int(64)}, {"n", tr_value_int(64)}, {"k", tr_value_int(8)}}, 90);
  Call below(gemm_call(), "cuda:0", {{"m", tr_value_int(64)}, {"n", tr_value_int(64)}, {"k", tr_value_int(7)}}, 90);
  CHECK(s.key("GemmFwdInterface", edge) == "gemm");
  CHECK(s.key("GemmFwdInterface", below).find("no implementation serves this call") != std::string::npos);
}

// ---- table 5 ----

TEST_CASE("table 5, rows 1-5: checks when the op is constructed") {
  tr_kernel_type not_a_kernel = *gemm();
  not_a_kernel.key = "plain";
  not_a_kernel.factory = nullptr;
  CHECK(new_error({gemm_interface()}, {&not_a_kernel}).find("does not implement GemmFwdInterface") != std::string::npos);

  tr_kernel_type bad_forward = *layer_norm();
  static const char *args[] = {"x", "w", nullptr};
  bad_forward.forward_args = args;
  CHECK(new_error({layer_norm_interface()}, {&bad_forward}) ==
        "SelectionError: TestFwdOp: kernel type 'layer_norm': forward does not take LayerNormFwdInterface's "
        "arguments: it takes 2, and LayerNormFwdInterface's forward passes 3 positionally (x, weight, bias)");
  static const char *four[] = {"x", "weight", "bias", "extra", nullptr};
  bad_forward.forward_args = four;
  CHECK(new_error({layer_norm_interface()}, {&bad_forward}).find("forward does not take LayerNormFwdInterface's arguments: it takes 4") !=
        std::string::npos);
  /* positionally: other names, the same count, are accepted (the selector is built) */
  tr_kernel_type renamed = *layer_norm();
  static const char *other_names[] = {"input", "gamma", "beta", nullptr};
  renamed.forward_args = other_names;
  Sel accepted({layer_norm_interface()}, {&renamed});
  CHECK(accepted.sel != nullptr);

  tr_kernel_type second_general = *gqa_decode();
  second_general.key = "gqa_other_general";
  CHECK(new_error({gqa_decode_interface()}, {gqa_decode(), &second_general}) ==
        "SelectionError: TestFwdOp: GQADecodeDenseFwdInterface has more than one general "
        "implementation: gqa_dense_decode, gqa_other_general");

  tr_kernel_type bs1_back = *gqa_decode_bs1();
  static const char *back[] = {"gqa_dense_decode_long_context", nullptr};
  bs1_back.preferred_over = back;
  CHECK(new_error({gqa_decode_interface()}, {gqa_decode(), &bs1_back, gqa_decode_long_context()}) ==
        "SelectionError: TestFwdOp: preferences form a cycle through gqa_dense_decode_bs1 -> "
        "gqa_dense_decode_long_context -> gqa_dense_decode_bs1");

  CHECK(new_error({gqa_decode_interface()}, {gqa_decode(), gemm()}) ==
        "SelectionError: TestFwdOp: keys implement none of its kernel interfaces: gemm (implements "
        "GemmFwdInterface)");
}

TEST_CASE("table 5, rows 6-8: no key runs on the device type, none serves, ambiguity") {
  Sel s = gqa();
  Call cpu(attention_call(), "cpu", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(4096)}});
  CHECK(s.key(kGqa, cpu) == "OpNotAvailableError: TestFwdOp's in-tree kernels do not run on cpu: no "
                            "implementation of GQADecodeDenseFwdInterface runs on device type 'cpu'");
  CHECK(s.key(kGqa, decode(1, 4096, 70)).find("no implementation serves this call") != std::string::npos);
  tr_kernel_type undeclared = *gqa_decode_long_context();
  undeclared.preferred_over = nullptr;  // overlaps bs1 at batch 1 and kv >= 1024, undeclared
  Sel amb({gqa_decode_interface()}, {gqa_decode(), gqa_decode_bs1(), &undeclared});
  CHECK(amb.key(kGqa, decode(1, 4096, 90)) ==
        "SelectionError: TestFwdOp: dispatch is ambiguous for AttentionCall(batch=1, seqlen_kv=4096, "
        "heads=32, heads_kv=4, dim=128, dtype=float16, softcap=0.0, fuse_rope=False, arch=90, "
        "sm_count=132, device=cuda:0): gqa_dense_decode_bs1, gqa_dense_decode_long_context all apply "
        "and none is preferred over the others; declare preferred_over");
  CHECK(amb.key(kGqa, decode(1, 512, 90)) == "gqa_dense_decode_bs1");  // no overlap there: fine
}

// A call spec with a mutable field (a list), its interface and an implementation: row 10.
static const tr_call_spec_type *listy_call() {
  static const tr_call_field fields[] = {{"sizes", TR_VALUE_INT_LIST, 1, 0, {}}};
  static const tr_call_spec_type listy = {"ListyCall", 1, fields};
  return &listy;
}
static const tr_kernel_interface *listy_interface() {
  static const char *args[] = {"x"};
  static const tr_kernel_interface iface = {"ListyFwdInterface", listy_call(), 1, args, 0, nullptr, ""};
  return &iface;
}
static const tr_kernel_type *listy_kernel() {
  static tr_kernel_type t = [] {
    tr_kernel_type k = *gemm();
    k.interface = listy_interface();
    k.refusal = nullptr;
    return k;
  }();
  return &t;
}

TEST_CASE("table 5, rows 9-11: the call spec's type, a mutable field, stated device facts") {
  Sel s = gqa();
  Call wrong(gemm_call(), "cuda:0", {{"m", tr_value_int(1)}, {"n", tr_value_int(1)}, {"k", tr_value_int(8)}}, 90);
  CHECK(s.key(kGqa, wrong) == "SelectionError: TestFwdOp: GQADecodeDenseFwdInterface takes a "
                              "AttentionCall call spec, got a GemmCall");
  const tr_call_spec_type &listy = *listy_call();
  const tr_kernel_interface &iface = *listy_interface();
  const tr_kernel_type &listy_type = *listy_kernel();
  Sel m({&iface}, {&listy_type});
  int64_t sizes[] = {1, 2};
  tr_value list;
  ok(tr_value_int_list(sizes, 2, &list));
  Call lc(&listy, "cuda:0", {{"sizes", list}}, 90);
  tr_value_clear(&list);
  CHECK(m.key("ListyFwdInterface", lc) == "SelectionError: TestFwdOp: ListyCall.sizes is mutable, so "
                                         "ListyCall cannot key a dispatch cache; make the field immutable");
  tr_selected out;
  Call stated = decode(1, 512, 90);
  CHECK(error_of(tr_selector_kernel_for(s.sel, kGqa, &stated.spec, &out)) ==
        "SelectionError: TestFwdOp: this call spec states ['arch', 'sm_count']; device facts are "
        "derived from its device, and only key_for accepts them stated");
}

TEST_CASE("kernel_for: a repeated call spec is a cache hit; unknown interfaces are named") {
  builds() = 0;
  Sel s({gqa_decode_interface()}, {gqa_decode(), gqa_decode_bs1(), gqa_decode_long_context()}, facts_sm90);
  Call c(attention_call(), "cuda:0", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(512)}});
  tr_selected out;
  ok(tr_selector_kernel_for(s.sel, kGqa, &c.spec, &out));
  CHECK(std::string(out.key) == "gqa_dense_decode_bs1");
  for (int i = 0; i < 10; i++) ok(tr_selector_kernel_for(s.sel, kGqa, &c.spec, &out));
  tr_selector_stats st = tr_selector_get_stats(s.sel);
  CHECK(st.selections == 1);
  CHECK(st.hits == 10);
  CHECK(st.builds == 1);
  CHECK(builds() == 1);
  CHECK(error_of(tr_selector_kernel_for(s.sel, "NopeFwdInterface", &c.spec, &out)) ==
        "SelectionError: TestFwdOp has no kernel interface 'NopeFwdInterface'; its interfaces: "
        "GQADecodeDenseFwdInterface");
}

TEST_CASE("kernel_for checks the call spec as key_for does (rows 9 and 10), cache or not") {
  Sel s({gqa_decode_interface()}, {gqa_decode(), gqa_decode_bs1(), gqa_decode_long_context()}, facts_sm90);
  tr_selected out;
  Call good(attention_call(), "cuda:0", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(512)}});
  ok(tr_selector_kernel_for(s.sel, kGqa, &good.spec, &out));  // something in the cache
  Call wrong(gemm_call(), "cuda:0", {{"m", tr_value_int(1)}, {"n", tr_value_int(1)}, {"k", tr_value_int(8)}});
  for (int i = 0; i < 2; i++) {
    CHECK(error_of(tr_selector_kernel_for(s.sel, kGqa, &wrong.spec, &out)) ==
          "SelectionError: TestFwdOp: GQADecodeDenseFwdInterface takes a AttentionCall call spec, got a GemmCall");
    CHECK(out.kernel == nullptr);
  }
  const tr_call_spec_type &listy = *listy_call();
  const tr_kernel_interface &iface = *listy_interface();
  const tr_kernel_type &listy_type = *listy_kernel();
  Sel m({&iface}, {&listy_type}, facts_sm90);
  int64_t sizes[] = {1, 2};
  tr_value list;
  ok(tr_value_int_list(sizes, 2, &list));
  Call lc(&listy, "cuda:0", {{"sizes", list}});
  tr_value_clear(&list);
  for (int i = 0; i < 2; i++) {
    CHECK(error_of(tr_selector_kernel_for(m.sel, "ListyFwdInterface", &lc.spec, &out)) ==
          "SelectionError: TestFwdOp: ListyCall.sizes is mutable, so ListyCall cannot key a dispatch cache; make "
          "the field immutable");
  }
  CHECK(tr_selector_get_stats(m.sel).builds == 0);
}

TEST_CASE("the default build identity is the whole call spec: any field that differs builds again") {
  builds() = 0;
  tr_kernel_type whole = *batch_norm_infer();  // no entry_for
  REQUIRE(whole.entry_for == nullptr);
  Sel s({batch_norm_infer_interface()}, {&whole}, facts_sm90);
  tr_selected out;
  Call a(batch_norm_call(), "cuda:0", {{"n", tr_value_int(8)}, {"c", tr_value_int(64)}});
  Call a2(batch_norm_call(), "cuda:0", {{"c", tr_value_int(64)}, {"n", tr_value_int(8)}});
  Call eps(batch_norm_call(), "cuda:0", {{"n", tr_value_int(8)}, {"c", tr_value_int(64)}, {"eps", tr_value_float(1e-6)}});
  Call dev(batch_norm_call(), "cuda:1", {{"n", tr_value_int(8)}, {"c", tr_value_int(64)}});
  Call bf(batch_norm_call(), "cuda:0", {{"n", tr_value_int(8)}, {"c", tr_value_int(64)}, {"dtype", tr_value_dtype(TR_BFLOAT16)}});
  ok(tr_selector_kernel_for(s.sel, "BatchNormInferFwdInterface", &a.spec, &out));
  const tr_kernel *first = out.kernel;
  ok(tr_selector_kernel_for(s.sel, "BatchNormInferFwdInterface", &a2.spec, &out));
  CHECK(out.kernel == first);  // an equal call spec: the same kernel
  CHECK(builds() == 1);
  int expected = 1;
  for (const Call *c : {&eps, &dev, &bf}) {
    ok(tr_selector_kernel_for(s.sel, "BatchNormInferFwdInterface", &c->spec, &out));
    CHECK(out.kernel != first);
    CHECK(builds() == ++expected);
  }
  CHECK(tr_selector_get_stats(s.sel).builds == 4);
}

static tr_status *facts_by_type(void *, const tr_device *d, tr_device_facts *out) {
  // cuda: SM90; acme: a registered type of this test with no architecture (-1)
  *out = strcmp(d->type, "cuda") == 0 ? tr_device_facts{90, nullptr, 132, 232448} : tr_device_facts{-1, nullptr, 8, 0};
  return nullptr;
}

TEST_CASE("table 3: devices, supported_archs and the other defaults, stated and not") {
  static const char *acme_only[] = {"acme", nullptr};
  tr_kernel_type acme = *batch_norm_infer();  // explicit devices, no supported_archs
  acme.devices = acme_only;
  Sel s({batch_norm_infer_interface()}, {&acme}, facts_by_type);
  auto key = [&](const char *device, int32_t arch) {
    return s.key("BatchNormInferFwdInterface",
                 Call(batch_norm_call(), device, {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}}, arch));
  };
  CHECK(key("acme:0", -2) == "fwd_infer_kernel");  // facts from the device: arch -1, no list: available
  CHECK(key("acme:0", 75) == "fwd_infer_kernel");   // any architecture
  CHECK(key("cuda:0", 90) == "OpNotAvailableError: TestFwdOp's in-tree kernels do not run on cuda:0: no "
                             "implementation of BatchNormInferFwdInterface runs on device type 'cuda'");
  // the default devices: cuda only
  Sel d({batch_norm_infer_interface()}, {batch_norm_infer()}, facts_by_type);
  CHECK(d.key("BatchNormInferFwdInterface", Call(batch_norm_call(), "cuda:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}})) ==
        "fwd_infer_kernel");
  CHECK(d.key("BatchNormInferFwdInterface", Call(batch_norm_call(), "cuda:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}}, -1)) ==
        "fwd_infer_kernel");  // an unknown architecture: no supported_archs, available
  CHECK(d.key("BatchNormInferFwdInterface", Call(batch_norm_call(), "acme:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}}))
            .find("do not run on acme:0") != std::string::npos);
  // supported_archs with more than one device type: refused when the op is built
  static const char *two[] = {"cuda", "acme", nullptr};
  static const int32_t archs[] = {90};
  tr_kernel_type both = *batch_norm_infer();
  both.devices = two;
  both.supported_archs = archs;
  both.n_archs = 1;
  CHECK(new_error({batch_norm_infer_interface()}, {&both}) ==
        "SelectionError: TestFwdOp: kernel type 'fwd_infer_kernel' declares supported_archs, so it lists exactly "
        "one device type in devices");
  tr_kernel_type sm90 = *batch_norm_infer(), two_devices = *batch_norm_infer();  // archs from its base
  sm90.key = "infer_sm90";
  sm90.supported_archs = archs;
  sm90.n_archs = 1;
  two_devices.key = "infer_two";
  two_devices.devices = two;
  two_devices.base = &sm90;
  CHECK(new_error({batch_norm_infer_interface()}, {&two_devices}) ==
        "SelectionError: TestFwdOp: kernel type 'infer_two' has supported_archs (from its base 'infer_sm90'), so it "
        "lists exactly one device type in devices");
}

TEST_CASE("a type with a base inherits the devices, architectures and preferences it leaves unset") {
  // long-context states only general and preferred_over (the spec's class): SM80/89/90 are its base's
  REQUIRE(gqa_decode_long_context()->supported_archs == nullptr);
  Sel s = gqa();
  CHECK(s.key(kGqa, decode(1, 4096, 80)) == "gqa_dense_decode_long_context");
  CHECK(s.key(kGqa, decode(1, 4096, 75)).find("gqa_dense_decode_long_context: not available on arch 75 (supports "
                                                "80 89 90)") != std::string::npos);
  // a subclass of bs1 (SM90 only) stating nothing but its key: bs1's architectures and refusal
  tr_kernel_type bs1_sub = *gqa_decode_bs1();
  bs1_sub.key = "gqa_dense_decode_bs1_sub";
  bs1_sub.supported_archs = nullptr;
  bs1_sub.n_archs = 0;
  bs1_sub.refusal = nullptr;
  bs1_sub.base = gqa_decode_bs1();
  Sel sub({gqa_decode_interface()}, {gqa_decode(), &bs1_sub});
  CHECK(sub.key(kGqa, decode(1, 512, 90)) == "gqa_dense_decode_bs1_sub");
  CHECK(sub.key(kGqa, decode(1, 512, 80)) == "gqa_dense_decode");  // bs1's SM90 only, inherited
  CHECK(sub.key(kGqa, decode(2, 512, 90)) == "gqa_dense_decode");  // bs1's refusal, inherited
  // stating its own architectures overrides the base's
  static const int32_t sm80[] = {80};
  tr_kernel_type bs1_80 = bs1_sub;
  bs1_80.supported_archs = sm80;
  bs1_80.n_archs = 1;
  Sel own({gqa_decode_interface()}, {gqa_decode(), &bs1_80});
  CHECK(own.key(kGqa, decode(1, 512, 80)) == "gqa_dense_decode_bs1_sub");
  CHECK(own.key(kGqa, decode(1, 512, 90)) == "gqa_dense_decode");
  // a subclass of long-context leaving preferred_over unset still wins over bs1 in their overlap
  tr_kernel_type long_sub = *gqa_decode_long_context();
  long_sub.key = "gqa_dense_decode_long_sub";
  long_sub.preferred_over = nullptr;
  long_sub.base = gqa_decode_long_context();
  Sel pref({gqa_decode_interface()}, {gqa_decode(), gqa_decode_bs1(), &long_sub});
  CHECK(pref.key(kGqa, decode(1, 4096, 90)) == "gqa_dense_decode_long_sub");
  // devices: a base's list holds for a subclass that states none
  static const char *acme_only[] = {"acme", nullptr};
  tr_kernel_type acme_base = *batch_norm_infer();
  acme_base.devices = acme_only;
  tr_kernel_type acme_sub = *batch_norm_infer();
  acme_sub.key = "fwd_infer_acme_sub";
  acme_sub.base = &acme_base;
  Sel dev({batch_norm_infer_interface()}, {&acme_sub}, facts_by_type);
  CHECK(dev.key("BatchNormInferFwdInterface", Call(batch_norm_call(), "acme:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}})) ==
        "fwd_infer_acme_sub");
  CHECK(dev.key("BatchNormInferFwdInterface", Call(batch_norm_call(), "cuda:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}}))
            .find("do not run on cuda:0") != std::string::npos);
  // general is the type's own: a subclass of the general implementation is not general
  tr_kernel_type decode_sub = *gqa_decode_bs1();
  decode_sub.key = "gqa_dense_decode_sub";
  decode_sub.base = gqa_decode();
  decode_sub.refusal = nullptr;
  Sel gen({gqa_decode_interface()}, {gqa_decode(), &decode_sub});
  CHECK(gen.key(kGqa, decode(4, 512, 90)) == "gqa_dense_decode_sub");  // beats the general one
}

TEST_CASE("a chain of bases that comes back on itself is refused when the op is built") {
  tr_kernel_type a = *batch_norm_infer(), b = *batch_norm_infer();
  a.key = "infer_a";
  b.key = "infer_b";
  a.base = &b;
  b.base = &a;
  CHECK(new_error({batch_norm_infer_interface()}, {&a}) ==
        "SelectionError: TestFwdOp: kernel type 'infer_a': its bases form a cycle: infer_a -> infer_b -> infer_a");
  std::vector<tr_kernel_type> deep(17, *batch_norm_infer());  // a chain of 17 distinct types
  static const char *names[17] = {"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8",
                                  "d9", "d10", "d11", "d12", "d13", "d14", "d15", "d16"};
  for (size_t i = 0; i < deep.size(); i++) {
    deep[i].key = names[i];
    deep[i].base = i + 1 < deep.size() ? &deep[i + 1] : nullptr;
  }
  CHECK(new_error({batch_norm_infer_interface()}, {&deep[0]}) ==
        "SelectionError: TestFwdOp: kernel type 'd0': its bases are more than 16 deep: d0 -> d1 -> d2 -> d3 -> d4 "
        "-> d5 -> d6 -> d7 -> d8 -> d9 -> d10 -> d11 -> d12 -> d13 -> d14 -> d15 -> d16");
  deep[15].base = nullptr;  // 16 types: as deep as allowed
  Sel ok16({batch_norm_infer_interface()}, {&deep[0]});
  CHECK(ok16.key("BatchNormInferFwdInterface", Call(batch_norm_call(), "cuda:0", {{"n", tr_value_int(1)}, {"c", tr_value_int(4)}}, 90)) ==
        "d0");
  tr_kernel_type self = *batch_norm_infer();
  self.base = &self;
  CHECK(new_error({batch_norm_infer_interface()}, {&self}) ==
        "SelectionError: TestFwdOp: kernel type 'fwd_infer_kernel': its bases form a cycle: fwd_infer_kernel -> "
        "fwd_infer_kernel");
}

TEST_CASE("a general implementation's preferred_over counts only where nothing else applies") {
  // the general decode kernel claims precedence over bs1: it still ranks below it
  static const char *over_bs1[] = {"gqa_dense_decode_bs1", nullptr};
  tr_kernel_type general = *gqa_decode();
  general.preferred_over = over_bs1;
  Sel s({gqa_decode_interface()}, {&general, gqa_decode_bs1()});
  CHECK(s.key(kGqa, decode(1, 512, 90)) == "gqa_dense_decode_bs1");
  CHECK(s.key(kGqa, decode(2, 512, 90)) == "gqa_dense_decode");
  // with a third, unrelated implementation applying too, bs1 and it are ambiguous: the general
  // one's claim does not decide it
  tr_kernel_type any = *gqa_decode_bs1();
  any.key = "gqa_dense_decode_any";
  any.supported_archs = nullptr;
  any.n_archs = 0;
  any.base = nullptr;
  any.refusal = nullptr;
  Sel three({gqa_decode_interface()}, {&general, gqa_decode_bs1(), &any});
  CHECK(three.key(kGqa, decode(1, 512, 90)).find("dispatch is ambiguous") != std::string::npos);
  CHECK(three.key(kGqa, decode(1, 512, 90)).find("gqa_dense_decode_bs1, gqa_dense_decode_any all apply") !=
        std::string::npos);
}

TEST_CASE("preferred_over needs no containment: two ranges that only partly overlap") {
  // short: batch <= 4 (any KV); long: KV >= 1024 (any batch); short wins where both apply
  static const char *over_long[] = {"decode_long", nullptr};
  tr_kernel_type shortb = *gqa_decode_bs1(), longkv = *gqa_decode_bs1();
  shortb.key = "decode_short";
  shortb.supported_archs = longkv.supported_archs = nullptr;
  shortb.n_archs = longkv.n_archs = 0;
  shortb.base = longkv.base = nullptr;
  shortb.preferred_over = over_long;
  shortb.refusal = [](const tr_kernel_type *, const tr_call_spec *c, char *, size_t) -> const char * {
    return tr_call_spec_int(c, "batch") <= 4 ? nullptr : "batch over 4";
  };
  longkv.key = "decode_long";
  longkv.refusal = [](const tr_kernel_type *, const tr_call_spec *c, char *, size_t) -> const char * {
    return tr_call_spec_int(c, "seqlen_kv") >= 1024 ? nullptr : "KV under 1024";
  };
  Sel s({gqa_decode_interface()}, {gqa_decode(), &shortb, &longkv});
  CHECK(s.key(kGqa, decode(4, 1024, 90)) == "decode_short");  // both: the declared side
  CHECK(s.key(kGqa, decode(2, 512, 90)) == "decode_short");   // short alone
  CHECK(s.key(kGqa, decode(5, 1024, 90)) == "decode_long");   // long alone, past short's edge
  CHECK(s.key(kGqa, decode(5, 1023, 90)) == "gqa_dense_decode");  // neither: the general one
}

TEST_CASE("lints: interface names; an op holding kernels declares interfaces") {
  for (const char *ok_name : {"GQADecodeDenseFwdInterface", "BatchNormTrainFwdInterface", "LayerNormFwdInterface",
                              "GemmBwdInterface"}) {
    CHECK(tr_interface_name_ok(ok_name));
  }
  for (const char *bad : {"GemmInterface", "gemmFwdInterface", "Gemm_FwdInterface", "FwdInterface", "GemmFwd"}) {
    INFO(bad);
    CHECK_FALSE(tr_interface_name_ok(bad));
  }
  CHECK(error_of(tr_selector_inventory_check("GemmFwdOp", 0, 2)) ==
        "SelectionError: GemmFwdOp holds 2 kernel types but does not declare interfaces: declare interfaces");
  CHECK(tr_selector_inventory_check("AddFwdOp", 0, 0) == nullptr);
  tr_kernel_interface misnamed = *gemm_interface();
  misnamed.name = "GemmKernels";
  CHECK(new_error({&misnamed}, {}) == "SelectionError: TestFwdOp: interface name 'GemmKernels' does "
                                      "not have the form {Name}{Variant}{Fwd|Bwd}Interface");
}

TEST_CASE("call specs: defaults, typed fields, hashing, printing, bad fields named") {
  Call a(attention_call(), "cuda:0", {{"batch", tr_value_int(2)}, {"seqlen_kv", tr_value_int(10)}});
  Call b(attention_call(), "cuda:0", {{"seqlen_kv", tr_value_int(10)}, {"batch", tr_value_int(2)}});
  Call c(attention_call(), "cuda:1", {{"batch", tr_value_int(2)}, {"seqlen_kv", tr_value_int(10)}});
  CHECK(tr_call_spec_equal(&a.spec, &b.spec));
  CHECK(tr_call_spec_hash(&a.spec) == tr_call_spec_hash(&b.spec));
  CHECK_FALSE(tr_call_spec_equal(&a.spec, &c.spec));
  CHECK(tr_call_spec_hash(&a.spec) != tr_call_spec_hash(&c.spec));
  CHECK(tr_call_spec_int(&a.spec, "heads") == 32);  // a default
  tr_device d;
  ok(tr_device_parse("cuda:0", &d));
  tr_call_spec spec;
  tr_named_value missing[] = {{"batch", tr_value_int(1)}};
  CHECK(error_of(tr_call_spec_init(&spec, attention_call(), &d, missing, 1)) ==
        "ValueError: AttentionCall.seqlen_kv (int) is required");
  tr_named_value typo[] = {{"bach", tr_value_int(1)}};
  CHECK(error_of(tr_call_spec_init(&spec, attention_call(), &d, typo, 1)) == "ValueError: AttentionCall has no field 'bach'");
  tr_named_value wrong[] = {{"batch", tr_value_float(1.5)}, {"seqlen_kv", tr_value_int(1)}};
  CHECK(error_of(tr_call_spec_init(&spec, attention_call(), &d, wrong, 2)) ==
        "ValueError: AttentionCall.batch is int, got 1.5 (float)");
}

// A factory that fills in a kernel as a plugin built against an older, shorter tr_kernel would.
static int g_short_released = 0;
static tr_status *short_factory(const tr_kernel_type *, const tr_call_spec *, tr_kernel *out) {
  out->struct_size = offsetof(tr_kernel, call);  // not even `call`
  out->call = [](void *, DLTensor *const *, size_t, DLTensor *const *, size_t) -> tr_status * { return nullptr; };
  out->release = [](void *) { g_short_released++; };
  return nullptr;
}

TEST_CASE("a factory's tr_kernel shorter than version 1 is a BackendError; nothing of it is kept") {
  static tr_kernel_type t = *layer_norm();
  t.key = "short_layer_norm";
  t.factory = short_factory;
  Sel s({layer_norm_interface()}, {&t}, facts_sm90);
  Call a(layer_norm_call(), "cuda:0", {{"n", tr_value_int(4096)}});
  tr_selected out;
  CHECK(error_of(tr_selector_kernel_for(s.sel, "LayerNormFwdInterface", &a.spec, &out)) ==
        "BackendError: TestFwdOp: the factory of kernel type 'short_layer_norm' filled in a tr_kernel with "
        "struct_size " + std::to_string(offsetof(tr_kernel, call)) + ", shorter than the " +
            std::to_string(TR_KERNEL_MIN_SIZE) + " bytes of tr_kernel version 1");
  CHECK(tr_selector_get_stats(s.sel).builds == 0);
  CHECK(g_short_released == 0);  // its release is not one tilerun reads
}
