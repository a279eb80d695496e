/* serve.h: `tilerun serve <component> --endpoint E`: one component hosted in this process. */
#ifndef TILERUN_TOOLS_SERVE_H_
#define TILERUN_TOOLS_SERVE_H_

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hosts `component` (validate, settle, select or build; or echo, which answers every request with its
 * own bytes: the benchmark's raw round trip) at `endpoint` until SIGTERM/SIGINT: loads the
 * manifest from `manifest_dir` (validate) or the backends from the search path (settle, select:
 * the in-tree ops' selectors with the kernel types plugins add; build: the in-tree kernels'
 * artifacts, compiled with NVRTC for the architecture each request names, no GPU needed). Select reads a device's facts
 * from the device, or from `device_facts` ("cuda:0=90,132,232448": arch, SMs, shared memory per
 * block), which lets a machine without the device select for it. `curve_secret` (a key given on
 * the command line) is refused, since every local user can read a process's arguments: the key
 * comes from $TILERUN_CURVE_SECRET or the file $TILERUN_CURVE_SECRET_FILE names, and makes it
 * require CurveZMQ (its public key is printed); $TILERUN_CURVE_CLIENTS names a file of the only
 * client public keys served. Prints "serving <component> at <endpoint>" once bound, its counts
 * and "stopped" at the end. Returns the exit status: 2 (bad usage) before anything is loaded for
 * an unknown component, a malformed `endpoint` (a tcp port must be * or 0 to 65535) or
 * `device_facts` entry (the message names the field and its value), or any `curve_secret`. */
int tr_serve_main(const char *component, const char *endpoint, const char *manifest_dir,
                  const char *curve_secret, const char *const *device_facts, size_t n_device_facts, FILE *out,
                  FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_TOOLS_SERVE_H_ */
