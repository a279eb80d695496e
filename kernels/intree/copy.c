/* copy.c: the strided <-> contiguous copy kernels (kernels/src/copy.cu) a device gets with its
 * first in-tree kernel, through which the runtime makes strided cuda inputs contiguous. */
#include <stdatomic.h>
#include <string.h>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/modules.h"
#include "kernels/cuda/pool.h"
#include "kernels/intree/family.h"

enum { COPY_MAX_BLOCKS = 4096 };

/* Per device, the copy kernels of element sizes 1, 2, 4 and 8. */
static _Atomic(tr_cu_function) g_copies[TR_CUDA_MAX_DEVICES][4];

tr_status *tr__intree_load_copies(int32_t index, const char *arch) {
  static const size_t kSizes[4] = {1, 2, 4, 8};
  for (size_t i = 0; i < 4; i++) {
    if (atomic_load(&g_copies[index][i]) != NULL) continue;
    tr_intree_source s;
    memset(&s, 0, sizeof(s));
    s.name = "copy_strided";
    s.source = tr_src_copy;
    s.entry = "tr_copy";
    s.block = TR_INTREE_ELEMENTWISE_BLOCK;
    tr_intree_add_int(&s, "-DTR_ES=%lld", (long long)kSizes[i]);
    tr_intree_add_int(&s, "-DTR_BLOCK=%lld", (long long)s.block);
    tr_artifact art;
    TR_RETURN_IF_ERROR(tr__intree_artifact(arch, &s, &art));
    tr_cuda_loaded loaded;
    tr_status *status = tr_cuda_module_load(index, &art, 0, NULL, &loaded);
    tr_artifact_clear(&art);
    TR_RETURN_IF_ERROR(status);
    atomic_store(&g_copies[index][i], loaded.function);
  }
  return NULL;
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
  tr_cu_function f = atomic_load(&g_copies[index][slot]);
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
  void *s = tr_intree_data(src), *t = tr_intree_data(dst);
  int sc = scatter;
  void *args[] = {&s, &t, &n, &layout, &sc};
  tr_cu_ctx ctx, previous;
  TR_RETURN_IF_ERROR(tr_cu_device_context(index, &ctx));
  TR_RETURN_IF_ERROR(tr_cu_enter_context(ctx, &previous));
  uint32_t blocks = tr_cuda_elements_grid(n, TR_INTREE_ELEMENTWISE_BLOCK, COPY_MAX_BLOCKS);
  tr_cu_stream stream = tr_cu_current_stream(index);
  tr_cuda_pool_before_work(stream);
  tr_status *status = tr_cu_launch(f, "copy_strided", blocks, 1, TR_INTREE_ELEMENTWISE_BLOCK, 0, stream, args);
  tr_cu_restore_context(ctx, previous);
  if (status == NULL) tr__intree_count_copy();
  return status;
}
