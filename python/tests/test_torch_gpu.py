"""tilerun.torch on the GPU machine: the manifest's ops as torch custom ops under torch.compile.

    TILERUN_LIBRARY=... TILERUN_MANIFEST_DIR=... TILERUN_BACKEND_PATH=... PYTHONPATH=python \\
        python3 python/tests/test_torch_gpu.py [-v] [unittest arguments]

Checks: which ops are registered (no composition); fullgraph compilation of a function of
several tilerun ops with no graph break, matching eager bit for bit; mode="reduce-overhead"
(CUDA graphs) over several steps with new values, matching eager; a call the manifest refuses
fails while tracing, with tilerun's message word for word and no kernel built; an op writing an
input in place (BatchNormFwdOp's running stats) under compile as in eager; and for every
workload row of every registered op (on cuda where the op has in-tree kernels, else on the cpu
backend), the fake outputs' shapes, dtypes and devices are the real outputs'.
"""
import os
import sys
import unittest

import torch
import torch._dynamo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import tilerun  # noqa: E402
import tilerun.torch as tt  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

DEV = torch.device("cuda", 0)
BF16 = torch.bfloat16


class TorchOpsTest(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()
        self.gen = torch.Generator(device=DEV)
        self.gen.manual_seed(7)

    def randn(self, *shape, dtype=BF16):
        return torch.randn(shape, generator=self.gen, device=DEV, dtype=torch.float32).to(dtype)

    def test_registered_ops(self):
        names = tt.register()
        rt = tilerun.default_runtime()
        for name in rt.op_names():
            composite = rt.op_info(name)[3]
            self.assertEqual(name in names, not composite, name)
            if not composite:
                self.assertTrue(hasattr(torch.ops.tilerun, name), name)
        self.assertIn("RMSNormFwdOp", names)
        self.assertNotIn("LinearFwdOp", names)
        schema = str(torch.ops.tilerun.BatchNormFwdOp.default._schema)
        self.assertIn("Tensor(a!)? running_mean", schema)

    def test_fullgraph_no_graph_break_matches_eager(self):
        rms = tt.op("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6)
        add = tt.op("AddFwdOp")
        soft = tt.op("SoftmaxFwdOp", dim=-1)
        gemm = tt.op("GemmFwdOp")

        def f(x, w, r, m):
            h = add(x, r)
            y = rms(h, w)
            z = gemm(y, m)
            return soft(z) * 2

        x, r = self.randn(16, 4096), self.randn(16, 4096)
        w, m = self.randn(4096), self.randn(4096, 256)
        eager = f(x, w, r, m)
        explained = torch._dynamo.explain(f)(x, w, r, m)
        self.assertEqual(explained.graph_break_count, 0, explained.break_reasons)
        compiled = torch.compile(f, fullgraph=True)
        got = compiled(x, w, r, m)
        torch.testing.assert_close(got, eager, rtol=0, atol=0)
        # the same values as tilerun's own eager call
        ref = tilerun.op("SoftmaxFwdOp", dim=-1)(tilerun.op("GemmFwdOp")(
            tilerun.op("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6)(
                tilerun.op("AddFwdOp")(x, r), w), m)) * 2
        torch.testing.assert_close(got, ref, rtol=0, atol=0)

    def test_reduce_overhead_matches_eager(self):
        rms = tt.op("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6)
        add = tt.op("AddFwdOp")

        def f(x, w, r):
            return rms(add(x, r), w) + 1

        from torch._dynamo.utils import counters
        counters.clear()
        compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
        w = self.randn(4096)
        for step in range(6):  # warm-up, recording, then replays, each with new values
            x, r = self.randn(4, 4096), self.randn(4, 4096)
            got = compiled(x, w, r).clone()
            torch.testing.assert_close(got, f(x, w, r), rtol=0, atol=0, msg="step %d" % step)
        # CUDA graphs were used, not skipped (inductor counts each skip with its reason)
        self.assertEqual(counters["inductor"]["cudagraph_skips"], 0)

    def test_a_refused_call_fails_while_tracing_with_tilerun_message(self):
        rms = tt.op("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6)
        inst = tt.instance("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6)
        x, w = self.randn(2, 4095), self.randn(4096)
        with self.assertRaises(tilerun.SignatureShapeError) as direct:
            inst.output_specs(x, w)
        built = inst.memo_count
        compiled = torch.compile(lambda a, b: rms(a, b), fullgraph=True)
        with self.assertRaises(Exception) as traced:
            compiled(x, w)
        self.assertIn(str(direct.exception), str(traced.exception))
        chain, e = [], traced.exception
        while e is not None:
            chain.append(type(e))
            e = e.__cause__ or e.__context__
        self.assertIn(tilerun.SignatureShapeError, chain, chain)
        self.assertEqual(inst.memo_count, built, "a kernel was built for the refused call")

    def test_an_op_writing_an_input_in_place(self):
        bn = tt.op("BatchNormFwdOp", training=True, momentum=0.1, eps=1e-5)

        def f(x, rm, rv, wt, b):
            y, mean, rstd = bn(x, rm, rv, wt, b)
            return y, mean, rstd

        def inputs():
            g = torch.Generator(device="cpu").manual_seed(3)
            x = torch.randn(8, 16, 4, 4, generator=g)
            return (x, torch.zeros(16), torch.ones(16), torch.ones(16), torch.zeros(16))

        eager_in, comp_in = inputs(), inputs()
        eager = f(*eager_in)
        got = torch.compile(f, fullgraph=True)(*comp_in)
        for a, b in zip(got, eager):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(comp_in[1], eager_in[1])  # running_mean written in place
        torch.testing.assert_close(comp_in[2], eager_in[2])
        self.assertFalse(torch.equal(comp_in[1], torch.zeros(16)))

    def test_fake_outputs_are_the_real_outputs_for_every_workload_row(self):
        rt = tilerun.default_runtime()
        checked = 0
        for name in tt.register():
            inputs = rt.op_info(name)[0]
            for device in ("cuda:0", "cpu"):
                try:
                    rows = rt.workloads(name, device)
                    for label, specs, params in rows:
                        self._fake_vs_real(name, label, specs, params, len(inputs))
                        checked += 1
                    break
                except (tilerun.OpNotAvailableError, tilerun.BackendError) as e:
                    if device == "cpu":
                        raise
                    print("  %s: not on cuda (%s); its rows run on the cpu backend"
                          % (name, str(e).splitlines()[0][:100]))
        print("  fake against real: %d workload rows" % checked)
        self.assertGreater(checked, 40)

    def _fake_vs_real(self, name, label, specs, params, n_inputs):
        real_in = []
        for s in specs:
            if s is None:
                real_in.append(None)
                continue
            shape, dt, device = s
            t = torch.zeros(shape, dtype=tt._torch_dtype(dt), device=device)
            if t.is_floating_point():
                t.uniform_(-1, 1)
            real_in.append(t)
        bound = tt.op(name, **params)
        real = bound(*real_in)
        real = real if isinstance(real, tuple) else (real,)
        with FakeTensorMode(allow_non_fake_inputs=False) as mode:
            fake_in = [None if t is None else mode.from_tensor(t) for t in real_in]
            fake = bound(*fake_in)
        fake = fake if isinstance(fake, tuple) else (fake,)
        self.assertEqual(len(fake), len(real), "%s %s" % (name, label))
        for i, (f, r) in enumerate(zip(fake, real)):
            what = "%s '%s' output %d" % (name, label, i)
            self.assertEqual(tuple(f.shape), tuple(r.shape), what)
            self.assertEqual(f.dtype, r.dtype, what)
            self.assertEqual(f.device, r.device, what)


if __name__ == "__main__":
    print("tilerun %s (%s); torch %s on %s" % (tilerun.__version__, tilerun.library_path,
                                                torch.__version__, torch.cuda.get_device_name(DEV)))
    unittest.main(verbosity=2)
