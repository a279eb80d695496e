/* select_bench.c: the selector's benchmark: one selection (key_for over 4 implementations) and
 * a repeated kernel_for with an equal call spec (a cache hit); goals 2 us and 0.1 us. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"
#include "selector/selector.h"

static const tr_call_field kFields[] = {
    {"batch", TR_VALUE_INT, 0, 0, {0}}, {"seqlen_kv", TR_VALUE_INT, 0, 0, {0}},
    {"heads", TR_VALUE_INT, 0, 0, {0}}, {"dim", TR_VALUE_INT, 0, 0, {0}},
};
static const tr_call_spec_type kCall = {"AttentionCall", 4, kFields};
static const char *const kArgs[] = {"q", "k_cache", "v_cache", "seqlens"};
static const tr_kernel_interface kIface = {"GQADecodeDenseFwdInterface", &kCall, 4, kArgs, 0, NULL, ""};

static const char *refuse_small(const tr_kernel_type *t, const tr_call_spec *c, char *b, size_t n) {
  (void)t, (void)b, (void)n;
  return tr_call_spec_int(c, "seqlen_kv") >= 1024 ? NULL : "short";
}
static const char *refuse_batch(const tr_kernel_type *t, const tr_call_spec *c, char *b, size_t n) {
  (void)t, (void)b, (void)n;
  return tr_call_spec_int(c, "batch") == 1 ? NULL : "batch";
}
static const char *refuse_dim(const tr_kernel_type *t, const tr_call_spec *c, char *b, size_t n) {
  (void)t, (void)b, (void)n;
  return tr_call_spec_int(c, "dim") == 64 ? NULL : "dim";
}
static tr_status *noop(void *s, DLTensor *const *i, size_t ni, DLTensor *const *o, size_t no) {
  (void)s, (void)i, (void)ni, (void)o, (void)no;
  return NULL;
}
static tr_status *factory(const tr_kernel_type *t, const tr_call_spec *c, tr_kernel *out) {
  (void)t, (void)c;
  out->call = noop;
  return NULL;
}
static tr_status *facts(void *ctx, const tr_device *d, tr_device_facts *out) {
  (void)ctx, (void)d;
  out->arch = 90, out->calibration = NULL, out->sm_count = 132, out->smem_budget = 232448;
  return NULL;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc > 1) {
    printf("usage: select_bench\nTimes one selection (key_for over 4 implementations, facts stated) and a\n"
           "repeated kernel_for with an equal call spec (a dispatch-cache hit); 9 runs, median.\n");
    return strcmp(argv[1], "--help") == 0 ? 0 : 2;
  }
  static const int32_t archs[] = {80, 89, 90}, sm90[] = {90};
  static const char *const over_bs1[] = {"bs1", NULL};
  tr_kernel_type general = {sizeof(tr_kernel_type), "decode", &kIface, NULL, archs, 3, 1, NULL, NULL, NULL, NULL, factory, NULL, NULL};
  tr_kernel_type bs1 = {sizeof(tr_kernel_type), "bs1", &kIface, NULL, sm90, 1, 0, NULL, &general, refuse_batch, NULL, factory, NULL, NULL};
  tr_kernel_type lng = {sizeof(tr_kernel_type), "long", &kIface, NULL, archs, 3, 0, over_bs1, &general, refuse_small, NULL, factory, NULL, NULL};
  tr_kernel_type d64 = {sizeof(tr_kernel_type), "dim64", &kIface, NULL, archs, 3, 0, NULL, &general, refuse_dim, NULL, factory, NULL, NULL};
  const tr_kernel_interface *ifaces[] = {&kIface};
  const tr_kernel_type *types[] = {&general, &bs1, &lng, &d64};
  tr_selector *sel = NULL;
  if (tr_selector_new("GQADecodeFwdOp", ifaces, 1, types, 4, facts, NULL, &sel) != NULL) return 1;
  tr_device dev = {"cuda", 0};
  tr_named_value values[] = {{"batch", tr_value_int(1)}, {"seqlen_kv", tr_value_int(4096)},
                             {"heads", tr_value_int(32)}, {"dim", tr_value_int(128)}};
  tr_call_spec stated, plain;
  if (tr_call_spec_init(&stated, &kCall, &dev, values, 4) || tr_call_spec_init(&plain, &kCall, &dev, values, 4)) return 1;
  tr_device_facts f = {90, NULL, 132, 232448};
  tr_call_spec_state_facts(&stated, TR_FACT_ARCH | TR_FACT_SM_COUNT, &f);
  double ns[2][9];
  long iters = 1000000;
  tr_selected out;
  for (int run = 0; run < 9; run++) {
    uint64_t start = tr_plat_now_ns();
    for (long i = 0; i < iters; i++) {
      const char *key;
      if (tr_selector_key_for(sel, "GQADecodeDenseFwdInterface", &stated, &key) != NULL) return 1;
    }
    ns[0][run] = (double)(tr_plat_now_ns() - start) / (double)iters;
    start = tr_plat_now_ns();
    for (long i = 0; i < iters; i++) {
      if (tr_selector_kernel_for(sel, "GQADecodeDenseFwdInterface", &plain, &out) != NULL) return 1;
    }
    ns[1][run] = (double)(tr_plat_now_ns() - start) / (double)iters;
  }
  qsort(ns[0], 9, sizeof(double), compare);
  qsort(ns[1], 9, sizeof(double), compare);
  printf("selector benchmark: GQA decode, 4 implementations (batch 1, kv 4096, SM90 -> '%s'); %ld x 9 runs, median\n",
         out.key, iters);
  printf("%-52s %10s %12s\n", "operation", "ns", "goal");
  printf("%-52s %10.1f %12s\n", "one selection (key_for over 4 implementations)", ns[0][4], ns[0][4] < 2000 ? "< 2000 ok" : "MISSED");
  printf("%-52s %10.1f %12s\n", "repeated kernel_for, equal call spec (cache hit)", ns[1][4], ns[1][4] < 100 ? "< 100 ok" : "MISSED");
  tr_selector_stats st = tr_selector_get_stats(sel);
  printf("selections %llu, builds %llu, cache hits %llu\n", (unsigned long long)st.selections,
         (unsigned long long)st.builds, (unsigned long long)st.hits);
  tr_call_spec_clear(&stated);
  tr_call_spec_clear(&plain);
  tr_selector_destroy(&sel);
  return 0;
}
