/* index.c: the manifest's table of contents, read from spec files with libyaml. */
#include "manifest/index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/yaml_doc.h"
#include "platform/platform.h"

typedef struct op_entry {
  tr_manifest_op_ref ref;
  char *storage; /* name, family, ref_api and path, back to back */
} op_entry;

struct tr_manifest_index {
  op_entry *ops;
  size_t count;
  size_t capacity;
};

int tr_manifest_op_name_ok(const char *name) {
  size_t len = strlen(name);
  if (len < 6 || name[0] < 'A' || name[0] > 'Z') return 0;
  const char *suffix = name + len - 5;
  if (strcmp(suffix, "FwdOp") != 0 && strcmp(suffix, "BwdOp") != 0) return 0;
  for (const char *c = name; c < suffix; c++) {
    int ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9');
    if (!ok) return 0;
  }
  return 1;
}

static const tr_manifest_op_ref *find(const tr_manifest_index *index, const char *name) {
  for (size_t i = 0; i < index->count; i++) {
    if (strcmp(index->ops[i].ref.name, name) == 0) return &index->ops[i].ref;
  }
  return NULL;
}

static tr_status *add_op(tr_manifest_index *index, const char *name, const char *family,
                         const char *ref_api, const char *path, int line) {
  if (index->count == index->capacity) {
    size_t capacity = index->capacity ? index->capacity * 2 : 16;
    op_entry *ops = realloc(index->ops, capacity * sizeof(*ops));
    if (ops == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "indexing op '%s'", name);
    index->ops = ops;
    index->capacity = capacity;
  }
  size_t sizes[4] = {strlen(name) + 1, strlen(family) + 1, strlen(ref_api) + 1, strlen(path) + 1};
  char *storage = malloc(sizes[0] + sizes[1] + sizes[2] + sizes[3]);
  if (storage == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "indexing op '%s'", name);
  op_entry *entry = &index->ops[index->count++];
  entry->storage = storage;
  const char *texts[4] = {name, family, ref_api, path};
  const char **fields[4] = {&entry->ref.name, &entry->ref.family, &entry->ref.ref_api,
                            &entry->ref.path};
  for (int i = 0; i < 4; i++) {
    memcpy(storage, texts[i], sizes[i]);
    *fields[i] = storage;
    storage += sizes[i];
  }
  entry->ref.line = line;
  return NULL;
}

/* An optional string field of an entry: "" when absent; an error when not a scalar. */
static tr_status *string_field(tr_yaml_doc *doc, yaml_node_t *entry, const char *op,
                               const char *key, const char **out) {
  yaml_node_t *node = tr_yaml_get(doc, entry, key);
  *out = "";
  if (node == NULL) return NULL;
  const char *text = tr_yaml_scalar(node);
  if (text == NULL) {
    return tr_yaml_error_at(doc, node, "op '%s': '%s' must be a string", op, key);
  }
  *out = text;
  return NULL;
}

static tr_status *index_doc(tr_manifest_index *index, tr_yaml_doc *doc) {
  yaml_node_t *root = tr_yaml_root(doc);
  if (root == NULL) return NULL; /* an empty file declares nothing */
  if (root->type != YAML_MAPPING_NODE) {
    return tr_yaml_error_at(doc, root,
                            "a spec file is a mapping of op names to entries; found a %s",
                            root->type == YAML_SEQUENCE_NODE ? "sequence" : "scalar");
  }
  for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
       pair < root->data.mapping.pairs.top; pair++) {
    yaml_node_t *key = tr_yaml_node(doc, pair->key);
    yaml_node_t *entry = tr_yaml_node(doc, pair->value);
    const char *name = tr_yaml_scalar(key);
    if (name == NULL) return tr_yaml_error_at(doc, key, "an op name must be a string");
    if (!tr_manifest_op_name_ok(name)) {
      return tr_yaml_error_at(doc, key,
                              "op name '%s' does not have the form {Name}{Fwd|Bwd}Op "
                              "(e.g. RMSNormFwdOp)", name);
    }
    const tr_manifest_op_ref *seen = find(index, name);
    if (seen != NULL) {
      return tr_yaml_error_at(doc, key, "op '%s' is already declared at %s:%d", name,
                              seen->path, seen->line);
    }
    if (entry == NULL || entry->type != YAML_MAPPING_NODE) {
      return tr_yaml_error_at(doc, entry ? entry : key, "op '%s': its entry must be a mapping",
                              name);
    }
    const char *family, *ref_api;
    TR_RETURN_IF_ERROR(string_field(doc, entry, name, "family", &family));
    TR_RETURN_IF_ERROR(string_field(doc, entry, name, "ref_api", &ref_api));
    TR_RETURN_IF_ERROR(add_op(index, name, family, ref_api, tr_yaml_path(doc), tr_yaml_line(key)));
  }
  return NULL;
}

static int compare_ops(const void *a, const void *b) {
  return strcmp(((const op_entry *)a)->ref.name, ((const op_entry *)b)->ref.name);
}

tr_status *tr_manifest_index_load(const char *const *paths, size_t n_paths,
                                  tr_manifest_index **out) {
  *out = NULL;
  tr_manifest_index *index = calloc(1, sizeof(*index));
  if (index == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "allocating the manifest index");
  for (size_t i = 0; i < n_paths; i++) {
    tr_yaml_doc *doc = NULL;
    tr_status *status = tr_yaml_load_file(paths[i], &doc);
    if (status == NULL) status = index_doc(index, doc);
    tr_yaml_doc_destroy(&doc);
    if (status != NULL) {
      tr_manifest_index_destroy(&index);
      return status;
    }
  }
  if (index->count > 1) qsort(index->ops, index->count, sizeof(*index->ops), compare_ops);
  *out = index;
  return NULL;
}

tr_status *tr_manifest_index_load_dir(const char *dir, tr_manifest_index **out) {
  *out = NULL;
  char **names = NULL;
  size_t count = 0;
  TR_RETURN_IF_ERROR(tr_plat_list_dir(dir, &names, &count));
  char **paths = calloc(count + 1, sizeof(char *));
  size_t n_paths = 0;
  tr_status *status = paths ? NULL : TR_STATUS(TR_OUT_OF_MEMORY, "listing %s", dir);
  for (size_t i = 0; status == NULL && i < count; i++) {
    size_t len = strlen(names[i]);
    if (len < 6 || strcmp(names[i] + len - 5, ".yaml") != 0) continue;
    size_t size = strlen(dir) + len + 2;
    char *path = malloc(size);
    if (path == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "listing %s", dir);
      break;
    }
    snprintf(path, size, "%s%s%s", dir, tr_plat_path_separator_dir(), names[i]);
    paths[n_paths++] = path;
  }
  if (status == NULL) status = tr_manifest_index_load((const char *const *)paths, n_paths, out);
  for (size_t i = 0; i < n_paths; i++) free(paths[i]);
  free(paths);
  tr_plat_free_names(&names, count);
  return status;
}

size_t tr_manifest_index_count(const tr_manifest_index *index) { return index->count; }

const tr_manifest_op_ref *tr_manifest_index_at(const tr_manifest_index *index, size_t i) {
  return i < index->count ? &index->ops[i].ref : NULL;
}

const tr_manifest_op_ref *tr_manifest_index_find(const tr_manifest_index *index,
                                                 const char *name) {
  return find(index, name);
}

void tr_manifest_index_destroy(tr_manifest_index **index_p) {
  if (index_p == NULL || *index_p == NULL) return;
  tr_manifest_index *index = *index_p;
  *index_p = NULL;
  for (size_t i = 0; i < index->count; i++) free(index->ops[i].storage);
  free(index->ops);
  free(index);
}
