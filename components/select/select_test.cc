// select_test.cc: the select component's contract in the in-process placements (inline and a
// thread): every key and every error the handler answers is the one selector/ answers directly
// for the same call, and a request that does not decode is a transport error. The selectors are
// the kernel-selection spec's worked examples (selector_testing.h); device facts come from the
// device, as they do on the hot path: cuda:0 is an SM90 card, cuda:1 an SM80 one.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "components/pipeline/pipeline_testing.h"
#include "components/select/select.h"
#include "proto/codec.h"
#include "selector/selector_testing.h"

using namespace tr_test;

static tr_status *two_cards(void *, const tr_device *d, tr_device_facts *out) {
  *out = tr_device_facts{std::string(d->type) != "cuda" ? -1 : d->index == 0 ? 90 : 80, nullptr, 132, 232448};
  return nullptr;
}

// Two ops: GQA decode (three implementations) and BatchNorm (two interfaces).
struct Table {
  tr_selector *gqa = nullptr, *bn = nullptr;
  const tr_kernel_interface *gqa_ifaces[1] = {gqa_decode_interface()};
  const tr_kernel_interface *bn_ifaces[2] = {batch_norm_train_interface(), batch_norm_infer_interface()};
  tr_select_entry entries[2];
  tr_select_table table{};
  Table() {
    const tr_kernel_type *gqa_types[] = {gqa_decode(), gqa_decode_bs1(), gqa_decode_long_context()};
    ok(tr_selector_new("GQADecodeFwdOp", gqa_ifaces, 1, gqa_types, 3, two_cards, nullptr, &gqa));
    const tr_kernel_type *bn_types[] = {batch_norm_train(), batch_norm_train_whole(), batch_norm_infer()};
    ok(tr_selector_new("BatchNormFwdOp", bn_ifaces, 2, bn_types, 3, two_cards, nullptr, &bn));
    entries[0] = {"GQADecodeFwdOp", gqa, 1, gqa_ifaces};
    entries[1] = {"BatchNormFwdOp", bn, 2, bn_ifaces};
    table = {2, entries, nullptr};
  }
  ~Table() {
    tr_selector_destroy(&gqa);
    tr_selector_destroy(&bn);
  }
};

static std::string over_wire(Placed &p, const std::vector<uint8_t> &request) {
  std::string reply;
  tr_status *s = p.raw_call(request, &reply);
  char key[64];
  if (s == nullptr) s = tr_select_decode((const uint8_t *)reply.data(), reply.size(), key);
  return s ? error_of(s) : std::string(key);
}

static std::string via_component(Placed &p, const char *op, const char *iface, const Call &call) {
  uint8_t request[2048];
  size_t n = 0;
  ok(tr_select_encode(op, iface, &call.spec, request, sizeof(request), &n));
  return over_wire(p, std::vector<uint8_t>(request, request + n));
}

static std::string direct(tr_selector *sel, const char *iface, const Call &call) {
  const char *key = nullptr;
  tr_status *s = tr_selector_key_for(sel, iface, &call.spec, &key);
  return s ? error_of(s) : std::string(key);
}

static const char *kGqa = "GQADecodeDenseFwdInterface";

static std::vector<Where> in_process() { return {Where::kInline, Where::kThread}; }

TEST_CASE("the select contract: the component answers the key selector/ answers, for every call") {
  Table t;
  for (Where where : in_process()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_SELECT, where, tr_select_handle, &t.table);
    // The spec's table 2 through the component, with the facts derived from each card.
    CHECK(via_component(p, "GQADecodeFwdOp", kGqa, Call(attention_call(), "cuda:0", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(4096)}})) ==
          "gqa_dense_decode_long_context");
    CHECK(via_component(p, "GQADecodeFwdOp", kGqa, Call(attention_call(), "cuda:0", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(512)}})) ==
          "gqa_dense_decode_bs1");
    CHECK(via_component(p, "GQADecodeFwdOp", kGqa, Call(attention_call(), "cuda:1", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(512)}})) ==
          "gqa_dense_decode");
    // A grid over both cards, every range and boundary, keys and errors alike (batch 0 and
    // seqlen_kv 0 serve nobody; a cpu device is not available to in-tree kernels).
    int compared = 0;
    for (const char *device : {"cuda:0", "cuda:1", "cpu"}) {
      for (int64_t batch : {0, 1, 2, 64}) {
        for (int64_t kv : {0, 1, 511, 512, 4095, 4096, 1 << 20}) {
          for (bool fuse_rope : {false, true}) {
            Call call(attention_call(), device, {{"batch", tr_value_int(batch)}, {"seqlen_kv", tr_value_int(kv)},
                                                 {"fuse_rope", tr_value_bool(fuse_rope)}});
            INFO(device << " batch " << batch << " seqlen_kv " << kv);
            CHECK(via_component(p, "GQADecodeFwdOp", kGqa, call) == direct(t.gqa, kGqa, call));
            compared++;
          }
        }
      }
    }
    CHECK(compared == 3 * 4 * 7 * 2);
    // Two interfaces of one op: each request reaches the one it names.
    for (int64_t n : {8, 4096, 4097}) {
      Call bn(batch_norm_call(), "cuda:0", {{"n", tr_value_int(n)}, {"c", tr_value_int(64)}});
      for (const tr_kernel_interface *iface : t.bn_ifaces) {
        CHECK(via_component(p, "BatchNormFwdOp", iface->name, bn) == direct(t.bn, iface->name, bn));
      }
    }
    Call small(batch_norm_call(), "cuda:0", {{"n", tr_value_int(8)}, {"c", tr_value_int(64)}});
    CHECK(via_component(p, "BatchNormFwdOp", "BatchNormTrainFwdInterface", small) == "fwd_train_whole");
    CHECK(via_component(p, "BatchNormFwdOp", "BatchNormInferFwdInterface", small) == "fwd_infer_kernel");
  }
}

// A request built field by field, as another process might send it.
static std::vector<uint8_t> raw_request(const char *op, const char *iface, const char *call_type, const char *device,
                                        std::vector<std::pair<const char *, int64_t>> fields) {
  tilerun_SelectRequest rq = tilerun_SelectRequest_init_zero;
  snprintf(rq.op, sizeof(rq.op), "%s", op);
  snprintf(rq.interface, sizeof(rq.interface), "%s", iface);
  snprintf(rq.call_type, sizeof(rq.call_type), "%s", call_type);
  snprintf(rq.device, sizeof(rq.device), "%s", device);
  for (auto &f : fields) {
    tilerun_NamedValue &v = rq.fields[rq.fields_count++];
    snprintf(v.name, sizeof(v.name), "%s", f.first);
    v.has_value = true;
    tr_value value = tr_value_int(f.second);
    ok(tr_codec_value_to(&value, &v.value));
  }
  uint8_t buf[2048];
  size_t n = 0;
  ok(tr_codec_encode(tilerun_SelectRequest_fields, &rq, buf, sizeof(buf), &n, "a SelectRequest"));
  return std::vector<uint8_t>(buf, buf + n);
}

TEST_CASE("the select contract: each bad request is answered with an error naming what was wrong") {
  Table t;
  for (Where where : in_process()) {
    INFO(where_name(where));
    Placed p(TR_COMPONENT_SELECT, where, tr_select_handle, &t.table);
    std::vector<std::pair<const char *, int64_t>> ok_fields = {{"batch", 1}, {"seqlen_kv", 512}};
    CHECK(over_wire(p, raw_request("NoSuchOp", kGqa, "AttentionCall", "cuda:0", ok_fields)) ==
          "OpNotAvailableError: no in-tree kernels are registered for op 'NoSuchOp'");
    CHECK(over_wire(p, raw_request("GQADecodeFwdOp", "NoInterface", "AttentionCall", "cuda:0", ok_fields)) ==
          "SelectionError: GQADecodeFwdOp: no kernel interface 'NoInterface'");
    // The same words as the selector's own row-9 check.
    Call bn(batch_norm_call(), "cuda:0", {{"n", tr_value_int(8)}, {"c", tr_value_int(64)}});
    CHECK(via_component(p, "GQADecodeFwdOp", kGqa, bn) == direct(t.gqa, kGqa, bn));
    CHECK(direct(t.gqa, kGqa, bn) ==
          "SelectionError: GQADecodeFwdOp: GQADecodeDenseFwdInterface takes a AttentionCall call spec, got a BatchNormCall");
    // Fields: an unknown one and a missing one are what tr_call_spec_init says, word for word.
    tr_device cuda0;
    ok(tr_device_parse("cuda:0", &cuda0));
    tr_call_spec scratch;
    tr_named_value unknown[] = {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(512)}, {"bogus", tr_value_int(3)}};
    std::string unknown_error = error_of(tr_call_spec_init(&scratch, attention_call(), &cuda0, unknown, 3));
    CHECK(unknown_error.find("bogus") != std::string::npos);
    CHECK(over_wire(p, raw_request("GQADecodeFwdOp", kGqa, "AttentionCall", "cuda:0",
                                   {{"batch", 1}, {"seqlen_kv", 512}, {"bogus", 3}})) == unknown_error);
    tr_named_value missing[] = {{"batch", tr_value_int(1)}};
    std::string missing_error = error_of(tr_call_spec_init(&scratch, attention_call(), &cuda0, missing, 1));
    CHECK(missing_error.find("seqlen_kv") != std::string::npos);
    CHECK(over_wire(p, raw_request("GQADecodeFwdOp", kGqa, "AttentionCall", "cuda:0", {{"batch", 1}})) == missing_error);
    // A device that does not parse.
    tr_device bad;
    std::string device_error = error_of(tr_device_parse("cuda:x", &bad));
    CHECK(over_wire(p, raw_request("GQADecodeFwdOp", kGqa, "AttentionCall", "cuda:x", ok_fields)) == device_error);
    // After every error the component still answers.
    CHECK(over_wire(p, raw_request("GQADecodeFwdOp", kGqa, "AttentionCall", "cuda:0", ok_fields)) ==
          "gqa_dense_decode_bs1");
  }
}

TEST_CASE("the select handler: bytes that are not a SelectRequest are a transport error") {
  Table t;
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
  uint8_t reply[256];
  size_t n = 0;
  std::string e = error_of(tr_select_handle(&t.table, junk, sizeof(junk), reply, sizeof(reply), &n));
  CHECK(e.rfind("TransportError: ", 0) == 0);
  CHECK(e.find("SelectRequest") != std::string::npos);
  // And a reply too small for the answer is an error, not an overrun.
  std::vector<uint8_t> good = raw_request("GQADecodeFwdOp", kGqa, "AttentionCall", "cuda:0", {{"batch", 1}, {"seqlen_kv", 512}});
  CHECK_FALSE(error_of(tr_select_handle(&t.table, good.data(), good.size(), reply, 4, &n)).empty());
}

// What the runtime does with a key select answered for a plugin's kernel type: the selector
// builds that key's kernel (once per build identity) without selecting again.
TEST_CASE("a key select answered builds through the selector without a second selection") {
  Table t;
  Call call(attention_call(), "cuda:0", {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(512)}});
  int before = builds();
  tr_selected got;
  ok(tr_selector_kernel_of(t.gqa, kGqa, "gqa_dense_decode_bs1", &call.spec, &got));
  CHECK(std::string(got.key) == "gqa_dense_decode_bs1");
  REQUIRE(got.kernel != nullptr);
  CHECK(builds() == before + 1);
  tr_selected again;
  ok(tr_selector_kernel_of(t.gqa, kGqa, "gqa_dense_decode_bs1", &call.spec, &again));
  CHECK(again.kernel == got.kernel);  // the same build identity: built once
  CHECK(builds() == before + 1);
  CHECK(tr_selector_get_stats(t.gqa).selections == 0);  // nothing was selected
  tr_selected chosen;
  ok(tr_selector_kernel_for(t.gqa, kGqa, &call.spec, &chosen));  // kernel_for shares the builds
  CHECK(chosen.kernel == got.kernel);
  CHECK(builds() == before + 1);
  CHECK(error_of(tr_selector_kernel_of(t.gqa, kGqa, "gqa_fast", &call.spec, &got)) ==
        "SelectionError: GQADecodeFwdOp: GQADecodeDenseFwdInterface has no implementation 'gqa_fast'");
  CHECK(got.kernel == nullptr);
}
