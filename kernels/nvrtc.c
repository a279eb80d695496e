/* nvrtc.c: NVRTC compilation to cubins; NVRTC's errors and log become a CompileError here. */
#include "kernels/nvrtc.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The program's log, as a malloc'd string ("" when there is none or memory runs out). */
static char *program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0) size = 1;
  char *log = calloc(size, 1);
  if (log != NULL && size > 1) nvrtcGetProgramLog(prog, log);
  return log;
}

tr_status *tr_nvrtc_compile(const char *name, const char *source, const char *arch,
                            const char *const *options, size_t n_options, tr_cubin *out) {
  if (arch == NULL || strncmp(arch, "sm_", 3) != 0 || strlen(arch) > 16) {
    return TR_STATUS(TR_COMPILE, "compiling '%s': architecture '%s' is not of the form sm_NN[a]",
                     name, arch ? arch : "(null)");
  }
  nvrtcProgram prog;
  nvrtcResult rc = nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
  if (rc != NVRTC_SUCCESS) {
    return TR_STATUS(TR_COMPILE, "compiling '%s' for %s: %s", name, arch, nvrtcGetErrorString(rc));
  }
  const char **argv = malloc((n_options + 2) * sizeof(char *));
  if (argv == NULL) {
    nvrtcDestroyProgram(&prog);
    return TR_STATUS(TR_OUT_OF_MEMORY, "compiling '%s': option list", name);
  }
  char arch_option[40];
  snprintf(arch_option, sizeof(arch_option), "--gpu-architecture=%s", arch);
  argv[0] = arch_option;
  argv[1] = "--std=c++17";
  for (size_t i = 0; i < n_options; i++) argv[2 + i] = options[i];
  rc = nvrtcCompileProgram(prog, (int)(n_options + 2), argv);
  free(argv);
  char *log = program_log(prog);
  tr_status *status = NULL;
  size_t size = 0;
  uint8_t *data = NULL;
  if (rc != NVRTC_SUCCESS) {
    status = TR_STATUS(TR_COMPILE, "compiling '%s' for %s failed (%s):\n%s", name, arch,
                       nvrtcGetErrorString(rc), log ? log : "");
  } else if (nvrtcGetCUBINSize(prog, &size) != NVRTC_SUCCESS || size == 0) {
    status = TR_STATUS(TR_COMPILE, "compiling '%s' for %s produced no cubin", name, arch);
  } else if ((data = malloc(size)) == NULL) {
    status = TR_STATUS(TR_OUT_OF_MEMORY, "compiling '%s': a cubin of %zu bytes", name, size);
  } else if ((rc = nvrtcGetCUBIN(prog, (char *)data)) != NVRTC_SUCCESS) {
    status = TR_STATUS(TR_COMPILE, "compiling '%s' for %s: reading the cubin: %s", name, arch,
                       nvrtcGetErrorString(rc));
  }
  nvrtcDestroyProgram(&prog);
  if (status != NULL) {
    free(data);
    free(log);
    return status;
  }
  out->data = data;
  out->size = size;
  out->log = log;
  return NULL;
}

int tr_nvrtc_version(void) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  return major * 1000 + minor * 10;
}

void tr_cubin_clear(tr_cubin *cubin) {
  if (cubin == NULL) return;
  free(cubin->data);
  free(cubin->log);
  memset(cubin, 0, sizeof(*cubin));
}
