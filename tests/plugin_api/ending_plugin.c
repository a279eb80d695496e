/* ending_plugin.c: a backend that ends or holds the process from its own code, as $TR_ENDING_MODE
 * says: "exit" calls exit(0) in its init, "crash" raises SIGSEGV there, "hang" sleeps 12 s there
 * (then registers as below), "detect" registers a detector (target 'ending') that raises SIGSEGV
 * when it is asked. The `tilerun` command must name the backend (tools/last_words_test.sh). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tilerun/backend.h"

static tr_status *crash(void *ctx, const tr_device *device, int *claims) {
  (void)ctx;
  (void)device;
  (void)claims;
  raise(SIGSEGV);
  return NULL;
}

__attribute__((visibility("default"))) tr_status *tilerun_backend_init(const tr_backend_api *api) {
  const char *mode = getenv("TR_ENDING_MODE");
  if (mode != NULL && strcmp(mode, "exit") == 0) exit(0);
  if (mode != NULL && strcmp(mode, "crash") == 0) raise(SIGSEGV);
  if (mode != NULL && strcmp(mode, "hang") == 0) {
    struct timespec t = {12, 0};
    while (nanosleep(&t, &t) != 0) {}
  }
  return api->register_detector(api->host, "ending", crash, NULL);
}
