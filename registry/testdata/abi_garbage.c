/* abi_garbage.c: a test plugin whose ABI symbol is no uint32_t (bytes of text, as a symbol of the
 * wrong type reads). */
#include "tilerun/backend.h"

const char tilerun_backend_abi[8] = "abcdefg";

tr_status *tilerun_backend_init(const tr_backend_api *api) {
  (void)api;
  return TR_STATUS(TR_INTERNAL, "never called");
}
