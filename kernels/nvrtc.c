/* nvrtc.c: NVRTC compilation to cubins; libnvrtc is loaded at run time (no CUDA header or link),
 * and NVRTC's errors and log become a CompileError here. */
#include "kernels/nvrtc.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/toolkit.h"
#include "platform/platform.h"

/* The few NVRTC declarations used, as nvrtc.h (CUDA 12 and 13) has them: a program is an
 * opaque pointer, a result an int enum with 0 for success. */
typedef struct tr__nvrtc_program_s *nvrtc_program;
typedef int nvrtc_result;
enum { kNvrtcSuccess = 0 };

typedef nvrtc_result (*nvrtc_create_fn)(nvrtc_program *prog, const char *src, const char *name,
                                        int num_headers, const char *const *headers,
                                        const char *const *include_names);
typedef nvrtc_result (*nvrtc_compile_fn)(nvrtc_program prog, int num_options,
                                         const char *const *options);
typedef nvrtc_result (*nvrtc_size_fn)(nvrtc_program prog, size_t *size);
typedef nvrtc_result (*nvrtc_get_fn)(nvrtc_program prog, char *out);
typedef nvrtc_result (*nvrtc_destroy_fn)(nvrtc_program *prog);
typedef const char *(*nvrtc_error_string_fn)(nvrtc_result result);
typedef nvrtc_result (*nvrtc_version_fn)(int *major, int *minor);

/* The loaded library and its entry points: written once, by load_nvrtc, then only read. */
typedef struct nvrtc_api {
  tr_plat_lib *lib; /* NULL when NVRTC could not be loaded; never closed */
  nvrtc_create_fn create_program;
  nvrtc_compile_fn compile_program;
  nvrtc_size_fn get_program_log_size;
  nvrtc_get_fn get_program_log;
  nvrtc_size_fn get_cubin_size;
  nvrtc_get_fn get_cubin;
  nvrtc_destroy_fn destroy_program;
  nvrtc_error_string_fn get_error_string;
  nvrtc_version_fn version;
  char error[2048]; /* why it could not be loaded: each candidate's failure, "; "-separated */
} nvrtc_api;
static nvrtc_api g_nvrtc;
static tr_plat_once g_nvrtc_once = TR_PLAT_ONCE_INIT;

/* Appends a failure's text to g_nvrtc.error (cut short when it is full). */
static void note_failure(const char *text) {
  size_t used = strlen(g_nvrtc.error);
  if (used + 1 >= sizeof(g_nvrtc.error)) return;
  snprintf(g_nvrtc.error + used, sizeof(g_nvrtc.error) - used, "%s%s", used > 0 ? "; " : "",
           text);
}

/* Finds every entry point in `lib` into g_nvrtc. On failure notes which is missing and
 * returns 0 (g_nvrtc's pointers may then be partly set: the caller clears them). */
static int find_symbols(tr_plat_lib *lib) {
  static const tr_plat_lib_entry kSymbols[] = {
      {"nvrtcCreateProgram", offsetof(nvrtc_api, create_program)},
      {"nvrtcCompileProgram", offsetof(nvrtc_api, compile_program)},
      {"nvrtcGetProgramLogSize", offsetof(nvrtc_api, get_program_log_size)},
      {"nvrtcGetProgramLog", offsetof(nvrtc_api, get_program_log)},
      {"nvrtcGetCUBINSize", offsetof(nvrtc_api, get_cubin_size)},
      {"nvrtcGetCUBIN", offsetof(nvrtc_api, get_cubin)},
      {"nvrtcDestroyProgram", offsetof(nvrtc_api, destroy_program)},
      {"nvrtcGetErrorString", offsetof(nvrtc_api, get_error_string)},
      {"nvrtcVersion", offsetof(nvrtc_api, version)},
  };
  tr_status *missing = tr_plat_lib_bind(lib, kSymbols, sizeof(kSymbols) / sizeof(kSymbols[0]), &g_nvrtc);
  if (missing == NULL) return 1;
  note_failure(tr_status_message(missing));
  tr_status_destroy(&missing);
  return 0;
}

/* Tries the places in order (kernels/cuda/toolkit.h); the first that loads and has every entry
 * point wins. */
static void load_nvrtc(void) {
  tr_plat_lib *lib = tr_cuda_lib_open_first("libnvrtc", 1, find_symbols, note_failure);
  if (lib != NULL) {
    g_nvrtc.lib = lib;
    g_nvrtc.error[0] = '\0';
    return;
  }
  /* Nothing usable: no entry point stays set, so every caller sees the failure. */
  char error[sizeof(g_nvrtc.error)];
  memcpy(error, g_nvrtc.error, sizeof(error));
  memset(&g_nvrtc, 0, sizeof(g_nvrtc));
  memcpy(g_nvrtc.error, error, sizeof(error));
}

/* 1 when NVRTC is loaded (loading it on the first call). Thread-safe. */
static int nvrtc_loaded(void) {
  tr_plat_once_run(&g_nvrtc_once, load_nvrtc);
  return g_nvrtc.lib != NULL;
}

/* NVRTC's name for a result; never NULL. */
static const char *result_text(nvrtc_result rc) {
  const char *text = g_nvrtc.get_error_string(rc);
  return text != NULL ? text : "unknown NVRTC result";
}

/* The program's log, as a malloc'd string ("" when there is none; NULL when memory runs out). */
static char *program_log(nvrtc_program prog) {
  size_t size = 0;
  if (g_nvrtc.get_program_log_size(prog, &size) != kNvrtcSuccess || size == 0) size = 1;
  char *log = calloc(size, 1);
  if (log != NULL && size > 1 && g_nvrtc.get_program_log(prog, log) != kNvrtcSuccess) log[0] = 0;
  if (log != NULL) log[size - 1] = '\0';
  return log;
}

tr_status *tr_nvrtc_compile(const char *name, const char *source, const char *arch,
                            const char *const *options, size_t n_options, tr_cubin *out) {
  if (arch == NULL || strncmp(arch, "sm_", 3) != 0 || strlen(arch) > 16) {
    return TR_STATUS(TR_COMPILE, "compiling '%s': architecture '%s' is not of the form sm_NN[a]",
                     name, arch ? arch : "(null)");
  }
  if (!nvrtc_loaded()) {
    return TR_STATUS(TR_COMPILE, "compiling '%s' for %s: NVRTC (libnvrtc) could not be loaded: %s",
                     name, arch, g_nvrtc.error[0] ? g_nvrtc.error : "no reason given");
  }
  nvrtc_program prog = NULL;
  nvrtc_result rc = g_nvrtc.create_program(&prog, source, name, 0, NULL, NULL);
  if (rc != kNvrtcSuccess) {
    return TR_STATUS(TR_COMPILE, "compiling '%s' for %s: %s", name, arch, result_text(rc));
  }
  const char **argv = malloc((n_options + 2) * sizeof(char *));
  if (argv == NULL) {
    g_nvrtc.destroy_program(&prog);
    return TR_STATUS(TR_OUT_OF_MEMORY, "compiling '%s': option list", name);
  }
  char arch_option[40];
  snprintf(arch_option, sizeof(arch_option), "--gpu-architecture=%s", arch);
  argv[0] = arch_option;
  argv[1] = "--std=c++17";
  for (size_t i = 0; i < n_options; i++) argv[2 + i] = options[i];
  rc = g_nvrtc.compile_program(prog, (int)(n_options + 2), argv);
  free(argv);
  char *log = program_log(prog);
  tr_status *status = NULL;
  size_t size = 0;
  uint8_t *data = NULL;
  if (rc != kNvrtcSuccess) {
    status = TR_STATUS(TR_COMPILE, "compiling '%s' for %s failed (%s):\n%s", name, arch,
                       result_text(rc), log ? log : "");
  } else if (log == NULL) {
    status = TR_STATUS(TR_OUT_OF_MEMORY, "compiling '%s': NVRTC's log", name);
  } else if (g_nvrtc.get_cubin_size(prog, &size) != kNvrtcSuccess || size == 0) {
    status = TR_STATUS(TR_COMPILE, "compiling '%s' for %s produced no cubin", name, arch);
  } else if ((data = malloc(size)) == NULL) {
    status = TR_STATUS(TR_OUT_OF_MEMORY, "compiling '%s': a cubin of %zu bytes", name, size);
  } else if ((rc = g_nvrtc.get_cubin(prog, (char *)data)) != kNvrtcSuccess) {
    status = TR_STATUS(TR_COMPILE, "compiling '%s' for %s: reading the cubin: %s", name, arch,
                       result_text(rc));
  }
  g_nvrtc.destroy_program(&prog);
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
  if (!nvrtc_loaded()) return -1;
  int major = 0, minor = 0;
  if (g_nvrtc.version(&major, &minor) != kNvrtcSuccess) return -1;
  return major * 1000 + minor * 10;
}

void tr_cubin_clear(tr_cubin *cubin) {
  if (cubin == NULL) return;
  free(cubin->data);
  free(cubin->log);
  memset(cubin, 0, sizeof(*cubin));
}
