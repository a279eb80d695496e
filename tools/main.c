/* main.c: the `tilerun` program; everything it does is in cli.c. A backend's code that ends the
 * process (exit() in its init, a crash in a detector) is named on the way out, and one that does
 * not return (a blocking init or detector) is named after TR_STALL_WARN_S seconds by a watchdog
 * thread: in-process code cannot be skipped, but the user learns which backend holds the run. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "platform/platform.h"
#include "registry/registry.h"
#include "tools/cli.h"

#define TR_STALL_WARN_S 10

static atomic_int g_done;

static void watch(void *arg) {
  (void)arg;
  uint64_t warned_since = 0;
  while (!atomic_load(&g_done)) {
    tr_plat_sleep_ns(100 * 1000 * 1000ull);
    uint64_t since = 0;
    const char *who = tr_registry_plugin_in_hand_since(&since);
    if (who != NULL && since != warned_since && tr_plat_now_ns() - since >= TR_STALL_WARN_S * 1000000000ull) {
      fprintf(stderr, "tilerun: %s has not returned for %d s; a backend runs in this process and cannot be "
              "skipped: stop the command and remove or fix that backend\n", who, TR_STALL_WARN_S);
      fflush(stderr);
      warned_since = since;
    }
  }
}

int main(int argc, char **argv) {
  tr_plat_last_words(tr_registry_plugin_in_hand);
  tr_plat_thread *watchdog = NULL;
  tr_status *no_thread = tr_plat_thread_start(watch, NULL, &watchdog); /* none: no stall warning */
  tr_status_destroy(&no_thread);
  int rc = tr_cli_main(argc, argv, stdout, stderr);
  atomic_store(&g_done, 1);
  tr_plat_thread_join(&watchdog);
  return rc;
}
