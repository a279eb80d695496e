"""bench_cpu_gemm.py: tilerun's CPU GemmFwdOp against numpy.matmul, float32, side by side in one
run on the same inputs.

For each square size N (N x N times N x N), both write into an output allocated once
(tilerun: Op.call_into; numpy: matmul(a, b, out=d)). A sample times a batch of calls (enough to
last --min-ms); samples alternate between the two, the first one alternating too, and each
figure is the median of --repeats samples per call. The ratio is tilerun's speed over numpy's
(>= 1: tilerun faster). The two results are compared once per size: a difference over 1e-4 of
the largest element fails the run (exit status 1).

    bazel build -c opt //python:libtilerun.so //backends/cpu:installed
    /usr/bin/python3 python/bench/bench_cpu_gemm.py [--sizes 256,512,1024,2048] [--repeats 7]

With --main-job, the manifest's GemmFwdOp workload rows instead, as the main job runs them: each
round runs `tilerun run --device cpu --ops GemmFwdOp` (its call time: the median of memo hits, in
the row's dtype, bfloat16 for every row today) and then numpy.matmul in float32 at each row's
shape and transposes; the figures are the medians over --rounds rounds. Rows over --max-gflop
are left out (tilerun run skips them on cpu).

    bazel build -c opt //tools:tilerun //python:libtilerun.so //backends/cpu:installed
    /usr/bin/python3 python/bench/bench_cpu_gemm.py --main-job [--rounds 2] [--max-gflop 200]

TILERUN_BACKEND_PATH and TILERUN_MANIFEST_DIR default to this checkout's bazel-bin/backends/cpu
and manifest/spec. Needs numpy (python3-numpy).
"""
import argparse
import os
import statistics
import sys
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Times tilerun's CPU GemmFwdOp (float32) and numpy.matmul at square sizes, "
                    "alternating, and prints a table: size, ms, GFLOP/s each, and the ratio of "
                    "tilerun's speed to numpy's. With --main-job: the manifest's GemmFwdOp rows "
                    "through `tilerun run` instead, against numpy.matmul float32 at their shapes.")
    p.add_argument("--sizes", default="256,512,1024,2048",
                   help="comma-separated square sizes M = N = K (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=7,
                   help="samples per size and side; the median is reported (default: %(default)s)")
    p.add_argument("--min-ms", type=float, default=50.0,
                   help="each sample calls repeatedly for at least this long (default: %(default)s)")
    p.add_argument("--trans-b", action="store_true",
                   help="multiply by b transposed (tilerun trans_b=True, numpy a @ b.T)")
    p.add_argument("--main-job", action="store_true",
                   help="the manifest's GemmFwdOp workload rows through `tilerun run --device cpu` "
                        "against numpy.matmul float32 at the same shapes, instead of --sizes")
    p.add_argument("--rounds", type=int, default=2,
                   help="--main-job: rounds of tilerun run, then numpy; medians reported "
                        "(default: %(default)s)")
    p.add_argument("--max-gflop", type=float, default=200.0,
                   help="--main-job: rows computing more are left out (tilerun run's --max-gflop; "
                        "default: %(default)s)")
    p.add_argument("--tilerun", default=os.path.join(REPO, "bazel-bin", "tools", "tilerun"),
                   help="--main-job: the tilerun command (default: this checkout's bazel-bin/tools/tilerun)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.rounds < 1:
        p.error("--repeats and --rounds are at least 1")
    if not args.max_gflop > 0:
        p.error("--max-gflop is above 0")
    return args


def openblas_line():
    """The OpenBLAS both sides call (numpy's libblas.so.3 and the backend link the same one)."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
        return "OpenBLAS core %s, %d threads%s" % (
            core, lib.openblas_get_num_threads(),
            " (OPENBLAS_CORETYPE=%s)" % os.environ["OPENBLAS_CORETYPE"]
            if os.environ.get("OPENBLAS_CORETYPE") else "")
    except (OSError, AttributeError):
        return "OpenBLAS not found as libopenblas.so.0"


def sample_s(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main_job_rows(args):
    """One `tilerun run --device cpu --ops GemmFwdOp`: {row label: call seconds} of the rows that
    ran (the main job prints each row's call time, a memo hit's median, in microseconds)."""
    import subprocess
    cmd = [args.tilerun, "run", "--device", "cpu", "--ops", "GemmFwdOp", "--max-gflop",
           "%g" % args.max_gflop, "--max-gb", "1000"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        sys.exit("bench_cpu_gemm: cannot run %s: %s (build it: bazel build -c opt //tools:tilerun)"
                 % (args.tilerun, e))
    if done.returncode != 0:
        sys.exit("bench_cpu_gemm: %s exited %d:\n%s%s" % (" ".join(cmd), done.returncode,
                                                            done.stdout[-2000:], done.stderr[-2000:]))
    times = {}
    for line in done.stdout.splitlines():
        # "  GemmFwdOp        <label, 38 wide> cpu   cpu  -  build_ms call_us GB/s GFLOP/s error"
        if not line.startswith("  GemmFwdOp ") or len(line) < 58:
            continue
        label, rest = line[19:57].rstrip(), line[57:].split()
        if len(rest) >= 8 and rest[0] == "cpu":
            if rest[1] != "cpu":
                sys.exit("bench_cpu_gemm: tilerun run settled %r on %r, not the CPU backend"
                         % (label, rest[1]))
            times[label] = float(rest[4]) / 1e6
    return times


def main_job(args, np, tilerun):
    rt = tilerun.Runtime()
    shapes = {}
    for label, inputs, params in rt.workloads("GemmFwdOp"):
        (a_shape, dtype, _), (b_shape, _, _) = inputs[0], inputs[1]
        ta, tb = bool(params.get("trans_a", False)), bool(params.get("trans_b", False))
        m, k = (a_shape[1], a_shape[0]) if ta else tuple(a_shape)
        n = b_shape[0] if tb else b_shape[1]
        shapes[label[:38]] = (m, n, k, ta, tb, dtype, label)
    rng = np.random.default_rng(0)
    t_tr, t_np = {}, {}
    for r in range(args.rounds):
        print("round %d of %d: tilerun run --ops GemmFwdOp ..." % (r + 1, args.rounds), file=sys.stderr,
              flush=True)
        for label, t in main_job_rows(args).items():
            t_tr.setdefault(label, []).append(t)
        for label in t_tr:
            m, n, k, ta, tb, _, _ = shapes[label]
            a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
            b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
            aa, bb = (a.T if ta else a), (b.T if tb else b)
            d = np.empty((m, n), np.float32)
            np.matmul(aa, bb, out=d)
            one = sample_s(lambda: np.matmul(aa, bb, out=d), 1)
            calls = max(1, int(args.min_ms / 1e3 / one))
            t_np.setdefault(label, []).append(
                statistics.median(sample_s(lambda: np.matmul(aa, bb, out=d), calls)
                                  for _ in range(args.repeats)))
    if not t_tr:
        sys.exit("bench_cpu_gemm: tilerun run ran no GemmFwdOp row (all over --max-gflop %g?)"
                 % args.max_gflop)
    print("the main job's GemmFwdOp rows on the CPU backend (tilerun run --device cpu --ops GemmFwdOp, "
          "the row's dtype) against numpy.matmul float32 at the same shape; %d processors; numpy %s; %s; "
          "median of %d rounds" % (len(os.sched_getaffinity(0)), np.__version__, openblas_line(),
                                   args.rounds))
    print()
    print("| row | M x N x K | transposes | tilerun dtype | tilerun ms | numpy float32 ms | "
          "tilerun GFLOP/s | numpy GFLOP/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    worst = None
    for label in sorted(t_tr, key=lambda x: list(shapes).index(x)):
        m, n, k, ta, tb, dtype, full = shapes[label]
        tt, tn = statistics.median(t_tr[label]), statistics.median(t_np[label])
        ratio = tn / tt
        worst = ratio if worst is None else min(worst, ratio)
        flops = 2.0 * m * n * k
        print("| %s | %dx%dx%d | %s | %s | %.3f | %.3f | %.1f | %.1f | %.2f |"
              % (full, m, n, k, ("a" if ta else "") + ("b" if tb else "") or "-", dtype, tt * 1e3,
                 tn * 1e3, flops / tt / 1e9, flops / tn / 1e9, ratio))
    left = [shapes[x][6] for x in shapes if x not in t_tr]
    print()
    if left:
        print("not run (over --max-gflop %g on cpu): %s" % (args.max_gflop, ", ".join(left)))
    print("lowest ratio (tilerun speed / numpy speed): %.2f; goal (issue 23): at least 0.8" % worst)
    return 0


def main(argv):
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    os.environ.setdefault("TILERUN_BACKEND_PATH", os.path.join(REPO, "bazel-bin", "backends", "cpu"))
    os.environ.setdefault("TILERUN_MANIFEST_DIR", os.path.join(REPO, "manifest", "spec"))
    import numpy as np
    sys.path.insert(0, os.path.join(REPO, "python"))
    import tilerun

    if args.main_job:
        return main_job(args, np, tilerun)
    op = tilerun.op("GemmFwdOp", trans_b=bool(args.trans_b))
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        d_tr = np.empty((n, n), np.float32)
        d_np = np.empty((n, n), np.float32)
        bb = b.T if args.trans_b else b  # a view: matmul reads it transposed, as BLAS does

        def run_tilerun():
            op.call_into([a, b], [d_tr])

        def run_numpy():
            np.matmul(a, bb, out=d_np)

        run_tilerun()
        run_numpy()
        if op.target != "cpu":
            sys.exit("bench_cpu_gemm: the op settled on %r, not the CPU backend (is "
                     "TILERUN_BACKEND_PATH the built backends/cpu?)" % op.target)
        err = float(np.max(np.abs(d_tr - d_np)) / max(float(np.max(np.abs(d_np))), 1e-30))
        # calls per sample: enough for --min-ms, measured on the slower side
        one = max(sample_s(run_tilerun, 1), sample_s(run_numpy, 1))
        calls = max(1, int(args.min_ms / 1e3 / one))
        t_tr, t_np = [], []
        for r in range(args.repeats):
            pair = [(run_tilerun, t_tr), (run_numpy, t_np)]
            for fn, out in (pair if r % 2 == 0 else pair[::-1]):
                out.append(sample_s(fn, calls))
        rows.append((n, statistics.median(t_tr), statistics.median(t_np), err))

    flops = lambda n: 2.0 * n * n * n
    print("tilerun cpu GemmFwdOp vs numpy.matmul, float32%s, %d processors; numpy %s; %s"
          % (", b transposed" if args.trans_b else "", len(os.sched_getaffinity(0)),
             np.__version__, openblas_line()))
    print()
    print("| shape | tilerun ms | numpy ms | tilerun GFLOP/s | numpy GFLOP/s | ratio | max rel diff |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    worst = None
    for n, tt, tn, err in rows:
        ratio = tn / tt
        worst = ratio if worst is None else min(worst, ratio)
        print("| %dx%dx%d | %.3f | %.3f | %.1f | %.1f | %.2f | %.1e |"
              % (n, n, n, tt * 1e3, tn * 1e3, flops(n) / tt / 1e9, flops(n) / tn / 1e9, ratio, err))
    print()
    print("lowest ratio (tilerun speed / numpy speed): %.2f" % worst)
    wrong = [n for n, _, _, err in rows if not err <= 1e-4]
    if wrong:
        print("bench_cpu_gemm: tilerun's result differs from numpy's at size %s (max rel diff "
              "over 1e-4)" % ", ".join(map(str, wrong)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
