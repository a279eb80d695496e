/* main.c: the `tilerun` program; everything it does is in cli.c. A backend's code that ends the
 * process (exit() in its init, a crash in a detector) is named on the way out. */
#include <stdio.h>

#include "platform/platform.h"
#include "registry/registry.h"
#include "tools/cli.h"

int main(int argc, char **argv) {
  tr_plat_last_words(tr_registry_plugin_in_hand);
  return tr_cli_main(argc, argv, stdout, stderr);
}
