"""decode_lengths.py: where batch-1 GQA decode's time goes on short caches: tilerun's kernel
(32/8 heads, dim 128, bf16) over cache lengths from 16 rows up, against the timing's own floor
(a one-element torch add and tilerun's Add 1x4096), every figure the median device time of one
call as bench_gpu.py times it (a CUDA graph replayed, one call a set of inputs, with sets enough
that a replay reads at least 256 MB of caches, so the L2 holds none of them; at most 2048 sets,
which at 16 rows is 128 MB: the table gives the sets and the megabytes).

On sm_90 these lengths take the batch-1 kernel's cluster build: a cluster of CTAs a KV head, each
CTA a split of whole 64-row slots (kernels/intree/attention.c); the table gives both as that file
splits a cache (at most 8 CTAs, splits rounded up to 64 rows). With --zero, each length runs a
second time with seqlens 0: the split's first copies still arrive, nothing is attended.

    python3 python/bench/decode_lengths.py [--zero] [S ...]    (default S: 16 64 128 256 512 1024 2048 4096)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402  (graph_us, rotated_sets, cycle; adds python/ to the path)
import tilerun  # noqa: E402

torch = bench_gpu.torch
HEADS, HEADS_KV, DIM = 32, 8, 128
MOST_CTAS, SLOT_ROWS = 8, 64  # attention.c's TR_GQA_CLUSTER_MAX and DECODE_MIN_ROWS_A_SPLIT
MOST_SETS = 2048


def split(S):
    """(CTAs a KV head, slots a CTA) as attention.c's split_rows gives the cluster build."""
    rows = (S + MOST_CTAS - 1) // MOST_CTAS
    chunk = (rows + SLOT_ROWS - 1) // SLOT_ROWS * SLOT_ROWS
    return (S + chunk - 1) // chunk, chunk // SLOT_ROWS


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lengths", nargs="*", type=int, metavar="S",
                    help="cache lengths (default 16 64 128 256 512 1024 2048 4096)")
    ap.add_argument("--zero", action="store_true", help="also time each length with seqlens 0")
    args = ap.parse_args()
    if any(s < 1 for s in args.lengths):
        ap.error(f"a cache length is at least 1; got {min(args.lengths)}")
    if torch is None or not torch.cuda.is_available():
        sys.exit("decode_lengths.py: needs PyTorch with a CUDA device")
    lengths = args.lengths or [16, 64, 128, 256, 512, 1024, 2048, 4096]
    dt = torch.bfloat16
    one = torch.zeros(1, device="cuda")
    add = tilerun.op("AddFwdOp")
    a, b, o = (torch.randn(16, 1, 4096, device="cuda", dtype=dt) for _ in range(3))
    add_set = bench_gpu.cycle(16)

    def run_add():
        i = add_set()
        add.call_into((a[i], b[i]), o[i])

    print(f"device: {torch.cuda.get_device_name()}")
    print(f"floor: torch add_ on one element {bench_gpu.graph_us(lambda: one.add_(1), 20):.2f} us, "
          f"tilerun Add 1x4096 {bench_gpu.graph_us(run_add, 20):.2f} us")
    print("| S | CTAs a KV head | slots a CTA | seqlens | sets | MB a replay | tilerun us | impl |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for S in lengths:
        set_bytes = 2 * S * HEADS_KV * DIM * 2
        n = bench_gpu.rotated_sets(set_bytes, most=MOST_SETS)
        # the sets as views of one allocation a tensor: set i is batch row i, on its own
        k = torch.randn(n, S, HEADS_KV, DIM, device="cuda", dtype=dt)
        v = torch.randn(n, S, HEADS_KV, DIM, device="cuda", dtype=dt)
        q = torch.randn(n, HEADS, DIM, device="cuda", dtype=dt)
        out = torch.empty_like(q)
        ctas, slots = split(S)
        for zero in (False, True) if args.zero else (False,):
            op = tilerun.op("GQADecodeFwdOp", heads=HEADS, heads_kv=HEADS_KV, dim=DIM)
            lens = torch.full((1,), 0 if zero else S, device="cuda", dtype=torch.int32)
            nxt = bench_gpu.cycle(n)

            def run():
                i = nxt()
                op.call_into((q[i:i + 1], k[i:i + 1], v[i:i + 1], lens), out[i:i + 1])
            t = bench_gpu.graph_us(run, max(20, n))
            impl = op.kernel_config()["implementation"]
            print(f"| {S} | {ctas} | {slots} | {'0' if zero else 'S'} | {n} | {n * set_bytes / 2**20:.0f} | "
                  f"{t:.2f} | {impl} |", flush=True)
        del k, v, q, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
