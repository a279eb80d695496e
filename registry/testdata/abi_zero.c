/* abi_zero.c: a test plugin declaring backend ABI 0, which no tilerun has. */
#include "tilerun/backend.h"

const uint32_t tilerun_backend_abi = 0;

tr_status *tilerun_backend_init(const tr_backend_api *api) {
  (void)api;
  return TR_STATUS(TR_INTERNAL, "never called");
}
