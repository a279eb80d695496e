/* rope.c: the rope family: RoPEFwdOp on cuda (kernels/src/rope.cu), NeoX (halves) and GPT-J
 * (interleaved pairs) rotations as two implementations, the head dim compiled in, tokens, heads
 * and the cache's rows at run time.
 *
 * A position outside the cache is a condition on values: the kernel never reads such a row (the
 * token's output is zeros) and records the first such token; outside a CUDA graph capture the
 * launch then waits for the kernel and returns the ValueError, the cpu backend's text word for
 * word. Inside a capture nothing can be read back: the call is launched unchecked. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/launch.h"
#include "kernels/intree/family.h"
#include "platform/platform.h"

static const tr_call_field kRopeFields[] = {
    {"dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"pos_dtype", TR_VALUE_DTYPE, 0, 0, {0}},
    {"head_dim", TR_VALUE_INT, 0, 0, {0}},
    {"is_neox", TR_VALUE_BOOL, 0, 1, {.kind = TR_VALUE_BOOL, .as.b = 1}},
};
static const tr_call_spec_type kRopeCall = {"RopeCall", 4, kRopeFields};

static const char *const kRopeArgs[] = {"positions", "x", "cos_sin_cache", NULL};
static const char *const kY[] = {"y"};

static const tr_kernel_interface kRopeIface = {
    "RoPEFwdInterface", &kRopeCall, 3, kRopeArgs, 1, kY,
    "positions [*B] (int32 or int64), x [*B, H, D] and cos_sin_cache [P, D] contiguous on one cuda device; returns "
    "y of x's shape; a position outside [0, P) is a ValueError at call time (not checked inside a graph capture); "
    "nothing written in place"};

enum { NEOX, INTERLEAVED };
enum { ROPE_BLOCK = 128, ROPE_MAX_HEAD_DIM = 1024 };  /* 128 measured 1-5% above 256 on the H200 */
/* Tried and not kept: two chunks a thread, both chunks' x and positions loaded before either
 * cache row, was slower in an A/B on an H100 (bench_gpu.py --ops RoPE --rows prefill, 2026-12-06):
 * queries 14.67 us against 14.19, keys 5.28 against 4.73 (the grid halves, and every thread of the
 * keys row already fits the card at once). */
static const tr_intree_impl kImpls[] = {
    {&tr_intree_rope_family, NEOX, 0},
    {&tr_intree_rope_family, INTERLEAVED, 0},
};

static const char *refusal(const tr_kernel_type *self, const tr_call_spec *call, char *buf, size_t size) {
  const tr_intree_impl *impl = self->ctx;
  tr_dtype d = tr_call_spec_get(call, "dtype")->as.dtype;
  if (!tr_intree_is_float16ish(d)) {
    snprintf(buf, size, "rotates float16, bfloat16 and float32; got %s", tr_dtype_name(d));
    return buf;
  }
  tr_dtype p = tr_call_spec_get(call, "pos_dtype")->as.dtype;
  if (!tr_dtype_equal(p, TR_INT32) && !tr_dtype_equal(p, TR_INT64)) {
    snprintf(buf, size, "positions must be int32 or int64; got %s", tr_dtype_name(p));
    return buf;
  }
  int64_t dim = tr_call_spec_int(call, "head_dim");
  if (dim < 2 || dim % 2 != 0 || dim > ROPE_MAX_HEAD_DIM) {
    snprintf(buf, size, "the head dim must be even, in 2..%d; got %lld", ROPE_MAX_HEAD_DIM, (long long)dim);
    return buf;
  }
  int neox = tr_call_spec_get(call, "is_neox")->as.b;
  if (neox != (impl->kind == NEOX)) {
    snprintf(buf, size, "rotates %s; the call asks is_neox=%s", impl->kind == NEOX ? "halves (NeoX)" :
             "interleaved pairs (GPT-J)", neox ? "true" : "false");
    return buf;
  }
  return NULL;
}

TR_INTREE_TYPE(kNeox, "rope_neox", kRopeIface, kImpls[NEOX], 0, NULL, refusal);
TR_INTREE_TYPE(kInterleaved, "rope_interleaved", kRopeIface, kImpls[INTERLEAVED], 0, NULL, refusal);

static tr_status *rope_spec(const tr_tensor_spec *const *in, size_t n_in, const tr_named_value *params,
                            size_t n_params, const tr_device *device, const char **iface, tr_call_spec *out) {
  *iface = kRopeIface.name;
  if (n_in < 3 || in[0] == NULL || in[1] == NULL || in[2] == NULL || in[1]->rank < 2) {
    return TR_STATUS(TR_VALUE, "RoPEFwdOp: the in-tree kernels need positions, x [*B, H, D] and cos_sin_cache");
  }
  const tr_value *neox = tr_intree_param(params, n_params, "is_neox");
  tr_named_value v[4] = {{"dtype", tr_value_dtype(in[1]->dtype)},
                         {"pos_dtype", tr_value_dtype(in[0]->dtype)},
                         {"head_dim", tr_value_int(in[1]->shape[in[1]->rank - 1])},
                         {"is_neox", tr_value_bool(neox == NULL || neox->as.b)}};
  return tr_call_spec_init(out, &kRopeCall, device, v, 4);
}

static tr_status *source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                             tr_intree_source *out) {
  (void)arch; /* one source for every architecture */
  const tr_intree_impl *impl = type->ctx;
  tr_dtype dt = tr_call_spec_get(call, "dtype")->as.dtype;
  const char *t = tr_intree_c_type(dt);
  if (t == NULL) return TR_STATUS(TR_VALUE, "kernel '%s' has no specialisation for dtype %s", type->key, tr_dtype_name(dt));
  out->source = tr_src_rope;
  out->entry = "tr_rope";
  out->block = ROPE_BLOCK;
  tr_intree_add_text(out, "-DTR_T=%s", t);
  tr_intree_add_text(out, "-DTR_P=%s", tr_dtype_equal(tr_call_spec_get(call, "pos_dtype")->as.dtype, TR_INT64) ? "i64" : "int");
  tr_intree_add_int(out, "-DTR_D=%lld", (long long)tr_call_spec_int(call, "head_dim"));
  tr_intree_add_int(out, "-DTR_NEOX=%lld", impl->kind == NEOX);
  tr_intree_add_int(out, "-DTR_BLOCK=%lld", (long long)out->block);
  return NULL;
}

/* The kernel's own state: the word the first bad token goes to, and the lock that keeps one
 * checked launch at a time using it. */
typedef struct rope_state {
  tr_cu_ptr bad;
  tr_plat_mutex lock;
} rope_state;

/* ints[0]: the head dim; ints[1]: 8 for int64 positions, 4 for int32. */
static tr_status *prepare(const tr_call_spec *call, tr_intree_built *k) {
  k->ints[0] = tr_call_spec_int(call, "head_dim");
  k->ints[1] = tr_dtype_equal(tr_call_spec_get(call, "pos_dtype")->as.dtype, TR_INT64) ? 8 : 4;
  rope_state *s = calloc(1, sizeof(*s));
  if (s == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "RoPE's kernel state");
  tr_status *status = tr_plat_mutex_init(&s->lock);
  if (status != NULL) {
    free(s);
    return status;
  }
  if ((status = tr_cu_alloc(sizeof(uint64_t), &s->bad)) != NULL) {
    tr_plat_mutex_destroy(&s->lock);
    free(s);
    return status;
  }
  k->state = s;
  return NULL;
}

static void free_bad(tr_intree_built *k) { tr_cu_free(((rope_state *)k->state)->bad); }

static void release(tr_intree_built *k) {
  rope_state *s = k->state;
  if (s == NULL) return;
  tr__intree_with_context(k, free_bad); /* no context to free it in: the word stays */
  tr_plat_mutex_destroy(&s->lock);
  free(s);
  k->state = NULL;
}

static tr_status *launch(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                         tr_cu_stream stream) {
  (void)n_in;
  rope_state *s = k->state;
  void *positions = tr_intree_data(in[0]), *x = tr_intree_data(in[1]), *cache = tr_intree_data(in[2]);
  void *y = tr_intree_data(out[0]);
  int64_t tokens = tr_intree_numel(in[0]);
  int64_t heads = in[1]->shape[in[1]->ndim - 2];
  int64_t rows = in[2]->shape[0];
  int64_t dim = k->ints[0];
  int64_t per_unit = dim / 2 >= 8 && (dim / 2) % 8 == 0 ? 16 : 2; /* elements a thread, roughly */
  uint32_t blocks = tr_cuda_elements_grid(tr_intree_numel(in[1]), (int64_t)k->block * per_unit,
                                          (int64_t)k->sm_count * 16);
  if (blocks == 0) return NULL;
  if (tr_cu_stream_capturing(stream)) {
    void *bad = NULL;
    void *args[] = {&positions, &x, &cache, &y, &tokens, &heads, &rows, &bad};
    return tr_cu_launch_ex(k->narrow.function, k->key, blocks, 1, k->block, 0, stream, args, k->overlap);
  }
  tr_plat_mutex_lock(&s->lock);
  void *bad = (void *)s->bad;
  void *args[] = {&positions, &x, &cache, &y, &tokens, &heads, &rows, &bad};
  uint64_t first = UINT64_MAX;
  tr_status *status = tr_cu_memset_async(s->bad, 0xff, sizeof(uint64_t), stream);
  if (status == NULL) status = tr_cu_launch_ex(k->narrow.function, k->key, blocks, 1, k->block, 0, stream, args, k->overlap);
  if (status == NULL) status = tr_cu_stream_sync(stream);
  if (status == NULL) status = tr_cu_copy_to_host(&first, s->bad, sizeof(first));
  tr_plat_mutex_unlock(&s->lock);
  if (status != NULL || first == UINT64_MAX) return status;
  int64_t p = 0;
  if (k->ints[1] == 8) {
    status = tr_cu_copy_to_host(&p, (tr_cu_ptr)positions + first * 8, 8);
  } else {
    int32_t p32 = 0;
    status = tr_cu_copy_to_host(&p32, (tr_cu_ptr)positions + first * 4, 4);
    p = p32;
  }
  if (status != NULL) return status;
  return TR_STATUS(TR_VALUE, "rope: token %lld has position %lld, out of range [0, %lld) of the cache's rows",
                   (long long)first, (long long)p, (long long)rows);
}

static const tr_kernel_interface *const kIfaces[] = {&kRopeIface};
static const tr_kernel_type *const kTypes[] = {&kNeox, &kInterleaved};
static const tr_intree_op kOps[] = {{"RoPEFwdOp", 1, kIfaces, 2, kTypes, rope_spec, 0}};

const tr_intree_family tr_intree_rope_family = {"rope", 1, kOps, 0, source_for, prepare, launch, NULL, NULL, release, NULL};
