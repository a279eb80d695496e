/* cli.h: the `tilerun` command, as a function the tests can call with their own streams. */
#ifndef TILERUN_TOOLS_CLI_H_
#define TILERUN_TOOLS_CLI_H_

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `tilerun argv[1..]`, writing results to `out` and diagnostics to `err`. Returns the
 * process exit code: 0 success, 1 a failure the command reports, 2 a usage error. */
int tr_cli_main(int argc, char **argv, FILE *out, FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TOOLS_CLI_H_ */
