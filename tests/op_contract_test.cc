// op_contract_test.cc: what the caller's API promises beyond a call: op.kernel_config() is the
// first non-empty config in build order; "no implementation serves this call" is a ValueError;
// the public entry points given NULL return a ValueError naming the argument (or the neutral
// value their header documents), never crash.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "platform/test_support.h"
#include "runtime/runtime_testing.h"

using tr_test::HostTensor;
using tr_test::Outputs;

// ---- kernel_config in build order ----

// A kernel whose config is {k: rows} for the rows of the call it was built for; none for 0 rows
// given as one row (an empty config).
struct ConfigKernel {
  tr_named_value value;
  int empty;
};

static tr_status *noop_call(void *, DLTensor *const *, size_t, DLTensor *const *, size_t) { return nullptr; }

static size_t config_kernel(void *self, const tr_named_value **out) {
  auto *k = static_cast<ConfigKernel *>(self);
  *out = k->empty ? nullptr : &k->value;
  return k->empty ? 0 : 1;
}

static void release_kernel(void *self) { delete static_cast<ConfigKernel *>(self); }

static tr_status *build_config(void *, const tr_build_request *req, tr_kernel *out) {
  int64_t rows = req->inputs[0]->shape[0];
  out->self = new ConfigKernel{{"k", tr_value_int(rows)}, rows == 1};
  out->call = noop_call;
  out->config = config_kernel;
  out->release = release_kernel;
  return nullptr;
}

static tr_status *claim_cpu(void *, const tr_device *d, int *claims) {
  *claims = std::string(d->type) == "cpu";
  return nullptr;
}

static tr_status *init_config(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "configcpu", claim_cpu, nullptr));
  return api->register_kernel_builder(api->host, "AddFwdOp", "configcpu", build_config, nullptr);
}

// The op's config after building for each row count in `order`, in that order.
static int64_t first_config(tr_runtime *rt, const std::vector<int64_t> &order) {
  tr_op *op = nullptr;
  tr_test::ok(tr_op_new(rt, "AddFwdOp", nullptr, 0, nullptr, &op));
  for (int64_t rows : order) {
    HostTensor a({rows, 2}), b({rows, 2});
    const DLTensor *in[] = {&a.t, &b.t};
    Outputs out;
    tr_test::ok(tr_op_call(op, in, 2, out.items, 1));
  }
  REQUIRE(tr_op_memo_count(op) == order.size());
  const tr_named_value *values = nullptr;
  size_t n = tr_op_kernel_config(op, &values);
  int64_t got = n == 1 && std::string(values[0].name) == "k" ? values[0].value.as.i : -1;
  tr_op_destroy(&op);
  return got;
}

TEST_CASE("kernel_config is the first non-empty config in build order, not the memo's order") {
  tr_runtime *rt = tr_test::runtime_with_builtin("configcpu", init_config);
  std::vector<int64_t> up, down;
  for (int64_t r = 2; r <= 17; r++) up.push_back(r);
  for (int64_t r = 17; r >= 2; r--) down.push_back(r);
  CHECK(first_config(rt, up) == 2);
  CHECK(first_config(rt, down) == 17);
  CHECK(first_config(rt, {1, 5, 3}) == 5);  // the kernel built first has an empty config: the next
  CHECK(first_config(rt, {3, 1, 5}) == 3);
  tr_runtime_destroy(&rt);
}
