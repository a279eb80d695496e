/* serve.h: `tilerun serve <component> --endpoint E`: one component hosted in this process. */
#ifndef TILERUN_TOOLS_SERVE_H_
#define TILERUN_TOOLS_SERVE_H_

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hosts `component` (validate or settle; or echo, which answers every request with its own bytes:
 * the benchmark's raw round trip) at `endpoint` until SIGTERM/SIGINT: loads the manifest
 * from `manifest_dir` (validate) or the backends from the search path (settle). `curve_secret`
 * (40 Z85 characters, or NULL) makes it require CurveZMQ; its public key is printed. Prints
 * "serving <component> at <endpoint>" once ready. Returns the exit status. */
int tr_serve_main(const char *component, const char *endpoint, const char *manifest_dir,
                  const char *curve_secret, FILE *out, FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TOOLS_SERVE_H_ */
