/* intree.c: the in-tree CUDA ops for the selector: call-spec types, interfaces, implementations
 * with their refusals and precedence, the factories (NVRTC artifact, module loaded once per
 * device, a kernel launching it on the current stream), and cuda memory and copies. */
#include "kernels/intree/intree.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/artifact.h"
#include "kernels/cuda/driver.h"
#include "platform/platform.h"

/* The sources, with the common header in front (kernels/tools/embed.py). */
extern const char tr_src_norm[], tr_src_softmax[], tr_src_add[], tr_src_copy[];

/* ---- call-spec types and interfaces ---- */

static const tr_call_field kNormFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"row", TR_VALUE_INT, 0, 0, {0}},
    {"weight", TR_VALUE_BOOL, 0, 1, {.kind = TR_VALUE_BOOL, .as.b = false}},
    {"bias", TR_VALUE_BOOL, 0, 1, {.kind = TR_VALUE_BOOL, .as.b = false}},
    {"eps", TR_VALUE_FLOAT, 0, 1, {.kind = TR_VALUE_FLOAT, .as.f = 1e-5}},
};
static const tr_call_spec_type kNormCall = {"NormCall", 5, kNormFields};

static const tr_call_field kSoftmaxFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"out_dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"row", TR_VALUE_INT, 0, 0, {0}},
    {"inner", TR_VALUE_INT, 0, 1, {.kind = TR_VALUE_INT, .as.i = 1}},
};
static const tr_call_spec_type kSoftmaxCall = {"SoftmaxCall", 4, kSoftmaxFields};

static const tr_call_field kElementwiseFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"alpha", TR_VALUE_FLOAT, 0, 1, {.kind = TR_VALUE_FLOAT, .as.f = 1.0}},
};
static const tr_call_spec_type kElementwiseCall = {"ElementwiseCall", 2, kElementwiseFields};

static const char *const kRmsArgs[] = {"x", "weight", NULL};
static const char *const kLayerArgs[] = {"x", "weight", "bias", NULL};
static const char *const kSoftmaxArgs[] = {"x", NULL};
static const char *const kAddArgs[] = {"a", "b", NULL};
static const char *const kY[] = {"y"};
static const char *const kC[] = {"c"};

static const tr_kernel_interface kRmsIface = {
    "RMSNormRowFwdInterface", &kNormCall, 2, kRmsArgs, 1, kY,
    "x [rows, row] contiguous, weight [row] or absent, same dtype, on one cuda device; returns y like x; "
    "nothing written in place"};
static const tr_kernel_interface kLayerIface = {
    "LayerNormRowFwdInterface", &kNormCall, 3, kLayerArgs, 1, kY,
    "x [rows, row] contiguous, weight and bias [row] or absent, same dtype, on one cuda device; returns y like "
    "x; nothing written in place"};
static const tr_kernel_interface kSoftmaxIface = {
    "SoftmaxRowFwdInterface", &kSoftmaxCall, 1, kSoftmaxArgs, 1, kY,
    "x [outer, row, inner] contiguous on a cuda device; returns y of x's shape in out_dtype; nothing written "
    "in place"};
static const tr_kernel_interface kAddIface = {
    "AddElementwiseFwdInterface", &kElementwiseCall, 2, kAddArgs, 1, kC,
    "a and b of one shape and dtype, contiguous, on one cuda device; returns c = a + alpha * b; nothing "
    "written in place"};

/* ---- implementations ---- */

/* bf16 conversions (cvt.rn.bf16.f32) need SM80 or later. */
static const int32_t kArchs[] = {80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121};
#define N_ARCHS (sizeof(kArchs) / sizeof(kArchs[0]))

enum { WARP_MAX_ROW = 1024, BLOCK_MAX_ROW = 32768 };

typedef enum impl_kind { IMPL_WARP, IMPL_BLOCK, IMPL_LOOPED, IMPL_STRIDED, IMPL_ELEMENTWISE } impl_kind;
typedef enum family { FAM_RMS, FAM_LAYER, FAM_SOFTMAX, FAM_ADD } family;

typedef struct impl_info {
  family fam;
  impl_kind kind;
} impl_info;

static const impl_info kInfo[] = {
    {FAM_RMS, IMPL_WARP},         {FAM_RMS, IMPL_LOOPED},        {FAM_LAYER, IMPL_WARP},
    {FAM_LAYER, IMPL_LOOPED},
    {FAM_SOFTMAX, IMPL_WARP},     {FAM_SOFTMAX, IMPL_BLOCK},     {FAM_SOFTMAX, IMPL_LOOPED},
    {FAM_SOFTMAX, IMPL_STRIDED},  {FAM_ADD, IMPL_ELEMENTWISE},
};

static int is_float16ish(tr_dtype d) {
  return tr_dtype_equal(d, TR_FLOAT16) || tr_dtype_equal(d, TR_BFLOAT16) || tr_dtype_equal(d, TR_FLOAT32);
}

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  const impl_info *info = self->ctx;
  int64_t row = tr_call_spec_int(call, "row");
  if (info->fam == FAM_ADD) {
    tr_dtype d = tr_call_spec_get(call, "dtype")->as.dtype;
    if (is_float16ish(d) || tr_dtype_equal(d, TR_FLOAT64) || tr_dtype_equal(d, TR_INT32) ||
        tr_dtype_equal(d, TR_INT64)) {
      return NULL;
    }
    snprintf(buf, size, "adds float16, bfloat16, float32, float64, int32 and int64; got %s", tr_dtype_name(d));
    return buf;
  }
  const char *fields[] = {"dtype", "out_dtype"};
  for (size_t i = 0; i < (info->fam == FAM_SOFTMAX ? 2u : 1u); i++) {
    tr_dtype d = tr_call_spec_get(call, fields[i])->as.dtype;
    if (!is_float16ish(d)) {
      snprintf(buf, size, "%s must be float16, bfloat16 or float32; got %s", fields[i], tr_dtype_name(d));
      return buf;
    }
  }
  if (row < 1) {
    snprintf(buf, size, "rows must hold at least one element; got row %lld", (long long)row);
    return buf;
  }
  if (row > INT32_MAX - 1024) { /* the kernels index a row with 32-bit ints */
    snprintf(buf, size, "rows hold at most %d elements; got row %lld", INT32_MAX - 1024, (long long)row);
    return buf;
  }
  if (info->fam == FAM_SOFTMAX && info->kind != IMPL_STRIDED && tr_call_spec_int(call, "inner") != 1) {
    snprintf(buf, size, "serves softmax along the last non-unit axis only; got an inner stride of %lld",
             (long long)tr_call_spec_int(call, "inner"));
    return buf;
  }
  if (info->kind == IMPL_WARP && row > WARP_MAX_ROW) {
    snprintf(buf, size, "a warp holds rows of at most %d elements; got row %lld", WARP_MAX_ROW, (long long)row);
    return buf;
  }
  if (info->kind == IMPL_BLOCK && row > BLOCK_MAX_ROW) {
    snprintf(buf, size, "a block holds rows of at most %d elements in registers; got row %lld", BLOCK_MAX_ROW,
             (long long)row);
    return buf;
  }
  return NULL;
}

static tr_status *factory(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out);

#define TYPE(var, key_, iface, idx, general_, preferred_)                                                    \
  static const tr_kernel_type var = {sizeof(tr_kernel_type), key_, &iface, NULL, kArchs, N_ARCHS, general_, \
                                     preferred_, NULL, refusal, NULL, factory, NULL, (void *)&kInfo[idx]}

static const char *const kSoftmaxWarpOver[] = {"softmax_block", "softmax_looped", NULL};
static const char *const kSoftmaxBlockOver[] = {"softmax_looped", NULL};

/* RMSNorm and LayerNorm: a warp per row up to 1024 elements, else the looped kernel (general),
 * which holds a row of up to four 16-byte vectors per thread in registers (packed, read once)
 * and loops over longer ones: one implementation, since the held path is the looped kernel's
 * own for every row that fits (norm.cu). Softmax keeps a separate block kernel: its row and
 * exponentials held measured 96-103% of copy on the H200 against the looped kernel's 60-80%. */
TYPE(kRmsWarp, "rms_norm_warp", kRmsIface, 0, 0, NULL);
TYPE(kRmsLooped, "rms_norm_looped", kRmsIface, 1, 1, NULL);
TYPE(kLayerWarp, "layer_norm_warp", kLayerIface, 2, 0, NULL);
TYPE(kLayerLooped, "layer_norm_looped", kLayerIface, 3, 1, NULL);
TYPE(kSoftmaxWarp, "softmax_warp", kSoftmaxIface, 4, 0, kSoftmaxWarpOver);
TYPE(kSoftmaxBlock, "softmax_block", kSoftmaxIface, 5, 0, kSoftmaxBlockOver);
TYPE(kSoftmaxLooped, "softmax_looped", kSoftmaxIface, 6, 0, NULL);
TYPE(kSoftmaxStrided, "softmax_strided", kSoftmaxIface, 7, 1, NULL);
TYPE(kAdd, "add_elementwise", kAddIface, 8, 1, NULL);

/* ---- call specs of calls ---- */

static const tr_value *param(const tr_named_value *params, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(params[i].name, name) == 0) return &params[i].value;
  }
  return NULL;
}

static int64_t spec_numel(const tr_tensor_spec *s, int32_t from, int32_t to) {
  int64_t n = 1;
  for (int32_t d = from; d < to; d++) n *= s->shape[d];
  return n;
}

/* torch.finfo(dtype).eps: RMSNorm's eps when none is given. */
static double finfo_eps(tr_dtype d) {
  if (tr_dtype_equal(d, TR_FLOAT16)) return 0.0009765625;
  if (tr_dtype_equal(d, TR_BFLOAT16)) return 0.0078125;
  if (tr_dtype_equal(d, TR_FLOAT64)) return 2.220446049250313e-16;
  return 1.1920928955078125e-07;
}

static tr_status *norm_spec(const char *op, int rms, const tr_tensor_spec *const *in, size_t n_in,
                            const tr_named_value *params, size_t n_params, const tr_device *device,
                            tr_call_spec *out) {
  const tr_value *shape = param(params, n_params, "normalized_shape");
  const tr_value *eps = param(params, n_params, "eps");
  if (shape == NULL || shape->kind != TR_VALUE_INT_LIST || n_in < 1 || in[0] == NULL) {
    return TR_STATUS(TR_VALUE, "%s: the in-tree kernels need normalized_shape and x", op);
  }
  const tr_tensor_spec *x = in[0];
  int32_t k = (int32_t)shape->as.list.len;
  double e = eps != NULL && eps->kind == TR_VALUE_FLOAT ? eps->as.f : rms ? finfo_eps(x->dtype) : 1e-5;
  tr_named_value v[5] = {
      {"dtype", tr_value_dtype(x->dtype)},
      {"row", tr_value_int(spec_numel(x, x->rank - k, x->rank))},
      {"weight", tr_value_bool(n_in > 1 && in[1] != NULL)},
      {"bias", tr_value_bool(!rms && n_in > 2 && in[2] != NULL)},
      {"eps", tr_value_float(e)},
  };
  return tr_call_spec_init(out, &kNormCall, device, v, 5);
}

static tr_status *rms_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params, size_t n_params,
                           const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kRmsIface.name;
  return norm_spec("RMSNormFwdOp", 1, in, n_in, params, n_params, device, out);
}

static tr_status *layer_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params,
                             size_t n_params, const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kLayerIface.name;
  return norm_spec("LayerNormFwdOp", 0, in, n_in, params, n_params, device, out);
}

static tr_status *softmax_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params,
                               size_t n_params, const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kSoftmaxIface.name;
  const tr_value *dim = param(params, n_params, "dim");
  const tr_value *dtype = param(params, n_params, "dtype");
  if (n_in < 1 || in[0] == NULL) return TR_STATUS(TR_VALUE, "SoftmaxFwdOp: the in-tree kernels need x");
  const tr_tensor_spec *x = in[0];
  int64_t d = dim != NULL && dim->kind == TR_VALUE_INT ? dim->as.i : -1;
  int32_t rank = x->rank;
  if (rank == 0) { /* a scalar: one row of one element */
    d = 0;
  } else {
    if (d < 0) d += rank;
    if (d < 0 || d >= rank) {
      return TR_STATUS(TR_VALUE, "SoftmaxFwdOp: dim %lld is outside a tensor of rank %d",
                       (long long)(dim ? dim->as.i : -1), rank);
    }
  }
  tr_dtype o = dtype != NULL && dtype->kind == TR_VALUE_DTYPE ? dtype->as.dtype : x->dtype;
  tr_named_value v[4] = {
      {"dtype", tr_value_dtype(x->dtype)},
      {"out_dtype", tr_value_dtype(o)},
      {"row", tr_value_int(rank == 0 ? 1 : x->shape[d])},
      {"inner", tr_value_int(rank == 0 ? 1 : spec_numel(x, (int32_t)d + 1, rank))},
  };
  return tr_call_spec_init(out, &kSoftmaxCall, device, v, 4);
}

static tr_status *add_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params, size_t n_params,
                           const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kAddIface.name;
  const tr_value *alpha = param(params, n_params, "alpha");
  if (n_in < 2 || in[0] == NULL) return TR_STATUS(TR_VALUE, "AddFwdOp: the in-tree kernels need a and b");
  double a = alpha == NULL ? 1.0 : alpha->kind == TR_VALUE_INT ? (double)alpha->as.i : alpha->as.f;
  tr_named_value v[2] = {{"dtype", tr_value_dtype(in[0]->dtype)}, {"alpha", tr_value_float(a)}};
  return tr_call_spec_init(out, &kElementwiseCall, device, v, 2);
}

static const tr_kernel_interface *const kRmsIfaces[] = {&kRmsIface};
static const tr_kernel_interface *const kLayerIfaces[] = {&kLayerIface};
static const tr_kernel_interface *const kSoftmaxIfaces[] = {&kSoftmaxIface};
static const tr_kernel_interface *const kAddIfaces[] = {&kAddIface};
static const tr_kernel_type *const kRmsTypes[] = {&kRmsWarp, &kRmsLooped};
static const tr_kernel_type *const kLayerTypes[] = {&kLayerWarp, &kLayerLooped};
static const tr_kernel_type *const kSoftmaxTypes[] = {&kSoftmaxWarp, &kSoftmaxBlock, &kSoftmaxLooped,
                                                      &kSoftmaxStrided};
static const tr_kernel_type *const kAddTypes[] = {&kAdd};

static const tr_intree_op kOps[] = {
    {"RMSNormFwdOp", 1, kRmsIfaces, 2, kRmsTypes, rms_spec},
    {"LayerNormFwdOp", 1, kLayerIfaces, 2, kLayerTypes, layer_spec},
    {"SoftmaxFwdOp", 1, kSoftmaxIfaces, 4, kSoftmaxTypes, softmax_spec},
    {"AddFwdOp", 1, kAddIfaces, 1, kAddTypes, add_spec},
};

size_t tr_intree_op_count(void) { return sizeof(kOps) / sizeof(kOps[0]); }
const tr_intree_op *tr_intree_op_at(size_t i) { return i < tr_intree_op_count() ? &kOps[i] : NULL; }
const tr_intree_op *tr_intree_find(const char *op) {
  for (size_t i = 0; i < tr_intree_op_count(); i++) {
    if (strcmp(kOps[i].op, op) == 0) return &kOps[i];
  }
  return NULL;
}

void tr_intree_arch_name(int32_t arch, char *buf, size_t size) {
  /* Hopper's arch-specific features need the "a" target; a cubin for sm_90a runs on SM90 only */
  snprintf(buf, size, arch == 90 ? "sm_%da" : "sm_%d", (int)arch);
}

/* ---- specialisations ---- */

static const char *c_type(tr_dtype d) {
  if (tr_dtype_equal(d, TR_FLOAT16)) return "f16";
  if (tr_dtype_equal(d, TR_BFLOAT16)) return "bf16";
  if (tr_dtype_equal(d, TR_FLOAT32)) return "float";
  if (tr_dtype_equal(d, TR_FLOAT64)) return "double";
  if (tr_dtype_equal(d, TR_INT32)) return "int";
  if (tr_dtype_equal(d, TR_INT64)) return "i64";
  return NULL;
}

enum { ELEMENTWISE_BLOCK = 256, WARP_BLOCK = 128, LOOPED_BLOCK = 1024, COPY_MAX_BLOCKS = 4096 };
/* Softmax rows this long or longer get a split build (a row over a cluster of up to
 * SPLIT_MAX_CTAS CTAs of SPLIT_BLOCK threads) on sm_90 and later, launched for fewer rows than
 * SMs. */
enum { SPLIT_MIN_ROW = 16384, SPLIT_BLOCK = 512, SPLIT_MAX_CTAS = 8, SPLIT_MIN_ARCH = 90 };

/* Threads for softmax's block-per-row kernel holding the row in registers: about four 16-byte
 * vectors per thread (vectors of the wider of the input and output elements), at least 64 and at
 * most 1024. Measured on the H200 with the (max, sum) merge: four per thread reached 97% of the
 * copy rate on 16384x8192 bf16 where two reached 92%. */
static uint32_t block_threads(int64_t row, size_t elem) {
  size_t v = 16 / elem;
  int64_t nv = row % (int64_t)v == 0 ? row / (int64_t)v : row;
  int64_t t = (nv + 3) / 4;
  t = (t + 31) / 32 * 32;
  if (t < 64) t = 64;
  if (t > 1024) t = 1024;
  return (uint32_t)t;
}

/* A block size for `n` threads' worth of work: a multiple of 32 in 64..1024. */
static uint32_t clamp_threads(int64_t n) {
  n = (n + 31) / 32 * 32;
  return (uint32_t)(n < 64 ? 64 : n > 1024 ? 1024 : n);
}

static void add_int(tr_intree_source *s, const char *fmt, long long value) {
  if (s->n_options >= 16) return;
  snprintf(s->option_text[s->n_options], 64, fmt, value);
  s->options[s->n_options] = s->option_text[s->n_options];
  s->n_options++;
}

static void add_text(tr_intree_source *s, const char *fmt, const char *value) {
  if (s->n_options >= 16) return;
  snprintf(s->option_text[s->n_options], 64, fmt, value);
  s->options[s->n_options] = s->option_text[s->n_options];
  s->n_options++;
}

/* LayerNorm's weight and bias loaded with an L2 evict_last policy, unless TILERUN_CUDA_L2_KEEP=0. */
static int l2_keep_enabled(void) {
  const char *v = tr_plat_getenv("TILERUN_CUDA_L2_KEEP");
  return v == NULL || strcmp(v, "0") != 0;
}

tr_status *tr_intree_source_for(const tr_kernel_type *type, const tr_call_spec *call, tr_intree_source *out) {
  memset(out, 0, sizeof(*out));
  const impl_info *info = type->ctx;
  out->name = type->key;
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  const char *t = c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  add_text(out, "-DTR_T=%s", t);
  int64_t row = tr_call_spec_int(call, "row");
  size_t wider = tr_dtype_bytes(dt); /* softmax: the wider of its input and output elements */
  if (info->fam == FAM_SOFTMAX) {
    size_t out_bytes = tr_dtype_bytes(tr_call_spec_get(call, "out_dtype")->as.dtype);
    if (out_bytes > wider) wider = out_bytes;
  }
  if (info->fam == FAM_ADD) {
    out->source = tr_src_add;
    out->entry = "tr_add";
    out->block = ELEMENTWISE_BLOCK;
  } else {
    add_int(out, "-DTR_N=%lld", (long long)row);
    out->block = info->kind == IMPL_WARP ? WARP_BLOCK
                 : info->kind == IMPL_BLOCK ? block_threads(row, wider)
                 : info->kind == IMPL_STRIDED ? ELEMENTWISE_BLOCK : LOOPED_BLOCK;
    static const char *const kImpl[] = {"-DTR_IMPL_WARP", "-DTR_IMPL_BLOCK", "-DTR_IMPL_LOOPED", "-DTR_IMPL_STRIDED"};
    add_text(out, "%s", kImpl[info->kind]);
    if (info->kind == IMPL_LOOPED && info->fam != FAM_SOFTMAX) {
      int64_t v = 16 / (int64_t)tr_dtype_bytes(dt), nv = row % v == 0 ? row / v : row;
      /* many rows: four vectors per thread, registers capped so that 1536 threads fit an SM
       * (measured best on the H200); few rows: two vectors per thread, no cap */
      out->block = clamp_threads((nv + 3) / 4);
      add_int(out, "-DTR_MINB=%lld", (long long)(1536 / out->block));
      out->wide_block = clamp_threads((nv + 1) / 2);
      if (out->wide_block == out->block) out->wide_block = 0;
    }
    if (info->fam == FAM_SOFTMAX && (info->kind == IMPL_BLOCK || info->kind == IMPL_LOOPED) &&
        row >= SPLIT_MIN_ROW) {
      out->wide_block = SPLIT_BLOCK;
      out->wide_split = 1;
      out->wide_min_arch = SPLIT_MIN_ARCH;
    }
    if (info->fam == FAM_SOFTMAX) {
      out->source = tr_src_softmax;
      out->entry = "tr_softmax";
      add_text(out, "-DTR_OUT=%s", c_type(tr_call_spec_get(call, "out_dtype")->as.dtype));
    } else {
      out->source = tr_src_norm;
      out->entry = "tr_norm";
      add_int(out, "-DTR_RMS=%lld", info->fam == FAM_RMS);
      add_int(out, "-DTR_HAS_W=%lld", tr_call_spec_get(call, "weight")->as.b);
      add_int(out, "-DTR_HAS_B=%lld", tr_call_spec_get(call, "bias")->as.b);
      /* LayerNorm's many-row build keeps weight and bias in L2 (norm.cu: load_in_order<KEEP>)
       * unless TILERUN_CUDA_L2_KEEP=0 (read when a kernel is made) */
      if (info->fam == FAM_LAYER && info->kind == IMPL_LOOPED && tr_call_spec_get(call, "weight")->as.b &&
          tr_call_spec_get(call, "bias")->as.b && !l2_keep_enabled()) {
        add_int(out, "-DTR_KEEP_WB=%lld", 0);
      }
    }
  }
  add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  return NULL;
}

/* ---- modules: one per device and artifact ---- */

typedef struct module_entry {
  int32_t index;
  uint64_t key[2];
  tr_cu_module module;
  tr_cu_function function;
  tr_cu_function any; /* norms: the entry for pointers of any alignment ("<entry>_any"), else NULL */
  int awaits;         /* its kernels wait for the previous kernel (the marker entry of common.cuh) */
  struct module_entry *next;
} module_entry;

static struct {
  tr_plat_mutex lock;
  module_entry *modules;
  _Atomic(tr_cu_ctx) contexts[TR_CUDA_MAX_DEVICES];
  _Atomic(tr_cu_function) copies[TR_CUDA_MAX_DEVICES][4]; /* element sizes 1, 2, 4, 8 */
  atomic_uint_fast64_t compiled, from_cache, loaded, kernels, split_launches, thread_ends, orphans_freed;
  tr_artifact_cache cache;
} g;
static tr_plat_once g_once = TR_PLAT_ONCE_INIT;
static int g_lock_ok;

static void init_once(void) {
  tr_status *failed = tr_plat_mutex_init(&g.lock);
  g_lock_ok = failed == NULL;
  tr_status_destroy(&failed);
  tr_artifact_cache_default(&g.cache);
}

static void pool_counts(uint64_t *hits, uint64_t *kept, uint64_t *released);

tr_intree_stats tr_intree_get_stats(void) {
  tr_intree_stats s = {atomic_load(&g.compiled), atomic_load(&g.from_cache), atomic_load(&g.loaded),
                       atomic_load(&g.kernels), atomic_load(&g.split_launches), 0, 0, 0,
                       atomic_load(&g.thread_ends), atomic_load(&g.orphans_freed)};
  pool_counts(&s.pool_hits, &s.pool_kept, &s.pool_released);
  return s;
}

void tr_intree_reload_cache(void) {
  tr_plat_once_run(&g_once, init_once);
  if (g_lock_ok) tr_plat_mutex_lock(&g.lock);
  tr_artifact_cache_default(&g.cache);
  if (g_lock_ok) tr_plat_mutex_unlock(&g.lock);
}

/* A specialisation's artifact: compiled, or taken from the disk cache. */
static tr_status *build_artifact(const char *arch, const tr_intree_source *src, tr_artifact *out) {
  tr_artifact_source as = {src->name, src->source, arch, src->options, src->n_options, src->entry};
  int from_cache = 0;
  char *warning = NULL;
  tr_artifact_cache cache;
  if (g_lock_ok) tr_plat_mutex_lock(&g.lock);
  cache = g.cache;
  if (g_lock_ok) tr_plat_mutex_unlock(&g.lock);
  TR_RETURN_IF_ERROR(tr_artifact_build(&as, &cache, out, &from_cache, &warning));
  free(warning); /* the cache is best effort; the build went on */
  atomic_fetch_add(from_cache ? &g.from_cache : &g.compiled, 1);
  return NULL;
}

/* An artifact's function on device `index` (its context current), loaded once per device, and its
 * "<entry>_any" function when it has one (`any` may be NULL). *awaits (when asked) says whether
 * its kernels begin with await_previous_kernel, and so may be launched overlapped
 * (tr_cu_launch_ex): an artifact built from sources without it (another tilerun's build
 * component) never is. */
static tr_status *load_function(int32_t index, const tr_artifact *art, tr_cu_function *out, tr_cu_function *any,
                                int *awaits) {
  tr_plat_mutex_lock(&g.lock);
  tr_status *status = NULL;
  module_entry *m = g.modules;
  while (m != NULL && !(m->index == index && m->key[0] == art->key[0] && m->key[1] == art->key[1])) m = m->next;
  if (m == NULL) {
    m = calloc(1, sizeof(*m));
    if (m == NULL) status = TR_STATUS(TR_OUT_OF_MEMORY, "a module entry for kernel '%s'", art->name);
    if (status == NULL) status = tr_cu_module_load(art->cubin, art->name, art->entry, &m->module, &m->function);
    if (status == NULL) {
      char entry[80];
      snprintf(entry, sizeof(entry), "%s_any", art->entry);
      tr_cu_module_entry(m->module, entry, &m->any);
      tr_cu_function marker;
      m->awaits = tr_cu_module_entry(m->module, "tr_awaits_previous_kernel", &marker);
      m->index = index;
      m->key[0] = art->key[0];
      m->key[1] = art->key[1];
      m->next = g.modules;
      g.modules = m;
      atomic_fetch_add(&g.loaded, 1);
    } else {
      free(m);
      m = NULL;
    }
  }
  if (m != NULL) *out = m->function;
  if (m != NULL && any != NULL) *any = m->any;
  if (awaits != NULL) *awaits = m != NULL && m->awaits;
  tr_plat_mutex_unlock(&g.lock);
  return status;
}

static tr_status *function_for(int32_t index, const char *arch, const tr_intree_source *src, tr_cu_function *out) {
  tr_artifact art;
  TR_RETURN_IF_ERROR(build_artifact(arch, src, &art));
  tr_status *status = load_function(index, &art, out, NULL, NULL);
  tr_artifact_clear(&art);
  return status;
}

/* The copy kernels of a device (for strided inputs), loaded with its first in-tree kernel. */
static tr_status *ensure_copies(int32_t index, const char *arch) {
  static const size_t kSizes[4] = {1, 2, 4, 8};
  for (size_t i = 0; i < 4; i++) {
    if (atomic_load(&g.copies[index][i]) != NULL) continue;
    tr_intree_source s;
    memset(&s, 0, sizeof(s));
    s.name = "copy_strided";
    s.source = tr_src_copy;
    s.entry = "tr_copy";
    s.block = ELEMENTWISE_BLOCK;
    add_int(&s, "-DTR_ES=%lld", (long long)kSizes[i]);
    add_int(&s, "-DTR_BLOCK=%lld", (long long)s.block);
    tr_cu_function f = NULL;
    TR_RETURN_IF_ERROR(function_for(index, arch, &s, &f));
    atomic_store(&g.copies[index][i], f);
  }
  return NULL;
}

/* ---- kernels ---- */

typedef struct intree_kernel {
  const impl_info *info;
  const char *key;
  tr_cu_function function;
  tr_cu_ctx ctx;
  int32_t index;
  uint32_t block;
  tr_cu_function wide_function; /* the build for fewer rows than SMs (wide norms, split softmax; NULL: none) */
  tr_cu_function function_any, wide_function_any; /* norms: for pointers not 16-byte aligned */
  uint32_t wide_threads;
  int32_t sm_count;
  int64_t row, inner;
  float eps;
  double alpha;
  tr_named_value config[4]; /* implementation (the key), threads per block, overlap, few_rows */
  int overlap;               /* launched with programmatic dependent launch (sm_90 on) */
} intree_kernel;

/* Programmatic dependent launch for in-tree kernels on sm_90 and later, unless
 * TILERUN_CUDA_OVERLAP=0 (read when a kernel is made). */
static int overlap_enabled(void) {
  const char *v = tr_plat_getenv("TILERUN_CUDA_OVERLAP");
  return v == NULL || strcmp(v, "0") != 0;
}

static int64_t numel(const DLTensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

static void *data_of(const DLTensor *t) { return t ? (char *)t->data + t->byte_offset : NULL; }

static tr_status *launch_rows(const intree_kernel *k, tr_cu_function function, int64_t rows, uint32_t rows_per_block,
                              uint32_t threads, tr_cu_stream stream, void **args) {
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks == 0) return NULL;
  uint32_t gx = blocks > INT32_MAX ? (1u << 30) : (uint32_t)blocks;
  uint32_t gy = (uint32_t)((blocks + gx - 1) / gx);
  return tr_cu_launch_ex(function, k->key, gx, gy, threads, 0, stream, args, k->overlap);
}

static void rearm_if_ended(tr_cu_stream stream, int uses_blocks);

static tr_status *kernel_call(void *self, DLTensor *const *in, size_t n_in, DLTensor *const *out, size_t n_out) {
  const intree_kernel *k = self;
  (void)n_out;
  if (numel(in[0]) == 0) return NULL; /* an empty tensor: nothing to compute (and no row count) */
  tr_cu_stream stream = tr_cu_current_stream(k->index);
  rearm_if_ended(stream, 1);
  tr_cu_ctx previous;
  TR_RETURN_IF_ERROR(tr_cu_enter_context(k->ctx, &previous));
  tr_status *status = NULL;
  switch (k->info->fam) {
    case FAM_RMS:
    case FAM_LAYER: {
      void *x = data_of(in[0]), *w = n_in > 1 ? data_of(in[1]) : NULL, *y = data_of(out[0]);
      void *b = k->info->fam == FAM_LAYER && n_in > 2 ? data_of(in[2]) : NULL;
      int64_t rows = numel(in[0]) / k->row;
      float eps = k->eps;
      void *args[] = {&x, &w, &b, &y, &rows, &eps};
      /* tr_norm takes 16-byte aligned pointers only; tr_norm_any any */
      int aligned = (((uintptr_t)x | (uintptr_t)w | (uintptr_t)b | (uintptr_t)y) & 15) == 0;
      if (k->info->kind == IMPL_WARP) {
        status = launch_rows(k, aligned ? k->function : k->function_any, rows, k->block / 32, k->block, stream, args);
      } else { /* few rows: the wide build (latency); many: the narrow one (bandwidth) */
        int wide = rows < k->sm_count && k->wide_function != NULL;
        tr_cu_function f = wide ? (aligned ? k->wide_function : k->wide_function_any)
                                : (aligned ? k->function : k->function_any);
        status = launch_rows(k, f, rows, 1, wide ? k->wide_threads : k->block, stream, args);
      }
      break;
    }
    case FAM_SOFTMAX: {
      void *x = data_of(in[0]), *y = data_of(out[0]);
      int64_t inner = k->inner, outer = numel(in[0]) / (k->row * k->inner);
      void *args[] = {&x, &y, &outer, &inner};
      if (k->info->kind == IMPL_STRIDED) {
        int64_t blocks = (outer * inner + k->block - 1) / k->block;
        if (blocks > 0) status = tr_cu_launch_ex(k->function, k->key, (uint32_t)blocks, 1, k->block, 0, stream, args, k->overlap);
      } else {
        int split = 0;
        if (k->wide_function != NULL && outer < k->sm_count) {
          /* few long rows: each over a cluster of the fewest CTAs (a power of two, at most
           * SPLIT_MAX_CTAS) that make at least as many CTAs as SMs (measured on the H200 at
           * 64 x 128256: asking for twice as many, 8 CTAs a row, was 20% slower). Where clusters
           * cannot be launched (no cuLaunchKernelEx, or none fit: MPS, a partitioned GPU), a
           * block per row as for many rows (such launch errors do not stick). */
          uint32_t ctas = 1;
          while (ctas < SPLIT_MAX_CTAS && outer * (int64_t)ctas < k->sm_count) ctas *= 2;
          tr_status *clustered = tr_cu_launch_cluster(k->wide_function, k->key, (uint32_t)outer * ctas, ctas,
                                                      k->wide_threads, stream, args, k->overlap);
          split = clustered == NULL;
          tr_status_destroy(&clustered);
          if (split) atomic_fetch_add_explicit(&g.split_launches, 1, memory_order_relaxed);
        }
        if (!split) {
          status = launch_rows(k, k->function, outer, k->info->kind == IMPL_WARP ? k->block / 32 : 1, k->block,
                               stream, args);
        }
      }
      break;
    }
    case FAM_ADD: {
      void *a = data_of(in[0]), *b = data_of(in[1]), *c = data_of(out[0]);
      int64_t n = numel(in[0]);
      double alpha = k->alpha;
      void *args[] = {&a, &b, &c, &n, &alpha};
      int64_t per_block = (int64_t)k->block * (int64_t)(16 / (in[0]->dtype.bits / 8));
      int64_t blocks = (n + per_block - 1) / per_block, cap = (int64_t)k->sm_count * 16;
      if (blocks > cap) blocks = cap;
      if (blocks > 0) status = tr_cu_launch_ex(k->function, k->key, (uint32_t)blocks, 1, k->block, 0, stream, args, k->overlap);
      break;
    }
  }
  tr_cu_restore_context(k->ctx, previous);
  return status;
}

static size_t kernel_config(void *self, const tr_named_value **out) {
  intree_kernel *k = self;
  *out = k->config;
  return 4;
}

static void kernel_release(void *self) {
  intree_kernel *k = self;
  tr_value_clear(&k->config[0].value);
  tr_value_clear(&k->config[3].value);
  free(k);
}

int tr_intree_owns(const tr_kernel_type *type) {
  for (size_t i = 0; i < tr_intree_op_count(); i++) {
    for (size_t t = 0; t < kOps[i].n_types; t++) {
      if (kOps[i].types[t] == type) return 1;
    }
  }
  return 0;
}

int tr_intree_has_wide(const tr_intree_source *src, int32_t arch) {
  return src->wide_block > 0 && (src->wide_min_arch == 0 || arch >= src->wide_min_arch);
}

/* 90 for "sm_90a" (tr_intree_arch_name's form); -1 for another. */
static int32_t arch_number(const char *arch) {
  int n = -1;
  return sscanf(arch, "sm_%d", &n) == 1 ? (int32_t)n : -1;
}

void tr_intree_wide_source(const tr_intree_source *src, tr_intree_source *w) {
  *w = *src;
  for (size_t i = 0; i < w->n_options; i++) w->options[i] = w->option_text[i];
  snprintf(w->option_text[w->n_options - 1], 64, "-DTR_BLOCK=%u", w->wide_block);
  if (w->wide_split) add_text(w, "%s", "-DTR_SPLIT");
  for (size_t i = 0; i < w->n_options; i++) { /* no register cap: few rows, latency */
    if (strncmp(w->option_text[i], "-DTR_MINB=", 10) == 0) snprintf(w->option_text[i], 64, "-DTR_MINB=1");
  }
}

tr_status *tr_intree_build(const tr_kernel_type *type, const tr_call_spec *call, const char *arch, tr_artifact out[2],
                           size_t *n_out) {
  *n_out = 0;
  tr_plat_once_run(&g_once, init_once);
  if (!tr_intree_owns(type)) {
    return TR_STATUS(TR_SELECTION, "implementation '%s' is not an in-tree kernel: it has no source to compile "
                     "(a plugin's kernel type is built in the process that launches it)", type->key);
  }
  if (call->type != type->interface->request) {
    return TR_STATUS(TR_SELECTION, "kernel '%s' takes a %s call spec, got a %s", type->key,
                     type->interface->request->name, call->type->name);
  }
  char reason[256];
  const char *refused = type->refusal(type, call, reason, sizeof(reason));
  if (refused != NULL) return TR_STATUS(TR_SELECTION, "kernel '%s' does not serve this call: %s", type->key, refused);
  tr_intree_source src;
  TR_RETURN_IF_ERROR(tr_intree_source_for(type, call, &src));
  TR_RETURN_IF_ERROR(build_artifact(arch, &src, &out[0]));
  *n_out = 1;
  if (tr_intree_has_wide(&src, arch_number(arch))) {
    tr_intree_source w;
    tr_intree_wide_source(&src, &w);
    tr_status *status = build_artifact(arch, &w, &out[1]);
    if (status != NULL) {
      tr_artifact_clear(&out[0]);
      *n_out = 0;
      return status;
    }
    *n_out = 2;
  }
  return NULL;
}

tr_status *tr_intree_kernel(const tr_kernel_type *self, const tr_call_spec *call, const tr_artifact *arts, size_t n,
                            tr_kernel *out) {
  tr_plat_once_run(&g_once, init_once);
  if (!g_lock_ok) return TR_STATUS(TR_BACKEND, "the in-tree kernels could not make their lock");
  if (strcmp(call->device.type, "cuda") != 0) {
    char dev[TR_DEVICE_FORMAT_MAX];
    tr_device_format(&call->device, dev, sizeof(dev));
    return TR_STATUS(TR_OP_NOT_AVAILABLE, "kernel '%s' runs on cuda devices; the call is on %s", self->key, dev);
  }
  if (!(call->facts_known || (call->stated_facts & TR_FACT_ARCH)) || call->facts.arch < 0) {
    return TR_STATUS(TR_BACKEND, "building kernel '%s': the device's architecture is not known", self->key);
  }
  int32_t index = call->device.index < 0 ? 0 : call->device.index;
  char arch[16];
  tr_intree_arch_name(call->facts.arch, arch, sizeof(arch));
  tr_intree_source src;
  TR_RETURN_IF_ERROR(tr_intree_source_for(self, call, &src));
  size_t want = tr_intree_has_wide(&src, call->facts.arch) ? 2 : 1;
  for (size_t i = 0; i < n; i++) { /* artifacts from elsewhere must be this kernel's, for this card */
    if (strcmp(arts[i].name, self->key) != 0 || strcmp(arts[i].entry, src.entry) != 0 || strcmp(arts[i].arch, arch) != 0) {
      return TR_STATUS(TR_BACKEND, "kernel '%s' for %s was given an artifact of '%s' (entry %s) for %s", self->key,
                       arch, arts[i].name, arts[i].entry, arts[i].arch);
    }
  }
  if (n != want) {
    return TR_STATUS(TR_BACKEND, "kernel '%s' needs %zu artifacts, was given %zu", self->key, want, n);
  }
  tr_cu_ctx ctx = NULL, previous = NULL;
  TR_RETURN_IF_ERROR(tr_cu_enter_device(index, &ctx, &previous));
  atomic_store(&g.contexts[index], ctx);
  tr_cu_function f = NULL, wide = NULL;
  tr_cu_function f_any = NULL, wide_any = NULL;
  int awaits = 0, wide_awaits = 1;
  tr_status *status = load_function(index, &arts[0], &f, &f_any, &awaits);
  if (status == NULL && n > 1) status = load_function(index, &arts[1], &wide, &wide_any, &wide_awaits);
  const impl_info *info = self->ctx;
  if (status == NULL && (info->fam == FAM_RMS || info->fam == FAM_LAYER) && (f_any == NULL || (n > 1 && wide_any == NULL))) {
    status = TR_STATUS(TR_BACKEND, "kernel '%s' has no entry '%s_any' for unaligned tensors", arts[0].name, arts[0].entry);
  }
  if (status == NULL) status = ensure_copies(index, arch);
  tr_cu_restore_context(ctx, previous);
  TR_RETURN_IF_ERROR(status);
  intree_kernel *k = calloc(1, sizeof(*k));
  if (k == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "kernel '%s'", self->key);
  k->info = self->ctx;
  k->key = self->key;
  k->overlap = call->facts.arch >= 90 && awaits && wide_awaits && overlap_enabled();
  k->function = f;
  k->ctx = ctx;
  k->index = index;
  k->block = src.block;
  k->sm_count = call->facts.sm_count > 0 ? call->facts.sm_count : 1;
  if (k->info->fam != FAM_ADD) k->row = tr_call_spec_int(call, "row");
  k->wide_function = wide;
  k->function_any = f_any;
  k->wide_function_any = wide_any;
  k->wide_threads = src.wide_block;
  if (k->info->fam == FAM_SOFTMAX) k->inner = tr_call_spec_int(call, "inner");
  if (k->info->fam == FAM_RMS || k->info->fam == FAM_LAYER) k->eps = (float)tr_call_spec_float(call, "eps");
  if (k->info->fam == FAM_ADD) k->alpha = tr_call_spec_float(call, "alpha");
  k->config[0].name = "implementation";
  status = tr_value_str(self->key, &k->config[0].value);
  if (status != NULL) {
    free(k);
    return status;
  }
  k->config[1].name = "block";
  k->config[1].value = tr_value_int(src.block);
  k->config[2].name = "overlap"; /* launched with programmatic dependent launch */
  k->config[2].value = tr_value_bool(k->overlap);
  /* the build launched for fewer rows than SMs: "split" (a row over a cluster), "wide" (more
   * threads per row), or "none" */
  k->config[3].name = "few_rows";
  status = tr_value_str(wide == NULL ? "none" : src.wide_split ? "split" : "wide", &k->config[3].value);
  if (status != NULL) {
    tr_value_clear(&k->config[0].value);
    free(k);
    return status;
  }
  out->self = k;
  out->call = kernel_call;
  out->config = kernel_config;
  out->release = kernel_release;
  atomic_fetch_add(&g.kernels, 1);
  return NULL;
}

/* The selector's factory: build here, then load. */
static tr_status *factory(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out) {
  if (!(call->facts_known || (call->stated_facts & TR_FACT_ARCH)) || call->facts.arch < 0) {
    return TR_STATUS(TR_BACKEND, "building kernel '%s': the device's architecture is not known", self->key);
  }
  char arch[16];
  tr_intree_arch_name(call->facts.arch, arch, sizeof(arch));
  tr_artifact arts[2];
  size_t n = 0;
  TR_RETURN_IF_ERROR(tr_intree_build(self, call, arch, arts, &n));
  tr_status *status = tr_intree_kernel(self, call, arts, n, out);
  for (size_t i = 0; i < n; i++) tr_artifact_clear(&arts[i]);
  return status;
}

/* ---- cuda tensors ---- */

static tr_status *device_ctx(int32_t index, tr_cu_ctx *ctx) {
  if (index < 0 || index >= TR_CUDA_MAX_DEVICES) {
    return TR_STATUS(TR_VALUE, "cuda device index %d is outside 0..%d", index, TR_CUDA_MAX_DEVICES - 1);
  }
  *ctx = atomic_load(&g.contexts[index]);
  if (*ctx == NULL) {
    TR_RETURN_IF_ERROR(tr_cu_device_context(index, ctx));
    atomic_store(&g.contexts[index], *ctx);
  }
  return NULL;
}

/* Blocks made on the per-thread or legacy default stream, kept when freed for the next
 * allocation of the same size on the same stream (stream order makes that safe without a sync,
 * as in the driver's own pool); a memo-hit tr_op_call then costs no driver allocation. Blocks
 * made on streams the caller made are not kept (such a stream may be captured into a graph, or
 * destroyed once its outputs are freed): they go back to the driver, on the stream they were
 * made on. A block made on the per-thread default stream goes back to the thread that made it,
 * whichever thread frees it, and to the driver as that thread ends (release_thread_blocks);
 * one freed after that end (and its wait) is nobody's to reuse and is freed then, not kept
 * (tr_intree_free). */
enum { POOL_BLOCKS = TR_INTREE_POOL_BLOCKS };
#define POOL_MAX_BYTES ((size_t)1 << 30)

typedef struct pool_block {
  void *ptr;
  size_t bytes;
  tr_cu_stream stream;
  const void *thread; /* the per-thread default stream is each thread's own: who made it */
} pool_block;

/* A block made outside a capture and freed while the current stream or its own was captured (the
 * graph may use it at every replay), or made on another thread's per-thread stream and freed when
 * the pool was full: neither reused nor freed until tr_intree_trim. */
typedef struct parked_block {
  void *ptr;
  struct parked_block *next;
} parked_block;

typedef struct pool {
  tr_plat_mutex lock;
  int ready;
  size_t n, held;
  uint64_t hits; /* allocations served from the pool */
  uint64_t released; /* blocks given back as the thread that made them ended */
  pool_block blocks[POOL_BLOCKS];
  parked_block *parked;
} pool;

static pool g_pools[TR_CUDA_MAX_DEVICES];
static tr_plat_once g_pool_once = TR_PLAT_ONCE_INIT;
static int64_t g_pool_pid; /* the process the pools are of (a forked child's are its parent's) */

static void pools_init(void) {
  g_pool_pid = tr_plat_process_id();
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) {
    tr_status *failed = tr_plat_mutex_init(&g_pools[i].lock);
    g_pools[i].ready = failed == NULL;
    tr_status_destroy(&failed);
  }
}

/* Parks `ptr` (p's lock held). With no room to note it, the block is kept for good rather than
 * freed where that would be wrong. */
static void park_locked(pool *p, void *ptr) {
  parked_block *b = malloc(sizeof(*b));
  if (b == NULL) return;
  *b = (parked_block){ptr, p->parked};
  p->parked = b;
}

/* Takes block i out of the pool (p's lock held) and returns it. */
static void *take_locked(pool *p, size_t i) {
  void *ptr = p->blocks[i].ptr;
  p->held -= p->blocks[i].bytes;
  p->blocks[i] = p->blocks[--p->n];
  return ptr;
}

/* The pools' counts, summed over the devices. */
static void pool_counts(uint64_t *hits, uint64_t *kept, uint64_t *released) {
  tr_plat_once_run(&g_pool_once, pools_init);
  *hits = *kept = *released = 0;
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) {
    if (!g_pools[i].ready) continue;
    tr_plat_mutex_lock(&g_pools[i].lock);
    *hits += g_pools[i].hits;
    *kept += g_pools[i].n;
    *released += g_pools[i].released;
    tr_plat_mutex_unlock(&g_pools[i].lock);
  }
}

static int poolable(tr_cu_stream stream) { return stream == TR_CU_PER_THREAD_STREAM || stream == (tr_cu_stream)0x1; }

/* A tag of the calling thread: the per-thread default stream has one handle but a stream per
 * thread, so a block made on it is reused by the same thread only (the legacy stream is one
 * stream per device, shared). */
static atomic_uintptr_t g_next_thread_tag = 1;
static _Thread_local uintptr_t t_thread_tag; /* 0 until first asked; never reused by another thread */
static _Thread_local int t_thread_ended;     /* release_thread_blocks ran: keep none of its blocks now */
static _Thread_local int t_hook_armed;       /* release_thread_blocks is registered and has not run */
/* the devices on whose per-thread default stream this thread made or freed stream-ordered blocks */
static _Thread_local uint64_t t_alloc_devices;
_Static_assert(TR_CUDA_MAX_DEVICES <= 64, "t_alloc_devices has a bit per device");
static void release_thread_blocks(void *tag);
static void set_ended(uintptr_t tag, int ended);
/* Registers release_thread_blocks for this (tagged) thread's end; where the system has no such
 * hook, the thread's blocks stay until tr_intree_trim. Called again by exit-time code after the
 * hook ran, before it queues work on its per-thread stream. `uses_blocks`: that work may read or
 * write blocks (a call, not a free), so the thread is no longer marked ended (another thread's
 * free keeps its blocks for it again) until the hook has run and waited for that work, whether
 * or not the system will run the hook. */
static void arm_exit_hook(int uses_blocks) {
  if (t_thread_ended && uses_blocks) set_ended(t_thread_tag, 0);
  t_hook_armed = tr_plat_at_thread_exit(release_thread_blocks, (void *)t_thread_tag);
}
static const void *stream_owner(tr_cu_stream stream) {
  if (stream != TR_CU_PER_THREAD_STREAM) return NULL;
  if (t_thread_tag == 0) {
    t_thread_tag = atomic_fetch_add(&g_next_thread_tag, 1);
    arm_exit_hook(0);
  }
  return (const void *)t_thread_tag;
}

/* The threads that have ended: a bit per tag, set by release_thread_blocks once the thread has
 * waited for its per-thread streams (and cleared by arm_exit_hook when exit-time code queues work
 * there after that), in chunks of ENDED_CHUNK_TAGS made as tags reach them and kept for the
 * process's life (a bit per thread that ever used its per-thread stream). A tag past the last
 * chunk (2^28 threads), or one whose chunk could not be made, is never marked: its blocks are
 * treated as those of a thread that still runs. */
#define ENDED_CHUNK_TAGS 65536
#define ENDED_CHUNKS 4096
static _Atomic(atomic_uint_least64_t *) g_ended[ENDED_CHUNKS];

static void set_ended(uintptr_t tag, int ended) {
  if (tag / ENDED_CHUNK_TAGS >= ENDED_CHUNKS) return;
  _Atomic(atomic_uint_least64_t *) *slot = &g_ended[tag / ENDED_CHUNK_TAGS];
  atomic_uint_least64_t *chunk = atomic_load_explicit(slot, memory_order_acquire);
  if (chunk == NULL && !ended) return; /* never marked */
  if (chunk == NULL) {
    atomic_uint_least64_t *made = calloc(ENDED_CHUNK_TAGS / 64, sizeof(*made));
    if (made == NULL) return;
    if (atomic_compare_exchange_strong_explicit(slot, &chunk, made, memory_order_acq_rel, memory_order_acquire)) {
      chunk = made;
    } else {
      free(made); /* another thread made it first: `chunk` is that one */
    }
  }
  size_t bit = tag % ENDED_CHUNK_TAGS;
  uint_least64_t mask = (uint_least64_t)1 << (bit % 64);
  if (ended) atomic_fetch_or_explicit(&chunk[bit / 64], mask, memory_order_release);
  else atomic_fetch_and_explicit(&chunk[bit / 64], ~mask, memory_order_release);
}

static int has_ended(uintptr_t tag) {
  if (tag / ENDED_CHUNK_TAGS >= ENDED_CHUNKS) return 0;
  atomic_uint_least64_t *chunk = atomic_load_explicit(&g_ended[tag / ENDED_CHUNK_TAGS], memory_order_acquire);
  if (chunk == NULL) return 0;
  size_t bit = tag % ENDED_CHUNK_TAGS;
  return (atomic_load_explicit(&chunk[bit / 64], memory_order_acquire) >> (bit % 64) & 1) != 0;
}

/* Device i's blocks the pool keeps for `tag` (the calling thread's) go back to the driver on the
 * thread's per-thread stream, in order after the work that used them; those the driver does not
 * take, or all of them while the stream is captured, are parked (freed by tr_intree_trim), as
 * tr_intree_free would. Then, where it gave some back or `wait` is set, the thread waits for that
 * stream. Returns 0 where that stream may still have work of the thread's (it could not be waited
 * for: captured, no driver, or the wait failed), else 1. */
static int release_device_blocks(int i, void *tag, int wait) {
  pool *p = &g_pools[i];
  void *mine[POOL_BLOCKS];
  size_t n = 0;
  if (p->ready) {
    tr_plat_mutex_lock(&p->lock);
    for (size_t b = p->n; b-- > 0;) {
      if (p->blocks[b].stream == TR_CU_PER_THREAD_STREAM && p->blocks[b].thread == tag) {
        mine[n++] = take_locked(p, b);
      }
    }
    tr_plat_mutex_unlock(&p->lock);
  }
  if (n == 0 && !wait) return 1;
  tr_cu_ctx ctx = atomic_load(&g.contexts[i]), previous;
  tr_status *status = ctx != NULL ? tr_cu_enter_context(ctx, &previous) : NULL;
  int usable = ctx != NULL && status == NULL;
  int captured = usable && tr_cu_stream_capturing(TR_CU_PER_THREAD_STREAM);
  int idle = 0;
  size_t left = 0; /* not freed where it cannot be ordered, or where the driver refused */
  for (size_t b = 0; b < n; b++) {
    if (!(usable && !captured && tr_cu_free_async((tr_cu_ptr)(uintptr_t)mine[b], TR_CU_PER_THREAD_STREAM))) {
      mine[left++] = mine[b];
    }
  }
  if (usable && !captured) { /* a capture cannot be waited for; its end is the caller's */
    tr_status *waited = tr_cu_stream_sync(TR_CU_PER_THREAD_STREAM);
    idle = waited == NULL;
    tr_status_destroy(&waited);
  }
  if (usable) tr_cu_restore_context(ctx, previous);
  tr_status_destroy(&status);
  if (n > 0) { /* then the pool is ready */
    tr_plat_mutex_lock(&p->lock);
    p->released += n - left;
    for (size_t b = 0; b < left; b++) park_locked(p, mine[b]);
    tr_plat_mutex_unlock(&p->lock);
  }
  return idle;
}

/* Runs as the thread tagged `tag` ends, before the driver's own clean-up of the thread (so its
 * context and per-thread default stream, with the work it queued there, are still there): the
 * blocks the pool keeps for that thread, which no other thread may take, go back to the driver
 * on that stream (release_device_blocks). Then the thread waits for that stream, on every device
 * where it made blocks there: on the H200 (driver 580) a thread that ended with a long kernel
 * still queued on its per-thread stream after a stream-ordered allocation there never finished
 * ending (the driver's clean-up hung), and one that waited first did. So the thread's end waits
 * for the work queued on its per-thread streams (not on other streams, which outlive it). Once
 * it has, the thread is marked ended: a block of its own that another thread frees from then on
 * is nobody's to reuse and is freed at once (tr_intree_free), and one another thread kept for it
 * meanwhile goes back here (one parked meanwhile, the pool being full, waits for tr_intree_trim).
 * Exit-time code that runs after this hook: what it frees of the thread's is freed, not kept,
 * and the first allocation, launch or free on the per-thread stream after each run of the hook
 * registers it again (rearm_if_ended), so what it queues is waited for too, where the system
 * still runs hooks then: glibc runs one registered by another thread exit hook, but not one
 * registered later (by a pthread key destructor, or by atexit code on the thread that ends the
 * process), whose work is not waited for. In a forked child (which inherits the hook), nothing:
 * the blocks and the driver are the parent's. */
static void release_thread_blocks(void *tag) {
  t_thread_ended = 1;
  t_hook_armed = 0;
  tr_plat_once_run(&g_pool_once, pools_init);
  if (tr_plat_process_id() != g_pool_pid) return;
  atomic_fetch_add_explicit(&g.thread_ends, 1, memory_order_relaxed);
  int idle = 1;
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) idle &= release_device_blocks(i, tag, t_alloc_devices >> i & 1);
  if (!idle) return; /* its streams may still use its blocks: another thread's free keeps them */
  set_ended((uintptr_t)tag, 1);
  /* blocks another thread kept for this one before the mark (tr_intree_free looks at it under the
   * pool's lock, as this does after it) */
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) release_device_blocks(i, tag, 0);
}

/* A stream being captured into a graph gets no pooled block, and gives none back. A block it
 * allocates is the graph's (`origin->graph`): freed on the stream, during the capture (a free node)
 * or after it. A block made outside the capture and freed during it may still be used by the
 * captured work at every replay: pooled, it would be handed to an eager call before the graph
 * runs; freed on the capturing stream, it would be a free node of memory the graph did not
 * allocate, which CUDA refuses. So it is parked until tr_intree_trim. */
static int capturing(tr_cu_stream stream) {
  return stream != (tr_cu_stream)0x1 && tr_cu_stream_capturing(stream); /* the legacy stream cannot be captured */
}

/* Work is about to be queued on `stream` by this thread: if the thread's exit hook has already
 * run (exit-time code running after it) and the work goes to its per-thread stream, outside a
 * capture, the hook is registered again, to wait for that work too (arm_exit_hook). One load of
 * a thread-local on every other call. */
static void rearm_if_ended(tr_cu_stream stream, int uses_blocks) {
  if (t_thread_ended && !t_hook_armed && stream == TR_CU_PER_THREAD_STREAM && !capturing(stream)) {
    arm_exit_hook(uses_blocks);
  }
}

tr_status *tr_intree_alloc(int32_t index, size_t bytes, void **out, tr_intree_origin *origin) {
  *out = NULL;
  memset(origin, 0, sizeof(*origin));
  tr_cu_ctx ctx, previous;
  TR_RETURN_IF_ERROR(device_ctx(index, &ctx));
  tr_cu_stream stream = tr_cu_current_stream(index);
  if (bytes == 0) bytes = 1;
  tr_plat_once_run(&g_pool_once, pools_init);
  pool *p = &g_pools[index];
  int captured = capturing(stream);
  origin->stream = (void *)stream;
  origin->thread = (uintptr_t)stream_owner(stream);
  origin->graph = captured;
  if (stream == TR_CU_PER_THREAD_STREAM && !captured) {
    t_alloc_devices |= (uint64_t)1 << index;
    rearm_if_ended(stream, 1); /* exit-time code after the thread's hook ran */
  }
  if (poolable(stream) && p->ready && !captured) {
    tr_plat_mutex_lock(&p->lock);
    for (size_t i = p->n; i-- > 0;) {
      if (p->blocks[i].bytes == bytes && p->blocks[i].stream == stream && p->blocks[i].thread == stream_owner(stream)) {
        *out = take_locked(p, i);
        p->hits++;
        break;
      }
    }
    tr_plat_mutex_unlock(&p->lock);
    if (*out != NULL) return NULL;
  }
  TR_RETURN_IF_ERROR(tr_cu_enter_context(ctx, &previous));
  tr_cu_ptr ptr = 0;
  tr_status *status = tr_cu_alloc_async(bytes, stream, &ptr);
  tr_cu_restore_context(ctx, previous);
  *out = (void *)(uintptr_t)ptr;
  return status;
}

void tr_intree_free(int32_t index, void *ptr, size_t bytes, const tr_intree_origin *origin) {
  if (ptr == NULL) return;
  tr_cu_ctx ctx, previous;
  tr_status *status = device_ctx(index, &ctx);
  tr_cu_stream current = tr_cu_current_stream(index);
  if (bytes == 0) bytes = 1;
  tr_plat_once_run(&g_pool_once, pools_init);
  pool *p = &g_pools[index];
  /* the stream the block goes back on: its own (a graph's block: the current one, where the
   * capture, or the code after it, frees it) */
  tr_cu_stream home = origin->graph ? current : (tr_cu_stream)origin->stream;
  uintptr_t me = (uintptr_t)stream_owner(TR_CU_PER_THREAD_STREAM);
  /* made on another thread's per-thread default stream: not ours to name */
  int other_thread = !origin->graph && home == TR_CU_PER_THREAD_STREAM && origin->thread != me;
  if (status == NULL && !origin->graph) {
    /* made outside a capture, freed while the current stream or its own is captured: parked */
    int captured = capturing(current) || (home != current && !other_thread && capturing(home));
    if (captured) {
      if (p->ready) {
        tr_plat_mutex_lock(&p->lock);
        park_locked(p, ptr);
        tr_plat_mutex_unlock(&p->lock);
      }
      return; /* not freed under the graph */
    }
  }
  void *evicted = NULL; /* a block of this thread's made room for another thread's */
  int orphan = 0;       /* made by a thread that has ended */
  if (status == NULL && !origin->graph && poolable(home) && p->ready) {
    /* kept for the next allocation on its stream: by the thread that made it, for the
     * per-thread default stream, whichever thread frees it */
    tr_plat_mutex_lock(&p->lock);
    /* a block of this thread's own stream, freed after its blocks went back as it ended: freed */
    int ending = home == TR_CU_PER_THREAD_STREAM && !other_thread && t_thread_ended;
    /* made by a thread that has ended and waited for its stream, and queued nothing there since:
     * nobody could take it, and only work on other streams, which the caller orders before the
     * free, can still use it: freed now (looked at under the lock: see release_thread_blocks; in
     * a forked child the blocks are the parent's) */
    orphan = other_thread && has_ended(origin->thread) && tr_plat_process_id() == g_pool_pid;
    if (orphan) {
      /* on the current stream; not on the legacy stream, which waits for every blocking stream
       * and so must not be used while one may be captured, but on this thread's per-thread
       * stream, which is ordered after the legacy stream's work (parked while that is captured) */
      home = current == (tr_cu_stream)0x1 ? TR_CU_PER_THREAD_STREAM : current;
      other_thread = 0;
      if (home != current && capturing(home)) {
        park_locked(p, ptr);
        tr_plat_mutex_unlock(&p->lock);
        return;
      }
    }
    int kept = !ending && !orphan && p->n < POOL_BLOCKS && p->held + bytes <= POOL_MAX_BYTES;
    if (!kept && other_thread) {
      /* full: make room by freeing one of this thread's own blocks (on its own stream), else park
       * the block (freed by tr_intree_trim): another thread's stream cannot be named here, and
       * the legacy stream, which would wait for it, must not be used while any stream is captured */
      for (size_t i = 0; i < p->n && evicted == NULL; i++) {
        if (p->blocks[i].stream == TR_CU_PER_THREAD_STREAM && (uintptr_t)p->blocks[i].thread == me &&
            p->held - p->blocks[i].bytes + bytes <= POOL_MAX_BYTES) {
          evicted = take_locked(p, i);
        }
      }
      kept = evicted != NULL;
      if (!kept) {
        park_locked(p, ptr);
        tr_plat_mutex_unlock(&p->lock);
        return;
      }
    }
    if (kept) {
      p->blocks[p->n++] = (pool_block){ptr, bytes, home, (const void *)origin->thread};
      p->held += bytes;
    }
    tr_plat_mutex_unlock(&p->lock);
    if (kept && evicted == NULL) return;
    if (kept) { /* this thread's evicted block goes back on its own stream */
      ptr = evicted;
      home = TR_CU_PER_THREAD_STREAM;
      other_thread = 0;
    }
  }
  if (other_thread) return; /* no pool to keep it in: kept for good rather than freed out of order */
  if (status == NULL) status = tr_cu_enter_context(ctx, &previous);
  if (status != NULL) { /* nothing can be freed without the driver */
    tr_status_destroy(&status);
    return;
  }
  /* a graph's block, or one whose stream this thread can name: freed on it (on this thread's
   * per-thread stream, the free is waited for as the thread ends) */
  if (home == TR_CU_PER_THREAD_STREAM) t_alloc_devices |= (uint64_t)1 << index;
  rearm_if_ended(home, 0);
  if (tr_cu_free_async((tr_cu_ptr)(uintptr_t)ptr, home) && orphan) {
    atomic_fetch_add_explicit(&g.orphans_freed, 1, memory_order_relaxed);
  }
  tr_cu_restore_context(ctx, previous);
}

void tr_intree_trim(void) {
  tr_plat_once_run(&g_pool_once, pools_init);
  for (int i = 0; i < TR_CUDA_MAX_DEVICES; i++) {
    pool *p = &g_pools[i];
    if (!p->ready) continue;
    tr_plat_mutex_lock(&p->lock);
    tr_cu_ctx ctx = atomic_load(&g.contexts[i]), previous;
    int some = p->n > 0 || p->parked != NULL;
    tr_status *status = some && ctx != NULL ? tr_cu_enter_context(ctx, &previous) : NULL;
    if (status == NULL && some && ctx != NULL) {
      /* on the legacy stream, which waits for every blocking stream: a block of another
       * thread's per-thread stream may still be in use there */
      for (size_t b = 0; b < p->n; b++) tr_cu_free_async((tr_cu_ptr)(uintptr_t)p->blocks[b].ptr, (tr_cu_stream)0x1);
      while (p->parked != NULL) {
        parked_block *b = p->parked;
        p->parked = b->next;
        tr_cu_free_async((tr_cu_ptr)(uintptr_t)b->ptr, (tr_cu_stream)0x1);
        free(b);
      }
      tr_cu_restore_context(ctx, previous);
      p->n = 0;
      p->held = 0;
    }
    tr_status_destroy(&status);
    tr_plat_mutex_unlock(&p->lock);
  }
}

typedef struct copy_layout {
  int64_t rank;
  int64_t shape[8];
  int64_t strides[8];
} copy_layout;

tr_status *tr_intree_copy(const DLTensor *src, const DLTensor *dst, int scatter) {
  const DLTensor *strided = scatter ? dst : src;
  int32_t index = dst->device.device_id;
  size_t es = (size_t)src->dtype.bits * src->dtype.lanes / 8;
  int slot = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : es == 8 ? 3 : -1;
  if (slot < 0 || strided->ndim > 8 || index < 0 || index >= TR_CUDA_MAX_DEVICES) {
    return TR_STATUS(TR_VALUE, "copying a cuda tensor of rank %d with %zu-byte elements: the copy kernel takes rank "
                     "<= 8 and 1, 2, 4 or 8-byte elements", strided->ndim, es);
  }
  tr_cu_function f = atomic_load(&g.copies[index][slot]);
  if (f == NULL) {
    return TR_STATUS(TR_BACKEND, "no copy kernel is loaded on cuda:%d yet (they load with the first in-tree kernel)",
                     index);
  }
  copy_layout layout;
  memset(&layout, 0, sizeof(layout));
  layout.rank = strided->ndim;
  int64_t n = 1, step = 1;
  for (int32_t d = strided->ndim - 1; d >= 0; d--) {
    layout.shape[d] = strided->shape[d];
    layout.strides[d] = strided->strides ? strided->strides[d] : step;
    step *= strided->shape[d];
    n *= strided->shape[d];
  }
  if (n == 0) return NULL;
  void *s = data_of(src), *t = data_of(dst);
  int sc = scatter;
  void *args[] = {&s, &t, &n, &layout, &sc};
  tr_cu_ctx ctx, previous;
  TR_RETURN_IF_ERROR(device_ctx(index, &ctx));
  TR_RETURN_IF_ERROR(tr_cu_enter_context(ctx, &previous));
  int64_t blocks = (n + ELEMENTWISE_BLOCK - 1) / ELEMENTWISE_BLOCK;
  if (blocks > COPY_MAX_BLOCKS) blocks = COPY_MAX_BLOCKS;
  tr_cu_stream stream = tr_cu_current_stream(index);
  rearm_if_ended(stream, 1);
  tr_status *status = tr_cu_launch(f, "copy_strided", (uint32_t)blocks, 1, ELEMENTWISE_BLOCK, 0, stream, args);
  tr_cu_restore_context(ctx, previous);
  return status;
}
