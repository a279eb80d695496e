"""GQAPrefillFwdOp on a cuda GPU (the in-tree gqa_prefill_wgmma on sm_90, gqa_prefill_flash
elsewhere) against a float64 reference, run on the GPU machine.

    TILERUN_LIBRARY=... TILERUN_MANIFEST_DIR=... TILERUN_BACKEND_PATH=... PYTHONPATH=python \\
        python3 python/tests/test_gqa_prefill_gpu.py [-v]

The reference is causal scaled dot-product attention with GQA in float64 (query head h reads KV
head h // (heads / heads_kv)), itself checked against
torch.nn.functional.scaled_dot_product_attention(is_causal=True, enable_gqa=True) in sdpa's
[B, heads, L, dim] layout. Checked: the manifest's workload rows; L in 1, 7, 64, 127, 128, 129,
1000, 2048 (tile edges and ragged tails); B up to 4; float16 and bfloat16; head dims 64 and 128;
query heads a KV head 1, 4 and 8; the default, a given and a negative scale (the kernel's path
that scales before the maximum); outputs poisoned with NaN first; the
implementation's key; one captured call replayed against eager; inputs and output not 16-byte
aligned (the general kernel's register path: on sm_90 checked against the reference and, within
the tolerance, against the aligned wgmma result; elsewhere the same bits as aligned).
"""
import itertools
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import tilerun  # noqa: E402

DEV = torch.device("cuda", 0)
TOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3}
LENGTHS = (1, 7, 64, 127, 128, 129, 1000, 2048)
# the implementation the selection names for aligned tensors on this card
SM90 = torch.cuda.get_device_capability(DEV) == (9, 0)
IMPL = "gqa_prefill_wgmma" if SM90 else "gqa_prefill_flash"


def reference(q, k, v, scale=None):
    """o [B, L, heads, dim] in float64, causal, from q [B, L, heads, dim] and k, v [B, L, kv, dim]."""
    B, L, heads, dim = q.shape
    kv = k.shape[2]
    scale = 1.0 / dim ** 0.5 if scale is None else scale
    q64 = q.double()
    k64 = k.double().repeat_interleave(heads // kv, dim=2)  # [B, L, heads, dim]
    v64 = v.double().repeat_interleave(heads // kv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q64, k64) * scale
    above = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)  # key j after query i
    s = s.masked_fill(above, float("-inf"))
    p = torch.softmax(s, -1)
    return torch.einsum("bhij,bjhd->bihd", p, v64)


class GqaPrefillGpuTest(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator(device=DEV)
        self.gen.manual_seed(7)

    def make(self, B, L, heads, kv, dim, dtype):
        def r(*shape):
            return torch.randn(shape, generator=self.gen, device=DEV).to(dtype)
        return r(B, L, heads, dim), r(B, L, kv, dim), r(B, L, kv, dim)

    def check(self, got, want, dtype, what):
        tol = TOL[dtype]
        self.assertEqual(got.dtype, dtype, what)
        self.assertEqual(tuple(got.shape), tuple(want.shape), what)
        self.assertFalse(torch.isnan(got).any().item(), "%s: NaN" % what)
        err = (got.double() - want).abs()
        bad = (err > tol + tol * want.abs()).sum().item()
        self.assertEqual(bad, 0, "%s: %d elements off, worst %.3g" % (what, bad, err.max().item()))

    def run_case(self, B, L, heads, kv, dim, dtype, scale=None, what=""):
        q, k, v = self.make(B, L, heads, kv, dim, dtype)
        params = dict(heads=heads, heads_kv=kv, dim=dim)
        if scale is not None:
            params["scale"] = scale
        op = tilerun.op("GQAPrefillFwdOp", **params)
        want = reference(q, k, v, scale)
        o = torch.full_like(q, float("nan"))
        op.call_into((q, k, v), o)
        self.check(o, want, dtype, what + " call_into")
        self.check(op(q, k, v), want, dtype, what + " call")
        self.assertEqual(op.kernel_config()["implementation"], IMPL)
        return q, k, v, want

    def test_reference_agrees_with_sdpa(self):
        for L, (heads, kv) in ((7, (8, 8)), (300, (32, 8)), (129, (8, 1))):
            q, k, v = self.make(2, L, heads, kv, 64, torch.bfloat16)
            sdpa = F.scaled_dot_product_attention(q.double().transpose(1, 2), k.double().transpose(1, 2),
                                                  v.double().transpose(1, 2), is_causal=True,
                                                  enable_gqa=True).transpose(1, 2)
            torch.testing.assert_close(reference(q, k, v), sdpa)
            o = tilerun.op("GQAPrefillFwdOp", heads=heads, heads_kv=kv, dim=64)(q, k, v)
            self.check(o, sdpa, torch.bfloat16, "against sdpa L=%d heads=%d/%d" % (L, heads, kv))

    def test_lengths_dtypes_dims_and_groups(self):
        n = 0
        for dtype, dim, gq, L in itertools.product((torch.float16, torch.bfloat16), (64, 128), (1, 4, 8), LENGTHS):
            kv = 2
            B = 2 if L <= 1000 else 1
            what = "%s dim=%d heads=%d/%d L=%d B=%d" % (dtype, dim, kv * gq, kv, L, B)
            self.run_case(B, L, kv * gq, kv, dim, dtype, what=what)
            n += 1
        print("  %d configurations" % n)

    def test_batch_four_and_a_given_scale(self):
        for dtype in (torch.float16, torch.bfloat16):
            self.run_case(4, 1000, 32, 8, 128, dtype, what="B=4 L=1000 %s" % dtype)
            self.run_case(4, 127, 16, 2, 64, dtype, scale=0.05, what="B=4 L=127 scale=0.05 %s" % dtype)
            self.run_case(3, 130, 8, 8, 128, dtype, scale=0.3, what="B=3 L=130 scale=0.3 %s" % dtype)
            for dim in (64, 128):
                self.run_case(2, 300, 8, 2, dim, dtype, scale=-0.08, what="B=2 L=300 dim=%d scale=-0.08 %s" % (dim, dtype))

    def test_workload_rows(self):
        rt = tilerun.default_runtime()
        rows = list(rt.workloads("GQAPrefillFwdOp", "cuda:0"))
        self.assertGreaterEqual(len(rows), 2)
        for label, specs, params in rows:
            (qs, dt, _), (ks, _, _) = specs[0], specs[1]
            B, L = qs[0], qs[1]
            self.run_case(B, L, params["heads"], params["heads_kv"], params["dim"], getattr(torch, dt), what=label)

    def test_a_captured_call_replays(self):
        B, L, heads, kv, dim = 2, 1000, 32, 8, 128
        q, k, v = self.make(B, L, heads, kv, dim, torch.bfloat16)
        op = tilerun.op("GQAPrefillFwdOp", heads=heads, heads_kv=kv, dim=dim)
        o = torch.empty_like(q)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            op.call_into((q, k, v), o)  # built before the capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            op.call_into((q, k, v), o)
        for step in range(5):
            q.copy_(torch.randn(q.shape, generator=self.gen, device=DEV).to(q.dtype))
            o.fill_(float("nan"))
            g.replay()
            eager = op(q, k, v)
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(o, eager), "step %d" % step)
            if step % 2 == 0:
                self.check(o, reference(q, k, v), torch.bfloat16, "replay %d" % step)

    def test_inputs_and_output_not_16_byte_aligned(self):
        """Views starting mid-vector (2 bytes past a 16-byte boundary) go through the general
        kernel's register path: right, and on a card where aligned calls take the general kernel
        too, the same bits as aligned copies."""
        for dtype, dim in itertools.product((torch.float16, torch.bfloat16), (64, 128)):
            q, k, v = self.make(2, 130, 8, 2, dim, dtype)

            def shifted(t):
                flat = torch.empty(t.numel() + 1, device=DEV, dtype=t.dtype)
                view = flat[1:].view(t.shape)
                view.copy_(t)
                self.assertNotEqual(view.data_ptr() % 16, 0)
                return view

            op = tilerun.op("GQAPrefillFwdOp", heads=8, heads_kv=2, dim=dim)
            want = op(q, k, v)
            o = shifted(torch.full_like(q, float("nan")))
            op.call_into((shifted(q), shifted(k), shifted(v)), o)
            what = "%s dim=%d misaligned" % (dtype, dim)
            ref = reference(q, k, v)
            if SM90:  # aligned: the wgmma kernel; unaligned: the general one, another order of sums
                self.check(o, want.double(), dtype, what + " against aligned")
            else:
                self.assertTrue(torch.equal(o, want), what)
            self.check(o, ref, dtype, what)
            self.check(want, ref, dtype, what + " (aligned)")

if __name__ == "__main__":
    print("tilerun %s (%s); torch %s on %s" % (tilerun.__version__, tilerun.library_path,
                                                torch.__version__, torch.cuda.get_device_name(DEV)))
    unittest.main(verbosity=2)
