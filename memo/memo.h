/* memo.h: the memo table: one value (a built kernel) per call key, where the key is the call's
 * device plus (dtype, shape) per input in signature order, an absent optional input recorded as
 * such. Keys are built straight from the call's DLTensors (strides and data are not part of it),
 * hashed once, and stored compactly. No locking inside: the owner serialises access. */
#ifndef TILERUN_MEMO_MEMO_H_
#define TILERUN_MEMO_MEMO_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "tilerun/status.h"
#include "tilerun/tensor_spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest key, in bytes: 16 inputs of rank 8. */
#define TR_MEMO_KEY_MAX (16 * (16 + 8 * TR_MAX_RANK))

/* A key being looked up: its bytes and hash. Lives on the caller's stack. */
typedef struct tr_memo_key {
  uint64_t hash;
  uint32_t size;
  uint8_t bytes[TR_MEMO_KEY_MAX];
} tr_memo_key;

/* Builds the key of a call from its input tensors (NULL for an absent optional input): each
 * input's DLDevice, dtype and shape. Returns 0 when the key would not fit (more than 16 inputs or
 * a rank above TR_MAX_RANK; such a call fails validation anyway). Cannot fail otherwise; does not
 * allocate. */
int tr_memo_key_from_dl(const DLTensor *const *inputs, size_t n_inputs, tr_memo_key *out);

/* The same key from tensor specs (devices given as DLPack's), for tests and builders' callers. */
int tr_memo_key_from_specs(const tr_tensor_spec *const *specs, const DLDevice *devices,
                           size_t n_inputs, tr_memo_key *out);

typedef struct tr_memo tr_memo;

/* An empty memo. OutOfMemoryError on failure. Single owner. */
tr_status *tr_memo_new(tr_memo **out) TR_MUST_USE;

/* The value stored for the key, or NULL. One hash probe sequence; no allocation. */
void *tr_memo_find(const tr_memo *memo, const tr_memo_key *key);

/* Stores a value (not NULL) for a key not yet present. OutOfMemoryError leaves the memo as it
 * was. */
tr_status *tr_memo_insert(tr_memo *memo, const tr_memo_key *key, void *value) TR_MUST_USE;

/* Drops every entry, calling `drop` (may be NULL) on each value. The memo stays usable. */
void tr_memo_clear(tr_memo *memo, void (*drop)(void *ctx, void *value), void *ctx);

/* Calls `fn` on every value, in no particular order. */
void tr_memo_each(const tr_memo *memo, void (*fn)(void *ctx, void *value), void *ctx);

size_t tr_memo_count(const tr_memo *memo);

/* Bytes the memo itself holds (table and keys; the values aside). */
size_t tr_memo_bytes(const tr_memo *memo);

void tr_memo_destroy(tr_memo **memo_p);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_MEMO_MEMO_H_ */
