/* abi_too_new.c: a test plugin built for a backend ABI newer than the host's. */
#include "tilerun/backend.h"

const uint32_t tilerun_backend_abi = TR_BACKEND_ABI + 98;

tr_status *tilerun_backend_init(const tr_backend_api *api) {
  (void)api;
  return TR_STATUS(TR_INTERNAL, "never called");
}
