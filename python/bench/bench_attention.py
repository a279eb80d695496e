"""bench_attention.py: GQA decode device time, tilerun's in-tree kernel against PyTorch's
scaled_dot_product_attention (enable_gqa, its caches in its own [B, heads_kv, S, dim] layout), side
by side in one run on one GPU, with the card's copy rate measured in the same run.

Each figure is the median device time of one call, as bench_gpu.py times (CUDA-graph replay of
20 calls over rotating inputs, so the L2 holds none of them: at least 256 MB of caches in
rotation, each call of a replay on its own set, the graph holding as many calls as there are
sets where that is more than 20). Every row at full length (seqlens = S). Bandwidth counts q, both caches and o once.
A decode step mostly reads, so besides the copy rate (read plus write) the run measures a read
rate: torch.sum over 2 GiB of fp16, timed the same way. "impl" is the implementation tilerun chose
(the selection rules: batch 1 goes to gqa_dense_decode_bs1 on sm_90, the spec's long-context
range to gqa_dense_decode_long_context, the rest to gqa_dense_decode).

    python3 python/bench/bench_attention.py [--calls N] [--rows SUBSTRING]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402  (graph_us, copy_rate_gbps, rotated_sets, cycle; adds python/ to the path)
import tilerun  # noqa: E402

torch = bench_gpu.torch
F = bench_gpu.F

# (label, B, S, heads, heads_kv, dim): the rows, then the manifest's workload rows
ROWS = [
    ("batch 1, kv 1024", 1, 1024, 32, 8, 128),
    ("batch 1, kv 4096", 1, 4096, 32, 8, 128),
    ("batch 1, kv 131072", 1, 131072, 32, 8, 128),
    ("batch 64, kv 4096 (1 GB of cache)", 64, 4096, 32, 8, 128),
    ("llama3.1-8b decode batch 16 kv 8192", 16, 8192, 32, 8, 128),
    ("llama3.1-70b decode batch 16 kv 8192", 16, 8192, 64, 8, 128),
    ("kernel-selection example (heads 32/4, fp16)", 1, 4096, 32, 4, 128),
    ("kernel-selection example kv 1024 (heads 32/4, fp16)", 1, 1024, 32, 4, 128),
    ("kernel-selection example kv 131072 (heads 32/4, fp16)", 1, 131072, 32, 4, 128),
]


def read_rate_gbps():
    """The card's read ceiling, roughly: torch.sum over 2 GiB of fp16 timed eagerly (median of 10)."""
    src = torch.randn(1 << 30, device="cuda", dtype=torch.float16)
    src.sum()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(10):
        st.record()
        src.sum()
        en.record()
        torch.cuda.synchronize()
        ts.append(st.elapsed_time(en) * 1e3)
    ts.sort()
    del src
    torch.cuda.empty_cache()
    return (1 << 30) * 2 / ts[len(ts) // 2] / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20,
                    help="calls per captured graph (default 20; more where a row rotates more input sets)")
    ap.add_argument("--rows", default="", help="only the rows whose label holds this text")
    args = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        sys.exit("bench_attention.py: needs PyTorch with a CUDA device")
    torch.manual_seed(0)
    copy = bench_gpu.copy_rate_gbps()
    read = read_rate_gbps()
    print(f"device: {torch.cuda.get_device_name()}; copy rate {copy:.0f} GB/s (2 GiB fp16 copy), read rate "
          f"{read:.0f} GB/s (torch.sum of 2 GiB fp16), same run")
    print("| row | B | S | heads | impl | tilerun us | GB/s | % copy | % read | sdpa us | GB/s | % copy | % read | "
          "tilerun/sdpa speed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, B, S, heads, kv, dim in ROWS:
        if args.rows not in label:
            continue
        dt = torch.float16 if "fp16" in label else torch.bfloat16
        cache_bytes = 2 * B * S * kv * dim * 2
        # sets enough that a replay's calls read 256 MB of caches (a 50 MB L2 holds none of them);
        # a graph of fewer calls than sets would replay the same few sets, so it gets one call a set
        n = bench_gpu.rotated_sets(cache_bytes, most=1 << 20)
        calls = max(args.calls, n)
        op = tilerun.op("GQADecodeFwdOp", heads=heads, heads_kv=kv, dim=dim)
        sets = []
        for _ in range(n):
            q = torch.randn(B, heads, dim, device="cuda", dtype=dt)
            k = torch.randn(B, S, kv, dim, device="cuda", dtype=dt)
            v = torch.randn(B, S, kv, dim, device="cuda", dtype=dt)
            lens = torch.full((B,), S, device="cuda", dtype=torch.int32)
            sets.append((q, k, v, lens, torch.empty_like(q)))
        # torch's inputs in its own layout, as many sets
        tsets = [(q[:, :, None].contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous())
                 for q, k, v, _, _ in sets]
        torch.testing.assert_close(  # the two compute the same thing
            op(*sets[0][:4]).float(),
            F.scaled_dot_product_attention(*tsets[0], enable_gqa=True)[:, :, 0].float(), atol=2e-2, rtol=2e-2)
        nxt = bench_gpu.cycle(n)

        def run_tilerun():
            q, k, v, lens, o = sets[nxt()]
            op.call_into((q, k, v, lens), o)

        def run_sdpa():
            return F.scaled_dot_product_attention(*tsets[nxt()], enable_gqa=True)

        t_us = bench_gpu.graph_us(run_tilerun, calls)
        s_us = bench_gpu.graph_us(run_sdpa, calls)
        byts = cache_bytes + 2 * B * heads * dim * 2
        impl = op.kernel_config()["implementation"].replace("gqa_dense_decode", "") or "general"
        t_gbs, s_gbs = byts / t_us / 1e3, byts / s_us / 1e3
        print(f"| {label} | {B} | {S} | {heads}/{kv} | {impl.lstrip('_')} | {t_us:.2f} | {t_gbs:.0f} | "
              f"{100 * t_gbs / copy:.0f}% | {100 * t_gbs / read:.0f}% | {s_us:.2f} | {s_gbs:.0f} | "
              f"{100 * s_gbs / copy:.0f}% | {100 * s_gbs / read:.0f}% | {s_us / t_us:.2f} |", flush=True)
        del sets, tsets
        torch.cuda.empty_cache()
    print("\ngoals (issue 25): batch 1 kv 131072 >= 3.9 TB/s; kv 4096 <= 10 us; kv 1024 <= 6 us; batch 64 kv 4096 "
          ">= 3.6 TB/s; every row >= 1.3x sdpa's speed")


if __name__ == "__main__":
    main()
