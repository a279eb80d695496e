/* yaml_doc.h: a YAML file loaded with libyaml (order preserved), and errors that point into it
 * as "file:line:column: ...". Shared by the manifest, backend descriptors and pipeline files. */
#ifndef TILERUN_MANIFEST_YAML_DOC_H_
#define TILERUN_MANIFEST_YAML_DOC_H_

#include <stddef.h>
#include <yaml.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded document. Single owner: tr_yaml_doc_destroy. Not thread-safe; read-only use of one
 * document from several threads is safe. */
typedef struct tr_yaml_doc tr_yaml_doc;

/* Mappings and sequences nest at most this many levels deep (a root mapping is level 1). */
#define TR_YAML_MAX_DEPTH 64

/* Loads the first document of a file, noting whether a second one follows (of which only the
 * first token is read; see tr_yaml_one_document). A file that cannot be read is an IOError naming
 * the path; a syntax error is a ManifestError "path:line:column: <libyaml's problem> (<context>)",
 * and so is a mapping or sequence nested deeper than TR_YAML_MAX_DEPTH (refused as it is read:
 * the time is linear in the file, however deep it goes); an empty file loads as a document whose
 * root is NULL. */
tr_status *tr_yaml_load_file(const char *path, tr_yaml_doc **out) TR_MUST_USE;

/* The same, from text in memory; `name` stands for the path in messages. */
tr_status *tr_yaml_load_string(const char *name, const char *text, size_t size,
                               tr_yaml_doc **out) TR_MUST_USE;

void tr_yaml_doc_destroy(tr_yaml_doc **doc_p);

/* The root node, or NULL for an empty document. */
yaml_node_t *tr_yaml_root(tr_yaml_doc *doc);

/* The path or name the document was loaded from. */
const char *tr_yaml_path(const tr_yaml_doc *doc);

/* A node by index (as found in mapping pairs and sequence items); NULL when out of range. */
yaml_node_t *tr_yaml_node(tr_yaml_doc *doc, int index);

/* A scalar node's text, or NULL when the node is not a scalar. */
const char *tr_yaml_scalar(const yaml_node_t *node);

/* 1 when the node is a plain (unquoted) scalar spelling null: "null", "Null", "NULL", "~" or
 * nothing. */
int tr_yaml_is_null(const yaml_node_t *node);

/* The value for `key` in a mapping node, or NULL when absent or the node is not a mapping. */
yaml_node_t *tr_yaml_get(tr_yaml_doc *doc, const yaml_node_t *mapping, const char *key);

/* The first key of a mapping that repeats an earlier one (scalar keys of the same text), in
 * document order: *dup that key's node and *first the earlier one's; both NULL when every key
 * differs or the node is not a mapping. O(n log n) in the pairs. Fails only for memory. */
tr_status *tr_yaml_duplicate_key(tr_yaml_doc *doc, const yaml_node_t *mapping, yaml_node_t **dup,
                                 yaml_node_t **first) TR_MUST_USE;

/* The same as an error: NULL when every key differs, else a ManifestError at the repetition,
 * "<prefix>duplicate key 'K'<where> (first at line L, column C)". */
tr_status *tr_yaml_unique_keys(tr_yaml_doc *doc, const yaml_node_t *mapping, const char *prefix,
                               const char *where) TR_MUST_USE;

/* A ManifestError "path:line:column: <message>", pointing at `node` (1-based line and column). */
tr_status *tr_yaml_error_at(const tr_yaml_doc *doc, const yaml_node_t *node, const char *fmt, ...)
    TR_PRINTF(3, 4) TR_MUST_USE;

/* NULL when the file holds one document (or none); else a ManifestError at the second document's
 * start, "path:line:column: <what> holds one YAML document; a second one starts here", with
 * `what` such as "a manifest file". Fails for nothing else. */
tr_status *tr_yaml_one_document(const tr_yaml_doc *doc, const char *what) TR_MUST_USE;

/* The 1-based line of a node, for listings. */
int tr_yaml_line(const yaml_node_t *node);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_YAML_DOC_H_ */
