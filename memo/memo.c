/* memo.c: an open-addressing hash table (linear probing, power-of-two size, load <= 3/4) whose
 * keys live back to back in one growing arena. */
#include "memo/memo.h"

#include <stdlib.h>
#include <string.h>

#include "tilerun/hash.h"

typedef struct slot {
  uint64_t hash;   /* 0: empty (a real hash of 0 is stored as 1) */
  uint32_t offset; /* the key's bytes in the arena */
  uint32_t size;
  void *value;
} slot;

struct tr_memo {
  slot *slots;
  size_t capacity; /* a power of two */
  size_t count;
  uint8_t *arena;
  size_t arena_used, arena_capacity;
};

static void put_u32(uint8_t *at, uint32_t v) { memcpy(at, &v, 4); }

static void put_i64(uint8_t *at, int64_t v) { memcpy(at, &v, 8); }

/* One input's part of a key: marker, device, dtype, rank, dims. Returns bytes written. */
static uint32_t key_part(uint8_t *at, int present, DLDevice device, DLDataType dtype, int32_t rank,
                         const int64_t *shape) {
  if (!present) {
    put_u32(at, 0xffffffffu); /* an absent optional input */
    return 4;
  }
  put_u32(at, (uint32_t)rank);
  put_u32(at + 4, ((uint32_t)device.device_type << 16) ^ (uint32_t)device.device_id);
  put_u32(at + 8, (uint32_t)device.device_id);
  put_u32(at + 12, ((uint32_t)dtype.code << 24) | ((uint32_t)dtype.bits << 16) | dtype.lanes);
  for (int32_t i = 0; i < rank; i++) put_i64(at + 16 + 8 * i, shape[i]);
  return 16 + 8 * (uint32_t)rank;
}

static void finish_key(tr_memo_key *key) {
  uint64_t h = TR_HASH_SEED;
  for (uint32_t i = 0; i + 8 <= key->size; i += 8) {
    uint64_t word;
    memcpy(&word, key->bytes + i, 8);
    h = tr_hash_u64(h, word);
  }
  if (key->size % 8) {
    uint64_t word = 0;
    memcpy(&word, key->bytes + key->size - key->size % 8, key->size % 8);
    h = tr_hash_u64(h, word);
  }
  key->hash = h ? h : 1;
}

int tr_memo_key_from_dl(const DLTensor *const *inputs, size_t n_inputs, tr_memo_key *out) {
  if (n_inputs > 16) return 0;
  uint32_t size = 0;
  for (size_t i = 0; i < n_inputs; i++) {
    const DLTensor *t = inputs[i];
    /* a rank out of range, or dims not given: no key (validation refuses it) */
    if (t != NULL && (t->ndim < 0 || t->ndim > TR_MAX_RANK || (t->ndim > 0 && t->shape == NULL))) return 0;
    size += t ? key_part(out->bytes + size, 1, t->device, t->dtype, t->ndim, t->shape)
              : key_part(out->bytes + size, 0, (DLDevice){kDLCPU, 0}, (DLDataType){0, 0, 0}, 0, NULL);
  }
  out->size = size;
  finish_key(out);
  return 1;
}

int tr_memo_key_from_specs(const tr_tensor_spec *const *specs, const DLDevice *devices,
                           size_t n_inputs, tr_memo_key *out) {
  if (n_inputs > 16) return 0;
  uint32_t size = 0;
  for (size_t i = 0; i < n_inputs; i++) {
    const tr_tensor_spec *s = specs[i];
    size += s ? key_part(out->bytes + size, 1, devices[i], s->dtype, s->rank, s->shape)
              : key_part(out->bytes + size, 0, (DLDevice){kDLCPU, 0}, (DLDataType){0, 0, 0}, 0, NULL);
  }
  out->size = size;
  finish_key(out);
  return 1;
}

tr_status *tr_memo_new(tr_memo **out) {
  *out = NULL;
  tr_memo *memo = calloc(1, sizeof(*memo));
  if (memo == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "allocating a memo");
  *out = memo;
  return NULL;
}

void *tr_memo_find(const tr_memo *memo, const tr_memo_key *key) {
  if (memo->capacity == 0) return NULL;
  size_t mask = memo->capacity - 1;
  for (size_t i = (size_t)key->hash & mask;; i = (i + 1) & mask) {
    const slot *s = &memo->slots[i];
    if (s->hash == 0) return NULL;
    if (s->hash == key->hash && s->size == key->size &&
        memcmp(memo->arena + s->offset, key->bytes, key->size) == 0) {
      return s->value;
    }
  }
}

static void place(slot *slots, size_t capacity, const slot *s) {
  size_t mask = capacity - 1;
  size_t i = (size_t)s->hash & mask;
  while (slots[i].hash != 0) i = (i + 1) & mask;
  slots[i] = *s;
}

static int grow_table(tr_memo *memo) {
  size_t capacity = memo->capacity ? memo->capacity * 2 : 16;
  slot *slots = calloc(capacity, sizeof(slot));
  if (slots == NULL) return 0;
  for (size_t i = 0; i < memo->capacity; i++) {
    if (memo->slots[i].hash != 0) place(slots, capacity, &memo->slots[i]);
  }
  free(memo->slots);
  memo->slots = slots;
  memo->capacity = capacity;
  return 1;
}

tr_status *tr_memo_insert(tr_memo *memo, const tr_memo_key *key, void *value) {
  if ((memo->count + 1) * 4 > memo->capacity * 3 && !grow_table(memo)) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "growing a memo of %zu entries", memo->count);
  }
  if (memo->arena_used + key->size > memo->arena_capacity) {
    size_t capacity = memo->arena_capacity ? memo->arena_capacity : 1024;
    while (capacity < memo->arena_used + key->size) capacity *= 2;
    if (capacity > UINT32_MAX) return TR_STATUS(TR_OUT_OF_MEMORY, "a memo's keys pass 4 GiB");
    uint8_t *arena = realloc(memo->arena, capacity);
    if (arena == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "growing a memo's keys to %zu bytes", capacity);
    memo->arena = arena;
    memo->arena_capacity = capacity;
  }
  memcpy(memo->arena + memo->arena_used, key->bytes, key->size);
  slot s = {key->hash, (uint32_t)memo->arena_used, key->size, value};
  memo->arena_used += key->size;
  place(memo->slots, memo->capacity, &s);
  memo->count++;
  return NULL;
}

void tr_memo_each(const tr_memo *memo, void (*fn)(void *ctx, void *value), void *ctx) {
  for (size_t i = 0; i < memo->capacity; i++) {
    if (memo->slots[i].hash != 0) fn(ctx, memo->slots[i].value);
  }
}

void tr_memo_clear(tr_memo *memo, void (*drop)(void *ctx, void *value), void *ctx) {
  if (drop != NULL) tr_memo_each(memo, drop, ctx);
  if (memo->capacity > 0) memset(memo->slots, 0, memo->capacity * sizeof(slot));
  memo->count = 0;
  memo->arena_used = 0;
}

size_t tr_memo_count(const tr_memo *memo) { return memo->count; }

size_t tr_memo_bytes(const tr_memo *memo) {
  return sizeof(*memo) + memo->capacity * sizeof(slot) + memo->arena_capacity;
}

void tr_memo_destroy(tr_memo **memo_p) {
  if (memo_p == NULL || *memo_p == NULL) return;
  tr_memo *memo = *memo_p;
  *memo_p = NULL;
  free(memo->slots);
  free(memo->arena);
  free(memo);
}
