/* discovery.h: finding installed backends: descriptor files in the backend search path.
 *
 * A backend is installed by putting its shared object and a descriptor `<name>.yaml` into a
 * backends directory:
 *
 *     name: cpu                      # the backend's name: [a-z][a-z0-9_]*
 *     library: libtilerun_cpu.so     # relative to the descriptor's directory, or absolute
 *
 * The search path is TILERUN_BACKEND_PATH (directories separated as in PATH), then the install
 * prefix's `lib/tilerun/backends`. Discovery reads descriptors only; loading the libraries is the
 * registry's next step. */
#ifndef TILERUN_REGISTRY_DISCOVERY_H_
#define TILERUN_REGISTRY_DISCOVERY_H_

#include <stddef.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The environment variable holding extra backend directories. */
#define TR_BACKEND_PATH_ENV "TILERUN_BACKEND_PATH"

#ifndef TR_INSTALL_PREFIX
#define TR_INSTALL_PREFIX "/usr/local"
#endif

typedef struct tr_backend_descriptor {
  const char *name;       /* from the descriptor */
  const char *library;    /* resolved: absolute, or relative to the working directory */
  const char *descriptor; /* the descriptor file's path */
} tr_backend_descriptor;

typedef struct tr_discovery_failure {
  const char *descriptor; /* the file that could not be used */
  const char *reason;     /* the whole error text, e.g. "path:2:7: 'library' is missing" */
} tr_discovery_failure;

/* What discovery found: backends sorted by name, and the descriptors it had to skip.
 * Single owner; read-only use from several threads is safe. */
typedef struct tr_discovery tr_discovery;

/* The search path: TILERUN_BACKEND_PATH's entries (empty ones skipped), then the installed
 * tilerun's own "<prefix>/lib/tilerun/backends" where it exists and is not the default (below,
 * tr_discovery_installed_dir), then TR_INSTALL_PREFIX "/lib/tilerun/backends". Caller frees with
 * tr_discovery_free_dirs. */
tr_status *tr_backend_search_path(char ***out_dirs, size_t *out_count) TR_MUST_USE;
void tr_discovery_free_dirs(char ***dirs_p, size_t count);

/* Reads every "*.yaml" descriptor in the given directories (a directory that does not exist is
 * skipped). A malformed descriptor, one missing `name` or `library`, or a name already found in an
 * earlier directory is skipped and recorded as a failure; it never stops discovery. Fails only on
 * OutOfMemoryError. */
tr_status *tr_backend_discover(const char *const *dirs, size_t n_dirs,
                               tr_discovery **out) TR_MUST_USE;

size_t tr_discovery_count(const tr_discovery *found);
const tr_backend_descriptor *tr_discovery_at(const tr_discovery *found, size_t i);
size_t tr_discovery_failure_count(const tr_discovery *found);
const tr_discovery_failure *tr_discovery_failure_at(const tr_discovery *found, size_t i);

void tr_discovery_destroy(tr_discovery **found_p);

/* 1 with `<prefix><suffix>` in buf when that folder exists, where prefix is the install prefix of
 * the file holding tilerun's code (tr_plat_self_prefix: an installed libtilerun.so.0 in
 * <prefix>/lib): how an installed tilerun finds its manifest ("/share/tilerun/manifest") and
 * backends ("/lib/tilerun/backends") with no environment variable. 0 otherwise (buf empty). */
int tr_discovery_installed_dir(const char *suffix, char *buf, size_t size);

/* The manifest folder a runtime or the command reads when none is given: $TILERUN_MANIFEST_DIR
 * when set and not empty, else the installed tilerun's "<prefix>/share/tilerun/manifest" (written
 * into buf), else "manifest/spec" (under the working directory). Cannot fail. */
const char *tr_discovery_manifest_dir(char *buf, size_t size);

/* Where tr_discovery_manifest_dir's answer comes from, for a message when that folder cannot be
 * loaded: "$TILERUN_MANIFEST_DIR", "the install's share/tilerun/manifest", or the fallback's
 * description (neither set nor installed). */
const char *tr_discovery_manifest_dir_source(void);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_REGISTRY_DISCOVERY_H_ */
