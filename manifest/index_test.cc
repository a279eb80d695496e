// index_test.cc: the manifest's table of contents: ops, families, and the file-shape errors.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "manifest/index.h"
#include "platform/test_support.h"

using tr_test::TempDir;

static std::string index_error(TempDir &dir) {
  tr_manifest_index *index = nullptr;
  tr_status *s = tr_manifest_index_load_dir(dir.path, &index);
  REQUIRE(s != nullptr);
  CHECK(index == nullptr);
  std::string message = tr_status_message(s);
  tr_status_destroy(&s);
  return message;
}

TEST_CASE("the shipped spec files index cleanly and declare RMSNormFwdOp") {
  tr_manifest_index *index = nullptr;
  tr_status *s = tr_manifest_index_load_dir("manifest/spec", &index);
  INFO(tr_status_message(s));
  REQUIRE(s == nullptr);
  const tr_manifest_op_ref *rms = tr_manifest_index_find(index, "RMSNormFwdOp");
  REQUIRE(rms != nullptr);
  CHECK(std::string(rms->family) == "norm");
  CHECK(std::string(rms->ref_api) == "torch.nn.functional.rms_norm");
  CHECK(std::string(rms->path) == "manifest/spec/norm.yaml");
  for (size_t i = 1; i < tr_manifest_index_count(index); i++) {
    CHECK(std::string(tr_manifest_index_at(index, i - 1)->name) <
          tr_manifest_index_at(index, i)->name);
  }
  tr_manifest_index_destroy(&index);
}

TEST_CASE("ops from several files come back sorted, with file and line") {
  TempDir dir;
  std::string b = dir.write("b.yaml", "ZetaFwdOp:\n  family: z\nAlphaBwdOp: {family: a}\n");
  dir.write("a.yaml", "# comment\nMidFwdOp:\n  family: m\n  ref_api: none\n");
  dir.write("notes.txt", "NotAnOp: 1\n");  // only *.yaml files are spec files
  tr_manifest_index *index = nullptr;
  REQUIRE(tr_manifest_index_load_dir(dir.path, &index) == nullptr);
  REQUIRE(tr_manifest_index_count(index) == 3);
  CHECK(std::string(tr_manifest_index_at(index, 0)->name) == "AlphaBwdOp");
  CHECK(std::string(tr_manifest_index_at(index, 1)->name) == "MidFwdOp");
  CHECK(std::string(tr_manifest_index_at(index, 2)->name) == "ZetaFwdOp");
  const tr_manifest_op_ref *alpha = tr_manifest_index_find(index, "AlphaBwdOp");
  CHECK(alpha->path == b);
  CHECK(alpha->line == 3);
  CHECK(std::string(tr_manifest_index_find(index, "MidFwdOp")->ref_api) == "none");
  CHECK(tr_manifest_index_find(index, "NotAnOp") == nullptr);
  tr_manifest_index_destroy(&index);
}

TEST_CASE("an op declared in two files is refused, naming both places") {
  TempDir dir;
  std::string a = dir.write("a.yaml", "AddFwdOp: {family: elementwise}\n");
  std::string b = dir.write("b.yaml", "\nAddFwdOp: {family: other}\n");
  CHECK(index_error(dir) == b + ":2:1: op 'AddFwdOp' is already declared at " + a + ":1");
}

TEST_CASE("malformed spec files are refused with file, line and column") {
  SECTION("not a mapping") {
    TempDir dir;
    std::string f = dir.write("a.yaml", "- RMSNormFwdOp\n");
    CHECK(index_error(dir) ==
          f + ":1:1: a spec file is a mapping of op names to entries; found a sequence");
  }
  SECTION("a bad op name") {
    TempDir dir;
    std::string f = dir.write("a.yaml", "GoodFwdOp: {}\nrms_norm: {}\n");
    CHECK(index_error(dir) == f + ":2:1: op name 'rms_norm' does not have the form "
                                  "{Name}{Fwd|Bwd}Op (e.g. RMSNormFwdOp)");
  }
  SECTION("an entry that is not a mapping") {
    TempDir dir;
    std::string f = dir.write("a.yaml", "GoodFwdOp: 3\n");
    CHECK(index_error(dir) == f + ":1:12: op 'GoodFwdOp': its entry must be a mapping");
  }
  SECTION("a family that is not a string") {
    TempDir dir;
    std::string f = dir.write("a.yaml", "GoodFwdOp:\n  family: [a, b]\n");
    CHECK(index_error(dir) == f + ":2:11: op 'GoodFwdOp': 'family' must be a string");
  }
  SECTION("a YAML syntax error") {
    TempDir dir;
    std::string f = dir.write("a.yaml", "GoodFwdOp: {family: x\n");
    CHECK(index_error(dir).find(f + ":2:1: bad structure:") == 0);
  }
  SECTION("a missing directory") {
    tr_manifest_index *index = nullptr;
    tr_status *s = tr_manifest_index_load_dir("/nonexistent/spec", &index);
    REQUIRE(s != nullptr);
    CHECK(tr_status_code(s) == TR_IO);
    CHECK(std::string(tr_status_message(s)).find("/nonexistent/spec") != std::string::npos);
    tr_status_destroy(&s);
  }
}

TEST_CASE("op names have the form {Name}{Fwd|Bwd}Op") {
  for (const char *ok : {"RMSNormFwdOp", "GQADecodeFwdOp", "AddBwdOp", "X2FwdOp"}) {
    CHECK(tr_manifest_op_name_ok(ok));
  }
  for (const char *bad : {"FwdOp", "rmsNormFwdOp", "RMSNorm", "RMSNormOp", "RMS_NormFwdOp",
                          "RMSNormFwdOps", ""}) {
    INFO(bad);
    CHECK_FALSE(tr_manifest_op_name_ok(bad));
  }
}
