// yaml_doc_test.cc: YAML loading keeps order, and every error points at file, line and column.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "manifest/yaml_doc.h"

static tr_yaml_doc *load(const std::string &text) {
  tr_yaml_doc *doc = nullptr;
  tr_status *s = tr_yaml_load_string("mem.yaml", text.data(), text.size(), &doc);
  INFO(tr_status_message(s));
  REQUIRE(s == nullptr);
  return doc;
}

static std::string load_error(const std::string &text) {
  tr_yaml_doc *doc = nullptr;
  tr_status *s = tr_yaml_load_string("bad.yaml", text.data(), text.size(), &doc);
  REQUIRE(s != nullptr);
  CHECK(doc == nullptr);
  CHECK(tr_status_code(s) == TR_MANIFEST);
  std::string message = tr_status_message(s);
  tr_status_destroy(&s);
  return message;
}

TEST_CASE("mappings keep their order and values are found by key") {
  tr_yaml_doc *doc = load("b: 1\na: two\nc: ~\nd: 'null'\n");
  yaml_node_t *root = tr_yaml_root(doc);
  REQUIRE(root->type == YAML_MAPPING_NODE);
  const char *keys[] = {"b", "a", "c", "d"};
  int i = 0;
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
    CHECK(std::string(tr_yaml_scalar(tr_yaml_node(doc, p->key))) == keys[i++]);
  }
  CHECK(std::string(tr_yaml_scalar(tr_yaml_get(doc, root, "a"))) == "two");
  CHECK(tr_yaml_is_null(tr_yaml_get(doc, root, "c")));
  CHECK_FALSE(tr_yaml_is_null(tr_yaml_get(doc, root, "d")));  // quoted: a string
  CHECK_FALSE(tr_yaml_is_null(tr_yaml_get(doc, root, "b")));
  CHECK(tr_yaml_get(doc, root, "missing") == nullptr);
  CHECK(tr_yaml_line(tr_yaml_get(doc, root, "c")) == 3);
  tr_yaml_doc_destroy(&doc);
  CHECK(doc == nullptr);
}

TEST_CASE("an empty document has no root") {
  tr_yaml_doc *doc = load("");
  CHECK(tr_yaml_root(doc) == nullptr);
  tr_yaml_doc_destroy(&doc);
}

TEST_CASE("syntax errors name the file, line and column of the problem") {
  CHECK(load_error("a: 1\nb: [1, 2\n") ==
        "bad.yaml:3:1: bad structure: did not find expected ',' or ']' (while parsing a flow "
        "sequence at line 2)");
  CHECK(load_error("a: 1\n  b: 2\n") ==
        "bad.yaml:2:4: bad token: mapping values are not allowed in this context");
  CHECK(load_error("a: \"open\n") ==
        "bad.yaml:2:1: bad token: found unexpected end of stream (while scanning a quoted scalar "
        "at line 1)");
}

TEST_CASE("errors at a node point at it") {
  tr_yaml_doc *doc = load("x:\n  y: [1, 2]\n");
  yaml_node_t *x = tr_yaml_get(doc, tr_yaml_root(doc), "x");
  yaml_node_t *y = tr_yaml_get(doc, x, "y");
  tr_status *s = tr_yaml_error_at(doc, y, "'%s' must be a string", "y");
  CHECK(std::string(tr_status_message(s)) == "mem.yaml:2:6: 'y' must be a string");
  tr_status_destroy(&s);
  tr_yaml_doc_destroy(&doc);
}

TEST_CASE("a missing file is an IOError naming the path") {
  tr_yaml_doc *doc = nullptr;
  tr_status *s = tr_yaml_load_file("/nonexistent/spec.yaml", &doc);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_IO);
  CHECK(std::string(tr_status_message(s)).find("/nonexistent/spec.yaml") != std::string::npos);
  tr_status_destroy(&s);
}
