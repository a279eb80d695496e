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
  int has_next;      /* another document follows the first */
  yaml_mark_t next;  /* where it starts */
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

/* libyaml's error, as "name:line:column: <kind>: <problem> (<context> at line N)". libyaml's
 * marks are 0-based; tilerun's messages are 1-based like editors. */
static tr_status *yaml_error(const char *name, yaml_error_type_t error, const char *problem,
                             yaml_mark_t mark, const char *context, yaml_mark_t context_mark) {
  if (context != NULL) {
    return TR_STATUS(TR_MANIFEST, "%s:%zu:%zu: %s: %s (%s at line %zu)", name, mark.line + 1,
                     mark.column + 1, error_kind(error), problem ? problem : "?", context,
                     context_mark.line + 1);
  }
  return TR_STATUS(TR_MANIFEST, "%s:%zu:%zu: %s: %s", name, mark.line + 1, mark.column + 1,
                   error_kind(error), problem ? problem : "?");
}

static tr_status *parser_error(const char *name, const yaml_parser_t *parser) {
  return yaml_error(name, parser->error, parser->problem, parser->problem_mark, parser->context,
                    parser->context_mark);
}

/* An anchor (&name) and the node it names, for aliases (*name). */
typedef struct anchor {
  char *name;
  int node;
  yaml_mark_t mark;
} anchor;

/* What the composer holds while it reads one document's events. */
typedef struct composing {
  const char *name;
  yaml_document_t *document;
  int open[TR_YAML_MAX_DEPTH]; /* the collections being read, outermost first */
  int key[TR_YAML_MAX_DEPTH];  /* a mapping's key waiting for its value; 0: none */
  int depth;
  anchor *anchors;
  size_t n_anchors, cap_anchors;
} composing;

#define YAML_OOM(c) TR_STATUS(TR_OUT_OF_MEMORY, "loading %s", (c)->name)

/* Places node `index` in the collection being read: a sequence's next item, a mapping's key or
 * the value of the key before it. The first node of a document is its root. */
static tr_status *add_to_parent(composing *c, int index) {
  if (c->depth == 0) return NULL;
  int parent = c->open[c->depth - 1];
  yaml_node_t *node = yaml_document_get_node(c->document, parent);
  int ok = 1;
  if (node->type == YAML_SEQUENCE_NODE) {
    ok = yaml_document_append_sequence_item(c->document, parent, index);
  } else if (c->key[c->depth - 1] == 0) {
    c->key[c->depth - 1] = index;
  } else {
    ok = yaml_document_append_mapping_pair(c->document, parent, c->key[c->depth - 1], index);
    c->key[c->depth - 1] = 0;
  }
  return ok ? NULL : YAML_OOM(c);
}

static tr_status *add_anchor(composing *c, const yaml_char_t *name, int node, yaml_mark_t mark) {
  if (name == NULL) return NULL;
  for (size_t i = 0; i < c->n_anchors; i++) {
    if (strcmp(c->anchors[i].name, (const char *)name) == 0) {
      return yaml_error(c->name, YAML_COMPOSER_ERROR, "second occurrence", mark,
                        "found duplicate anchor; first occurrence", c->anchors[i].mark);
    }
  }
  if (c->n_anchors == c->cap_anchors) {
    size_t cap = c->cap_anchors ? c->cap_anchors * 2 : 8;
    anchor *grown = realloc(c->anchors, cap * sizeof(*grown));
    if (grown == NULL) return YAML_OOM(c);
    c->anchors = grown;
    c->cap_anchors = cap;
  }
  char *copy = malloc(strlen((const char *)name) + 1);
  if (copy == NULL) return YAML_OOM(c);
  strcpy(copy, (const char *)name);
  c->anchors[c->n_anchors++] = (anchor){copy, node, mark};
  return NULL;
}

/* A tag as libyaml's loader takes it: none and "!" mean the default. */
static const yaml_char_t *tag_of(const yaml_char_t *tag) {
  return (tag == NULL || strcmp((const char *)tag, "!") == 0) ? NULL : tag;
}

/* One event of the document into the document; *done once its end is read. */
static tr_status *compose_event(composing *c, const yaml_event_t *e, int *done) {
  yaml_document_t *d = c->document;
  int index = 0;
  switch (e->type) {
    case YAML_SCALAR_EVENT:
      index = yaml_document_add_scalar(d, tag_of(e->data.scalar.tag),
                                       e->data.scalar.value, (int)e->data.scalar.length,
                                       e->data.scalar.style);
      if (index == 0) return YAML_OOM(c);
      TR_RETURN_IF_ERROR(add_anchor(c, e->data.scalar.anchor, index, e->start_mark));
      break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
      int is_seq = e->type == YAML_SEQUENCE_START_EVENT;
      if (c->depth == TR_YAML_MAX_DEPTH) {
        return TR_STATUS(TR_MANIFEST, "%s:%zu:%zu: nesting too deep: this %s is level %d; "
                         "mappings and sequences nest at most %d levels", c->name,
                         e->start_mark.line + 1, e->start_mark.column + 1,
                         is_seq ? "sequence" : "mapping", TR_YAML_MAX_DEPTH + 1, TR_YAML_MAX_DEPTH);
      }
      if (is_seq) {
        index = yaml_document_add_sequence(d, tag_of(e->data.sequence_start.tag),
                                           e->data.sequence_start.style);
      } else {
        index = yaml_document_add_mapping(d, tag_of(e->data.mapping_start.tag),
                                          e->data.mapping_start.style);
      }
      if (index == 0) return YAML_OOM(c);
      const yaml_char_t *name = is_seq ? e->data.sequence_start.anchor : e->data.mapping_start.anchor;
      TR_RETURN_IF_ERROR(add_anchor(c, name, index, e->start_mark));
      break;
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
      yaml_document_get_node(d, c->open[c->depth - 1])->end_mark = e->end_mark;
      c->depth--;
      return NULL;
    case YAML_ALIAS_EVENT:
      for (size_t i = 0; i < c->n_anchors && index == 0; i++) {
        if (strcmp(c->anchors[i].name, (const char *)e->data.alias.anchor) == 0) index = c->anchors[i].node;
      }
      if (index == 0) {
        yaml_mark_t none = {0, 0, 0};
        return yaml_error(c->name, YAML_COMPOSER_ERROR, "found undefined alias", e->start_mark, NULL, none);
      }
      return add_to_parent(c, index);
    case YAML_DOCUMENT_END_EVENT:
      d->end_implicit = e->data.document_end.implicit;
      d->end_mark = e->end_mark;
      *done = 1;
      return NULL;
    default:
      return NULL;
  }
  yaml_node_t *node = yaml_document_get_node(d, index);
  node->start_mark = e->start_mark;
  node->end_mark = e->end_mark;
  TR_RETURN_IF_ERROR(add_to_parent(c, index));
  if (e->type == YAML_SEQUENCE_START_EVENT || e->type == YAML_MAPPING_START_EVENT) {
    c->open[c->depth] = index;
    c->key[c->depth] = 0;
    c->depth++;
  }
  return NULL;
}

/* The first document of the stream, built from libyaml's events as yaml_parser_load builds it,
 * with the nesting counted as it is read: a file nested too deep is refused at the first level
 * too many, before libyaml's scanner (quadratic in the nesting of flow collections) reads on.
 * Then the next event is read, to note in *has_next and *next where a second document starts. */
static tr_status *compose(const char *name, yaml_parser_t *parser, yaml_document_t *document,
                          int *has_next, yaml_mark_t *next) {
  yaml_event_t e;
  if (!yaml_parser_parse(parser, &e)) return parser_error(name, parser); /* the stream's start */
  yaml_event_delete(&e);
  if (!yaml_parser_parse(parser, &e)) return parser_error(name, parser);
  int empty = e.type != YAML_DOCUMENT_START_EVENT;
  int ok = empty ? yaml_document_initialize(document, NULL, NULL, NULL, 1, 1)
                 : yaml_document_initialize(document, e.data.document_start.version_directive,
                                            e.data.document_start.tag_directives.start,
                                            e.data.document_start.tag_directives.end,
                                            e.data.document_start.implicit, 1);
  if (ok) document->start_mark = e.start_mark;
  yaml_event_delete(&e);
  if (!ok) return TR_STATUS(TR_OUT_OF_MEMORY, "loading %s", name);
  if (empty) return NULL;
  composing c;
  memset(&c, 0, sizeof(c));
  c.name = name;
  c.document = document;
  tr_status *status = NULL;
  for (int done = 0; status == NULL && !done;) {
    if (!yaml_parser_parse(parser, &e)) {
      status = parser_error(name, parser);
      break;
    }
    status = compose_event(&c, &e, &done);
    yaml_event_delete(&e);
  }
  if (status == NULL) { /* the stream's end, or a second document's start */
    if (!yaml_parser_parse(parser, &e)) {
      status = parser_error(name, parser);
    } else {
      *has_next = e.type == YAML_DOCUMENT_START_EVENT;
      *next = e.start_mark;
      yaml_event_delete(&e);
    }
  }
  for (size_t i = 0; i < c.n_anchors; i++) free(c.anchors[i].name);
  free(c.anchors);
  if (status != NULL) yaml_document_delete(document);
  return status;
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
  tr_status *status = compose(name, &parser, &doc->document, &doc->has_next, &doc->next);
  yaml_parser_delete(&parser);
  if (status != NULL) {
    free(doc->path);
    free(doc);
    return status;
  }
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

typedef struct key_at {
  const char *text;
  int position;
  yaml_node_t *node;
} key_at;

static int compare_keys(const void *a, const void *b) {
  const key_at *x = a, *y = b;
  int c = strcmp(x->text, y->text);
  return c != 0 ? c : (x->position > y->position) - (x->position < y->position);
}

tr_status *tr_yaml_duplicate_key(tr_yaml_doc *doc, const yaml_node_t *mapping, yaml_node_t **dup,
                                 yaml_node_t **first) {
  *dup = NULL;
  *first = NULL;
  if (mapping == NULL || mapping->type != YAML_MAPPING_NODE) return NULL;
  size_t n = (size_t)(mapping->data.mapping.pairs.top - mapping->data.mapping.pairs.start);
  if (n < 2) return NULL;
  key_at *keys = malloc(n * sizeof(*keys));
  if (keys == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "checking the keys of a mapping in %s", doc->path);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *node = tr_yaml_node(doc, mapping->data.mapping.pairs.start[i].key);
    const char *text = tr_yaml_scalar(node);
    if (text != NULL) keys[k++] = (key_at){text, (int)i, node};
  }
  qsort(keys, k, sizeof(*keys), compare_keys);
  /* Among each run of equal keys the second is the first repetition; the earliest of those wins. */
  int best = -1;
  for (size_t i = 1; i < k; i++) {
    int repeats = strcmp(keys[i].text, keys[i - 1].text) == 0;
    int second = repeats && (i < 2 || strcmp(keys[i - 1].text, keys[i - 2].text) != 0);
    if (second && (best < 0 || keys[i].position < keys[best].position)) best = (int)i;
  }
  if (best >= 0) {
    *dup = keys[best].node;
    *first = keys[best - 1].node;
  }
  free(keys);
  return NULL;
}

tr_status *tr_yaml_one_document(const tr_yaml_doc *doc, const char *what) {
  if (!doc->has_next) return NULL;
  return TR_STATUS(TR_MANIFEST, "%s:%zu:%zu: %s holds one YAML document; a second one starts here",
                   doc->path, doc->next.line + 1, doc->next.column + 1, what);
}

int tr_yaml_line(const yaml_node_t *node) { return node ? (int)node->start_mark.line + 1 : 0; }

tr_status *tr_yaml_unique_keys(tr_yaml_doc *doc, const yaml_node_t *mapping, const char *prefix, const char *where) {
  yaml_node_t *dup = NULL, *first = NULL;
  TR_RETURN_IF_ERROR(tr_yaml_duplicate_key(doc, mapping, &dup, &first));
  if (dup == NULL) return NULL;
  return tr_yaml_error_at(doc, dup, "%sduplicate key '%s'%s (first at line %d, column %d)", prefix, tr_yaml_scalar(dup),
                          where, tr_yaml_line(first), (int)first->start_mark.column + 1);
}
