/* driver.c: the CUDA driver API through the platform layer: libcuda is opened on first use, its
 * entry points looked up by name, and every CUresult turned into a status with the driver's
 * own name and text for it. */
#include "kernels/cuda/driver.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "platform/platform.h"

typedef int (*init_fn)(unsigned flags);
typedef int (*device_get_fn)(int *device, int ordinal);
typedef int (*ctx_retain_fn)(tr_cu_ctx *ctx, int device);
typedef int (*ctx_get_fn)(tr_cu_ctx *ctx);
typedef int (*ctx_set_fn)(tr_cu_ctx ctx);
typedef int (*module_load_fn)(tr_cu_module *module, const void *image);
typedef int (*module_function_fn)(tr_cu_function *function, tr_cu_module module, const char *name);
typedef int (*func_attr_fn)(tr_cu_function function, int attribute, int value);
typedef int (*launch_fn)(tr_cu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned smem, tr_cu_stream stream, void **params, void **extra);
/* cuLaunchKernelEx's config and one attribute (cuda.h's CUlaunchConfig and CUlaunchAttribute) */
typedef struct launch_attribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int value;
    unsigned dim[3]; /* a cluster's shape */
    void *align;     /* the union holds pointers in cuda.h */
  } value;
} launch_attribute;
typedef struct launch_config {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, smem;
  tr_cu_stream stream;
  launch_attribute *attrs;
  unsigned n_attrs;
} launch_config;
/* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
enum { kLaunchAttrClusterDimension = 4, kLaunchAttrProgrammaticStreamSerialization = 6 };
typedef int (*launch_ex_fn)(const launch_config *config, tr_cu_function f, void **params, void **extra);
typedef int (*alloc_async_fn)(tr_cu_ptr *ptr, size_t bytes, tr_cu_stream stream);
typedef int (*free_async_fn)(tr_cu_ptr ptr, tr_cu_stream stream);
typedef int (*error_text_fn)(int code, const char **text);
typedef int (*count_fn)(int *count);
typedef int (*htod_fn)(tr_cu_ptr dst, const void *src, size_t bytes);
typedef int (*dtoh_fn)(void *dst, tr_cu_ptr src, size_t bytes);
typedef int (*dtod_fn)(tr_cu_ptr dst, tr_cu_ptr src, size_t bytes, tr_cu_stream stream);
typedef int (*sync_fn)(tr_cu_stream stream);
typedef int (*attr_fn)(int *value, int attribute, int device);
typedef int (*unload_fn)(tr_cu_module module);
typedef int (*capturing_fn)(tr_cu_stream stream, int *status);
typedef int (*alloc_fn)(tr_cu_ptr *ptr, size_t bytes);
typedef int (*free_fn)(tr_cu_ptr ptr);
typedef int (*range_fn)(tr_cu_ptr *base, size_t *size, tr_cu_ptr ptr);
typedef int (*ipc_get_fn)(tr_cu_ipc_handle *handle, tr_cu_ptr ptr);
typedef int (*ipc_open_fn)(tr_cu_ptr *ptr, tr_cu_ipc_handle handle, unsigned flags);
typedef int (*ipc_close_fn)(tr_cu_ptr ptr);
typedef int (*event_create_fn)(tr_cu_event *event, unsigned flags);
typedef int (*event_record_fn)(tr_cu_event event, tr_cu_stream stream);
typedef int (*event_sync_fn)(tr_cu_event event);
typedef int (*event_elapsed_fn)(float *ms, tr_cu_event start, tr_cu_event end);
typedef int (*event_destroy_fn)(tr_cu_event event);
typedef int (*memset8_fn)(tr_cu_ptr dst, unsigned char value, size_t n, tr_cu_stream stream);
typedef int (*tensor_map_fn)(tr_cu_tensor_map *map, int data_type, uint32_t rank, void *base, const uint64_t *dims,
                             const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                             int interleave, int swizzle, int l2_promotion, int oob_fill);

enum { kFuncAttrMaxDynamicSmem = 8 };      /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
enum { kFuncAttrNonPortableCluster = 14 }; /* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */

static struct {
  tr_plat_lib *lib;
  char error[512];
  int init_rc;
  void *init_addr; /* cuInit in the loaded driver: which file it is, for messages */
  init_fn init;
  device_get_fn device_get;
  ctx_retain_fn ctx_retain;
  ctx_get_fn ctx_get;
  ctx_set_fn ctx_set;
  module_load_fn module_load;
  module_function_fn module_function;
  func_attr_fn func_attr;
  launch_fn launch;
  launch_ex_fn launch_ex; /* optional (CUDA 12.0 on) */
  alloc_async_fn alloc_async;
  free_async_fn free_async;
  error_text_fn error_name, error_string;
  count_fn device_count;
  htod_fn htod;
  dtoh_fn dtoh;
  dtod_fn dtod;
  sync_fn sync;
  attr_fn attr;
  unload_fn unload;
  capturing_fn capturing;
  alloc_fn alloc;
  free_fn free;
  range_fn range;
  ipc_get_fn ipc_get;
  ipc_open_fn ipc_open;
  ipc_close_fn ipc_close;
  event_create_fn event_create;
  event_record_fn event_record;
  event_sync_fn event_sync;
  event_elapsed_fn event_elapsed;
  event_destroy_fn event_destroy;
  memset8_fn memset8;
  tensor_map_fn tensor_map; /* optional (CUDA 12.0 on) */
  tr_plat_mutex lock; /* the contexts */
  _Atomic(tr_cu_ctx) published[TR_CUDA_MAX_DEVICES]; /* contexts[i] once retained, read without the lock */
  tr_cu_ctx contexts[TR_CUDA_MAX_DEVICES];
} g;

static tr_plat_once g_once = TR_PLAT_ONCE_INIT;

static void *sym(const char *name, int *missing) {
  void *p = tr_plat_lib_symbol(g.lib, name);
  if (p == NULL && !*missing) {
    *missing = 1;
    snprintf(g.error, sizeof(g.error), "libcuda has no '%s' (a driver older than CUDA 11.2?)", name);
  }
  return p;
}

#define BIND(field, name)                            \
  do {                                               \
    void *p_ = sym(name, &missing);                  \
    memcpy(&g.field, &p_, sizeof(g.field));          \
  } while (0)

static void load_once(void) {
  static const char *const kNames[] = {"libcuda.so.1", "libcuda.so"};
  for (size_t i = 0; i < sizeof(kNames) / sizeof(kNames[0]) && g.lib == NULL; i++) {
    tr_status *failed = tr_plat_lib_open(kNames[i], &g.lib);
    if (failed != NULL) { /* each name's reason, in the order tried */
      size_t used = strlen(g.error);
      snprintf(g.error + used, sizeof(g.error) - used, "%s%s", used ? "; " : "", tr_status_message(failed));
      tr_status_destroy(&failed);
    }
  }
  if (g.lib == NULL) return;
  g.error[0] = '\0';
  int missing = 0;
  BIND(init, "cuInit");
  g.init_addr = tr_plat_lib_symbol(g.lib, "cuInit");
  BIND(device_get, "cuDeviceGet");
  BIND(ctx_retain, "cuDevicePrimaryCtxRetain");
  BIND(ctx_get, "cuCtxGetCurrent");
  BIND(ctx_set, "cuCtxSetCurrent");
  BIND(module_load, "cuModuleLoadData");
  BIND(module_function, "cuModuleGetFunction");
  BIND(func_attr, "cuFuncSetAttribute");
  BIND(launch, "cuLaunchKernel");
  void *launch_ex = tr_plat_lib_symbol(g.lib, "cuLaunchKernelEx"); /* optional: NULL launches plainly */
  memcpy(&g.launch_ex, &launch_ex, sizeof(g.launch_ex));
  BIND(alloc_async, "cuMemAllocAsync");
  BIND(free_async, "cuMemFreeAsync");
  BIND(error_name, "cuGetErrorName");
  BIND(error_string, "cuGetErrorString");
  BIND(device_count, "cuDeviceGetCount");
  BIND(htod, "cuMemcpyHtoD_v2");
  BIND(dtoh, "cuMemcpyDtoH_v2");
  BIND(dtod, "cuMemcpyDtoDAsync_v2");
  BIND(sync, "cuStreamSynchronize");
  BIND(attr, "cuDeviceGetAttribute");
  BIND(unload, "cuModuleUnload");
  BIND(capturing, "cuStreamIsCapturing");
  BIND(alloc, "cuMemAlloc_v2");
  BIND(free, "cuMemFree_v2");
  BIND(range, "cuMemGetAddressRange_v2");
  BIND(ipc_get, "cuIpcGetMemHandle");
  BIND(ipc_open, "cuIpcOpenMemHandle_v2");
  BIND(ipc_close, "cuIpcCloseMemHandle");
  BIND(event_create, "cuEventCreate");
  BIND(event_record, "cuEventRecord");
  BIND(event_sync, "cuEventSynchronize");
  BIND(event_destroy, "cuEventDestroy_v2");
  BIND(memset8, "cuMemsetD8Async");
  void *tensor_map = tr_plat_lib_symbol(g.lib, "cuTensorMapEncodeTiled"); /* optional: NULL refuses maps */
  memcpy(&g.tensor_map, &tensor_map, sizeof(g.tensor_map));
  /* CUDA 12.8 on name it _v2 (the same signature); older drivers have the plain name only */
  void *elapsed = tr_plat_lib_symbol(g.lib, "cuEventElapsedTime_v2");
  if (elapsed != NULL) memcpy(&g.event_elapsed, &elapsed, sizeof(g.event_elapsed));
  else BIND(event_elapsed, "cuEventElapsedTime");
  if (missing) { /* reported by tr_cu_load, never called through */
    g.init = NULL;
    return;
  }
  tr_status *failed = tr_plat_mutex_init(&g.lock);
  if (failed != NULL) {
    snprintf(g.error, sizeof(g.error), "%s", tr_status_message(failed));
    tr_status_destroy(&failed);
    g.init = NULL;
    return;
  }
  g.init_rc = g.init(0);
}

const char *tr_cu_error_text(int code, char *buf, size_t size) {
  const char *name = NULL, *text = NULL;
  if (g.error_name != NULL) g.error_name(code, &name);
  if (g.error_string != NULL) g.error_string(code, &text);
  snprintf(buf, size, "%s (%d): %s", name ? name : "CUDA error", code, text ? text : "no description");
  return buf;
}

/* A status for a failed driver call. */
static tr_status *cu_error(int rc, const char *fmt_what, const char *what) {
  char text[256], doing[256];
  snprintf(doing, sizeof(doing), fmt_what, what ? what : "");
  return TR_STATUS(TR_BACKEND, "%s: %s", doing, tr_cu_error_text(rc, text, sizeof(text)));
}

/* What a cuInit failure means on this machine, for the message: the driver file it came from,
 * and what to do. */
static tr_status *init_error(int rc) {
  char text[256], path[1024];
  tr_status *where = tr_plat_code_path(g.init_addr, path, sizeof(path));
  if (where != NULL) snprintf(path, sizeof(path), "libcuda.so.1 (its file unknown)");
  tr_status_destroy(&where);
  const char *hint;
  switch (rc) {
    case 34: /* CUDA_ERROR_STUB_LIBRARY */
      hint = "it is the CUDA Toolkit's stub, which only links programs: the real libcuda.so.1 comes "
             "with the NVIDIA driver; take the stubs folder off LD_LIBRARY_PATH";
      break;
    case 35:  /* CUDA_ERROR_INSUFFICIENT_DRIVER */
    case 803: /* CUDA_ERROR_SYSTEM_DRIVER_MISMATCH */
    case 804: /* CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE */
      hint = "no NVIDIA kernel driver matching it is running here (a machine without a GPU, or a "
             "driver older than this libcuda)";
      break;
    case 100: /* CUDA_ERROR_NO_DEVICE */
      hint = tr_plat_getenv("CUDA_VISIBLE_DEVICES") != NULL ? "no CUDA device is visible (CUDA_VISIBLE_DEVICES is set)"
                                                            : "no CUDA device is visible";
      break;
    default:
      hint = "the driver did not start";
  }
  return TR_STATUS(TR_BACKEND,
                   "initialising the CUDA driver (cuInit) failed: %s; the driver loaded is %s: %s. Without a GPU, "
                   "pass cpu tensors: the cpu backend serves every op",
                   tr_cu_error_text(rc, text, sizeof(text)), path, hint);
}

tr_status *tr_cu_load(void) {
  tr_plat_once_run(&g_once, load_once);
  if (g.lib == NULL || g.init == NULL) {
    return TR_STATUS(TR_BACKEND,
                     "the CUDA driver (libcuda.so.1) could not be loaded: %s. It comes with the NVIDIA driver; the "
                     "loader looked on LD_LIBRARY_PATH and in its cache (ldconfig). Without a GPU, pass cpu tensors: "
                     "the cpu backend serves every op",
                     g.error[0] ? g.error : "unknown reason");
  }
  if (g.init_rc != 0) return init_error(g.init_rc);
  return NULL;
}

/* tr_cu_device_context's first use of a device (and its errors): apart, so that the call that
 * finds the context retained (every call after the first) is a bounds check and a load. */
__attribute__((noinline)) static tr_status *retain_device_context(int32_t index, tr_cu_ctx *out) {
  *out = NULL;
  if (index < 0 || index >= TR_CUDA_MAX_DEVICES) {
    return TR_STATUS(TR_VALUE, "cuda device index %d is outside 0..%d", index, TR_CUDA_MAX_DEVICES - 1);
  }
  TR_RETURN_IF_ERROR(tr_cu_load());
  tr_plat_mutex_lock(&g.lock);
  tr_status *status = NULL;
  if (g.contexts[index] == NULL) {
    int device = 0;
    char what[32];
    snprintf(what, sizeof(what), "cuda:%d", index);
    int rc = g.device_get(&device, index);
    if (rc != 0) status = cu_error(rc, "finding device %s", what);
    if (status == NULL && (rc = g.ctx_retain(&g.contexts[index], device)) != 0) {
      status = cu_error(rc, "retaining the primary context of %s", what);
    }
  }
  *out = g.contexts[index];
  if (*out != NULL) atomic_store_explicit(&g.published[index], *out, memory_order_release);
  tr_plat_mutex_unlock(&g.lock);
  return status;
}

tr_status *tr_cu_device_context(int32_t index, tr_cu_ctx *out) {
  if (index >= 0 && index < TR_CUDA_MAX_DEVICES &&
      (*out = atomic_load_explicit(&g.published[index], memory_order_acquire)) != NULL) {
    return NULL;
  }
  return retain_device_context(index, out);
}

tr_cu_ctx tr_cu_retained_context(int32_t index) {
  if (index < 0 || index >= TR_CUDA_MAX_DEVICES) return NULL;
  return atomic_load_explicit(&g.published[index], memory_order_acquire);
}

tr_status *tr_cu_enter_context(tr_cu_ctx ctx, tr_cu_ctx *previous) {
  *previous = ctx;
  tr_cu_ctx current = NULL;
  int rc = g.ctx_get(&current);
  if (rc != 0) return cu_error(rc, "reading the current CUDA context%s", "");
  *previous = current;
  if (current == ctx) return NULL;
  rc = g.ctx_set(ctx);
  if (rc != 0) return cu_error(rc, "making a CUDA context current%s", "");
  return NULL;
}

tr_status *tr_cu_enter_device(int32_t index, tr_cu_ctx *ctx, tr_cu_ctx *previous) {
  *previous = NULL;
  TR_RETURN_IF_ERROR(tr_cu_device_context(index, ctx));
  return tr_cu_enter_context(*ctx, previous);
}

void tr_cu_restore_context(tr_cu_ctx ctx, tr_cu_ctx previous) {
  if (previous != ctx) g.ctx_set(previous);
}

tr_status *tr_cu_module_load(const void *image, const char *name, const char *entry, tr_cu_module *module,
                             tr_cu_function *function) {
  *module = NULL;
  *function = NULL;
  int rc = g.module_load(module, image);
  if (rc != 0) return cu_error(rc, "loading the cubin of kernel '%s'", name);
  rc = g.module_function(function, *module, entry);
  if (rc != 0) {
    char text[256];
    g.unload(*module);
    *module = NULL;
    return TR_STATUS(TR_BACKEND, "kernel '%s' has no entry '%s': %s", name, entry,
                     tr_cu_error_text(rc, text, sizeof(text)));
  }
  return NULL;
}

int tr_cu_module_entry(tr_cu_module module, const char *entry, tr_cu_function *out) {
  *out = NULL;
  if (g.module_function(out, module, entry) != 0) *out = NULL;
  return *out != NULL;
}

tr_status *tr_cu_function_set_smem(tr_cu_function function, int bytes) {
  int rc = g.func_attr(function, kFuncAttrMaxDynamicSmem, bytes);
  if (rc != 0) return cu_error(rc, "raising a kernel's dynamic shared memory%s", "");
  return NULL;
}

int tr_cu_function_allow_wide_clusters(tr_cu_function function) {
  return g.func_attr(function, kFuncAttrNonPortableCluster, 1) == 0;
}

static tr_status *launch_error(int rc, const char *what, uint32_t grid_x, uint32_t grid_y, uint32_t cluster_x,
                               uint32_t block_x, uint32_t smem) {
  char text[256], shape[64];
  if (cluster_x > 0) snprintf(shape, sizeof(shape), "grid %u in clusters of %u", grid_x, cluster_x);
  else snprintf(shape, sizeof(shape), "grid %u x %u", grid_x, grid_y);
  return TR_STATUS(TR_BACKEND, "launching kernel '%s' (%s, block %u, %u B shared): %s", what, shape, block_x, smem,
                   tr_cu_error_text(rc, text, sizeof(text)));
}

tr_status *tr_cu_launch(tr_cu_function function, const char *what, uint32_t grid_x, uint32_t grid_y,
                        uint32_t block_x, uint32_t smem, tr_cu_stream stream, void **args) {
  int rc = g.launch(function, grid_x, grid_y, 1, block_x, 1, 1, smem, stream, args, NULL);
  return rc == 0 ? NULL : launch_error(rc, what, grid_x, grid_y, 0, block_x, smem);
}

/* Set when an overlapped launch was refused and the same launch without the overlap was not. */
static atomic_int g_overlap_refused;

/* `config` launched without the overlap: by cuLaunchKernel where it has no attribute (the launch
 * every driver takes), else by cuLaunchKernelEx. */
static int launch_config_plain(const launch_config *config, tr_cu_function function, void **args) {
  if (config->n_attrs == 0) {
    return g.launch(function, config->grid_x, config->grid_y, config->grid_z, config->block_x, config->block_y,
                    config->block_z, config->smem, config->stream, args, NULL);
  }
  return g.launch_ex(config, function, args, NULL);
}

/* `config` launched with programmatic dependent launch added when `overlap` asks for it and no
 * launch has had it refused (config->attrs has room for one more attribute). A driver or setting
 * that refuses the attribute gets the launch without it, now and, when that one succeeds, from
 * now on; when it fails too, its error code is the result. */
static int launch_config_overlapped(launch_config *config, tr_cu_function function, void **args, int overlap) {
  const unsigned n = config->n_attrs;
  if (!overlap || atomic_load(&g_overlap_refused)) return launch_config_plain(config, function, args);
  memset(&config->attrs[n], 0, sizeof(config->attrs[n]));
  config->attrs[n].id = kLaunchAttrProgrammaticStreamSerialization;
  config->attrs[n].value.value = 1;
  config->n_attrs = n + 1;
  int rc = g.launch_ex(config, function, args, NULL);
  config->n_attrs = n;
  if (rc == 0) return 0;
  rc = launch_config_plain(config, function, args);
  if (rc == 0) atomic_store(&g_overlap_refused, 1);
  return rc;
}

tr_status *tr_cu_launch_ex(tr_cu_function function, const char *what, uint32_t grid_x, uint32_t grid_y,
                           uint32_t block_x, uint32_t smem, tr_cu_stream stream, void **args, int overlap) {
  launch_attribute attr; /* room for the overlap's attribute; no other */
  launch_config config = {grid_x, grid_y, 1, block_x, 1, 1, smem, stream, &attr, 0};
  int rc = launch_config_overlapped(&config, function, args, overlap && g.launch_ex != NULL);
  return rc == 0 ? NULL : launch_error(rc, what, grid_x, grid_y, 0, block_x, smem);
}

tr_status *tr_cu_launch_cluster(tr_cu_function function, const char *what, uint32_t grid_x, uint32_t cluster_x,
                                uint32_t block_x, uint32_t smem, tr_cu_stream stream, void **args, int overlap) {
  if (g.launch_ex == NULL) {
    return TR_STATUS(TR_BACKEND, "launching kernel '%s' in clusters of %u: the driver has no cuLaunchKernelEx", what,
                     cluster_x);
  }
  launch_attribute attrs[2];
  memset(attrs, 0, sizeof(attrs));
  attrs[0].id = kLaunchAttrClusterDimension;
  attrs[0].value.dim[0] = cluster_x;
  attrs[0].value.dim[1] = 1;
  attrs[0].value.dim[2] = 1;
  launch_config config = {grid_x, 1, 1, block_x, 1, 1, smem, stream, attrs, 1};
  int rc = launch_config_overlapped(&config, function, args, overlap);
  return rc == 0 ? NULL : launch_error(rc, what, grid_x, 1, cluster_x, block_x, smem);
}

tr_status *tr_cu_alloc_async(size_t bytes, tr_cu_stream stream, tr_cu_ptr *out) {
  *out = 0;
  int rc = g.alloc_async(out, bytes, stream);
  if (rc == 0) return NULL;
  char text[256];
  return TR_STATUS(TR_OUT_OF_MEMORY, "allocating %zu bytes on a cuda device (stream-ordered): %s", bytes,
                   tr_cu_error_text(rc, text, sizeof(text)));
}

int tr_cu_free_async(tr_cu_ptr ptr, tr_cu_stream stream) {
  if (ptr == 0) return 1;
  return g.free_async != NULL && g.free_async(ptr, stream) == 0;
}

/* The streams this thread set, per device (NULL: the per-thread default). */
static _Thread_local tr_cu_stream t_streams[TR_CUDA_MAX_DEVICES];

tr_cu_stream tr_cu_current_stream(int32_t index) {
  if (index < 0 || index >= TR_CUDA_MAX_DEVICES) index = 0;
  tr_cu_stream s = t_streams[index];
  return s != NULL ? s : TR_CU_PER_THREAD_STREAM;
}

tr_status *tr_cu_set_stream(int32_t index, tr_cu_stream stream) {
  if (index < 0 || index >= TR_CUDA_MAX_DEVICES) {
    return TR_STATUS(TR_VALUE, "setting the stream of cuda device %d: the index must be in 0..%d", index,
                     TR_CUDA_MAX_DEVICES - 1);
  }
  t_streams[index] = stream;
  return NULL;
}

tr_status *tr_cu_copy_to_device(tr_cu_ptr dst, const void *src, size_t bytes) {
  int rc = g.htod(dst, src, bytes);
  return rc == 0 ? NULL : cu_error(rc, "copying to a cuda device%s", "");
}

tr_status *tr_cu_copy_to_host(void *dst, tr_cu_ptr src, size_t bytes) {
  int rc = g.dtoh(dst, src, bytes);
  return rc == 0 ? NULL : cu_error(rc, "copying from a cuda device%s", "");
}

tr_status *tr_cu_copy_device(tr_cu_ptr dst, tr_cu_ptr src, size_t bytes, tr_cu_stream stream) {
  int rc = g.dtod(dst, src, bytes, stream);
  return rc == 0 ? NULL : cu_error(rc, "copying within a cuda device%s", "");
}

tr_status *tr_cu_stream_sync(tr_cu_stream stream) {
  int rc = g.sync(stream);
  return rc == 0 ? NULL : cu_error(rc, "waiting for a cuda stream%s", "");
}

int tr_cu_device_count(void) {
  tr_status *status = tr_cu_load();
  if (status != NULL) {
    tr_status_destroy(&status);
    return 0;
  }
  int n = 0;
  return g.device_count(&n) == 0 ? n : 0;
}

/* CUdevice_attribute values (cuda.h, CUDA 12 and 13). */
enum { kAttrSms = 16, kAttrMajor = 75, kAttrMinor = 76, kAttrSmemOptin = 97 };

tr_status *tr_cu_device_facts(int32_t index, int32_t *arch, int32_t *sm_count, int64_t *smem) {
  TR_RETURN_IF_ERROR(tr_cu_load());
  char what[32];
  snprintf(what, sizeof(what), "cuda:%d", index);
  int device = 0, major = 0, minor = 0, sms = 0, shared = 0;
  int rc = g.device_get(&device, index);
  if (rc == 0) rc = g.attr(&major, kAttrMajor, device);
  if (rc == 0) rc = g.attr(&minor, kAttrMinor, device);
  if (rc == 0) rc = g.attr(&sms, kAttrSms, device);
  if (rc == 0) rc = g.attr(&shared, kAttrSmemOptin, device);
  if (rc != 0) return cu_error(rc, "reading the facts of %s", what);
  *arch = major * 10 + minor;
  *sm_count = sms;
  *smem = shared;
  return NULL;
}

int tr_cu_stream_capturing(tr_cu_stream stream) {
  int state = 0; /* CU_STREAM_CAPTURE_STATUS_NONE */
  if (g.capturing == NULL || g.capturing(stream, &state) != 0) return 0;
  return state != 0;
}

tr_status *tr_cu_alloc(size_t bytes, tr_cu_ptr *out) {
  *out = 0;
  int rc = g.alloc(out, bytes);
  if (rc == 0) return NULL;
  char text[256];
  return TR_STATUS(TR_OUT_OF_MEMORY, "allocating %zu bytes on a cuda device: %s", bytes,
                   tr_cu_error_text(rc, text, sizeof(text)));
}

void tr_cu_free(tr_cu_ptr ptr) {
  if (ptr != 0 && g.free != NULL) g.free(ptr);
}

tr_status *tr_cu_ipc_handle_of(tr_cu_ptr ptr, tr_cu_ipc_handle *out, uint64_t *offset, uint64_t *size) {
  memset(out, 0, sizeof(*out));
  *offset = *size = 0;
  tr_cu_ptr base = 0;
  size_t bytes = 0;
  char text[256];
  int rc = g.range(&base, &bytes, ptr);
  if (rc != 0) {
    return TR_STATUS(TR_BACKEND, "cuda memory at 0x%llx is not a device allocation this process can name: %s",
                     (unsigned long long)ptr, tr_cu_error_text(rc, text, sizeof(text)));
  }
  rc = g.ipc_get(out, base);
  if (rc != 0) {
    return TR_STATUS(TR_BACKEND, "cuda memory at 0x%llx cannot be shared with another process (CUDA IPC needs "
                     "memory from cuMemAlloc/cudaMalloc, not a stream-ordered pool): %s",
                     (unsigned long long)ptr, tr_cu_error_text(rc, text, sizeof(text)));
  }
  *offset = ptr - base;
  *size = bytes;
  return NULL;
}

tr_status *tr_cu_ipc_open(const tr_cu_ipc_handle *handle, tr_cu_ptr *out) {
  *out = 0;
  int rc = g.ipc_open(out, *handle, 1u /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */);
  return rc == 0 ? NULL : cu_error(rc, "opening another process's cuda memory (CUDA IPC)%s", "");
}

void tr_cu_ipc_close(tr_cu_ptr ptr) {
  if (ptr != 0 && g.ipc_close != NULL) g.ipc_close(ptr);
}

tr_status *tr_cu_address_range(tr_cu_ptr ptr, tr_cu_ptr *base, uint64_t *size) {
  size_t bytes = 0;
  *base = 0;
  int rc = g.range(base, &bytes, ptr);
  *size = bytes;
  return rc == 0 ? NULL : cu_error(rc, "finding the cuda allocation of an address%s", "");
}

/* CU_EVENT_DEFAULT: events that time. */
tr_status *tr_cu_event_new(tr_cu_event *out) {
  *out = NULL;
  int rc = g.event_create(out, 0);
  return rc == 0 ? NULL : cu_error(rc, "creating a cuda event%s", "");
}

tr_status *tr_cu_event_record(tr_cu_event event, tr_cu_stream stream) {
  int rc = g.event_record(event, stream);
  return rc == 0 ? NULL : cu_error(rc, "recording a cuda event%s", "");
}

tr_status *tr_cu_event_elapsed(tr_cu_event start, tr_cu_event end, float *ms) {
  *ms = 0.f;
  int rc = g.event_sync(end);
  if (rc == 0) rc = g.event_elapsed(ms, start, end);
  return rc == 0 ? NULL : cu_error(rc, "timing between two cuda events%s", "");
}

void tr_cu_event_destroy(tr_cu_event event) {
  if (event != NULL && g.event_destroy != NULL) g.event_destroy(event);
}

tr_status *tr_cu_memset_async(tr_cu_ptr dst, unsigned char value, size_t bytes, tr_cu_stream stream) {
  int rc = g.memset8(dst, value, bytes, stream);
  return rc == 0 ? NULL : cu_error(rc, "setting cuda memory%s", "");
}

int tr_cu_has_tensor_maps(void) { return g.tensor_map != NULL; }

tr_status *tr_cu_tensor_map_u16(tr_cu_tensor_map *out, const void *base, uint32_t rank, const uint64_t *dims,
                                const uint64_t *strides, const uint32_t *box, int swizzle_128b) {
  memset(out, 0, sizeof(*out));
  if (g.tensor_map == NULL) {
    return TR_STATUS(TR_BACKEND, "the CUDA driver has no cuTensorMapEncodeTiled (a driver older than CUDA 12.0)");
  }
  uint32_t ones[5] = {1, 1, 1, 1, 1};
  if (rank < 1 || rank > 5) return TR_STATUS(TR_VALUE, "a tensor map of rank %u (1 to 5)", rank);
  /* CU_TENSOR_MAP_DATA_TYPE_UINT16, INTERLEAVE_NONE, SWIZZLE_128B or NONE, L2_PROMOTION_L2_256B,
   * FLOAT_OOB_FILL_NONE (zeros) */
  int rc = g.tensor_map(out, 1, rank, (void *)base, dims, strides, box, ones, 0, swizzle_128b ? 3 : 0, 3, 0);
  if (rc != 0) return cu_error(rc, "encoding a tensor map%s", "");
  return NULL;
}
