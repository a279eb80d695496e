"""The Python binding on the cpu backend, with numpy arrays (unittest).

Under Bazel (`bazel test //python:binding_cpu_test`) the library, the cpu backend and the
manifest come from the runfiles. Run directly (`python3 python/tests/test_binding_cpu.py`, after
`bazel build //python:libtilerun.so //backends/cpu:installed`), it uses the repository's
bazel-bin/ and manifest/spec, unless TILERUN_LIBRARY, TILERUN_BACKEND_PATH or
TILERUN_MANIFEST_DIR say otherwise.
"""

import gc
import os
import re
import sys
import threading
import time
import unittest

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.normpath(os.path.join(_HERE, os.pardir, os.pardir))


def _setup_paths():
    srcdir = os.environ.get("TEST_SRCDIR")
    workspace = os.environ.get("TEST_WORKSPACE", "tilerun")  # WORKSPACE: name = "tilerun"
    if srcdir and os.path.isdir(os.path.join(srcdir, workspace)):
        # Under Bazel: the runfiles hold the built files beside the sources.
        root = os.path.join(srcdir, workspace)
        os.environ["TILERUN_BACKEND_PATH"] = os.path.join(root, "backends", "cpu")
        os.environ["TILERUN_MANIFEST_DIR"] = os.path.join(root, "manifest", "spec")
    else:
        # Run by hand: the repository's bazel-bin and manifest, unless the caller set them.
        sys.path.insert(0, os.path.join(_REPO, "python"))
        os.environ.setdefault("TILERUN_BACKEND_PATH",
                              os.path.join(_REPO, "bazel-bin", "backends", "cpu"))
        os.environ.setdefault("TILERUN_MANIFEST_DIR", os.path.join(_REPO, "manifest", "spec"))


_setup_paths()

import tilerun  # noqa: E402  (after the paths are set)
from producer import Producer  # noqa: E402  (beside this file)


def rms_norm_ref(x, weight, eps):
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight.astype(np.float64)
    return y


def layer_norm_ref(x, weight, bias, eps):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y


def softmax_ref(x, axis=-1):
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")




class BindingCpuTest(unittest.TestCase):
    RTOL = 1e-5
    ATOL = 1e-6

    def setUp(self):
        self.rng = np.random.default_rng(1234)

    def randn(self, *shape, dtype=np.float32):
        return self.rng.standard_normal(shape).astype(dtype)

    def assertClose(self, got, want, rtol=None, atol=None):
        self.assertIsInstance(got, np.ndarray)
        self.assertEqual(got.shape, want.shape)
        np.testing.assert_allclose(got.astype(np.float64), want,
                                   rtol=rtol or self.RTOL, atol=atol or self.ATOL)

    # ---- ops against float64 references ----

    def test_version_is_the_headers(self):
        here = os.path.dirname(os.path.abspath(__file__))
        header = os.path.join(here, "..", "..", "include", "tilerun", "version.h")
        if not os.path.exists(header):  # under Bazel: the runfiles' copy
            header = os.path.join(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE", ""),
                                  "include", "tilerun", "version.h")
        with open(header) as f:
            want = re.search(r'#define TILERUN_VERSION "([^"]+)"', f.read()).group(1)
        self.assertEqual(tilerun.__version__, want)
        self.assertRegex(tilerun.__version__, r"^\d+\.\d+\.\d+$")

    def test_rms_norm(self):
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        x, w = self.randn(8, 64), self.randn(64)
        y = op(x, w)
        self.assertEqual(y.dtype, np.float32)
        self.assertClose(y, rms_norm_ref(x, w, 1e-6))
        self.assertEqual(op.target, "cpu")
        self.assertEqual(op.memo_count, 1)
        self.assertEqual(op.input_names, ("x", "weight"))
        self.assertEqual(op.output_names, ("y",))

    def test_rms_norm_without_weight(self):
        op = tilerun.op("RMSNormFwdOp", normalized_shape=[64], eps=1e-6)
        x = self.randn(3, 5, 64)
        self.assertClose(op(x, None), rms_norm_ref(x, None, 1e-6))
        self.assertClose(op(x), rms_norm_ref(x, None, 1e-6))  # trailing optional left out

    def test_rms_norm_default_eps(self):
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,))  # eps None: finfo(float32).eps
        x = self.randn(4, 64)
        self.assertClose(op(x), rms_norm_ref(x, None, float(np.finfo(np.float32).eps)))

    def test_layer_norm(self):
        op = tilerun.op("LayerNormFwdOp", normalized_shape=(128,), eps=1e-5)
        x, w, b = self.randn(16, 128), self.randn(128), self.randn(128)
        self.assertClose(op(x, w, b), layer_norm_ref(x, w, b, 1e-5))
        self.assertClose(op(x, None, b), layer_norm_ref(x, None, b, 1e-5))
        self.assertClose(op(x, w, None), layer_norm_ref(x, w, None, 1e-5))
        self.assertClose(op(x, None, None), layer_norm_ref(x, None, None, 1e-5))

    def test_softmax(self):
        op = tilerun.op("SoftmaxFwdOp", dim=-1)
        x = self.randn(8, 100) * 4
        self.assertClose(op(x), softmax_ref(x))
        op0 = tilerun.op("SoftmaxFwdOp", dim=0)
        self.assertClose(op0(x), softmax_ref(x, axis=0))

    # ---- edge values: the manifest's reference semantics (torch's), stated in its entries ----

    def assertSame(self, got, want):
        """NaN where want is NaN, the same infinities, the rest within tolerance."""
        self.assertEqual(got.shape, want.shape)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-6, atol=1e-6)

    def test_softmax_edge_values(self):
        inf, nan = np.inf, np.nan
        x = np.array([[-inf, -inf, -inf, -inf],   # all -inf: NaN, as torch
                      [-inf, 0.0, -inf, 0.0],     # -inf elements 0
                      [1.0, nan, 2.0, 3.0],       # a NaN: the row NaN
                      [nan, -inf, -inf, -inf],
                      [1.0, inf, 2.0, 3.0],       # +inf: inf - inf, NaN
                      [-inf, inf, 0.0, 0.0]], np.float32)
        want = np.array([[nan] * 4, [0, 0.5, 0, 0.5], [nan] * 4, [nan] * 4, [nan] * 4,
                         [nan] * 4])
        for dtype in (np.float32, np.float16):
            self.assertSame(tilerun.op("SoftmaxFwdOp", dim=-1)(x.astype(dtype)), want)
            self.assertSame(tilerun.op("SoftmaxFwdOp", dim=0)(np.ascontiguousarray(x.T)), want.T)

    def test_norm_edge_values(self):
        inf, nan = np.inf, np.nan
        x = np.array([[1.0, inf, 2.0, 3.0], [-inf, 1.0, 1.0, 1.0], [1.0, nan, 2.0, 3.0],
                      [0.0, 0.0, 0.0, 0.0]], np.float32)
        w = np.array([1.0, 2.0, -1.0, 0.5], np.float32)
        rms = tilerun.op("RMSNormFwdOp", normalized_shape=(4,), eps=1e-6)
        self.assertSame(rms(x, w), np.array([[0, nan, 0, 0], [nan, 0, 0, 0], [nan] * 4,
                                             [0, 0, 0, 0]]))
        b = np.array([0.25, -1.0, 0.0, 3.0], np.float32)
        ln = tilerun.op("LayerNormFwdOp", normalized_shape=(4,), eps=1e-5)
        x[3] = 5.0  # a constant row: the bias
        self.assertSame(ln(x, w, b), np.array([[nan] * 4, [nan] * 4, [nan] * 4,
                                               [0.25, -1.0, 0.0, 3.0]]))

    def test_add_edge_values(self):
        inf, nan = np.inf, np.nan
        a = np.array([inf, inf, nan, 1.0, -inf], np.float32)
        b = np.array([-inf, inf, 1.0, nan, 1.0], np.float32)
        self.assertSame(tilerun.op("AddFwdOp")(a, b), np.array([nan, inf, nan, nan, -inf]))

    def test_empty_tensors_and_rows(self):
        for shape in ((0, 8), (4, 0)):
            x = np.zeros(shape, np.float32)
            self.assertEqual(tilerun.op("SoftmaxFwdOp", dim=-1)(x).shape, shape)
            self.assertEqual(tilerun.op("AddFwdOp")(x, x).shape, shape)
            n = shape[1]
            self.assertEqual(tilerun.op("RMSNormFwdOp", normalized_shape=(n,))(x).shape, shape)
            self.assertEqual(tilerun.op("LayerNormFwdOp", normalized_shape=(n,))(x).shape, shape)

    def test_softmax_dtype_param(self):
        x = self.randn(4, 33)
        for dt in (np.float32, np.dtype("float32"), tilerun.dtype("float32")):
            y = tilerun.op("SoftmaxFwdOp", dim=-1, dtype=dt)(x)
            self.assertEqual(y.dtype, np.float32)
            self.assertClose(y, softmax_ref(x))

    def test_add_float32(self):
        op = tilerun.op("AddFwdOp", alpha=2.0)
        a, b = self.randn(7, 9), self.randn(7, 9)
        self.assertClose(op(a, b), a.astype(np.float64) + 2.0 * b.astype(np.float64))

    def test_add_int64(self):
        op = tilerun.op("AddFwdOp", alpha=2.0)
        a = self.rng.integers(-1000, 1000, size=(5, 11), dtype=np.int64)
        b = self.rng.integers(-1000, 1000, size=(5, 11), dtype=np.int64)
        c = op(a, b)
        self.assertEqual(c.dtype, np.int64)
        np.testing.assert_array_equal(c, a + 2 * b)
        np.testing.assert_array_equal(tilerun.op("AddFwdOp", alpha=2)(a, b), a + 2 * b)

    # ---- layouts and optional inputs ----

    def test_strided_inputs_match_contiguous(self):
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        base = self.randn(64, 16)
        xt = base.T  # (16, 64), transposed strides
        self.assertFalse(xt.flags.c_contiguous)
        np.testing.assert_array_equal(op(xt), op(np.ascontiguousarray(xt)))
        wide = self.randn(10, 128)
        xs = wide[:, ::2]  # every other column
        np.testing.assert_array_equal(op(xs), op(xs.copy()))
        self.assertClose(op(xs), rms_norm_ref(xs, None, 1e-6))
        add = tilerun.op("AddFwdOp", alpha=2.0)
        a, b = self.randn(12, 8).T, self.randn(24, 12)[::3]
        np.testing.assert_array_equal(add(a, b), add(a.copy(), b.copy()))

    def test_omitted_optional_input(self):
        op = tilerun.op("LayerNormFwdOp", normalized_shape=(32,))
        x, b = self.randn(4, 32), self.randn(32)
        self.assertClose(op(x, None, b), layer_norm_ref(x, None, b, 1e-5))

    # ---- outputs of other producers: tilerun.Tensor ----

    def test_tensor_output(self):
        op = tilerun.op("AddFwdOp")
        a, b = self.randn(3, 4), self.randn(3, 4)
        t = op(Producer(a), b)
        self.assertIsInstance(t, tilerun.Tensor)
        self.assertEqual(t.shape, (3, 4))
        self.assertEqual(t.dtype, "float32")
        self.assertEqual(t.device, "cpu")
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        # A Tensor passed back in is borrowed, not exported.
        t2 = op(t, b)
        self.assertEqual(t.shape, (3, 4))
        np.testing.assert_allclose(np.from_dlpack(t2), a + 2 * b, rtol=1e-6)
        np.testing.assert_allclose(np.from_dlpack(t), a + b, rtol=1e-6)
        with self.assertRaises(BufferError):
            t.__dlpack__()  # exported once already

    def test_call_into(self):
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        x = self.randn(5, 64)
        out = np.full((5, 64), np.nan, np.float32)
        ret = op.call_into([x, None], [out])
        self.assertIs(ret[0], out)
        self.assertClose(out, rms_norm_ref(x, None, 1e-6))
        out[:] = np.nan
        self.assertIs(op.call_into([x], out), out)  # one output: given bare
        self.assertClose(out, rms_norm_ref(x, None, 1e-6))
        bad = np.zeros((5, 63), np.float32)
        with self.assertRaises(tilerun.Error) as cm:
            op.call_into([x], [bad])
        self.assertTrue(cm.exception.is_signature_error)

    # ---- errors ----

    def test_wrong_shape_is_signature_error(self):
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        with self.assertRaises(tilerun.Error) as cm:
            op(self.randn(4, 63))
        e = cm.exception
        self.assertIsInstance(e, tilerun.SignatureError)
        self.assertTrue(e.code.startswith("SignatureError"), e.code)
        self.assertEqual(e.code, "SignatureError(shape)")
        self.assertIn("'x'", e.message)
        with self.assertRaises(tilerun.Error) as cm:
            op(self.randn(4, 64), self.randn(32))
        self.assertIn("'weight'", cm.exception.message)

    def test_wrong_dtype_is_signature_error(self):
        op = tilerun.op("AddFwdOp")
        with self.assertRaises(tilerun.SignatureError) as cm:
            op(self.randn(3, 3), self.randn(3, 3, dtype=np.float64))
        self.assertEqual(cm.exception.code, "SignatureError(dtype)")

    def test_errors_derive_from_the_closest_builtin_and_name_the_kind_once(self):
        op = tilerun.op("AddFwdOp")
        cases = [  # (call, tilerun class, built-in class, code)
            (lambda: op(self.randn(3, 3), self.randn(3, 4)), tilerun.SignatureShapeError, ValueError,
             "SignatureError(shape)"),
            (lambda: op(self.randn(3, 3), self.randn(3, 3, dtype=np.float64)), tilerun.SignatureDtypeError, TypeError,
             "SignatureError(dtype)"),
            (lambda: tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps="small"), tilerun.SignatureParamError,
             TypeError, "SignatureError(param)"),
            (lambda: tilerun.op("NoSuchFwdOp"), tilerun.OpNotAvailableError, LookupError, "OpNotAvailableError"),
            (lambda: tilerun.Runtime(manifest_dir="/nonexistent/manifest"), tilerun.Error, Exception, None),
        ]
        for call, cls, builtin, code in cases:
            with self.assertRaises(cls) as cm:
                call()
            e = cm.exception
            self.assertIsInstance(e, builtin)
            self.assertIsInstance(e, tilerun.Error)
            if code is not None:
                self.assertEqual(e.code, code)
            self.assertEqual(str(e), e.message)  # the kind is the class's name, not repeated in the text
            self.assertFalse(str(e).startswith(e.code), str(e))
        self.assertTrue(issubclass(tilerun.IOError, OSError))
        self.assertTrue(issubclass(tilerun.OutOfMemoryError, MemoryError))
        self.assertTrue(issubclass(tilerun.InvalidValueError, ValueError))
        self.assertTrue(issubclass(tilerun.TransportError, ConnectionError))

    def test_call_into_output_of_the_wrong_dtype_says_so(self):
        op = tilerun.op("AddFwdOp")
        a, b = self.randn(3, 3), self.randn(3, 3)
        with self.assertRaises(tilerun.SignatureDtypeError) as cm:
            op.call_into([a, b], [np.zeros((3, 3), np.float64)])
        self.assertIn("output 'c' given is float64; the call makes float32[3, 3]", str(cm.exception))
        with self.assertRaises(tilerun.SignatureShapeError) as cm:
            op.call_into([a, b], [np.zeros((3, 4), np.float32)])
        self.assertIn("output 'c' given has shape [3, 4]", str(cm.exception))

    def test_unknown_op(self):
        with self.assertRaises(tilerun.Error) as cm:
            tilerun.op("NoSuchFwdOp")
        self.assertIn("NoSuchFwdOp", str(cm.exception))
        self.assertEqual(cm.exception.code, "OpNotAvailableError")

    def test_bad_param_type(self):
        with self.assertRaises(tilerun.Error) as cm:
            tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps="small")
        self.assertEqual(cm.exception.code, "SignatureError(param)")
        self.assertIn("eps", cm.exception.message)
        with self.assertRaises(tilerun.SignatureError):
            tilerun.op("RMSNormFwdOp", normalized_shape=(64,), epsilon=1e-6)  # unknown param
        with self.assertRaises(TypeError):
            tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=object())
        with self.assertRaises(TypeError):
            tilerun.op("RMSNormFwdOp", normalized_shape=(64, "a"))

    def test_params_from_numpy_and_their_errors(self):
        x = np.ones((2, 64), np.float32)
        # NumPy's scalars and 1-d integer arrays are the values they hold
        rms = tilerun.op("RMSNormFwdOp", normalized_shape=np.array([64]), eps=np.float32(1e-5))
        np.testing.assert_allclose(rms(x, None), x, rtol=1e-4)
        a, b = np.arange(6, dtype=np.float32).reshape(3, 2), np.arange(12, dtype=np.float32).reshape(3, 4)
        gemm = tilerun.op("GemmFwdOp", trans_a=np.bool_(True))  # a bool, not the int 1 it also is
        np.testing.assert_allclose(gemm(a, b), a.T @ b, rtol=1e-6)
        np.testing.assert_allclose(tilerun.op("SoftmaxFwdOp", dim=np.int64(-1))(x), softmax_ref(x), rtol=1e-6)
        # each error names the op and the param
        cases = [
            (dict(normalized_shape=[64.0]), TypeError,
             "RMSNormFwdOp: param 'normalized_shape': a list param holds ints only; got 64.0 (float)"),
            (dict(normalized_shape=(64,), eps=object()), TypeError,
             "RMSNormFwdOp: param 'eps': cannot pass a value of type object; params are None, bool, int, "
             "float, str, a list or tuple of ints, or a dtype (a name, tilerun.dtype, or a NumPy or torch "
             "dtype)"),
            (dict(normalized_shape=(64,), eps=bool), TypeError, "RMSNormFwdOp: param 'eps': cannot pass the type bool"),
            (dict(normalized_shape=(64,), eps=10 ** 400), OverflowError,
             "RMSNormFwdOp: param 'eps': an int of 1329 bits fits neither int64 nor a double"),
        ]
        for params, kind, text in cases:
            with self.assertRaises(kind) as caught:
                tilerun.op("RMSNormFwdOp", **params)
            self.assertTrue(str(caught.exception).startswith(text), str(caught.exception))
        # an int past int64 is a float: a float param takes it, an int param says what it got
        tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=10 ** 30)
        with self.assertRaisesRegex(tilerun.SignatureParamError, "param 'dim' expects int, got .*\\(float\\)"):
            tilerun.op("SoftmaxFwdOp", dim=2 ** 70)

    def test_unknown_target(self):
        with self.assertRaises(tilerun.UnknownTargetError):
            tilerun.op("AddFwdOp", target="no-such-target")

    def test_not_a_tensor(self):
        with self.assertRaises(TypeError):
            tilerun.op("AddFwdOp")([1, 2], [3, 4])

    def test_dtype_names(self):
        self.assertEqual(tilerun.dtype("bfloat16").dl, (4, 16, 1))
        self.assertEqual(tilerun.dtype("float32"), "float32")
        with self.assertRaises(ValueError):
            tilerun.dtype("floot32")

    # ---- the runtime ----

    def test_explicit_runtime(self):
        rt = tilerun.Runtime(manifest_dir=os.environ["TILERUN_MANIFEST_DIR"],
                             backend_dirs=[os.environ["TILERUN_BACKEND_PATH"]])
        op = rt.op("AddFwdOp")
        a = self.randn(2, 2)
        np.testing.assert_array_equal(op(a, a), a + a)
        self.assertIn("cpu", rt.registered_targets("AddFwdOp"))
        self.assertEqual(rt.load_failures(), [])

    def test_bad_manifest_dir(self):
        with self.assertRaises(tilerun.Error) as cm:
            tilerun.Runtime(manifest_dir="/nonexistent/manifest")
        self.assertIn("/nonexistent/manifest", str(cm.exception))

    # ---- streams ----

    def test_streams(self):
        self.assertIsNone(tilerun.stream(0))  # the per-thread default stream
        try:
            tilerun.set_stream(0, 0x1234)
            self.assertEqual(tilerun.stream(0), 0x1234)
            seen = []
            t = threading.Thread(target=lambda: seen.append(tilerun.stream(0)))
            t.start()
            t.join()
            self.assertEqual(seen, [None])  # per calling thread
            tilerun.set_stream(0, 0)  # torch's handle of the legacy default stream
            self.assertEqual(tilerun.stream(0), 1)
        finally:
            tilerun.set_stream(0, None)
        self.assertIsNone(tilerun.stream(0))
        with self.assertRaises(tilerun.Error) as cm:
            tilerun.set_stream(64, None)
        self.assertEqual(cm.exception.code, "ValueError")
        self.assertIn("64", cm.exception.message)
        # past int32 (which ctypes would wrap), or not an int
        with self.assertRaisesRegex(ValueError, "device index 1180591620717411303424 is outside 0..63"):
            tilerun.stream(2 ** 70)
        with self.assertRaisesRegex(ValueError, "outside 0..63"):
            tilerun.set_stream(2 ** 32, None)  # would be device 0 wrapped
        with self.assertRaisesRegex(ValueError, "outside 0..63"):
            tilerun.stream(64)
        with self.assertRaises(TypeError):
            tilerun.stream("0")

    # ---- outputs are freed ----

    def _growth(self, fn, n=10000):
        for _ in range(200):  # warm up: kernels built, allocator pools settled
            fn()
        gc.collect()
        before = rss_bytes()
        for _ in range(n):
            fn()
        gc.collect()
        return rss_bytes() - before

    @unittest.skipIf(os.environ.get("TILERUN_TEST_SANITIZED"),
                     "AddressSanitizer's quarantine holds freed memory, so RSS grows anyway; "
                     "the plain build's run checks this")
    def test_outputs_are_freed(self):
        # Each output is 32x64 float32 (8 KiB): 10000 leaked outputs would be 80 MiB.
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        x = self.randn(32, 64)
        limit = 8 << 20
        grown = self._growth(lambda: op(x))  # numpy outputs
        self.assertLess(grown, limit, "numpy outputs: RSS grew by %d bytes" % grown)
        px = Producer(x)
        grown = self._growth(lambda: op(px))  # tilerun.Tensor outputs, never exported
        self.assertLess(grown, limit, "Tensor outputs: RSS grew by %d bytes" % grown)
        grown = self._growth(lambda: op(px).__dlpack__())  # exported, capsule never consumed
        self.assertLess(grown, limit, "unconsumed capsules: RSS grew by %d bytes" % grown)
        call_into_out = np.empty((32, 64), np.float32)
        grown = self._growth(lambda: op.call_into([x], [call_into_out]))
        self.assertLess(grown, limit, "call_into: RSS grew by %d bytes" % grown)


class ExtensionCpuTest(unittest.TestCase):
    """The call path in C (tilerun._ext): how each kind of tensor is read, that the routes agree,
    and that a call keeps no reference and frees what it borrowed."""

    def setUp(self):
        self.rng = np.random.default_rng(99)

    def test_each_kind_of_tensor_takes_its_route(self):
        from tilerun import _ext
        x = np.ones((2, 3), np.float32)
        self.assertEqual(_ext.route_of(x), "buffer")
        self.assertEqual(_ext.route_of(None), "none")
        self.assertEqual(_ext.route_of(Producer(x)), "dlpack")
        t = tilerun.op("AddFwdOp")(Producer(x), Producer(x))
        self.assertIsInstance(t, tilerun.Tensor)
        self.assertEqual(_ext.route_of(t), "dlpack")
        self.assertTrue(issubclass(tilerun.Op, _ext.OpBase))

    def _both_routes(self, run):
        from tilerun import _ext
        fast = run()
        was = _ext.set_python_route(True)
        try:
            slow = run()
        finally:
            _ext.set_python_route(was)
        return fast, slow

    def test_buffer_and_dlpack_routes_give_identical_results(self):
        rms = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        add = tilerun.op("AddFwdOp")
        x = self.rng.standard_normal((9, 128)).astype(np.float32)[:, ::2]  # strided
        w = self.rng.standard_normal(64).astype(np.float32)
        fast, slow = self._both_routes(lambda: rms(x, w))
        np.testing.assert_array_equal(fast, slow)
        self.assertClose(fast, rms_norm_ref(x, w, 1e-6))
        for dt in (np.float16, np.float32, np.float64, np.int32, np.int64):  # AddFwdOp's dtypes
            a = (self.rng.standard_normal((3, 5)) * 10).astype(dt)
            b = (self.rng.standard_normal((3, 5)) * 10).astype(dt)
            fast, slow = self._both_routes(lambda: add(a, b))
            self.assertEqual(fast.dtype, dt)
            np.testing.assert_array_equal(fast, slow)
            np.testing.assert_array_equal(fast, a + b)
            outs = iter([np.zeros_like(a), np.zeros_like(a)])
            out_fast, out_slow = self._both_routes(lambda: add.call_into((a, b), next(outs)))
            np.testing.assert_array_equal(out_fast, a + b)
            np.testing.assert_array_equal(out_slow, a + b)

    def assertClose(self, got, want):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-6)

    def test_readonly_and_wrong_outputs(self):
        add = tilerun.op("AddFwdOp")
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        a.setflags(write=False)
        np.testing.assert_array_equal(add(a, a), 2 * a)  # a read-only input is fine
        out = np.empty((2, 3), np.float32)
        out.setflags(write=False)
        with self.assertRaises(Exception) as caught:  # numpy itself refuses to export it writable
            add.call_into((a, a), out)
        self.assertIn("read", str(caught.exception).lower())
        with self.assertRaises(tilerun.SignatureDtypeError) as caught:
            add.call_into((a, a), np.empty((2, 3), np.float64))
        self.assertIn("float64", str(caught.exception))
        with self.assertRaises(tilerun.SignatureShapeError):
            add.call_into((a, a), np.empty((3, 2), np.float32))
        with self.assertRaises(TypeError):
            add.call_into((a, [1, 2, 3]), np.empty((2, 3), np.float32))
        with self.assertRaises(TypeError):
            add(a, a, out=a)

    def test_a_call_keeps_no_reference(self):
        add = tilerun.op("AddFwdOp")
        rms = tilerun.op("RMSNormFwdOp", normalized_shape=(4,), eps=1e-6)
        a, b, c = (np.ones((2, 4), np.float32) for _ in range(3))
        w = np.ones(4, np.float32)
        px = Producer(a)
        ins = (a, b)
        before = [sys.getrefcount(o) for o in (a, b, c, w, px, ins, add, rms)]
        for _ in range(1000):
            add.call_into(ins, c)
            add.call_into([a, b], [c])
            add(a, b)
            rms(a, w)
            add(px, px)
            try:
                add.call_into(ins, np.empty((1,), np.float32))
            except tilerun.SignatureShapeError:
                pass
        after = [sys.getrefcount(o) for o in (a, b, c, w, px, ins, add, rms)]
        self.assertEqual(before, after)
        y = add(a, b)
        self.assertEqual(sys.getrefcount(y), 2)  # ours only: the call kept none

    def test_the_type_stubs_cover_the_public_api(self):
        import ast
        stub = os.path.join(os.path.dirname(os.path.abspath(tilerun.__file__)), "__init__.pyi")
        with open(stub) as f:
            tree = ast.parse(f.read())
        names, members = set(), {}
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                members[node.name] |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
            elif isinstance(node, ast.AnnAssign):
                names.add(node.target.id)
        self.assertEqual(sorted(set(tilerun.__all__) - names), [])
        for cls in ("Op", "Runtime", "Tensor"):
            public = {m for m in vars(getattr(tilerun, cls)) if not m.startswith("_")}
            self.assertEqual(sorted(public - members[cls]), [], cls)
        self.assertIn("call_into", members["Op"])
        self.assertIn("__call__", members["Op"])

    def test_numpy_outputs_view_tilerun_memory_through_its_buffer(self):
        add = tilerun.op("AddFwdOp")
        for dt in (np.float16, np.float32, np.float64, np.int32, np.int64):
            a = (self.rng.standard_normal((4, 5)) * 10).astype(dt)
            y = add(a, a)
            self.assertIsInstance(y, np.ndarray)
            self.assertEqual(y.dtype, dt)
            np.testing.assert_array_equal(y, a + a)
            self.assertIsInstance(y.base, memoryview)  # over the extension's owner of the output
            self.assertEqual(type(y.base.obj).__name__, "Output")
            self.assertTrue(y.flags.writeable and y.flags.c_contiguous)
            y[0, 0] = 7
            self.assertEqual(y[0, 0], 7)
            self.assertFalse(np.shares_memory(y, a))
        # the __dlpack__ route's outputs are numpy arrays too (numpy.from_dlpack), equal
        from tilerun import _ext
        a = self.rng.standard_normal((3, 8)).astype(np.float32)
        fast = add(a, a)
        was = _ext.set_python_route(True)
        try:
            slow = add(a, a)
        finally:
            _ext.set_python_route(was)
        np.testing.assert_array_equal(fast, slow)
        self.assertNotEqual(type(slow.base).__name__, "memoryview")

    def test_output_specs_without_running(self):
        rms = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        x = np.ones((3, 64), np.float32)
        self.assertEqual(rms.output_specs(x, None), [((3, 64), "float32", "cpu")])
        self.assertEqual(rms.output_specs(((2, 5, 64), "bfloat16", "cuda:1"), None),
                         [((2, 5, 64), "bfloat16", "cuda:1")])
        self.assertIsNone(rms.target)  # nothing settled, nothing built
        self.assertEqual(rms.memo_count, 0)
        with self.assertRaises(tilerun.SignatureShapeError) as caught:
            rms.output_specs(np.ones((3, 63), np.float32), None)
        with self.assertRaises(tilerun.SignatureShapeError) as called:
            rms(np.ones((3, 63), np.float32))
        self.assertEqual(str(caught.exception), str(called.exception))
        bn = tilerun.op("BatchNormFwdOp")  # inference: mean and rstd do not exist
        specs = bn.output_specs(((8, 4, 2), "float32", "cpu"), ((4,), "float32", "cpu"),
                                ((4,), "float32", "cpu"), None, None)
        self.assertEqual(specs, [((8, 4, 2), "float32", "cpu"), None, None])

    def test_op_names_info_and_workloads(self):
        rt = tilerun.default_runtime()
        names = rt.op_names()
        self.assertEqual(names, sorted(names))
        self.assertIn("RMSNormFwdOp", names)
        inputs, optional, outputs, composite, mutated = rt.op_info("BatchNormFwdOp")
        self.assertEqual(inputs[:3], ("x", "running_mean", "running_var"))
        self.assertEqual(mutated[:3], (False, True, True))
        self.assertTrue(rt.op_info("LinearFwdOp")[3])
        with self.assertRaises(LookupError):
            rt.op_info("NoSuchOp")
        rows = rt.workloads("RMSNormFwdOp", "cuda:0")
        self.assertGreater(len(rows), 2)
        label, specs, params = rows[0]
        self.assertIsInstance(label, str)
        self.assertEqual(specs[0][2], "cuda:0")
        self.assertEqual(params["normalized_shape"], (specs[0][0][-1],))
        bn_rows = rt.workloads("BatchNormFwdOp")
        self.assertTrue(any(p.get("training") is True for _, _, p in bn_rows))
        for _, specs, params in bn_rows:  # each row's specs are a call the manifest accepts
            tilerun.op("BatchNormFwdOp", **params).output_specs(*specs)

    def test_bad_calls_name_what_is_wrong(self):
        add = tilerun.op("AddFwdOp")
        a = np.ones(3, np.float32)
        with self.assertRaisesRegex(TypeError, "an op takes its tensors by position only"):
            add(a, a, out=a)
        with self.assertRaisesRegex(ValueError, r"at most 16 tensors a call, got 17 inputs"):
            add(*([a] * 17))
        with self.assertRaisesRegex(ValueError, r"at most 16 tensors a call, got 16 inputs and 1 outputs"):
            add.call_into([a] * 16, a)
        with self.assertRaisesRegex(TypeError, r"call_into\(inputs, outputs\): 2 arguments, got 1"):
            add.call_into([a, a])
        rt = tilerun.default_runtime()
        with self.assertRaisesRegex(LookupError, "has no op 'NoSuchOp'"):
            rt.workloads("NoSuchOp")
        with self.assertRaisesRegex(LookupError, "has no op 'NoSuchOp'"):
            rt.op_info("NoSuchOp")
        with self.assertRaisesRegex(TypeError, "is not a dtype"):
            add.output_specs(((3,), object(), "cpu"), ((3,), "float32", "cpu"))
        with self.assertRaisesRegex(ValueError, "rank 9 is above the most a tensor may have \\(8\\)"):
            add.output_specs(((1,) * 9, "float32", "cpu"), ((1,) * 9, "float32", "cpu"))
        with self.assertRaises(tilerun.InvalidValueError) as caught:
            add.output_specs(((3,), "float32", "nodevice:x"), ((3,), "float32", "cpu"))
        self.assertIn("nodevice:x", str(caught.exception))

    def test_the_base_type_is_called_through_vectorcall_alike(self):
        # OpBase itself takes vectorcall on every CPython (tilerun.Op, a Python subclass, from
        # 3.12 on; on 3.11 through tp_call): the same results and the same errors
        import ctypes
        from tilerun import _ext
        self.assertTrue(_ext.OpBase.__flags__ & (1 << 11))
        if sys.version_info >= (3, 12):
            self.assertTrue(tilerun.Op.__flags__ & (1 << 11))
        rt = tilerun.default_runtime()
        handle = ctypes.c_void_p()
        tilerun._check(tilerun._tr_op_new(rt._handle(), b"AddFwdOp", (tilerun._NamedValue * 1)(), 0,
                                          None, ctypes.byref(handle)))
        base = _ext.OpBase()
        with self.assertRaisesRegex(ValueError, "closed"):  # not bound yet
            base(np.ones(3, np.float32), np.ones(3, np.float32))
        base._bind(handle.value, 1, rt, False)  # base owns the tr_op * from here
        a = self.rng.standard_normal((2, 5)).astype(np.float32)
        b = self.rng.standard_normal((2, 5)).astype(np.float32)
        np.testing.assert_array_equal(base(a, b), a + b)
        np.testing.assert_array_equal(base(*[a, b]), tilerun.op("AddFwdOp")(a, b))
        # the __dlpack__ route's stream sync gets the inputs as a tuple made for it
        np.testing.assert_array_equal(np.from_dlpack(base(Producer(a), Producer(b))), a + b)
        out = np.zeros_like(a)
        base.call_into([Producer(a), Producer(b)], out)
        np.testing.assert_array_equal(out, a + b)
        with self.assertRaisesRegex(TypeError, "an op takes its tensors by position only"):
            base(a, b, out=a)
        with self.assertRaisesRegex(ValueError, r"at most 16 tensors a call, got 17 inputs"):
            base(*([a] * 17))
        with self.assertRaises(tilerun.SignatureShapeError):
            base(a, np.ones((3, 5), np.float32))
        before = [sys.getrefcount(o) for o in (a, b, base)]
        for _ in range(100):
            base(a, b)
        self.assertEqual(before, [sys.getrefcount(o) for o in (a, b, base)])
        base._close()
        with self.assertRaisesRegex(ValueError, "closed"):
            base(a, b)

    def test_a_closed_op_says_so(self):
        add = tilerun.op("AddFwdOp")
        a = np.ones(3, np.float32)
        add.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            add(a, a)
        with self.assertRaisesRegex(ValueError, "closed"):
            add.call_into((a, a), a)
        add.close()  # twice is fine

    def test_the_gil_goes_during_a_cpu_call(self):
        # A cpu GEMM of 512^3 takes milliseconds. With a switch interval of 10 s the interpreter
        # never takes the GIL from a thread that holds it; a thread that ticks and sleeps can
        # then tick during the GEMMs only if the call lets the GIL go.
        gemm = tilerun.op("GemmFwdOp")
        a = np.ones((512, 512), np.float32)
        gemm(a, a)
        stop = threading.Event()
        ticks = [0]

        def tick():
            while not stop.is_set():
                ticks[0] += 1
                time.sleep(0.0002)

        t = threading.Thread(target=tick)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(10.0)
        try:
            t.start()
            time.sleep(0.02)
            start = ticks[0]
            t0 = time.perf_counter()
            for _ in range(20):
                gemm(a, a)
            took = time.perf_counter() - t0
            during = ticks[0] - start
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(interval)
        self.assertGreater(during, 5, "the sleeping thread ticked %d times during 20 GEMMs (%.0f ms)"
                           % (during, took * 1e3))


class MisuseCpuTest(unittest.TestCase):
    """Calls a careless or hostile caller makes: each an error naming what is wrong, no crash, no
    memory written that the caller did not give to be written, and the op usable after."""

    def run_child(self, code):
        """Runs `code` in a fresh interpreter (a crash is seen, not suffered); its output."""
        import subprocess
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        proc = subprocess.run([sys.executable, "-c", "import numpy as np, tilerun\n" + code],
                              capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return proc.stdout

    def test_closing_a_runtime_closes_its_ops(self):
        rt = tilerun.Runtime()
        add = rt.op("AddFwdOp")
        a = np.ones(3, np.float32)
        np.testing.assert_array_equal(add(a, a), 2 * a)
        rt.close()
        for use in (lambda: add(a, a), lambda: add.target, lambda: rt.op("AddFwdOp")):
            with self.assertRaisesRegex(ValueError, "closed"):
                use()
        rt.close()  # twice is fine

    def test_closing_the_runtime_during_a_call_waits_for_it(self):
        rt = tilerun.Runtime()
        add = rt.op("AddFwdOp")

        class Closer(Producer):  # closes the runtime while the call borrows it
            def __dlpack__(self, *args, **kwargs):
                rt.close()
                return super().__dlpack__(*args, **kwargs)

        a = np.ones(4, np.float32)
        np.testing.assert_array_equal(add(a, Closer(a)), 2 * a)  # the running call finishes
        with self.assertRaisesRegex(ValueError, "closed"):
            add(a, a)

    def test_a_cycle_through_a_runtime_and_its_op_is_collected(self):
        import weakref
        rt = tilerun.Runtime()
        add = rt.op("AddFwdOp")
        a = np.ones(3, np.float32)
        np.testing.assert_array_equal(add(a, a), 2 * a)
        ref = rt._ref
        self.assertEqual((ref.alive, ref.users), (True, 1))
        rt.held, add.held = add, rt  # op -> runtime -> op, as an object holding both may make
        gone = (weakref.ref(rt), weakref.ref(add))
        del rt, add
        gc.collect()
        self.assertEqual([w() for w in gone], [None, None])  # collected, not leaked
        self.assertEqual((ref.alive, ref.users), (False, 0))

    def test_a_runtime_let_go_before_its_op_goes_after_it(self):
        # the order a cycle's collection may finalize them in: the runtime's release first
        rt = tilerun.Runtime()
        add = rt.op("AddFwdOp")
        ref = rt._ref
        rt._destroy()
        self.assertEqual((ref.alive, ref.users), (True, 1))  # its op still holds it
        a = np.ones(3, np.float32)
        np.testing.assert_array_equal(add(a, a), 2 * a)
        add.close()
        self.assertEqual((ref.alive, ref.users), (False, 0))
        rt._destroy()  # once only

    def test_an_unconsumed_capsule_dropped_while_an_exception_unwinds(self):
        out = self.run_child(
            "t = tilerun.empty((2, 4), 'float32', 'cpu')\n"
            "try:\n    (t.__dlpack__(), 1 / 0)\nexcept ZeroDivisionError:\n    print('unwound')\n"
            "u = tilerun.empty((2, 4), 'float32', 'cpu')\n"
            "try:\n    (u.__dlpack__(), u.__dlpack__())\nexcept BufferError as e:\n    print(e)\n")
        self.assertEqual(out.splitlines(), ["unwound", "tilerun.Tensor: already exported through __dlpack__"])

    def test_a_bad_thread_count_in_the_environment_is_said_not_ignored(self):
        import subprocess
        code = ("import numpy as np, tilerun\n"
                "a = np.ones(4096, np.float32)\n"
                "assert (tilerun.op('AddFwdOp')(a, a) == 2).all()\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        for value, warned in (("abc", True), ("0", True), ("65", True), ("2", False)):
            env["TILERUN_CPU_THREADS"] = value
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            said = "TILERUN_CPU_THREADS='%s' is not a number from 1 to 64" % value
            self.assertEqual(said in proc.stderr, warned, proc.stderr)

    def test_every_error_class_can_be_raised(self):
        for name in tilerun.__all__:
            cls = getattr(tilerun, name)
            if isinstance(cls, type) and issubclass(cls, tilerun.Error):
                e = cls(name, "the message", 7)
                self.assertEqual((str(e), e.code, e.code_number), ("the message", name, 7))
        with self.assertRaises(tilerun.OutOfMemoryError) as caught:  # a MemoryError
            tilerun.empty((2 ** 62, 4))
        self.assertIsInstance(caught.exception, MemoryError)
        self.assertIn("more bytes than this machine can address", str(caught.exception))

    def test_an_input_written_in_place_must_be_writable(self):
        bn = tilerun.op("BatchNormFwdOp", training=True)
        x = np.arange(12, dtype=np.float32).reshape(4, 3)
        mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
        mean.setflags(write=False)
        with self.assertRaises(ValueError) as caught:
            bn(x, mean, var)
        self.assertEqual(str(caught.exception),
                         "BatchNormFwdOp: input 'running_mean' is a read-only array; the call writes it in place")
        self.assertTrue((mean == 0).all())
        frozen = np.frombuffer(bytes(12), np.float32)  # immutable memory
        with self.assertRaises(ValueError):
            bn(x, frozen, var)
        self.assertEqual(bytes(frozen.data), bytes(12))
        mean = np.zeros(3, np.float32)
        bn(x, mean, var)  # writable: updated in place
        self.assertFalse((mean == 0).all())

    def test_outputs_sharing_memory_with_inputs_and_extra_outputs_are_refused(self):
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(4,))
        x = np.arange(20, dtype=np.float32).reshape(5, 4) + 1
        w = np.ones(4, np.float32)
        before = x.copy()
        for x_in, out in ((x[:-1], x[1:]), (x, x)):  # partly, then exactly, over the input
            with self.assertRaises(tilerun.InvalidValueError) as caught:
                op.call_into([x_in, w], [out])
            self.assertEqual(str(caught.exception),
                             "RMSNormFwdOp: output 'y' shares memory with input 'x'; give the output memory of "
                             "its own (the kernel reads its inputs while it writes)")
        np.testing.assert_array_equal(x, before)
        y, z = np.empty((5, 4), np.float32), np.full((5, 4), 7, np.float32)
        with self.assertRaisesRegex(tilerun.InvalidValueError, "RMSNormFwdOp returns 1 outputs; 2 were given"):
            op.call_into([x, w], [y, z])
        self.assertTrue((z == 7).all())
        op.call_into([x, w], [y])  # and the op still serves a good call
        np.testing.assert_allclose(y, rms_norm_ref(x, w, 1e-6), rtol=1e-5)
        # two outputs over one another
        bn = tilerun.op("BatchNormFwdOp", training=True)
        xb, y = np.arange(12, dtype=np.float32).reshape(4, 3), np.empty((4, 3), np.float32)
        stats = np.full(6, 7, np.float32)
        ins = [xb, np.zeros(3, np.float32), np.ones(3, np.float32)]
        with self.assertRaisesRegex(tilerun.InvalidValueError, "^BatchNormFwdOp: outputs 'mean' and 'rstd' share "
                                    "memory; give each memory of its own$"):
            bn.call_into(ins, [y, stats[:3], stats[2:5]])
        self.assertTrue((stats == 7).all())
        bn.call_into(ins, [y, stats[:3], stats[3:]])  # side by side: served
        np.testing.assert_allclose(stats[:3], xb.mean(axis=0), rtol=1e-6)

    def test_arrays_the_producer_cannot_export_are_named(self):
        add = tilerun.op("AddFwdOp")
        a = np.ones(4, np.float32)
        for bad in (np.array(["a"] * 4, dtype=object), np.ones(4, ">f4")):
            with self.assertRaises(TypeError) as caught:
                add(bad, a)
            self.assertTrue(str(caught.exception).startswith("AddFwdOp: input 'a' cannot be borrowed: "),
                            str(caught.exception))
            self.assertIsInstance(caught.exception.__cause__, BufferError)
        # a writable output its producer cannot export is not called read-only
        with self.assertRaises(TypeError) as caught:
            add.call_into((a, a), np.empty(4, ">f4"))
        self.assertTrue(str(caught.exception).startswith("AddFwdOp: output 'c' cannot be borrowed: "),
                        str(caught.exception))
        with self.assertRaisesRegex(RuntimeError, "without _enter"):
            add._leave()
        # what is no tensor at all (a float, a list) is named too
        for bad, kind in ((1.0, "float"), ([[1.0] * 4], "list")):
            with self.assertRaises(TypeError) as caught:
                add(a, bad)
            self.assertEqual(str(caught.exception), "AddFwdOp: input 'b' cannot be borrowed: tilerun: a tensor "
                             "must be None or support DLPack (__dlpack__); got " + kind)

    def test_a_dtype_param_takes_a_dtype_name(self):
        x = np.array([[1.0, 2.0, 3.0]], np.float32)
        by_name = tilerun.op("SoftmaxFwdOp", dtype="float64")(x)
        self.assertEqual(by_name.dtype, np.float64)
        np.testing.assert_allclose(by_name, tilerun.op("SoftmaxFwdOp", dtype=np.float64)(x))
        with self.assertRaisesRegex(tilerun.SignatureParamError, "param 'dtype' expects dtype \\| None, got "
                                    "'float33' \\(str\\)"):
            tilerun.op("SoftmaxFwdOp", dtype="float33")

    def test_names_that_are_not_strings(self):
        rt = tilerun.default_runtime()
        name_none = "tilerun: an op's name is a str, got None (NoneType)"
        for call, text in ((lambda: tilerun.op(None), name_none),
                           (lambda: tilerun.op(5), "tilerun: an op's name is a str, got 5 (int)"),
                           (lambda: tilerun.op("AddFwdOp", target=5), "tilerun: a target is a str, got 5 (int)"),
                           (lambda: tilerun.Op("AddFwdOp", runtime="x"),
                            "tilerun: runtime is a tilerun.Runtime or None, got 'x' (str)"),
                           (lambda: rt.set_default_target(5), "tilerun: a target is a str, got 5 (int)"),
                           (lambda: rt.workloads(None), name_none), (lambda: rt.op_info(None), name_none)):
            with self.assertRaises(TypeError) as caught:
                call()
            self.assertEqual(str(caught.exception), text)
        with self.assertRaises(ValueError) as caught:
            tilerun.op("RMSNormFwdOp\0x")
        self.assertEqual(str(caught.exception), "tilerun: an op's name 'RMSNormFwdOp\\x00x' holds a NUL character")


class CBaselineCpuTest(unittest.TestCase):
    """The benchmarks' loop in C (_ext._bench_call_into, _bench_call): bench_host.py's "over C"."""

    def setUp(self):
        from tilerun import _ext
        self.ext = _ext
        self.rng = np.random.default_rng(5)

    def test_it_times_calls_that_write_what_call_into_writes(self):
        add = tilerun.op("AddFwdOp")
        rms = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        a, b = (self.rng.standard_normal((3, 64)).astype(np.float32) for _ in range(2))
        w = self.rng.standard_normal(64).astype(np.float32)
        for op, ins in ((add, (a, b)), (rms, [a, w])):
            want, got = np.zeros_like(a), np.zeros_like(a)
            op.call_into(ins, want)
            ns = self.ext._bench_call_into(op, ins, got, 50)
            self.assertIsInstance(ns, int)
            self.assertGreater(ns, 0)
            np.testing.assert_array_equal(got, want)
            got[...] = 0
            self.ext._bench_call_into(op, ins, [got], 1)  # outputs as a list, as call_into takes
            np.testing.assert_array_equal(got, want)
            ns = self.ext._bench_call(op, ins, 50)  # tr_op_call, its outputs freed
            self.assertIsInstance(ns, int)
            self.assertGreater(ns, 0)
        self.assertEqual(add.memo_count, 1)  # one build: the timed calls were memo hits

    def test_it_keeps_no_reference(self):
        add = tilerun.op("AddFwdOp")
        a, b, c = (np.ones((2, 4), np.float32) for _ in range(3))
        ins = (a, b)
        before = [sys.getrefcount(o) for o in (a, b, c, ins, add)]
        for _ in range(200):
            self.ext._bench_call_into(add, ins, c, 5)
            self.ext._bench_call(add, ins, 5)
            with self.assertRaises(tilerun.SignatureShapeError):
                self.ext._bench_call_into(add, ins, np.empty((1,), np.float32), 5)
        self.assertEqual(before, [sys.getrefcount(o) for o in (a, b, c, ins, add)])

    @unittest.skipIf(os.environ.get("TILERUN_TEST_SANITIZED"),
                     "AddressSanitizer's quarantine holds freed memory, so RSS grows anyway")
    def test_the_outputs_of_its_tr_op_call_are_freed(self):
        # 32x64 float32 outputs (8 KiB): 10000 leaked would be 80 MiB
        op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        x = np.ones((32, 64), np.float32)
        self.ext._bench_call(op, (x, None), 200)
        gc.collect()
        before = rss_bytes()
        self.ext._bench_call(op, (x, None), 10000)
        grown = rss_bytes() - before
        self.assertLess(grown, 8 << 20, "RSS grew by %d bytes" % grown)

    def test_bad_arguments_say_what_was_wrong_and_what_came(self):
        add = tilerun.op("AddFwdOp")
        a = np.ones((2, 3), np.float32)
        ext = self.ext
        cases = [
            (lambda: ext._bench_call_into(add, (a, a), a), TypeError,
             r"_bench_call_into\(op, inputs, outputs, n\): 4 arguments, got 3"),
            (lambda: ext._bench_call(add, (a, a)), TypeError,
             r"_bench_call\(op, inputs, n\): 3 arguments, got 2"),
            (lambda: ext._bench_call_into("AddFwdOp", (a, a), a, 1), TypeError,
             "op must be a tilerun.Op, got str"),
            (lambda: ext._bench_call(None, (a, a), 1), TypeError,
             "op must be a tilerun.Op, got NoneType"),
            (lambda: ext._bench_call_into(add, a, a, 1), TypeError,
             "inputs must be a list or tuple of tensors, got ndarray"),
            (lambda: ext._bench_call_into(add, (a, a), a, 2.0), TypeError,
             "n must be an int, got float"),
            (lambda: ext._bench_call(add, (a, a), 0), ValueError, "n must be at least 1, got 0"),
            (lambda: ext._bench_call_into(add, (a, a), a, -3), ValueError,
             "n must be at least 1, got -3"),
            (lambda: ext._bench_call_into(add, [a] * 16, a, 1), ValueError,
             "at most 16 tensors a call, got 16 inputs and 1 outputs"),
            (lambda: ext._bench_call(add, [a] * 17, 1), ValueError,
             "at most 16 tensors a call, got 17 inputs"),
            (lambda: ext._bench_call_into(add, (a, [1, 2]), a, 1), TypeError,
             "a tensor must be None or support DLPack"),
        ]
        for run, exc, text in cases:
            with self.assertRaisesRegex(exc, text):
                run()
        # a call the runtime refuses raises its error, from the untimed first call
        with self.assertRaisesRegex(tilerun.SignatureShapeError, "input 'b' is required"):
            ext._bench_call_into(add, (a,), a, 1)
        with self.assertRaises(tilerun.SignatureDtypeError):
            ext._bench_call_into(add, (a, a), np.empty((2, 3), np.float64), 1)
        add.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            ext._bench_call_into(add, (a, a), a, 1)


def _tilerun_binary():
    """The tilerun command: TILERUN_BINARY where set (a packed copy on a machine without Bazel),
    else Bazel's runfiles or bazel-bin."""
    if os.environ.get("TILERUN_BINARY"):
        return os.environ["TILERUN_BINARY"]
    srcdir = os.environ.get("TEST_SRCDIR")
    workspace = os.environ.get("TEST_WORKSPACE", "tilerun")
    if srcdir and os.path.isdir(os.path.join(srcdir, workspace)):
        return os.path.join(srcdir, workspace, "tools", "tilerun")
    return os.path.join(_REPO, "bazel-bin", "tools", "tilerun")


class RemoteLaunchTest(unittest.TestCase):
    """NumPy data through a launch in another process (`tilerun serve launch`): arrays from
    Runtime.empty are in shared memory it maps; a plain array is refused by name."""

    @classmethod
    def setUpClass(cls):
        import subprocess
        import tempfile
        binary = _tilerun_binary()
        if not os.path.exists(binary):
            raise FileNotFoundError("%s: build it first (bazel build //tools:tilerun), or name a built one "
                                    "in TILERUN_BINARY" % binary)
        cls.dir = tempfile.mkdtemp(prefix="tr-pyremote")
        endpoint = "ipc://%s/launch.sock" % cls.dir
        cls.server = subprocess.Popen(
            [binary, "serve", "launch", "--endpoint", endpoint, "--manifest",
             os.environ["TILERUN_MANIFEST_DIR"]], stdout=subprocess.DEVNULL)
        cls.addClassCleanup(cls.server.kill)  # also when the rest of setUpClass fails
        pipeline = os.path.join(cls.dir, "remote.yaml")
        with open(pipeline, "w") as f:
            f.write("deadline_ms: 20000\ncomponents:\n  launch: {placement: process, "
                    "endpoint: \"%s\"}\n" % endpoint)
        cls.rt = tilerun.Runtime(pipeline_file=pipeline)

    @classmethod
    def tearDownClass(cls):
        import shutil
        cls.rt = None
        gc.collect()
        cls.server.terminate()
        cls.server.wait(timeout=10)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.rng = np.random.default_rng(7)

    def shared(self, values):
        a = np.asarray(self.rt.empty(values.shape, values.dtype))
        self.assertTrue(a.flags.writeable)
        self.assertTrue(a.flags.c_contiguous)
        a[...] = values
        return a

    def test_numpy_arrays_from_empty_reach_the_launch_process(self):
        self.assertTrue(self.rt.launches_remotely)
        self.assertFalse(tilerun.default_runtime().launches_remotely)
        op = self.rt.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
        xv = self.rng.standard_normal((8, 64)).astype(np.float32)
        wv = self.rng.standard_normal(64).astype(np.float32)
        x, w = self.shared(xv), self.shared(wv)
        y = op(x, w)
        np.testing.assert_allclose(y.astype(np.float64), rms_norm_ref(xv, wv, 1e-6), rtol=1e-5,
                                   atol=1e-6)
        x[...] = 2 * xv  # a memo hit reads the new values
        np.testing.assert_allclose(op(x, w).astype(np.float64), rms_norm_ref(2 * xv, wv, 1e-6),
                                   rtol=1e-5, atol=1e-6)
        self.assertEqual(op.memo_count, 1)
        add = self.rt.op("AddFwdOp")
        a, b = self.shared(np.arange(6, dtype=np.int64).reshape(2, 3)), self.shared(
            np.full((2, 3), 10, np.int64))
        np.testing.assert_array_equal(add(a, b), np.arange(6).reshape(2, 3) + 10)
        t = self.rt.empty((2, 3), "float32")  # a Tensor passes as it is, too
        np.asarray(t)[...] = 1.5
        np.testing.assert_array_equal(np.asarray(add(t, t)), np.full((2, 3), 3.0, np.float32))

    def test_a_plain_numpy_array_is_refused_by_name(self):
        op = self.rt.op("AddFwdOp")
        shared = self.shared(np.ones((2, 3), np.float32))
        with self.assertRaises(tilerun.Error) as cm:
            op(shared, np.ones((2, 3), np.float32))
        self.assertEqual(cm.exception.code, "ValueError")
        self.assertIn("input 1", str(cm.exception))
        self.assertIn("AddFwdOp, launched in another process", str(cm.exception))
        np.testing.assert_array_equal(op(shared, shared), np.full((2, 3), 2.0, np.float32))

    def test_empty_checks_its_arguments(self):
        for args, text in (((2, -1), "float32", "cpu"), "negative"), \
                          (((2,), "float33", "cpu"), "unknown dtype"), \
                          (((2,), "float32", "gpu:0"), "is not 'cpu' or 'cuda:N'"):
            with self.assertRaises(ValueError) as cm:
                self.rt.empty(*args)
            self.assertIn(text, str(cm.exception))
        local = np.asarray(tilerun.empty((3,), np.float64))  # the default runtime: plain memory
        local[...] = 4.0
        self.assertEqual(local.sum(), 12.0)
        with self.assertRaises(TypeError) as cm:  # NumPy has no bfloat16: said, not an object array
            np.asarray(tilerun.empty((2,), "bfloat16"))
        self.assertIn("bfloat16", str(cm.exception))
        self.assertEqual(np.asarray(tilerun.empty(5, "int32")).shape, (5,))  # an int is a shape

    def test_a_viewed_tensor_is_not_exported(self):
        t = tilerun.empty((4096,), "float32")
        view = np.asarray(t)
        view[:] = 1.0
        with self.assertRaises(BufferError):
            t.__dlpack__()  # the view would outlive the memory
        other = np.asarray(tilerun.empty((4096,), "float32"))
        other[:] = 7.0
        self.assertTrue((view == 1.0).all())  # still its own memory
        fresh = tilerun.empty((3,), "float32")
        np.from_dlpack(fresh)  # an unviewed Tensor exports as before
        with self.assertRaises(BufferError):
            np.asarray(fresh)  # and once exported has nothing to view


BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")


def run_bench(script, *args, timeout=120):
    """python/bench/`script` run with this Python and `args`: the finished process, output kept."""
    import subprocess
    return subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                          timeout=timeout)


class BenchScript(unittest.TestCase):
    """bench_gpu.py explains itself without PyTorch, and says what a run needs where it cannot run."""

    def run_script(self, *args):
        return run_bench("bench_gpu.py", *args)

    def test_help_and_the_missing_gpu(self):
        done = self.run_script("--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("usage: bench_gpu.py", done.stdout)
        self.assertIn("--no-compile", done.stdout)
        try:  # with PyTorch and a GPU the script would run the benchmark: only --help is checked
            import torch
            runnable = torch.cuda.is_available()
        except ImportError:
            runnable = False
        if not runnable:
            done = self.run_script()
            self.assertEqual(done.returncode, 1)
            self.assertIn("bench_gpu.py: needs PyTorch with a CUDA device", done.stderr)



class HostBenchScript(unittest.TestCase):
    """bench_host.py's cpu rows run, with the loop in C as their "over C"."""

    def test_a_tiny_cpu_run(self):
        done = run_bench("bench_host.py", "--cpu-only", "--rounds", "3", "--calls", "10")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stdout, r"\| Add 1x64 float32, call_into \| [0-9.]+ \| .* \| [+-][0-9.]+ "
                                      r"over tr_op_call_into \|")
        self.assertRegex(done.stdout, r"C, in this process: tr_op_call [0-9.]+ us, tr_op_call_into")


class CpuGemmBenchScript(unittest.TestCase):
    """bench_cpu_gemm.py explains itself, and a tiny run prints its table with both sides."""

    def run_script(self, *args):
        return run_bench("bench_cpu_gemm.py", *args)

    def test_help_and_a_tiny_run(self):
        done = self.run_script("--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("usage: bench_cpu_gemm.py", done.stdout)
        self.assertIn("--sizes", done.stdout)
        done = self.run_script("--sizes", "8,33", "--repeats", "1", "--min-ms", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("| shape | tilerun ms | numpy ms |", done.stdout)
        self.assertIn("| 33x33x33 |", done.stdout)
        self.assertIn("lowest ratio", done.stdout)


class CpuGemmPathsScript(unittest.TestCase):
    """cpu_gemm_paths.py explains itself; a run prints each backend's time, their ratio and the
    error of bfloat16 results passed through its own DLPack capsules (one case on the skinny
    path's wide limit: 33 rows, b [N, K] of 8Mi elements); a folder given twice is refused."""

    def run_script(self, *args):
        return run_bench("cpu_gemm_paths.py", *args, timeout=300)

    def test_help_runs_and_bad_arguments(self):
        import shutil
        import tempfile
        done = self.run_script("--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("usage: cpu_gemm_paths.py", done.stdout)
        self.assertIn("--backends", done.stdout)
        backend = os.environ["TILERUN_BACKEND_PATH"]
        done = self.run_script("--backends", backend, "--rows", "33", "--shapes", "4096x2048",
                               "--trans-b", "1", "--rounds", "1", "--calls", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("| 4096x2048 | 1 | 33 |", done.stdout)
        error = float(done.stdout.split("over the largest |value|: ")[1].split()[0])
        self.assertLess(error, 2e-2)
        with tempfile.TemporaryDirectory() as copy:
            for name in os.listdir(backend):
                shutil.copy(os.path.join(backend, name), copy)
            done = self.run_script("--backends", backend + "," + copy, "--rows", "2,17", "--shapes",
                                   "24x40", "--rounds", "1", "--calls", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("| N x K | trans_b | rows |", done.stdout)
        self.assertIn("first/second |", done.stdout)
        for tb in (1, 0):
            for rows in (2, 17):
                self.assertIn("| 24x40 | %d | %d |" % (tb, rows), done.stdout)
        done = self.run_script("--backends", backend + "," + backend)
        self.assertEqual(done.returncode, 2)
        self.assertIn("the two folders are the same one", done.stderr)
        done = self.run_script("--shapes", "24x")
        self.assertEqual(done.returncode, 2)
        self.assertIn("shapes NxK", done.stderr)


if __name__ == "__main__":
    unittest.main()
