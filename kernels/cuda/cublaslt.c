/* cublaslt.c: row-major GEMMs through cuBLASLt, loaded at run time (no CUDA header at build
 * time: the few declarations used are written here as cublasLt.h of CUDA 12 and 13 has them).
 *
 * cuBLASLt is column-major; a row-major d [m, n] is the column-major d^T [n, m], and
 * d^T = op(b)^T op(a)^T: cuBLASLt's "A" is our b and its "B" our a, each with its own transpose. */
#include "kernels/cuda/cublaslt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/timing.h"
#include "kernels/cuda/toolkit.h"
#include "platform/platform.h"

typedef int lt_status; /* cublasStatus_t: 0 is success */
typedef void *lt_handle;
typedef void *lt_desc;
typedef void *lt_layout;
typedef void *lt_pref;
typedef struct lt_algo {
  uint64_t data[8];
} lt_algo;
typedef struct lt_heuristic { /* cublasLtMatmulHeuristicResult_t */
  lt_algo algo;
  size_t workspace;
  lt_status state;
  float waves;
  int reserved[4];
} lt_heuristic;

enum {
  kComputeF32 = 68,    /* CUBLAS_COMPUTE_32F: no TF32 */
  kTypeF32 = 0,        /* CUDA_R_32F */
  kTypeF16 = 2,        /* CUDA_R_16F */
  kTypeBF16 = 14,      /* CUDA_R_16BF */
  kOpN = 0,            /* CUBLAS_OP_N */
  kOpT = 1,            /* CUBLAS_OP_T */
  kDescTransA = 3,     /* CUBLASLT_MATMUL_DESC_TRANSA */
  kDescTransB = 4,     /* CUBLASLT_MATMUL_DESC_TRANSB */
  kPrefMaxWorkspace = 1, /* CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64_t) */
  kPrefAlignA = 5,     /* CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (uint32_t); B, C, D follow */
};

/* The most workspace an algorithm may ask for (what PyTorch gives cuBLAS on Hopper). */
#define TR_LT_MAX_WORKSPACE ((uint64_t)32 << 20)
/* Heuristic algorithms kept per GEMM (the tuning candidates). */
#define TR_LT_ALGOS 8

struct lt_api {
  tr_plat_lib *lib;
  char error[1536];
  lt_status (*create)(lt_handle *);
  lt_status (*desc_create)(lt_desc *, int compute, int scale);
  lt_status (*desc_destroy)(lt_desc);
  lt_status (*desc_set)(lt_desc, int attr, const void *buf, size_t size);
  lt_status (*layout_create)(lt_layout *, int type, uint64_t rows, uint64_t cols, int64_t ld);
  lt_status (*layout_destroy)(lt_layout);
  lt_status (*pref_create)(lt_pref *);
  lt_status (*pref_destroy)(lt_pref);
  lt_status (*pref_set)(lt_pref, int attr, const void *buf, size_t size);
  lt_status (*heuristic)(lt_handle, lt_desc, lt_layout, lt_layout, lt_layout, lt_layout, lt_pref, int,
                         lt_heuristic *, int *);
  lt_status (*matmul)(lt_handle, lt_desc, const void *alpha, const void *a, lt_layout, const void *b, lt_layout,
                      const void *beta, const void *c, lt_layout, void *d, lt_layout, const lt_algo *, void *ws,
                      size_t ws_size, tr_cu_stream);
  size_t (*version)(void);
  const char *(*status_name)(lt_status);
  tr_plat_mutex lock; /* the handles */
  lt_handle handles[TR_CUDA_MAX_DEVICES];
};
static struct lt_api g;
static tr_plat_once g_once = TR_PLAT_ONCE_INIT;
static int g_ready;

static void note(const char *text) {
  size_t used = strlen(g.error);
  if (used + 1 < sizeof(g.error)) snprintf(g.error + used, sizeof(g.error) - used, "%s%s", used ? "; " : "", text);
}

static int bind(tr_plat_lib *lib) {
  static const tr_plat_lib_entry kSymbols[] = {
      {"cublasLtCreate", offsetof(struct lt_api, create)},
      {"cublasLtMatmulDescCreate", offsetof(struct lt_api, desc_create)},
      {"cublasLtMatmulDescDestroy", offsetof(struct lt_api, desc_destroy)},
      {"cublasLtMatmulDescSetAttribute", offsetof(struct lt_api, desc_set)},
      {"cublasLtMatrixLayoutCreate", offsetof(struct lt_api, layout_create)},
      {"cublasLtMatrixLayoutDestroy", offsetof(struct lt_api, layout_destroy)},
      {"cublasLtMatmulPreferenceCreate", offsetof(struct lt_api, pref_create)},
      {"cublasLtMatmulPreferenceDestroy", offsetof(struct lt_api, pref_destroy)},
      {"cublasLtMatmulPreferenceSetAttribute", offsetof(struct lt_api, pref_set)},
      {"cublasLtMatmulAlgoGetHeuristic", offsetof(struct lt_api, heuristic)},
      {"cublasLtMatmul", offsetof(struct lt_api, matmul)},
      {"cublasLtGetVersion", offsetof(struct lt_api, version)},
      {"cublasLtGetStatusName", offsetof(struct lt_api, status_name)},
  };
  tr_status *missing = tr_plat_lib_bind(lib, kSymbols, sizeof(kSymbols) / sizeof(kSymbols[0]), &g);
  if (missing == NULL) return 1;
  note(tr_status_message(missing));
  tr_status_destroy(&missing);
  return 0;
}

static void load_once(void) {
  tr_plat_lib *lib = tr_cuda_lib_open_first("libcublasLt", 0, bind, note);
  if (lib == NULL) return;
  tr_status *failed = tr_plat_mutex_init(&g.lock);
  if (failed != NULL) {
    note(tr_status_message(failed));
    tr_status_destroy(&failed);
    return;
  }
  g.lib = lib; /* never closed: its handles live as long as the process */
  g_ready = 1;
}

tr_status *tr_lt_load(void) {
  tr_plat_once_run(&g_once, load_once);
  if (!g_ready) {
    return TR_STATUS(TR_BACKEND, "cuBLASLt (libcublasLt.so.13 of the CUDA Toolkit) could not be loaded: %s",
                     g.error[0] ? g.error : "unknown reason");
  }
  return NULL;
}

size_t tr_lt_version(void) { return g_ready ? g.version() : 0; }

static tr_status *lt_error(lt_status rc, const char *what) {
  const char *name = g.status_name != NULL ? g.status_name(rc) : NULL;
  return TR_STATUS(TR_BACKEND, "cuBLASLt: %s: %s (%d)", what, name ? name : "error", rc);
}

/* The handle of device `index` (its context current), made once. */
static tr_status *handle_of(int32_t index, lt_handle *out) {
  if (index < 0 || index >= TR_CUDA_MAX_DEVICES) return TR_STATUS(TR_VALUE, "cuBLASLt: no cuda device %d", index);
  tr_plat_mutex_lock(&g.lock);
  lt_status rc = 0;
  if (g.handles[index] == NULL) rc = g.create(&g.handles[index]);
  *out = g.handles[index];
  tr_plat_mutex_unlock(&g.lock);
  return rc == 0 ? NULL : lt_error(rc, "creating a handle");
}

struct tr_lt_gemm {
  int32_t index;
  tr_lt_shape shape;
  size_t elem;
  lt_handle handle;
  lt_desc desc;
  lt_layout la, lb, ld; /* cuBLASLt's A (our b), B (our a), C = D */
  lt_heuristic algos[TR_LT_ALGOS];
  int offered, chosen, tuned;
  float tuned_us;
  lt_heuristic any; /* for pointers aligned only to their element */
  tr_cu_ptr ws;
  size_t ws_size;
};

static int lt_type(tr_lt_type t) { return t == TR_LT_FLOAT16 ? kTypeF16 : t == TR_LT_BFLOAT16 ? kTypeBF16 : kTypeF32; }

/* The heuristic's algorithms for pointers aligned to `align` bytes (at most `max`). */
static tr_status *query(tr_lt_gemm *g_, uint32_t align, int max, lt_heuristic *out, int *n) {
  lt_pref pref = NULL;
  lt_status rc = g.pref_create(&pref);
  uint64_t ws = TR_LT_MAX_WORKSPACE;
  if (rc == 0) rc = g.pref_set(pref, kPrefMaxWorkspace, &ws, sizeof(ws));
  for (int i = 0; i < 4 && rc == 0; i++) rc = g.pref_set(pref, kPrefAlignA + i, &align, sizeof(align));
  *n = 0;
  if (rc == 0) rc = g.heuristic(g_->handle, g_->desc, g_->la, g_->lb, g_->ld, g_->ld, pref, max, out, n);
  if (pref != NULL) g.pref_destroy(pref);
  if (rc != 0) return lt_error(rc, "asking for an algorithm (cublasLtMatmulAlgoGetHeuristic)");
  if (*n <= 0) {
    return TR_STATUS(TR_BACKEND, "cuBLASLt offers no algorithm for %lldx%lldx%lld (trans_a %d, trans_b %d)",
                     (long long)g_->shape.m, (long long)g_->shape.n, (long long)g_->shape.k, g_->shape.trans_a,
                     g_->shape.trans_b);
  }
  return NULL;
}

/* Makes the workspace at least `bytes`. */
static tr_status *ensure_workspace(tr_lt_gemm *g_, size_t bytes) {
  if (bytes <= g_->ws_size) return NULL;
  tr_cu_ptr p = 0;
  TR_RETURN_IF_ERROR(tr_cu_alloc(bytes, &p));
  if (g_->ws != 0) tr_cu_free(g_->ws);
  g_->ws = p;
  g_->ws_size = bytes;
  return NULL;
}

void tr_lt_gemm_destroy(tr_lt_gemm *g_) {
  if (g_ == NULL) return;
  if (g_->la != NULL) g.layout_destroy(g_->la);
  if (g_->lb != NULL) g.layout_destroy(g_->lb);
  if (g_->ld != NULL) g.layout_destroy(g_->ld);
  if (g_->desc != NULL) g.desc_destroy(g_->desc);
  if (g_->ws != 0) tr_cu_free(g_->ws);
  free(g_);
}

tr_status *tr_lt_gemm_new(int32_t index, const tr_lt_shape *s, tr_lt_gemm **out) {
  *out = NULL;
  TR_RETURN_IF_ERROR(tr_lt_load());
  if (s->m < 1 || s->n < 1 || s->k < 1) {
    return TR_STATUS(TR_VALUE, "cuBLASLt GEMM of %lldx%lldx%lld: m, n and k must be at least 1", (long long)s->m,
                     (long long)s->n, (long long)s->k);
  }
  tr_lt_gemm *g_ = calloc(1, sizeof(*g_));
  if (g_ == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a cuBLASLt GEMM");
  g_->index = index;
  g_->shape = *s;
  g_->elem = s->type == TR_LT_FLOAT32 ? 4 : 2;
  tr_status *status = handle_of(index, &g_->handle);
  int type = lt_type(s->type);
  int32_t op_a = s->trans_b ? kOpT : kOpN, op_b = s->trans_a ? kOpT : kOpN;
  lt_status rc = 0;
  if (status == NULL) {
    rc = g.desc_create(&g_->desc, kComputeF32, kTypeF32);
    if (rc == 0) rc = g.desc_set(g_->desc, kDescTransA, &op_a, sizeof(op_a));
    if (rc == 0) rc = g.desc_set(g_->desc, kDescTransB, &op_b, sizeof(op_b));
    uint64_t a_rows = s->trans_b ? s->k : s->n, a_cols = s->trans_b ? s->n : s->k;
    uint64_t b_rows = s->trans_a ? s->m : s->k, b_cols = s->trans_a ? s->k : s->m;
    if (rc == 0) rc = g.layout_create(&g_->la, type, a_rows, a_cols, (int64_t)a_rows);
    if (rc == 0) rc = g.layout_create(&g_->lb, type, b_rows, b_cols, (int64_t)b_rows);
    if (rc == 0) rc = g.layout_create(&g_->ld, type, (uint64_t)s->n, (uint64_t)s->m, s->n);
    if (rc != 0) status = lt_error(rc, "making the matmul descriptor and layouts");
  }
  if (status == NULL) status = query(g_, 16, TR_LT_ALGOS, g_->algos, &g_->offered);
  int n_any = 0;
  if (status == NULL) status = query(g_, (uint32_t)g_->elem, 1, &g_->any, &n_any);
  if (status == NULL) {
    size_t need = g_->algos[0].workspace > g_->any.workspace ? g_->algos[0].workspace : g_->any.workspace;
    status = ensure_workspace(g_, need);
  }
  if (status != NULL) {
    tr_lt_gemm_destroy(g_);
    return status;
  }
  *out = g_;
  return NULL;
}

tr_status *tr_lt_fill_random(tr_cu_ptr dst, size_t count, tr_lt_type type) {
  enum { PIECE = 1 << 20 };
  size_t elem = type == TR_LT_FLOAT32 ? 4 : 2, n = count < PIECE ? count : PIECE;
  unsigned char *host = malloc(n * elem > 0 ? n * elem : 1);
  if (host == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "%zu bytes of tuning data", n * elem);
  uint32_t state = 0x9e3779b9u;
  for (size_t i = 0; i < n; i++) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    float v = (float)(state >> 8) / (float)(1u << 23) - 1.0f; /* [-1, 1) */
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if (type == TR_LT_FLOAT32) {
      memcpy(host + 4 * i, &bits, 4);
    } else {
      uint16_t h;
      if (type == TR_LT_BFLOAT16) {
        h = (uint16_t)(bits >> 16);
      } else { /* float16 of a value in [-1, 1): sign, exponent rebased from 127 to 15, 10 bits */
        uint32_t e = (bits >> 23) & 0xff, sign = (bits >> 16) & 0x8000;
        h = e < 113 ? (uint16_t)sign /* below float16's normal range: zero */
                    : (uint16_t)(sign | ((e - 112) << 10) | ((bits >> 13) & 0x3ff));
      }
      memcpy(host + 2 * i, &h, 2);
    }
  }
  tr_status *status = NULL;
  for (size_t done = 0; done < count && status == NULL; done += n) {
    size_t now = count - done < n ? count - done : n;
    status = tr_cu_copy_to_device(dst + done * elem, host, now * elem);
  }
  free(host);
  return status;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

tr_status *tr_lt_gemm_run(tr_lt_gemm *g_, const void *a, const void *b, void *d, tr_cu_stream stream) {
  static const float kOne = 1.0f, kZero = 0.0f;
  const lt_heuristic *h = aligned16(a) && aligned16(b) && aligned16(d) ? &g_->algos[g_->chosen] : &g_->any;
  lt_status rc = g.matmul(g_->handle, g_->desc, &kOne, b, g_->la, a, g_->lb, &kZero, d, g_->ld, d, g_->ld, &h->algo,
                          (void *)(uintptr_t)g_->ws, g_->ws_size, stream);
  return rc == 0 ? NULL : lt_error(rc, "running the GEMM (cublasLtMatmul)");
}

/* Operand sets tuning rotates through: enough that they are not all in the L2 at once (a model's
 * layers each bring their own weight), at most TUNE_SETS. */
#define TUNE_SETS 8
#define TUNE_BYTES ((size_t)128 << 20)

/* One timed run of an algorithm on tuning's operands: set `rep % sets`. */
typedef struct timed_algo {
  tr_lt_gemm *g;
  const lt_heuristic *h;
  const tr_cu_ptr *a, *b;
  tr_cu_ptr d;
  int sets;
} timed_algo;

static tr_status *run_algo(void *ctx, int rep, tr_cu_stream stream) {
  static const float kOne = 1.0f, kZero = 0.0f;
  const timed_algo *t = ctx;
  tr_lt_gemm *g_ = t->g;
  int j = rep % t->sets;
  lt_status rc = g.matmul(g_->handle, g_->desc, &kOne, (void *)(uintptr_t)t->b[j], g_->la, (void *)(uintptr_t)t->a[j],
                          g_->lb, &kZero, (void *)(uintptr_t)t->d, g_->ld, (void *)(uintptr_t)t->d, g_->ld,
                          &t->h->algo, (void *)(uintptr_t)g_->ws, g_->ws_size, stream);
  return rc == 0 ? NULL : lt_error(rc, "timing an algorithm");
}

tr_status *tr_lt_gemm_tune(tr_lt_gemm *g_, int candidates, int reps, tr_cu_stream stream) {
  if (g_->tuned) return NULL;
  if (tr_cu_stream_capturing(stream)) {
    return TR_STATUS(TR_VALUE, "tuning a cuBLASLt GEMM: the stream is being captured into a graph; tune before "
                     "capturing");
  }
  int n = candidates < g_->offered ? candidates : g_->offered;
  if (n < 1) n = 1;
  if (reps < 1) reps = 1;
  size_t most = 0;
  for (int i = 0; i < n; i++) most = g_->algos[i].workspace > most ? g_->algos[i].workspace : most;
  const tr_lt_shape *s = &g_->shape;
  size_t a_count = (size_t)(s->m * s->k), b_count = (size_t)(s->k * s->n);
  size_t a_bytes = a_count * g_->elem, b_bytes = b_count * g_->elem, d_bytes = (size_t)(s->m * s->n) * g_->elem;
  int sets = (int)((TUNE_BYTES + a_bytes + b_bytes - 1) / (a_bytes + b_bytes));
  if (sets > TUNE_SETS) sets = TUNE_SETS;
  if (sets < 1) sets = 1;
  tr_cu_ptr a[TUNE_SETS] = {0}, b[TUNE_SETS] = {0}, d = 0;
  tr_cu_event start = NULL, end = NULL;
  tr_status *status = ensure_workspace(g_, most);
  for (int j = 0; j < sets && status == NULL; j++) {
    status = tr_cu_alloc(a_bytes, &a[j]);
    if (status == NULL) status = tr_cu_alloc(b_bytes, &b[j]);
    if (status == NULL) status = tr_lt_fill_random(a[j], a_count, s->type);
    if (status == NULL) status = tr_lt_fill_random(b[j], b_count, s->type);
  }
  if (status == NULL) status = tr_cu_alloc(d_bytes, &d);
  if (status == NULL) status = tr_cu_event_new(&start);
  if (status == NULL) status = tr_cu_event_new(&end);
  int best = g_->chosen;
  float best_us = 0.f;
  for (int i = 0; i < n && status == NULL; i++) {
    float us = 0.f;
    timed_algo t = {g_, &g_->algos[i], a, b, d, sets};
    tr_status *failed = tr_cuda_time_runs(run_algo, &t, TR_CUDA_TUNE_WARMUPS, reps, stream, start, end, &us);
    if (failed != NULL) { /* an algorithm that fails here is not chosen; the others still are */
      tr_status_destroy(&failed);
      continue;
    }
    if (best_us == 0.f || us < best_us) {
      best_us = us;
      best = i;
    }
  }
  if (status == NULL) status = tr_cu_stream_sync(stream);
  tr_cu_event_destroy(start);
  tr_cu_event_destroy(end);
  for (int j = 0; j < sets; j++) {
    if (a[j]) tr_cu_free(a[j]);
    if (b[j]) tr_cu_free(b[j]);
  }
  if (d) tr_cu_free(d);
  if (status != NULL) return status;
  if (best_us == 0.f) return TR_STATUS(TR_BACKEND, "tuning a cuBLASLt GEMM: no algorithm ran");
  g_->chosen = best;
  g_->tuned = 1;
  g_->tuned_us = best_us;
  return NULL;
}

tr_lt_choice tr_lt_gemm_choice(const tr_lt_gemm *g_) {
  tr_lt_choice c = {g_->chosen, g_->offered, g_->tuned, g_->algos[g_->chosen].workspace, g_->tuned_us};
  return c;
}
