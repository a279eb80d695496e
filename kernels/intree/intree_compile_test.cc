// intree_compile_test.cc: NVRTC compiles every specialisation of the in-tree kernels that the
// GPU tests and benchmarks use (python/tests/test_ops_gpu.py, tools' bench of the workload
// rows), for sm_90a and sm_80, with no GPU: a kernel that does not compile fails here, in CI,
// before any GPU machine sees it. Sharded (each shard compiles every n-th specialisation).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/test_support.h"
#include "kernels/artifact.h"
#include "kernels/intree/intree.h"
#include "platform/platform.h"

namespace {

struct Case {
  const tr_kernel_type *type;
  tr_call_spec call;
};

const tr_kernel_type *type_of(const tr_intree_op *op, const char *key) {
  for (size_t i = 0; i < op->n_types; i++) {
    if (std::string(op->types[i]->key) == key) return op->types[i];
  }
  return nullptr;
}

const char *row_impl(int64_t row) { return row <= 1024 ? "warp" : row <= 32768 ? "block" : "looped"; }

void add(std::vector<Case> &cases, const tr_intree_op *op, const std::string &key, const tr_call_spec_type *,
         std::vector<tr_named_value> values) {
  Case c;
  c.type = type_of(op, key.c_str());
  REQUIRE(c.type != nullptr);
  tr_device dev = {"cuda", 0};
  tr_status *status = tr_call_spec_init(&c.call, c.type->interface->request, &dev, values.data(), values.size());
  REQUIRE(status == nullptr);
  cases.push_back(c);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int64_t rows[] = {1, 3, 64, 1000, 4095, 4096, 65536, 2048, 8192, 16384, 128256, 20000, 40000, 40001, 100003};
  const tr_dtype floats[] = {TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32};
  for (const char *name : {"RMSNormFwdOp", "LayerNormFwdOp"}) {
    const tr_intree_op *op = tr_intree_find(name);
    std::string prefix = std::string(name) == "RMSNormFwdOp" ? "rms_norm_" : "layer_norm_";
    for (tr_dtype dt : floats) {
      for (int64_t row : rows) {
        for (int flags = 0; flags < 4; flags++) {
          bool w = flags & 1, b = flags & 2;
          if (prefix == "rms_norm_" && b) continue;
          add(cases, op, prefix + (row <= 1024 ? "warp" : "looped"), nullptr,
              {{"dtype", tr_value_dtype(dt)}, {"row", tr_value_int(row)}, {"weight", tr_value_bool(w)},
               {"bias", tr_value_bool(b)}});
        }
      }
    }
  }
  const tr_intree_op *softmax = tr_intree_find("SoftmaxFwdOp");
  for (tr_dtype dt : floats) {
    for (tr_dtype out : floats) {
      for (int64_t row : rows) {
        add(cases, softmax, std::string("softmax_") + row_impl(row), nullptr,
            {{"dtype", tr_value_dtype(dt)}, {"out_dtype", tr_value_dtype(out)}, {"row", tr_value_int(row)}});
      }
      add(cases, softmax, "softmax_strided", nullptr,
          {{"dtype", tr_value_dtype(dt)}, {"out_dtype", tr_value_dtype(out)}, {"row", tr_value_int(8)},
           {"inner", tr_value_int(3)}});
    }
  }
  const tr_intree_op *addop = tr_intree_find("AddFwdOp");
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32, TR_FLOAT64, TR_INT32, TR_INT64}) {
    add(cases, addop, "add_elementwise", nullptr, {{"dtype", tr_value_dtype(dt)}});
  }
  // the skinny GEMM: x of 1 to 64 rows (decode batches 1, 16, 64 and odd counts; 8 and 9 either
  // side of two tiles a warp), the workload rows' k, x K-contiguous
  // (trans_b) and K-strided (trans_a too; n small with b [k, n])
  const tr_intree_op *gemm = tr_intree_find("GemmFwdOp");
  struct G {
    int64_t m, n, k;
    bool ta, tb;
  };
  const G shapes[] = {{1, 4096, 4096, false, true},   {16, 4096, 4096, false, true},  {64, 14336, 4096, false, true},
                      {1, 4096, 14336, false, true},  {3, 127, 64, false, true},      {3, 4096, 64, true, true},
                      {4096, 3, 64, false, false},    {127, 64, 4096, false, true},   {1, 1, 8, false, true},
                      {9, 4096, 4096, false, true},   {64, 4096, 72, true, true},    {8, 4096, 4096, false, true},
                      // the wgmma build (sm_90a's split build for x K-contiguous, from one row): m = 9,
                      // 16, 33, 64, k below a 64-wide tile, not a multiple of it, long; weights of at
                      // most 8192 rows (64-row tiles) and more (128-row tiles); the swapped build (x of
                      // more than 32 rows on more than 8192 rows of w: 112, 80, 256 and 72 rows a CTA,
                      // in n64 parts and a narrower one, x padded to 64 rows)
                      {33, 4096, 4096, false, true},  {9, 100, 8, false, true},      {16, 100, 200, false, true},
                      {64, 4096, 14336, false, true}, {300, 33, 4104, false, true},  {40, 10000, 4096, false, true},
                      {33, 40000, 64, false, true},   {64, 9000, 72, false, true},   {16, 14336, 4096, false, true}};
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16}) {
    for (const G &g : shapes) {
      add(cases, gemm, "gemm_skinny", nullptr,
          {{"dtype", tr_value_dtype(dt)}, {"trans_a", tr_value_bool(g.ta)}, {"trans_b", tr_value_bool(g.tb)},
           {"m", tr_value_int(g.m)}, {"n", tr_value_int(g.n)}, {"k", tr_value_int(g.k)}});
    }
  }
  // RoPE: both rotations, every float dtype and position dtype, head dims with 16-byte chunks
  // (64, 128), a half of one element (2) and a half no 16-byte chunk divides (6)
  const tr_intree_op *rope = tr_intree_find("RoPEFwdOp");
  for (tr_dtype dt : floats) {
    for (tr_dtype pos : {TR_INT32, TR_INT64}) {
      for (int64_t dim : {2, 6, 64, 128}) {
        for (bool neox : {true, false}) {
          add(cases, rope, neox ? "rope_neox" : "rope_interleaved", nullptr,
              {{"dtype", tr_value_dtype(dt)}, {"pos_dtype", tr_value_dtype(pos)}, {"head_dim", tr_value_int(dim)},
               {"is_neox", tr_value_bool(neox)}});
        }
      }
    }
  }
  // GQA decode: both dtypes and head dims, query heads a KV head 1, 4, 6, 8 (one tile of 16), 32
  // (two tiles), for the general and the batch-1 (bulk-copy) implementations; the long-context
  // one in its range (float16, heads 32/4, dim 128)
  const tr_intree_op *gqa = tr_intree_find("GQADecodeFwdOp");
  for (const char *key : {"gqa_dense_decode", "gqa_dense_decode_bs1"}) {
    for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16}) {
      for (int64_t dim : {64, 128}) {
        for (int64_t gq : {1, 4, 6, 8, 32}) {
          add(cases, gqa, key, nullptr,
              {{"dtype", tr_value_dtype(dt)}, {"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(4096)},
               {"heads", tr_value_int(8 * gq)}, {"heads_kv", tr_value_int(8)}, {"dim", tr_value_int(dim)},
               {"softcap", tr_value_float(0.0)}, {"scale", tr_value_float(0.125)}});
        }
      }
    }
  }
  add(cases, gqa, "gqa_dense_decode_long_context", nullptr,
      {{"dtype", tr_value_dtype(TR_FLOAT16)}, {"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(4096)},
       {"heads", tr_value_int(32)}, {"heads_kv", tr_value_int(4)}, {"dim", tr_value_int(128)},
       {"softcap", tr_value_float(0.0)}, {"scale", tr_value_float(0.125)}});
  // GQA prefill: both dtypes and head dims (the group size is a launch value: one build serves
  // every ratio, so one is compiled)
  const tr_intree_op *prefill = tr_intree_find("GQAPrefillFwdOp");
  for (tr_dtype dt : {TR_FLOAT16, TR_BFLOAT16}) {
    for (int64_t dim : {64, 128}) {
      for (const char *impl : {"gqa_prefill_flash", "gqa_prefill_wgmma"}) {
        add(cases, prefill, impl, nullptr,
            {{"dtype", tr_value_dtype(dt)}, {"heads", tr_value_int(32)}, {"heads_kv", tr_value_int(8)},
             {"dim", tr_value_int(dim)}, {"scale", tr_value_float(1.0 / 8.0)}});
      }
    }
  }
  return cases;
}

// The arch number of an NVRTC architecture name ("sm_90a" 90, "sm_80" 80).
int32_t arch_number_of(const char *arch) { return std::string(arch) == "sm_80" ? 80 : 90; }

// 1 when `type` is available on `arch` (its supported architectures list it, or it has none).
bool supports(const tr_kernel_type *type, int32_t arch) {
  if (type->supported_archs == nullptr) return true;
  for (size_t i = 0; i < type->n_archs; i++) {
    if (type->supported_archs[i] == arch) return true;
  }
  return false;
}

// Whether this is the first of the test's shards (or it is not sharded): the cases that check
// every specialisation once run there only.
bool in_first_shard() {
  const char *i = getenv("TEST_SHARD_INDEX");
  return i == nullptr || atol(i) == 0;
}

}  // namespace

TEST_CASE("every specialisation the GPU tests and benchmarks use compiles for sm_90a and sm_80, where available") {
  std::vector<Case> cases = all_cases();
  long shards = 1, shard = 0;
  if (const char *n = getenv("TEST_TOTAL_SHARDS")) shards = atol(n);
  if (const char *i = getenv("TEST_SHARD_INDEX")) shard = atol(i);
  if (const char *f = getenv("TEST_SHARD_STATUS_FILE")) {  // tell bazel this test shards
    FILE *fp = fopen(f, "w");
    if (fp) fclose(fp);
  }
  size_t compiled = 0;
  for (size_t i = 0; i < cases.size(); i++) {
    if ((long)(i % shards) != shard) continue;
    for (const char *arch : {"sm_90a", "sm_80"}) {
      const int32_t arch_number = arch_number_of(arch);
      if (!supports(cases[i].type, arch_number)) continue;  // gqa_dense_decode_bs1: sm_90 only
      tr_intree_source src;  // the source for this arch (long-context's may differ on sm_90a)
      REQUIRE(tr_intree_source_for(cases[i].type, &cases[i].call, arch_number, &src) == nullptr);
      // the wide build (looped norms: more threads; long softmax rows on sm_90: split over a
      // cluster) where the source has one for this arch
      std::vector<tr_intree_source> builds = {src};
      if (tr_intree_has_wide(&src, arch_number)) {
        tr_intree_source wide;
        tr_intree_wide_source(&src, &wide);
        builds.push_back(wide);
      }
      for (tr_intree_source &b : builds) {
        for (size_t k = 0; k < b.n_options; k++) b.options[k] = b.option_text[k];
      }
      for (const tr_intree_source &b : builds) {
        tr_artifact_source as = {b.name, b.source, arch, b.options, b.n_options, b.entry};
        tr_artifact art;
        tr_status *status = tr_artifact_build(&as, nullptr, &art, nullptr, nullptr);
        std::string opts;
        for (size_t k = 0; k < b.n_options; k++) opts += std::string(" ") + b.options[k];
        INFO(b.name << " " << arch << opts << ": " << (status ? tr_status_message(status) : "ok"));
        CHECK(status == nullptr);
        CHECK(art.size > 0);
        tr_status_destroy(&status);
        tr_artifact_clear(&art);
        compiled++;
      }
    }
  }
  for (Case &c : cases) tr_call_spec_clear(&c.call);
  CHECK(compiled > 0);
  WARN("compiled " << compiled << " specialisations (shard " << shard << " of " << shards << ", "
                   << cases.size() << " in all)");
}

namespace {

// The options (as one string) and the cubin of `c`'s main build for `arch`.
std::pair<std::string, std::vector<uint8_t>> build_of(const Case &c, const char *arch) {
  tr_intree_source src;
  REQUIRE(tr_intree_source_for(c.type, &c.call, arch_number_of(arch), &src) == nullptr);
  for (size_t k = 0; k < src.n_options; k++) src.options[k] = src.option_text[k];
  std::string opts;
  for (size_t k = 0; k < src.n_options; k++) opts += std::string(" ") + src.options[k];
  tr_artifact_source as = {src.name, src.source, arch, src.options, src.n_options, src.entry};
  tr_artifact art;
  tr_status *status = tr_artifact_build(&as, nullptr, &art, nullptr, nullptr);
  INFO(src.name << " " << arch << opts << ": " << (status ? tr_status_message(status) : "ok"));
  REQUIRE(status == nullptr);
  std::vector<uint8_t> bytes(art.cubin, art.cubin + art.size);
  tr_artifact_clear(&art);
  return {opts, bytes};
}

void set_keep(const char *value) {
  tr_status *status = tr_plat_setenv("TILERUN_CUDA_L2_KEEP", value);
  REQUIRE(status == nullptr);
}

}  // namespace

TEST_CASE("TILERUN_CUDA_L2_KEEP=0 changes LayerNorm's many-row build with weight and bias, and no other") {
  if (!in_first_shard()) return;  // compiles: in one shard only
  std::vector<Case> cases;
  const tr_intree_op *ln = tr_intree_find("LayerNormFwdOp"), *rms = tr_intree_find("RMSNormFwdOp");
  auto spec = [](int64_t row, bool w, bool b) {
    return std::vector<tr_named_value>{{"dtype", tr_value_dtype(TR_BFLOAT16)}, {"row", tr_value_int(row)},
                                       {"weight", tr_value_bool(w)}, {"bias", tr_value_bool(b)}};
  };
  add(cases, ln, "layer_norm_looped", nullptr, spec(8192, true, true));  // the one it changes
  add(cases, ln, "layer_norm_looped", nullptr, spec(8192, true, false));
  add(cases, ln, "layer_norm_warp", nullptr, spec(1000, true, true));
  add(cases, rms, "rms_norm_looped", nullptr, spec(8192, true, false));
  for (const char *arch : {"sm_90a", "sm_80"}) {
    set_keep(nullptr);
    auto kept = build_of(cases[0], arch);
    set_keep("1");
    auto one = build_of(cases[0], arch);
    set_keep("0");
    auto off = build_of(cases[0], arch);
    INFO(arch << ": default" << kept.first << "; =0" << off.first);
    CHECK(kept.first.find("TR_KEEP_WB") == std::string::npos);
    CHECK(off.first.find(" -DTR_KEEP_WB=0") != std::string::npos);
    CHECK(one.first == kept.first);
    const bool one_same = one.second == kept.second, off_differs = off.second != kept.second;
    CHECK(one_same);
    CHECK(off_differs);  // the loads differ
  }
  for (size_t i = 1; i < cases.size(); i++) {
    tr_intree_source a, b;
    set_keep(nullptr);
    REQUIRE(tr_intree_source_for(cases[i].type, &cases[i].call, 90, &a) == nullptr);
    set_keep("0");
    REQUIRE(tr_intree_source_for(cases[i].type, &cases[i].call, 90, &b) == nullptr);
    INFO(cases[i].type->key);
    REQUIRE(a.n_options == b.n_options);
    for (size_t k = 0; k < a.n_options; k++) CHECK(std::string(a.option_text[k]) == b.option_text[k]);
  }
  set_keep(nullptr);
  for (Case &c : cases) tr_call_spec_clear(&c.call);
}

// A wide build is its narrow build with more threads (and -DTR_SPLIT, and no register cap): every
// other option stays, wherever the family put its -DTR_BLOCK= (the bulk GQA decode build adds one
// after it, which the cluster build once lost). Checked on every case without compiling.
TEST_CASE("a wide build keeps every option of its narrow build but the block's threads") {
  if (!in_first_shard()) return;
  std::vector<Case> cases = all_cases();
  size_t wide_builds = 0, bs1_wide = 0;
  for (Case &c : cases) {
    for (int32_t arch : {90, 80}) {
      if (!supports(c.type, arch)) continue;
      tr_intree_source src, wide;
      REQUIRE(tr_intree_source_for(c.type, &c.call, arch, &src) == nullptr);
      if (!tr_intree_has_wide(&src, arch)) continue;
      tr_intree_wide_source(&src, &wide);
      wide_builds++;
      INFO(c.type->key << " for arch " << arch);
      std::vector<std::string> got(wide.option_text, wide.option_text + wide.n_options);
      const std::string block = "-DTR_BLOCK=" + std::to_string(src.wide_block);
      if (std::string(c.type->key) == "gqa_dense_decode_bs1") bs1_wide++;
      CHECK(got.size() == src.n_options + (src.wide_split ? 1 : 0));
      CHECK(std::count(got.begin(), got.end(), block) == 1);
      CHECK(std::count(got.begin(), got.end(), std::string("-DTR_SPLIT")) == (src.wide_split ? 1 : 0));
      std::ptrdiff_t minb = 0;  // as std::count counts
      for (size_t k = 0; k < src.n_options; k++) {
        const std::string o = src.option_text[k];
        if (o.rfind("-DTR_BLOCK=", 0) == 0) continue;
        if (o.rfind("-DTR_MINB=", 0) == 0) {  // no register cap in a wide build
          minb++;
          continue;
        }
        INFO(o);
        CHECK(std::count(got.begin(), got.end(), o) == 1);
      }
      CHECK(std::count(got.begin(), got.end(), std::string("-DTR_MINB=1")) == minb);
    }
  }
  CHECK(wide_builds > 0);
  CHECK(bs1_wide > 0);  // the build whose last option is not -DTR_BLOCK=: its cluster build checked
  for (Case &c : cases) tr_call_spec_clear(&c.call);
}

// The build component compiles from the call's fields and the target arch only (its request
// carries no device facts): a source that read call->facts would differ between the build side
// and the kernel side, which then refuses the artifacts. Checked on every case without compiling.
TEST_CASE("a specialisation's source depends on the call's fields and the target arch, never the call's facts") {
  if (!in_first_shard()) return;
  std::vector<Case> cases = all_cases();
  for (Case &c : cases) {
    for (int32_t arch : {90, 80}) {
      if (!supports(c.type, arch)) continue;
      tr_call_spec known = c.call;  // the kernel side's: the device's facts known
      known.facts_known = 1;
      known.facts = tr_device_facts{arch, nullptr, 132, 232448};
      tr_intree_source bare, with;
      REQUIRE(tr_intree_source_for(c.type, &c.call, arch, &bare) == nullptr);
      REQUIRE(tr_intree_source_for(c.type, &known, arch, &with) == nullptr);
      INFO(c.type->key << " for arch " << arch);
      CHECK(std::string(bare.entry) == with.entry);
      CHECK(bare.block == with.block);
      CHECK(bare.wide_block == with.wide_block);
      CHECK(bare.wide_split == with.wide_split);
      REQUIRE(bare.n_options == with.n_options);
      for (size_t k = 0; k < bare.n_options; k++) CHECK(std::string(bare.option_text[k]) == with.option_text[k]);
    }
  }
  for (Case &c : cases) tr_call_spec_clear(&c.call);
}
