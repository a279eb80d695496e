/* _ext.c: the binding's call path in C (tilerun._ext): an op's call and call_into read their
 * tensors through the DLPack C exchange API (torch), the buffer protocol (NumPy on cpu) or, for
 * any other producer, the package's own __dlpack__ route, and run tr_op_call / tr_op_call_into.
 * For benchmarks, _bench_call and _bench_call_into run the same calls in a loop timed in C.
 *
 * Built against CPython's limited API (3.11), so one build loads in every later CPython. It
 * links nothing: the package hands it the addresses of the libtilerun functions it calls (from
 * the library ctypes loaded, so both sides use one library; tr_now_ns, tilerun's
 * clock, for the benchmarks) and its Python helpers (errors, outputs for non-torch callers, the
 * __dlpack__ route) through setup(). The exchange API's structs are declared here from DLPack's
 * published ABI (1.x; Debian's dlpack.h is 0.6). */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h> /* PyMemberDef's T_PYSSIZET and READONLY */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dlpack/dlpack.h>

/* ---- DLPack 1.x: the versioned managed tensor and the exchange API table --------------------- */

typedef struct {
  uint32_t major;
  uint32_t minor;
} ext_dl_version;

typedef struct ext_managed_versioned {
  ext_dl_version version;
  void *manager_ctx;
  void (*deleter)(struct ext_managed_versioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} ext_managed_versioned;

typedef struct ext_api_header {
  ext_dl_version version;
  struct ext_api_header *prev_api;
} ext_api_header;

typedef struct {
  ext_api_header header;
  int (*managed_tensor_allocator)(DLTensor *prototype, ext_managed_versioned **out,
                                  void *error_ctx,
                                  void (*set_error)(void *, const char *, const char *));
  int (*managed_tensor_from_py_object_no_sync)(void *py_object, ext_managed_versioned **out);
  int (*managed_tensor_to_py_object_no_sync)(ext_managed_versioned *tensor, void **out);
  int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} ext_exchange_api;

/* ---- what setup() hands over ----------------------------------------------------------------- */

typedef void *(*call_fn)(void *op, const DLTensor *const *inputs, size_t n_inputs,
                         DLManagedTensor **outputs, size_t n_outputs);
typedef void *(*call_into_fn)(void *op, const DLTensor *const *inputs, size_t n_inputs,
                              DLTensor *const *outputs, size_t n_outputs);
typedef void *(*set_stream_fn)(int32_t device_index, void *stream);
typedef void (*op_destroy_fn)(void **op);
typedef void (*runtime_destroy_fn)(void **runtime);
typedef uint64_t (*now_ns_fn)(void);

static call_fn g_call;
static call_into_fn g_call_into;
static set_stream_fn g_set_stream;
static op_destroy_fn g_op_destroy;
static runtime_destroy_fn g_runtime_destroy;
static now_ns_fn g_now_ns;       /* tr_now_ns, for _bench_call*; NULL in an older library */
static PyObject *g_error_from;   /* (status address) -> the exception, freeing the status */
static PyObject *g_borrow;       /* (tensor, keep list) -> DLTensor address (__dlpack__ route) */
static PyObject *g_sync_streams; /* (tuple of inputs) -> None: torch's stream for that route */
static PyObject *g_wrap_output;  /* (managed address, first input, runtime) -> output */
static PyObject *g_immortal;     /* set: runtimes whose cuda outputs went to another owner */
static int g_force_python_route; /* tests: every tensor through the __dlpack__ route */

#define EXT_MAX_TENSORS 16

/* Py_XSETREF is not in the limited API: replace a strong reference, dropping the old one. */
#define EXT_SETREF(dst, src)  \
  do {                        \
    PyObject *old_ = (dst);   \
    (dst) = (src);            \
    Py_XDECREF(old_);         \
  } while (0)
#define EXT_MAX_DIMS 8

/* Vectorcall (PEP 590) as CPython 3.8 on defines it; the limited API of 3.11 leaves it out (3.12
 * adds it, with the same values). CPython 3.11 calls tilerun.Op, a mutable subclass of OpBase,
 * through tp_call all the same; 3.12 on lets it inherit vectorcall. */
typedef PyObject *(*ext_vectorcallfunc)(PyObject *callable, PyObject *const *args, size_t nargsf,
                                        PyObject *kwnames);
#define EXT_TPFLAGS_HAVE_VECTORCALL (1UL << 11)
#define EXT_VECTORCALL_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))

/* ---- how a tensor's type is read: a small cache per type -------------------------------------- */

enum { ROUTE_PYTHON = 0, ROUTE_EXCHANGE = 1, ROUTE_BUFFER = 2 };

typedef struct {
  PyTypeObject *type; /* a strong reference */
  int route;
  const ext_exchange_api *api;
} route_entry;

#define EXT_ROUTE_CACHE 16
static route_entry g_routes[EXT_ROUTE_CACHE];
static int g_n_routes;

/* The exchange table of `type`, or NULL (no error set) when it has none this binding can use. */
static const ext_exchange_api *exchange_api_of(PyTypeObject *type) {
  PyObject *attr = PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
  if (attr == NULL) {
    PyErr_Clear();
    return NULL;
  }
  const ext_api_header *h = NULL;
  if (PyCapsule_CheckExact(attr)) {
    h = PyCapsule_GetPointer(attr, "dlpack_exchange_api");
  } else if (PyLong_Check(attr)) {
    h = PyLong_AsVoidPtr(attr);
  }
  Py_DECREF(attr);
  if (h == NULL) {
    PyErr_Clear();
    return NULL;
  }
  while (h != NULL && h->version.major != 1) h = h->prev_api;
  const ext_exchange_api *api = (const ext_exchange_api *)h;
  if (api == NULL || api->current_work_stream == NULL ||
      api->managed_tensor_to_py_object_no_sync == NULL ||
      (api->dltensor_from_py_object_no_sync == NULL &&
       api->managed_tensor_from_py_object_no_sync == NULL)) {
    return NULL;
  }
  return api;
}

/* 1 when `type` is numpy.ndarray (numpy imported by the caller; never imported here). */
static int is_ndarray_type(PyTypeObject *type) {
  PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
  PyObject *np = modules ? PyDict_GetItemString(modules, "numpy") : NULL;
  if (np == NULL) return 0;
  PyObject *nd = PyObject_GetAttrString(np, "ndarray");
  if (nd == NULL) {
    PyErr_Clear();
    return 0;
  }
  int same = nd == (PyObject *)type;
  Py_DECREF(nd);
  return same;
}

static const route_entry *route_of(PyObject *obj) {
  PyTypeObject *type = Py_TYPE(obj);
  for (int i = 0; i < g_n_routes; i++) {
    if (g_routes[i].type == type) return &g_routes[i];
  }
  static route_entry uncached;
  route_entry e = {type, ROUTE_PYTHON, NULL};
  e.api = exchange_api_of(type);
  if (e.api != NULL) {
    e.route = ROUTE_EXCHANGE;
  } else if (is_ndarray_type(type)) {
    e.route = ROUTE_BUFFER;
  }
  if (g_n_routes == EXT_ROUTE_CACHE) {
    uncached = e;
    return &uncached;
  }
  Py_INCREF((PyObject *)type);
  g_routes[g_n_routes] = e;
  return &g_routes[g_n_routes++];
}

/* ---- one call's borrowed tensors -------------------------------------------------------------- */

typedef struct {
  PyObject *const *inputs;           /* the call's inputs, for the torch stream sync */
  Py_ssize_t n_inputs;
  PyObject *inputs_tuple;            /* the same as a tuple (borrowed), or NULL: made if needed */
  DLTensor dl[EXT_MAX_TENSORS];      /* filled by the exchange API or from a buffer */
  int n_dl;
  int64_t dims[EXT_MAX_TENSORS][2 * EXT_MAX_DIMS];
  Py_buffer bufs[EXT_MAX_TENSORS];
  int n_bufs;
  ext_managed_versioned *owned[EXT_MAX_TENSORS];
  int n_owned;
  PyObject *keep;                    /* a list, for the __dlpack__ route */
  int synced;                        /* the __dlpack__ route's stream sync ran */
  uint64_t streams_set;              /* cuda devices whose stream was set this call */
  int any_cuda;
} borrowed;

static void borrowed_release(borrowed *b) {
  for (int i = 0; i < b->n_bufs; i++) PyBuffer_Release(&b->bufs[i]);
  b->n_bufs = 0;
  for (int i = 0; i < b->n_owned; i++) {
    if (b->owned[i]->deleter) b->owned[i]->deleter(b->owned[i]);
  }
  b->n_owned = 0;
  Py_CLEAR(b->keep);
}

/* `inputs`: the call's `n_inputs` inputs, living through the call; `inputs_tuple` the tuple they
 * are the items of, or NULL. */
static void borrowed_init(borrowed *b, PyObject *const *inputs, Py_ssize_t n_inputs,
                          PyObject *inputs_tuple) {
  b->inputs = inputs;
  b->n_inputs = n_inputs;
  b->inputs_tuple = inputs_tuple;
  b->n_dl = b->n_bufs = b->n_owned = b->synced = b->any_cuda = 0;
  b->keep = NULL;
  b->streams_set = 0;
}

static int raise_status(void *status) {
  PyObject *addr = PyLong_FromVoidPtr(status);
  if (addr == NULL) return -1;
  PyObject *exc = PyObject_CallFunctionObjArgs(g_error_from, addr, NULL);
  Py_DECREF(addr);
  if (exc == NULL) return -1;
  PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
  Py_DECREF(exc);
  return -1;
}

/* NumPy's buffer format as a DLPack dtype; 0 when it has none here. */
static int dtype_of_format(const char *f, Py_ssize_t itemsize, DLDataType *out) {
  if (f == NULL) f = "B";
  if (*f == '@' || *f == '=' || *f == '<') f++;
  if (f[0] == '\0' || f[1] != '\0') return 0;
  uint8_t bits = (uint8_t)(itemsize * 8);
  switch (f[0]) {
    case '?': *out = (DLDataType){6 /* kDLBool */, 8, 1}; return itemsize == 1;
    case 'b': case 'h': case 'i': case 'l': case 'q':
      *out = (DLDataType){kDLInt, bits, 1}; return 1;
    case 'B': case 'H': case 'I': case 'L': case 'Q':
      *out = (DLDataType){kDLUInt, bits, 1}; return 1;
    case 'e': case 'f': case 'd':
      *out = (DLDataType){kDLFloat, bits, 1}; return 1;
    default: return 0;
  }
}

/* A NumPy array as a DLTensor from its buffer; 0 when this route cannot (then nothing is held
 * and no error is set: the __dlpack__ route decides). */
static int borrow_buffer(borrowed *b, PyObject *obj, int writable, const DLTensor **out) {
  Py_buffer *view = &b->bufs[b->n_bufs];
  if (PyObject_GetBuffer(obj, view, writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    return 0;
  }
  DLTensor *t = &b->dl[b->n_dl];
  int64_t *dims = b->dims[b->n_dl];
  int ok = view->ndim <= EXT_MAX_DIMS && view->itemsize > 0 &&
           dtype_of_format(view->format, view->itemsize, &t->dtype);
  for (int d = 0; ok && d < view->ndim; d++) {
    dims[d] = view->shape[d];
    Py_ssize_t s = view->strides ? view->strides[d] : 0;
    ok = s % view->itemsize == 0;
    dims[EXT_MAX_DIMS + d] = s / view->itemsize;
  }
  if (!ok) {
    PyBuffer_Release(view);
    return 0;
  }
  if (view->strides == NULL) { /* C-contiguous */
    int64_t step = 1;
    for (int d = view->ndim - 1; d >= 0; d--) {
      dims[EXT_MAX_DIMS + d] = step;
      step *= dims[d];
    }
  }
  t->data = view->buf;
  t->device = (DLDevice){kDLCPU, 0};
  t->ndim = view->ndim;
  t->shape = dims;
  t->strides = dims + EXT_MAX_DIMS;
  t->byte_offset = 0;
  b->n_bufs++;
  b->n_dl++;
  *out = t;
  return 1;
}

/* A tensor through the exchange API; the producer's current stream on its cuda device becomes
 * tilerun's (torch.cuda.current_stream: ordered with torch's work, and inside its captures). */
static int borrow_exchange(borrowed *b, PyObject *obj, const ext_exchange_api *api,
                           const DLTensor **out) {
  const DLTensor *t;
  if (api->dltensor_from_py_object_no_sync != NULL) {
    DLTensor *slot = &b->dl[b->n_dl];
    if (api->dltensor_from_py_object_no_sync(obj, slot) != 0) return -1;
    b->n_dl++;
    t = slot;
  } else {
    ext_managed_versioned *m = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return -1;
    b->owned[b->n_owned++] = m;
    t = &m->dl_tensor;
  }
  int dev_type = t->device.device_type;
  if (dev_type == kDLCUDA || dev_type == kDLCUDAManaged) {
    b->any_cuda = 1;
    int32_t dev = t->device.device_id;
    uint64_t bit = (dev >= 0 && dev < 64) ? (uint64_t)1 << dev : 0;
    if (bit == 0 || (b->streams_set & bit) == 0) {
      void *stream = NULL;
      if (api->current_work_stream(kDLCUDA, dev, &stream) != 0) return -1;
      if (stream == NULL) stream = (void *)1; /* the legacy default stream (CU_STREAM_LEGACY) */
      void *status = g_set_stream(dev, stream);
      if (status != NULL) return raise_status(status);
      b->streams_set |= bit;
    }
  }
  *out = t;
  return 0;
}

/* The package's route (tilerun.Tensor, any __dlpack__ producer, NumPy dtypes without a buffer
 * format); it raises the binding's errors for what is not a tensor. */
static int borrow_python(borrowed *b, PyObject *obj, const DLTensor **out) {
  if (!b->synced) {
    PyObject *inputs = b->inputs_tuple;
    if (inputs != NULL) {
      Py_INCREF(inputs);
    } else { /* the inputs came as an array: the helper takes a tuple */
      if ((inputs = PyTuple_New(b->n_inputs)) == NULL) return -1;
      for (Py_ssize_t i = 0; i < b->n_inputs; i++) {
        Py_INCREF(b->inputs[i]);
        PyTuple_SetItem(inputs, i, b->inputs[i]);
      }
    }
    PyObject *r = PyObject_CallFunctionObjArgs(g_sync_streams, inputs, NULL);
    Py_DECREF(inputs);
    if (r == NULL) return -1;
    Py_DECREF(r);
    b->synced = 1;
  }
  if (b->keep == NULL && (b->keep = PyList_New(0)) == NULL) return -1;
  PyObject *addr = PyObject_CallFunctionObjArgs(g_borrow, obj, b->keep, NULL);
  if (addr == NULL) return -1;
  *out = PyLong_AsVoidPtr(addr);
  Py_DECREF(addr);
  if (*out == NULL && PyErr_Occurred()) return -1;
  return 0;
}

/* Borrows `obj` (None: NULL) for the call; -1 with a Python error set on failure. */
static int borrow(borrowed *b, PyObject *obj, int writable, const DLTensor **out,
                  const route_entry **route_out) {
  *out = NULL;
  if (route_out) *route_out = NULL;
  if (obj == Py_None) return 0;
  if (g_force_python_route) return borrow_python(b, obj, out);
  const route_entry *r = route_of(obj);
  if (route_out) *route_out = r;
  if (r->route == ROUTE_EXCHANGE) return borrow_exchange(b, obj, r->api, out);
  if (r->route == ROUTE_BUFFER && borrow_buffer(b, obj, writable, out)) return 0;
  if (r->route == ROUTE_BUFFER && writable) { /* refused writable: a read-only array? */
    Py_buffer ro;
    if (PyObject_GetBuffer(obj, &ro, PyBUF_RECORDS_RO) == 0) {
      const int readonly = ro.readonly;
      PyBuffer_Release(&ro);
      if (readonly) return -2;
    } else {
      PyErr_Clear();
    }
  }
  return borrow_python(b, obj, out);
}

/* ---- outputs handed to torch: DLPack's versioned form around tilerun's tensor ------------------ */

typedef struct {
  ext_managed_versioned v;
  DLManagedTensor *inner;
} versioned_output;

static void versioned_output_deleter(ext_managed_versioned *self) {
  versioned_output *w = (versioned_output *)self;
  if (w->inner != NULL && w->inner->deleter != NULL) w->inner->deleter(w->inner);
  free(w);
}

/* ---- cpu outputs handed to NumPy: an owner exporting the tensor's buffer ----------------------- */

/* Holds a cpu DLManagedTensor tilerun made and exports its memory through the buffer protocol;
 * numpy.asarray(owner) views it (the view keeps the owner, the owner frees the tensor). */
typedef struct {
  PyObject_HEAD
  DLManagedTensor *m;
  int ndim;
  Py_ssize_t itemsize;
  Py_ssize_t shape[EXT_MAX_DIMS], strides[EXT_MAX_DIMS];
  char format[4];
} ext_owner;

static PyTypeObject *g_owner_type;
static PyObject *g_np_asarray; /* numpy.asarray, looked up when first needed */

/* The buffer format of a DLPack dtype NumPy reads; NULL where there is none (bfloat16, fp8). */
static const char *format_of(DLDataType t) {
  if (t.lanes != 1) return NULL;
  switch (t.code) {
    case kDLFloat: return t.bits == 16 ? "e" : t.bits == 32 ? "f" : t.bits == 64 ? "d" : NULL;
    case kDLInt: return t.bits == 8 ? "b" : t.bits == 16 ? "h" : t.bits == 32 ? "i" : t.bits == 64 ? "q" : NULL;
    case kDLUInt: return t.bits == 8 ? "B" : t.bits == 16 ? "H" : t.bits == 32 ? "I" : t.bits == 64 ? "Q" : NULL;
    case 6: return t.bits == 8 ? "?" : NULL; /* kDLBool */
    default: return NULL;
  }
}

static int owner_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  ext_owner *o = (ext_owner *)self;
  const DLTensor *t = &o->m->dl_tensor;
  Py_ssize_t n = 1;
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  view->buf = (char *)t->data + t->byte_offset;
  view->obj = self;
  Py_INCREF(self);
  view->len = n * o->itemsize;
  view->itemsize = o->itemsize;
  view->readonly = 0;
  view->ndim = o->ndim;
  view->format = (flags & PyBUF_FORMAT) ? o->format : NULL;
  view->shape = o->shape;
  view->strides = o->strides;
  view->suboffsets = NULL;
  view->internal = NULL;
  return 0;
}

static void owner_dealloc(PyObject *self) {
  ext_owner *o = (ext_owner *)self;
  PyTypeObject *type = Py_TYPE(self);
  if (o->m != NULL && o->m->deleter != NULL) o->m->deleter(o->m);
  o->m = NULL;
  freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
  tp_free(self);
  Py_DECREF(type);
}

static PyType_Slot owner_slots[] = {
    {Py_bf_getbuffer, (void *)owner_getbuffer},
    {Py_tp_dealloc, (void *)owner_dealloc},
    {Py_tp_doc, "A cpu output of tilerun, viewed by NumPy through its buffer (frees it when the last view goes)."},
    {0, NULL},
};

static PyType_Spec owner_spec = {
    .name = "tilerun._ext.Output",
    .basicsize = sizeof(ext_owner),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = owner_slots,
};

/* A NumPy array over cpu output `m` (which it then owns), or NULL with no error set where this
 * route cannot take it (no buffer format, no data, too many dims): then `m` is untouched. */
static PyObject *numpy_output(DLManagedTensor *m) {
  const DLTensor *t = &m->dl_tensor;
  const char *format = format_of(t->dtype);
  if (t->device.device_type != kDLCPU || format == NULL || t->data == NULL || t->ndim > EXT_MAX_DIMS ||
      g_owner_type == NULL) {
    return NULL;
  }
  if (g_np_asarray == NULL) {
    PyObject *modules = PyImport_GetModuleDict();
    PyObject *np = modules ? PyDict_GetItemString(modules, "numpy") : NULL;
    if (np == NULL || (g_np_asarray = PyObject_GetAttrString(np, "asarray")) == NULL) {
      PyErr_Clear();
      return NULL;
    }
  }
  ext_owner *o = PyObject_New(ext_owner, g_owner_type);
  if (o == NULL) {
    PyErr_Clear();
    return NULL;
  }
  o->m = NULL;
  o->ndim = t->ndim;
  o->itemsize = t->dtype.bits / 8;
  memcpy(o->format, format, strlen(format) + 1); /* one character and its NUL */
  Py_ssize_t step = o->itemsize;
  for (int d = t->ndim - 1; d >= 0; d--) {
    o->shape[d] = (Py_ssize_t)t->shape[d];
    o->strides[d] = t->strides ? (Py_ssize_t)t->strides[d] * o->itemsize : step;
    step *= o->shape[d];
  }
  o->m = m; /* the array's view keeps the owner, which frees m */
  PyObject *array = PyObject_CallFunctionObjArgs(g_np_asarray, (PyObject *)o, NULL);
  if (array == NULL) { /* m given back untouched: the caller's route decides */
    PyErr_Clear();
    o->m = NULL;
  }
  Py_DECREF(o);
  return array;
}

/* ---- the runtime's reference ------------------------------------------------------------------ */

/* RuntimeRef: a tilerun.Runtime's tr_runtime *, destroyed once the Runtime has released it and
 * the last tr_op made from it is gone, in whichever order the two go: a reference cycle through
 * a Runtime and its ops is collected in any order, and a tr_op destroyed after its runtime would
 * read the runtime's manifest and call into unloaded backends. Changed only under the GIL. */
typedef struct {
  PyObject_HEAD
  void *rt;         /* tr_runtime *; NULL once destroyed */
  Py_ssize_t users; /* bound ops whose tr_op still exists */
  int released;     /* the Runtime let go of it */
  int kept;         /* an output that may need its allocator went to another owner: never destroyed */
} ext_runtime_ref;

static PyTypeObject *g_runtime_ref_type;

static void runtime_ref_settle(ext_runtime_ref *r) {
  if (r->released && r->users == 0 && !r->kept && r->rt != NULL) {
    void *rt = r->rt;
    r->rt = NULL;
    g_runtime_destroy(&rt);
  }
}

static PyObject *runtime_ref_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *addr;
  if (kwargs != NULL && PyDict_Size(kwargs) > 0) {
    PyErr_SetString(PyExc_TypeError, "tilerun._ext.RuntimeRef(address) takes no keyword");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "O", &addr)) return NULL;
  void *rt = PyLong_AsVoidPtr(addr);
  if (rt == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "tilerun._ext.RuntimeRef: a NULL runtime");
    return NULL;
  }
  if (g_runtime_destroy == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "tilerun._ext: setup() was not called");
    return NULL;
  }
  ext_runtime_ref *r = (ext_runtime_ref *)PyType_GenericNew(type, NULL, NULL);
  if (r != NULL) r->rt = rt;
  return (PyObject *)r;
}

static PyObject *runtime_ref_release(PyObject *self, PyObject *unused) {
  (void)unused;
  ext_runtime_ref *r = (ext_runtime_ref *)self;
  r->released = 1;
  runtime_ref_settle(r);
  Py_RETURN_NONE;
}

static PyObject *runtime_ref_keep(PyObject *self, PyObject *unused) {
  (void)unused;
  ((ext_runtime_ref *)self)->kept = 1;
  Py_RETURN_NONE;
}

static PyObject *runtime_ref_alive(PyObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(((ext_runtime_ref *)self)->rt != NULL);
}

static PyObject *runtime_ref_users(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromSsize_t(((ext_runtime_ref *)self)->users);
}

/* A Runtime that never released its runtime (kept, or gone while the interpreter shuts down)
 * leaves it alive, as before this type. */
static void runtime_ref_dealloc(PyObject *self) {
  PyTypeObject *type = Py_TYPE(self);
  freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
  tp_free(self);
  Py_DECREF(type);
}

static PyMethodDef runtime_ref_methods[] = {
    {"release", runtime_ref_release, METH_NOARGS,
     "release(): the Runtime lets go; destroyed now, or when its last op goes."},
    {"keep", runtime_ref_keep, METH_NOARGS, "keep(): never destroyed (an output needs its allocator)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef runtime_ref_getset[] = {
    {"alive", runtime_ref_alive, NULL, "whether the tr_runtime * still exists", NULL},
    {"users", runtime_ref_users, NULL, "bound ops whose tr_op * still exists", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot runtime_ref_slots[] = {
    {Py_tp_new, (void *)runtime_ref_new},
    {Py_tp_dealloc, (void *)runtime_ref_dealloc},
    {Py_tp_methods, runtime_ref_methods},
    {Py_tp_getset, runtime_ref_getset},
    {Py_tp_doc, "RuntimeRef(address): a tr_runtime * destroyed after its Runtime and its last op let go."},
    {0, NULL},
};

static PyType_Spec runtime_ref_spec = {
    .name = "tilerun._ext.RuntimeRef",
    .basicsize = sizeof(ext_runtime_ref),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = runtime_ref_slots,
};

/* ---- the op ------------------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD
  ext_vectorcallfunc vectorcall; /* op_vectorcall, set by op_new */
  void *op;           /* tr_op *; NULL until _bind and after _close */
  Py_ssize_t n_outputs;
  PyObject *runtime;  /* the Runtime it was made in: kept alive while the op is */
  ext_runtime_ref *ref; /* its tr_runtime *, counting this op while its tr_op exists; or NULL */
  int remote;         /* the runtime launches in another process: the GIL goes during a call */
  int in_flight;      /* calls running, from op_enter to op_leave (changed only under the GIL) */
  int closing;        /* _close came while calls ran: the last one destroys the op */
  int immortalized;   /* the runtime went into the immortal set */
  PyObject *names;    /* (op name, input names, output names) for the binding's errors, or NULL */
  unsigned long long mutated; /* bit i: the op writes input i in place */
} ext_op;

/* The name of the op's input (`output` 0) or output i, for a message; a new reference. */
static PyObject *tensor_name(const ext_op *self, int output, Py_ssize_t i) {
  /* _bind checked names is a 3-tuple: these lookups are in range and set no error */
  PyObject *list = self->names != NULL ? PyTuple_GetItem(self->names, output ? 2 : 1) : NULL;
  PyObject *name = list != NULL && PyTuple_Check(list) && i < PyTuple_Size(list) ? PyTuple_GetItem(list, i) : NULL;
  if (name != NULL) {
    Py_INCREF(name);
    return name;
  }
  return PyUnicode_FromFormat("#%zd", i);
}

/* borrow(), the error naming the op and the tensor: a read-only array where the call writes
 * (a ValueError), or a producer's BufferError (a TypeError, the producer's message kept). */
static int borrow_named(const ext_op *self, borrowed *b, PyObject *obj, int output, Py_ssize_t i,
                        const DLTensor **out, const route_entry **route_out) {
  const int writable = output || (i < 64 && (self->mutated >> i) & 1);
  const int rc = borrow(b, obj, writable, out, route_out);
  if (rc == 0) return 0;
  /* a producer's BufferError, or the package's TypeError for what is no tensor (a float, a list):
   * named with the op and the tensor */
  if (rc != -2 && !PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
  PyObject *type = NULL, *value = NULL, *tb = NULL;
  if (rc != -2) { /* the producer's error, taken before anything below may run */
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
  }
  PyObject *op = self->names != NULL ? PyTuple_GetItem(self->names, 0) : NULL;
  if (op == NULL) op = PyUnicode_FromString("tilerun");
  else Py_INCREF(op);
  PyObject *name = tensor_name(self, output, i);
  const char *role = output ? "output" : "input";
  if (op == NULL || name == NULL) { /* no memory for the names: the error as it came */
    Py_XDECREF(op);
    Py_XDECREF(name);
    if (rc != -2) PyErr_Restore(type, value, tb);
    return -1;
  }
  if (rc == -2) {
    PyErr_Format(PyExc_ValueError, "%S: %s '%S' is a read-only array; the call writes it%s", op, role, name,
                 output ? "" : " in place");
  } else {
    PyErr_Format(PyExc_TypeError, "%S: %s '%S' cannot be borrowed: %S", op, role, name, value);
    PyObject *t2, *v2, *tb2;
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    if (tb != NULL) PyException_SetTraceback(value, tb);
    PyException_SetCause(v2, value); /* steals value */
    Py_XDECREF(type);
    Py_XDECREF(tb);
    PyErr_Restore(t2, v2, tb2);
  }
  Py_XDECREF(op);
  Py_XDECREF(name);
  return -1;
}

static void op_destroy_now(ext_op *self) {
  if (self->op != NULL) {
    void *op = self->op;
    self->op = NULL;
    g_op_destroy(&op);
  }
  ext_runtime_ref *ref = self->ref;
  if (ref != NULL) { /* the runtime goes after its ops */
    self->ref = NULL;
    ref->users--;
    runtime_ref_settle(ref);
    Py_DECREF((PyObject *)ref);
  }
}

static int op_enter(ext_op *self) {
  if (self->op == NULL || self->closing) {
    PyErr_SetString(PyExc_ValueError, "tilerun: the op is closed");
    return -1;
  }
  if (g_call == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "tilerun._ext: setup() was not called");
    return -1;
  }
  self->in_flight++; /* a close meanwhile (another thread, or a producer's __dlpack__) waits */
  return 0;
}

static void op_leave(ext_op *self) {
  self->in_flight--;
  if (self->in_flight == 0 && self->closing) op_destroy_now(self);
}

/* Runs tr_op_call (`outs`: DLManagedTensor *[]) or, with `into`, tr_op_call_into (`outs`:
 * DLTensor *[]); the GIL goes while a kernel may block (a cpu kernel, a launch in another process),
 * not around a cuda launch in this process. */
static void *run_call(ext_op *self, const borrowed *b, const DLTensor *const *ins, size_t n_in, void *outs,
                      size_t n_out, int into) {
  const int release = !b->any_cuda || self->remote;
  PyThreadState *saved = NULL;
  if (release) saved = PyEval_SaveThread();
  void *status = into ? g_call_into(self->op, ins, n_in, (DLTensor *const *)outs, n_out)
                      : g_call(self->op, ins, n_in, (DLManagedTensor **)outs, n_out);
  if (release) PyEval_RestoreThread(saved);
  return status;
}

/* ---- a call's tensor arguments -------------------------------------------------------------------- */

/* One argument of call_into (its inputs or its outputs) as an array of tensors, with no tuple made
 * for a tuple, a list or one tensor: a tuple's items are borrowed (it lives through the call), a
 * list's are held (the GIL may go during the call, and another thread could change the list), any
 * other sequence is read through a tuple made of it. The first EXT_MAX_TENSORS are kept; `n`
 * counts them all, for the caller's check. */
typedef struct {
  PyObject *items[EXT_MAX_TENSORS];
  Py_ssize_t n;      /* how many the argument has */
  Py_ssize_t n_held; /* items[0 .. n_held) are strong references */
  PyObject *tuple;   /* the tuple the items are in (the argument itself or `made`), or NULL */
  PyObject *made;    /* a tuple made of another sequence (strong), or NULL */
} tensor_seq;

static void tensor_seq_init(tensor_seq *q) {
  q->n = q->n_held = 0;
  q->tuple = q->made = NULL;
}

/* Reads `obj` (`single`: one tensor, not a sequence); 0, or -1 with the error tuple(obj) raises. */
static int tensor_seq_open(tensor_seq *q, PyObject *obj, int single) {
  tensor_seq_init(q);
  if (single) {
    q->items[0] = obj;
    q->n = 1;
    return 0;
  }
  const int list = PyList_Check(obj);
  if (!list) {
    if (!PyTuple_Check(obj) && (q->made = PySequence_Tuple(obj)) == NULL) return -1;
    q->tuple = q->made != NULL ? q->made : obj;
  }
  q->n = list ? PyList_Size(obj) : PyTuple_Size(q->tuple);
  const Py_ssize_t kept = q->n < EXT_MAX_TENSORS ? q->n : EXT_MAX_TENSORS;
  for (Py_ssize_t i = 0; i < kept; i++) {
    q->items[i] = list ? PyList_GetItem(obj, i) : PyTuple_GetItem(q->tuple, i);
  }
  if (list) {
    for (Py_ssize_t i = 0; i < kept; i++) Py_INCREF(q->items[i]);
    q->n_held = kept;
  }
  return 0;
}

static void tensor_seq_close(tensor_seq *q) {
  for (Py_ssize_t i = 0; i < q->n_held; i++) Py_DECREF(q->items[i]);
  q->n_held = 0;
  Py_CLEAR(q->made);
}

/* call_into's tensors, read and borrowed: `outs` has n_out slots (the op's outputs or as many as
 * given, whichever is more), NULL past those given. */
typedef struct {
  tensor_seq in, out;
  borrowed b;
  const DLTensor *ins[EXT_MAX_TENSORS];
  DLTensor *outs[EXT_MAX_TENSORS];
  Py_ssize_t n_in, n_out;
} into_call;

/* Reads and borrows call_into's `inputs` and `outputs`; 0, or -1 with an error set. Either way
 * into_call_close releases what it holds. */
static int into_call_open(into_call *c, const ext_op *self, PyObject *inputs, PyObject *outputs) {
  tensor_seq_init(&c->out);
  borrowed_init(&c->b, NULL, 0, NULL);
  if (tensor_seq_open(&c->in, inputs, 0) != 0) return -1;
  const int single = !PyList_Check(outputs) && !PyTuple_Check(outputs);
  if (tensor_seq_open(&c->out, outputs, single) != 0) return -1;
  c->n_in = c->in.n;
  c->n_out = c->out.n > self->n_outputs ? c->out.n : self->n_outputs;
  if (c->n_in + c->n_out > EXT_MAX_TENSORS) { /* the borrowed slots hold inputs and outputs */
    PyErr_Format(PyExc_ValueError, "tilerun: at most %d tensors a call, got %zd inputs and %zd "
                 "outputs", EXT_MAX_TENSORS, c->n_in, c->n_out);
    return -1;
  }
  borrowed_init(&c->b, c->in.items, c->n_in, c->in.tuple);
  memset(c->outs, 0, sizeof(c->outs));
  for (Py_ssize_t i = 0; i < c->n_in; i++) {
    if (borrow_named(self, &c->b, c->in.items[i], 0, i, &c->ins[i], NULL) != 0) return -1;
  }
  for (Py_ssize_t i = 0; i < c->out.n; i++) {
    const DLTensor *t;
    if (borrow_named(self, &c->b, c->out.items[i], 1, i, &t, NULL) != 0) return -1;
    c->outs[i] = (DLTensor *)t;
  }
  return 0;
}

static void into_call_close(into_call *c) {
  borrowed_release(&c->b);
  tensor_seq_close(&c->in);
  tensor_seq_close(&c->out);
}

/* ---- op(...) and op.call_into(...) ------------------------------------------------------------------ */

/* op(*tensors) once the op is entered and the count checked: `args` are the call's `n_in`
 * inputs, the items of `args_tuple` where the call came with a tuple (else NULL). */
static PyObject *op_run(ext_op *self, PyObject *const *args, Py_ssize_t n_in, PyObject *args_tuple) {
  borrowed b;
  borrowed_init(&b, args, n_in, args_tuple);
  const DLTensor *ins[EXT_MAX_TENSORS];
  PyObject *first = NULL;
  /* the first given input's route, copied (an entry outside the full cache is overwritten by the
   * next lookup) */
  int first_route = ROUTE_PYTHON;
  const ext_exchange_api *api = NULL;
  for (Py_ssize_t i = 0; i < n_in; i++) {
    PyObject *t = args[i];
    const route_entry *r;
    if (borrow_named(self, &b, t, 0, i, &ins[i], &r) != 0) {
      borrowed_release(&b);
      op_leave(self);
      return NULL;
    }
    if (first == NULL && t != Py_None) {
      first = t;
      if (r != NULL) {
        first_route = r->route;
        api = r->route == ROUTE_EXCHANGE ? r->api : NULL;
      }
    }
  }
  DLManagedTensor *outs[EXT_MAX_TENSORS] = {0};
  size_t n_out = (size_t)self->n_outputs;
  void *status = run_call(self, &b, ins, (size_t)n_in, outs, n_out, 0);
  borrowed_release(&b);
  op_leave(self);
  if (status != NULL) {
    for (size_t i = 0; i < n_out; i++) {
      if (outs[i] && outs[i]->deleter) outs[i]->deleter(outs[i]);
    }
    raise_status(status);
    return NULL;
  }
  PyObject *results[EXT_MAX_TENSORS] = {0};
  size_t i = 0;
  for (; i < n_out; i++) {
    if (outs[i] == NULL) {
      Py_INCREF(Py_None);
      results[i] = Py_None;
      continue;
    }
    DLManagedTensor *m = outs[i];
    outs[i] = NULL;
    if (api != NULL) {
      versioned_output *w = malloc(sizeof *w);
      if (w == NULL) {
        if (m->deleter) m->deleter(m);
        PyErr_NoMemory();
        break;
      }
      w->v.version = (ext_dl_version){1, 0};
      w->v.manager_ctx = NULL;
      w->v.deleter = versioned_output_deleter;
      w->v.flags = 0;
      w->v.dl_tensor = m->dl_tensor;
      w->inner = m;
      if (m->dl_tensor.device.device_type != kDLCPU && !self->immortalized) {
        /* the deleter may need the runtime's allocator: the runtime is never destroyed */
        if (PySet_Add(g_immortal, self->runtime) != 0) {
          versioned_output_deleter(&w->v);
          break;
        }
        if (self->ref != NULL) self->ref->kept = 1;
        self->immortalized = 1;
      }
      void *obj = NULL;
      if (api->managed_tensor_to_py_object_no_sync(&w->v, &obj) != 0) break;
      results[i] = obj;
    } else if (first_route == ROUTE_BUFFER && (results[i] = numpy_output(m)) != NULL) {
      /* a NumPy array over tilerun's cpu output, no Python on the way */
    } else {
      PyObject *addr = PyLong_FromVoidPtr(m);
      if (addr == NULL) {
        if (m->deleter) m->deleter(m);
        break;
      }
      results[i] = PyObject_CallFunctionObjArgs(g_wrap_output, addr, first ? first : Py_None,
                                                self->runtime, NULL);
      Py_DECREF(addr); /* the wrapper owns m once made; on failure it freed it */
      if (results[i] == NULL) break;
    }
  }
  if (i < n_out) { /* failed at output i: free what is left, drop what was made */
    for (size_t j = i + 1; j < n_out; j++) {
      if (outs[j] && outs[j]->deleter) outs[j]->deleter(outs[j]);
    }
    for (size_t j = 0; j < i; j++) Py_XDECREF(results[j]);
    return NULL;
  }
  if (n_out == 1) return results[0];
  PyObject *tuple = PyTuple_New((Py_ssize_t)n_out);
  if (tuple == NULL) {
    for (size_t j = 0; j < n_out; j++) Py_XDECREF(results[j]);
    return NULL;
  }
  for (size_t j = 0; j < n_out; j++) PyTuple_SetItem(tuple, (Py_ssize_t)j, results[j]);
  return tuple;
}

static int op_check_count(const ext_op *self, Py_ssize_t n_in) {
  if (n_in > EXT_MAX_TENSORS || self->n_outputs > EXT_MAX_TENSORS) {
    PyErr_Format(PyExc_ValueError, "tilerun: at most %d tensors a call, got %zd inputs",
                 EXT_MAX_TENSORS, n_in);
    return -1;
  }
  return 0;
}

static const char k_by_position[] = "tilerun: an op takes its tensors by position only";

/* op(*tensors) through tp_call (what CPython 3.11 uses for tilerun.Op, a subclass) */
static PyObject *op_call(PyObject *pyself, PyObject *args, PyObject *kwargs) {
  ext_op *self = (ext_op *)pyself;
  if (kwargs != NULL && PyDict_Size(kwargs) > 0) {
    PyErr_SetString(PyExc_TypeError, k_by_position);
    return NULL;
  }
  Py_ssize_t n_in = PyTuple_Size(args);
  if (op_check_count(self, n_in) != 0 || op_enter(self) != 0) return NULL;
  PyObject *items[EXT_MAX_TENSORS];
  for (Py_ssize_t i = 0; i < n_in; i++) items[i] = PyTuple_GetItem(args, i); /* borrowed */
  return op_run(self, items, n_in, args);
}

/* op(*tensors) through vectorcall: no tuple of arguments made (CPython 3.12 on) */
static PyObject *op_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  ext_op *self = (ext_op *)callable;
  if (kwnames != NULL && PyTuple_Size(kwnames) > 0) {
    PyErr_SetString(PyExc_TypeError, k_by_position);
    return NULL;
  }
  Py_ssize_t n_in = (Py_ssize_t)(nargsf & ~EXT_VECTORCALL_ARGUMENTS_OFFSET);
  if (op_check_count(self, n_in) != 0 || op_enter(self) != 0) return NULL;
  return op_run(self, args, n_in, NULL);
}

static PyObject *op_call_into(PyObject *pyself, PyObject *const *args, Py_ssize_t nargs) {
  ext_op *self = (ext_op *)pyself;
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "call_into(inputs, outputs): 2 arguments, got %zd", nargs);
    return NULL;
  }
  if (op_enter(self) != 0) return NULL;
  PyObject *result = NULL;
  into_call c;
  if (into_call_open(&c, self, args[0], args[1]) == 0) {
    void *status = run_call(self, &c.b, c.ins, (size_t)c.n_in, c.outs, (size_t)c.n_out, 1);
    if (status != NULL) {
      raise_status(status);
    } else {
      Py_INCREF(args[1]);
      result = args[1];
    }
  }
  into_call_close(&c);
  op_leave(self);
  return result;
}

static PyObject *op_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *self = PyType_GenericNew(type, args, kwargs);
  if (self != NULL) ((ext_op *)self)->vectorcall = op_vectorcall;
  return self;
}

static PyObject *op_bind(PyObject *pyself, PyObject *args) {
  ext_op *self = (ext_op *)pyself;
  PyObject *addr, *runtime;
  Py_ssize_t n_outputs;
  int remote;
  PyObject *names = NULL;
  unsigned long long mutated = 0;
  if (!PyArg_ParseTuple(args, "OnOp|OK", &addr, &n_outputs, &runtime, &remote, &names, &mutated)) return NULL;
  if (names != NULL && (!PyTuple_Check(names) || PyTuple_Size(names) != 3)) {
    PyErr_SetString(PyExc_TypeError, "tilerun._ext: names is (op name, input names, output names)");
    return NULL;
  }
  if (self->op != NULL) {
    PyErr_SetString(PyExc_ValueError, "tilerun._ext: the op is bound already");
    return NULL;
  }
  void *op = PyLong_AsVoidPtr(addr);
  if (op == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "tilerun._ext: a NULL op");
    return NULL;
  }
  if (n_outputs < 0 || n_outputs > EXT_MAX_TENSORS) {
    PyErr_Format(PyExc_ValueError, "tilerun: an op with %zd outputs (at most %d)", n_outputs,
                 EXT_MAX_TENSORS);
    return NULL;
  }
  /* the Runtime's RuntimeRef (tilerun.Runtime._ref), which then outlives this op's tr_op */
  PyObject *ref = PyObject_GetAttrString(runtime, "_ref");
  if (ref == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    PyErr_Clear();
  } else if (!PyObject_TypeCheck(ref, g_runtime_ref_type) || ((ext_runtime_ref *)ref)->rt == NULL) {
    const int closed = PyObject_TypeCheck(ref, g_runtime_ref_type);
    Py_DECREF(ref);
    PyErr_SetString(closed ? PyExc_ValueError : PyExc_TypeError,
                    closed ? "tilerun: the runtime is closed" : "tilerun._ext: runtime._ref is not a RuntimeRef");
    return NULL;
  }
  self->op = op;
  self->n_outputs = n_outputs;
  if (ref != NULL) {
    ((ext_runtime_ref *)ref)->users++;
    self->ref = (ext_runtime_ref *)ref; /* the reference GetAttr gave */
  }
  Py_INCREF(runtime);
  EXT_SETREF(self->runtime, runtime);
  self->remote = remote;
  Py_XINCREF(names);
  EXT_SETREF(self->names, names);
  self->mutated = mutated;
  Py_RETURN_NONE;
}

static PyObject *op_close(PyObject *pyself, PyObject *unused) {
  (void)unused;
  ext_op *self = (ext_op *)pyself;
  if (self->in_flight > 0) {
    self->closing = 1; /* the last call running destroys it */
  } else {
    op_destroy_now(self);
  }
  Py_RETURN_NONE;
}

/* _enter() / _leave(): the Python methods that hand the tr_op * to ctypes (which releases the
 * GIL) hold the op as a call does, so that a close meanwhile waits for them. */
static PyObject *op_py_enter(PyObject *pyself, PyObject *unused) {
  (void)unused;
  if (op_enter((ext_op *)pyself) != 0) return NULL;
  return PyLong_FromVoidPtr(((ext_op *)pyself)->op);
}

static PyObject *op_py_leave(PyObject *pyself, PyObject *unused) {
  (void)unused;
  ext_op *self = (ext_op *)pyself;
  if (self->in_flight <= 0) {
    PyErr_SetString(PyExc_RuntimeError, "tilerun._ext: _leave() without _enter()");
    return NULL;
  }
  op_leave(self);
  Py_RETURN_NONE;
}

/* The garbage collector sees the op's Runtime, so that a cycle through the two is collected (the
 * RuntimeRef orders their destruction). */
static int op_traverse(PyObject *pyself, visitproc visit, void *arg) {
  ext_op *self = (ext_op *)pyself;
  Py_VISIT(Py_TYPE(pyself));
  Py_VISIT(self->runtime);
  Py_VISIT(self->names);
  return 0;
}

static int op_clear(PyObject *pyself) {
  ext_op *self = (ext_op *)pyself;
  if (self->in_flight > 0) {
    self->closing = 1;
  } else {
    op_destroy_now(self);
  }
  Py_CLEAR(self->runtime);
  Py_CLEAR(self->names);
  return 0;
}

static void op_dealloc(PyObject *pyself) {
  ext_op *self = (ext_op *)pyself;
  PyTypeObject *type = Py_TYPE(pyself);
  PyObject_GC_UnTrack(pyself);
  op_destroy_now(self);
  Py_CLEAR(self->runtime);
  Py_CLEAR(self->names);
  freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
  tp_free(pyself);
  Py_DECREF(type);
}

static PyMethodDef op_methods[] = {
    {"call_into", (PyCFunction)(void (*)(void))op_call_into, METH_FASTCALL,
     "call_into(inputs, outputs): runs the op writing into the given outputs; returns them."},
    {"_bind", op_bind, METH_VARARGS,
     "_bind(op address, n outputs, runtime, launches remotely): binds a tr_op *."},
    {"_close", op_close, METH_NOARGS, "_close(): destroys the tr_op * (after calls running)."},
    {"_enter", op_py_enter, METH_NOARGS, "_enter(): holds the op as a call does; its tr_op * address."},
    {"_leave", op_py_leave, METH_NOARGS, "_leave(): ends an _enter() (the op goes now if closed meanwhile)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef op_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(ext_op, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot op_slots[] = {
    {Py_tp_call, (void *)op_call},
    {Py_tp_dealloc, (void *)op_dealloc},
    {Py_tp_traverse, (void *)op_traverse},
    {Py_tp_clear, (void *)op_clear},
    {Py_tp_methods, op_methods},
    {Py_tp_members, op_members},
    {Py_tp_new, (void *)op_new},
    {Py_tp_doc, "The call path of tilerun.Op (a tr_op * and its call, in C)."},
    {0, NULL},
};

static PyType_Spec op_spec = {
    .name = "tilerun._ext.OpBase",
    .basicsize = sizeof(ext_op),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | EXT_TPFLAGS_HAVE_VECTORCALL,
    .slots = op_slots,
};

/* ---- benchmarks: the same memo-hit calls from C, in this process -------------------------------- */

static PyTypeObject *g_op_type; /* OpBase, for the benchmarks' argument check */

/* The name of `obj`'s type, for an error message (a new reference; NULL with an error set). */
static PyObject *type_name_of(PyObject *obj) { return PyType_GetName(Py_TYPE(obj)); }

static int bench_type_error(const char *fn, const char *what, const char *want, PyObject *got) {
  PyObject *name = type_name_of(got);
  if (name == NULL) return -1;
  PyErr_Format(PyExc_TypeError, "tilerun._ext.%s: %s must be %s, got %U", fn, what, want, name);
  Py_DECREF(name);
  return -1;
}

/* Checks a benchmark's op, inputs and call count; 0, or -1 with a TypeError or ValueError set. */
static int bench_check(const char *fn, PyObject *op, PyObject *inputs, PyObject *n_obj, Py_ssize_t *n) {
  if (g_op_type == NULL || !PyObject_TypeCheck(op, g_op_type)) {
    return bench_type_error(fn, "op", "a tilerun.Op", op);
  }
  if (!PyList_Check(inputs) && !PyTuple_Check(inputs)) {
    return bench_type_error(fn, "inputs", "a list or tuple of tensors", inputs);
  }
  if (!PyLong_Check(n_obj)) return bench_type_error(fn, "n", "an int", n_obj);
  *n = PyLong_AsSsize_t(n_obj);
  if (*n == -1 && PyErr_Occurred()) return -1;
  if (*n < 1) {
    PyErr_Format(PyExc_ValueError, "tilerun._ext.%s: n must be at least 1, got %zd", fn, *n);
    return -1;
  }
  if (g_now_ns == NULL) {
    PyErr_Format(PyExc_RuntimeError, "tilerun._ext.%s: the loaded libtilerun exports no tr_now_ns "
                 "(rebuild //python:libtilerun.so)", fn);
    return -1;
  }
  return 0;
}

/* One memo-hit call as a C caller makes it: tr_op_call_into with `into`, else tr_op_call, whose
 * outputs it frees through their deleters. */
static void *bench_one(void *op, const DLTensor *const *ins, size_t n_in, DLTensor *const *outs,
                       size_t n_out, int into) {
  if (into) return g_call_into(op, ins, n_in, outs, n_out);
  DLManagedTensor *made[EXT_MAX_TENSORS] = {0};
  void *status = g_call(op, ins, n_in, made, n_out);
  for (size_t j = 0; j < n_out; j++) {
    if (made[j] != NULL && made[j]->deleter != NULL) made[j]->deleter(made[j]);
  }
  return status;
}

/* Runs `n` calls (bench_one) on tensors borrowed once, after one untimed call that builds the
 * kernel if needed (so the `n` are memo hits) and raises the runtime's error for a refused call.
 * The GIL goes for the loop as a whole, outside the clock (a C caller has none to release per
 * call). Returns the `n` calls' nanoseconds (tr_now_ns), or -1 with the call's error set. */
static long long bench_loop(ext_op *self, const DLTensor *const *ins, size_t n_in, DLTensor *const *outs,
                            size_t n_out, int into, Py_ssize_t n) {
  PyThreadState *saved = PyEval_SaveThread();
  void *status = bench_one(self->op, ins, n_in, outs, n_out, into);
  uint64_t t0 = g_now_ns();
  for (Py_ssize_t i = 0; i < n && status == NULL; i++) {
    status = bench_one(self->op, ins, n_in, outs, n_out, into);
  }
  uint64_t elapsed = g_now_ns() - t0;
  PyEval_RestoreThread(saved);
  if (status != NULL) {
    raise_status(status);
    return -1;
  }
  return (long long)elapsed;
}

static PyObject *ext_bench_call_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  (void)module;
  static const char fn[] = "_bench_call_into";
  if (nargs != 4) {
    PyErr_Format(PyExc_TypeError, "tilerun._ext.%s(op, inputs, outputs, n): 4 arguments, got %zd", fn, nargs);
    return NULL;
  }
  Py_ssize_t n;
  if (bench_check(fn, args[0], args[1], args[3], &n) != 0) return NULL;
  ext_op *self = (ext_op *)args[0];
  if (op_enter(self) != 0) return NULL;
  PyObject *result = NULL;
  into_call c;
  if (into_call_open(&c, self, args[1], args[2]) == 0) {
    long long ns = bench_loop(self, c.ins, (size_t)c.n_in, c.outs, (size_t)c.n_out, 1, n);
    if (ns >= 0) result = PyLong_FromLongLong(ns);
  }
  into_call_close(&c);
  op_leave(self);
  return result;
}

static PyObject *ext_bench_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  (void)module;
  static const char fn[] = "_bench_call";
  if (nargs != 3) {
    PyErr_Format(PyExc_TypeError, "tilerun._ext.%s(op, inputs, n): 3 arguments, got %zd", fn, nargs);
    return NULL;
  }
  Py_ssize_t n;
  if (bench_check(fn, args[0], args[1], args[2], &n) != 0) return NULL;
  ext_op *self = (ext_op *)args[0];
  if (op_enter(self) != 0) return NULL;
  PyObject *result = NULL;
  tensor_seq in;
  borrowed b;
  borrowed_init(&b, NULL, 0, NULL);
  if (tensor_seq_open(&in, args[1], 0) != 0 || op_check_count(self, in.n) != 0) goto done;
  borrowed_init(&b, in.items, in.n, in.tuple);
  const DLTensor *ins[EXT_MAX_TENSORS];
  for (Py_ssize_t i = 0; i < in.n; i++) {
    if (borrow_named(self, &b, in.items[i], 0, i, &ins[i], NULL) != 0) goto done;
  }
  long long ns = bench_loop(self, ins, (size_t)in.n, NULL, (size_t)self->n_outputs, 0, n);
  if (ns >= 0) result = PyLong_FromLongLong(ns);
done:
  borrowed_release(&b);
  tensor_seq_close(&in);
  op_leave(self);
  return result;
}

/* ---- module ------------------------------------------------------------------------------------ */

static void *address_of(PyObject *dict, const char *key) {
  PyObject *v = PyDict_GetItemString(dict, key); /* borrowed */
  if (v == NULL) {
    PyErr_Format(PyExc_KeyError, "tilerun._ext.setup: no '%s'", key);
    return NULL;
  }
  return PyLong_AsVoidPtr(v);
}

static PyObject *callable_of(PyObject *dict, const char *key) {
  PyObject *v = PyDict_GetItemString(dict, key);
  if (v == NULL || !PyCallable_Check(v)) {
    PyErr_Format(PyExc_TypeError, "tilerun._ext.setup: '%s' must be callable", key);
    return NULL;
  }
  Py_INCREF(v);
  return v;
}

static PyObject *ext_setup(PyObject *module, PyObject *dict) {
  (void)module;
  if (!PyDict_Check(dict)) {
    PyErr_SetString(PyExc_TypeError, "tilerun._ext.setup: a dict");
    return NULL;
  }
  void *call = address_of(dict, "tr_op_call");
  void *call_into = address_of(dict, "tr_op_call_into");
  void *set_stream = address_of(dict, "tr_cuda_set_stream");
  void *destroy = address_of(dict, "tr_op_destroy");
  void *runtime_destroy = address_of(dict, "tr_runtime_destroy");
  if (!call || !call_into || !set_stream || !destroy || !runtime_destroy) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "tilerun._ext.setup: a NULL entry");
    return NULL;
  }
  /* optional: a library older than its export leaves the benchmarks (_bench_call*) unable to run */
  PyObject *now = PyDict_GetItemString(dict, "tr_now_ns");
  void *now_ns = (now != NULL && now != Py_None) ? PyLong_AsVoidPtr(now) : NULL;
  if (now_ns == NULL && PyErr_Occurred()) return NULL;
  PyObject *immortal = PyDict_GetItemString(dict, "immortal");
  if (immortal == NULL || !PySet_Check(immortal)) {
    PyErr_SetString(PyExc_TypeError, "tilerun._ext.setup: 'immortal' must be a set");
    return NULL;
  }
  PyObject *error_from = callable_of(dict, "error_from");
  PyObject *borrow_fn = error_from ? callable_of(dict, "borrow") : NULL;
  PyObject *sync = borrow_fn ? callable_of(dict, "sync_streams") : NULL;
  PyObject *wrap = sync ? callable_of(dict, "wrap_output") : NULL;
  if (wrap == NULL) {
    Py_XDECREF(error_from);
    Py_XDECREF(borrow_fn);
    Py_XDECREF(sync);
    return NULL;
  }
  g_call = (call_fn)call;
  g_call_into = (call_into_fn)call_into;
  g_set_stream = (set_stream_fn)set_stream;
  g_op_destroy = (op_destroy_fn)destroy;
  g_runtime_destroy = (runtime_destroy_fn)runtime_destroy;
  g_now_ns = (now_ns_fn)now_ns;
  EXT_SETREF(g_error_from, error_from);
  EXT_SETREF(g_borrow, borrow_fn);
  EXT_SETREF(g_sync_streams, sync);
  EXT_SETREF(g_wrap_output, wrap);
  Py_INCREF(immortal);
  EXT_SETREF(g_immortal, immortal);
  Py_RETURN_NONE;
}

static PyObject *ext_set_python_route(PyObject *module, PyObject *flag) {
  (void)module;
  int on = PyObject_IsTrue(flag);
  if (on < 0) return NULL;
  PyObject *was = PyBool_FromLong(g_force_python_route);
  g_force_python_route = on;
  return was;
}

static PyObject *ext_route_of(PyObject *module, PyObject *obj) {
  (void)module;
  if (obj == Py_None) return PyUnicode_FromString("none");
  if (g_force_python_route) return PyUnicode_FromString("dlpack");
  static const char *names[] = {"dlpack", "exchange", "buffer"};
  return PyUnicode_FromString(names[route_of(obj)->route]);
}

static PyMethodDef ext_methods[] = {
    {"setup", ext_setup, METH_O, "setup(dict): the libtilerun entry points and Python helpers."},
    {"set_python_route", ext_set_python_route, METH_O,
     "set_python_route(flag): every tensor through __dlpack__ (tests); returns the old flag."},
    {"route_of", ext_route_of, METH_O,
     "route_of(tensor): 'exchange' (DLPack C exchange API), 'buffer' (NumPy's buffer), "
     "'dlpack' (__dlpack__) or 'none'."},
    {"_bench_call_into", (PyCFunction)(void (*)(void))ext_bench_call_into, METH_FASTCALL,
     "_bench_call_into(op, inputs, outputs, n): for benchmarks only. Borrows the tensors as "
     "op.call_into does, makes one untimed call, then n memo-hit tr_op_call_into calls straight "
     "from C with the GIL released; returns their nanoseconds (tr_now_ns)."},
    {"_bench_call", (PyCFunction)(void (*)(void))ext_bench_call, METH_FASTCALL,
     "_bench_call(op, inputs, n): for benchmarks only. As _bench_call_into, with tr_op_call, "
     "each call's outputs freed through their deleters; returns the n calls' nanoseconds."},
    {NULL, NULL, 0, NULL},
};

/* The destructor of tilerun.Tensor's "dltensor" capsules: a capsule still so named was never
 * consumed, so its DLManagedTensor is still the package's to free. In C, as it may run while an
 * exception propagates (a capsule dropped in an unwinding frame), where no Python may run. */
static void dltensor_capsule_destructor(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return; /* consumed: renamed "used_dltensor" */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
  if (m != NULL && m->deleter != NULL) m->deleter(m);
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

/* Makes the type of `spec`, adds it to the module as `name` and keeps it in *global (type checks
 * compare against the last module made's). */
static int add_type(PyObject *module, PyType_Spec *spec, const char *name, PyTypeObject **global) {
  PyObject *type = PyType_FromSpec(spec);
  if (type == NULL) return -1;
  Py_XDECREF((PyObject *)*global);
  Py_INCREF(type);
  *global = (PyTypeObject *)type;
  int rc = PyModule_AddObjectRef(module, name, type);
  Py_DECREF(type);
  return rc;
}

static int ext_exec(PyObject *module) {
  if (g_owner_type == NULL && (g_owner_type = (PyTypeObject *)PyType_FromSpec(&owner_spec)) == NULL) return -1;
  if (add_type(module, &op_spec, "OpBase", &g_op_type) != 0) return -1;            /* the benchmarks' check */
  if (add_type(module, &runtime_ref_spec, "RuntimeRef", &g_runtime_ref_type) != 0) return -1; /* _bind's */
  int rc;
  PyObject *destructor = PyLong_FromVoidPtr((void *)(uintptr_t)dltensor_capsule_destructor);
  if (destructor == NULL) return -1;
  rc = PyModule_AddObjectRef(module, "capsule_destructor", destructor);
  Py_DECREF(destructor);
  if (rc != 0) return -1;
  return PyModule_AddIntConstant(module, "MAX_TENSORS", EXT_MAX_TENSORS);
}

static PyModuleDef_Slot ext_slots[] = {
    {Py_mod_exec, (void *)ext_exec},
    {0, NULL},
};

static struct PyModuleDef ext_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tilerun._ext",
    .m_doc = "tilerun's call path in C (the DLPack C exchange API, NumPy's buffer, __dlpack__).",
    .m_size = 0,
    .m_methods = ext_methods,
    .m_slots = ext_slots,
};

PyMODINIT_FUNC PyInit__ext(void) { return PyModuleDef_Init(&ext_module); }
