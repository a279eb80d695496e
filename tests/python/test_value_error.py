"""The selection refusal "no implementation serves this call" reaches Python as a ValueError
(the spec's selection tests catch it so), still a tilerun.Error with its code and message; and a
C-side ValueError (a bad argument) is a Python ValueError too. Under Bazel
(`bazel test //tests:python_value_error_test`), from the runfiles."""

import os
import tempfile
import unittest

import numpy as np

import tilerun

_ROOT = os.getcwd()  # run_python_test.sh starts in the runfiles' workspace root
_MANIFEST = os.path.join(_ROOT, "manifest", "spec")
_PLUGIN = os.path.join(_ROOT, "tests", "plugin_api", "libpublic_plugin.so")


class SelectionRefusalIsValueError(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(self.dir.name, "public.yaml"), "w") as f:
            f.write("name: public\nlibrary: %s\n" % _PLUGIN)
        self.rt = tilerun.Runtime(manifest_dir=_MANIFEST, backend_dirs=[self.dir.name])

    def tearDown(self):
        self.rt.close()
        self.dir.cleanup()

    def test_no_implementation_serves_this_call(self):
        op = self.rt.op("RMSNormFwdOp", normalized_shape=(8,), eps=1e-6)
        x, w = np.ones((2, 8), np.float16), np.ones((8,), np.float16)
        with self.assertRaises(ValueError) as cm:  # the public plugin serves float32 only
            op(x, w)
        e = cm.exception
        self.assertIsInstance(e, tilerun.Error)
        self.assertEqual(e.code, "ValueError")
        self.assertTrue(e.message.startswith("RMSNormFwdOp: no implementation serves this call "), e.message)
        self.assertIn("public_rms_norm: serves float32 only", e.message)
        y = op(x.astype(np.float32), w.astype(np.float32))  # what it serves runs
        self.assertEqual(y.shape, (2, 8))

    def test_a_c_value_error_is_a_python_value_error(self):
        with self.assertRaises(ValueError) as cm:
            tilerun.set_stream(64, None)
        self.assertIsInstance(cm.exception, tilerun.Error)
        self.assertEqual(cm.exception.code, "ValueError")


if __name__ == "__main__":
    unittest.main()
