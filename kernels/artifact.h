/* artifact.h: a compiled kernel (cubin, entry, arch, 128-bit key), its bytes form and its disk
 * cache, so a kernel is compiled by NVRTC once per machine rather than once per process. */
#ifndef TILERUN_KERNELS_ARTIFACT_H_
#define TILERUN_KERNELS_ARTIFACT_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for the strings of an artifact, NUL included: a longer name, entry or arch is refused. */
#define TR_ARTIFACT_NAME_SIZE 64
#define TR_ARTIFACT_ENTRY_SIZE 64
#define TR_ARTIFACT_ARCH_SIZE 16

/* The bytes form (tr_artifact_encode), which is also the cache file's content. All integers are
 * little-endian; strings are NUL-padded to their field's size:
 *     0  magic "TRKART1\0" (8 bytes)        8  format version (u32, TR_ARTIFACT_FORMAT_VERSION)
 *    12  key[0], key[1] (u64 each)         28  name (64)        92  entry (64)
 *   156  arch (16)                        172  NVRTC version (i32)
 *   176  cubin size (u64)                 184  checksum (u64): the 64-bit hash of bytes 0..183
 *   192  the cubin                                              and of the cubin */
#define TR_ARTIFACT_FORMAT_VERSION 1
#define TR_ARTIFACT_HEADER_SIZE 192

/* Everything that changes a kernel's bytes; the strings are the caller's, only read. */
typedef struct tr_artifact_source {
  const char *name;   /* e.g. "rms_norm_block": in messages; at most 63 bytes, not empty */
  const char *source; /* the full CUDA C text */
  const char *arch;   /* "sm_90a", "sm_80": at most 15 bytes */
  const char *const *options; /* extra NVRTC options, in order (e.g. "-DTR_N=4096"); */
  size_t n_options;           /* options may be NULL when n_options is 0 */
  const char *entry;  /* the extern "C" __global__ function's name: a C identifier, <= 63 bytes */
} tr_artifact_source;

/* A compiled kernel. The caller owns `cubin` (malloc'd): free it with tr_artifact_clear. */
typedef struct tr_artifact {
  char name[TR_ARTIFACT_NAME_SIZE];
  char entry[TR_ARTIFACT_ENTRY_SIZE];
  char arch[TR_ARTIFACT_ARCH_SIZE];
  int nvrtc_version; /* tr_nvrtc_version() of the NVRTC that compiled it */
  uint64_t key[2];   /* hash of name, source, options (in order), arch, entry, NVRTC version */
  uint8_t *cubin;
  size_t size;
} tr_artifact;

/* Where artifacts are cached: one file per key, "<dir>/<key as 32 hex digits>.cubin". */
typedef struct tr_artifact_cache {
  char dir[1024];
  int enabled; /* 0: no cache (as a NULL cache) */
} tr_artifact_cache;

/* The cache of this process's environment: $TILERUN_CACHE_DIR when set and not empty, else
 * $XDG_CACHE_HOME/tilerun/kernels (when absolute), else $HOME/.cache/tilerun/kernels.
 * TILERUN_CACHE_DIR=off disables it, and so does having none of those (or a path that does not
 * fit in `dir`): then enabled is 0 and dir "". Nothing is created here. Cannot fail. Thread-safe
 * unless another thread sets the environment meanwhile. */
void tr_artifact_cache_default(tr_artifact_cache *out);

/* Builds the artifact of `src`. Sets *out to zeros, *from_cache (may be NULL) to 0 and *warning
 * (may be NULL) to NULL first.
 * With a cache (`cache` not NULL and enabled) it looks there first: a valid entry for the key is
 * loaded and *from_cache set to 1. Otherwise it compiles with tr_nvrtc_compile and stores the
 * result: into a temporary file in the cache directory (made, with its parents, when missing),
 * renamed over the entry, so a reader never sees a partial file. A cache file that is corrupt or
 * does not match (bad magic, truncated, wrong key, name, entry, arch or NVRTC version, wrong
 * size, checksum mismatch) is never loaded: it is rebuilt and overwritten. A cache that cannot be
 * written does not fail the build: *warning then receives a malloc'd message naming the file and
 * the reason (the caller frees it); a cache that cannot be read is a miss.
 * Fails with TR_VALUE naming the field of `src` that is missing or too long (or an entry that is
 * not a C identifier), TR_COMPILE for a compile failure (naming src->name and arch, carrying
 * NVRTC's log) or when NVRTC cannot be loaded, TR_OUT_OF_MEMORY. On failure *out stays zeroed.
 * On success the caller owns *out (tr_artifact_clear). Thread-safe: concurrent builds of one
 * key each compile or load, and the cache file stays whole. */
tr_status *tr_artifact_build(const tr_artifact_source *src, const tr_artifact_cache *cache,
                             tr_artifact *out, int *from_cache, char **warning) TR_MUST_USE;

/* Frees an artifact's cubin and zeroes it. NULL allowed. Cannot fail. */
void tr_artifact_clear(tr_artifact *artifact);

/* Writes the key as 32 lowercase hex digits (key[0] then key[1]) and a NUL into `out`: the cache
 * file's name without ".cubin". Cannot fail. Thread-safe. */
void tr_artifact_key_hex(const uint64_t key[2], char out[33]);

/* Encodes `artifact` into its bytes form (see TR_ARTIFACT_HEADER_SIZE), to send it between
 * processes. Sets *out to NULL and *size to 0 first; on success *out is malloc'd, the caller's,
 * holding *size bytes. Fails with TR_VALUE when the artifact has no cubin or a string that does
 * not fit its field, TR_OUT_OF_MEMORY. Thread-safe. */
tr_status *tr_artifact_encode(const tr_artifact *artifact, uint8_t **out,
                              size_t *size) TR_MUST_USE;

/* Decodes `size` bytes of the bytes form into *out, which is zeroed first. Validates it as the
 * cache does: too short, a bad magic, another format version, a cubin size that disagrees with
 * `size` (truncated or trailing bytes), an empty cubin, a checksum mismatch or an unterminated or
 * empty string is a TR_VALUE error saying which (never a crash, whatever the bytes);
 * TR_OUT_OF_MEMORY. On failure *out stays zeroed; on success the caller owns it
 * (tr_artifact_clear). Thread-safe. */
tr_status *tr_artifact_decode(const uint8_t *data, size_t size, tr_artifact *out) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_ARTIFACT_H_ */
