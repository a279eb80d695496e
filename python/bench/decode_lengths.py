"""decode_lengths.py: where batch-1 GQA decode's time goes on short caches: tilerun's kernel
(32/8 heads, dim 128, bf16) over cache lengths from 16 rows up, against the timing's own floor
(a one-element torch add and tilerun's Add 1x4096), every figure the median device time of one
call as bench_gpu.py times it (a CUDA graph of 20 calls over 16 rotated input sets).

On sm_90 these lengths take the batch-1 kernel's cluster build: a cluster of CTAs a KV head, each
CTA a split of whole 64-row slots (kernels/intree/attention.c), so the table shows what a CTA's
count and its slots cost. With --zero, each length runs a second time with seqlens 0: the
split's first copies still arrive, nothing is attended.

    python3 python/bench/decode_lengths.py [--zero] [S ...]    (default S: 16 64 128 256 512 1024 2048 4096)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402  (graph_us; adds python/ to the path)
import tilerun  # noqa: E402

torch = bench_gpu.torch
SETS = 16


def rotated(sets):
    """A call of each set in turn."""
    i = [0]

    def nxt():
        i[0] = (i[0] + 1) % len(sets)
        return sets[i[0]]
    return nxt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lengths", nargs="*", type=int, metavar="S",
                    help="cache lengths (default 16 64 128 256 512 1024 2048 4096)")
    ap.add_argument("--zero", action="store_true", help="also time each length with seqlens 0")
    args = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        sys.exit("decode_lengths.py: needs PyTorch with a CUDA device")
    if any(s < 1 for s in args.lengths):
        sys.exit(f"decode_lengths.py: a cache length is at least 1; got {min(args.lengths)}")
    lengths = args.lengths or [16, 64, 128, 256, 512, 1024, 2048, 4096]
    dt = torch.bfloat16
    one = torch.zeros(1, device="cuda")
    add = tilerun.op("AddFwdOp")
    adds = [tuple(torch.randn(1, 4096, device="cuda", dtype=dt) for _ in range(3)) for _ in range(SETS)]
    next_add = rotated(adds)

    def run_add():
        a, b, o = next_add()
        add.call_into((a, b), o)

    print(f"device: {torch.cuda.get_device_name()}")
    print(f"floor: torch add_ on one element {bench_gpu.graph_us(lambda: one.add_(1), 20):.2f} us, "
          f"tilerun Add 1x4096 {bench_gpu.graph_us(run_add, 20):.2f} us")
    op = tilerun.op("GQADecodeFwdOp", heads=32, heads_kv=8, dim=128)
    print("| S | seqlens | tilerun us | impl |")
    print("| --- | --- | --- | --- |")
    for S in lengths:
        for zero in (False, True) if args.zero else (False,):
            sets = []
            for _ in range(SETS):
                q = torch.randn(1, 32, 128, device="cuda", dtype=dt)
                k = torch.randn(1, S, 8, 128, device="cuda", dtype=dt)
                v = torch.randn(1, S, 8, 128, device="cuda", dtype=dt)
                lens = torch.full((1,), 0 if zero else S, device="cuda", dtype=torch.int32)
                sets.append((q, k, v, lens, torch.empty_like(q)))
            nxt = rotated(sets)

            def run():
                q, k, v, lens, o = nxt()
                op.call_into((q, k, v, lens), o)

            t = bench_gpu.graph_us(run, 20)
            impl = op.kernel_config()["implementation"]
            print(f"| {S} | {'0' if zero else 'S'} | {t:.2f} | {impl} |", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
