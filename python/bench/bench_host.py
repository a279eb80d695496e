"""bench_host.py: host time of one memo-hit call from Python, tilerun against the framework's own
call of the same op and against the same call from C, side by side in one process.

On a GPU (PyTorch with cuda): RMSNorm 1x4096 bfloat16 and Add 1x4096 bfloat16, tilerun's
``op(x, w)`` and ``op.call_into`` against PyTorch eager (``F.rms_norm``, ``torch.add``), plus the
same tilerun calls with every tensor read through ``__dlpack__`` (the route producers without
the DLPack C exchange API take). On the cpu: Add 1x64 float32 through ``call_into`` against
NumPy's ``np.add(..., out=)``, and ``op(a, b)`` against ``np.add(a, b)``.

"over C" is over the same memo-hit call made from C in this process: ``tilerun._ext._bench_call``
and ``_bench_call_into`` borrow the same tensors once (as the Python call does, stream included),
then run tr_op_call (freeing its outputs) or tr_op_call_into in a loop in C and time it there.
They are paths of their own in every round, so they are interleaved with the Python paths.

Each figure is the median over rounds of the mean host time of a batch of calls; the paths are
interleaved in every round, so drift hits all alike. A cuda batch is launched onto an idle
stream (synchronised before, outside the timing) and is short enough that the launch queue never
fills: the time is the host's alone.

    python3 python/bench/bench_host.py [--rounds R] [--calls N] [--cpu-only]

Needs the tilerun package importable (PYTHONPATH=python), TILERUN_MANIFEST_DIR, and for the cpu
rows the cpu backend (TILERUN_BACKEND_PATH).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def measure(paths, rounds, calls, sync=None):
    """{name: median us per call}; `paths` maps a name to a function running `calls` calls and
    returning their nanoseconds (see `loop` and `from_c`)."""
    times = {name: [] for name in paths}
    for r in range(rounds):
        for name, run in paths.items():
            if sync is not None:
                sync()
            times[name].append(run(calls) / calls / 1e3)
        if sys.stderr.isatty():
            sys.stderr.write("\r  round %d/%d" % (r + 1, rounds))
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    if sync is not None:
        sync()
    return {name: median(ts) for name, ts in times.items()}


def timed(body):
    """`body(n)` (n calls from Python) as a path: its nanoseconds by the wall clock."""
    def run(n):
        t0 = time.perf_counter_ns()
        body(n)
        return time.perf_counter_ns() - t0
    return run


def loop(fn, *args):
    def body(n):
        for _ in range(n):
            fn(*args)
    return timed(body)


def loop_out(fn, a, b, out):
    def body(n):
        for _ in range(n):
            fn(a, b, out=out)
    return timed(body)


def from_c(ext, op, inputs, out=None):
    """The same memo-hit call from C: tr_op_call_into into `out`, or tr_op_call when `out` is
    None; the extension times its own loop (tensors borrowed once, outside the timing)."""
    if out is None:
        return lambda n: ext._bench_call(op, inputs, n)
    return lambda n: ext._bench_call_into(op, inputs, out, n)


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
    y_c, c_c = torch.empty_like(y), torch.empty_like(c)  # and the loops in C write the same
    ext._bench_call_into(rms, (x, w), y_c, 1)
    ext._bench_call_into(add, (a, b), c_c, 1)
    torch.testing.assert_close(y_c, y, atol=0, rtol=0)
    torch.testing.assert_close(c_c, c, atol=0, rtol=0)
    print("routes: torch tensor -> %s; numpy array -> %s" % (ext.route_of(x), "buffer"))

    def fallback(run):
        def wrapped(n):
            was = ext.set_python_route(True)
            try:
                return run(n)
            finally:
                ext.set_python_route(was)
        return wrapped

    paths = {
        "torch rms": loop(F.rms_norm, x, (4096,), w, 1e-6),
        "rms op": loop(rms, x, w),
        "rms into": loop(rms.call_into, (x, w), y),
        "rms op dlpack": fallback(loop(rms, x, w)),
        "rms into dlpack": fallback(loop(rms.call_into, (x, w), y)),
        "C rms call": from_c(ext, rms, (x, w)),
        "C rms into": from_c(ext, rms, (x, w), y),
        "torch add": loop(torch.add, a, b),
        "torch add out": loop_out(torch.add, a, b, c),
        "add op": loop(add, a, b),
        "add into": loop(add.call_into, (a, b), c),
        "C add call": from_c(ext, add, (a, b)),
        "C add into": from_c(ext, add, (a, b), c),
    }
    m = measure(paths, args.rounds, args.calls, sync=torch.cuda.synchronize)
    print("\nhost time per memo-hit call on %s, PyTorch %s (median of %d rounds of %d calls, us)\n"
          % (torch.cuda.get_device_name(dev), torch.__version__, args.rounds, args.calls))
    print("| call | tilerun us | peer | peer us | ratio | over C | goal |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    row("RMSNorm 1x4096 bf16, op(x, w)", m["rms op"], "torch eager F.rms_norm", m["torch rms"], 0.5,
        "tr_op_call", m["C rms call"], 2.0)
    row("RMSNorm 1x4096 bf16, call_into", m["rms into"], "torch eager F.rms_norm", m["torch rms"],
        0.5, "tr_op_call_into", m["C rms into"], 2.0)
    row("RMSNorm, op(x, w) via __dlpack__", m["rms op dlpack"], "torch eager F.rms_norm",
        m["torch rms"], None, "tr_op_call", m["C rms call"])
    row("RMSNorm, call_into via __dlpack__", m["rms into dlpack"], "torch eager F.rms_norm",
        m["torch rms"], None, "tr_op_call_into", m["C rms into"])
    row("Add 1x4096 bf16, op(a, b)", m["add op"], "torch eager torch.add", m["torch add"], 0.5,
        "tr_op_call", m["C add call"], 2.0)
    row("Add 1x4096 bf16, call_into", m["add into"], "torch eager torch.add(out=)",
        m["torch add out"], 0.5, "tr_op_call_into", m["C add into"], 2.0)
    print("\nC, in this process (tilerun._ext._bench_call*, interleaved with the rows above): RMSNorm "
          "tr_op_call %.2f us, tr_op_call_into %.2f us; Add tr_op_call %.2f us, tr_op_call_into %.2f us"
          % (m["C rms call"], m["C rms into"], m["C add call"], m["C add into"]))
    print("the C call alone against torch (what the Python side cannot go below): RMSNorm %.2fx / %.2fx, "
          "Add %.2fx (tr_op_call / torch.add) / %.2fx (tr_op_call_into / torch.add(out=))"
          % (m["C rms call"] / m["torch rms"], m["C rms into"] / m["torch rms"],
             m["C add call"] / m["torch add"], m["C add into"] / m["torch add out"]))


def cpu_rows(args, tilerun, ext):
    import numpy as np
    a = np.ones((1, 64), np.float32)
    b = np.full((1, 64), 2.0, np.float32)
    c = np.empty((1, 64), np.float32)
    add = tilerun.op("AddFwdOp")
    add.call_into((a, b), c)
    np.testing.assert_array_equal(c, a + b)
    np.testing.assert_array_equal(add(a, b), a + b)
    c_c = np.empty_like(c)  # the loop in C writes the same
    ext._bench_call_into(add, (a, b), c_c, 1)
    np.testing.assert_array_equal(c_c, c)
    paths = {
        "np add out": loop_out(np.add, a, b, c),
        "add into": loop(add.call_into, (a, b), c),
        "C add into": from_c(ext, add, (a, b), c),
        "np add": loop(np.add, a, b),
        "add op": loop(add, a, b),
        "C add call": from_c(ext, add, (a, b)),
    }
    m = measure(paths, args.rounds, args.calls * 10)
    print("\nhost time per memo-hit call on the cpu (target %s), NumPy %s (median of %d rounds of %d "
          "calls, us)\n" % (add.target, np.__version__, args.rounds, args.calls * 10))
    print("| call | tilerun us | peer | peer us | ratio | over C | goal |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    row("Add 1x64 float32, call_into", m["add into"], "np.add(a, b, out=c)", m["np add out"], 3.0,
        "tr_op_call_into", m["C add into"])
    row("Add 1x64 float32, op(a, b)", m["add op"], "np.add(a, b)", m["np add"], None, "tr_op_call",
        m["C add call"])
    print("\nC, in this process: tr_op_call %.2f us, tr_op_call_into %.2f us"
          % (m["C add call"], m["C add into"]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=50, help="rounds of batches per path (default 50)")
    p.add_argument("--calls", type=int, default=200,
                   help="calls per batch on cuda (default 200; on the cpu 10 times as many)")
    p.add_argument("--cpu-only", action="store_true", help="only the cpu rows (no PyTorch needed)")
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
    cpu_rows(args, tilerun, _ext)


if __name__ == "__main__":
    main()
