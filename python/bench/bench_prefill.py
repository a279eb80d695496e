"""bench_prefill.py: causal GQA prefill device time, tilerun's in-tree kernel (the implementation the
selection names, in the row: gqa_prefill_wgmma on sm_90, gqa_prefill_flash elsewhere) against
PyTorch's scaled_dot_product_attention(is_causal=True, enable_gqa=True) restricted to its flash
backend, side by side in one run on one GPU, as a markdown table.

Each figure is the median device time of one call, as bench_gpu.py times (CUDA-graph replay of
20 calls over rotating inputs, so the L2 holds none of them: at least 256 MB of inputs in
rotation). tilerun gets q [B, L, heads, dim] and k, v [B, L, heads_kv, dim] (the manifest's
layout); sdpa gets the same values in its own [B, heads, L, dim] layout, made contiguous before
timing. TFLOPS counts the causal triangle: 2 * B * heads * L * L * dim flops (q.k and p.v, half
of the full square's 4 * B * heads * L^2 * dim), the manifest's roofline. Rows: Llama 3.1 8B
(heads 32/8) and 70B (64/8), dim 128, 2048 tokens, batch 1 and 4, bfloat16. Where the flash
backend refuses enable_gqa, sdpa is given k and v with their heads repeated (the row says so).

    python3 python/bench/bench_prefill.py [--calls N] [--tokens L]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402  (graph_us, cycle; adds python/ to the path)
import tilerun  # noqa: E402

torch = bench_gpu.torch
F = bench_gpu.F

# (label, B, heads, heads_kv, dim)
ROWS = [
    ("llama3.1-8b prefill", 1, 32, 8, 128),
    ("llama3.1-8b prefill", 4, 32, 8, 128),
    ("llama3.1-70b prefill", 1, 64, 8, 128),
    ("llama3.1-70b prefill", 4, 64, 8, 128),
]


def flash_sdpa(q, k, v, gqa):
    """sdpa on its flash backend only; `gqa`: with enable_gqa, else k and v already repeated."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        if gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Needs PyTorch with a CUDA device and tilerun's library "
                                        "(TILERUN_LIBRARY, TILERUN_MANIFEST_DIR, TILERUN_BACKEND_PATH).")
    ap.add_argument("--calls", type=int, default=20, help="calls per captured graph (default 20)")
    ap.add_argument("--tokens", type=int, default=2048, help="prompt length L (default 2048)")
    args = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        sys.exit("bench_prefill.py: needs PyTorch with a CUDA device")
    torch.manual_seed(0)
    L = args.tokens
    dt = torch.bfloat16
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; bfloat16, L = {L}")
    print("| row | B | L | heads | implementation | tilerun us | TFLOPS | sdpa flash us | TFLOPS | tilerun/sdpa speed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, B, heads, kv, dim in ROWS:
        set_bytes = 2 * (2 * B * L * heads * dim + 2 * B * L * kv * dim)  # q, o, k, v
        n = max(2, min(16, (256 << 20) // set_bytes + 1))
        op = tilerun.op("GQAPrefillFwdOp", heads=heads, heads_kv=kv, dim=dim)
        sets = []
        for _ in range(n):
            q = torch.randn(B, L, heads, dim, device="cuda", dtype=dt)
            k = torch.randn(B, L, kv, dim, device="cuda", dtype=dt)
            v = torch.randn(B, L, kv, dim, device="cuda", dtype=dt)
            sets.append((q, k, v, torch.empty_like(q)))
        tsets = [(q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous())
                 for q, k, v, _ in sets]
        gqa = True
        try:
            want = flash_sdpa(*tsets[0], gqa=True)
        except RuntimeError:  # this torch's flash backend takes no enable_gqa: repeat the KV heads
            gqa = False
            tsets = [(q, k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1))
                     for q, k, v in tsets]
            want = flash_sdpa(*tsets[0], gqa=False)
        torch.testing.assert_close(op(*sets[0][:3]).float(), want.transpose(1, 2).float(), atol=2e-2, rtol=2e-2)
        nxt = bench_gpu.cycle(n)

        def run_tilerun():
            q, k, v, o = sets[nxt()]
            op.call_into((q, k, v), o)

        def run_sdpa():
            return flash_sdpa(*tsets[nxt()], gqa=gqa)

        impl = op.kernel_config()["implementation"]
        t_us = bench_gpu.graph_us(run_tilerun, args.calls)
        s_us = bench_gpu.graph_us(run_sdpa, args.calls)
        flops = 2 * B * heads * L * L * dim
        note = "" if gqa else " (sdpa: KV heads repeated)"
        print(f"| {label}{note} | {B} | {L} | {heads}/{kv} | {impl} | {t_us:.1f} | {flops / t_us / 1e6:.0f} | "
              f"{s_us:.1f} | {flops / s_us / 1e6:.0f} | {s_us / t_us:.2f} |", flush=True)
        del sets, tsets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
