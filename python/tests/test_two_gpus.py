"""test_two_gpus.py: one tilerun op instance called on cuda:0 and cuda:1 (the two-GPU machine):
each card's result matches PyTorch computed in float64 on that card, the output stays on the
input's card, the op keeps one built kernel per card, and inputs on two cards are refused naming
both. The ops: RMSNormFwdOp, LayerNormFwdOp, GemmFwdOp (the skinny kernel at m = 1 and cuBLASLt
at m = 256, each card with its own handle and workspace; untuned, then tuned on each card) and
GQADecodeFwdOp (the batch-1 and the general kernel). Run: python3 python/tests/test_two_gpus.py
(TILERUN_LIBRARY, TILERUN_MANIFEST_DIR set)."""
import math
import sys

import torch
import torch.nn.functional as F

import tilerun


def report(ok, what):
    print(f"{'PASS' if ok else 'FAIL'} {what}")
    return 0 if ok else 1


def gemm_on_cards(cards):
    """GemmFwdOp (trans_b: weights [n, k]) at m = 1 (the skinny kernel) and m = 256 (cuBLASLt) on
    each card, before and after request_tune (which tunes each card's kernels with that card
    current); bf16 against float64 on the card."""
    failures = 0
    op = tilerun.op("GemmFwdOp", trans_b=True)
    n, k = 4096, 4096
    for tuned in (False, True):
        if tuned:
            op.request_tune()
        for d in cards:
            dev = torch.device("cuda", d)
            for m in (1, 256):
                a = torch.randn(m, k, device=dev).to(torch.bfloat16)
                b = torch.randn(n, k, device=dev).to(torch.bfloat16)
                ref = a.double() @ b.double().t()
                out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
                op.call_into([a, b], [out])
                y = op(a, b)
                torch.cuda.synchronize(dev)
                bound = 1.6e-2 * ref.abs() + 1.6e-2 * math.sqrt(k)  # test_gemm_gpu.py's bf16 tolerance
                for what, got in (("call_into", out), ("call", y)):
                    bad = int((~((got.double() - ref).abs() <= bound)).sum())
                    failures += report(got.device == dev and bad == 0,
                                       f"GemmFwdOp m={m} {what} on {dev}{' tuned' if tuned else ''}: output on "
                                       f"{got.device}, {bad} elements off")
    failures += report(op.memo_count == 2 * len(cards),
                       f"GemmFwdOp: {op.memo_count} built kernels (two shapes on {len(cards)} cards)")
    failures += report(op.kernel_config().get("tuned") is True, f"GemmFwdOp tuned: {op.kernel_config()}")
    return failures


def gqa_decode_reference(q, k, v, lens):
    heads, kv, dim, S = q.shape[1], k.shape[2], q.shape[2], k.shape[1]
    kk = k.double().repeat_interleave(heads // kv, dim=2)
    vv = v.double().repeat_interleave(heads // kv, dim=2)
    s = torch.einsum("bhd,bshd->bhs", q.double(), kk) / math.sqrt(dim)
    s = s.masked_fill(torch.arange(S, device=q.device)[None, None, :] >= lens.long()[:, None, None], float("-inf"))
    return torch.einsum("bhs,bshd->bhd", torch.softmax(s, -1), vv)


def gqa_decode_on_cards(cards):
    """GQADecodeFwdOp (32/8 heads, dim 128, bf16) at batch 1 and batch 4 (ragged lengths) on each
    card against float64 on the card."""
    failures = 0
    op = tilerun.op("GQADecodeFwdOp", heads=32, heads_kv=8, dim=128)
    for d in cards:
        dev = torch.device("cuda", d)
        for B, S, lens in ((1, 4096, [4096]), (4, 1024, [1, 7, 1023, 1024])):
            q = torch.randn(B, 32, 128, device=dev).to(torch.bfloat16)
            k = torch.randn(B, S, 8, 128, device=dev).to(torch.bfloat16)
            v = torch.randn(B, S, 8, 128, device=dev).to(torch.bfloat16)
            seqlens = torch.tensor(lens, device=dev, dtype=torch.int32)
            want = gqa_decode_reference(q, k, v, seqlens)
            o = op(q, k, v, seqlens)
            torch.cuda.synchronize(dev)
            bad = int((~((o.double() - want).abs() <= 2e-2 + 2e-2 * want.abs())).sum())
            failures += report(o.device == dev and bad == 0,
                               f"GQADecodeFwdOp B={B} S={S} on {dev}: output on {o.device}, {bad} elements off, "
                               f"{op.kernel_config().get('implementation')} first built")
    failures += report(op.memo_count == 2 * len(cards),
                       f"GQADecodeFwdOp: {op.memo_count} built kernels (two shapes on {len(cards)} cards)")
    return failures


def main():
    n = torch.cuda.device_count()
    if n < 2:
        print(f"FAIL: this test needs two GPUs; found {n}")
        return 1
    failures = 0
    for name, make, ref in (
        ("RMSNormFwdOp", lambda: tilerun.op("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6),
         lambda x, w: F.rms_norm(x.double(), (4096,), w.double(), 1e-6)),
        ("LayerNormFwdOp", lambda: tilerun.op("LayerNormFwdOp", normalized_shape=(4096,)),
         lambda x, w: F.layer_norm(x.double(), (4096,), w.double(), None, 1e-5)),
    ):
        op = make()
        for d in (0, 1):
            dev = torch.device("cuda", d)
            x = torch.randn(33, 4096, device=dev, dtype=torch.bfloat16)
            w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
            y = op(x, w)
            want = ref(x, w).to(torch.bfloat16)
            err = ((y.double() - want.double()).abs() / (1 + want.double().abs())).max().item()
            ok = y.device == dev and err <= 1.6e-2
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'} {name} on {dev}: output on {y.device}, max error {err:.2e}")
        ok = op.memo_count == 2
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name}: {op.memo_count} built kernels (one per card)")
    failures += gemm_on_cards((0, 1))
    failures += gqa_decode_on_cards((0, 1))
    op = tilerun.op("RMSNormFwdOp", normalized_shape=(64,))
    x = torch.randn(2, 64, device="cuda:0")
    w = torch.randn(64, device="cuda:1")
    try:
        op(x, w)
        print("FAIL: inputs on two cards were accepted")
        failures += 1
    except tilerun.Error as e:
        ok = "cuda:0" in str(e) and "cuda:1" in str(e) and op.memo_count == 0
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} inputs on two cards refused: {e}")
    print(f"summary: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
