/* softmax.c: the softmax family (kernels/src/softmax.cu): a warp, a block or a looped block per
 * row along the last axis, a thread per (outer, inner) pair along any other; few long rows split
 * over a thread-block cluster on sm_90 and later. */
#include <stdio.h>
#include <stdatomic.h>

#include "kernels/cuda/launch.h"
#include "kernels/intree/family.h"

static const tr_call_field kSoftmaxFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"out_dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"row", TR_VALUE_INT, 0, 0, {0}},
    {"inner", TR_VALUE_INT, 0, 1, {.kind = TR_VALUE_INT, .as.i = 1}},
};
static const tr_call_spec_type kSoftmaxCall = {"SoftmaxCall", 4, kSoftmaxFields};

static const char *const kSoftmaxArgs[] = {"x", NULL};
static const char *const kY[] = {"y"};

static const tr_kernel_interface kSoftmaxIface = {
    "SoftmaxRowFwdInterface", &kSoftmaxCall, 1, kSoftmaxArgs, 1, kY,
    "x [outer, row, inner] contiguous on a cuda device; returns y of x's shape in out_dtype; nothing written "
    "in place"};

enum { WARP, BLOCK, LOOPED, STRIDED };
enum { WARP_MAX_ROW = 1024, BLOCK_MAX_ROW = 32768, WARP_BLOCK = 128, LOOPED_BLOCK = 1024 };
/* Rows this long or longer get a split build (a row over a cluster of up to SPLIT_MAX_CTAS CTAs
 * of SPLIT_BLOCK threads) on sm_90 and later, launched for fewer rows than SMs. */
enum { SPLIT_MIN_ROW = 16384, SPLIT_BLOCK = 512, SPLIT_MAX_CTAS = 8, SPLIT_MIN_ARCH = 90 };
/* Tried and not kept (an A/B on an H100, bench_gpu.py --ops Softmax --rows logits, 2026-12-06):
 * clusters of 16 where the driver allows them, together with a CTA whose run is one step of its
 * loads keeping the values in registers instead of reading them again: 1x128256 6.18 us against
 * 6.12, 64x128256 30.77 against 30.66. */

static const tr_intree_impl kImpls[] = {
    {&tr_intree_softmax_family, WARP, 0},
    {&tr_intree_softmax_family, BLOCK, 0},
    {&tr_intree_softmax_family, LOOPED, 0},
    {&tr_intree_softmax_family, STRIDED, 0},
};

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  const tr_intree_impl *impl = self->ctx;
  static const char *const kFields[] = {"dtype", "out_dtype"};
  for (size_t i = 0; i < 2; i++) {
    tr_dtype d = tr_call_spec_get(call, kFields[i])->as.dtype;
    if (!tr_intree_is_float16ish(d)) {
      snprintf(buf, size, "%s must be float16, bfloat16 or float32; got %s", kFields[i], tr_dtype_name(d));
      return buf;
    }
  }
  int64_t row = tr_call_spec_int(call, "row");
  const char *refused = tr_intree_row_refusal(row, buf, size);
  if (refused != NULL) return refused;
  if (impl->kind != STRIDED && tr_call_spec_int(call, "inner") != 1) {
    snprintf(buf, size, "serves softmax along the last non-unit axis only; got an inner stride of %lld",
             (long long)tr_call_spec_int(call, "inner"));
    return buf;
  }
  if (impl->kind == WARP && row > WARP_MAX_ROW) {
    snprintf(buf, size, "a warp holds rows of at most %d elements; got row %lld", WARP_MAX_ROW, (long long)row);
    return buf;
  }
  if (impl->kind == BLOCK && row > BLOCK_MAX_ROW) {
    snprintf(buf, size, "a block holds rows of at most %d elements in registers; got row %lld", BLOCK_MAX_ROW,
             (long long)row);
    return buf;
  }
  return NULL;
}

static const char *const kWarpOver[] = {"softmax_block", "softmax_looped", NULL};
static const char *const kBlockOver[] = {"softmax_looped", NULL};

/* A separate block kernel: its row and exponentials held in registers measured 96-103% of copy
 * on the H200, against the looped kernel's 60-80%. */
TR_INTREE_TYPE(kWarp, "softmax_warp", kSoftmaxIface, kImpls[WARP], 0, kWarpOver, refusal);
TR_INTREE_TYPE(kBlock, "softmax_block", kSoftmaxIface, kImpls[BLOCK], 0, kBlockOver, refusal);
TR_INTREE_TYPE(kLooped, "softmax_looped", kSoftmaxIface, kImpls[LOOPED], 0, NULL, refusal);
TR_INTREE_TYPE(kStrided, "softmax_strided", kSoftmaxIface, kImpls[STRIDED], 1, NULL, refusal);

static tr_status *softmax_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params,
                               size_t n_params, const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kSoftmaxIface.name;
  const tr_value *dim = tr_intree_param(params, n_params, "dim");
  const tr_value *dtype = tr_intree_param(params, n_params, "dtype");
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
      {"inner", tr_value_int(rank == 0 ? 1 : tr_intree_spec_numel(x, (int32_t)d + 1, rank))},
  };
  return tr_call_spec_init(out, &kSoftmaxCall, device, v, 4);
}

/* Threads for the block-per-row kernel holding the row in registers: about four 16-byte vectors
 * per thread (vectors of the wider of the input and output elements), at least 64 and at most
 * 1024. Measured on the H200 with the (max, sum) merge: four per thread reached 97% of the copy
 * rate on 16384x8192 bf16 where two reached 92%. */
static uint32_t block_threads(int64_t row, size_t elem) {
  size_t v = 16 / elem;
  int64_t nv = row % (int64_t)v == 0 ? row / (int64_t)v : row;
  int64_t t = (nv + 3) / 4;
  t = (t + 31) / 32 * 32;
  if (t < 64) t = 64;
  if (t > 1024) t = 1024;
  return (uint32_t)t;
}

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                             tr_intree_source *out) {
  (void)arch; /* one source for every architecture */
  const tr_intree_impl *impl = type->ctx;
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype, ot = tr_call_spec_get(call, "out_dtype")->as.dtype;
  const char *t = tr_intree_c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  int64_t row = tr_intree_compiled_row(tr_call_spec_int(call, "row"));
  size_t wider = tr_dtype_bytes(dt) > tr_dtype_bytes(ot) ? tr_dtype_bytes(dt) : tr_dtype_bytes(ot);
  static const char *const kImplOption[] = {"-DTR_IMPL_WARP", "-DTR_IMPL_BLOCK", "-DTR_IMPL_LOOPED", "-DTR_IMPL_STRIDED"};
  out->source = tr_src_softmax;
  out->entry = "tr_softmax";
  tr_intree_add_text(out, "-DTR_T=%s", t);
  tr_intree_add_int(out, "-DTR_N=%lld", (long long)row);
  out->block = impl->kind == WARP ? WARP_BLOCK
               : impl->kind == BLOCK ? block_threads(row, wider)
               : impl->kind == STRIDED ? TR_INTREE_ELEMENTWISE_BLOCK : LOOPED_BLOCK;
  tr_intree_add_text(out, "%s", kImplOption[impl->kind]);
  if ((impl->kind == BLOCK || impl->kind == LOOPED) && row >= SPLIT_MIN_ROW) {
    out->wide_block = SPLIT_BLOCK;
    out->wide_split = 1;
    out->wide_min_arch = SPLIT_MIN_ARCH;
  }
  tr_intree_add_text(out, "-DTR_OUT=%s", tr_intree_c_type(ot));
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  return NULL;
}

/* ints[0]: the row length; ints[1]: the inner stride. */
static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  k->ints[0] = tr_call_spec_int(call, "row");
  k->ints[1] = tr_call_spec_int(call, "inner");
  return NULL;
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  (void)n_in;
  void *x = tr_intree_data(in[0]), *y = tr_intree_data(out[0]);
  int64_t inner = k->ints[1], outer = tr_intree_numel(in[0]) / (k->ints[0] * k->ints[1]);
  void *args[] = {&x, &y, &outer, &inner};
  if (k->impl->kind == STRIDED) {
    uint32_t blocks = tr_cuda_elements_grid(outer * inner, k->block, UINT32_MAX);
    return blocks == 0 ? NULL : tr_cu_launch_ex(k->narrow.function, k->key, blocks, 1, k->block, 0, stream, args, k->overlap);
  }
  if (k->wide.function != NULL && outer < k->sm_count) {
    /* few long rows: each over a cluster of the fewest CTAs (a power of two, at most
     * SPLIT_MAX_CTAS) that make at least as many CTAs as SMs (measured on the H200 at
     * 64 x 128256: asking for twice as many, 8 CTAs a row, was 20% slower). Where clusters
     * cannot be launched (no cuLaunchKernelEx, or none fit: MPS, a partitioned GPU), a block per
     * row as for many rows (such launch errors do not stick). */
    uint32_t ctas = 1;
    while (ctas < SPLIT_MAX_CTAS && outer * (int64_t)ctas < k->sm_count) ctas *= 2;
    tr_status *clustered = tr_cu_launch_cluster(k->wide.function, k->key, (uint32_t)outer * ctas, ctas,
                                                k->wide_threads, 0, stream, args, k->overlap);
    if (clustered == NULL) {
      tr__intree_count_split();
      return NULL;
    }
    tr_status_destroy(&clustered);
  }
  return tr_cuda_launch_rows(k->narrow.function, k->key, outer, k->impl->kind == WARP ? k->block / 32 : 1, k->block,
                             stream, args, k->overlap);
}

static const tr_kernel_interface *const kIfaces[] = {&kSoftmaxIface};
static const tr_kernel_type *const kTypes[] = {&kWarp, &kBlock, &kLooped, &kStrided};
static const tr_intree_op kOps[] = {{"SoftmaxFwdOp", 1, kIfaces, 4, kTypes, softmax_spec, 0}};

const tr_intree_family tr_intree_softmax_family = {"softmax", 1, kOps, 0, source_for, prepare, launch, NULL, NULL, NULL, NULL};
