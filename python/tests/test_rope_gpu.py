"""RoPEFwdOp on a cuda GPU (the in-tree kernels) against a float64 reference, run on the GPU machine.

    TILERUN_LIBRARY=... TILERUN_MANIFEST_DIR=... TILERUN_BACKEND_PATH=... PYTHONPATH=python \\
        python3 python/tests/test_rope_gpu.py [-v]

Both rotations (is_neox true: halves; false: interleaved pairs), float16, bfloat16 and float32,
int32 and int64 positions, head dims 2, 6, 64, 128 and 256, batch axes of rank 0 to 2, the
manifest's workload rows; outputs poisoned with NaN first; x non-contiguous; unaligned data; a
position outside the cache (past the end, negative) is the kernel's ValueError, the cpu
backend's text word for word, and the other tokens are still right; 100 calls captured in a
CUDA graph with changing positions give the eager results; the implementation chosen per call.
"""
import itertools
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import tilerun  # noqa: E402

DEV = torch.device("cuda", 0)
TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def reference(positions, x, cache, neox):
    """y in float64: vLLM's layout (cos in the cache row's first half, sin in its second)."""
    d = x.shape[-1]
    half = d // 2
    cs = cache.double()[positions.long()]  # [*B, D]
    cos, sin = cs[..., :half].unsqueeze(-2), cs[..., half:].unsqueeze(-2)  # [*B, 1, D/2]
    x = x.double()
    if neox:
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)


def make_cache(rows, d, dtype, gen):
    theta = 10000.0 ** (-torch.arange(0, d // 2, dtype=torch.float64, device=DEV) * 2 / d)
    ang = torch.arange(rows, dtype=torch.float64, device=DEV)[:, None] * theta[None, :]
    cache = torch.cat([ang.cos(), ang.sin()], -1)
    return cache.to(dtype)


class RopeGpuTest(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator(device=DEV)
        self.gen.manual_seed(11)
        self.ops = {}

    def op(self, neox):
        if neox not in self.ops:
            self.ops[neox] = tilerun.op("RoPEFwdOp", is_neox=neox)
        return self.ops[neox]

    def inputs(self, batch, heads, d, dtype, pos_dtype, rows=512):
        positions = torch.randint(0, rows, batch, generator=self.gen, device=DEV, dtype=pos_dtype)
        x = torch.randn(batch + (heads, d), generator=self.gen, device=DEV, dtype=torch.float32).to(dtype)
        return positions, x, make_cache(rows, d, dtype, self.gen)

    def check(self, got, want, dtype, what):
        tol = TOL[dtype]
        self.assertEqual(got.shape, want.shape, what)
        self.assertEqual(got.dtype, dtype, what)
        err = (got.double() - want).abs()
        bound = tol + tol * want.abs()
        self.assertFalse(torch.isnan(got).any().item(), "%s: NaN in the output" % what)
        bad = (err > bound).sum().item()
        self.assertEqual(bad, 0, "%s: %d elements off, worst %.3g" % (what, bad, err.max().item()))

    def test_every_dtype_rotation_head_dim_and_batch_rank(self):
        cases = 0
        for dtype, pos_dtype, d, neox, batch in itertools.product(
                (torch.float16, torch.bfloat16, torch.float32), (torch.int32, torch.int64),
                (2, 6, 64, 128, 256), (True, False), ((), (5,), (3, 7))):
            positions, x, cache = self.inputs(batch, 4, d, dtype, pos_dtype)
            want = reference(positions, x, cache, neox)
            what = "%s pos %s D=%d neox=%s B=%s" % (dtype, pos_dtype, d, neox, batch)
            op = self.op(neox)
            y = torch.full_like(x, float("nan"))
            op.call_into((positions, x, cache), y)
            self.check(y, want, dtype, what + " call_into")
            self.check(op(positions, x, cache), want, dtype, what + " call")
            self.assertEqual(op.kernel_config()["implementation"],
                             "rope_neox" if neox else "rope_interleaved")
            cases += 1
        print("  %d cases" % cases)

    def test_workload_rows(self):
        rt = tilerun.default_runtime()
        for label, specs, params in rt.workloads("RoPEFwdOp", "cuda:0"):
            (pshape, pdt, _), (xshape, xdt, _), (cshape, cdt, _) = specs
            dtype = getattr(torch, xdt)
            positions = torch.randint(0, cshape[0], pshape, generator=self.gen, device=DEV,
                                      dtype=getattr(torch, pdt))
            x = torch.randn(xshape, generator=self.gen, device=DEV).to(dtype)
            cache = make_cache(cshape[0], cshape[1], dtype, self.gen)
            neox = params.get("is_neox", True)
            y = tilerun.op("RoPEFwdOp", **params)(positions, x, cache)
            self.check(y, reference(positions, x, cache, neox), dtype, label)

    def test_strided_and_unaligned_inputs(self):
        for neox in (True, False):
            positions, x, cache = self.inputs((9,), 8, 128, torch.bfloat16, torch.int64)
            want = reference(positions, x, cache, neox)
            wide = torch.randn(9, 8, 256, generator=self.gen, device=DEV).to(torch.bfloat16)
            wide[..., ::2] = x
            strided = wide[..., ::2]
            self.assertFalse(strided.is_contiguous())
            got = self.op(neox)(positions, strided, cache)
            self.assertTrue(torch.equal(got, self.op(neox)(positions, x, cache)))
            buf = torch.empty(x.numel() + 1, device=DEV, dtype=x.dtype)
            unaligned = buf[1:].view(x.shape)
            unaligned.copy_(x)
            cbuf = torch.empty(cache.numel() + 1, device=DEV, dtype=cache.dtype)
            cache_u = cbuf[1:].view(cache.shape)
            cache_u.copy_(cache)
            out = torch.empty(x.numel() + 1, device=DEV, dtype=x.dtype)[1:].view(x.shape)
            self.op(neox).call_into((positions, unaligned, cache_u), out)
            self.check(out, want, torch.bfloat16, "unaligned neox=%s" % neox)

    def test_a_position_outside_the_cache_is_the_kernels_value_error(self):
        for neox, pos_dtype in itertools.product((True, False), (torch.int32, torch.int64)):
            positions, x, cache = self.inputs((6,), 4, 64, torch.float32, pos_dtype, rows=100)
            for bad_at, bad in ((3, 100), (0, -1), (5, 1 << 20)):
                p = positions.clone()
                p[bad_at] = bad
                if bad_at != 0:
                    p[bad_at + 1:] = 7
                with self.assertRaises(tilerun.InvalidValueError) as gpu:
                    self.op(neox)(p, x, cache)
                self.assertIsInstance(gpu.exception, ValueError)
                with self.assertRaises(tilerun.InvalidValueError) as cpu:
                    tilerun.op("RoPEFwdOp", is_neox=neox)(p.cpu(), x.cpu(), cache.cpu())
                self.assertEqual(str(gpu.exception), str(cpu.exception))
                self.assertIn("token %d has position %d, out of range [0, 100)" % (bad_at, bad),
                              str(gpu.exception))
                # call_into: the error, and the tokens before and after the bad one still right
                y = torch.full_like(x, float("nan"))
                with self.assertRaises(tilerun.InvalidValueError):
                    self.op(neox).call_into((p, x, cache), y)
                good = torch.ones(6, dtype=torch.bool, device=DEV)
                good[bad_at] = False
                want = reference(p.clamp(0, 99), x, cache, neox)
                self.check(y[good], want[good], torch.float32, "the good tokens")
                self.assertTrue(torch.equal(y[bad_at], torch.zeros_like(y[bad_at])))
            # and the op works again afterwards
            self.check(self.op(neox)(positions, x, cache), reference(positions, x, cache, neox),
                       torch.float32, "after the error")

    def test_captured_calls_replay_the_eager_results(self):
        op = self.op(True)
        positions, x, cache = self.inputs((16,), 8, 128, torch.bfloat16, torch.int64, rows=4096)
        steps = 100
        ps = torch.randint(0, 4096, (steps, 16), generator=self.gen, device=DEV)
        xs = torch.randn(steps, 16, 8, 128, generator=self.gen, device=DEV).to(torch.bfloat16)
        ys = torch.empty_like(xs)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            op.call_into((ps[0], xs[0], cache), ys[0])  # built before the capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(steps):
                op.call_into((ps[i], xs[i], cache), ys[i])
        ys.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        for i in range(steps):
            self.assertTrue(torch.equal(ys[i], op(ps[i], xs[i], cache)), "step %d" % i)


if __name__ == "__main__":
    print("tilerun %s (%s); torch %s on %s" % (tilerun.__version__, tilerun.library_path,
                                                torch.__version__, torch.cuda.get_device_name(DEV)))
    unittest.main(verbosity=2)
