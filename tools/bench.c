/* bench.c: `tilerun bench pipeline`: a memo-miss call and a memo-hit call with validate and
 * settle placed inline, in threads, and in `tilerun serve` processes over ipc and tcp, beside the
 * raw ZeroMQ round trip of each transport (a 64-byte echo), all in one run. */
#include "tools/bench.h"

#include <stdlib.h>
#include <string.h>

#include "components/pipeline/transport.h"
#include "platform/platform.h"
#include "tilerun/tilerun.h"

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, long n) {
  qsort(v, (size_t)n, sizeof(double), compare);
  return v[n / 2];
}

static tr_status *echo(void *ctx, const uint8_t *req, size_t n, uint8_t *reply, size_t cap, size_t *size) {
  (void)ctx;
  if (n > cap) n = cap;
  memcpy(reply, req, n);
  *size = n;
  return NULL;
}

/* An echo server for the raw round trip at `endpoint`: a thread in this process for inproc, a
 * `tilerun serve echo` process (started here from `self`) otherwise, as the components it is
 * compared with are placed; and a client of it. */
typedef struct echo_peer {
  tr_server *server;
  tr_plat_process *process;
  tr_client *client;
} echo_peer;

static tr_status *echo_start(const char *self, const char *endpoint, echo_peer *e) {
  memset(e, 0, sizeof(*e));
  tr_transport_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.component = "echo";
  if (strncmp(endpoint, "inproc://", 9) == 0) {
    TR_RETURN_IF_ERROR(tr_server_start(endpoint, echo, NULL, &opts, &e->server));
  } else {
    const char *argv[] = {self, "serve", "echo", "--endpoint", endpoint, NULL};
    TR_RETURN_IF_ERROR(tr_plat_process_spawn(argv, &e->process));
  }
  return tr_client_new(e->server ? tr_server_endpoint(e->server) : endpoint, &opts, &e->client);
}

/* Servers bound to port 0, all held at once so the ports differ, then stopped. Another process
 * may still take one before the benchmark's servers bind it; that run then fails with the bind
 * error. */
tr_status *tr_bench_free_tcp_endpoints(const char *host, size_t n, char out[][64]) {
  if (n > 8) return TR_STATUS(TR_VALUE, "at most 8 free tcp endpoints at once, %zu asked", n);
  char any[64];
  snprintf(any, sizeof(any), "tcp://%s:*", host);
  tr_server *probes[8] = {NULL};
  tr_status *status = NULL;
  for (size_t i = 0; i < n && status == NULL; i++) {
    status = tr_server_start(any, echo, NULL, NULL, &probes[i]);
    if (status == NULL) snprintf(out[i], 64, "%s", tr_server_endpoint(probes[i]));
  }
  for (size_t i = 0; i < n; i++) tr_server_stop(&probes[i]);
  return status;
}

static void echo_stop(echo_peer *e) {
  tr_client_destroy(&e->client);
  tr_server_stop(&e->server);
  tr_plat_process_kill(e->process, 0);
  tr_plat_process_wait(&e->process, 5000);
}

/* One 64-byte round trip, in microseconds. */
static tr_status *echo_once(echo_peer *e, double *us) {
  uint8_t msg[64] = {1}, reply[64];
  size_t n = 0;
  uint64_t start = tr_plat_now_ns();
  tr_status *status = tr_client_call(e->client, msg, sizeof(msg), reply, sizeof(reply), &n);
  *us = (double)(tr_plat_now_ns() - start) / 1e3;
  return status;
}

/* Set by SIGINT or SIGTERM during `bench pipeline`: the measuring stops, the servers are stopped
 * and the temporary folder removed before the command ends. */
static volatile int g_interrupted;

static tr_status *interrupted(void) { return TR_STATUS(TR_IO, "interrupted (SIGINT or SIGTERM)"); }

typedef struct placement_run {
  const char *name;
  const char *pipeline; /* file text; NULL: all inline */
  double miss_us, hit_us, rt_us;
  int ok;
} placement_run;

/* Misses and hits of AddFwdOp (1 element, cpu) through a runtime with `pipeline_file`; with
 * `echo`, a raw round trip after each miss, so that both are measured side by side, under the
 * same load. */
static tr_status *measure(const char *manifest_dir, const char *pipeline_file, long iters, echo_peer *echo,
                          double *miss_us, double *hit_us, double *rt_us) {
  tr_runtime_options o;
  memset(&o, 0, sizeof(o));
  o.manifest_dir = manifest_dir;
  o.pipeline_file = pipeline_file;
  tr_runtime *rt = NULL;
  TR_RETURN_IF_ERROR(tr_runtime_new(&o, &rt));
  float a = 1, b = 2;
  int64_t shape[1] = {1};
  DLTensor ta = {&a, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0}, tb = ta;
  tb.data = &b;
  const DLTensor *in[2] = {&ta, &tb};
  double *miss = calloc((size_t)iters, sizeof(double)), *hit = calloc((size_t)iters, sizeof(double));
  double *trip = calloc((size_t)iters, sizeof(double));
  tr_status *status = (miss && hit && trip) ? NULL : TR_STATUS(TR_OUT_OF_MEMORY, "bench: %ld samples", iters);
  tr_op *kept = NULL;
  for (long i = 0; status == NULL && i < iters + 20; i++) {
    if (g_interrupted) {
      status = interrupted();
      break;
    }
    tr_op *op = NULL;
    status = tr_op_new(rt, "AddFwdOp", NULL, 0, NULL, &op);
    DLManagedTensor *out[1] = {NULL};
    uint64_t t0 = tr_plat_now_ns();
    if (status == NULL) status = tr_op_call(op, in, 2, out, 1); /* a fresh op: the miss */
    uint64_t t1 = tr_plat_now_ns();
    if (out[0]) out[0]->deleter(out[0]);
    if (i >= 20) miss[i - 20] = (double)(t1 - t0) / 1e3; /* 20 warm-ups */
    if (kept == NULL) kept = op;
    else tr_op_destroy(&op);
    double us = 0;
    if (status == NULL && echo != NULL) status = echo_once(echo, &us);
    if (i >= 20) trip[i - 20] = us;
  }
  /* Hits: batches of 1000 calls on one op, so no miss's wait sits between two hits. */
  for (long i = 0; status == NULL && i < iters; i++) {
    if (g_interrupted) {
      status = interrupted();
      break;
    }
    uint64_t t0 = tr_plat_now_ns();
    for (int k = 0; k < 1000 && status == NULL; k++) {
      DLManagedTensor *out[1] = {NULL};
      status = tr_op_call(kept, in, 2, out, 1);
      if (out[0]) out[0]->deleter(out[0]);
    }
    hit[i] = (double)(tr_plat_now_ns() - t0) / 1e6; /* us per call */
  }
  tr_op_destroy(&kept);
  if (status == NULL) {
    *miss_us = median(miss, iters);
    *hit_us = median(hit, iters);
    *rt_us = echo ? median(trip, iters) : 0;
  }
  free(miss);
  free(hit);
  free(trip);
  tr_runtime_destroy(&rt);
  return status;
}

int tr_bench_pipeline(const char *self, const char *manifest_dir, long iters, FILE *out, FILE *err) {
  char tcp[3][64]; /* validate, settle, the echo */
  tr_status *status = tr_bench_free_tcp_endpoints("127.0.0.1", 3, tcp);
  if (status != NULL) {
    fprintf(err, "tilerun bench: finding free tcp ports: %s\n", tr_status_message(status));
    tr_status_destroy(&status);
    return 1;
  }
  g_interrupted = 0;
  tr_plat_on_terminate(&g_interrupted);
  char *dir = NULL;
  status = tr_plat_make_temp_dir("tr-bench", &dir);
  if (status != NULL) {
    fprintf(err, "tilerun bench: %s\n", tr_status_message(status));
    tr_status_destroy(&status);
    return 1;
  }
  char ipc_v[300], ipc_s[300];
  snprintf(ipc_v, sizeof(ipc_v), "ipc://%s/validate.sock", dir);
  snprintf(ipc_s, sizeof(ipc_s), "ipc://%s/settle.sock", dir);
  const char *endpoints[4][2] = {{NULL, NULL}, {NULL, NULL}, {ipc_v, ipc_s}, {tcp[0], tcp[1]}};
  const char *names[4] = {"inline", "thread (inproc)", "process (ipc)", "process (tcp)"};
  const char *rt_endpoints[4] = {NULL, "inproc://tr-bench-echo", NULL, NULL};
  char rt_ipc[300];
  snprintf(rt_ipc, sizeof(rt_ipc), "ipc://%s/echo.sock", dir);
  rt_endpoints[2] = rt_ipc;
  rt_endpoints[3] = tcp[2];
  double miss[4] = {0}, hit[4] = {0}, rt[4] = {0};
  char failed[4][512] = {"", "", "", ""}; /* why a placement did not run: "<Code>: <message>" */
  int failures = 0;
  for (int p = 0; p < 4 && !g_interrupted; p++) {
    char file[300], text[1024];
    snprintf(file, sizeof(file), "%s/pipeline%d.yaml", dir, p);
    if (p == 0) snprintf(text, sizeof(text), "components: {}\n");
    else if (p == 1) snprintf(text, sizeof(text), "components:\n  validate: {placement: thread}\n  settle: {placement: thread}\n");
    else snprintf(text, sizeof(text), "components:\n  validate: {placement: process, endpoint: \"%s\"}\n"
                  "  settle: {placement: process, endpoint: \"%s\"}\n", endpoints[p][0], endpoints[p][1]);
    tr_plat_process *servers[2] = {NULL, NULL};
    status = tr_plat_write_file(file, text, strlen(text));
    for (int c = 0; status == NULL && p >= 2 && c < 2; c++) {
      const char *argv[] = {self, "serve", c ? "settle" : "validate", "--endpoint", endpoints[p][c],
                            "--manifest", manifest_dir, NULL};
      status = tr_plat_process_spawn(argv, &servers[c]);
    }
    echo_peer echo;
    memset(&echo, 0, sizeof(echo));
    if (status == NULL && p > 0) status = echo_start(self, rt_endpoints[p], &echo);
    if (status == NULL && p >= 2) tr_plat_sleep_ns(300 * 1000 * 1000ull); /* the servers bind */
    if (status == NULL) status = measure(manifest_dir, file, iters, p > 0 ? &echo : NULL, &miss[p], &hit[p], &rt[p]);
    echo_stop(&echo);
    for (int c = 0; c < 2; c++) {
      tr_plat_process_kill(servers[c], 0);
      tr_plat_process_wait(&servers[c], 5000);
    }
    if (status != NULL) {
      fprintf(err, "tilerun bench: %s: %s\n", names[p], tr_status_message(status));
      tr_status_format(status, failed[p], sizeof(failed[p]));
      tr_status_destroy(&status);
      failures++;
    }
  }
  /* the servers are gone: their folder goes before anything is printed (a reader that stops
   * early, `| head`, ends this process on its next write) */
  tr_status *rm = tr_plat_remove_tree(dir);
  tr_status_destroy(&rm);
  free(dir);
  if (g_interrupted) {
    fprintf(err, "tilerun bench: interrupted; its servers are stopped and its temporary folder removed\n");
    return 130;
  }
  fprintf(out, "pipeline benchmark: AddFwdOp, 1-element float32 on cpu (CPU backend), validate and settle "
          "placed as shown\n(build, select and launch inline); median of %ld calls each, microseconds; the round trip: a "
          "64-byte echo across the same boundary, one after each miss, side by side\n", iters);
  fprintf(out, "%-18s %10s %10s %12s %28s\n", "placement", "miss", "hit", "round trip", "miss goal");
  double hit_low = 0, hit_high = 0;
  int ran = 0;
  for (int p = 0; p < 4; p++) {
    if (failed[p][0] != '\0') { /* no figure and no verdict for a placement that did not run */
      fprintf(out, "%-18s FAILED: %s\n", names[p], failed[p]);
      continue;
    }
    char goal[64];
    if (p == 0) {
      snprintf(goal, sizeof(goal), "< 20 + build: %s", miss[0] - hit[0] < 20 ? "ok" : "MISSED");
    } else if (failed[0][0] != '\0') {
      snprintf(goal, sizeof(goal), "- (no inline miss to compare)");
    } else {
      double limit = miss[0] + 2 * rt[p] + 10; /* two hops: validate and settle */
      snprintf(goal, sizeof(goal), "<= %.1f: %s", limit, miss[p] <= limit ? "ok" : "MISSED");
    }
    if (p == 0) fprintf(out, "%-18s %10.2f %10.3f %12s %28s\n", names[p], miss[p], hit[p], "-", goal);
    else fprintf(out, "%-18s %10.2f %10.3f %12.2f %28s\n", names[p], miss[p], hit[p], rt[p], goal);
    if (ran == 0 || hit[p] < hit_low) hit_low = hit[p];
    if (ran == 0 || hit[p] > hit_high) hit_high = hit[p];
    ran++;
  }
  if (ran > 0) {
    fprintf(out, "hit path: %.3f to %.3f us across placements (it never crosses a component)\n", hit_low, hit_high);
  } else {
    fprintf(out, "hit path: no placement ran\n");
  }
  fprintf(out, "(the miss includes the CPU backend's build and one launch; goal through thread or process: "
          "the inline miss plus one round trip per hop (2) plus 10 us; validate and settle are asked at once, so "
          "such a miss waits for the slower of the two round trips)\n");
  return failures ? 1 : 0;
}
