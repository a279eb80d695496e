"""bench_host.py: host time of one memo-hit call from Python, tilerun against the framework's own
call of the same op, side by side in one process.

On a GPU (PyTorch with cuda): RMSNorm 1x4096 bfloat16 and Add 1x4096 bfloat16, tilerun's
``op(x, w)`` and ``op.call_into`` against PyTorch eager (``F.rms_norm``, ``torch.add``), plus the
same tilerun calls with every tensor read through ``__dlpack__`` (the route producers without
the DLPack C exchange API take). With ``--c-bench PATH`` (runtime/cuda_call_bench, built with
``bazel build -c opt //runtime:cuda_call_bench``) the C hot path, tr_op_call and
tr_op_call_into of the same RMSNorm, is measured in the same run, and the Python figures are
given over it. On the cpu: Add 1x64 float32 through ``call_into`` against NumPy's
``np.add(..., out=)``, and ``op(a, b)`` against ``np.add(a, b)``.

Each figure is the median over rounds of the mean host time of a batch of calls; the paths are
interleaved in every round, so drift hits all alike. A cuda batch is launched onto an idle
stream (synchronised before, outside the timing) and is short enough that the launch queue never
fills: the time is the host's alone.

    python3 python/bench/bench_host.py [--rounds R] [--calls N] [--cpu-only] [--c-bench PATH]

Needs the tilerun package importable (PYTHONPATH=python), TILERUN_MANIFEST_DIR, and for the cpu
rows the cpu backend (TILERUN_BACKEND_PATH).
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def measure(paths, rounds, calls, sync=None):
    """{name: median us per call}; `paths` maps a name to a function running `calls` calls."""
    times = {name: [] for name in paths}
    for r in range(rounds):
        for name, run in paths.items():
            if sync is not None:
                sync()
            t0 = time.perf_counter_ns()
            run(calls)
            times[name].append((time.perf_counter_ns() - t0) / calls / 1e3)
        if sys.stderr.isatty():
            sys.stderr.write("\r  round %d/%d" % (r + 1, rounds))
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    if sync is not None:
        sync()
    return {name: median(ts) for name, ts in times.items()}


def loop(fn, *args):
    def run(n):
        for _ in range(n):
            fn(*args)
    return run


def loop_out(fn, a, b, out):
    def run(n):
        for _ in range(n):
            fn(a, b, out=out)
    return run


def c_bench(path, rounds):
    """(tr_op_call us, tr_op_call_into us) of RMSNorm 1x4096 bf16, from runtime/cuda_call_bench."""
    r = subprocess.run([path, "--dtype", "bfloat16", str(max(rounds, 20))], capture_output=True,
                       text=True, check=False)
    if r.returncode != 0:
        raise SystemExit("bench_host: %s failed (%d): %s" % (path, r.returncode, r.stderr.strip()))
    into = re.search(r"^\| tr_op_call_into \(memo hit\) \| ([0-9.]+) \|", r.stdout, re.M)
    call = re.search(r"^\| tr_op_call \(memo hit, [^|]*\| ([0-9.]+) \|", r.stdout, re.M)
    if not into or not call:
        raise SystemExit("bench_host: cannot read %s's table:\n%s" % (path, r.stdout))
    return float(call.group(1)), float(into.group(1))


def row(label, ours, peer_label, peer, goal_ratio=None, c_label=None, c_us=None, goal_over_c=None):
    ratio = ours / peer
    cells = ["%s" % label, "%.2f" % ours, peer_label, "%.2f" % peer, "%.2fx" % ratio]
    verdicts = []
    if goal_ratio is not None:
        verdicts.append("%s (<= %.1fx)" % ("met" if ratio <= goal_ratio else "NOT met", goal_ratio))
    if c_us is not None:
        over = ours - c_us
        cells.append("%+.2f over %s" % (over, c_label))
        if goal_over_c is not None:
            verdicts.append("%s (<= +%.1f us over C)" % ("met" if over <= goal_over_c else "NOT met",
                                                          goal_over_c))
    else:
        cells.append("-")
    cells.append("; ".join(verdicts) or "-")
    print("| " + " | ".join(cells) + " |")


def gpu_rows(args, tilerun, ext):
    import torch
    import torch.nn.functional as F
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    bf16 = torch.bfloat16
    x = torch.randn(1, 4096, device=dev, dtype=bf16)
    w = torch.randn(4096, device=dev, dtype=bf16)
    y = torch.empty_like(x)
    a, b, c = (torch.randn(1, 4096, device=dev, dtype=bf16) for _ in range(3))
    rms = tilerun.op("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6)
    add = tilerun.op("AddFwdOp")
    # check once that each path computes the op (and build the kernels: memo hits from here)
    ref = F.rms_norm(x.float(), (4096,), w.float(), 1e-6).to(bf16)
    torch.testing.assert_close(rms(x, w), ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(add(a, b), a + b)
    rms.call_into((x, w), y)
    add.call_into((a, b), c)
    print("routes: torch tensor -> %s; numpy array -> %s" % (ext.route_of(x), "buffer"))

    def fallback(run):
        def wrapped(n):
            was = ext.set_python_route(True)
            try:
                run(n)
            finally:
                ext.set_python_route(was)
        return wrapped

    paths = {
        "torch rms": loop(F.rms_norm, x, (4096,), w, 1e-6),
        "rms op": loop(rms, x, w),
        "rms into": loop(rms.call_into, (x, w), y),
        "rms op dlpack": fallback(loop(rms, x, w)),
        "rms into dlpack": fallback(loop(rms.call_into, (x, w), y)),
        "torch add": loop(torch.add, a, b),
        "torch add out": loop_out(torch.add, a, b, c),
        "add op": loop(add, a, b),
        "add into": loop(add.call_into, (a, b), c),
    }
    # The C figures are taken before and after the Python ones and averaged (a subprocess cannot be
    # interleaved with them; the machine's pace drifts between phases).
    before = c_bench(args.c_bench, args.rounds) if args.c_bench else None
    m = measure(paths, args.rounds, args.calls, sync=torch.cuda.synchronize)
    c_call = c_into = None
    if args.c_bench:
        after = c_bench(args.c_bench, args.rounds)
        c_call, c_into = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
        print("C before / after the Python rows: tr_op_call %.2f / %.2f us, tr_op_call_into %.2f / %.2f us"
              % (before[0], after[0], before[1], after[1]))
    print("\nhost time per memo-hit call on %s, PyTorch %s (median of %d rounds of %d calls, us)\n"
          % (torch.cuda.get_device_name(dev), torch.__version__, args.rounds, args.calls))
    print("| call | tilerun us | peer | peer us | ratio | over C | goal |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    row("RMSNorm 1x4096 bf16, op(x, w)", m["rms op"], "torch eager F.rms_norm", m["torch rms"], 0.5,
        "tr_op_call", c_call, 2.0)
    row("RMSNorm 1x4096 bf16, call_into", m["rms into"], "torch eager F.rms_norm", m["torch rms"],
        0.5, "tr_op_call_into", c_into, 2.0)
    row("RMSNorm, op(x, w) via __dlpack__", m["rms op dlpack"], "torch eager F.rms_norm",
        m["torch rms"], None, "tr_op_call", c_call)
    row("RMSNorm, call_into via __dlpack__", m["rms into dlpack"], "torch eager F.rms_norm",
        m["torch rms"], None, "tr_op_call_into", c_into)
    row("Add 1x4096 bf16, op(a, b)", m["add op"], "torch eager torch.add", m["torch add"], 0.5)
    row("Add 1x4096 bf16, call_into", m["add into"], "torch eager torch.add(out=)",
        m["torch add out"], 0.5)
    if c_call is not None:
        print("\nC, same machine (runtime/cuda_call_bench --dtype bfloat16, the mean of before and after): "
              "tr_op_call %.2f us, tr_op_call_into %.2f us" % (c_call, c_into))


def cpu_rows(args, tilerun):
    import numpy as np
    a = np.ones((1, 64), np.float32)
    b = np.full((1, 64), 2.0, np.float32)
    c = np.empty((1, 64), np.float32)
    add = tilerun.op("AddFwdOp")
    add.call_into((a, b), c)
    np.testing.assert_array_equal(c, a + b)
    np.testing.assert_array_equal(add(a, b), a + b)
    paths = {
        "np add out": loop_out(np.add, a, b, c),
        "add into": loop(add.call_into, (a, b), c),
        "np add": loop(np.add, a, b),
        "add op": loop(add, a, b),
    }
    m = measure(paths, args.rounds, args.calls * 10)
    print("\nhost time per memo-hit call on the cpu (target %s), NumPy %s (median of %d rounds of %d "
          "calls, us)\n" % (add.target, np.__version__, args.rounds, args.calls * 10))
    print("| call | tilerun us | peer | peer us | ratio | over C | goal |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    row("Add 1x64 float32, call_into", m["add into"], "np.add(a, b, out=c)", m["np add out"], 3.0)
    row("Add 1x64 float32, op(a, b)", m["add op"], "np.add(a, b)", m["np add"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=50, help="rounds of batches per path (default 50)")
    p.add_argument("--calls", type=int, default=200,
                   help="calls per batch on cuda (default 200; on the cpu 10 times as many)")
    p.add_argument("--cpu-only", action="store_true", help="only the cpu rows (no PyTorch needed)")
    p.add_argument("--c-bench", metavar="PATH",
                   help="runtime/cuda_call_bench, to give the C hot path in the same run")
    args = p.parse_args()
    import tilerun
    from tilerun import _ext
    print("tilerun %s (%s)" % (tilerun.__version__, tilerun.library_path))
    if not args.cpu_only:
        try:
            import torch
            have_cuda = torch.cuda.is_available()
        except ImportError:
            have_cuda = False
        if not have_cuda:
            raise SystemExit("bench_host: no PyTorch with cuda here; pass --cpu-only for the cpu rows")
        gpu_rows(args, tilerun, _ext)
    cpu_rows(args, tilerun)


if __name__ == "__main__":
    main()
