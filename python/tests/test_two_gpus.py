"""test_two_gpus.py: one tilerun op instance called on cuda:0 and cuda:1 (the two-GPU machine):
each card's result matches PyTorch computed in float64 on that card, the output stays on the
input's card, the op keeps one built kernel per card, and inputs on two cards are refused naming
both. Run: python3 python/tests/test_two_gpus.py (TILERUN_LIBRARY, TILERUN_MANIFEST_DIR set)."""
import sys

import torch
import torch.nn.functional as F

import tilerun


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
