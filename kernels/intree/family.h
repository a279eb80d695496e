/* family.h: what one kernel family file (norm.c, softmax.c, elementwise.c) gives the in-tree
 * table in intree.c, and the helpers the families share. A new family is one file filling a
 * tr_intree_family plus one line in intree.c's table: docs/adding-a-kernel-family.md. Private to
 * kernels/intree. */
#ifndef TILERUN_KERNELS_INTREE_FAMILY_H_
#define TILERUN_KERNELS_INTREE_FAMILY_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/modules.h"
#include "kernels/intree/intree.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_intree_family tr_intree_family;

/* What an in-tree kernel type's ctx points to: its family and the family's own number for the
 * implementation (a warp per row, a block per row, ...). */
typedef struct tr_intree_impl {
  const tr_intree_family *family;
  int kind;
  /* 1: nothing to compile (a library's kernels: cuBLASLt); the source has no text, no artifact is
   * built, and the kernel is made by the family's prepare alone */
  int no_source;
} tr_intree_impl;

/* A kernel made from an implementation's artifacts on one device: what its family's launch
 * reads. The narrow build serves many rows; the wide one (wide.function NULL: none) fewer rows
 * than SMs. `ints` and `reals` are the family's launch values, read from the call spec by its
 * `prepare` when the kernel is made. */
typedef struct tr_intree_built {
  const tr_intree_impl *impl;
  const char *key;
  tr_cu_ctx ctx;
  int32_t index;
  uint32_t block;        /* threads a block, narrow build */
  uint32_t wide_threads; /* threads a block, wide build */
  int wide_split;        /* the wide build splits a row over a cluster */
  int32_t sm_count;
  int overlap; /* launched with programmatic dependent launch (sm_90 on) */
  tr_cuda_loaded narrow, wide;
  int64_t ints[8];
  double reals[4];
  void *state; /* the family's own (a cuBLASLt GEMM), released by its release */
  /* implementation (the key), block, overlap, few_rows, then up to four of the family's */
  tr_named_value config[8];
  size_t n_config;
} tr_intree_built;

/* A family: its ops (interfaces, implementations, call specs) and how an implementation is
 * specialised, made and launched. */
struct tr_intree_family {
  const char *name;
  size_t n_ops;
  const tr_intree_op *ops;
  /* 1: every build also has an "<entry>_any" entry, for pointers of any alignment (loaded as
   * narrow.any / wide.any) */
  int any_entry;
  /* The specialisation of `type` (one of this family's) for `call` compiled for `arch` (90 for
   * sm_90a; -1 where not known): source, entry, options, threads, and its wide build if any. A
   * dtype with no specialisation is a ValueError. It reads the call's fields and `arch`, never
   * call->facts: the build component gets the fields and the arch only. */
  tr_status *(*source_for)(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch, tr_intree_source *out);
  /* Reads the launch values from `call` into k->ints / k->reals, and checks the entries loaded
   * (k->narrow, k->wide) are the ones its launch needs (a BackendError naming the missing one). */
  tr_status *(*prepare)(const tr_call_spec *call, tr_intree_built *k);
  /* Launches the kernel on `stream` (its context current) for tensors of at least one element. */
  tr_status *(*launch)(const tr_intree_built *k, DLTensor *const *in, size_t n_in, DLTensor *const *out,
                       tr_cu_stream stream);
  /* Optional (NULL: the family's kernels are not tuned). request_tune: the kernel's context is
   * current; idempotent. */
  tr_status *(*tune)(tr_intree_built *k);
  /* Optional: fills k->config[4..7] with the family's own values (ints and bools), returning how
   * many; called when the kernel is made and again after tuning. */
  size_t (*describe)(tr_intree_built *k);
  /* Optional: releases k->state (the kernel goes). */
  void (*release)(tr_intree_built *k);
  /* Optional: a suffix naming a second kernel in every build's module ("<entry><companion>",
   * loaded as narrow.companion: attention's merge step), or NULL. */
  const char *companion;
};

/* The families' factory (the selector runs it): builds the artifacts here, then loads them. */
tr_status *tr__intree_factory(const tr_kernel_type *self, const tr_call_spec *call, tr_kernel *out);

/* An in-tree implementation: the spec's defaults but for the architectures (SM80 on: the bf16
 * conversions), the refusal, the factory and the impl. */
#define TR_INTREE_TYPE(var, key_, iface, impl, general_, preferred_, refusal_) \
  TR_INTREE_TYPE_ARCHS(var, key_, iface, impl, general_, preferred_, refusal_, tr_intree_archs, TR_INTREE_N_ARCHS)
/* The same for an implementation of some architectures only (`archs`, `n_archs` of them). */
#define TR_INTREE_TYPE_ARCHS(var, key_, iface, impl, general_, preferred_, refusal_, archs, n_archs)      \
  static const tr_kernel_type var = {sizeof(tr_kernel_type), key_, &iface, NULL, archs, n_archs, general_, \
                                     preferred_, NULL, refusal_, NULL, tr__intree_factory, NULL, (void *)&impl}

extern const int32_t tr_intree_archs[];
#define TR_INTREE_N_ARCHS 11

enum { TR_INTREE_ELEMENTWISE_BLOCK = 256 };

/* ---- helpers the families share ---- */

/* The param of that name, or NULL. */
const tr_value *tr_intree_param(const tr_named_value *params, size_t n, const char *name);
/* The product of s->shape[from..to). */
int64_t tr_intree_spec_numel(const tr_tensor_spec *s, int32_t from, int32_t to);
int64_t tr_intree_numel(const DLTensor *t);
void *tr_intree_data(const DLTensor *t); /* data + byte_offset; NULL for NULL */
/* float16, bfloat16 or float32. */
int tr_intree_is_float16ish(tr_dtype d);
/* The kernels' element type macro for a dtype ("f16", "bf16", "float", ...), NULL for another. */
const char *tr_intree_c_type(tr_dtype d);
/* Appends an option (at most 16). */
void tr_intree_add_int(tr_intree_source *s, const char *fmt, long long value);
void tr_intree_add_text(tr_intree_source *s, const char *fmt, const char *value);
/* A block size for `n` threads' worth of work: a multiple of 32 in 64..1024. */
uint32_t tr_intree_clamp_threads(int64_t n);
/* The refusal of rows the row kernels cannot index: NULL, or the reason written into buf. A row
 * of no elements is served: its tensor has none, so nothing is launched. */
const char *tr_intree_row_refusal(int64_t row, char *buf, size_t size);
/* The attention kernels' shared refusal (attention.c): float16 and bfloat16, head dims 64 and
 * 128 (the call spec's "dtype" and "dim"); NULL, or the reason written into buf. */
const char *tr_intree_attention_refusal(const tr_call_spec *call, char *buf, size_t size);
/* A kernel's dynamic shared memory a block against the device's opt-in limit (the call's facts;
 * none stated: no check): NULL where `smem` bytes fit, else the BackendError naming the kernel,
 * the bytes and the limit. */
tr_status *tr_intree_smem_fits(const tr_intree_built *k, const tr_call_spec *call, int64_t smem) TR_MUST_USE;
/* The row length a specialisation is compiled for: `row`, or 1 for rows of no elements (never
 * launched: the kernel of an empty tensor does nothing). */
int64_t tr_intree_compiled_row(int64_t row);

/* The families (one line each in intree.c's table). */
extern const tr_intree_family tr_intree_norm_family, tr_intree_softmax_family, tr_intree_elementwise_family,
    tr_intree_gemm_family, tr_intree_rope_family, tr_intree_attention_family, tr_intree_attention_prefill_family;

/* The sources, with the common header in front (kernels/tools/embed.py). */
extern const char tr_src_norm[], tr_src_softmax[], tr_src_add[], tr_src_copy[], tr_src_gemm[], tr_src_rope[], tr_src_gqa_decode[],
    tr_src_gqa_prefill[];

/* Counts launches split over clusters (softmax). */
void tr__intree_count_split(void);
/* Counts strided copies (copy.c). */
void tr__intree_count_copy(void);

/* A specialisation's artifact for `arch`: compiled, or taken from the disk cache. */
tr_status *tr__intree_artifact(const char *arch, const tr_intree_source *src, tr_artifact *out) TR_MUST_USE;

/* Runs `fn(k)` with k's context current, for a family's release of the device memory it kept;
 * where the context cannot be entered, `fn` does not run (the memory stays with the process). */
void tr__intree_with_context(tr_intree_built *k, void (*fn)(tr_intree_built *k));

/* Loads device `index`'s copy kernels (copy.c) unless loaded; its context is current. */
tr_status *tr__intree_load_copies(int32_t index, const char *arch) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_INTREE_FAMILY_H_ */
