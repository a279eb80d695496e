// yaml_doc_test.cc: YAML loading keeps order, and every error points at file, line and column.
#include <catch2/catch.hpp>

#include <chrono>
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

TEST_CASE("a second document is noted at its start; what starts it is read, no further") {
  tr_yaml_doc *doc = load("a: 1\n...\n# a comment\n");
  CHECK(tr_yaml_one_document(doc, "a test file") == nullptr);
  tr_yaml_doc_destroy(&doc);
  doc = load("a: 1\n--- \n  b: [\n");  // the second document's own syntax error is not read
  CHECK(std::string(tr_yaml_scalar(tr_yaml_get(doc, tr_yaml_root(doc), "a"))) == "1");
  tr_status *s = tr_yaml_one_document(doc, "a test file");
  CHECK(std::string(tr_status_message(s)) == "mem.yaml:2:1: a test file holds one YAML document; a second "
                                             "one starts here");
  CHECK(tr_status_code(s) == TR_MANIFEST);
  tr_status_destroy(&s);
  tr_yaml_doc_destroy(&doc);
  CHECK(load_error("a: 1\n...\n@b\n").find("bad.yaml:3:1: bad token: ") == 0);
}

TEST_CASE("a missing file is an IOError naming the path") {
  tr_yaml_doc *doc = nullptr;
  tr_status *s = tr_yaml_load_file("/nonexistent/spec.yaml", &doc);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_IO);
  CHECK(std::string(tr_status_message(s)).find("/nonexistent/spec.yaml") != std::string::npos);
  tr_status_destroy(&s);
}

TEST_CASE("anchors and aliases load as before; an undefined alias and a repeated anchor are errors") {
  tr_yaml_doc *doc = load("a: &x {k: 1}\nb: *x\nc: [&y 2, *y]\n");
  yaml_node_t *root = tr_yaml_root(doc);
  CHECK(tr_yaml_get(doc, root, "a") == tr_yaml_get(doc, root, "b"));
  yaml_node_t *c = tr_yaml_get(doc, root, "c");
  REQUIRE(c->type == YAML_SEQUENCE_NODE);
  CHECK(c->data.sequence.items.top - c->data.sequence.items.start == 2);
  CHECK(c->data.sequence.items.start[0] == c->data.sequence.items.start[1]);
  CHECK(c->start_mark.column == 3);
  CHECK(c->end_mark.column == 13);
  tr_yaml_doc_destroy(&doc);
  CHECK(load_error("a: *nope\n") == "bad.yaml:1:4: bad document: found undefined alias");
  CHECK(load_error("a: &x 1\nb: &x 2\n") ==
        "bad.yaml:2:4: bad document: second occurrence (found duplicate anchor; first occurrence at "
        "line 1)");
}

static std::string nested(int levels, const char *open, const char *close) {
  std::string text;
  for (int i = 0; i < levels; i++) text += open;
  text += "1";
  for (int i = 0; i < levels; i++) text += close;
  return text + "\n";
}

TEST_CASE("nesting is capped at 64 levels, and a file nested 100,000 deep is refused fast") {
  REQUIRE(TR_YAML_MAX_DEPTH == 64);
  tr_yaml_doc *doc = load(nested(64, "[", "]"));  // the limit itself loads
  tr_yaml_doc_destroy(&doc);
  doc = load(nested(64, "- ", ""));
  tr_yaml_doc_destroy(&doc);
  CHECK(load_error(nested(65, "[", "]")) ==
        "bad.yaml:1:65: nesting too deep: this sequence is level 65; mappings and sequences nest "
        "at most 64 levels");
  CHECK(load_error(nested(65, "{a: ", "}")) ==
        "bad.yaml:1:257: nesting too deep: this mapping is level 65; mappings and sequences nest "
        "at most 64 levels");
  // libyaml alone takes tens of seconds on these (its scanner is quadratic in the flow depth)
  for (const char *open : {"[", "{a: ", "- "}) {
    std::string text = nested(100000, open, open[0] == '[' ? "]" : open[0] == '{' ? "}" : "");
    auto start = std::chrono::steady_clock::now();
    std::string e = load_error(text);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(open << ": " << e);
    CHECK(e.find("nesting too deep: this ") != std::string::npos);
    CHECK(seconds < 0.25);
  }
}

TEST_CASE("the first repeated key of a mapping is found, in document order") {
  tr_yaml_doc *doc = load("m: {b: 1, a: 2, c: 3, a: 4, b: 5, a: 6}\nn: {x: 1, y: 2}\n"
                          "o: {'q': 1, q: 2}\n");
  yaml_node_t *root = tr_yaml_root(doc), *dup = nullptr, *first = nullptr;
  REQUIRE(tr_yaml_duplicate_key(doc, tr_yaml_get(doc, root, "m"), &dup, &first) == nullptr);
  REQUIRE(dup != nullptr);
  CHECK(std::string(tr_yaml_scalar(dup)) == "a");
  CHECK(dup->start_mark.column == 22);  // the second 'a', not the second 'b'
  CHECK(first->start_mark.column == 10);
  REQUIRE(tr_yaml_duplicate_key(doc, tr_yaml_get(doc, root, "n"), &dup, &first) == nullptr);
  CHECK(dup == nullptr);
  CHECK(first == nullptr);
  REQUIRE(tr_yaml_duplicate_key(doc, tr_yaml_get(doc, root, "o"), &dup, &first) == nullptr);
  CHECK(dup != nullptr);  // a quoted key is the same text
  REQUIRE(tr_yaml_duplicate_key(doc, root, &dup, &first) == nullptr);
  CHECK(dup == nullptr);
  tr_yaml_doc_destroy(&doc);
}
