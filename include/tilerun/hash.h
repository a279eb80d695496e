/* hash.h: the 64-bit hash every tilerun key is built from (FNV-1a bytes, mixed). Header only. */
#ifndef TILERUN_HASH_H_
#define TILERUN_HASH_H_

#include <stddef.h>
#include <stdint.h>

#define TR_HASH_SEED UINT64_C(0xcbf29ce484222325)

/* Folds `size` bytes into hash `h`. Cannot fail. */
static inline uint64_t tr_hash_bytes(uint64_t h, const void *data, size_t size) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < size; i++) {
    h ^= p[i];
    h *= UINT64_C(0x100000001b3);
  }
  return h;
}

/* Folds one 64-bit word into hash `h` (a multiply-xorshift mix). Cannot fail. */
static inline uint64_t tr_hash_u64(uint64_t h, uint64_t v) {
  h ^= v + UINT64_C(0x9e3779b97f4a7c15) + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= UINT64_C(0xff51afd7ed558ccd);
  h ^= h >> 33;
  return h;
}

#endif /* TILERUN_HASH_H_ */
