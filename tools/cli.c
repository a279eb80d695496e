/* cli.c: the `tilerun` command: the main job, the manifest's ops and the installed backends. */
#include "tools/cli.h"
#include "tools/bench.h"
#include "tools/mainjob.h"
#include "tools/serve.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/lint.h"
#include "registry/discovery.h"
#include "manifest/manifest.h"
#include "platform/platform.h"
#include "registry/discovery.h"
#include "tilerun/status.h"
#include "tilerun/tilerun.h"

#define TR_VERSION TILERUN_VERSION /* the library's (tilerun/version.h), as tilerun.pc says */

static const char kUsage[] =
    "usage: tilerun [--help] [--version] <command> [options]\n"
    "\n"
    "tilerun dispatches tensor ops, declared in a YAML manifest, to kernels: a backend's\n"
    "(plugins) or the in-tree CUDA kernels.\n"
    "\n"
    "commands:\n"
    "  run        the main job: the manifest's ops, the installed backends, then every workload\n"
    "             row through the runtime, on cuda:0 where there is a GPU and the op has in-tree\n"
    "             kernels, else on cpu: target, implementation, build and call time, GB/s and\n"
    "             GFLOP/s against the roofline, and on cuda the error against the CPU backend\n"
    "  ops        list the ops the manifest declares: name, family, reference API, where\n"
    "  manifest check [FILES]\n"
    "             lint spec files (default: every *.yaml of the manifest directory): they\n"
    "             load, every op has workload rows and a roofline, every row is a legal\n"
    "             call, rooflines evaluate, every type variable is used, compositions wire\n"
    "             up; prints each problem and exits 1 when there is any\n"
    "  manifest show OP\n"
    "             an op's signature and its workload rows as a table\n"
    "  backends   list the backends found along the search path, and the ones skipped\n"
    "  targets [OP]\n"
    "             load the backends and list the registered targets with the ops each\n"
    "             serves (with OP: the targets that serve it), and the backends that failed\n"
    "  serve COMPONENT --endpoint E [--device-facts DEVICE=ARCH,SMS,SHARED_BYTES]\n"
    "             host one component (validate, settle, select, build, launch; echo for the\n"
    "             benchmark's round trip) at an ipc:// or tcp:// endpoint until SIGTERM; a\n"
    "             pipeline file places the component there (placement: process). launch\n"
    "             builds and runs ops named by the caller on tensors in shared memory (cpu,\n"
    "             tr_alloc_shared) or CUDA IPC memory (cudaMalloc). Prints 'serving' once\n"
    "             bound; refuses an ipc path a live server holds; CurveZMQ with\n"
    "             TILERUN_CURVE_SECRET(_FILE), only the clients of TILERUN_CURVE_CLIENTS\n"
    "  bench pipeline [--iters N]\n"
    "             a memo-miss and a memo-hit call with validate and settle inline, in threads\n"
    "             and in serve processes over ipc and tcp, beside the raw ZeroMQ round trip\n"
    "  help       show this text (also -h, --help); COMMAND --help (or help COMMAND): that\n"
    "             command's usage and options\n"
    "\n"
    "options:\n"
    "  --manifest DIR   the spec directory (default: $TILERUN_MANIFEST_DIR, else the install's\n"
    "                   share/tilerun/manifest, else ./manifest/spec);\n"
    "                   also what serve validate and serve launch read, and what bench passes on\n"
    "  --smallest       run: each op's smallest workload row only (quick)\n"
    "  --ops NAMES      run: only these ops' rows (names separated by commas)\n"
    "  --device D       run: auto (the default: cuda when there is a GPU), cpu (every row on\n"
    "                   cpu) or cuda (a GPU required; ops without in-tree kernels stay on cpu)\n"
    "  --max-gb N       run: rows moving more than N GB are skipped on cpu and not checked\n"
    "                   against the CPU backend on cuda (default 1, at most 1000000)\n"
    "  --max-gflop N    run: rows computing more than N GFLOP are skipped on cpu (default 20,\n"
    "                   at most 1000000000)\n"
    "  --target T       run: every row on target T (its device as --device picks it)\n"
    "  --pipeline FILE  run, targets: the pipeline file placing the components\n"
    "  --iters N        bench: calls per measurement (default 2000, at most 10000000)\n"
    "  --endpoint E     serve: where to listen (tcp://:PORT binds loopback)\n"
    "  --curve-secret K serve: refused (ps shows it to every local user): use the environment\n"
    "  --device-facts F serve select: a device's facts instead of reading them from it:\n"
    "                   DEVICE=ARCH,SMS,SHARED_BYTES, e.g. cuda:0=90,132,232448 (ARCH the compute\n"
    "                   capability, 90 for sm_90; SMS the multiprocessors; SHARED_BYTES the shared\n"
    "                   memory per block); repeatable, one a device\n"
    "\n"
    "environment:\n"
    "  TILERUN_MANIFEST_DIR   the spec directory, when --manifest is not given\n"
    "  TILERUN_PIPELINE       the pipeline file, when --pipeline is not given\n"
    "  TILERUN_BACKEND_PATH   extra backend directories, ':'-separated, searched before\n"
    "                         the install's lib/tilerun/backends, then\n"
    "                         " TR_INSTALL_PREFIX "/lib/tilerun/backends (the first\n"
    "                         backend of a name found wins)\n"
    "  TILERUN_CACHE_DIR      where compiled in-tree kernels are kept (off: no disk cache;\n"
    "                         default $XDG_CACHE_HOME/tilerun/kernels, else\n"
    "                         ~/.cache/tilerun/kernels)\n"
    "  TILERUN_CUDA_PATH      a CUDA 13 Toolkit whose NVRTC builds the kernels, where the\n"
    "                         system's loader finds none (tried before /usr/local/cuda;\n"
    "                         none: skipped)\n"
    "  TILERUN_CUDA_OVERLAP   0: launch in-tree kernels plainly, not overlapped with the one\n"
    "                         before (programmatic dependent launch, sm_90 on)\n"
    "  TILERUN_CUDA_L2_KEEP   0: LayerNorm's weight and bias not kept in L2 across calls\n"
    "                         (loaded without the evict_last policy; sm_80 on)\n"
    "  TILERUN_CPU_THREADS    threads of the CPU backend's kernels (1 to 64; default the\n"
    "                         processors this process may run on)\n"
    "  TILERUN_CURVE_SECRET   serve: require CurveZMQ with this secret key (40 Z85 characters)\n"
    "  TILERUN_CURVE_SECRET_FILE  serve: the same, read from this file's first line\n"
    "  TILERUN_CURVE_CLIENTS  serve with CurveZMQ: a file of client public keys (Z85, one a\n"
    "                         line, # comments): only those clients are served\n"
    "\n"
    "exit status: 0 success, 1 the command failed (the message says why), 2 bad usage.\n";

/* Each option's line in a command's help: its spelling and argument, what it does, its default
 * and the values it takes. */
typedef struct option_doc {
  const char *flag, *text;
} option_doc;

static const option_doc kOptions[] = {
    {"--manifest DIR", "the spec directory (default: $TILERUN_MANIFEST_DIR, else the install's\n"
                      "share/tilerun/manifest, else ./manifest/spec)"},
    {"--pipeline FILE", "the pipeline file placing the components (default: $TILERUN_PIPELINE, else\n"
                        "every component inline)"},
    {"--device D", "auto, cpu (every row on cpu) or cuda (a GPU required; ops without in-tree\n"
                   "kernels stay on cpu) (default: auto, cuda when there is a GPU)"},
    {"--smallest", "each op's smallest workload row only (default: every row)"},
    {"--ops NAMES", "only these ops' rows, e.g. GemmFwdOp,LinearFwdOp (names separated by commas;\n"
                    "'tilerun ops' lists them) (default: every op)"},
    {"--max-gb N", "rows moving more than N GB are skipped on cpu and not checked against the CPU\n"
                   "backend on cuda (default 1; above 0, at most 1000000)"},
    {"--max-gflop N", "rows computing more than N GFLOP are skipped on cpu (default 20; above 0, at\n"
                      "most 1000000000)"},
    {"--iters N", "calls per measurement (default 2000; a whole number from 1 to 10000000)"},
    {"--target T", "run every row on target T ('tilerun targets' lists them; <builtin>: the in-tree\n"
                   "kernels), as tr_set_default_target does; rows stay on the device --device picks,\n"
                   "which T must serve (default: each op's detected target); an unknown T exits 2"},
    {"--endpoint E", "where to listen: ipc://PATH, or tcp://:PORT (binds loopback); required"},
    {"--device-facts F", "select only: a device's facts instead of reading them from it, as\n"
                         "DEVICE=ARCH,SMS,SHARED_BYTES, e.g. cuda:0=90,132,232448 (ARCH the compute\n"
                         "capability, 90 for sm_90; SMS the multiprocessors; SHARED_BYTES the shared\n"
                         "memory per block); repeatable, at most 8 (default: read from the device)"},
    {"CurveZMQ", "from the environment, never a flag (ps shows flags to every local user):\n"
                 "TILERUN_CURVE_SECRET, or a file named by TILERUN_CURVE_SECRET_FILE;\n"
                 "TILERUN_CURVE_CLIENTS names the clients served (default: plain connections)"},
    {"--help, -h", "show this text"},
};

#define COMMAND_MAX_OPTIONS 10

/* A command's help: `tilerun NAME --help`. `options` names kOptions entries by their first word. */
typedef struct command_doc {
  const char *name, *usage, *summary;
  const char *options[COMMAND_MAX_OPTIONS];
} command_doc;

static const command_doc kCommands[] = {
    {"run", "tilerun run [--manifest DIR] [--pipeline FILE] [--device D] [--smallest] [--ops NAMES]\n"
            "                   [--max-gb N] [--max-gflop N] [--target T]",
     "The main job: the manifest's ops, the installed backends, then every workload row run.",
     {"--manifest", "--pipeline", "--device", "--smallest", "--ops", "--max-gb", "--max-gflop", "--target"}},
    {"ops", "tilerun ops [--manifest DIR]",
     "List the ops the manifest declares: name, family, reference API, where.", {"--manifest"}},
    {"manifest", "tilerun manifest check [FILES] | tilerun manifest show OP",
     "Lint spec files (check) or show an op's signature and workload rows (show).", {"--manifest"}},
    {"manifest check", "tilerun manifest check [--manifest DIR] [FILES]",
     "Lint spec files (default: the manifest directory's *.yaml); print each problem, exit 1 if any.",
     {"--manifest"}},
    {"manifest show", "tilerun manifest show [--manifest DIR] OP",
     "Show an op's signature and its workload rows as a table.", {"--manifest"}},
    {"backends", "tilerun backends",
     "List the backends found along the search path ($TILERUN_BACKEND_PATH), and those skipped.",
     {NULL}},
    {"targets", "tilerun targets [--manifest DIR] [--pipeline FILE] [OP]",
     "Load the backends; list the registered targets, the ops each serves, and the load failures.",
     {"--manifest", "--pipeline"}},
    {"serve", "tilerun serve COMPONENT --endpoint E [--device-facts F]... [--manifest DIR]",
     "Host one component (validate, settle, select, build, launch, echo) until SIGTERM.",
     {"--endpoint", "--device-facts", "--manifest", "CurveZMQ"}},
    {"bench", "tilerun bench pipeline [--iters N] [--manifest DIR]",
     "Benchmarks; one so far: pipeline (tilerun bench pipeline --help).", {"--iters", "--manifest"}},
    {"bench pipeline", "tilerun bench pipeline [--iters N] [--manifest DIR]",
     "A call's miss and hit through each placement, beside the raw ZeroMQ round trip.",
     {"--iters", "--manifest"}},
};

static const option_doc *option_named(const char *flag) {
  size_t n = strlen(flag);
  for (size_t i = 0; i < sizeof(kOptions) / sizeof(kOptions[0]); i++) {
    if (strncmp(kOptions[i].flag, flag, n) == 0 && (kOptions[i].flag[n] == ' ' || kOptions[i].flag[n] == ',' ||
                                                    kOptions[i].flag[n] == '\0')) {
      return &kOptions[i];
    }
  }
  return NULL;
}

static void print_option(FILE *out, const option_doc *o) {
  fprintf(out, "  %-18s ", o->flag);
  for (const char *c = o->text; *c; c++) {
    fputc(*c, out);
    if (*c == '\n') fprintf(out, "%21s", "");
  }
  fputc('\n', out);
}

static const char kCommandList[] = "run, ops, manifest, backends, targets, serve, bench, help";

/* The doc of command `name` ("manifest show" for a subcommand); NULL when there is none. */
static const command_doc *command_named(const char *name) {
  for (size_t i = 0; i < sizeof(kCommands) / sizeof(kCommands[0]); i++) {
    if (strcmp(kCommands[i].name, name) == 0) return &kCommands[i];
  }
  return NULL;
}

/* The subcommands of `command` ("check, show" for manifest) into `out`; "" when it has none. */
static const char *subcommands_of(const char *command, char *out, size_t cap) {
  size_t n = strlen(command), used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < sizeof(kCommands) / sizeof(kCommands[0]); i++) {
    const char *name = kCommands[i].name;
    if (strncmp(name, command, n) == 0 && name[n] == ' ' && used < cap) {
      used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? ", " : "", name + n + 1);
    }
  }
  return out;
}

static int usage_error(FILE *err, const char *fmt, ...) TR_PRINTF(2, 3);

/* `tilerun help [COMMAND [SUB]]` or `tilerun [COMMAND [SUB]] --help`: the global help without a
 * command (or for help itself), else the command's; SUB counts for a command that has
 * subcommands (manifest, bench). An unknown command or subcommand is a usage error (2). */
static int command_help(const char *command, const char *sub, FILE *out, FILE *err) {
  if (command == NULL || strcmp(command, "help") == 0) {
    fputs(kUsage, out);
    return 0;
  }
  const command_doc *found = command_named(command);
  if (found == NULL) return usage_error(err, "no command '%s' (commands: %s)", command, kCommandList);
  char subs[128];
  if (sub != NULL && subcommands_of(command, subs, sizeof(subs))[0] != '\0') {
    char name[128];
    snprintf(name, sizeof(name), "%s %s", command, sub);
    found = command_named(name);
    if (found == NULL) return usage_error(err, "no command '%s %s' (%s's subcommands: %s)", command, sub, command, subs);
  }
  fprintf(out, "usage: %s\n\n%s\n\noptions:\n", found->usage, found->summary);
  for (int i = 0; i < COMMAND_MAX_OPTIONS && found->options[i] != NULL; i++) print_option(out, option_named(found->options[i]));
  print_option(out, option_named("--help"));
  fprintf(out, "\nexit status: 0 success, 1 the command failed (the message says why), 2 bad usage.\n");
  return 0;
}

typedef struct cli_options {
  long iters;
  const char *manifest_dir;
  int smallest;
  const char *ops;
  tr_mainjob_device device;
  double max_gb, max_gflop;
  const char *pipeline;
  const char *endpoint;
  const char *curve_secret;
  const char *target;
  const char *device_facts[8];
  size_t n_device_facts;
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
  static char installed[4096]; /* an installed command's: <prefix>/share/tilerun/manifest */
  return tr_discovery_manifest_dir(installed, sizeof(installed));
}

static int load_manifest(const cli_options *opts, FILE *err, tr_manifest **out) {
  tr_status *status = tr_manifest_load_dir(manifest_dir(opts), out);
  if (status != NULL && opts->manifest_dir == NULL) {
    status = tr_status_append(status, " (the manifest folder by default, from %s; give --manifest DIR)",
                              tr_discovery_manifest_dir_source());
  }
  return status != NULL ? report(err, status) : 0;
}

static int list_ops(const cli_options *opts, FILE *out, FILE *err) {
  tr_manifest *m = NULL;
  if (load_manifest(opts, err, &m) != 0) return 1;
  size_t n = tr_manifest_op_count(m);
  fprintf(out, "manifest %s: %zu op%s\n", manifest_dir(opts), n, n == 1 ? "" : "s");
  if (n > 0) {
    fprintf(out, "  %-18s %-12s %-44s %s\n", "op", "family", "reference", "declared at");
  }
  for (size_t i = 0; i < n; i++) {
    const tr_op_def *op = tr_manifest_op_at(m, i);
    fprintf(out, "  %-18s %-12s %-44s %s:%d%s\n", tr_op_def_name(op), tr_op_def_family(op),
            tr_op_def_ref_api(op), tr_op_def_path(op), tr_op_def_line(op),
            tr_op_def_is_composite(op) ? "  (composite)" : "");
  }
  tr_manifest_destroy(&m);
  return 0;
}

static int manifest_check(const cli_options *opts, int n_files, char **files, FILE *out,
                          FILE *err) {
  int kept = 0; /* a file named twice (under one name or two) is read once */
  for (int i = 0; i < n_files; i++) {
    int seen = 0;
    for (int j = 0; j < kept && !seen; j++) seen = strcmp(files[i], files[j]) == 0 || tr_plat_same_file(files[i], files[j]);
    if (!seen) files[kept++] = files[i];
  }
  n_files = kept;
  tr_manifest *m = NULL;
  tr_status *status = n_files > 0
                          ? tr_manifest_load((const char *const *)files, (size_t)n_files, &m)
                          : tr_manifest_load_dir(manifest_dir(opts), &m);
  if (status != NULL) {
    fprintf(out, "manifest check: 1 problem\n  %s\n", tr_status_message(status));
    tr_status_destroy(&status);
    return 1;
  }
  tr_lint_report found;
  status = tr_manifest_lint(m, &found);
  if (status != NULL) {
    tr_manifest_destroy(&m);
    return report(err, status);
  }
  size_t rows = 0;
  for (size_t i = 0; i < tr_manifest_op_count(m); i++) {
    rows += tr_op_def_workload_count(tr_manifest_op_at(m, i));
  }
  if (found.count == 0 && tr_manifest_op_count(m) == 0) { /* an empty or wrong folder, not a clean one */
    if (n_files > 0) fprintf(out, "manifest check: 1 problem\n  the files given declare no op\n");
    else fprintf(out, "manifest check: 1 problem\n  %s declares no op (its *.yaml files; see --manifest)\n", manifest_dir(opts));
    tr_manifest_destroy(&m);
    return 1;
  }
  if (found.count == 0) {
    fprintf(out, "manifest check: %zu ops, %zu workload rows: no problems\n",
            tr_manifest_op_count(m), rows);
  } else {
    fprintf(out, "manifest check: %zu problem%s\n", found.count, found.count == 1 ? "" : "s");
    for (size_t i = 0; i < found.count; i++) fprintf(out, "  %s\n", found.problems[i]);
  }
  int rc = found.count == 0 ? 0 : 1;
  tr_lint_report_clear(&found);
  tr_manifest_destroy(&m);
  return rc;
}

static int manifest_show(const cli_options *opts, const char *name, FILE *out, FILE *err) {
  tr_manifest *m = NULL;
  if (load_manifest(opts, err, &m) != 0) return 1;
  const tr_op_def *op = tr_manifest_find(m, name);
  if (op == NULL) { /* an argument naming no op: bad usage, as run --ops says it */
    fprintf(err, "tilerun: no op '%s' in the manifest %s (see 'tilerun ops')\n", name,
            manifest_dir(opts));
    tr_manifest_destroy(&m);
    return 2;
  }
  char text[256];
  fprintf(out, "%s  (%s, %s:%d)\n", tr_op_def_name(op), tr_op_def_family(op), tr_op_def_path(op),
          tr_op_def_line(op));
  if (tr_op_def_doc(op)[0]) fprintf(out, "  %s\n", tr_op_def_doc(op));
  fprintf(out, "  reference: %s%s\n", tr_op_def_ref_api(op),
          tr_op_def_is_composite(op) ? "  (composite: runs sub-ops, builds no kernel)" : "");
  fprintf(out, "params:\n");
  for (size_t i = 0; i < tr_op_def_param_count(op); i++) {
    const tr_value *def = tr_op_def_param_default(op, i);
    if (def != NULL) tr_value_format(def, text, sizeof(text));
    fprintf(out, "  %-18s %-28s %s%s\n", tr_op_def_param_name(op, i), tr_op_def_param_type(op, i),
            def ? "default " : "required", def ? text : "");
  }
  fprintf(out, "inputs:\n");
  for (size_t i = 0; i < tr_op_def_input_count(op); i++) {
    fprintf(out, "  %-18s %-28s %-28s%s%s%s%s\n", tr_op_def_input_name(op, i),
            tr_op_def_input_dtype_text(op, i), tr_op_def_input_shape_text(op, i),
            tr_op_def_input_optional(op, i) ? " optional" : "",
            tr_op_def_input_mutated(op, i) ? " mutated" : "",
            tr_op_def_input_contiguous(op, i) ? " contiguous" : "",
            tr_op_def_input_device_cpu(op, i) ? " device:cpu" : "");
  }
  fprintf(out, "outputs:\n");
  for (size_t i = 0; i < tr_op_def_output_count(op); i++) {
    fprintf(out, "  %-18s %-28s %s\n", tr_op_def_output_name(op, i),
            tr_op_def_output_dtype_text(op, i), tr_op_def_output_shape_text(op, i));
  }
  size_t rows = tr_op_def_workload_count(op);
  fprintf(out, "workloads: %zu\n", rows);
  tr_device cpu = {"cpu", TR_DEVICE_NO_INDEX};
  for (size_t r = 0; r < rows; r++) {
    tr_tensor_spec specs[TR_SIG_MAX_INPUTS];
    uint8_t has[TR_SIG_MAX_INPUTS];
    tr_named_value params[TR_SIG_MAX_PARAMS];
    size_t n_params = 0;
    tr_status *status = tr_op_def_workload(op, r, &cpu, specs, has, params, &n_params);
    if (status != NULL) {
      tr_manifest_destroy(&m);
      return report(err, status);
    }
    fprintf(out, "  %-36s", tr_op_def_workload_label(op, r));
    for (size_t i = 0; i < tr_op_def_input_count(op); i++) {
      if (!has[i]) continue;
      char shape[128], dtype[TR_DTYPE_FORMAT_MAX];
      tr_shape_format(specs[i].rank, specs[i].shape, shape, sizeof(shape));
      tr_dtype_format(specs[i].dtype, dtype, sizeof(dtype));
      fprintf(out, " %s=%s%s", tr_op_def_input_name(op, i), dtype, shape);
    }
    for (size_t p = 0; p < n_params; p++) {
      tr_value_format(&params[p].value, text, sizeof(text));
      fprintf(out, " %s=%s", params[p].name, text);
    }
    fprintf(out, "\n");
  }
  tr_manifest_destroy(&m);
  return 0;
}

/* What a search-path folder is, for the listings: "" (a folder), or why nothing is read there. */
static const char *dir_state(const char *dir) {
  return tr_plat_is_dir(dir) ? "" : tr_plat_file_exists(dir) ? " (not a directory)" : " (does not exist)";
}

/* The backend search path and the descriptors along it (the caller frees both). */
static tr_status *discover_along_path(char ***dirs, size_t *n_dirs, tr_discovery **found) {
  *found = NULL;
  tr_status *status = tr_backend_search_path(dirs, n_dirs);
  if (status != NULL) return status;
  status = tr_backend_discover((const char *const *)*dirs, *n_dirs, found);
  if (status != NULL) tr_discovery_free_dirs(dirs, *n_dirs);
  return status;
}

static int list_backends(FILE *out, FILE *err) {
  char **dirs = NULL;
  size_t n_dirs = 0;
  tr_discovery *found = NULL;
  tr_status *status = discover_along_path(&dirs, &n_dirs, &found);
  if (status != NULL) return report(err, status);
  fprintf(out, "backend search path:\n");
  for (size_t i = 0; i < n_dirs; i++) {
    fprintf(out, "  %s%s%s\n", dirs[i], dir_state(dirs[i])[0] ? " " : "", dir_state(dirs[i]));
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

static void warn_to(void *ctx, const char *line) { fprintf((FILE *)ctx, "tilerun: warning: %s\n", line); }

/* Where no backend descriptor lies along the search path: a line naming each folder looked in
 * (and those that are not folders), so an empty target list says why. */
static void no_backend_hint(FILE *out) {
  char **dirs = NULL;
  size_t n_dirs = 0;
  tr_discovery *found = NULL;
  tr_status *status = discover_along_path(&dirs, &n_dirs, &found);
  if (status != NULL) {
    tr_status_destroy(&status);
    return;
  }
  if (tr_discovery_count(found) == 0 && tr_discovery_failure_count(found) == 0) {
    fprintf(out, "no backend was found: looked for backend descriptors, *.yaml, in");
    for (size_t i = 0; i < n_dirs; i++) {
      fprintf(out, "%s %s%s", i ? "," : "", dirs[i], dir_state(dirs[i]));
    }
    fprintf(out, "%s; set TILERUN_BACKEND_PATH or install a backend (see 'tilerun backends')\n",
            n_dirs == 0 ? " no folder (an empty search path)" : "");
  }
  tr_discovery_destroy(&found);
  tr_discovery_free_dirs(&dirs, n_dirs);
}

static int list_targets(const cli_options *opts, const char *op_name, FILE *out, FILE *err) {
  tr_runtime_options o;
  memset(&o, 0, sizeof(o));
  o.manifest_dir = manifest_dir(opts);
  o.pipeline_file = opts->pipeline;
  o.warn = warn_to;
  o.warn_ctx = err;
  tr_runtime *rt = NULL;
  tr_status *status = tr_runtime_new(&o, &rt);
  if (status != NULL) return report(err, status);
  tr_manifest *m = NULL;
  if (load_manifest(opts, err, &m) != 0) {
    tr_runtime_destroy(&rt);
    return 1;
  }
  if (op_name != NULL && tr_manifest_find(m, op_name) == NULL) {
    fprintf(err, "tilerun: no op '%s' in the manifest %s (see 'tilerun ops')\n", op_name, manifest_dir(opts));
    tr_manifest_destroy(&m);
    tr_runtime_destroy(&rt);
    return 2; /* an argument naming no op: bad usage, as run --ops says it */
  }
  const char *targets[64];
  size_t n = tr_registered_targets(rt, op_name, targets, 64);
  if (n > 64) n = 64;
  if (op_name != NULL) fprintf(out, "targets serving %s: %zu\n", op_name, n);
  else fprintf(out, "registered targets: %zu\n", n);
  for (size_t t = 0; t < n; t++) {
    fprintf(out, "  %-16s", targets[t]);
    size_t served = 0;
    for (size_t i = 0; i < tr_manifest_op_count(m); i++) {
      const char *name = tr_op_def_name(tr_manifest_op_at(m, i));
      const char *serving[64];
      size_t k = tr_registered_targets(rt, name, serving, 64);
      for (size_t j = 0; j < k && j < 64; j++) {
        if (strcmp(serving[j], targets[t]) == 0) {
          fprintf(out, "%s%s", served++ ? ", " : " ", name);
          break;
        }
      }
    }
    fprintf(out, "%s\n", served ? "" : " (no ops: a detector only)");
  }
  size_t failed = tr_load_failure_count(rt);
  fprintf(out, "load failures: %zu\n", failed);
  if (tr_registered_targets(rt, NULL, targets, 64) == 0 && failed == 0) no_backend_hint(out);
  for (size_t i = 0; i < failed; i++) {
    const char *backend = tr_load_failure_backend(rt, i), *reason = tr_load_failure_reason(rt, i);
    if (strncmp(reason, backend, strlen(backend)) == 0) fprintf(out, "  %s\n", reason); /* a descriptor's own path */
    else fprintf(out, "  %-16s %s\n", backend, reason);
  }
  tr_manifest_destroy(&m);
  tr_runtime_destroy(&rt);
  return 0;
}

static int usage_error(FILE *err, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(err, "tilerun: ");
  vfprintf(err, fmt, args);
  fprintf(err, "\nRun 'tilerun --help' for usage.\n");
  va_end(args);
  return 2;
}

/* A numeric option's value: 0 with *out set, else a usage error (2) that names the option, the
 * value and what it breaks: not a number, negative, zero (`whole`: below 1), too large. */
static int number_option(FILE *err, const char *option, const char *text, int whole, double max, double *out) {
  if (text == NULL) {
    return usage_error(err, whole ? "%s needs a value: a whole number from 1 to %.0f"
                                  : "%s needs a value: a number above 0, at most %.0f", option, max);
  }
  char *end = NULL;
  errno = 0;
  /* decimal only: strtod would also take leading blanks and hex (0x10, 0x1p3) */
  int decimal = text[0] != '\0' && !isspace((unsigned char)text[0]) && strpbrk(text, "xX") == NULL;
  double v = decimal ? strtod(text, &end) : 0;
  if (!decimal || end == text || *end != '\0' || isnan(v)) return usage_error(err, "%s needs a positive number, got '%s'", option, text);
  if (v < 0) return usage_error(err, "%s cannot be negative, got '%s'", option, text);
  if (v == 0) return usage_error(err, whole ? "%s must be at least 1, got '%s'" : "%s must be above 0, got '%s'", option, text);
  if (errno == ERANGE && v < 1) return usage_error(err, "%s is too small to tell from 0, got '%s'", option, text);
  if (v > max) return usage_error(err, "%s %s is too large: at most %.0f", option, text, max);
  if (whole && v != floor(v)) return usage_error(err, "%s needs a whole number, got '%s'", option, text);
  *out = v;
  return 0;
}

/* The options given, each once (--device-facts may repeat), for the check against the command's. */
typedef struct given_options {
  const char *flags[16];
  int n;
} given_options;

static int note_option(given_options *g, const char *flag, FILE *err) {
  for (int i = 0; i < g->n; i++) {
    if (strcmp(g->flags[i], flag) == 0 && strcmp(flag, "--device-facts") != 0) {
      return usage_error(err, "%s is given twice (one value each)", flag);
    }
  }
  if (g->n < 16) g->flags[g->n++] = flag;
  return 0;
}

/* 2 with a usage error for an option the command (its doc in kCommands) does not take, else 0.
 * Hidden spellings: --all (run's old default), --curve-secret (serve explains its refusal). */
static int options_taken(const given_options *g, const char *command, int n_positional, char **positional,
                         FILE *err) {
  const command_doc *doc = command_named(command);
  if (doc != NULL && n_positional > 0) {
    char name[128];
    snprintf(name, sizeof(name), "%s %s", command, positional[0]);
    const command_doc *sub = command_named(name);
    if (sub != NULL) doc = sub;
  }
  if (doc == NULL) return 0; /* an unknown command: said later */
  for (int i = 0; i < g->n; i++) {
    const char *flag = g->flags[i];
    int taken = (strcmp(flag, "--all") == 0 && strcmp(doc->name, "run") == 0) ||
                (strcmp(flag, "--curve-secret") == 0 && strcmp(doc->name, "serve") == 0);
    for (int o = 0; o < COMMAND_MAX_OPTIONS && doc->options[o] != NULL && !taken; o++) taken = strcmp(doc->options[o], flag) == 0;
    if (taken) continue;
    char list[256];
    size_t used = 0;
    list[0] = '\0';
    for (int o = 0; o < COMMAND_MAX_OPTIONS && doc->options[o] != NULL; o++) {
      if (doc->options[o][0] == '-' && used < sizeof(list)) {
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", doc->options[o]);
      }
    }
    return usage_error(err, "'tilerun %s' takes no %s (its options: %s; 'tilerun %s --help')", doc->name, flag,
                       used ? list : "none", doc->name);
  }
  return 0;
}

int tr_cli_main(int argc, char **argv, FILE *out, FILE *err) {
  cli_options opts = {2000, NULL, 0, NULL, TR_MAINJOB_AUTO, 1.0, 20.0, NULL, NULL, NULL, NULL, {NULL}, 0};
  int want_help = 0;
  const char *command = NULL;
  char *positional[64];
  int n_positional = 0;
  given_options given = {{NULL}, 0};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (arg[0] == '-' && arg[1] == '-' && strcmp(arg, "--help") != 0 && strcmp(arg, "--version") != 0 &&
        note_option(&given, arg, err) != 0) {
      return 2;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      want_help = 1;
      break;
    } else if (strcmp(arg, "--version") == 0) {
      if (argc > 2) return usage_error(err, "--version takes nothing else, got '%s'", argv[i == 1 ? 2 : 1]);
      fprintf(out, "tilerun %s\n", TR_VERSION);
      return 0;
    } else if (strcmp(arg, "--manifest") == 0) {
      if (i + 1 >= argc) return usage_error(err, "%s needs a directory", arg);
      opts.manifest_dir = argv[++i];
    } else if (strcmp(arg, "--pipeline") == 0 || strcmp(arg, "--endpoint") == 0 ||
               strcmp(arg, "--curve-secret") == 0 || strcmp(arg, "--target") == 0) {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') return usage_error(err, "%s needs a value", arg);
      const char **slot = arg[2] == 'p'   ? &opts.pipeline
                          : arg[2] == 'e' ? &opts.endpoint
                          : arg[2] == 't' ? &opts.target
                                          : &opts.curve_secret;
      *slot = argv[++i];
    } else if (strcmp(arg, "--iters") == 0) {
      double iters = 0;
      if (number_option(err, arg, i + 1 < argc ? argv[i + 1] : NULL, 1, 10000000, &iters) != 0) return 2;
      opts.iters = (long)iters;
      i++;
    } else if (strcmp(arg, "--device-facts") == 0) {
      if (i + 1 >= argc) {
        return usage_error(err, "%s needs a value: DEVICE=ARCH,SMS,SHARED_BYTES, e.g. cuda:0=90,132,232448", arg);
      }
      if (opts.n_device_facts == 8) return usage_error(err, "%s", "at most 8 --device-facts");
      opts.device_facts[opts.n_device_facts++] = argv[++i];
    } else if (strcmp(arg, "--smallest") == 0) {
      opts.smallest = 1;
    } else if (strcmp(arg, "--ops") == 0) {
      if (i + 1 >= argc || argv[i + 1][0] == '\0' || argv[i + 1][0] == '-') {
        return usage_error(err, "%s needs op names separated by commas, e.g. GemmFwdOp,LinearFwdOp", arg);
      }
      opts.ops = argv[++i];
    } else if (strcmp(arg, "--all") == 0) { /* every row is the default now; kept for old scripts */
      opts.smallest = 0;
    } else if (strcmp(arg, "--device") == 0) {
      if (i + 1 >= argc) return usage_error(err, "%s", "--device needs a value: auto, cpu or cuda");
      const char *d = argv[++i];
      if (strcmp(d, "auto") == 0) opts.device = TR_MAINJOB_AUTO;
      else if (strcmp(d, "cpu") == 0) opts.device = TR_MAINJOB_CPU;
      else if (strcmp(d, "cuda") == 0) opts.device = TR_MAINJOB_CUDA;
      else return usage_error(err, "--device needs auto, cpu or cuda, got '%s'", d);
    } else if (strcmp(arg, "--max-gb") == 0 || strcmp(arg, "--max-gflop") == 0) {
      int gb = arg[7] == 'b';
      if (number_option(err, arg, i + 1 < argc ? argv[i + 1] : NULL, 0, gb ? 1e6 : 1e9,
                        gb ? &opts.max_gb : &opts.max_gflop) != 0) {
        return 2;
      }
      i++;
    } else if (arg[0] == '-') {
      return usage_error(err, "unknown option '%s'", arg);
    } else if (command == NULL) {
      command = arg;
    } else if (n_positional < 64) {
      positional[n_positional++] = argv[i];
    } else {
      return usage_error(err, "too many arguments at '%s'", arg);
    }
  }
  if (want_help || (command != NULL && strcmp(command, "help") == 0)) {
    /* tilerun [COMMAND [SUB]] --help, or tilerun help [COMMAND [SUB]] */
    int help_cmd = !want_help || (command != NULL && strcmp(command, "help") == 0);
    const char *name = help_cmd ? (n_positional > 0 ? positional[0] : NULL) : command;
    const char *sub = help_cmd ? (n_positional > 1 ? positional[1] : NULL) : (n_positional > 0 ? positional[0] : NULL);
    if (help_cmd && n_positional > 2) return usage_error(err, "help takes a command and a subcommand, got '%s' too", positional[2]);
    char subs[128];
    if (help_cmd && sub != NULL && command_named(name) != NULL && subcommands_of(name, subs, sizeof(subs))[0] == '\0') {
      return usage_error(err, "'%s' has no subcommands; got '%s'", name, sub); /* `tilerun help run extra` */
    }
    return command_help(name, sub, out, err);
  }
  if (command == NULL) return usage_error(err, "no command given");
  if (options_taken(&given, command, n_positional, positional, err) != 0) return 2;
  if (strcmp(command, "manifest") == 0) {
    if (n_positional >= 1 && strcmp(positional[0], "check") == 0) {
      return manifest_check(&opts, n_positional - 1, positional + 1, out, err);
    }
    if (n_positional == 2 && strcmp(positional[0], "show") == 0) {
      return manifest_show(&opts, positional[1], out, err);
    }
    if (n_positional == 0) return usage_error(err, "%s", "'manifest' takes 'check [FILES]' or 'show OP'");
    return usage_error(err, "'manifest' takes 'check [FILES]' or 'show OP'; got '%s'%s", positional[0],
                       strcmp(positional[0], "show") == 0 ? (n_positional < 2 ? " with no OP" : " with more than one OP")
                                                          : "");
  }
  if (strcmp(command, "bench") == 0) {
    if (n_positional != 1 || strcmp(positional[0], "pipeline") != 0) {
      if (n_positional == 0) return usage_error(err, "%s", "bench takes 'pipeline'");
      return usage_error(err, "bench takes 'pipeline' alone; got '%s'", positional[n_positional > 1 && strcmp(positional[0], "pipeline") == 0 ? 1 : 0]);
    }
    return tr_bench_pipeline(argv[0], manifest_dir(&opts), opts.iters, out, err);
  }
  if (strcmp(command, "serve") == 0) {
    if (n_positional == 0) return usage_error(err, "%s", "serve takes one component (validate, settle, select, build, launch, echo)");
    if (n_positional > 1) {
      return usage_error(err, "serve takes one component (validate, settle, select, build, launch, echo); got '%s' "
                         "after '%s'", positional[1], positional[0]);
    }
    if (opts.endpoint == NULL) return usage_error(err, "%s", "serve needs --endpoint (ipc://PATH or tcp://:PORT)");
    return tr_serve_main(positional[0], opts.endpoint, manifest_dir(&opts), opts.curve_secret, opts.device_facts,
                         opts.n_device_facts, out, err);
  }
  if (strcmp(command, "targets") == 0) {
    if (n_positional > 1) return usage_error(err, "unexpected argument '%s'", positional[1]);
    return list_targets(&opts, n_positional ? positional[0] : NULL, out, err);
  }
  if (n_positional > 0) return usage_error(err, "unexpected argument '%s'", positional[0]);
  if (strcmp(command, "ops") == 0) return list_ops(&opts, out, err);
  if (strcmp(command, "backends") == 0) return list_backends(out, err);
  if (strcmp(command, "run") == 0) {
    if (tr_mainjob_check_ops(manifest_dir(&opts), opts.ops, err) != 0) return 2; /* before anything is printed */
    fprintf(out, "tilerun %s: the main job\n\n", TR_VERSION);
    int rc = list_ops(&opts, out, err);
    fprintf(out, "\n");
    int rc_backends = list_backends(out, err);
    if (rc != 0) return rc;
    fprintf(out, "\n");
    tr_mainjob_options job = {manifest_dir(&opts), opts.pipeline, opts.device, opts.smallest, opts.max_gb * 1e9,
                              opts.max_gflop * 1e9, opts.ops, opts.target};
    int rc_rows = tr_mainjob_run(&job, out, err);
    return rc_backends != 0 ? rc_backends : rc_rows;
  }
  return usage_error(err, "unknown command '%s' (commands: %s)", command, kCommandList);
}
