/* cli.c: the `tilerun` command: the main job, the manifest's ops and the installed backends. */
#include "tools/cli.h"

#include <stdlib.h>
#include <string.h>

#include "manifest/index.h"
#include "platform/platform.h"
#include "registry/discovery.h"
#include "tilerun/status.h"

#define TR_VERSION "0.1.0"

static const char kUsage[] =
    "usage: tilerun [--help] [--version] <command> [options]\n"
    "\n"
    "tilerun dispatches tensor ops, declared in a YAML manifest, to kernels: a backend's\n"
    "(plugins) or the in-tree CUDA kernels.\n"
    "\n"
    "commands:\n"
    "  run        the main job: the manifest's ops and the installed backends (it grows into\n"
    "             running every op's workloads as the runtime lands)\n"
    "  ops        list the ops the manifest declares: name, family, reference API, where\n"
    "  backends   list the backends found along the search path, and the ones skipped\n"
    "  help       show this text\n"
    "\n"
    "options:\n"
    "  --manifest DIR   the spec directory (default: $TILERUN_MANIFEST_DIR, else ./manifest/spec)\n"
    "\n"
    "environment:\n"
    "  TILERUN_MANIFEST_DIR   the spec directory, when --manifest is not given\n"
    "  TILERUN_BACKEND_PATH   extra backend directories, ':'-separated, searched before\n"
    "                         " TR_INSTALL_PREFIX "/lib/tilerun/backends\n"
    "\n"
    "exit status: 0 success, 1 the command failed (the message says why), 2 bad usage.\n";

typedef struct cli_options {
  const char *manifest_dir;
} cli_options;

/* Prints a status to err as "tilerun: <Code>: <message>" and frees it; returns exit code 1. */
static int report(FILE *err, tr_status *status) {
  char small[256];
  size_t need = tr_status_format(status, small, sizeof(small));
  char *text = need < sizeof(small) ? small : malloc(need + 1);
  if (text != small && text != NULL) tr_status_format(status, text, need + 1);
  fprintf(err, "tilerun: %s\n", text ? text : small);
  if (text != small) free(text);
  tr_status_destroy(&status);
  return 1;
}

static const char *manifest_dir(const cli_options *opts) {
  if (opts->manifest_dir != NULL) return opts->manifest_dir;
  const char *env = tr_plat_getenv("TILERUN_MANIFEST_DIR");
  return (env != NULL && env[0] != '\0') ? env : "manifest/spec";
}

static int list_ops(const cli_options *opts, FILE *out, FILE *err) {
  const char *dir = manifest_dir(opts);
  tr_manifest_index *index = NULL;
  tr_status *status = tr_manifest_index_load_dir(dir, &index);
  if (status != NULL) return report(err, status);
  size_t n = tr_manifest_index_count(index);
  fprintf(out, "manifest %s: %zu op%s\n", dir, n, n == 1 ? "" : "s");
  if (n > 0) fprintf(out, "  %-24s %-12s %-40s %s\n", "op", "family", "reference", "declared at");
  for (size_t i = 0; i < n; i++) {
    const tr_manifest_op_ref *op = tr_manifest_index_at(index, i);
    fprintf(out, "  %-24s %-12s %-40s %s:%d\n", op->name, op->family[0] ? op->family : "-",
            op->ref_api[0] ? op->ref_api : "-", op->path, op->line);
  }
  tr_manifest_index_destroy(&index);
  return 0;
}

static int list_backends(FILE *out, FILE *err) {
  char **dirs = NULL;
  size_t n_dirs = 0;
  tr_status *status = tr_backend_search_path(&dirs, &n_dirs);
  if (status != NULL) return report(err, status);
  tr_discovery *found = NULL;
  status = tr_backend_discover((const char *const *)dirs, n_dirs, &found);
  if (status != NULL) {
    tr_discovery_free_dirs(&dirs, n_dirs);
    return report(err, status);
  }
  fprintf(out, "backend search path:\n");
  for (size_t i = 0; i < n_dirs; i++) {
    fprintf(out, "  %s%s\n", dirs[i], tr_plat_is_dir(dirs[i]) ? "" : "  (not a directory)");
  }
  size_t n = tr_discovery_count(found);
  fprintf(out, "backends: %zu found\n", n);
  for (size_t i = 0; i < n; i++) {
    const tr_backend_descriptor *b = tr_discovery_at(found, i);
    fprintf(out, "  %-16s %s  (from %s)\n", b->name, b->library, b->descriptor);
  }
  size_t n_failed = tr_discovery_failure_count(found);
  if (n_failed > 0) fprintf(out, "skipped descriptors: %zu\n", n_failed);
  for (size_t i = 0; i < n_failed; i++) {
    fprintf(out, "  %s\n", tr_discovery_failure_at(found, i)->reason);
  }
  tr_discovery_destroy(&found);
  tr_discovery_free_dirs(&dirs, n_dirs);
  return 0;
}

static int usage_error(FILE *err, const char *fmt, const char *arg) {
  fprintf(err, "tilerun: ");
  fprintf(err, fmt, arg);
  fprintf(err, "\nRun 'tilerun --help' for usage.\n");
  return 2;
}

int tr_cli_main(int argc, char **argv, FILE *out, FILE *err) {
  cli_options opts = {NULL};
  const char *command = NULL;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      fputs(kUsage, out);
      return 0;
    } else if (strcmp(arg, "--version") == 0) {
      fprintf(out, "tilerun %s\n", TR_VERSION);
      return 0;
    } else if (strcmp(arg, "--manifest") == 0) {
      if (i + 1 >= argc) return usage_error(err, "%s needs a directory", arg);
      opts.manifest_dir = argv[++i];
    } else if (arg[0] == '-') {
      return usage_error(err, "unknown option '%s'", arg);
    } else if (command == NULL) {
      command = arg;
    } else {
      return usage_error(err, "unexpected argument '%s'", arg);
    }
  }
  if (command == NULL) return usage_error(err, "%sno command given", "");
  if (strcmp(command, "help") == 0) {
    fputs(kUsage, out);
    return 0;
  }
  if (strcmp(command, "ops") == 0) return list_ops(&opts, out, err);
  if (strcmp(command, "backends") == 0) return list_backends(out, err);
  if (strcmp(command, "run") == 0) {
    fprintf(out, "tilerun %s: the main job\n\n", TR_VERSION);
    int rc = list_ops(&opts, out, err);
    fprintf(out, "\n");
    int rc_backends = list_backends(out, err);
    return rc != 0 ? rc : rc_backends;
  }
  return usage_error(err, "unknown command '%s' (commands: run, ops, backends, help)", command);
}
