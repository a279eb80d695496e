/* tensors.c: tensors the runtime makes: outputs on the call's device, contiguous copies of
 * strided inputs, and write-backs. CPU memory is tilerun's own; a backend's device uses the
 * allocator and copy the backend registered. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/pool.h"
#include "kernels/intree/intree.h"
#include "sharing/sharing.h"
#include "runtime/internal.h"

/* What a tensor's deleter needs: lives in the same block as the DLManagedTensor. */
typedef struct owned {
  DLManagedTensor managed;
  tr_free_fn free_fn; /* NULL: the data is in this block (CPU), or cuda memory (cuda_bytes) */
  size_t cuda_bytes;  /* cuda: the bytes allocated, for the in-tree allocator's pool */
  tr_cuda_origin cuda_origin; /* cuda: where the block was made (its pool, stream, thread, capture) */
  int shared;         /* launch in another process: cpu data from tr_share_alloc, cuda from cuMemAlloc */
  void *free_ctx;
  tr_device device;
  int64_t shape[TR_MAX_RANK];
} owned;

/* cuda memory from cuMemAlloc (shareable through CUDA IPC), freed in its device's context. */
static tr_status *alloc_cuda_shared(int32_t index, size_t bytes, void **out) {
  *out = NULL;
  tr_cu_ctx ctx = NULL, previous = NULL;
  TR_RETURN_IF_ERROR(tr_cu_enter_device(index, &ctx, &previous));
  tr_cu_ptr p = 0;
  tr_status *status = tr_cu_alloc(bytes, &p);
  tr_cu_restore_context(ctx, previous);
  *out = (void *)(uintptr_t)p;
  return status;
}

static void free_cuda_shared(int32_t index, void *data) {
  tr_cu_ctx ctx = NULL, previous = NULL;
  tr_status *status = tr_cu_enter_device(index, &ctx, &previous);
  if (status == NULL) {
    tr_cu_free((tr_cu_ptr)(uintptr_t)data);
    tr_cu_restore_context(ctx, previous);
  }
  tr_status_destroy(&status);
}

/* One header of a pooled cuda output kept per thread for the next such output made there, so
 * that a memo-hit tr_op_call makes and frees no host memory for its output (headers are plain
 * host memory: whichever thread frees a tensor keeps its header). Freed as the thread ends; none
 * is kept once that hook has run, or where the platform has no such hook. */
static _Thread_local owned *t_spare;
static _Thread_local int t_spare_hook; /* 0: not registered yet; 1: registered; 2: ran, or none */

static void free_spare(void *unused) {
  (void)unused;
  free(t_spare);
  t_spare = NULL;
  t_spare_hook = 2;
}

/* A header for a pooled cuda output: this thread's spare, else a new one (NULL: out of memory). */
static owned *cuda_header(void) {
  owned *o = t_spare;
  t_spare = NULL;
  return o != NULL ? o : malloc(sizeof(owned));
}

/* Keeps a pooled cuda output's header as this thread's spare, or frees it. */
static void drop_cuda_header(owned *o) {
  if (t_spare_hook == 0) t_spare_hook = tr_plat_at_thread_exit(free_spare, NULL) ? 1 : 2;
  if (t_spare == NULL && t_spare_hook == 1) t_spare = o;
  else free(o);
}

static void delete_owned(DLManagedTensor *self) {
  owned *o = (owned *)self;
  if (o->shared) {
    if (strcmp(o->device.type, "cpu") == 0) tr_share_free(o->managed.dl_tensor.data);
    else free_cuda_shared(o->device.index < 0 ? 0 : o->device.index, o->managed.dl_tensor.data);
  } else if (o->free_fn != NULL) o->free_fn(o->free_ctx, &o->device, o->managed.dl_tensor.data);
  else if (o->cuda_bytes > 0) {
    tr_cuda_pool_free(o->device.index < 0 ? 0 : o->device.index, o->managed.dl_tensor.data, o->cuda_bytes,
                      &o->cuda_origin);
    drop_cuda_header(o);
    return;
  }
  free(o);
}

#define CPU_ALIGN 64

tr_status *tr__alloc_tensor(const tr_runtime *rt, const tr_tensor_spec *spec, const DLDevice *dl,
                            DLManagedTensor **out) {
  *out = NULL;
  int64_t numel = tr_tensor_spec_numel(spec);
  size_t elem = tr_dtype_bytes(spec->dtype);
  if (numel == INT64_MAX || (elem > 0 && (uint64_t)numel > (SIZE_MAX - sizeof(owned) - CPU_ALIGN) / elem)) {
    char text[256];
    tr_tensor_spec_format(spec, text, sizeof(text));
    return TR_STATUS(TR_OUT_OF_MEMORY, "a tensor %s holds more bytes than this machine can address", text);
  }
  size_t bytes = (size_t)numel * elem;
  int is_cpu = strcmp(spec->device.type, "cpu") == 0;
  tr_alloc_fn alloc = NULL;
  tr_free_fn free_fn = NULL;
  tr_copy_fn copy = NULL;
  void *ctx = NULL;
  int is_cuda = strcmp(spec->device.type, "cuda") == 0;
  if (is_cuda) { /* stream-ordered, on the device's current stream (below) */
  } else if (!is_cpu && !tr_registry_allocator(rt->registry, spec->device.type, &alloc, &free_fn, &copy, &ctx)) {
    char dev[TR_DEVICE_FORMAT_MAX];
    tr_device_format(&spec->device, dev, sizeof(dev));
    return TR_STATUS(TR_OP_NOT_AVAILABLE, "tilerun cannot allocate memory on %s: no backend "
                     "registered an allocator for device type '%s'", dev, spec->device.type);
  }
  /* launch in another process: memory it can map (cpu and cuda only) */
  int shared = rt->launch_placement == TR_PLACE_PROCESS && (is_cpu || is_cuda);
  /* CPU: one block holds the header and the data, the data aligned to CPU_ALIGN bytes. A pooled
   * cuda output: the thread's spare header where it has one. */
  int pooled = is_cuda && !shared;
  owned *o = pooled ? cuda_header() : malloc(is_cpu && !shared ? sizeof(owned) + CPU_ALIGN + bytes : sizeof(owned));
  if (o == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "allocating a tensor of %zu bytes on cpu", bytes);
  o->free_fn = NULL;
  o->cuda_bytes = 0;
  memset(&o->cuda_origin, 0, sizeof(o->cuda_origin));
  o->shared = shared;
  DLTensor *t = &o->managed.dl_tensor;
  if (shared) {
    tr_status *status = is_cpu ? tr_share_alloc(bytes ? bytes : 1, &t->data)
                               : alloc_cuda_shared(spec->device.index < 0 ? 0 : spec->device.index, bytes ? bytes : 1,
                                                   &t->data);
    if (status != NULL) {
      free(o);
      return status;
    }
  } else if (is_cpu) {
    uintptr_t data = ((uintptr_t)(o + 1) + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1);
    t->data = (void *)data;
  } else if (is_cuda) {
    void *data = NULL;
    tr_status *status = tr_cuda_pool_alloc(rt->cuda_pool, spec->device.index < 0 ? 0 : spec->device.index,
                                           bytes ? bytes : 1, &data, &o->cuda_origin);
    if (status != NULL) {
      drop_cuda_header(o);
      return status;
    }
    t->data = data;
    o->cuda_bytes = bytes ? bytes : 1;
  } else {
    t->data = alloc(ctx, &spec->device, bytes ? bytes : 1);
    if (t->data == NULL) {
      free(o);
      char dev[TR_DEVICE_FORMAT_MAX];
      tr_device_format(&spec->device, dev, sizeof(dev));
      return TR_STATUS(TR_OUT_OF_MEMORY, "allocating a tensor of %zu bytes on %s", bytes, dev);
    }
    o->free_fn = free_fn;
    o->free_ctx = ctx;
  }
  o->device = spec->device;
  memcpy(o->shape, spec->shape, (size_t)spec->rank * sizeof(int64_t));
  if (dl != NULL) {
    t->device = *dl;
  } else {
    tr_status *status = tr_registry_device_to_dl(rt->registry, &spec->device, &t->device);
    if (status != NULL) {
      delete_owned(&o->managed);
      return status;
    }
  }
  t->ndim = spec->rank;
  t->dtype = spec->dtype;
  t->shape = o->shape;
  t->strides = NULL;
  t->byte_offset = 0;
  o->managed.manager_ctx = o;
  o->managed.deleter = delete_owned;
  *out = &o->managed;
  return NULL;
}

tr_status *tr_runtime_empty(tr_runtime *rt, const DLTensor *like, DLManagedTensor **out) {
  TR__NOT_NULL("tr_runtime_empty", out);
  *out = NULL;
  TR__NOT_NULL("tr_runtime_empty", rt);
  if (like == NULL) return TR_STATUS(TR_VALUE, "tr_runtime_empty: 'like' is NULL (the spec to take the shape, dtype and device of)");
  if (tr_dtype_name(like->dtype) == NULL) {
    return TR_STATUS(TR_VALUE, "tr_runtime_empty: dtype (code %u, bits %u, lanes %u) is not one tilerun knows",
                     (unsigned)like->dtype.code, (unsigned)like->dtype.bits, (unsigned)like->dtype.lanes);
  }
  TR_RETURN_IF_ERROR(tr__runtime_discover(rt)); /* the backends' device types and allocators */
  tr_tensor_spec spec;
  TR_RETURN_IF_ERROR(tr_registry_spec_from_dl(rt->registry, like, &spec));
  return tr__alloc_tensor(rt, &spec, &like->device, out);
}

/* Copies elements between two layouts of one shape (strides in elements; NULL: compact). */
static void strided_copy(char *dst, const int64_t *dst_strides, const char *src,
                         const int64_t *src_strides, const int64_t *shape, int32_t rank, size_t elem) {
  int64_t compact[TR_MAX_RANK];
  int64_t step = 1;
  for (int32_t d = rank - 1; d >= 0; d--) {
    compact[d] = step;
    step *= shape[d];
  }
  const int64_t *ds = dst_strides ? dst_strides : compact, *ss = src_strides ? src_strides : compact;
  int64_t numel = step, index[TR_MAX_RANK] = {0};
  for (int64_t n = 0; n < numel; n++) {
    int64_t d_off = 0, s_off = 0;
    for (int32_t d = 0; d < rank; d++) {
      d_off += index[d] * ds[d];
      s_off += index[d] * ss[d];
    }
    memcpy(dst + d_off * (int64_t)elem, src + s_off * (int64_t)elem, elem);
    for (int32_t d = rank - 1; d >= 0; d--) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

static tr_status *device_copy(const tr_runtime *rt, const DLTensor *src, DLTensor *dst) {
  tr_device device;
  TR_RETURN_IF_ERROR(tr_registry_device_from_dl(rt->registry, src->device, &device));
  if (strcmp(device.type, "cpu") == 0) {
    size_t elem = tr_dtype_bytes(src->dtype);
    strided_copy((char *)dst->data + dst->byte_offset, dst->strides,
                 (const char *)src->data + src->byte_offset, src->strides, src->shape, src->ndim, elem);
    return NULL;
  }
  if (strcmp(device.type, "cuda") == 0) return tr_intree_copy(src, dst, src->strides == NULL && dst->strides != NULL);
  tr_alloc_fn alloc;
  tr_free_fn free_fn;
  tr_copy_fn copy = NULL;
  void *ctx;
  char dev[TR_DEVICE_FORMAT_MAX];
  tr_device_format(&device, dev, sizeof(dev));
  if (!tr_registry_allocator(rt->registry, device.type, &alloc, &free_fn, &copy, &ctx) || copy == NULL) {
    return TR_STATUS(TR_OP_NOT_AVAILABLE, "a strided tensor on %s needs a copy, and no backend "
                     "registered one for device type '%s'", dev, device.type);
  }
  return copy(ctx, src, dst);
}

tr_status *tr__contiguous(const tr_runtime *rt, const tr_op *op, size_t input, const DLTensor *src,
                          DLManagedTensor **copy, const DLTensor **out) {
  *copy = NULL;
  *out = src;
  if (tr_dl_tensor_is_contiguous(src)) return NULL;
  int64_t lo = 0, hi = 0;
  if (!tr_dl_tensor_span(src, &lo, &hi)) {
    return TR_STATUS(TR_VALUE, "%s: input '%s' has strides that reach past what 64 bits count (shape and strides "
                     "multiplied): no memory holds it", tr_op_def_name(op->def), tr_op_def_input_name(op->def, input));
  }
  tr_tensor_spec spec;
  TR_RETURN_IF_ERROR(tr_registry_spec_from_dl(rt->registry, src, &spec));
  TR_RETURN_IF_ERROR(tr__alloc_tensor(rt, &spec, &src->device, copy));
  tr_status *status = device_copy(rt, src, &(*copy)->dl_tensor);
  if (status != NULL) {
    (*copy)->deleter(*copy);
    *copy = NULL;
    return tr_status_append(status, " (input '%s' of %s)", tr_op_def_input_name(op->def, input),
                            tr_op_def_name(op->def));
  }
  *out = &(*copy)->dl_tensor;
  return NULL;
}

tr_status *tr__copy_back(const tr_runtime *rt, const DLTensor *src, const DLTensor *dst) {
  DLTensor target = *dst;
  return device_copy(rt, src, &target);
}
