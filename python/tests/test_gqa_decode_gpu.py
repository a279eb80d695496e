"""GQADecodeFwdOp on a cuda GPU (the in-tree gqa_dense_decode, gqa_dense_decode_bs1 and
gqa_dense_decode_long_context) against a float64 reference, run on the GPU machine.

    TILERUN_LIBRARY=... TILERUN_MANIFEST_DIR=... TILERUN_BACKEND_PATH=... PYTHONPATH=python \\
        python3 python/tests/test_gqa_decode_gpu.py [-v]

The reference is scaled dot-product attention in float64 with the manifest's tanh softcap
(torch.nn.functional.scaled_dot_product_attention with enable_gqa, where there is no softcap).
Checked: the workload rows at full length; ragged seqlens (1, 7, 1023, 1024, S) and rows of
length 0 (zeros) and past S (clamped); softcap on and off; float16 and bfloat16; head dims 64 and
128; query heads a KV head 1, 4, 8 and 32; B up to 64; S up to 131072; outputs poisoned first;
each implementation on the same cases (batch 1 goes to bs1 on sm_90, the spec's long-context
range to long_context, the rest to the general one: which one each call got is checked against
the selection rules); caches not 16-byte aligned; one captured decode call replayed as seqlens
grow, against eager each time, for a batch of 4 and for batch 1; the cache past each row's
length filled with NaN; caches shorter than a slot, and empty ones; batch 1 either side of the
cluster build's bound (4096 rows: one kernel at most, two above), two runs bit for bit.
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


def reference(q, k, v, seqlens, softcap=0.0, scale=None):
    """o [B, heads, dim] in float64."""
    B, heads, dim = q.shape
    S, kv = k.shape[1], k.shape[2]
    scale = 1.0 / dim ** 0.5 if scale is None else scale
    q64 = q.double()
    k64 = k.double().repeat_interleave(heads // kv, dim=2)  # [B, S, heads, dim]
    v64 = v.double().repeat_interleave(heads // kv, dim=2)
    s = torch.einsum("bhd,bshd->bhs", q64, k64) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    lens = seqlens.long().clamp(0, S)
    mask = torch.arange(S, device=q.device)[None, None, :] >= lens[:, None, None]
    s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, -1)
    p = torch.nan_to_num(p, nan=0.0)  # a row of length 0: zeros
    return torch.einsum("bhs,bshd->bhd", p, v64)


def expected_impl(B, S, heads, kv, dim, dtype, softcap):
    """The implementation the selection rules name for the call on this card (table 2 of the
    kernel-selection spec)."""
    long_context = (B == 1 and S >= 1024 and heads == 32 and kv == 4 and dim == 128
                    and dtype == torch.float16 and softcap == 0.0)
    if long_context:
        return "gqa_dense_decode_long_context"
    if B == 1 and torch.cuda.get_device_capability(DEV) == (9, 0):
        return "gqa_dense_decode_bs1"
    return "gqa_dense_decode"


class GqaDecodeGpuTest(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator(device=DEV)
        self.gen.manual_seed(5)

    def make(self, B, S, heads, kv, dim, dtype):
        def r(*shape):
            return torch.randn(shape, generator=self.gen, device=DEV).to(dtype)
        return r(B, heads, dim), r(B, S, kv, dim), r(B, S, kv, dim)

    def check(self, got, want, dtype, what):
        tol = TOL[dtype]
        self.assertEqual(got.dtype, dtype, what)
        self.assertFalse(torch.isnan(got).any().item(), "%s: NaN" % what)
        err = (got.double() - want).abs()
        bad = (err > tol + tol * want.abs()).sum().item()
        self.assertEqual(bad, 0, "%s: %d elements off, worst %.3g" % (what, bad, err.max().item()))

    def run_case(self, B, S, heads, kv, dim, dtype, seqlens, softcap=0.0, what=""):
        q, k, v = self.make(B, S, heads, kv, dim, dtype)
        lens = torch.tensor(seqlens, device=DEV, dtype=torch.int32)
        op = tilerun.op("GQADecodeFwdOp", heads=heads, heads_kv=kv, dim=dim, softcap=softcap)
        want = reference(q, k, v, lens, softcap)
        # the cache past each row's length holds NaN (an unused slot may): none may reach o
        for b, n in enumerate(seqlens):
            k[b, max(0, min(n, S)):] = float("nan")
            v[b, max(0, min(n, S)):] = float("nan")
        o = torch.full_like(q, float("nan"))
        op.call_into((q, k, v, lens), o)
        self.check(o, want, dtype, what + " call_into")
        self.check(op(q, k, v, lens), want, dtype, what + " call")
        self.assertEqual(op.kernel_config()["implementation"], expected_impl(B, S, heads, kv, dim, dtype, softcap),
                         what)
        return q, k, v, lens, want

    def test_agrees_with_sdpa_at_full_length(self):
        q, k, v = self.make(2, 300, 32, 8, 128, torch.bfloat16)
        lens = torch.full((2,), 300, device=DEV, dtype=torch.int32)
        sdpa = F.scaled_dot_product_attention(q.double()[:, :, None], k.double().transpose(1, 2),
                                              v.double().transpose(1, 2), enable_gqa=True)[:, :, 0]
        torch.testing.assert_close(reference(q, k, v, lens), sdpa)
        o = tilerun.op("GQADecodeFwdOp", heads=32, heads_kv=8, dim=128)(q, k, v, lens)
        self.check(o, sdpa, torch.bfloat16, "against sdpa")

    def test_ragged_lengths_softcap_dtypes_dims_and_ratios(self):
        n = 0
        for dtype, dim, (heads, kv), softcap in itertools.product(
                (torch.float16, torch.bfloat16), (64, 128), ((8, 8), (32, 8), (64, 8), (32, 1)), (0.0, 30.0)):
            S = 1024
            seqlens = [1, 7, 1023, 1024, S, 0, 2000, -3]  # 0: zeros; past S: clamped; negative: zeros
            what = "%s dim=%d heads=%d/%d softcap=%g" % (dtype, dim, heads, kv, softcap)
            self.run_case(len(seqlens), S, heads, kv, dim, dtype, seqlens, softcap, what)
            n += 1
        print("  %d configurations of 8 ragged rows" % n)

    def test_batch_one_ragged_lengths_softcap_dtypes_dims_and_ratios(self):
        """Batch 1 (bs1 on sm_90) on the cases the general implementation gets above, one length
        a call."""
        n = 0
        for dtype, dim, (heads, kv), softcap in itertools.product(
                (torch.float16, torch.bfloat16), (64, 128), ((8, 8), (32, 8), (64, 8), (32, 1)), (0.0, 30.0)):
            S = 1024
            for n_used in (1, 7, 63, 64, 65, 1023, 1024, 0, 2000, -3):
                what = "B=1 %s dim=%d heads=%d/%d softcap=%g seqlen=%d" % (dtype, dim, heads, kv, softcap, n_used)
                self.run_case(1, S, heads, kv, dim, dtype, [n_used], softcap, what)
                n += 1
        print("  %d batch-1 calls" % n)

    def test_long_context_range(self):
        """The spec's long-context range (batch 1, KV >= 1024, heads 32/4, dim 128, float16), its
        edges, and S = 131072."""
        for S, used in ((1024, 1024), (1024, 5), (4096, 4096), (4096, 4000), (131072, 131072), (131072, 99999)):
            self.run_case(1, S, 32, 4, 128, torch.float16, [used], what="long context S=%d used %d" % (S, used))
        self.run_case(1, 1023, 32, 4, 128, torch.float16, [1023], what="S=1023: not long")
        # caches not 16-byte aligned (on sm_90 the bulk build takes no tensor copies then)
        for S in (1024, 8192):
            q, k, v = self.make(1, S, 32, 4, 128, torch.float16)
            k2 = torch.empty(k.numel() + 1, device=DEV, dtype=k.dtype)[1:].view(k.shape)
            v2 = torch.empty(v.numel() + 1, device=DEV, dtype=v.dtype)[1:].view(v.shape)
            k2.copy_(k)
            v2.copy_(v)
            lens = torch.tensor([S - 9], device=DEV, dtype=torch.int32)
            op = tilerun.op("GQADecodeFwdOp", heads=32, heads_kv=4, dim=128)
            self.check(op(q, k2, v2, lens), reference(q, k, v, lens), torch.float16, "long context S=%d misaligned" % S)
            self.assertEqual(op.kernel_config()["implementation"], "gqa_dense_decode_long_context")

    def test_batch_one_caches_shorter_than_a_slot(self):
        """Caches of fewer rows than one 64-row slot (the tensor copies' box reaches past S)."""
        for S in (1, 7, 63, 65):
            for used in sorted({1, S // 2 or 1, S}):
                for dtype in (torch.float16, torch.bfloat16):
                    self.run_case(1, S, 32, 8, 128, dtype, [used], what="S=%d used %d %s" % (S, used, dtype))

    def test_empty_cache(self):
        """S = 0: zeros, for batch 1 and for a batch."""
        for B in (1, 3):
            q = torch.randn(B, 32, 128, device=DEV, dtype=torch.bfloat16)
            k = torch.empty(B, 0, 8, 128, device=DEV, dtype=torch.bfloat16)
            lens = torch.zeros(B, device=DEV, dtype=torch.int32)
            o = tilerun.op("GQADecodeFwdOp", heads=32, heads_kv=8, dim=128)(q, k, k, lens)
            self.assertTrue(torch.equal(o, torch.zeros_like(q)), "B=%d" % B)

    def test_batch_one_either_side_of_the_cluster_bound(self):
        """Batch 1 on sm_90 takes one kernel (the splits a cluster's CTAs, merged through its shared
        memory) for caches of at most 4096 rows and two kernels (partials, then a merge) above:
        lengths either side, ragged, and two runs bit for bit (the merge's order is fixed)."""
        for S in (2048, 4095, 4096, 4097, 8192):
            for (heads, kv), dtype in (((32, 8), torch.bfloat16), ((64, 8), torch.float16), ((32, 1), torch.bfloat16)):
                for used in sorted({1, 65, S // 2 + 1, S}):
                    self.run_case(1, S, heads, kv, 128, dtype, [used],
                                  what="B=1 S=%d used %d heads=%d/%d %s" % (S, used, heads, kv, dtype))
            q, k, v = self.make(1, S, 32, 8, 64, torch.bfloat16)
            lens = torch.tensor([S - 5], device=DEV, dtype=torch.int32)
            op = tilerun.op("GQADecodeFwdOp", heads=32, heads_kv=8, dim=64)
            first = op(q, k, v, lens)
            self.check(first, reference(q, k, v, lens), torch.bfloat16, "B=1 S=%d dim 64" % S)
            self.assertTrue(torch.equal(first, op(q, k, v, lens)), "B=1 S=%d: two runs differ" % S)

    def test_caches_not_16_byte_aligned(self):
        for B in (1, 3):
            for dtype in (torch.float16, torch.bfloat16):
                S, heads, kv, dim = 700, 32, 8, 128
                q, k, v = self.make(B, S, heads, kv, dim, dtype)
                kb = torch.empty(k.numel() + 1, device=DEV, dtype=dtype)
                vb = torch.empty(v.numel() + 1, device=DEV, dtype=dtype)
                k2 = kb[1:].view(k.shape)
                v2 = vb[1:].view(v.shape)
                k2.copy_(k)
                v2.copy_(v)
                self.assertNotEqual(k2.data_ptr() % 16, 0)
                lens = torch.tensor([S - 3 * i for i in range(B)], device=DEV, dtype=torch.int32)
                op = tilerun.op("GQADecodeFwdOp", heads=heads, heads_kv=kv, dim=dim)
                want = reference(q, k, v, lens)
                self.check(op(q, k2, v2, lens), want, dtype, "B=%d %s misaligned" % (B, dtype))
                self.assertTrue(torch.equal(op(q, k2, v2, lens), op(q, k, v, lens)), "B=%d %s" % (B, dtype))

    def test_workload_rows(self):
        rt = tilerun.default_runtime()
        for label, specs, params in rt.workloads("GQADecodeFwdOp", "cuda:0"):
            (qs, dt, _), (ks, _, _) = specs[0], specs[1]
            B, S = ks[0], ks[1]
            lens = [S] * B
            if B > 2:
                lens[1] = S // 3
                lens[2] = 1
            self.run_case(B, S, params["heads"], params["heads_kv"], params["dim"], getattr(torch, dt), lens,
                          what=label)

    def test_long_context_and_large_batch(self):
        self.run_case(1, 131072, 32, 8, 128, torch.bfloat16, [131072], what="S=131072")
        self.run_case(1, 131072, 32, 8, 128, torch.bfloat16, [70001], what="S=131072, 70001 used")
        self.run_case(64, 4096, 32, 8, 128, torch.bfloat16, [4096 - 17 * i for i in range(64)], what="B=64")

    def test_a_captured_step_replays_as_seqlens_grow(self):
        self.replay_case(4, 2048)
        self.replay_case(1, 4096)

    def replay_case(self, B, S):
        heads, kv, dim = 32, 8, 128
        q, k, v = self.make(B, S, heads, kv, dim, torch.bfloat16)
        op = tilerun.op("GQADecodeFwdOp", heads=heads, heads_kv=kv, dim=dim)
        lens = torch.full((B,), 1, device=DEV, dtype=torch.int32)
        o = torch.empty_like(q)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            op.call_into((q, k, v, lens), o)  # built before the capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            op.call_into((q, k, v, lens), o)
        for step in range(100):
            n = 1 + step * 20
            lens.copy_(torch.tensor([n, n + 1, max(1, n // 2), S][:B], device=DEV, dtype=torch.int32))
            o.fill_(float("nan"))
            g.replay()
            eager = op(q, k, v, lens)
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(o, eager), "B=%d step %d" % (B, step))
            if step % 33 == 0:
                self.check(o, reference(q, k, v, lens), torch.bfloat16, "B=%d step %d" % (B, step))


if __name__ == "__main__":
    print("tilerun %s (%s); torch %s on %s" % (tilerun.__version__, tilerun.library_path,
                                                torch.__version__, torch.cuda.get_device_name(DEV)))
    unittest.main(verbosity=2)
