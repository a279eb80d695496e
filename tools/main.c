/* main.c: the `tilerun` program; everything it does is in cli.c. */
#include <stdio.h>

#include "tools/cli.h"

int main(int argc, char **argv) { return tr_cli_main(argc, argv, stdout, stderr); }
