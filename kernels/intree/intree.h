/* intree.h: the in-tree CUDA kernels as the selector sees them: for each op its kernel
 * interface, call-spec type and implementations (availability, refusal, precedence), the call
 * spec a call makes, and the factories that specialise a CUDA C source with NVRTC into an
 * artifact (cached on disk), load it on the call's device and return a kernel that launches it
 * on the device's current stream; and the strided copies of cuda tensors. One file per family
 * behind one table (family.h; docs/adding-a-kernel-family.md). Cuda memory: kernels/cuda/pool.h.
 * No ZeroMQ here; the CUDA driver is loaded at run time. */
#ifndef TILERUN_KERNELS_INTREE_H_
#define TILERUN_KERNELS_INTREE_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "kernels/artifact.h"
#include "selector/selector.h"
#include "tilerun/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One in-tree op: its interfaces and implementations, and how a call becomes a call spec. */
typedef struct tr_intree_op {
  const char *op;
  size_t n_interfaces;
  const tr_kernel_interface *const *interfaces;
  size_t n_types;
  const tr_kernel_type *const *types;
  /* The call spec of a validated call (input specs in declaration order, NULL for an absent
   * one; the op instance's params by name) and the interface it goes to. A call the family
   * cannot express (a rank or a param it does not know) is a ValueError naming it. */
  tr_status *(*call_spec)(const tr_tensor_spec *const *inputs, size_t n_inputs, const tr_named_value *params,
                          size_t n_params, const tr_device *device, const char **interface,
                          tr_call_spec *out);
  /* The inputs (a bit each, in declaration order) its kernels read as they are when their
   * layout repeats a contiguous block over stride-0 leading axes (tr_dl_tensor_repeat_period:
   * a bias expanded to a matrix), rather than copied out to a contiguous tensor first. */
  uint32_t repeat_inputs;
} tr_intree_op;

/* The in-tree ops, family by family (RMSNormFwdOp, LayerNormFwdOp, SoftmaxFwdOp, AddFwdOp, GemmFwdOp). */
size_t tr_intree_op_count(void);
const tr_intree_op *tr_intree_op_at(size_t i);
const tr_intree_op *tr_intree_find(const char *op); /* NULL: no in-tree kernels */

/* The NVRTC architecture name for a device's arch (90 -> "sm_90a", 80 -> "sm_80"). */
void tr_intree_arch_name(int32_t arch, char *buf, size_t size);

/* One specialisation's source text, options and entry: what the factory compiles, exposed so
 * CI can compile every specialisation the tests and benchmarks use without a GPU. `call` must
 * be a call spec of the type's interface that the type serves; `arch` the architecture it is
 * compiled for (90 for sm_90a; -1 where not known: a source that depends on it takes its
 * portable form). Fills up to 16 options into storage the caller gives (`option_text`, 16 x 64
 * bytes). */
typedef struct tr_intree_source {
  const char *name;   /* the kernel type's key */
  const char *source; /* common header + family source */
  const char *entry;
  size_t n_options;
  const char *options[16];
  char option_text[16][64];
  uint32_t block; /* threads per block */
  /* Built a second time for calls of few rows, with this many threads (replacing the option
   * -DTR_BLOCK=...); 0: no second build. Looped norms: the same kernel, wider. Softmax
   * rows of at least 16384 elements (block and looped): split over a thread-block cluster
   * (`wide_split`, -DTR_SPLIT), for architectures of `wide_min_arch` (90) and later only. */
  uint32_t wide_block;
  int wide_split;
  int32_t wide_min_arch;
} tr_intree_source;
tr_status *tr_intree_source_for(const tr_kernel_type *type, const tr_call_spec *call, int32_t arch,
                                tr_intree_source *out) TR_MUST_USE;
/* The source of the wide build of `src` (src->wide_block > 0): the same with more threads (and
 * -DTR_SPLIT where src->wide_split). `w` points into itself: a copy of it must point its options
 * at its own option_text again. */
void tr_intree_wide_source(const tr_intree_source *src, tr_intree_source *w);

/* 1 when `type` is one of the in-tree implementations above (it has a source to compile). */
int tr_intree_owns(const tr_kernel_type *type);

/* 1 when `type` is in-tree and compiles a source; 0 for one made from a library's kernels
 * (cuBLASLt: tr_intree_build gives it no artifact, and tr_intree_kernel makes it from none). */
int tr_intree_has_source(const tr_kernel_type *type);

/* 1 when `src` has a wide build for architecture `arch` (90 for "sm_90a"). */
int tr_intree_has_wide(const tr_intree_source *src, int32_t arch);

/* The build step: the artifacts of an in-tree implementation for a call, compiled for `arch`
 * ("sm_90a") or taken from the disk cache; no GPU needed. One artifact, or two where the source
 * has a wide build for the arch (the second). A type that is not in-tree, or that refuses the call, is a
 * SelectionError saying so; a compile error a CompileError with NVRTC's log. The caller clears
 * the artifacts (tr_artifact_clear). Thread-safe. */
tr_status *tr_intree_build(const tr_kernel_type *type, const tr_call_spec *call, const char *arch,
                           struct tr_artifact out[2], size_t *n_out) TR_MUST_USE;

/* The launch side: a kernel for the call's device (whose facts the call states or derived) from
 * the artifacts tr_intree_build made for this type and call (here or in a build component
 * elsewhere): each is loaded once per device, and checked to be this kernel's, for this
 * device's architecture. Loads the device's copy kernels too (compiled here). Thread-safe. */
tr_status *tr_intree_kernel(const tr_kernel_type *type, const tr_call_spec *call, const struct tr_artifact *arts,
                            size_t n, tr_kernel *out) TR_MUST_USE;

/* The disk cache's folder is read from the environment (TILERUN_CACHE_DIR, ...) at the first
 * build of the process; this reads it again, for builds from now on (for tests, and programs that
 * change the variable later). Thread-safe unless another thread sets the environment meanwhile. */
void tr_intree_reload_cache(void);

/* Kernels, artifacts and modules made so far in this process (for tests and benchmarks). */
typedef struct tr_intree_stats {
  uint64_t compiled;    /* NVRTC ran */
  uint64_t from_cache;  /* an artifact came from the disk cache */
  uint64_t loaded;      /* modules loaded (once per device and artifact) */
  uint64_t kernels;     /* kernels built (once per memo entry) */
  uint64_t split_launches; /* softmax calls launched split over clusters (few long rows, sm_90 on) */
  uint64_t copies;         /* strided <-> contiguous copies launched (tr_intree_copy) */
  /* the cuda pools' counts (kernels/cuda/pool.h, over the process's live pools) */
  uint64_t pool_hits, pool_kept, pool_released, thread_ends, orphans_freed;
} tr_intree_stats;
tr_intree_stats tr_intree_get_stats(void);

/* A strided <-> contiguous copy on device dst's current stream (scatter 0: `src` strided into
 * contiguous `dst`; 1: contiguous `src` into strided `dst`). The copy kernels are loaded when the
 * first in-tree kernel of the device is built; before, a copy is a BackendError. Thread-safe. */
tr_status *tr_intree_copy(const DLTensor *src, const DLTensor *dst, int scatter) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_INTREE_H_ */
