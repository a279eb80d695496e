/* builds.h: the artifacts built for in-tree implementations, by build identity, kept for the life
 * of a runtime. The kernel-selection spec has a factory run only the first time its build
 * identity appears; a runtime's memo keys on each call's input signature instead, so a second
 * batch size, or a second op with the same parameters, is a memo miss with an identity already
 * built. With this, that miss loads the kept artifacts on its device (tr_intree_kernel: their
 * modules are already loaded there) instead of asking the build component again, which would
 * read the disk cache, or run NVRTC where the cache is off.
 *
 * The identity of an in-tree implementation is the whole call spec (they declare no entry_for),
 * device facts included. Entries are never evicted: a runtime holds at most `max_entries`
 * artifact sets and `max_bytes` of cubins; past that nothing more is kept (each later identity
 * goes to the build component on every miss, as before). Thread-safe. */
#ifndef TILERUN_KERNELS_INTREE_BUILDS_H_
#define TILERUN_KERNELS_INTREE_BUILDS_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/artifact.h"
#include "selector/selector.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_intree_builds tr_intree_builds;

/* The limits a runtime uses. */
#define TR_INTREE_BUILDS_MAX_ENTRIES 4096
#define TR_INTREE_BUILDS_MAX_BYTES ((size_t)256 << 20)

tr_status *tr_intree_builds_new(size_t max_entries, size_t max_bytes, tr_intree_builds **out) TR_MUST_USE;
void tr_intree_builds_destroy(tr_intree_builds **builds_p); /* NULL and *NULL allowed */

/* The artifacts kept for `type` and a call spec equal to `call` (*n of them, valid until the
 * builds are destroyed), or NULL. */
const tr_artifact *tr_intree_builds_find(tr_intree_builds *builds, const tr_kernel_type *type,
                                         const tr_call_spec *call, size_t *n);

/* Keeps copies of `arts` (1 or 2, each with a cubin) for `type` and `call`. Nothing is kept where
 * that identity is already kept or a limit would be passed (*kept says whether it was; may be
 * NULL). An artifact without a cubin is a ValueError; OutOfMemoryError keeps nothing. */
tr_status *tr_intree_builds_add(tr_intree_builds *builds, const tr_kernel_type *type, const tr_call_spec *call,
                                const tr_artifact *arts, size_t n, int *kept) TR_MUST_USE;

typedef struct tr_intree_builds_stats {
  uint64_t hits;    /* finds that gave artifacts */
  uint64_t entries; /* identities kept */
  uint64_t bytes;   /* cubin bytes kept */
} tr_intree_builds_stats;
tr_intree_builds_stats tr_intree_builds_get_stats(tr_intree_builds *builds);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_INTREE_BUILDS_H_ */
