/* memo_bench.c: the memo's benchmark: bytes per entry at 100,000 entries of a two-input op, and
 * lookup time at 10 entries against 100,000 (goals: under 200 bytes; within 1.5x). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memo/memo.h"
#include "platform/platform.h"

/* Distinct two-input calls: x [rows, hidden], w [hidden], as an RMSNorm sees them. */
static void call_tensors(long i, int64_t *xs, int64_t *ws, DLTensor *x, DLTensor *w) {
  xs[0] = 1 + i % 4096;
  xs[1] = 64 * (1 + i / 4096);
  ws[0] = xs[1];
  memset(x, 0, sizeof(*x));
  memset(w, 0, sizeof(*w));
  x->device = w->device = (DLDevice){kDLCPU, 0};
  x->dtype = w->dtype = (DLDataType){kDLBfloat, 16, 1};
  x->ndim = 2;
  x->shape = xs;
  w->ndim = 1;
  w->shape = ws;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median ns per lookup (key built from the tensors, then found), cycling over `working` keys
 * spread across the memo's `n` entries. */
static double lookup_ns(tr_memo *memo, long n, long working, long lookups) {
  double runs[7];
  for (int r = 0; r < 7; r++) {
    int64_t xs[2], ws[1];
    DLTensor x, w;
    const DLTensor *inputs[2] = {&x, &w};
    volatile uintptr_t sink = 0;
    uint64_t start = tr_plat_now_ns();
    for (long i = 0; i < lookups; i++) {
      call_tensors(((i % working) * 7919) % n, xs, ws, &x, &w);
      tr_memo_key key;
      tr_memo_key_from_dl(inputs, 2, &key);
      sink += (uintptr_t)tr_memo_find(memo, &key);
    }
    runs[r] = (double)(tr_plat_now_ns() - start) / (double)lookups;
    (void)sink;
  }
  qsort(runs, 7, sizeof(double), compare);
  return runs[3];
}

int main(int argc, char **argv) {
  if (argc > 1) {
    printf("usage: memo_bench\nBuilds memos of 10 and 100,000 entries of a two-input op and prints bytes\n"
           "per entry and the median ns per lookup (key built from DLTensors, then found).\n");
    return strcmp(argv[1], "--help") == 0 ? 0 : 2;
  }
  long sizes[] = {10, 100000};
  double ns[2], ns_all[2];
  size_t bytes[2];
  static char values[100000];
  for (int s = 0; s < 2; s++) {
    tr_memo *memo = NULL;
    if (tr_memo_new(&memo) != NULL) return 1;
    for (long i = 0; i < sizes[s]; i++) {
      int64_t xs[2], ws[1];
      DLTensor x, w;
      const DLTensor *inputs[2] = {&x, &w};
      call_tensors(i, xs, ws, &x, &w);
      tr_memo_key key;
      tr_memo_key_from_dl(inputs, 2, &key);
      if (tr_memo_insert(memo, &key, &values[i]) != NULL) return 1;
    }
    bytes[s] = tr_memo_bytes(memo);
    ns[s] = lookup_ns(memo, sizes[s], 10, 2000000);
    ns_all[s] = lookup_ns(memo, sizes[s], sizes[s], 2000000);
    tr_memo_destroy(&memo);
  }
  printf("memo benchmark: a two-input op (x [rows, hidden] bf16, w [hidden]); 7 runs of 2,000,000 lookups\n");
  printf("(hot: the same 10 calls again and again, as a serving loop does; all: a different call\n"
         " each time, spread over every entry, which measures the machine's memory, not the table)\n");
  printf("%-10s %14s %14s %16s %16s\n", "entries", "memo bytes", "bytes/entry", "ns/lookup hot", "ns/lookup all");
  for (int s = 0; s < 2; s++) {
    printf("%-10ld %14zu %14.1f %16.1f %16.1f\n", sizes[s], bytes[s],
           (double)bytes[s] / (double)sizes[s], ns[s], ns_all[s]);
  }
  double per_entry = (double)bytes[1] / 100000.0, ratio = ns[1] / ns[0];
  printf("bytes per entry at 100,000: %.1f (goal < 200: %s)\n", per_entry, per_entry < 200 ? "ok" : "MISSED");
  printf("hot lookup at 100,000 / at 10: %.2fx (goal <= 1.5x: %s)\n", ratio, ratio <= 1.5 ? "ok" : "MISSED");
  return 0;
}
