// select_testing.h: the in-tree ops' select table for contract tests (select and build), its
// devices' facts those of an SM90 card.
#ifndef TILERUN_COMPONENTS_SELECT_TESTING_H_
#define TILERUN_COMPONENTS_SELECT_TESTING_H_

#include <string>
#include <vector>

#include "components/select/intree_table.h"
#include "core/test_support.h"
#include "kernels/intree/intree.h"

namespace tr_test {

inline tr_status *sm90_facts(void *, const tr_device *d, tr_device_facts *out) {
  *out = tr_device_facts{std::string(d->type) == "cuda" ? 90 : -1, nullptr, 132, 232448};
  return nullptr;
}

struct IntreeTable {
  tr_select_table *table = nullptr;
  IntreeTable() { ok(tr_select_table_new_intree(nullptr, sm90_facts, nullptr, &table)); }
  ~IntreeTable() { tr_select_table_destroy(&table); }
  tr_selector *selector(const char *op) const {
    for (size_t i = 0; i < table->n_entries; i++) {
      if (std::string(table->entries[i].op) == op) return table->entries[i].selector;
    }
    return nullptr;
  }
};

inline tr_tensor_spec cuda_spec(tr_dtype dt, std::vector<int64_t> shape) {
  tr_tensor_spec s{};
  s.device = {"cuda", 0};
  s.dtype = dt;
  s.rank = (int32_t)shape.size();
  for (size_t i = 0; i < shape.size(); i++) s.shape[i] = shape[i];
  return s;
}

// A call as the runtime makes it: the family's call spec from input specs and params.
struct IntreeCall {
  std::string op, iface;
  tr_call_spec call;
};

inline IntreeCall intree_call(const char *name, std::vector<tr_tensor_spec> specs, std::vector<tr_named_value> params) {
  const tr_intree_op *op = tr_intree_find(name);
  std::vector<const tr_tensor_spec *> ptrs;
  for (auto &s : specs) ptrs.push_back(&s);
  IntreeCall c;
  c.op = name;
  const char *iface = nullptr;
  tr_device dev = {"cuda", 0};
  ok(op->call_spec(ptrs.data(), ptrs.size(), params.data(), params.size(), &dev, &iface, &c.call));
  c.iface = iface;
  return c;
}

}  // namespace tr_test

#endif  // TILERUN_COMPONENTS_SELECT_TESTING_H_
