"""bench_gemm.py: device time of tilerun's GemmFwdOp on the GPU against torch.matmul, side by
side in one run, per workload row of manifest/spec/gemm.yaml plus the decode shapes of Llama 3.1
8B (m in 1, 16, 64 with n x k of 4096x4096, 14336x4096, 4096x14336) and 4096^3 / 8192^3 bf16.

Every figure is the median device time of one call, timed as the replay of a CUDA graph of
--calls calls over operands rotated so that the L2 holds none of them (as bench_gpu.py times):
tilerun untuned, tilerun after request_tune (the op's kernel times its candidates on buffers of
its own), and torch.matmul (on b.t() for the trans_b rows, as torch.nn.functional.linear does).
Per row: the implementation tilerun chose and its tuned config, TFLOP/s, the share of the card's
copy rate (measured in the same run) that the operands' bytes (a + b + d, each once) make,
torch's time over tilerun's (above 1: tilerun is faster), and on the decode rows a device copy of
the same bytes (read + write of half of them, over buffers rotated alike) timed the same way: the
ceiling at that size, where a launch's ramp and tail weigh more than on the 2 GiB copy.

Each row's tuned result is also compared with float32 torch.matmul on the same operands (the
output poisoned with NaN first); an error above 1e-2 of the largest value fails the run (exit 1).

    python3 python/bench/bench_gemm.py [--rows SUBSTRING] [--calls N]

Goals (issue 23): rows with m >= 2048 at least 1.0x torch, tuned; decode rows (m <= 64) at least
80% of copy and at least 1.3x torch.
"""
import argparse
import os
import sys

try:  # --help works without PyTorch
    import torch
except ImportError:
    torch = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tilerun  # noqa: E402
from bench_gpu import copy_rate_gbps, cycle, graph_us, same_bytes_copy_us  # noqa: E402  (timed as bench_gpu.py times)

# (label, m, n, k, trans_b)
ROWS = [
    ("llama3.1-8b q/o proj prefill", 2048, 4096, 4096, True),
    ("llama3.1-8b mlp up prefill", 2048, 14336, 4096, True),
    ("llama3.1-8b mlp down prefill", 2048, 4096, 14336, True),
    ("square 4096^3", 4096, 4096, 4096, False),
    ("square 8192^3", 8192, 8192, 8192, False),
]
for _m in (1, 16, 64):
    for _lab, _n, _k in (("q/o proj", 4096, 4096), ("mlp up", 14336, 4096), ("mlp down", 4096, 14336)):
        ROWS.append(("llama3.1-8b %s decode m=%d" % (_lab, _m), _m, _n, _k, True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--rows", default="", help="only rows whose label contains this")
    ap.add_argument("--calls", type=int, default=20, help="calls per captured graph (default 20)")
    args = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        sys.exit("bench_gemm.py: needs PyTorch with a CUDA device (import torch failed or no GPU)")
    torch.manual_seed(0)
    copy = copy_rate_gbps()
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; copy rate {copy:.0f} GB/s "
          f"(2 GiB fp16 copy, same run)")
    print("| row | m x n x k | impl (tuned config) | tilerun us | tuned us | torch us | TFLOP/s | % copy | torch/tilerun "
          "| same-bytes copy us | tuned/copy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    verdicts = []
    wrong = []
    for label, m, n, k, tb in ROWS:
        if args.rows not in label:
            continue
        bf = torch.bfloat16
        byts = (m * k + n * k + m * n) * 2
        sets = max(2, min(16, (400 << 20) // byts + 1))  # operands of 400 MB in all: none stays in L2
        calls = max(args.calls, sets)  # each call of a replay on its own set
        a = [torch.randn(m, k, device="cuda").to(bf) for _ in range(sets)]
        b = [(torch.randn(n, k, device="cuda") if tb else torch.randn(k, n, device="cuda")).to(bf)
             for _ in range(sets)]
        d = [torch.empty(m, n, device="cuda", dtype=bf) for _ in range(sets)]
        nxt = cycle(sets)

        op = tilerun.op("GemmFwdOp", trans_b=tb)
        run_tr = lambda: (lambda j: op.call_into([a[j], b[j]], [d[j]]))(nxt())  # noqa: E731
        run_torch = lambda: (lambda j: torch.matmul(a[j], b[j].t() if tb else b[j], out=d[j]))(nxt())  # noqa: E731
        op.call_into([a[0], b[0]], [d[0]])
        impl = op.kernel_config().get("implementation")
        t_untuned = graph_us(run_tr, calls)
        op.request_tune()
        op.call_into([a[0], b[0]], [d[0]])
        cfg = op.kernel_config()
        t_tuned = graph_us(run_tr, calls)
        t_torch = graph_us(run_torch, calls)
        # the tuned kernel's result against float32 on the same operands: a fast wrong kernel fails the run
        d[0].fill_(float("nan"))
        op.call_into([a[0], b[0]], [d[0]])
        ref = a[0].float() @ (b[0].float().t() if tb else b[0].float())
        err = ((d[0].float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        if not err <= 1e-2:
            wrong.append(f"{label}: largest error {err:.3g} of the largest |value| (at most 1e-2 expected)")
        extra = ", ".join(f"{key}={v}" for key, v in cfg.items() if key in ("split", "algorithm", "algorithms_offered"))
        tflops = 2 * m * n * k / t_tuned / 1e6
        pct = 100 * byts / t_tuned / 1e3 / copy
        ratio = t_torch / t_tuned
        cp = "- | -"
        if m <= 64:
            del a, b, d  # room for the copy's buffers, rotated as the operands were
            cp_us = same_bytes_copy_us(byts, calls, sets)
            cp = f"{cp_us:.2f} | {t_tuned / cp_us:.2f}"
        print(f"| {label} | {m}x{n}x{k} | {impl} ({extra}) | {t_untuned:.2f} | {t_tuned:.2f} | {t_torch:.2f} | "
              f"{tflops:.1f} | {pct:.0f}% | {ratio:.2f} | {cp} |", flush=True)
        if m >= 2048:
            verdicts.append((label, f"tuned {ratio:.2f}x torch (goal >= 1.0)", ratio >= 1.0))
        if m <= 64:
            verdicts.append((label, f"{pct:.0f}% of copy (goal >= 80%), {ratio:.2f}x torch (goal >= 1.3)",
                             pct >= 80 and ratio >= 1.3))
        a = b = d = None
        torch.cuda.empty_cache()
    print()
    print("goals:")
    for label, text, ok in verdicts:
        print(f"  {label}: {text}: {'met' if ok else 'NOT met'}")
    if wrong:
        print("WRONG RESULTS (tilerun's output against float32 torch.matmul):", *wrong, sep="\n  ")
        sys.exit(1)


if __name__ == "__main__":
    main()
