r"""cpu_gemm_paths.py: the CPU backend's GemmFwdOp at few rows of op(a), one or two builds of the
backend side by side: the time of a call at each shape, rows count and transpose of b, in bfloat16
(or float16), each result checked against float32.

It serves to place the skinny path's row limit (backends/cpu/kernels/gemm.c): build the backend a
second time with the skinny path taking every row count up to 256, copy it out, and give both
folders to --backends; the rounds alternate between them (the machine's pace drifts), each in its
own process, and the table gives the median of each and the first over the second:

    bazel build -c opt //python:libtilerun.so //python:tilerun //backends/cpu:installed
    mkdir -p /tmp/cpu-now && cp -L bazel-bin/backends/cpu/{cpu.yaml,libtilerun_cpu.so} /tmp/cpu-now/
    bazel build -c opt //backends/cpu:installed \
        --per_file_copt=backends/cpu/kernels/gemm.c@-DTR__GEMM_SKINNY_ROWS=256,-DTR__GEMM_SKINNY_WIDE_ROWS=256
    mkdir -p /tmp/cpu-skinny && cp -L bazel-bin/backends/cpu/{cpu.yaml,libtilerun_cpu.so} /tmp/cpu-skinny/
    bazel build -c opt //backends/cpu:installed   # back to the usual build
    /usr/bin/python3 python/bench/cpu_gemm_paths.py --backends /tmp/cpu-now,/tmp/cpu-skinny

NumPy has no bfloat16: the operands are uint16 arrays handed over through a DLPack capsule made
here (ctypes), as any producer of bfloat16 would. The output is poisoned with NaN before each
case; an error above 2e-2 of the largest value, or a NaN, fails the run (exit 1). Needs numpy
(python3-numpy).
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


@_DELETER
def _no_delete(_):
    """The Half object owns the array and the tensor description (see Half)."""


class Half:
    """A uint16 NumPy array seen as bfloat16 (DLPack code 4) or float16 (code 2) on the CPU.

    For consumers that borrow the capsule for a call, as tilerun's calls do: the described tensor
    and its memory belong to this object (made once, shared by every capsule it gives) and live as
    long as it does, whatever the deleter is told; a consumer that keeps the tensor past this
    object's life (torch.from_dlpack) must not be given one."""

    def __init__(self, bits, code):
        self.bits, self.code = bits, code
        self._shape = (ctypes.c_int64 * bits.ndim)(*bits.shape)
        self._managed = _Managed()
        self._managed.dl_tensor = _Tensor(bits.ctypes.data, _Device(1, 0), bits.ndim, _DType(code, 16, 1),
                                          self._shape, None, 0)
        self._managed.deleter = _no_delete

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, **_):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)


def to_bits(np, x, dtype):
    if dtype == "float16":
        return x.astype(np.float16).view(np.uint16)
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # to nearest, ties to even


def from_bits(np, bits, dtype):
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def measure(args):
    """One process, one backend: a line per case, "n k tb m ms error"."""
    os.environ.setdefault("TILERUN_MANIFEST_DIR", os.path.join(REPO, "manifest", "spec"))
    sys.path.insert(0, os.path.join(REPO, "python"))
    import numpy as np
    import tilerun
    code = 2 if args.dtype == "float16" else 4
    rng = np.random.default_rng(0)
    for n, k in args.shapes:
        for tb in args.trans_b:
            b32 = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
            b_bits = to_bits(np, b32, args.dtype)
            b_ref = from_bits(np, b_bits, args.dtype)
            op = tilerun.op("GemmFwdOp", trans_b=bool(tb))
            for m in args.rows:
                a_bits = to_bits(np, rng.standard_normal((m, k), dtype=np.float32), args.dtype)
                d_bits = np.full((m, n), 0x7E00 if code == 2 else 0x7FC0, dtype=np.uint16)  # NaN
                a, b, d = Half(a_bits, code), Half(b_bits, code), Half(d_bits, code)
                op.call_into([a, b], [d])
                times = []
                for _ in range(args.calls):
                    t0 = time.perf_counter()
                    op.call_into([a, b], [d])
                    times.append(time.perf_counter() - t0)
                ref = from_bits(np, a_bits, args.dtype) @ (b_ref.T if tb else b_ref)
                err = float(np.abs(from_bits(np, d_bits, args.dtype) - ref).max() / np.abs(ref).max())
                print(n, k, tb, m, statistics.median(times) * 1e3, err, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--backends", default=os.path.join(REPO, "bazel-bin", "backends", "cpu"),
                   help="one or two backend folders (comma-separated; default this checkout's bazel-bin)")
    p.add_argument("--rows", default="16,24,32,48,64,128", help="rows of op(a) (default %(default)s)")
    p.add_argument("--shapes", default="4096x2048,4096x4096,14336x4096,4096x14336,2048x2048,1024x1024",
                   help="NxK of b, comma-separated (default %(default)s)")
    p.add_argument("--trans-b", default="1,0", help="b [N, K] (1) and/or [K, N] (0) (default %(default)s)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"],
                   help="the operands' dtype (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="rounds alternating the backends (default 2)")
    p.add_argument("--calls", type=int, default=7,
                   help="timed calls a case, the median kept (default 7; calls of about a millisecond want more)")
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # a round's process
    args = p.parse_args(argv)
    try:
        args.rows = [int(v) for v in args.rows.split(",")]
        args.shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
        args.trans_b = [int(v) for v in args.trans_b.split(",")]
    except ValueError as e:
        p.error("--rows, --shapes and --trans-b are comma-separated numbers (shapes NxK): %s" % e)
    if any(r < 1 for r in args.rows) or any(len(s) != 2 or min(s) < 1 for s in args.shapes):
        p.error("rows and N, K are at least 1")
    if any(t not in (0, 1) for t in args.trans_b) or args.rounds < 1 or args.calls < 1:
        p.error("--trans-b takes 0 and 1; --rounds and --calls are at least 1")
    args.backends = [b for b in args.backends.split(",") if b]
    if not 1 <= len(args.backends) <= 2:
        p.error("--backends takes one or two folders")
    if len(args.backends) == 2 and os.path.realpath(args.backends[0]) == os.path.realpath(args.backends[1]):
        p.error("--backends: the two folders are the same one (%s): copy it to compare a build with itself"
                % args.backends[0])
    return args


def main(argv):
    args = parse_args(argv)
    if args.measure:
        measure(args)
        return 0
    results = {b: {} for b in args.backends}
    child = [a for a in argv if a != "--measure"] + ["--measure"]
    for r in range(args.rounds):
        order = args.backends if r % 2 == 0 else args.backends[::-1]
        for backend in order:
            print("round %d of %d: %s ..." % (r + 1, args.rounds, backend), file=sys.stderr, flush=True)
            env = dict(os.environ, TILERUN_BACKEND_PATH=backend)
            done = subprocess.run([sys.executable, os.path.abspath(__file__)] + child, env=env,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit("cpu_gemm_paths: the run with %s failed:\n%s" % (backend, done.stderr[-2000:]))
            for line in done.stdout.split("\n"):
                f = line.split()
                if len(f) == 6:
                    key = tuple(int(v) for v in f[:4])
                    results[backend].setdefault(key, []).append((float(f[4]), float(f[5])))
    first = args.backends[0]
    head = "| N x K | trans_b | rows | " + " | ".join("%s ms" % b for b in args.backends)
    print(head + (" | first/second |" if len(args.backends) == 2 else " |"))
    print("|" + " --- |" * (head.count("|") + (1 if len(args.backends) == 2 else 0)))
    errors = []
    for key in results[first]:
        n, k, tb, m = key
        meds = [statistics.median(t for t, _ in results[b][key]) for b in args.backends]
        errors += [e for b in args.backends for _, e in results[b][key]]
        row = "| %dx%d | %d | %d | %s |" % (n, k, tb, m, " | ".join("%.2f" % v for v in meds))
        print(row + (" %.2f |" % (meds[0] / meds[1]) if len(meds) == 2 else ""))
    bad = [e for e in errors if not e <= 2e-2]  # NaN included
    print("\nlargest error against float32, over the largest |value|: %.1e"
          % (bad[0] if bad else max(errors, default=0.0)))
    if bad:
        print("cpu_gemm_paths: %d results with an error above 2e-2 or NaN: wrong results" % len(bad),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
