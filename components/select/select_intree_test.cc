// select_intree_test.cc: the select contract for the in-tree ops' table, in every placement:
// inline, a thread, and a `tilerun serve select` process over ipc and over tcp (told the facts of
// an SM90 card, as a select component on a machine without the GPU is). For a grid of calls at
// every implementation's boundary, the component answers the key selector/ answers directly, and
// an unserved call gets selector/'s own refusal, reasons and all; the select client answers the
// same.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "components/pipeline/pipeline_testing.h"
#include "components/select/select.h"
#include "components/select/select_client.h"
#include "components/select/select_testing.h"

using namespace tr_test;

namespace {

using Case = IntreeCall;

// Calls made by each family from input specs and params, as the runtime makes them.
std::vector<Case> grid() {
  std::vector<Case> cases;
  for (const char *norm : {"RMSNormFwdOp", "LayerNormFwdOp"}) {
    for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32}) {
      for (int64_t row : {1, 3, 1024, 1025, 4096, 32768, 65536}) {
        tr_value shape;
        ok(tr_value_int_list(&row, 1, &shape));
        cases.push_back(intree_call(norm, {cuda_spec(dt, {7, row}), cuda_spec(dt, {row})}, {{"normalized_shape", shape}}));
        tr_value_clear(&shape);
      }
    }
  }
  for (tr_dtype out : {TR_FLOAT16, TR_FLOAT32, TR_FLOAT64}) {
    for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{4, 1000}, {4, 1025}, {2, 40000}, {4, 8, 3}}) {
      cases.push_back(intree_call("SoftmaxFwdOp", {cuda_spec(TR_BFLOAT16, shape)},
                                  {{"dim", tr_value_int(1)}, {"dtype", tr_value_dtype(out)}}));
    }
  }
  for (tr_dtype dt : {TR_FLOAT16, TR_INT32, TR_INT64, TR_FLOAT64}) {
    cases.push_back(intree_call("AddFwdOp", {cuda_spec(dt, {3, 5}), cuda_spec(dt, {3, 5})}, {{"alpha", tr_value_float(2.0)}}));
  }
  return cases;
}

std::string answer(Placed &p, const Case &c) {
  uint8_t request[4096];
  size_t n = 0;
  ok(tr_select_encode(c.op.c_str(), c.iface.c_str(), &c.call, request, sizeof(request), &n));
  std::string reply;
  tr_status *s = p.raw_call(std::vector<uint8_t>(request, request + n), &reply);
  char key[64];
  if (s == nullptr) s = tr_select_decode((const uint8_t *)reply.data(), reply.size(), key);
  return s ? error_of(s) : std::string(key);
}

// The same through the client: a call spec in, the key out.
std::string via_client(Placed &p, const Case &c) {
  tr_select_request req = {c.op.c_str(), c.iface.c_str(), &c.call};
  tr_selected_key out;
  tr_status *s = tr_select_call(p.pipeline, &req, &out);
  return s ? error_of(s) : std::string(out.key);
}

std::string direct(const IntreeTable &t, const Case &c) {
  const char *key = nullptr;
  tr_status *s = tr_selector_key_for(t.selector(c.op.c_str()), c.iface.c_str(), &c.call, &key);
  return s ? error_of(s) : std::string(key);
}

}  // namespace

TEST_CASE("the in-tree select table answers as selector/ does, in every placement") {
  IntreeTable t;
  std::vector<Case> cases = grid();
  REQUIRE(cases.size() == 2 * 3 * 7 + 3 * 4 + 4);
  for (Where where : every_placement()) {
    Placed p(TR_COMPONENT_SELECT, where, tr_select_handle, t.table, 5000,
             {"--device-facts", "cuda:0=90,132,232448"});
    size_t refused = 0;
    for (const Case &c : cases) {
      std::string want = direct(t, c), got = answer(p, c);
      INFO(where_name(where) << ": " << c.op << " " << c.iface);
      CHECK(got == want);
      CHECK(via_client(p, c) == want);
      refused += want.find("no implementation serves this call") != std::string::npos;
    }
    CHECK(refused == 4);  // softmax into float64: every implementation says why
  }
  for (Case &c : cases) tr_call_spec_clear(&c.call);
}
