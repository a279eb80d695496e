/* yaml_doc.c: libyaml documents with file:line:column errors; libyaml's errors translated once. */
#include "manifest/yaml_doc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

struct tr_yaml_doc {
  char *path;
  yaml_document_t document;
};

static const char *error_kind(yaml_error_type_t error) {
  switch (error) {
    case YAML_MEMORY_ERROR: return "out of memory";
    case YAML_READER_ERROR: return "unreadable characters";
    case YAML_SCANNER_ERROR: return "bad token";
    case YAML_PARSER_ERROR: return "bad structure";
    case YAML_COMPOSER_ERROR: return "bad document";
    default: return "YAML error";
  }
}

tr_status *tr_yaml_load_string(const char *name, const char *text, size_t size,
                               tr_yaml_doc **out) {
  *out = NULL;
  tr_yaml_doc *doc = calloc(1, sizeof(*doc));
  char *path = doc ? malloc(strlen(name) + 1) : NULL;
  if (path == NULL) {
    free(doc);
    return TR_STATUS(TR_OUT_OF_MEMORY, "loading %s", name);
  }
  strcpy(path, name);
  doc->path = path;
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    free(doc->path);
    free(doc);
    return TR_STATUS(TR_OUT_OF_MEMORY, "loading %s: initialising libyaml", name);
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
  if (!yaml_parser_load(&parser, &doc->document)) {
    /* libyaml reports 0-based marks; tilerun's messages are 1-based like editors. */
    yaml_mark_t mark = parser.problem_mark;
    tr_status *status;
    if (parser.context != NULL) {
      status = TR_STATUS(TR_MANIFEST, "%s:%zu:%zu: %s: %s (%s at line %zu)", name,
                         mark.line + 1, mark.column + 1, error_kind(parser.error),
                         parser.problem ? parser.problem : "?", parser.context,
                         parser.context_mark.line + 1);
    } else {
      status = TR_STATUS(TR_MANIFEST, "%s:%zu:%zu: %s: %s", name, mark.line + 1,
                         mark.column + 1, error_kind(parser.error),
                         parser.problem ? parser.problem : "?");
    }
    yaml_parser_delete(&parser);
    free(doc->path);
    free(doc);
    return status;
  }
  yaml_parser_delete(&parser);
  *out = doc;
  return NULL;
}

tr_status *tr_yaml_load_file(const char *path, tr_yaml_doc **out) {
  *out = NULL;
  char *text = NULL;
  size_t size = 0;
  TR_RETURN_IF_ERROR(tr_plat_read_file(path, &text, &size));
  tr_status *status = tr_yaml_load_string(path, text, size, out);
  free(text);
  return status;
}

void tr_yaml_doc_destroy(tr_yaml_doc **doc_p) {
  if (doc_p == NULL || *doc_p == NULL) return;
  tr_yaml_doc *doc = *doc_p;
  *doc_p = NULL;
  yaml_document_delete(&doc->document);
  free(doc->path);
  free(doc);
}

yaml_node_t *tr_yaml_root(tr_yaml_doc *doc) { return yaml_document_get_root_node(&doc->document); }

const char *tr_yaml_path(const tr_yaml_doc *doc) { return doc->path; }

yaml_node_t *tr_yaml_node(tr_yaml_doc *doc, int index) {
  return yaml_document_get_node(&doc->document, index);
}

const char *tr_yaml_scalar(const yaml_node_t *node) {
  if (node == NULL || node->type != YAML_SCALAR_NODE) return NULL;
  return (const char *)node->data.scalar.value;
}

int tr_yaml_is_null(const yaml_node_t *node) {
  if (node == NULL || node->type != YAML_SCALAR_NODE) return 0;
  if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *v = (const char *)node->data.scalar.value;
  return strcmp(v, "") == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
         strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

yaml_node_t *tr_yaml_get(tr_yaml_doc *doc, const yaml_node_t *mapping, const char *key) {
  if (mapping == NULL || mapping->type != YAML_MAPPING_NODE) return NULL;
  for (yaml_node_pair_t *pair = mapping->data.mapping.pairs.start;
       pair < mapping->data.mapping.pairs.top; pair++) {
    const char *k = tr_yaml_scalar(tr_yaml_node(doc, pair->key));
    if (k != NULL && strcmp(k, key) == 0) return tr_yaml_node(doc, pair->value);
  }
  return NULL;
}

tr_status *tr_yaml_error_at(const tr_yaml_doc *doc, const yaml_node_t *node, const char *fmt, ...) {
  char message[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  if (node == NULL) return TR_STATUS(TR_MANIFEST, "%s: %s", doc->path, message);
  return TR_STATUS(TR_MANIFEST, "%s:%zu:%zu: %s", doc->path, node->start_mark.line + 1,
                   node->start_mark.column + 1, message);
}

int tr_yaml_line(const yaml_node_t *node) { return node ? (int)node->start_mark.line + 1 : 0; }
