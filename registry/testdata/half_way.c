/* half_way.c: a test plugin whose registration fails part-way: a detector and one builder
 * register, then the same (op, target) again, which the host refuses; init passes that on. */
#include "tilerun/backend.h"

static tr_status *detect(void *ctx, const tr_device *device, int *claims) {
  (void)ctx;
  (void)device;
  *claims = 1; /* would claim everything, were it kept */
  return NULL;
}

static tr_status *build(void *ctx, const tr_build_request *req, tr_kernel *out) {
  (void)ctx;
  (void)req;
  (void)out;
  return TR_STATUS(TR_INTERNAL, "never called");
}

tr_status *tilerun_backend_init(const tr_backend_api *api) {
  TR_RETURN_IF_ERROR(api->register_detector(api->host, "half", detect, NULL));
  TR_RETURN_IF_ERROR(api->register_kernel_builder(api->host, "AddFwdOp", "half", build, NULL));
  return api->register_kernel_builder(api->host, "AddFwdOp", "half", build, NULL);
}
