/* index.h: the manifest's table of contents: which ops the spec files declare, and where.
 * Loading checks each file's shape (a mapping of op names to entries), the op-name format and
 * that no op is declared twice; the signatures themselves are checked by the manifest loader. */
#ifndef TILERUN_MANIFEST_INDEX_H_
#define TILERUN_MANIFEST_INDEX_H_

#include <stddef.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_manifest_op_ref {
  const char *name;    /* "RMSNormFwdOp" */
  const char *family;  /* the entry's `family`, or "" */
  const char *ref_api; /* the entry's `ref_api`, or "" */
  const char *path;    /* the spec file */
  int line;            /* where the op's name stands in it (1-based) */
} tr_manifest_op_ref;

/* An index over spec files; ops sorted by name. Single owner; read-only use from several threads
 * is safe. */
typedef struct tr_manifest_index tr_manifest_index;

/* Indexes the given spec files. The first problem found is returned as a ManifestError naming
 * file, line and column (an unreadable file is an IOError naming the path); *out is then NULL. */
tr_status *tr_manifest_index_load(const char *const *paths, size_t n_paths,
                                  tr_manifest_index **out) TR_MUST_USE;

/* Indexes every "*.yaml" file of a directory, in sorted name order. A missing directory is an
 * IOError naming it. */
tr_status *tr_manifest_index_load_dir(const char *dir, tr_manifest_index **out) TR_MUST_USE;

size_t tr_manifest_index_count(const tr_manifest_index *index);
const tr_manifest_op_ref *tr_manifest_index_at(const tr_manifest_index *index, size_t i);

/* The op of that name, or NULL. */
const tr_manifest_op_ref *tr_manifest_index_find(const tr_manifest_index *index, const char *name);

void tr_manifest_index_destroy(tr_manifest_index **index_p);

/* 1 when `name` has the form {Name}{Fwd|Bwd}Op: an uppercase letter, letters and digits, then
 * "FwdOp" or "BwdOp", with something before the suffix. */
int tr_manifest_op_name_ok(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MANIFEST_INDEX_H_ */
