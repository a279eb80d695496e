"""bench_gpu.py: device time of tilerun's in-tree CUDA kernels against PyTorch (eager and
torch.compile), per workload row of the manifest, side by side in one run on one GPU, with the
card's copy bandwidth measured in the same run.

Every figure is the median device time of one call, timed as the replay of a CUDA graph of 20
calls over rotating inputs and outputs (so host overhead is out of it), as
../shared/anchors/torch_kernels.py times PyTorch: sets of them enough that a replay touches at
least 256 MB (so the L2 holds none of them), one graph call a set where that is more than 20, at
most 64 sets (the decode rows, a few KB a set, stay in L2 as a model's would). "tilerun" writes
into the rotating outputs (Op.call_into); "tilerun alloc" lets tilerun allocate each output, as PyTorch's calls do (inside
the graph: the graph's own allocation nodes). Bandwidth counts each tensor once (the
manifest's roofline bytes) and is given as a percentage of the copy rate.

    python3 python/bench/bench_gpu.py [--ops SUBSTRING] [--rows SUBSTRING] [--no-compile] [--calls N]

Needs TILERUN_LIBRARY (or the binding's default search) and TILERUN_MANIFEST_DIR.
"""
import argparse
import os
import sys

try:  # --help works without PyTorch; a run needs it
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tilerun  # noqa: E402

BF16 = torch.bfloat16 if torch is not None else None

# The workload rows of manifest/spec/{norm,softmax,elementwise}.yaml for the four ops with CUDA
# kernels: (label, shape of x / a, extra params).
ROWS = {
    "RMSNormFwdOp": [
        ("llama3.1-8b prefill", (2048, 4096)), ("llama3.1-8b decode", (1, 4096)),
        ("llama3.1-8b decode batch 32", (32, 4096)), ("llama3.1-70b prefill", (2048, 8192)),
        ("llama3.1-70b decode", (1, 8192)), ("llama3.1-405b prefill", (2048, 16384)),
        ("llama3.1-405b decode", (1, 16384)), ("16384x8192 bf16 (bandwidth)", (16384, 8192))],
    "LayerNormFwdOp": [
        ("llama3.1-8b size prefill", (2048, 4096)), ("llama3.1-8b size decode", (1, 4096)),
        ("llama3.1-70b size prefill", (2048, 8192)), ("llama3.1-70b size decode", (1, 8192)),
        ("llama3.1-405b size prefill", (2048, 16384)), ("llama3.1-405b size decode", (1, 16384)),
        ("16384x8192 bf16 (bandwidth)", (16384, 8192))],
    "SoftmaxFwdOp": [
        ("llama3.1-8b prefill attention scores batch 1", (1, 32, 2048, 2048)),
        ("llama3.1-8b prefill attention scores batch 16", (16, 32, 2048, 2048)),
        ("llama3.1 logits decode (float32 out)", (1, 128256)),
        ("llama3.1 logits decode batch 64 (float32 out)", (64, 128256)),
        ("16384x8192 bf16 (bandwidth)", (16384, 8192))],
    # manifest/spec/rope.yaml: x [tokens, heads, 128], an 8192-row cache, int64 positions
    "RoPEFwdOp": [
        ("llama3.1-8b prefill queries", (2048, 32, 128)), ("llama3.1-8b prefill keys", (2048, 8, 128)),
        ("llama3.1-8b decode batch 64 queries", (64, 32, 128))],
    "AddFwdOp": [
        ("llama3.1-8b residual prefill", (2048, 4096)), ("llama3.1-8b residual decode", (1, 4096)),
        ("llama3.1-70b residual prefill", (2048, 8192)), ("llama3.1-70b residual decode", (1, 8192))],
}


def graph_us(fn, calls, reps=20):
    """Median device time of one call: a CUDA graph of `calls` calls, replayed `reps` times."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        st.record()
        g.replay()
        en.record()
        torch.cuda.synchronize()
        ts.append(st.elapsed_time(en) * 1e3 / calls)
    ts.sort()
    return ts[len(ts) // 2]


ROTATED = 256 << 20  # bytes a replay touches at least, where the sets allow
MOST_SETS = 64


def rotated_sets(byts, most=MOST_SETS):
    """Input sets of `byts` bytes each enough that a replay of one call a set touches ROTATED
    bytes (at least 2, at most `most`)."""
    return max(2, min(most, -(-ROTATED // max(1, byts))))


def cycle(n):
    """A function that returns 1, 2, ..., n - 1, 0, 1, ... in turn: the next set of inputs, so a
    replay's consecutive calls take consecutive sets."""
    i = [0]

    def nxt():
        i[0] = (i[0] + 1) % n
        return i[0]
    return nxt


def same_bytes_copy_us(byts, calls, sets=None):
    """The same traffic as one device copy (read + write of byts / 2 bytes), timed as graph_us
    times, over `sets` source/destination pairs in turn (default: rotated_sets(byts)), a graph of
    at least one call a pair: the ceiling at this size, where launch ramp and tail weigh more than
    on 2 GiB."""
    sets = rotated_sets(byts) if sets is None else sets
    calls = max(calls, sets)
    half = max(1, byts // 4)  # float16 elements in byts / 2 bytes
    src = [torch.empty(half, device="cuda", dtype=torch.float16) for _ in range(sets)]
    dst = [torch.empty(half, device="cuda", dtype=torch.float16) for _ in range(sets)]
    nxt = cycle(sets)

    def step():
        j = nxt()
        dst[j].copy_(src[j])

    us = graph_us(step, calls)
    del src, dst
    return us


def copy_rate_gbps():
    """The card's read+write ceiling: a 2 GiB copy timed eagerly (median of 10)."""
    src = torch.randn(1 << 30, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(10):
        st.record()
        dst.copy_(src)
        en.record()
        torch.cuda.synchronize()
        ts.append(st.elapsed_time(en) * 1e3)
    ts.sort()
    return 2 * src.numel() * 2 / ts[len(ts) // 2] / 1e3


def case(op_name, shape):
    """(tilerun op, torch function, make inputs, output dtype, roofline bytes)."""
    n = shape[-1]
    numel = 1
    for d in shape:
        numel *= d
    if op_name == "RMSNormFwdOp":
        op = tilerun.op(op_name, normalized_shape=(n,), eps=1e-6)
        ref = lambda x, w: F.rms_norm(x, (n,), w, 1e-6)  # noqa: E731
        make = lambda: [torch.randn(shape, device="cuda", dtype=BF16), torch.randn(n, device="cuda", dtype=BF16)]  # noqa: E731,E501
        return op, ref, make, BF16, (2 * numel + n) * 2
    if op_name == "LayerNormFwdOp":
        op = tilerun.op(op_name, normalized_shape=(n,), eps=1e-5)
        ref = lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5)  # noqa: E731
        make = lambda: [torch.randn(shape, device="cuda", dtype=BF16), torch.randn(n, device="cuda", dtype=BF16),  # noqa: E731
                        torch.randn(n, device="cuda", dtype=BF16)]
        return op, ref, make, BF16, (2 * numel + 2 * n) * 2
    if op_name == "SoftmaxFwdOp":
        out = torch.float32 if n == 128256 else BF16
        op = tilerun.op(op_name, dim=-1, dtype=out) if out != BF16 else tilerun.op(op_name, dim=-1)
        ref = (lambda x: torch.softmax(x, -1, dtype=out)) if out != BF16 else (lambda x: torch.softmax(x, -1))  # noqa: E731
        make = lambda: [torch.randn(shape, device="cuda", dtype=BF16)]  # noqa: E731
        return op, ref, make, out, numel * 2 + numel * (4 if out == torch.float32 else 2)
    if op_name == "RoPEFwdOp":
        tokens, heads, dim = shape
        half, rows = dim // 2, 8192
        op = tilerun.op(op_name, is_neox=True)

        def ref(pos, x, cache):  # vLLM's layout, NeoX halves, in torch eager
            cs = cache[pos].unsqueeze(1)
            cos, sin = cs[..., :half], cs[..., half:]
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

        make = lambda: [torch.randint(0, rows, (tokens,), device="cuda", dtype=torch.int64),  # noqa: E731
                        torch.randn(shape, device="cuda", dtype=BF16),
                        torch.randn(rows, dim, device="cuda", dtype=BF16)]
        return op, ref, make, BF16, tokens * 8 + 2 * numel * 2 + min(tokens, rows) * dim * 2
    op = tilerun.op(op_name)
    ref = lambda a, b: torch.add(a, b)  # noqa: E731
    make = lambda: [torch.randn(shape, device="cuda", dtype=BF16), torch.randn(shape, device="cuda", dtype=BF16)]  # noqa: E731,E501
    return op, ref, make, BF16, 3 * numel * 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="only ops whose name contains this")
    ap.add_argument("--rows", default="", help="only rows whose label holds this text")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (minutes of compiling)")
    ap.add_argument("--calls", type=int, default=20,
                    help="calls per captured graph (default 20; more where a row rotates more input sets)")
    args = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        sys.exit("bench_gpu.py: needs PyTorch with a CUDA device (import torch failed or no GPU)")
    torch.manual_seed(0)
    copy = copy_rate_gbps()
    print(f"device: {torch.cuda.get_device_name()}; copy rate {copy:.0f} GB/s (2 GiB fp16 copy, same run)")
    print("| op | row | shape | tilerun us | GB/s | % copy | tilerun alloc us | % copy | eager us | % copy | compile us | % copy | tilerun/eager | "
          "same-bytes copy us | tilerun/copy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    worst = {}
    for op_name, rows in ROWS.items():
        if args.ops not in op_name:
            continue
        for label, shape in rows:
            if args.rows not in label:
                continue
            op, ref, make, out_dtype, byts = case(op_name, shape)
            numel = 1
            for d in shape:
                numel *= d
            k = rotated_sets(byts)
            calls = max(args.calls, k)  # each call of a replay on its own set
            ins = [make() for _ in range(k)]
            outs = [torch.empty(shape, device="cuda", dtype=out_dtype) for _ in range(k)]
            nxt = cycle(k)

            def run_tilerun():
                j = nxt()
                op.call_into(ins[j], [outs[j]])

            def run_tilerun_alloc():
                return op(*ins[nxt()])

            def run_eager():
                return ref(*ins[nxt()])

            t_us = graph_us(run_tilerun, calls)
            a_us = graph_us(run_tilerun_alloc, calls)
            e_us = graph_us(run_eager, calls)
            c_txt = "-"
            if not args.no_compile:
                cref = torch.compile(ref)
                c_us = graph_us(lambda: cref(*ins[nxt()]), calls)
                c_txt = f"{c_us:.2f} | {100 * byts / c_us / 1e3 / copy:.0f}%"
            else:
                c_txt = "- | -"
            pct = 100 * byts / t_us / 1e3 / copy
            cp_us = same_bytes_copy_us(byts, calls)
            print(f"| {op_name} | {label} | {'x'.join(map(str, shape))} | {t_us:.2f} | {byts / t_us / 1e3:.0f} | "
                  f"{pct:.0f}% | {a_us:.2f} | {100 * byts / a_us / 1e3 / copy:.0f}% | {e_us:.2f} | {100 * byts / e_us / 1e3 / copy:.0f}% | {c_txt} | {t_us / e_us:.2f} | "
                  f"{cp_us:.2f} | {t_us / cp_us:.2f} |", flush=True)
            if numel * 2 >= 32 << 20 or (op_name == "RoPEFwdOp" and "prefill" in label):
                worst[op_name] = min(worst.get(op_name, 100.0), pct)  # x of 32 MB or more; RoPE's prefill
            if tuple(shape) == (1, 4096):  # the goal's decode rows
                worst[op_name + " decode us"] = max(worst.get(op_name + " decode us", 0.0), t_us)
            del ins, outs
    print()
    print("goals: >= 85% of copy on inputs of 32 MB and more (RMSNorm, LayerNorm, Softmax) and on RoPE's prefill "
          "rows; decode rows (1x4096) <= 2 us")
    for key, v in worst.items():
        if key.endswith("decode us"):
            print(f"  {key[:-10]}: decode row 1x4096 {v:.2f} us: {'met' if v <= 2.0 else 'NOT met'}")
        elif key != "AddFwdOp":
            where = "on the prefill rows" if key == "RoPEFwdOp" else "at >= 32 MB"
            print(f"  {key}: lowest share of copy {where}: {v:.1f}%: {'met' if v >= 85 else 'NOT met'}")


if __name__ == "__main__":
    main()
