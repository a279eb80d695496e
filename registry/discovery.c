/* discovery.c: backend descriptors found along the search path, sorted by name. */
#include "registry/discovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/yaml_doc.h"
#include "platform/platform.h"
#include "tilerun/device.h"

typedef struct backend_entry {
  tr_backend_descriptor d;
  char *storage;
  size_t dir; /* the index of its directory on the search path */
} backend_entry;

struct tr_discovery {
  backend_entry *backends;
  size_t count, capacity;
  tr_discovery_failure *failures;
  size_t failure_count, failure_capacity;
};

/* Copies n strings back to back into one allocation; fields[i] point into it. */
static char *pack_strings(const char *const *texts, const char **fields[], int n) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += strlen(texts[i]) + 1;
  char *storage = malloc(total);
  if (storage == NULL) return NULL;
  char *at = storage;
  for (int i = 0; i < n; i++) {
    size_t size = strlen(texts[i]) + 1;
    memcpy(at, texts[i], size);
    *fields[i] = at;
    at += size;
  }
  return storage;
}

/* Grows an array of `elem` bytes per item to hold one more. */
static int reserve(void **items, size_t *capacity, size_t count, size_t elem) {
  if (count < *capacity) return 1;
  size_t grown = *capacity ? *capacity * 2 : 8;
  void *bigger = realloc(*items, grown * elem);
  if (bigger == NULL) return 0;
  *items = bigger;
  *capacity = grown;
  return 1;
}

static tr_status *add_failure(tr_discovery *found, const char *descriptor, tr_status *why) {
  tr_status *status = NULL;
  if (!reserve((void **)&found->failures, &found->failure_capacity, found->failure_count,
               sizeof(*found->failures))) {
    status = TR_STATUS(TR_OUT_OF_MEMORY, "recording a discovery failure");
  } else {
    tr_discovery_failure *f = &found->failures[found->failure_count];
    const char *texts[2] = {descriptor, tr_status_message(why)};
    const char **fields[2] = {&f->descriptor, &f->reason};
    /* The failure owns one block holding both strings; its address is f->descriptor. */
    if (pack_strings(texts, fields, 2) == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "recording a discovery failure");
    } else {
      found->failure_count++;
    }
  }
  tr_status_destroy(&why);
  return status;
}

static const backend_entry *find(const tr_discovery *found, const char *name) {
  for (size_t i = 0; i < found->count; i++) {
    if (strcmp(found->backends[i].d.name, name) == 0) return &found->backends[i];
  }
  return NULL;
}

/* Reads one descriptor; a problem with it is returned as the reason to skip it. */
static tr_status *read_descriptor(tr_discovery *found, size_t dir_index, const char *dir, const char *path) {
  tr_yaml_doc *doc = NULL;
  TR_RETURN_IF_ERROR(tr_yaml_load_file(path, &doc));
  tr_status *status = tr_yaml_one_document(doc, "a backend descriptor");
  yaml_node_t *root = tr_yaml_root(doc);
  const char *name = NULL, *library = NULL;
  if (status == NULL && (root == NULL || root->type != YAML_MAPPING_NODE)) {
    status = tr_yaml_error_at(doc, root, "a backend descriptor is a mapping with 'name' and "
                                         "'library'");
  }
  for (yaml_node_pair_t *pair = status ? NULL : root->data.mapping.pairs.start;
       status == NULL && pair < root->data.mapping.pairs.top; pair++) {
    yaml_node_t *key = tr_yaml_node(doc, pair->key);
    yaml_node_t *value = tr_yaml_node(doc, pair->value);
    const char *k = tr_yaml_scalar(key);
    const char **slot = (k && strcmp(k, "name") == 0) ? &name
                        : (k && strcmp(k, "library") == 0) ? &library
                                                           : NULL;
    if (slot == NULL) {
      status = tr_yaml_error_at(doc, key, "unknown key '%s' in a backend descriptor (known: "
                                          "name, library)", k ? k : "?");
    } else if (tr_yaml_scalar(value) == NULL || tr_yaml_scalar(value)[0] == '\0') {
      status = tr_yaml_error_at(doc, value, "'%s' must be a non-empty string", k);
    } else {
      *slot = tr_yaml_scalar(value);
    }
  }
  if (status == NULL && (name == NULL || library == NULL)) {
    status = tr_yaml_error_at(doc, root, "'%s' is missing", name == NULL ? "name" : "library");
  }
  if (status == NULL) {
    tr_device check; /* a backend name follows the device-type rule: [a-z][a-z0-9_]* */
    tr_status *bad = tr_device_make(name, TR_DEVICE_NO_INDEX, &check);
    if (bad != NULL) {
      tr_status_destroy(&bad);
      status = tr_yaml_error_at(doc, tr_yaml_get(doc, root, "name"),
                                "backend name '%s' must be a lowercase letter followed by at most "
                                "%d lowercase letters, digits or '_'", name, TR_DEVICE_TYPE_MAX - 1);
    }
  }
  const backend_entry *earlier = status ? NULL : find(found, name);
  if (earlier != NULL && earlier->dir == dir_index) { /* two of one name in one folder: which? */
    status = tr_yaml_error_at(doc, tr_yaml_get(doc, root, "name"),
                              "backend '%s' was already found at %s", name, earlier->d.descriptor);
  }
  /* one found in an earlier folder of the search path shadows this one, as PATH does: skipped,
   * no failure (a second install's backends, or a folder put first to override one) */
  if (status == NULL && earlier == NULL) {
    const char *sep = tr_plat_path_separator_dir();
    size_t size = strlen(dir) + strlen(library) + 2;
    char *resolved = malloc(size);
    if (resolved != NULL) {
      if (library[0] == sep[0]) snprintf(resolved, size, "%s", library);
      else snprintf(resolved, size, "%s%s%s", dir, sep, library);
    }
    backend_entry *entry = NULL;
    if (resolved != NULL && reserve((void **)&found->backends, &found->capacity, found->count,
                                    sizeof(*found->backends))) {
      entry = &found->backends[found->count];
      const char *texts[3] = {name, resolved, path};
      const char **fields[3] = {&entry->d.name, &entry->d.library, &entry->d.descriptor};
      entry->storage = pack_strings(texts, fields, 3);
      if (entry->storage == NULL) entry = NULL;
    }
    free(resolved);
    if (entry == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "recording backend '%s'", name);
    } else {
      entry->dir = dir_index;
      found->count++;
    }
  }
  tr_yaml_doc_destroy(&doc);
  return status;
}

static int compare_backends(const void *a, const void *b) {
  return strcmp(((const backend_entry *)a)->d.name, ((const backend_entry *)b)->d.name);
}

tr_status *tr_backend_discover(const char *const *dirs, size_t n_dirs, tr_discovery **out) {
  *out = NULL;
  tr_discovery *found = calloc(1, sizeof(*found));
  if (found == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "backend discovery");
  tr_status *fatal = NULL;
  for (size_t d = 0; fatal == NULL && d < n_dirs; d++) {
    if (!tr_plat_is_dir(dirs[d])) continue;
    char **paths = NULL;
    size_t count = 0;
    tr_status *listing = tr_plat_list_files(dirs[d], ".yaml", &paths, &count);
    if (listing != NULL) {
      fatal = add_failure(found, dirs[d], listing);
      continue;
    }
    for (size_t i = 0; fatal == NULL && i < count; i++) {
      tr_status *why = read_descriptor(found, d, dirs[d], paths[i]);
      if (why != NULL) {
        fatal = tr_status_code(why) == TR_OUT_OF_MEMORY ? why : add_failure(found, paths[i], why);
      }
    }
    tr_plat_free_names(&paths, count);
  }
  if (fatal != NULL) {
    tr_discovery_destroy(&found);
    return fatal;
  }
  if (found->count > 1) qsort(found->backends, found->count, sizeof(*found->backends), compare_backends);
  *out = found;
  return NULL;
}

int tr_discovery_installed_dir(const char *suffix, char *buf, size_t size) {
  tr_status *status = tr_plat_self_prefix(buf, size);
  size_t used = status == NULL ? strlen(buf) : 0;
  int ok = status == NULL && used + strlen(suffix) < size;
  if (ok) {
    memcpy(buf + used, suffix, strlen(suffix) + 1);
    ok = tr_plat_is_dir(buf);
  }
  tr_status_destroy(&status);
  if (!ok && size > 0) buf[0] = '\0';
  return ok;
}

const char *tr_discovery_manifest_dir(char *buf, size_t size) {
  const char *env = tr_plat_getenv("TILERUN_MANIFEST_DIR");
  if (env != NULL && env[0] != '\0') return env;
  return tr_discovery_installed_dir("/share/tilerun/manifest", buf, size) ? buf : "manifest/spec";
}

const char *tr_discovery_manifest_dir_source(void) {
  const char *env = tr_plat_getenv("TILERUN_MANIFEST_DIR");
  if (env != NULL && env[0] != '\0') return "$TILERUN_MANIFEST_DIR";
  char buf[4096];
  if (tr_discovery_installed_dir("/share/tilerun/manifest", buf, sizeof(buf))) {
    return "the install's share/tilerun/manifest";
  }
  return "the fallback, ./manifest/spec: TILERUN_MANIFEST_DIR is unset and no installed manifest was found";
}

tr_status *tr_backend_search_path(char ***out_dirs, size_t *out_count) {
  *out_dirs = NULL;
  *out_count = 0;
  const char *env = tr_plat_getenv(TR_BACKEND_PATH_ENV);
  const char *list_sep = tr_plat_path_separator_list();
  size_t max = 3;
  for (const char *c = env ? env : ""; *c; c++) max += (*c == list_sep[0]);
  char **dirs = calloc(max, sizeof(char *));
  if (dirs == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "backend search path");
  size_t n = 0;
  const char *start = env ? env : "";
  while (1) {
    const char *end = strchr(start, list_sep[0]);
    size_t len = end ? (size_t)(end - start) : strlen(start);
    if (len > 0) {
      dirs[n] = malloc(len + 1);
      if (dirs[n] == NULL) {
        tr_discovery_free_dirs(&dirs, n);
        return TR_STATUS(TR_OUT_OF_MEMORY, "backend search path");
      }
      memcpy(dirs[n], start, len);
      dirs[n++][len] = '\0';
    }
    if (end == NULL) break;
    start = end + 1;
  }
  const char *suffix = "/lib/tilerun/backends";
  /* an installed tilerun's own backends (its prefix's), where that is not the default prefix */
  char installed[4096];
  if (tr_discovery_installed_dir(suffix, installed, sizeof(installed)) &&
      strcmp(installed, TR_INSTALL_PREFIX "/lib/tilerun/backends") != 0) {
    size_t len = strlen(installed) + 1;
    dirs[n] = malloc(len);
    if (dirs[n] == NULL) {
      tr_discovery_free_dirs(&dirs, n);
      return TR_STATUS(TR_OUT_OF_MEMORY, "backend search path");
    }
    memcpy(dirs[n++], installed, len);
  }
  dirs[n] = malloc(strlen(TR_INSTALL_PREFIX) + strlen(suffix) + 1);
  if (dirs[n] != NULL) {
    strcpy(dirs[n], TR_INSTALL_PREFIX);
    strcat(dirs[n++], suffix);
  } else {
    tr_discovery_free_dirs(&dirs, n);
    return TR_STATUS(TR_OUT_OF_MEMORY, "backend search path");
  }
  /* a folder named twice (the same text, or one folder under two names) is searched once: a
   * second read would find only descriptors the first one shadows */
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    int seen = 0;
    for (size_t j = 0; j < kept && !seen; j++) seen = strcmp(dirs[i], dirs[j]) == 0 || tr_plat_same_file(dirs[i], dirs[j]);
    if (seen) free(dirs[i]);
    else dirs[kept++] = dirs[i];
  }
  *out_dirs = dirs;
  *out_count = kept;
  return NULL;
}

void tr_discovery_free_dirs(char ***dirs_p, size_t count) { tr_plat_free_names(dirs_p, count); }

size_t tr_discovery_count(const tr_discovery *found) { return found->count; }

const tr_backend_descriptor *tr_discovery_at(const tr_discovery *found, size_t i) {
  return i < found->count ? &found->backends[i].d : NULL;
}

size_t tr_discovery_failure_count(const tr_discovery *found) { return found->failure_count; }

const tr_discovery_failure *tr_discovery_failure_at(const tr_discovery *found, size_t i) {
  return i < found->failure_count ? &found->failures[i] : NULL;
}

void tr_discovery_destroy(tr_discovery **found_p) {
  if (found_p == NULL || *found_p == NULL) return;
  tr_discovery *found = *found_p;
  *found_p = NULL;
  for (size_t i = 0; i < found->count; i++) free(found->backends[i].storage);
  for (size_t i = 0; i < found->failure_count; i++) free((char *)found->failures[i].descriptor);
  free(found->backends);
  free(found->failures);
  free(found);
}
