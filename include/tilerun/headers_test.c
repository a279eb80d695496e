/* headers_test.c: every public header compiles on its own as strict C11, and the core types
 * keep the sizes and values the rest of tilerun relies on. */
#include "tilerun/kernel_type.h" /* first: it stands alone, and brings backend.h */
#include "tilerun/backend.h"
#include "tilerun/core.h"
#include "tilerun/device.h"
#include "tilerun/dtype.h"
#include "tilerun/hash.h"
#include "tilerun/inspect.h"
#include "tilerun/op_def.h"
#include "tilerun/status.h"
#include "tilerun/tensor_spec.h"
#include "tilerun/value.h"
#include "tilerun/version.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(tr_dtype) == 4, "tr_dtype is DLPack's 4-byte DLDataType");
_Static_assert(TR_OK == 0, "TR_OK is zero: a zeroed status code means success on the wire");
_Static_assert(TR_MAX_RANK == 8, "tr_tensor_spec's shape array is fixed at 8 axes");
_Static_assert(sizeof(tr_tensor_spec) <= 112, "a tensor spec stays small: memo keys copy them");

_Static_assert(TR_KERNEL_TYPE_MIN_SIZE == sizeof(tr_kernel_type),
               "every member of tr_kernel_type is version 1's: a new one is appended after ctx");
_Static_assert(TR_KERNEL_MIN_SIZE == sizeof(tr_kernel),
               "every member of tr_kernel is version 1's: a new one is appended after release");
_Static_assert(offsetof(tr_kernel_type, struct_size) == 0 && offsetof(tr_kernel, struct_size) == 0 &&
                   offsetof(tr_backend_api, struct_size) == 0,
               "a plugin-facing struct starts with its size");
_Static_assert(offsetof(tr_backend_api, find_interface) > offsetof(tr_backend_api, register_kernel_type),
               "the API table grows at its end only");

int main(void) {
  int failures = 0;
  /* the library is the headers' version, and the number matches the parts */
  if (strcmp(tr_version(), TILERUN_VERSION) != 0 || TILERUN_VERSION_NUMBER != 400) {
    fprintf(stderr, "version: library %s, headers %s (%d)\n", tr_version(), TILERUN_VERSION, TILERUN_VERSION_NUMBER);
    failures++;
  }
  /* The call-spec accessors are inline: a plugin reads fields with no tilerun library. */
  static const tr_call_field fields[] = {{"row", TR_VALUE_INT, 0, 0, {0}}, {"eps", TR_VALUE_FLOAT, 0, 0, {0}}};
  static const tr_call_spec_type type = {"TestCall", 2, fields};
  tr_call_spec spec;
  memset(&spec, 0, sizeof(spec));
  spec.type = &type;
  spec.values[0].kind = TR_VALUE_INT;
  spec.values[0].as.i = 7;
  spec.values[1].kind = TR_VALUE_FLOAT;
  spec.values[1].as.f = 0.5;
  if (tr_call_spec_int(&spec, "row") != 7 || tr_call_spec_float(&spec, "row") != 7.0) failures++;
  if (tr_call_spec_float(&spec, "eps") != 0.5 || tr_call_spec_int(&spec, "eps") != 0) failures++;
  if (tr_call_spec_get(&spec, "none") != NULL || tr_call_spec_get(&spec, "eps") != &spec.values[1]) failures++;
  tr_backend_api api;
  memset(&api, 0, sizeof(api));
  api.struct_size = offsetof(tr_backend_api, find_interface); /* an older tilerun's table */
  if (TR_STRUCT_HAS(&api, tr_backend_api, find_interface) || !TR_STRUCT_HAS(&api, tr_backend_api, register_kernel_type)) {
    failures++;
  }
  /* Hashing is deterministic across runs: memo keys and build caches depend on it. */
  if (tr_hash_u64(TR_HASH_SEED, 42) != tr_hash_u64(TR_HASH_SEED, 42)) failures++;
  if (tr_hash_bytes(TR_HASH_SEED, "a", 1) == tr_hash_bytes(TR_HASH_SEED, "b", 1)) failures++;
  if (failures) fprintf(stderr, "headers_test: %d check(s) failed\n", failures);
  return failures != 0;
}
