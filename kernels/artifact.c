/* artifact.c: kernel artifacts: the key, the bytes form, and the disk cache in front of NVRTC. */
#include "kernels/artifact.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nvrtc.h"
#include "platform/platform.h"
#include "tilerun/hash.h"

static const char kMagic[8] = {'T', 'R', 'K', 'A', 'R', 'T', '1', '\0'};

/* Field offsets of the bytes form (artifact.h draws the layout). */
enum {
  kOffMagic = 0,
  kOffVersion = 8,
  kOffKey = 12,
  kOffName = 28,
  kOffEntry = kOffName + TR_ARTIFACT_NAME_SIZE,
  kOffArch = kOffEntry + TR_ARTIFACT_ENTRY_SIZE,
  kOffNvrtc = kOffArch + TR_ARTIFACT_ARCH_SIZE,
  kOffSize = kOffNvrtc + 4,
  kOffChecksum = kOffSize + 8,
  kOffCubin = kOffChecksum + 8,
};
_Static_assert(kOffCubin == TR_ARTIFACT_HEADER_SIZE, "the header layout drifted from artifact.h");

/* Part of every key: what tr_nvrtc_compile adds to the options (--gpu-architecture, --std) and
 * how the key is formed. Change it when either changes, so old cache entries no longer match. */
static const char kKeyRecipe[] = "tilerun artifact key 1; nvrtc --gpu-architecture=ARCH --std=c++17";

/* ---- Little helpers ---------------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The length of `s` when it ends (NUL) within `size` bytes, else `size`. */
static size_t bounded_len(const char *s, size_t size) {
  const char *nul = memchr(s, '\0', size);
  return nul != NULL ? (size_t)(nul - s) : size;
}

/* A malloc'd printf; NULL when memory runs out. */
static char *format_alloc(const char *fmt, ...) TR_PRINTF(1, 2);
static char *format_alloc(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  int need = vsnprintf(NULL, 0, fmt, args);
  va_end(args);
  if (need < 0) return NULL;
  char *text = malloc((size_t)need + 1);
  if (text == NULL) return NULL;
  va_start(args, fmt);
  vsnprintf(text, (size_t)need + 1, fmt, args);
  va_end(args);
  return text;
}

/* Folds a string, length first (so "ab","c" and "a","bc" differ). */
static uint64_t fold_text(uint64_t h, const char *text) {
  size_t len = strlen(text);
  h = tr_hash_u64(h, (uint64_t)len);
  return tr_hash_bytes(h, text, len);
}

/* The checksum of the bytes form: header bytes before the checksum, then the cubin. */
static uint64_t checksum(const uint8_t *header, const uint8_t *cubin, size_t size) {
  uint64_t h = tr_hash_bytes(TR_HASH_SEED, header, kOffChecksum);
  h = tr_hash_bytes(h, cubin, size);
  return tr_hash_u64(h, (uint64_t)size);
}

/* ---- The key ----------------------------------------------------------------------------- */

/* Two 64-bit lanes of tilerun's hash with different seeds over every input, each length-prefixed
 * and in a fixed order. */
static void artifact_key(const tr_artifact_source *src, int nvrtc_version, uint64_t key[2]) {
  static const uint64_t kSeeds[2] = {TR_HASH_SEED, UINT64_C(0x6c62272e07bb0142)};
  for (int lane = 0; lane < 2; lane++) {
    uint64_t h = fold_text(kSeeds[lane], kKeyRecipe);
    h = fold_text(h, src->name);
    h = fold_text(h, src->source);
    h = fold_text(h, src->arch);
    h = fold_text(h, src->entry);
    h = tr_hash_u64(h, (uint64_t)src->n_options);
    for (size_t i = 0; i < src->n_options; i++) h = fold_text(h, src->options[i]);
    h = tr_hash_u64(h, (uint64_t)(int64_t)nvrtc_version);
    key[lane] = tr_hash_u64(h, (uint64_t)lane);
  }
}

void tr_artifact_key_hex(const uint64_t key[2], char out[33]) {
  static const char kDigits[] = "0123456789abcdef";
  for (int lane = 0; lane < 2; lane++) {
    for (int i = 0; i < 16; i++) out[lane * 16 + i] = kDigits[(key[lane] >> (60 - 4 * i)) & 0xf];
  }
  out[32] = '\0';
}

/* ---- Bytes form -------------------------------------------------------------------------- */

tr_status *tr_artifact_encode(const tr_artifact *artifact, uint8_t **out, size_t *size) {
  assert(artifact != NULL && out != NULL && size != NULL);
  *out = NULL;
  *size = 0;
  const char *name = artifact->name;
  if (bounded_len(artifact->name, TR_ARTIFACT_NAME_SIZE) == TR_ARTIFACT_NAME_SIZE ||
      bounded_len(artifact->entry, TR_ARTIFACT_ENTRY_SIZE) == TR_ARTIFACT_ENTRY_SIZE ||
      bounded_len(artifact->arch, TR_ARTIFACT_ARCH_SIZE) == TR_ARTIFACT_ARCH_SIZE) {
    return TR_STATUS(TR_VALUE, "encoding a kernel artifact: its name, entry or arch is not a "
                     "NUL-terminated string within its field");
  }
  if (artifact->cubin == NULL || artifact->size == 0) {
    return TR_STATUS(TR_VALUE, "encoding kernel artifact '%s': it has no cubin", name);
  }
  if (artifact->size > SIZE_MAX - TR_ARTIFACT_HEADER_SIZE) {
    return TR_STATUS(TR_VALUE, "encoding kernel artifact '%s': a cubin of %zu bytes is too large",
                     name, artifact->size);
  }
  size_t total = TR_ARTIFACT_HEADER_SIZE + artifact->size;
  uint8_t *bytes = calloc(total, 1); /* zeroed: the string fields' padding */
  if (bytes == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "encoding kernel artifact '%s': %zu bytes", name, total);
  }
  memcpy(bytes + kOffMagic, kMagic, sizeof(kMagic));
  put_u32(bytes + kOffVersion, TR_ARTIFACT_FORMAT_VERSION);
  put_u64(bytes + kOffKey, artifact->key[0]);
  put_u64(bytes + kOffKey + 8, artifact->key[1]);
  memcpy(bytes + kOffName, artifact->name, strlen(artifact->name));
  memcpy(bytes + kOffEntry, artifact->entry, strlen(artifact->entry));
  memcpy(bytes + kOffArch, artifact->arch, strlen(artifact->arch));
  put_u32(bytes + kOffNvrtc, (uint32_t)artifact->nvrtc_version);
  put_u64(bytes + kOffSize, (uint64_t)artifact->size);
  memcpy(bytes + kOffCubin, artifact->cubin, artifact->size);
  put_u64(bytes + kOffChecksum, checksum(bytes, bytes + kOffCubin, artifact->size));
  *out = bytes;
  *size = total;
  return NULL;
}

/* Copies a string field of the bytes form into `dst` (of the field's size). Returns 0 when it
 * is not NUL-terminated within the field, or empty. */
static int take_text(char *dst, const uint8_t *field, size_t size) {
  size_t len = bounded_len((const char *)field, size);
  if (len == 0 || len == size) return 0;
  memcpy(dst, field, len + 1);
  return 1;
}

tr_status *tr_artifact_decode(const uint8_t *data, size_t size, tr_artifact *out) {
  assert(out != NULL);
  memset(out, 0, sizeof(*out));
  if (data == NULL || size < TR_ARTIFACT_HEADER_SIZE) {
    return TR_STATUS(TR_VALUE, "decoding a kernel artifact: %zu bytes is shorter than its "
                     "%d-byte header (truncated)", data == NULL ? 0 : size,
                     TR_ARTIFACT_HEADER_SIZE);
  }
  if (memcmp(data + kOffMagic, kMagic, sizeof(kMagic)) != 0) {
    return TR_STATUS(TR_VALUE, "decoding a kernel artifact: bad magic (the bytes do not start "
                     "with \"TRKART1\\0\"): not an artifact");
  }
  uint32_t version = get_u32(data + kOffVersion);
  if (version != TR_ARTIFACT_FORMAT_VERSION) {
    return TR_STATUS(TR_VALUE, "decoding a kernel artifact: format version %u, but this build "
                     "reads version %d", (unsigned)version, TR_ARTIFACT_FORMAT_VERSION);
  }
  uint64_t cubin_size = get_u64(data + kOffSize);
  if (cubin_size != (uint64_t)(size - TR_ARTIFACT_HEADER_SIZE)) {
    return TR_STATUS(TR_VALUE, "decoding a kernel artifact: the header announces a cubin of "
                     "%llu bytes but %zu follow (truncated or padded)",
                     (unsigned long long)cubin_size, size - TR_ARTIFACT_HEADER_SIZE);
  }
  if (cubin_size == 0) {
    return TR_STATUS(TR_VALUE, "decoding a kernel artifact: its cubin is empty");
  }
  const uint8_t *cubin = data + kOffCubin;
  uint64_t stored = get_u64(data + kOffChecksum);
  uint64_t computed = checksum(data, cubin, (size_t)cubin_size);
  if (stored != computed) {
    return TR_STATUS(TR_VALUE, "decoding a kernel artifact: checksum mismatch (stored "
                     "%016llx, computed %016llx): the bytes are corrupt",
                     (unsigned long long)stored, (unsigned long long)computed);
  }
  tr_artifact made;
  memset(&made, 0, sizeof(made));
  if (!take_text(made.name, data + kOffName, TR_ARTIFACT_NAME_SIZE) ||
      !take_text(made.entry, data + kOffEntry, TR_ARTIFACT_ENTRY_SIZE) ||
      !take_text(made.arch, data + kOffArch, TR_ARTIFACT_ARCH_SIZE)) {
    return TR_STATUS(TR_VALUE, "decoding a kernel artifact: its name, entry or arch is empty "
                     "or not NUL-terminated within its field");
  }
  made.key[0] = get_u64(data + kOffKey);
  made.key[1] = get_u64(data + kOffKey + 8);
  made.nvrtc_version = (int)(int32_t)get_u32(data + kOffNvrtc);
  made.size = (size_t)cubin_size;
  made.cubin = malloc(made.size);
  if (made.cubin == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "decoding kernel artifact '%s': a cubin of %zu bytes",
                     made.name, made.size);
  }
  memcpy(made.cubin, cubin, made.size);
  *out = made;
  return NULL;
}

void tr_artifact_clear(tr_artifact *artifact) {
  if (artifact == NULL) return;
  free(artifact->cubin);
  memset(artifact, 0, sizeof(*artifact));
}

/* ---- The cache --------------------------------------------------------------------------- */

/* Sets out->dir to base + suffix; returns 0 when that does not fit. */
static int set_dir(tr_artifact_cache *out, const char *base, const char *suffix) {
  int n = snprintf(out->dir, sizeof(out->dir), "%s%s", base, suffix);
  return n > 0 && (size_t)n < sizeof(out->dir);
}

void tr_artifact_cache_default(tr_artifact_cache *out) {
  assert(out != NULL);
  memset(out, 0, sizeof(*out));
  const char *dir = tr_plat_getenv("TILERUN_CACHE_DIR");
  const char *xdg = tr_plat_getenv("XDG_CACHE_HOME");
  const char *home = tr_plat_getenv("HOME");
  int ok = 0;
  if (dir != NULL && dir[0] != '\0') {
    if (strcmp(dir, "off") == 0) return;
    ok = set_dir(out, dir, "");
  } else if (xdg != NULL && xdg[0] == '/') { /* the XDG spec: a relative value is ignored */
    ok = set_dir(out, xdg, "/tilerun/kernels");
  } else if (home != NULL && home[0] != '\0') {
    ok = set_dir(out, home, "/.cache/tilerun/kernels");
  }
  if (!ok) {
    memset(out, 0, sizeof(*out));
    return;
  }
  out->enabled = 1;
}

/* Loads the cache file at `path` into *out when it is valid and is `expected`'s (key, name,
 * entry, arch, NVRTC version). Returns 1 then; 0 (with *out untouched) for a missing,
 * unreadable, corrupt or mismatching file. */
static int load_cached(const char *path, const tr_artifact *expected, tr_artifact *out) {
  char *data = NULL;
  size_t size = 0;
  tr_status *failed = tr_plat_read_file(path, &data, &size);
  if (failed != NULL) {
    tr_status_destroy(&failed);
    return 0;
  }
  tr_artifact found;
  failed = tr_artifact_decode((const uint8_t *)data, size, &found);
  free(data);
  if (failed != NULL) {
    tr_status_destroy(&failed);
    return 0;
  }
  if (found.key[0] != expected->key[0] || found.key[1] != expected->key[1] ||
      found.nvrtc_version != expected->nvrtc_version ||
      strcmp(found.name, expected->name) != 0 || strcmp(found.entry, expected->entry) != 0 ||
      strcmp(found.arch, expected->arch) != 0) {
    tr_artifact_clear(&found);
    return 0;
  }
  *out = found;
  return 1;
}

/* Stores `artifact` at `path` in the cache directory `dir`; a failure becomes *warning (when
 * warning is not NULL), never an error. */
static void store(const char *dir, const char *path, const tr_artifact *artifact,
                  char **warning) {
  uint8_t *bytes = NULL;
  size_t size = 0;
  tr_status *failed = tr_artifact_encode(artifact, &bytes, &size);
  if (failed == NULL) failed = tr_plat_make_dirs(dir);
  if (failed == NULL) failed = tr_plat_write_file_atomic(path, bytes, size);
  free(bytes);
  if (failed == NULL) return;
  if (warning != NULL) {
    *warning = format_alloc("kernel cache: '%s' for %s was built but could not be stored as "
                            "'%s': %s", artifact->name, artifact->arch, path,
                            tr_status_message(failed));
  }
  tr_status_destroy(&failed);
}

/* 1 when `s` is a C identifier. */
static int is_identifier(const char *s) {
  if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return 0;
  for (s++; *s != '\0'; s++) {
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
          *s == '_')) {
      return 0;
    }
  }
  return 1;
}

/* A TR_VALUE for an unusable field of `src`, else NULL. */
static tr_status *check_source(const tr_artifact_source *src) {
  const char *name = src->name;
  if (name == NULL || name[0] == '\0') {
    return TR_STATUS(TR_VALUE, "building a kernel artifact: its name is missing");
  }
  if (strlen(name) >= TR_ARTIFACT_NAME_SIZE) {
    return TR_STATUS(TR_VALUE, "building kernel artifact '%s': its name is %zu bytes, at most "
                     "%d fit", name, strlen(name), TR_ARTIFACT_NAME_SIZE - 1);
  }
  if (src->source == NULL) {
    return TR_STATUS(TR_VALUE, "building kernel artifact '%s': its source is missing", name);
  }
  if (src->arch == NULL || src->arch[0] == '\0') {
    return TR_STATUS(TR_VALUE, "building kernel artifact '%s': its arch is missing", name);
  }
  if (strlen(src->arch) >= TR_ARTIFACT_ARCH_SIZE) {
    return TR_STATUS(TR_VALUE, "building kernel artifact '%s': arch '%s' is %zu bytes, at most "
                     "%d fit", name, src->arch, strlen(src->arch), TR_ARTIFACT_ARCH_SIZE - 1);
  }
  if (src->entry == NULL || src->entry[0] == '\0') {
    return TR_STATUS(TR_VALUE, "building kernel artifact '%s': its entry is missing", name);
  }
  if (strlen(src->entry) >= TR_ARTIFACT_ENTRY_SIZE || !is_identifier(src->entry)) {
    return TR_STATUS(TR_VALUE, "building kernel artifact '%s': entry '%s' is not a C identifier "
                     "of at most %d bytes", name, src->entry, TR_ARTIFACT_ENTRY_SIZE - 1);
  }
  if (src->n_options > 0 && src->options == NULL) {
    return TR_STATUS(TR_VALUE, "building kernel artifact '%s': %zu options announced but the "
                     "option list is missing", name, src->n_options);
  }
  for (size_t i = 0; i < src->n_options; i++) {
    if (src->options[i] == NULL) {
      return TR_STATUS(TR_VALUE, "building kernel artifact '%s': option %zu of %zu is missing",
                       name, i, src->n_options);
    }
  }
  return NULL;
}

tr_status *tr_artifact_build(const tr_artifact_source *src, const tr_artifact_cache *cache,
                             tr_artifact *out, int *from_cache, char **warning) {
  assert(src != NULL && out != NULL);
  memset(out, 0, sizeof(*out));
  if (from_cache != NULL) *from_cache = 0;
  if (warning != NULL) *warning = NULL;
  TR_RETURN_IF_ERROR(check_source(src));

  tr_artifact made;
  memset(&made, 0, sizeof(made));
  memcpy(made.name, src->name, strlen(src->name) + 1);
  memcpy(made.entry, src->entry, strlen(src->entry) + 1);
  memcpy(made.arch, src->arch, strlen(src->arch) + 1);
  made.nvrtc_version = tr_nvrtc_version();
  artifact_key(src, made.nvrtc_version, made.key);

  /* No NVRTC (version -1): nothing in the cache can be known to match; compiling says why. */
  char path[sizeof(cache->dir) + 64];
  int cached = cache != NULL && cache->enabled && cache->dir[0] != '\0' &&
               made.nvrtc_version >= 0;
  if (cached) {
    char hex[33];
    tr_artifact_key_hex(made.key, hex);
    size_t dir_len = bounded_len(cache->dir, sizeof(cache->dir));
    if (dir_len == sizeof(cache->dir)) {
      cached = 0; /* not a string: a broken cache struct, treated as no cache */
    } else {
      snprintf(path, sizeof(path), "%s%s%s.cubin", cache->dir,
               cache->dir[dir_len - 1] == '/' ? "" : "/", hex);
    }
  }
  if (cached && load_cached(path, &made, out)) {
    if (from_cache != NULL) *from_cache = 1;
    return NULL;
  }

  tr_cubin cubin = {0};
  TR_RETURN_IF_ERROR(tr_nvrtc_compile(src->name, src->source, src->arch, src->options,
                                      src->n_options, &cubin));
  made.cubin = cubin.data;
  made.size = cubin.size;
  free(cubin.log);
  if (cached) store(cache->dir, path, &made, warning);
  *out = made;
  return NULL;
}
