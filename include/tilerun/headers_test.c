/* headers_test.c: every public header compiles on its own as strict C11, and the core types
 * keep the sizes and values the rest of tilerun relies on. */
#include "tilerun/core.h"
#include "tilerun/device.h"
#include "tilerun/dtype.h"
#include "tilerun/hash.h"
#include "tilerun/status.h"
#include "tilerun/tensor_spec.h"
#include "tilerun/value.h"

#include <stdio.h>

_Static_assert(sizeof(tr_dtype) == 4, "tr_dtype is DLPack's 4-byte DLDataType");
_Static_assert(TR_OK == 0, "TR_OK is zero: a zeroed status code means success on the wire");
_Static_assert(TR_MAX_RANK == 8, "tr_tensor_spec's shape array is fixed at 8 axes");
_Static_assert(sizeof(tr_tensor_spec) <= 112, "a tensor spec stays small: memo keys copy them");

int main(void) {
  int failures = 0;
  /* Hashing is deterministic across runs: memo keys and build caches depend on it. */
  if (tr_hash_u64(TR_HASH_SEED, 42) != tr_hash_u64(TR_HASH_SEED, 42)) failures++;
  if (tr_hash_bytes(TR_HASH_SEED, "a", 1) == tr_hash_bytes(TR_HASH_SEED, "b", 1)) failures++;
  if (failures) fprintf(stderr, "headers_test: %d check(s) failed\n", failures);
  return failures != 0;
}
