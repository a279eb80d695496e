"""tilerun: call tilerun ops from Python with DLPack tensors (PyTorch, JAX, CuPy, NumPy).

The caller's API (include/tilerun/tilerun.h) from Python; standard library only. An op's call
runs in C (the extension tilerun._ext): torch tensors are read through the DLPack C exchange
API, NumPy arrays through their buffer, other producers through ``__dlpack__``; the rest of
the API goes through ctypes::

    import numpy as np, tilerun
    op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
    y = op(np.ones((8, 64), np.float32), None)     # a numpy array, as the input was
    op.target                                      # 'cpu': settled by the first call's device

The shared object is found at $TILERUN_LIBRARY, else in the package (``pip install ./python``
puts it in tilerun/lib/), else an installed tilerun the package was built for, else
libtilerun.so beside the package (in the package folder or its parent), else <repository>/bazel-bin/python/libtilerun.so (built by
``bazel build //python:libtilerun.so``); the extension in the package, else at
$TILERUN_EXTENSION, else <repository>/bazel-bin/python/tilerun/_ext.so (``bazel build
//python:tilerun``). A runtime reads the manifest from its ``manifest_dir``
(default: $TILERUN_MANIFEST_DIR, else the installed one, else ``manifest/spec`` under the working
directory) and looks
for backends in ``backend_dirs`` (default: $TILERUN_BACKEND_PATH, then the install prefix's).

Tensors are borrowed for the length of a call (tilerun never keeps them); outputs are allocated
by tilerun and handed over without a copy: as a torch tensor or a numpy array when the first
given input is one, else as a :class:`Tensor` (a DLPack producer).
"""

import contextlib
import ctypes
import functools
import os
import sys
import threading
import weakref

__all__ = [
    "Error", "SignatureError", "BackendError", "UnknownTargetError", "AmbiguousTargetError",
    "OpNotAvailableError", "SelectionError", "InvalidValueError", "ManifestError", "TransportError",
    "CompileError", "InternalError", "OutOfMemoryError", "IOError", "SignatureDtypeError",
    "SignatureShapeError", "SignatureParamError", "SignatureDeviceError",
    "Runtime", "Op", "Tensor", "dtype", "op", "default_runtime", "set_stream", "stream",
    "library_path", "__version__",
]

# ---- the shared object ----------------------------------------------------------------------

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("TILERUN_LIBRARY")
    if env:
        return [("$TILERUN_LIBRARY", env)]
    parent = os.path.dirname(_PACKAGE_DIR)
    try:  # written by setup.py: an installed tilerun the pip package uses
        from ._install import PREFIX as installed
    except ImportError:
        installed = None
    found = [("in the package", os.path.join(_PACKAGE_DIR, "lib", "libtilerun.so"))]
    if installed:
        found.append(("the installed tilerun", os.path.join(installed, "lib", "libtilerun.so")))
    return found + [
        ("beside the package", os.path.join(_PACKAGE_DIR, "libtilerun.so")),
        ("beside the package", os.path.join(parent, "libtilerun.so")),
        ("the repository's bazel-bin",
         os.path.join(parent, os.pardir, "bazel-bin", "python", "libtilerun.so")),
    ]


def _load_library():
    tried = []
    for how, path in _candidates():
        path = os.path.normpath(path)
        if not os.path.isfile(path):
            tried.append("%s (%s): not found" % (path, how))
            continue
        try:
            return path, ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s): %s" % (path, how, e))
    raise ImportError(
        "tilerun: cannot load libtilerun.so; looked at:\n  " + "\n  ".join(tried) +
        "\nBuild it with `bazel build //python:libtilerun.so` or set TILERUN_LIBRARY to its path.")


library_path, _lib = _load_library()


def _load_extension():
    tried = []
    try:
        from . import _ext
        return _ext
    except ImportError as e:
        tried.append("tilerun._ext in %s: %s" % (_PACKAGE_DIR, e))
    import importlib.machinery
    import importlib.util
    env = os.environ.get("TILERUN_EXTENSION")
    paths = [("$TILERUN_EXTENSION", env)] if env else []
    paths.append(("the repository's bazel-bin", os.path.join(
        os.path.dirname(_PACKAGE_DIR), os.pardir, "bazel-bin", "python", "tilerun", "_ext.so")))
    for how, path in paths:
        path = os.path.normpath(path)
        if not os.path.isfile(path):
            tried.append("%s (%s): not found" % (path, how))
            continue
        try:
            loader = importlib.machinery.ExtensionFileLoader("tilerun._ext", path)
            spec = importlib.util.spec_from_file_location("tilerun._ext", path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            sys.modules["tilerun._ext"] = module
            return module
        except ImportError as e:
            tried.append("%s (%s): %s" % (path, how, e))
    raise ImportError(
        "tilerun: cannot load the extension tilerun._ext; looked at:\n  " + "\n  ".join(tried) +
        "\nBuild it with `bazel build //python:tilerun` or set TILERUN_EXTENSION to its path.")


_ext = _load_extension()

# ---- C types (dlpack/dlpack.h, tilerun/value.h, tilerun/tilerun.h) --------------------------

_c_status_p = ctypes.c_void_p  # tr_status *; NULL (None) is success

kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCM, kDLCUDAManaged = 1, 2, 3, 10, 13
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                 9: "vpi", 10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed",
                 14: "oneapi", 15: "webgpu", 16: "hexagon"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DLDeleter),
]

(TR_VALUE_NONE, TR_VALUE_INT, TR_VALUE_FLOAT, TR_VALUE_BOOL, TR_VALUE_STR, TR_VALUE_DTYPE,
 TR_VALUE_INT_LIST) = range(7)


class _ValueStr(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("len", ctypes.c_size_t)]


class _ValueList(ctypes.Structure):
    _fields_ = [("items", ctypes.POINTER(ctypes.c_int64)), ("len", ctypes.c_size_t)]


class _ValueUnion(ctypes.Union):
    _fields_ = [("i", ctypes.c_int64), ("f", ctypes.c_double), ("b", ctypes.c_bool),
                ("dtype", DLDataType), ("str", _ValueStr), ("list", _ValueList)]


class _Value(ctypes.Structure):  # tr_value
    _fields_ = [("kind", ctypes.c_int), ("as_", _ValueUnion)]


class _NamedValue(ctypes.Structure):  # tr_named_value
    _fields_ = [("name", ctypes.c_char_p), ("value", _Value)]


class _TensorSpec(ctypes.Structure):  # tr_tensor_spec: tr_device (type, index), dtype, rank, shape
    _fields_ = [("device_type", ctypes.c_char * 32), ("device_index", ctypes.c_int32),
                ("dtype", DLDataType), ("rank", ctypes.c_int32), ("shape", ctypes.c_int64 * 8)]


_MAX_RANK = 8


class _RuntimeOptions(ctypes.Structure):  # tr_runtime_options; NULL fields mean defaults
    _fields_ = [
        ("manifest_dir", ctypes.c_char_p),
        ("backend_dirs", ctypes.POINTER(ctypes.c_char_p)),
        ("n_backend_dirs", ctypes.c_size_t),
        ("builtin_names", ctypes.POINTER(ctypes.c_char_p)),
        ("builtin_inits", ctypes.c_void_p),
        ("n_builtins", ctypes.c_size_t),
        ("pipeline_file", ctypes.c_char_p),
        ("warn", ctypes.c_void_p),
        ("warn_ctx", ctypes.c_void_p),
    ]


def _bind(name, restype, argtypes, required=True):
    """The C function `name`, typed; None when it is missing and not required."""
    fn = getattr(_lib, name, None)
    if fn is None:
        if required:
            raise ImportError("tilerun: %s does not export %s (rebuild //python:libtilerun.so)"
                              % (library_path, name))
        return None
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_vp, _sz, _cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
# status.h
_tr_code_name = _bind("tr_code_name", _cp, [ctypes.c_int])
_tr_code_is_signature_error = _bind("tr_code_is_signature_error", ctypes.c_int, [ctypes.c_int])
_tr_status_code = _bind("tr_status_code", ctypes.c_int, [_vp])
_tr_status_message = _bind("tr_status_message", _cp, [_vp])
_tr_status_destroy = _bind("tr_status_destroy", None, [ctypes.POINTER(_vp)])
# dtype.h
_tr_dtype_name = _bind("tr_dtype_name", _cp, [DLDataType])
# tilerun.h
_tr_version = _bind("tr_version", _cp, [], required=False)
# The loaded library's version (include/tilerun/version.h); "unknown" for a library before it.
__version__ = _tr_version().decode() if _tr_version is not None else "unknown"
_tr_runtime_new = _bind("tr_runtime_new", _c_status_p,
                        [ctypes.POINTER(_RuntimeOptions), ctypes.POINTER(_vp)])
_tr_runtime_destroy = _bind("tr_runtime_destroy", None, [ctypes.POINTER(_vp)])
_tr_op_new = _bind("tr_op_new", _c_status_p,
                   [_vp, _cp, ctypes.POINTER(_NamedValue), _sz, _cp, ctypes.POINTER(_vp)])
_tr_op_target = _bind("tr_op_target", _cp, [_vp])
_tr_op_memo_count = _bind("tr_op_memo_count", _sz, [_vp])
_tr_op_request_tune = _bind("tr_op_request_tune", _c_status_p, [_vp], required=False)
_tr_op_kernel_config = _bind("tr_op_kernel_config", _sz, [_vp, ctypes.POINTER(ctypes.POINTER(_NamedValue))],
                             required=False)
_tr_registered_targets = _bind("tr_registered_targets", _sz,
                               [_vp, _cp, ctypes.POINTER(_cp), _sz], required=False)
_tr_set_default_target = _bind("tr_set_default_target", _c_status_p, [_vp, _cp],
                               required=False)
_tr_default_target = _bind("tr_default_target", _cp, [_vp], required=False)
_tr_load_failure_count = _bind("tr_load_failure_count", _sz, [_vp], required=False)
_tr_load_failure_backend = _bind("tr_load_failure_backend", _cp, [_vp, _sz], required=False)
_tr_load_failure_reason = _bind("tr_load_failure_reason", _cp, [_vp, _sz], required=False)
_tr_runtime_empty = _bind("tr_runtime_empty", _c_status_p,
                          [_vp, ctypes.POINTER(DLTensor), ctypes.POINTER(_vp)], required=False)
_tr_runtime_launch_remote = _bind("tr_runtime_launch_remote", ctypes.c_int, [_vp], required=False)
_tr_cuda_set_stream = _bind("tr_cuda_set_stream", _c_status_p, [ctypes.c_int32, _vp])
_tr_cuda_stream = _bind("tr_cuda_stream", _vp, [ctypes.c_int32])
# inspect.h, op_def.h: the manifest's ops, read from the runtime's own manifest (each op's input
# and output names: tr_op_call needs room for every output).
_tr_runtime_manifest_dir = _bind("tr_runtime_manifest_dir", _cp, [_vp])
_tr_runtime_op_count = _bind("tr_runtime_op_count", _sz, [_vp])
_tr_runtime_op_at = _bind("tr_runtime_op_at", _vp, [_vp, _sz])
_tr_runtime_find_op = _bind("tr_runtime_find_op", _vp, [_vp, _cp])
_tr_op_def_name = _bind("tr_op_def_name", _cp, [_vp])
_tr_op_def_doc = _bind("tr_op_def_doc", _cp, [_vp])
_tr_op_def_is_composite = _bind("tr_op_def_is_composite", ctypes.c_int, [_vp])
_tr_op_def_param_count = _bind("tr_op_def_param_count", _sz, [_vp])
_tr_op_def_input_count = _bind("tr_op_def_input_count", _sz, [_vp])
_tr_op_def_input_name = _bind("tr_op_def_input_name", _cp, [_vp, _sz])
_tr_op_def_input_optional = _bind("tr_op_def_input_optional", ctypes.c_int, [_vp, _sz])
_tr_op_def_input_mutated = _bind("tr_op_def_input_mutated", ctypes.c_int, [_vp, _sz])
_tr_op_def_output_count = _bind("tr_op_def_output_count", _sz, [_vp])
_tr_op_def_output_name = _bind("tr_op_def_output_name", _cp, [_vp, _sz])
_tr_op_def_workload_count = _bind("tr_op_def_workload_count", _sz, [_vp])
_tr_op_def_workload_label = _bind("tr_op_def_workload_label", _cp, [_vp, _sz])
_tr_op_def_workload = _bind("tr_op_def_workload", _c_status_p,
                            [_vp, _sz, ctypes.c_void_p, ctypes.POINTER(_TensorSpec),
                             ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(_NamedValue),
                             ctypes.POINTER(_sz)])
# inspect.h
_tr_op_output_specs = _bind("tr_op_output_specs", _c_status_p,
                            [_vp, ctypes.POINTER(ctypes.POINTER(_TensorSpec)), _sz,
                             ctypes.POINTER(_TensorSpec), ctypes.POINTER(ctypes.c_uint8), _sz],
                            required=False)
_tr_device_parse = _bind("tr_device_parse", _c_status_p, [_cp, ctypes.c_void_p])

_pythonapi = ctypes.pythonapi
_PyCapsule_GetPointer = _pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_PyCapsule_IsValid = _pythonapi.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_PyCapsule_New = _pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_DLTENSOR = b"dltensor"  # the capsule name (kept alive here: capsules point at it)


def _name_bytes(value, what, none_ok=False):
    """A name argument (an op's, a target's) as the C API takes it: a TypeError for what is not
    a str (None too, unless `none_ok`), a ValueError for a NUL inside (C would end the name there)."""
    if value is None and none_ok:
        return None
    if not isinstance(value, str):
        raise TypeError("tilerun: %s is a str, got %r (%s)" % (what, value, type(value).__name__))
    if "\0" in value:
        raise ValueError("tilerun: %s %r holds a NUL character" % (what, value))
    return value.encode()


# ---- errors ----------------------------------------------------------------------------------


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


class Error(Exception):
    """A failed tilerun call. Each kind of failure is a subclass named as its status code
    (status.h) that also derives from the closest Python built-in, so ``except ValueError`` or
    ``except OSError`` catch what they would catch elsewhere. ``e.code`` is the code's printed
    name (``"SignatureError(shape)"``, ``"OpNotAvailableError"``); ``code_number`` its number;
    ``message`` the text tilerun wrote, which is also ``str(e)`` (the class names the kind once)."""

    def __new__(cls, code, message, code_number=None):
        # The built-in base that lays the object out makes it (OSError's __new__ for IOError,
        # Exception's for MemoryError's kind, whose own __new__ refuses a class that mixes it in),
        # from the message alone, as OSError would read (code, message, number) as errno fields.
        base = cls
        while base.__flags__ & _HEAPTYPE:
            base = base.__base__
        return base.__new__(cls, message)

    def __init__(self, code, message, code_number=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.code_number = code_number

    def __str__(self):
        return self.message

    @property
    def is_signature_error(self):
        """True for the signature errors (dtype, shape, param, device)."""
        return self.code.startswith("SignatureError")


class SignatureError(Error):
    """A call or a param breaks the op's signature: codes SignatureError(dtype), (shape),
    (param) and (device), raised as the four subclasses below."""


class SignatureDtypeError(SignatureError, TypeError):
    """A tensor's dtype is not what the signature allows (code SignatureError(dtype))."""


class SignatureShapeError(SignatureError, ValueError):
    """A tensor's shape or layout is not what the signature allows (code SignatureError(shape))."""


class SignatureParamError(SignatureError, TypeError):
    """A param is missing, unknown, of the wrong kind or breaks a constraint (code
    SignatureError(param)), as a bad keyword argument is a TypeError."""


class SignatureDeviceError(SignatureError, ValueError):
    """The tensors of a call are not on one device the op allows (code SignatureError(device))."""


class BackendError(Error, RuntimeError):
    """A backend misbehaved: a detector, builder or read failed."""


class UnknownTargetError(Error, LookupError):
    """No backend registered the target named."""


class AmbiguousTargetError(Error, LookupError):
    """Two or more targets claimed the device."""


class OpNotAvailableError(Error, LookupError):
    """The op is not in the manifest, or the settled target does not serve it."""


class SelectionError(Error, LookupError):
    """No in-tree implementation, or more than one, serves a call."""


class InvalidValueError(Error, ValueError):
    """A value is out of its allowed range (code ValueError): a kernel's own value error, an
    argument the C API refused, or "no implementation serves this call". Catchable as Python's
    ValueError, as the spec's selection tests catch it."""


class ManifestError(Error, ValueError):
    """A manifest or configuration file is malformed."""


class TransportError(Error, ConnectionError):
    """A component could not be reached or answered badly."""


class CompileError(Error, RuntimeError):
    """A kernel failed to compile."""


class InternalError(Error, RuntimeError):
    """A bug in tilerun."""


class OutOfMemoryError(Error, MemoryError):
    """Memory ran out (host or device; code OutOfMemoryError)."""


class IOError(Error, OSError):  # noqa: A001 (tilerun.IOError: the code's name; an OSError)
    """A file or the operating system failed (code IOError)."""


_ERROR_CLASSES = {c.__name__: c for c in (
    BackendError, UnknownTargetError, AmbiguousTargetError, OpNotAvailableError, SelectionError,
    ManifestError, TransportError, CompileError, InternalError, OutOfMemoryError, IOError)}
_ERROR_CLASSES.update({"ValueError": InvalidValueError, "SignatureError": SignatureError,
                       "SignatureError(dtype)": SignatureDtypeError,
                       "SignatureError(shape)": SignatureShapeError,
                       "SignatureError(param)": SignatureParamError,
                       "SignatureError(device)": SignatureDeviceError})


def _error_from(status):
    """The exception for a non-NULL tr_status *, which it frees."""
    code = _tr_status_code(status)
    name = (_tr_code_name(code) or b"UnknownCode").decode()
    message = (_tr_status_message(status) or b"").decode("utf-8", "replace")
    p = ctypes.c_void_p(status)
    _tr_status_destroy(ctypes.byref(p))
    cls = _ERROR_CLASSES.get(name) or _ERROR_CLASSES.get(name.split("(")[0], Error)
    return cls(name, message, code)


def _check(status):
    if status:
        raise _error_from(status)


# ---- dtypes ----------------------------------------------------------------------------------

# tilerun's names (dtype.h) and DLPack's (code, bits, lanes).
_DTYPES = {
    "float16": (2, 16, 1), "bfloat16": (4, 16, 1), "float32": (2, 32, 1),
    "float64": (2, 64, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1),
    "int64": (0, 64, 1), "uint8": (1, 8, 1), "bool": (6, 8, 1),
    "float8_e4m3": (10, 8, 1), "float8_e5m2": (12, 8, 1),
}
_DTYPE_ALIASES = {"half": "float16", "float": "float32", "double": "float64",
                  "float8_e4m3fn": "float8_e4m3", "bool_": "bool", "short": "int16",
                  "int": "int32", "long": "int64"}


class dtype:
    """A tilerun dtype by name: ``tilerun.dtype("bfloat16")``. Params also take torch dtypes
    and numpy dtypes or scalar types, mapped by name."""

    __slots__ = ("name",)

    def __init__(self, name):
        if isinstance(name, dtype):
            name = name.name
        key = _DTYPE_ALIASES.get(name, name)
        if key not in _DTYPES:
            raise ValueError("tilerun: unknown dtype %r; known dtypes: %s"
                             % (name, ", ".join(_DTYPES)))
        self.name = key

    @property
    def dl(self):
        """DLPack's (code, bits, lanes)."""
        return _DTYPES[self.name]

    def __eq__(self, other):
        if isinstance(other, str):
            other = _DTYPE_ALIASES.get(other, other)
            return self.name == other
        return isinstance(other, dtype) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return "tilerun.dtype(%r)" % self.name

    def __str__(self):
        return self.name


_dtype_class = dtype  # for functions whose `dtype` argument hides the class


def _as_dtype_name(value):
    """The dtype name of a tilerun.dtype, torch.dtype or numpy dtype / scalar type; else None."""
    if isinstance(value, dtype):
        return value.name
    cls = type(value)
    module = getattr(cls, "__module__", "") or ""
    if module == "torch" and cls.__name__ == "dtype":  # torch.float16 prints "torch.float16"
        return str(value).split(".", 1)[-1]
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, np.dtype):
            return value.name
        if isinstance(value, type) and issubclass(value, np.generic):
            return np.dtype(value).name
    return None


def _dl_dtype_name(dt):
    name = _tr_dtype_name(dt)
    if name:
        return name.decode()
    return "dtype(code=%d, bits=%d, lanes=%d)" % (dt.code, dt.bits, dt.lanes)


def _value_to_py(v):
    """A tr_value as Python: None, int, float, bool, str, a tilerun.dtype or a tuple of ints."""
    if v.kind == TR_VALUE_INT:
        return int(v.as_.i)
    if v.kind == TR_VALUE_FLOAT:
        return float(v.as_.f)
    if v.kind == TR_VALUE_BOOL:
        return bool(v.as_.b)
    if v.kind == TR_VALUE_STR:
        return ctypes.string_at(v.as_.str.data, v.as_.str.len).decode()
    if v.kind == TR_VALUE_DTYPE:
        return dtype(_dl_dtype_name(v.as_.dtype))
    if v.kind == TR_VALUE_INT_LIST:
        return tuple(v.as_.list.items[i] for i in range(v.as_.list.len))
    return None


def _spec_of(t):
    """A _TensorSpec of `t`: a tensor (its .shape, .dtype and .device; NumPy's are on the cpu) or
    a (shape, dtype, device) tuple."""
    if isinstance(t, tuple) and len(t) == 3:
        shape, dt, device = t
    else:
        shape, dt = t.shape, t.dtype
        device = getattr(t, "device", "cpu")
    name = _as_dtype_name(dt) or (dt if isinstance(dt, str) else None)
    if name is None:
        raise TypeError("tilerun: %r is not a dtype" % (dt,))
    shape = tuple(int(n) for n in shape)
    if len(shape) > _MAX_RANK:
        raise ValueError("tilerun: rank %d is above the most a tensor may have (%d)"
                         % (len(shape), _MAX_RANK))
    spec = _TensorSpec()
    _check(_tr_device_parse(str(device).encode(), ctypes.addressof(spec)))
    spec.dtype = DLDataType(*_dtype_class(name).dl)
    spec.rank = len(shape)
    for i, n in enumerate(shape):
        spec.shape[i] = n
    return spec


def _spec_tuple(spec):
    """(shape, dtype name, device) of a _TensorSpec."""
    device = spec.device_type.decode()
    if spec.device_index >= 0:
        device = "%s:%d" % (device, spec.device_index)
    return (tuple(spec.shape[i] for i in range(spec.rank)), _dl_dtype_name(spec.dtype), device)


# ---- params ----------------------------------------------------------------------------------


def _is_numpy_bool(v):
    """numpy.bool_ (numpy.bool in NumPy 2): a bool, though it also has __index__."""
    return type(v).__module__ == "numpy" and type(v).__name__ in ("bool_", "bool")


def _fill_value(name, v, slot, keep, op="tilerun"):
    """Fills the tr_value `slot` from the Python value v (param `name` of `op`, for messages);
    buffers it points to go into `keep`. NumPy's scalars and 1-d integer arrays are taken as the
    Python values they hold; an int past int64 as a float (a float param's value; an int param
    refuses it by kind)."""
    where = "%s: param %r" % (op, name)
    if type(v).__module__ == "numpy" and not isinstance(v, type):
        if _is_numpy_bool(v):  # before its __index__
            v = bool(v)
        elif getattr(v, "ndim", None) == 1 and hasattr(v, "tolist"):
            v = v.tolist()  # a 1-d array: the list it holds (checked as any list below)
        elif getattr(v, "ndim", None) == 0 and hasattr(v, "item"):
            v = v.item()  # a NumPy scalar or 0-d array
    if v is None:
        slot.kind = TR_VALUE_NONE
    elif isinstance(v, bool):  # before int: bool is an int
        slot.kind = TR_VALUE_BOOL
        slot.as_.b = v
    elif isinstance(v, int):
        if -2**63 <= v < 2**63:
            slot.kind = TR_VALUE_INT
            slot.as_.i = v
        else:
            try:
                as_float = float(v)
            except OverflowError:
                raise OverflowError("%s: an int of %d bits fits neither int64 nor a double"
                                    % (where, v.bit_length())) from None
            slot.kind = TR_VALUE_FLOAT  # a float param takes it; an int param says it got a float
            slot.as_.f = as_float
    elif isinstance(v, float):
        slot.kind = TR_VALUE_FLOAT
        slot.as_.f = v
    elif isinstance(v, str):
        data = v.encode("utf-8")
        buf = ctypes.create_string_buffer(data, len(data) + 1)
        keep.append(buf)
        slot.kind = TR_VALUE_STR
        slot.as_.str.data = ctypes.cast(buf, ctypes.c_char_p)
        slot.as_.str.len = len(data)
    elif isinstance(v, (list, tuple)):
        items = []
        for item in v:
            if isinstance(item, bool) or not isinstance(item, int):
                if hasattr(item, "__index__") and not isinstance(item, (bool, type)) and not _is_numpy_bool(item):
                    item = item.__index__()  # numpy integers
                else:
                    raise TypeError("%s: a list param holds ints only; got %r (%s)"
                                    % (where, item, type(item).__name__))
            if not -2**63 <= item < 2**63:
                raise OverflowError("%s: an int of %d bits does not fit in int64" % (where, item.bit_length()))
            items.append(item)
        arr = (ctypes.c_int64 * max(len(items), 1))(*items)
        keep.append(arr)
        slot.kind = TR_VALUE_INT_LIST
        slot.as_.list.items = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
        slot.as_.list.len = len(items)
    else:
        dt = _as_dtype_name(v)
        if dt is not None:
            code, bits, lanes = dtype(dt).dl
            slot.kind = TR_VALUE_DTYPE
            slot.as_.dtype = DLDataType(code, bits, lanes)
        elif not isinstance(v, type) and hasattr(v, "__index__"):  # integers of other libraries
            _fill_value(name, v.__index__(), slot, keep, op)
        else:
            what = "the type %s" % v.__name__ if isinstance(v, type) else "a value of type %s" % type(v).__name__
            raise TypeError(
                "%s: cannot pass %s; params are None, bool, int, float, str, a list or tuple of "
                "ints, or a dtype (a name, tilerun.dtype, or a NumPy or torch dtype)" % (where, what))


# ---- streams ---------------------------------------------------------------------------------


def _device_index(value, fn, lo=0, hi=63):
    """A cuda device index as the C API takes it (int32): a TypeError for what is not an
    integer, a ValueError outside lo..hi (ctypes would wrap one past int32 silently)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("tilerun.%s: a device index is an int, got %r (%s)" % (fn, value, type(value).__name__))
    index = value.__index__()
    if not lo <= index <= hi:
        raise ValueError("tilerun.%s: device index %d is outside 0..63" % (fn, index))
    return index


def set_stream(device_index, handle):
    """Sets the calling thread's current stream for cuda device `device_index`: where tilerun
    launches and allocates outputs. An output goes back, when freed, on the stream it was made
    on, so that stream must outlive the outputs made on it (keep the torch Stream object alive),
    and work on another stream that reads an output must be ordered before the output is freed.
    `handle` is a CUstream / cudaStream_t as an int (torch:
    ``torch.cuda.current_stream().cuda_stream``; 0 means the legacy default stream and is passed
    to tilerun as its handle 0x1), or None for the per-thread default stream."""
    if handle is not None:
        handle = int(handle)
        if handle == 0:
            handle = 1  # CU_STREAM_LEGACY: tilerun reads NULL as the per-thread default stream
    # tr_cuda_set_stream refuses an index outside 0..63 itself (its ValueError)
    _check(_tr_cuda_set_stream(_device_index(device_index, "set_stream", -2**31, 2**31 - 1), handle))


def stream(device_index):
    """The calling thread's current stream for cuda device `device_index`, as an int handle;
    None for the per-thread default stream (tilerun's default)."""
    return _tr_cuda_stream(_device_index(device_index, "stream"))


def _dlpack_stream(device_index):
    """The stream argument a consumer on tilerun's current stream passes to __dlpack__ (DLPack's
    Python spec: 1 legacy default, 2 per-thread default, else the handle)."""
    h = stream(device_index)
    return 2 if not h else h


class _Cuda:
    """The few CUDA driver calls a DLPack export across streams needs (libcuda via ctypes)."""

    _lib = None

    @classmethod
    def lib(cls):
        if cls._lib is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise BufferError("tilerun: cannot load libcuda.so.1 to order streams: %s" % e)
            for fn, args in (("cuInit", [ctypes.c_uint]),
                             ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
                             ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(_vp), ctypes.c_int]),
                             ("cuDevicePrimaryCtxRelease_v2", [ctypes.c_int]),
                             ("cuCtxPushCurrent_v2", [_vp]),
                             ("cuCtxPopCurrent_v2", [ctypes.POINTER(_vp)]),
                             ("cuEventCreate", [ctypes.POINTER(_vp), ctypes.c_uint]),
                             ("cuEventRecord", [_vp, _vp]),
                             ("cuStreamWaitEvent", [_vp, _vp, ctypes.c_uint]),
                             ("cuEventDestroy_v2", [_vp])):
                f = getattr(lib, fn)
                f.restype = ctypes.c_int
                f.argtypes = args
            cls._lib = lib
        return cls._lib

    @classmethod
    def order(cls, device_index, producer, consumer):
        """Makes stream `consumer` wait for the work queued so far on stream `producer`."""
        lib = cls.lib()

        def ok(rc, what):
            if rc != 0:
                raise BufferError("tilerun: %s failed (CUresult %d)" % (what, rc))

        ok(lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        ok(lib.cuDeviceGet(ctypes.byref(dev), device_index), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        ok(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        try:
            ok(lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
            try:
                ev = ctypes.c_void_p()
                ok(lib.cuEventCreate(ctypes.byref(ev), 2), "cuEventCreate")  # DISABLE_TIMING
                try:
                    ok(lib.cuEventRecord(ev, producer), "cuEventRecord")
                    ok(lib.cuStreamWaitEvent(consumer, ev, 0), "cuStreamWaitEvent")
                finally:
                    lib.cuEventDestroy_v2(ev)
            finally:
                lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        finally:
            lib.cuDevicePrimaryCtxRelease_v2(dev)


# ---- outputs: tilerun.Tensor -----------------------------------------------------------------


# A capsule still named "dltensor" was never consumed: its DLManagedTensor is still ours. The
# destructor is the extension's, in C: it may run while an exception propagates, where a ctypes
# callback (Python) may not.
_capsule_destructor_ptr = _ext.capsule_destructor

# Runtimes that handed out an output not in cpu memory: its deleter may need the runtime's
# allocator (a backend's), so such a runtime is never destroyed.
_immortal_runtimes = set()


# NumPy's typestr per tilerun dtype (little-endian; NumPy has no bfloat16).
_NUMPY_TYPESTR = {"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2",
                  "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
                  "float16": "<f2", "float32": "<f4", "float64": "<f8"}


class Tensor:
    """An output tilerun allocated (or :meth:`Runtime.empty` made): a DLManagedTensor it owns
    until exported. A DLPack producer (``__dlpack__``, ``__dlpack_device__``):
    ``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)``, ``cupy.from_dlpack(t)`` take it without
    a copy. It can be exported once (DLPack's capsule holds the one DLManagedTensor), and not
    after ``numpy.asarray(t)`` made a view of it (the view relies on the Tensor for its memory);
    until then it can also be passed to another op's call. Unexported, it is freed with the
    Tensor."""

    __slots__ = ("_managed", "_runtime", "_stream", "_viewed", "__weakref__")

    def __init__(self, managed, runtime, producer_stream=None):
        self._managed = managed  # POINTER(DLManagedTensor), None once exported or freed
        self._runtime = runtime  # keeps the allocator's runtime alive while the Tensor owns it
        self._stream = producer_stream  # cuda: the stream the data was written on (1/2/handle)
        self._viewed = False  # a NumPy view was made through __array_interface__

    def _t(self):
        if self._managed is None:
            raise BufferError("tilerun.Tensor: already exported through __dlpack__")
        return self._managed.contents.dl_tensor

    @property
    def shape(self):
        t = self._t()
        return tuple(t.shape[i] for i in range(t.ndim))

    @property
    def strides(self):
        """In elements; None means contiguous (row-major)."""
        t = self._t()
        return tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None

    @property
    def dtype(self):
        """The dtype's name (``"float32"``)."""
        return _dl_dtype_name(self._t().dtype)

    @property
    def device(self):
        """``"cpu"``, ``"cuda:0"``...: DLPack's device type and index."""
        d = self._t().device
        name = _DEVICE_NAMES.get(d.device_type, "dl%d" % d.device_type)
        return name if d.device_type == kDLCPU else "%s:%d" % (name, d.device_id)

    @property
    def data_ptr(self):
        t = self._t()
        return (t.data or 0) + t.byte_offset

    @property
    def __array_interface__(self):
        """NumPy's array interface for a cpu tensor: ``numpy.asarray(t)`` is a writable view
        that keeps `t` (and so its memory) alive. Other devices have none (AttributeError); a
        cpu dtype NumPy lacks (bfloat16, float8) is a TypeError, so that ``numpy.asarray`` says
        so rather than making an object array."""
        t = self._t()
        if t.device.device_type != kDLCPU:
            raise AttributeError("tilerun.Tensor on %s has no NumPy array interface" % self.device)
        typestr = _NUMPY_TYPESTR.get(self.dtype)
        if typestr is None:
            raise TypeError("tilerun.Tensor of dtype %s: NumPy has no such dtype" % self.dtype)
        shape = self.shape
        strides = self.strides
        bytes_per = t.dtype.bits * t.dtype.lanes // 8
        self._viewed = True  # the view keeps this Tensor, and so its memory: no export from now
        return {"version": 3, "shape": shape, "typestr": typestr, "data": (self.data_ptr, False),
                "strides": None if strides is None else tuple(x * bytes_per for x in strides)}

    def __array__(self, dtype=None, copy=None):
        """Reached by NumPy only where the array interface is missing: a tensor on a device."""
        raise TypeError("tilerun.Tensor on %s: NumPy reads cpu memory only (torch.from_dlpack or "
                        "cupy.from_dlpack take it)" % self.device)

    def __dlpack_device__(self):
        d = self._t().device
        return (int(d.device_type), int(d.device_id))

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """Hands the data over as a "dltensor" capsule (DLPack's unversioned form, also when
        `max_version` is given). For a cuda tensor, `stream` (the consumer's: 1 legacy
        default, 2 per-thread default, a handle; None read as 1; -1: no ordering) is made to
        wait for the stream tilerun wrote the data on, when it is another."""
        t = self._t()
        if self._viewed:
            raise BufferError("tilerun.Tensor: a NumPy view of it exists (numpy.asarray), which would "
                              "outlive the memory once exported; export a copy instead")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("tilerun.Tensor: cannot export to device %r (it is on %s)"
                              % (tuple(dl_device), self.device))
        if copy:
            raise BufferError("tilerun.Tensor: copy=True is not supported")
        if t.device.device_type in (kDLCUDA, kDLCUDAManaged) and stream != -1:
            consumer = 1 if stream is None else int(stream)
            producer = self._stream if self._stream is not None else 2
            # The legacy (1) and per-thread (2) default streams order work between themselves.
            if consumer != producer and {consumer, producer} != {1, 2}:
                _Cuda.order(int(t.device.device_id), producer, consumer)
        m = self._managed
        capsule = _PyCapsule_New(ctypes.cast(m, ctypes.c_void_p), _DLTENSOR,
                                 _capsule_destructor_ptr)
        if t.device.device_type != kDLCPU and self._runtime is not None:
            _immortal_runtimes.add(self._runtime)
            self._runtime._ref.keep()
        self._managed = None
        self._runtime = None
        return capsule

    def _free(self):
        m, self._managed = self._managed, None
        if m is not None and m.contents.deleter:
            m.contents.deleter(m)

    def __del__(self):
        if getattr(self, "_managed", None) is not None and not sys.is_finalizing():
            self._free()

    def __repr__(self):
        if self._managed is None:
            return "tilerun.Tensor(<exported>)"
        return "tilerun.Tensor(shape=%s, dtype=%s, device=%s)" % (self.shape, self.dtype,
                                                                  self.device)


# ---- runtimes --------------------------------------------------------------------------------


def _locked(method):
    """A Runtime method that uses its tr_runtime * under its lock, so that close() (which takes
    the lock too) never destroys it under the call."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return run


class Runtime:
    """A tilerun runtime (tr_runtime_new): the manifest, loaded now, and the backends,
    discovered when the first op is made.

    manifest_dir: the folder of the manifest's *.yaml; None: $TILERUN_MANIFEST_DIR, else the
    installed one (``share/tilerun/manifest`` under the library's prefix: an install, or the pip
    package), else ``manifest/spec`` (relative to the working directory). backend_dirs: folders to search for
    backends (a list, or one string); None: $TILERUN_BACKEND_PATH, then the install prefix's.
    pipeline_file: the pipeline placing the components; None: $TILERUN_PIPELINE, else inline.
    Raises Error (ManifestError, IOError...) when the manifest cannot be loaded."""

    def __init__(self, manifest_dir=None, backend_dirs=None, pipeline_file=None):
        self.manifest_dir = None if manifest_dir is None else os.fspath(manifest_dir)
        if isinstance(backend_dirs, (str, bytes, os.PathLike)):
            backend_dirs = [backend_dirs]
        self.backend_dirs = None if backend_dirs is None else [os.fspath(d) for d in backend_dirs]
        self._rt = None
        opts = _RuntimeOptions()
        keep = []
        if self.manifest_dir is not None:
            mdir = os.fsencode(self.manifest_dir)
            keep.append(mdir)
            opts.manifest_dir = mdir
        if self.backend_dirs is not None:
            arr = (ctypes.c_char_p * max(len(self.backend_dirs), 1))(
                *[os.fsencode(d) for d in self.backend_dirs])
            keep.append(arr)
            opts.backend_dirs = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
            opts.n_backend_dirs = len(self.backend_dirs)
        if pipeline_file is not None:
            pf = os.fsencode(pipeline_file)
            keep.append(pf)
            opts.pipeline_file = pf
        rt = ctypes.c_void_p()
        _check(_tr_runtime_new(ctypes.byref(opts), ctypes.byref(rt)))
        try:
            # destroys the tr_runtime * after this object's release and its last op, in either order
            self._ref = _ext.RuntimeRef(rt.value)
        except BaseException:
            _tr_runtime_destroy(ctypes.byref(rt))
            raise
        self._rt = rt
        # the folder the runtime chose when none was given (tr_runtime_manifest_dir)
        self.manifest_dir = os.fsdecode(_tr_runtime_manifest_dir(rt))
        self._defs = {}
        self._lock = threading.RLock()
        self._ops = weakref.WeakSet()  # the ops made from it, closed with it
        self._closed = False

    def _handle(self):
        if self._rt is None or self._closed:
            raise ValueError("tilerun: the runtime is closed")
        return self._rt

    def _op_def(self, name):
        """(input names, which are optional, output names, composite, doc, which inputs the op
        writes in place) of op `name`, or None when the manifest has no such op."""
        with self._lock:
            if name not in self._defs:
                d = _tr_runtime_find_op(self._handle(), _name_bytes(name, "an op's name"))
                if not d:
                    return None
                n_in, n_out = _tr_op_def_input_count(d), _tr_op_def_output_count(d)
                self._defs[name] = (
                    tuple(_tr_op_def_input_name(d, i).decode() for i in range(n_in)),
                    tuple(bool(_tr_op_def_input_optional(d, i)) for i in range(n_in)),
                    tuple(_tr_op_def_output_name(d, i).decode() for i in range(n_out)),
                    bool(_tr_op_def_is_composite(d)),
                    (_tr_op_def_doc(d) or b"").decode(),
                    tuple(bool(_tr_op_def_input_mutated(d, i)) for i in range(n_in)))
            return self._defs[name]

    @_locked
    def op_names(self):
        """The names of the manifest's ops, sorted."""
        rt = self._handle()
        return [_tr_op_def_name(_tr_runtime_op_at(rt, i)).decode()
                for i in range(_tr_runtime_op_count(rt))]

    def op_info(self, name):
        """(input names, which are optional, output names, composite, which inputs the op
        writes in place) of op `name`; a LookupError names an op the manifest lacks."""
        info = self._op_def(name)
        if info is None:
            raise LookupError("tilerun: the manifest (%s) has no op %r" % (self.manifest_dir, name))
        return info[:4] + (info[5],)

    @_locked
    def workloads(self, name, device="cpu"):
        """The manifest's workload rows of op `name` on `device`: a list of (label, inputs,
        params), inputs as ``(shape, dtype name, device)`` or None (an absent optional input),
        params a dict as :func:`op` takes them."""
        d = _tr_runtime_find_op(self._handle(), _name_bytes(name, "an op's name"))
        if not d:
            raise LookupError("tilerun: the manifest (%s) has no op %r" % (self.manifest_dir, name))
        dev = _TensorSpec()  # its leading tr_device
        _check(_tr_device_parse(str(device).encode(), ctypes.addressof(dev)))
        n_in = _tr_op_def_input_count(d)
        rows = []
        for i in range(_tr_op_def_workload_count(d)):
            specs = (_TensorSpec * max(n_in, 1))()
            has = (ctypes.c_uint8 * max(n_in, 1))()
            n_params = _sz(_tr_op_def_param_count(d))
            params = (_NamedValue * max(n_params.value, 1))()
            _check(_tr_op_def_workload(d, i, ctypes.addressof(dev), specs, has, params,
                                       ctypes.byref(n_params)))
            rows.append((_tr_op_def_workload_label(d, i).decode(),
                         [_spec_tuple(specs[k]) if has[k] else None for k in range(n_in)],
                         {params[k].name.decode(): _value_to_py(params[k].value)
                          for k in range(n_params.value)}))
        return rows

    @property
    @_locked
    def launches_remotely(self):
        """True when this runtime's pipeline places launch in another process: its calls then
        reach only tensors in memory that process can map (see :meth:`empty`)."""
        return bool(_tr_runtime_launch_remote(self._handle()))

    @_locked
    def empty(self, shape, dtype="float32", device="cpu"):
        """A new, uninitialised, contiguous :class:`Tensor`, made as this runtime makes outputs:
        with launch in another process, a cpu tensor is in shared memory that process maps. So
        NumPy data reaches a launch process this way::

            x = numpy.asarray(rt.empty((8, 4096), "float32"))  # writable, shared
            x[...] = data
            y = rt.op("RMSNormFwdOp", normalized_shape=(4096,))(x)

        `dtype`: a name, tilerun.dtype, numpy or torch dtype. `device`: ``"cpu"`` or
        ``"cuda:N"``. Raises Error for what tilerun cannot allocate, ValueError for a bad
        shape, dtype or device."""
        if _tr_runtime_empty is None:
            raise ImportError("tilerun: %s has no tr_runtime_empty (rebuild //python:libtilerun.so)"
                              % library_path)
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError("tilerun: empty(): a negative size in shape %r" % (shape,))
        name = _as_dtype_name(dtype) or (dtype if isinstance(dtype, str) else None)
        if name is None:
            raise ValueError("tilerun: empty(): %r is not a dtype" % (dtype,))
        code, bits, lanes = _dtype_class(name).dl
        kind, _, index = str(device).partition(":")
        types = {"cpu": kDLCPU, "cuda": kDLCUDA}
        if kind not in types or (index and not index.isdigit()) or (kind == "cpu" and index):
            raise ValueError("tilerun: empty(): device %r is not 'cpu' or 'cuda:N'" % (device,))
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        like = DLTensor()
        like.data = None
        like.device = DLDevice(types[kind], int(index or 0))
        like.ndim = len(shape)
        like.dtype = DLDataType(code, bits, lanes)
        like.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
        like.strides = None
        like.byte_offset = 0
        out = ctypes.c_void_p()
        _check(_tr_runtime_empty(self._handle(), ctypes.byref(like), ctypes.byref(out)))
        m = ctypes.cast(out, ctypes.POINTER(DLManagedTensor))
        return Tensor(m, self, _dlpack_stream(int(index or 0)) if kind == "cuda" else None)

    def op(self, name, target=None, **params):
        """An op instance of this runtime: see :func:`tilerun.op`."""
        return Op(name, target=target, runtime=self, **params)

    @_locked
    def registered_targets(self, op_name=None):
        """The registered targets, sorted (with `op_name`: those with a builder for it)."""
        op_b = _name_bytes(op_name, "an op's name", none_ok=True)
        n = _tr_registered_targets(self._handle(), op_b, None, 0)
        names = (ctypes.c_char_p * max(n, 1))()
        n = _tr_registered_targets(self._handle(), op_b, names, n)
        return [names[i].decode() for i in range(n)]

    @_locked
    def set_default_target(self, target):
        """The process default target ahead of device detection (a name, "<builtin>", or None
        to clear)."""
        _check(_tr_set_default_target(self._handle(), _name_bytes(target, "a target", none_ok=True)))

    @_locked
    def default_target(self):
        t = _tr_default_target(self._handle())
        return t.decode() if t else None

    @_locked
    def load_failures(self):
        """Backends that failed to load: a list of (backend, reason)."""
        rt = self._handle()
        return [(_tr_load_failure_backend(rt, i).decode(), _tr_load_failure_reason(rt, i).decode())
                for i in range(_tr_load_failure_count(rt))]

    def close(self):
        """Closes the runtime and every op made from it (their later use raises "the op is
        closed"); the runtime is destroyed at once, or, where a call of one of its ops still runs,
        when that call returns. Only needed to free it early. A
        runtime that handed out outputs outside cpu memory stays alive (their deleters use its
        allocator)."""
        with self._lock:
            self._closed = True
            for o in list(self._ops):
                o.close()
            # an op whose call still runs (in another thread, or the caller of this one) keeps
            # its tr_op until that call returns: the runtime goes after it (RuntimeRef)
            self._destroy()

    def _destroy(self):
        """Lets go of the tr_runtime *, once: destroyed now, or after the last op made from it
        (never for a runtime in _immortal_runtimes)."""
        if self._rt is not None and self not in _immortal_runtimes:
            self._rt = None
            self._ref.release()

    def __del__(self):
        if not sys.is_finalizing() and getattr(self, "_rt", None) is not None:
            self._destroy()


_default_runtime = None
_default_lock = threading.Lock()


def default_runtime():
    """The runtime :func:`op` uses when none is given, made at first use with the defaults
    ($TILERUN_MANIFEST_DIR, $TILERUN_BACKEND_PATH, read then)."""
    global _default_runtime
    with _default_lock:
        if _default_runtime is None:
            _default_runtime = Runtime()
        return _default_runtime


# ---- ops -------------------------------------------------------------------------------------


def _framework(obj):
    """"torch", "numpy" or None, from the type's module (never imports either)."""
    module = type(obj).__module__ or ""
    root = module.split(".", 1)[0]
    if root == "torch":
        return "torch"
    if root == "numpy":
        return "numpy"
    return None


def _borrow(t, keep):
    """The DLTensor * of tensor `t` for a call; what must live until the call returns goes in
    `keep`. A tilerun.Tensor passes its own DLManagedTensor (nothing is exported)."""
    if isinstance(t, Tensor):
        t._t()  # raises once exported
        keep.append(t)
        return ctypes.cast(t._managed, ctypes.c_void_p).value
    if not hasattr(t, "__dlpack__"):
        raise TypeError("tilerun: a tensor must be None or support DLPack (__dlpack__); got %s"
                        % type(t).__name__)
    device_type, device_id = None, 0
    if hasattr(t, "__dlpack_device__"):
        device_type, device_id = t.__dlpack_device__()
        device_type = int(device_type)
    if device_type in (kDLCUDA, kDLCUDAManaged):
        # The consumer names its stream and the producer orders its pending work before it
        # (DLPack's Python spec). tilerun's per-thread default stream (2) is named as the legacy
        # default stream (1): some producers refuse 2 (torch), and the per-thread default stream
        # waits for work queued on the legacy one, so the order holds. With torch inputs the
        # stream is torch's current one (see _sync_torch_streams): no synchronization at all.
        s = _dlpack_stream(int(device_id))
        # torch exports a cuda tensor with a stream only while its device is the current one
        guard = (sys.modules["torch"].cuda.device(int(device_id)) if _framework(t) == "torch"
                 else contextlib.nullcontext())
        with guard:
            try:
                capsule = t.__dlpack__(stream=1 if s == 2 else s)
            except TypeError:  # a producer that takes no stream
                capsule = t.__dlpack__()
    else:
        capsule = t.__dlpack__()  # cpu and others: no stream (numpy refuses one)
    keep.append(capsule)
    try:
        p = _PyCapsule_GetPointer(capsule, _DLTENSOR)
    except ValueError:
        raise TypeError("tilerun: %s.__dlpack__() did not return an unused \"dltensor\" capsule"
                        % type(t).__name__) from None
    keep.append(t)
    return p  # &managed->dl_tensor: dl_tensor is the first member


def _sync_torch_streams(tensors):
    """For torch cuda inputs: tilerun's current stream for each device becomes torch's (so
    tilerun runs in order with torch, also under torch.cuda.graph capture)."""
    done = set()
    for t in tensors:
        if t is None or _framework(t) != "torch" or not getattr(t, "is_cuda", False):
            continue
        index = t.device.index if t.device.index is not None else 0
        if index in done:
            continue
        done.add(index)
        import torch
        set_stream(index, torch.cuda.current_stream(index).cuda_stream)


class Op(_ext.OpBase):
    """An op instance (tr_op_new): the op `name` from the manifest with its params checked and
    defaults applied. ``target``: None decides by the first call's device; a backend target's
    name; or ``"<builtin>"`` for the in-tree kernels.

    ``op(*tensors)`` runs it on tensors in the manifest's input order (None for an absent
    optional input) and returns its output (several: a tuple, with None for an output that does
    not exist for this call). Outputs are the first given input's kind: a torch tensor, a numpy
    array, else a :class:`Tensor`. With torch cuda inputs, tilerun's current stream for their
    device is first set to torch's current stream (and stays so), so that the call is ordered
    with torch's work, also under CUDA graph capture. ``op.call_into(inputs, outputs)`` writes
    into caller-given outputs (a tensor or a sequence, in the manifest's output order, None for
    an output that does not exist for the call), each of the shape and dtype the manifest
    infers, contiguous, on the call's device, and returns `outputs`. Both raise Error on a
    rejected or failed call; both run in C (tilerun._ext), and release the GIL while a kernel
    may block (a cpu kernel, a launch in another process)."""

    def __init__(self, name, target=None, runtime=None, **params):
        self._op = None
        name_b = _name_bytes(name, "an op's name")
        target_b = _name_bytes(target, "a target", none_ok=True)
        if runtime is not None and not isinstance(runtime, Runtime):
            raise TypeError("tilerun: runtime is a tilerun.Runtime or None, got %r (%s)"
                            % (runtime, type(runtime).__name__))
        self.runtime = runtime if runtime is not None else default_runtime()
        self.name = name
        self.params = dict(params)
        info = self.runtime._op_def(name)
        if info is None:
            # tr_op_new names the op and says why (not in the manifest).
            info = ((), (), (), False, "", ())
        self.input_names, self._optional, self.output_names, self._composite, doc = info[:5]
        self.__doc__ = doc or Op.__doc__
        n = len(params)
        values = (_NamedValue * max(n, 1))()
        keep = []
        for i, (key, v) in enumerate(params.items()):
            kb = key.encode()
            keep.append(kb)
            values[i].name = kb
            _fill_value(key, v, values[i].value, keep, name)
        op = ctypes.c_void_p()
        with self.runtime._lock:  # Runtime.close closes the runtime's ops: none made meanwhile
            _check(_tr_op_new(self.runtime._handle(), name_b, values, n, target_b, ctypes.byref(op)))
            self._op = op  # tr_op_new copied the values: `keep` may go
            # The C side owns the tr_op * from here (it destroys it, after any call still running).
            mutated = sum(1 << i for i, m in enumerate(info[5]) if m and i < 64)
            self._bind(op.value, len(self.output_names), self.runtime,
                       bool(_tr_runtime_launch_remote(self.runtime._handle()))
                       if _tr_runtime_launch_remote is not None else False,
                       (name, tuple(self.input_names), tuple(self.output_names)), mutated)
            self.runtime._ops.add(self)

    @contextlib.contextmanager
    def _using(self):
        """The tr_op * held as a call holds it (a close meanwhile waits for the block); a closed
        op raises "the op is closed" (_enter)."""
        address = self._enter()
        try:
            yield ctypes.c_void_p(address)
        finally:
            self._leave()

    @property
    def target(self):
        """The settled target (a name or "<builtin>"), or None while none is settled."""
        with self._using() as h:
            t = _tr_op_target(h)
        return t.decode() if t else None

    @property
    def memo_count(self):
        """How many kernels the op has built and keeps."""
        with self._using() as h:
            return _tr_op_memo_count(h)

    def request_tune(self):
        """Tuned mode: asks every kernel built so far, and each one built later, to tune."""
        with self._using() as h:
            _check(_tr_op_request_tune(h))

    def kernel_config(self):
        """The config of the first kernel the op built that has one (a composite op: its
        steps'), as a dict of name to value ({} when none): e.g. the implementation chosen, and
        what tuning settled."""
        arr = ctypes.POINTER(_NamedValue)()
        with self._using() as h:
            n = _tr_op_kernel_config(h, ctypes.byref(arr))
            return {arr[i].name.decode(): _value_to_py(arr[i].value) for i in range(n)}

    def output_specs(self, *inputs):
        """What a call with these inputs would make, without running anything (no target, no
        kernel: the manifest's own inference, tr_op_output_specs): per output, None when it does
        not exist for the call, else ``(shape, dtype name, device)``. Inputs in the manifest's
        order: tensors (read for their .shape, .dtype and .device only: torch fake tensors do),
        ``(shape, dtype, device)`` tuples, or None. A call the manifest refuses raises the
        SignatureError tr_op_call would."""
        if _tr_op_output_specs is None:
            raise ImportError("tilerun: %s has no tr_op_output_specs" % library_path)
        specs = [None if t is None else _spec_of(t) for t in inputs]
        ptrs = (ctypes.POINTER(_TensorSpec) * max(len(specs), 1))(
            *[None if sp is None else ctypes.pointer(sp) for sp in specs])
        n_out = max(len(self.output_names), 1)
        outs = (_TensorSpec * n_out)()
        present = (ctypes.c_uint8 * n_out)()
        with self._using() as h:
            _check(_tr_op_output_specs(h, ptrs, len(specs), outs, present, len(self.output_names)))
        return [_spec_tuple(outs[i]) if present[i] else None for i in range(len(self.output_names))]

    def close(self):
        """Destroys the op now (else when it is collected); a call still running in another
        thread finishes first."""
        if self._op is not None:
            self._op = None
            self._close()

    def __del__(self):
        if not sys.is_finalizing() and getattr(self, "_op", None) is not None:
            self.close()

    def __repr__(self):
        params = ", ".join("%s=%r" % kv for kv in self.params.items())
        return "tilerun.op(%r%s)" % (self.name, ", " + params if params else "")


def _wrap_output(address, first, runtime):
    """An output of tr_op_call (a DLManagedTensor * the caller now owns) as the first given
    input's kind: a numpy array for numpy, else a tilerun.Tensor (torch's go through the C
    exchange API in tilerun._ext)."""
    m = ctypes.cast(address, ctypes.POINTER(DLManagedTensor))
    dev = m.contents.dl_tensor.device
    producer = None
    if dev.device_type in (kDLCUDA, kDLCUDAManaged):
        producer = _dlpack_stream(int(dev.device_id))
    return _convert(Tensor(m, runtime, producer), first)


def _convert(out, first):
    """An output as the framework of the call's first given input (torch, numpy), else as is."""
    if out is None:
        return None
    fw = _framework(first) if first is not None else None
    if fw == "torch":
        import torch
        return torch.from_dlpack(out)
    if fw == "numpy":
        import numpy
        return numpy.from_dlpack(out)
    return out


def op(name, target=None, runtime=None, **params):
    """Makes an op instance: ``tilerun.op("RMSNormFwdOp", normalized_shape=(4096,))``.

    Params by name, as the manifest declares them: None, bool, int, float, str, a list or tuple
    of ints, or a dtype (a torch dtype, a numpy dtype or scalar type, or ``tilerun.dtype``).
    `target`: None (decide by the first call's device), a backend target's name, or
    "<builtin>". `runtime`: None for :func:`default_runtime`. Raises Error: an op not in the
    manifest (OpNotAvailableError), a bad param (SignatureError(param)), an unregistered target
    (UnknownTargetError); a param of a type with no tilerun kind is a TypeError."""
    return Op(name, target=target, runtime=runtime, **params)


def empty(shape, dtype="float32", device="cpu"):
    """:meth:`Runtime.empty` on :func:`default_runtime`."""
    return default_runtime().empty(shape, dtype, device)


BUILTIN = "<builtin>"


def _address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


_ext.setup({
    "tr_op_call": _address(_lib.tr_op_call),
    "tr_op_call_into": _address(_lib.tr_op_call_into),
    "tr_cuda_set_stream": _address(_tr_cuda_set_stream),
    "tr_op_destroy": _address(_lib.tr_op_destroy),
    "tr_runtime_destroy": _address(_lib.tr_runtime_destroy),
    # tr_now_ns, tilerun's clock, for the benchmarks' loop in C (_ext._bench_call*); optional
    "tr_now_ns": _address(_lib.tr_now_ns) if hasattr(_lib, "tr_now_ns") else None,
    "error_from": _error_from,
    "borrow": _borrow,
    "sync_streams": _sync_torch_streams,
    "wrap_output": _wrap_output,
    "immortal": _immortal_runtimes,
})
