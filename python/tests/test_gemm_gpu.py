"""GemmFwdOp and LinearFwdOp on a cuda GPU through the Python binding, against torch in float64.

    TILERUN_LIBRARY=.../libtilerun.so TILERUN_MANIFEST_DIR=.../manifest/spec \\
    python3 python/tests/test_gemm_gpu.py [FILTER...] [--list] [--quick]

GemmFwdOp cases: every dtype the manifest allows (float16, bfloat16, float32), both transposes
(trans_a, trans_b: four combinations), m, n, k each in {1, 3, 64, 127, 4096} (125 shapes; --quick
keeps those with at most one 4096), plus the manifest's workload rows (bfloat16), the selection
boundaries m = 64 / 65 and n = 64 / 65, and the skinny kernel's edges (m or n of 8, 9, 16, 33, 64
with k of 8, 72, 200 and 4104: one vector, part of a batch, chunks with a remainder; the wgmma
build's: m of 1, 3, 9, 17, 64 with w rows of 130, 257 and 8200 and k of 56, 64, 136; its swapped
build's: m of 33, 40, 64 with w rows of 8200, 10000 and 40000 and k of 56, 136; m of 40 and 64
on 130 and 4096 rows; m = 64 on 4096 and 14336 rows with k = 4096). Each case:
  into      Op.call_into into an output pre-filled with NaN (an unwritten element fails);
  call      Op(a, b), the output allocated by tilerun;
  strided   non-contiguous operands (a column slice of a wider tensor) give the same result;
  impl      the implementation tilerun chose is the one the selection rules name (gemm_skinny
            where m, or n, is at most 64 with the weight k-contiguous, k a whole number of
            16-byte vectors and a 16-bit dtype; else gemm_cublaslt).
The reference is torch.matmul of the float64-cast operands (the same rounded values), and
|got - ref| <= rtol * |ref| + atol * sqrt(k) elementwise, with (rtol, atol) float16 (2e-3, 2e-3),
bfloat16 (1.6e-2, 1.6e-2), float32 (1e-5, 1e-5); k = 0 is not a shape the manifest rows take.
Also: tuning (request_tune) keeps every result right and reports tuned=True in kernel_config; the
skinny kernel's split sum is deterministic (two runs bit for bit); the wgmma build runs on sm_90
(kernel_config's wgmma at m = 1 and 16); 100 skinny calls captured in a
CUDA graph and replayed give the eager result; LinearFwdOp with and without bias against
torch.nn.functional.linear on [batch, seq, hidden] inputs (the workload rows and small ones).
One line per failing case, then a summary; the exit status is non-zero when any case fails.
"""

import argparse
import math
import os
import sys

SIZES = (1, 3, 64, 127, 4096)
DTYPES = ("float16", "bfloat16", "float32")
TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-5)}
WORKLOADS = [  # (label, m, n, k, trans_b): manifest/spec/gemm.yaml's GemmFwdOp rows, bfloat16
    ("q/o proj prefill", 2048, 4096, 4096, True), ("q/o proj decode", 1, 4096, 4096, True),
    ("q/o proj decode batch 16", 16, 4096, 4096, True), ("mlp up prefill", 2048, 14336, 4096, True),
    ("mlp up decode", 1, 14336, 4096, True), ("square 4096^3", 4096, 4096, 4096, False),
    ("square 8192^3", 8192, 8192, 8192, False), ("mlp down decode batch 64", 64, 4096, 14336, True),
    ("boundary m=64", 64, 4096, 4096, True), ("boundary m=65", 65, 4096, 4096, True),
    ("boundary n=64", 4096, 64, 4096, False), ("boundary n=65", 4096, 65, 4096, False),
]


def expected_impl(dtype, m, n, k, ta, tb):
    if dtype == "float32" or k < 8 or k % 8:
        return "gemm_cublaslt"
    if m <= 64 and tb:
        return "gemm_skinny"
    if n <= 64 and not ta:
        return "gemm_skinny"
    return "gemm_cublaslt"


def cases(quick):
    out = []
    for dt in DTYPES:
        for ta in (False, True):
            for tb in (False, True):
                for m in SIZES:
                    for n in SIZES:
                        for k in SIZES:
                            if quick and (m, n, k).count(4096) > 1:
                                continue
                            out.append(("GemmFwdOp %s ta=%d tb=%d m=%d n=%d k=%d" % (dt, ta, tb, m, n, k),
                                        dt, m, n, k, ta, tb))
    # the skinny kernel's edges: x of 8 and 9 rows (one 16-row tile a warp, or two), 16, 33, 64; k of
    # one 16-byte vector, within one 32-wide chunk's batch, with a remainder past whole chunks, and
    # long with a remainder (split over a cluster); x K-contiguous and K-strided; w rows not a whole
    # tile
    for dt in ("float16", "bfloat16"):
        for k in (8, 72, 200, 4104):
            for m in (8, 9, 16, 33, 64):
                for n in (100, 4096):
                    for ta in (False, True):
                        out.append(("GemmFwdOp %s edges ta=%d tb=1 m=%d n=%d k=%d" % (dt, ta, m, n, k),
                                    dt, m, n, k, ta, True))
            for n in (9, 33, 64):
                for tb in (False, True):
                    out.append(("GemmFwdOp %s edges ta=0 tb=%d m=300 n=%d k=%d" % (dt, tb, n, k),
                                dt, 300, n, k, False, tb))
    # the wgmma build's edges (sm_90, x K-contiguous, from one row; x padded to 8 rows): w rows not
    # a whole 64-row tile (130, 257) nor, past 8192 rows, a whole 128-row one (8200), k below one
    # 64-wide tile, exactly one, and with a remainder past whole tiles
    for dt in ("float16", "bfloat16"):
        for k in (56, 64, 136):
            for m in (1, 3, 9, 17, 64):
                for n in (130, 257) + ((8200,) if m in (1, 9) else ()):
                    out.append(("GemmFwdOp %s wgmma edges ta=0 tb=1 m=%d n=%d k=%d" % (dt, m, n, k),
                                dt, m, n, k, False, True))
            out.append(("GemmFwdOp %s wgmma edges ta=0 tb=1 m=257 n=24 k=%d" % (dt, k), dt, 257, 24, k, False, True))
    # the swapped wgmma build (x of 33 to 64 rows on more than 8192 rows of w): CTAs of 64 rows
    # (8200: whole n64 parts, a partial last tile), 80 (10000: an n64 part and an n16 one) and 256
    # (40000: four n64 parts, more than one wave), x of 33 and 40 rows (zero-padded to 64) and 64,
    # both ways round (the weight as b, and as a with n small)
    for dt in ("float16", "bfloat16"):
        for k in (56, 136):
            for m in (33, 40, 64):
                for n in (8200, 10000, 40000):
                    out.append(("GemmFwdOp %s swapped wgmma ta=0 tb=1 m=%d n=%d k=%d" % (dt, m, n, k),
                                dt, m, n, k, False, True))
            out.append(("GemmFwdOp %s swapped wgmma ta=0 tb=1 m=10000 n=40 k=%d" % (dt, k), dt, 10000, 40, k,
                        False, True))
            # x of more than 32 rows on weights of at most 8192 rows (the split build; with
            # -DTR_SKINNY_WG_SWAP_SMALL=1 the swapped one: CTAs of 32 rows, 5 and 128 of them)
            for m in (40, 64):
                for n in (130, 4096):
                    out.append(("GemmFwdOp %s small-weight wgmma ta=0 tb=1 m=%d n=%d k=%d" % (dt, m, n, k),
                                dt, m, n, k, False, True))
        # a long k (64 k tiles, many turns of every ring) on both weights' builds at m = 64
        for n in (4096, 14336):
            out.append(("GemmFwdOp %s long-k wgmma ta=0 tb=1 m=64 n=%d k=4096" % (dt, n), dt, 64, n, 4096, False,
                        True))
    for label, m, n, k, tb in WORKLOADS:
        out.append(("GemmFwdOp bfloat16 workload %s m=%d n=%d k=%d" % (label, m, n, k), "bfloat16", m, n, k,
                    False, tb))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("filters", nargs="*", help="substrings a case's name must all contain")
    ap.add_argument("--list", action="store_true", help="print the selected cases and exit")
    ap.add_argument("--quick", action="store_true", help="at most one dimension of 4096 per shape")
    args = ap.parse_args(argv)
    selected = [c for c in cases(args.quick) if all(f in c[0] for f in args.filters)]
    if args.list:
        for c in selected:
            print(c[0])
        return 0
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import tilerun
    torch.manual_seed(0)
    dev = "cuda"
    failures = []
    passed = 0

    def compare(what, got, ref, dt, k):
        rtol, atol = TOL[dt]
        g = got.double()
        bad = ~((g - ref).abs() <= rtol * ref.abs() + atol * math.sqrt(max(k, 1)))
        if bool(bad.any()):
            idx = bad.nonzero()[0].tolist()
            return "%s: %d of %d elements off, first at %s: got %r, ref %r" % (
                what, int(bad.sum()), bad.numel(), idx, g[tuple(idx)].item(), ref[tuple(idx)].item())
        return None

    for name, dt, m, n, k, ta, tb in selected:
        tdt = getattr(torch, dt)
        a = torch.randn((k, m) if ta else (m, k), device=dev, dtype=torch.float32).to(tdt)
        b = torch.randn((n, k) if tb else (k, n), device=dev, dtype=torch.float32).to(tdt)
        ref = torch.matmul(a.double().t() if ta else a.double(), b.double().t() if tb else b.double())
        op = tilerun.op("GemmFwdOp", trans_a=ta, trans_b=tb)  # its own: kernel_config names this call's kernel
        problems = []
        try:
            out = torch.full((m, n), float("nan"), device=dev, dtype=tdt)
            op.call_into([a, b], [out])
            torch.cuda.synchronize()
            p = compare("into", out, ref, dt, k)
            if p:
                problems.append(p)
            impl = op.kernel_config().get("implementation")
            want = expected_impl(dt, m, n, k, ta, tb)
            if impl != want:
                problems.append("impl: %s chosen, the rules name %s" % (impl, want))
            got = op(a, b)
            torch.cuda.synchronize()
            p = compare("call", got, ref, dt, k)
            if p:
                problems.append(p)
            if m * n * k <= (1 << 26):
                wa = torch.randn((a.shape[0], a.shape[1] * 2), device=dev, dtype=torch.float32).to(tdt)
                wa[:, ::2] = a
                wb = torch.randn((b.shape[0], b.shape[1] * 2), device=dev, dtype=torch.float32).to(tdt)
                wb[:, ::2] = b
                got_s = op(wa[:, ::2], wb[:, ::2])
                torch.cuda.synchronize()
                if not torch.equal(got_s, out):
                    problems.append("strided: differs from the contiguous result")
        except Exception as e:  # reported, the run goes on
            problems.append("%s: %s" % (type(e).__name__, e))
        if problems:
            failures.append((name, problems))
        else:
            passed += 1

    if not args.filters:
        # tuning: every result stays right and the config says so
        for dt, m, n, k, ta, tb in (("bfloat16", 16, 4096, 4096, False, True), ("bfloat16", 2048, 4096, 4096, False, True),
                                    ("float32", 127, 64, 4096, True, False), ("float16", 1, 14336, 4096, False, True)):
            name = "tuned GemmFwdOp %s m=%d n=%d k=%d ta=%d tb=%d" % (dt, m, n, k, ta, tb)
            tdt = getattr(torch, dt)
            op = tilerun.op("GemmFwdOp", trans_a=ta, trans_b=tb)
            a = torch.randn((k, m) if ta else (m, k), device=dev).to(tdt)
            b = torch.randn((n, k) if tb else (k, n), device=dev).to(tdt)
            ref = torch.matmul(a.double().t() if ta else a.double(), b.double().t() if tb else b.double())
            try:
                op(a, b)
                op.request_tune()
                got = op(a, b)
                torch.cuda.synchronize()
                cfg = op.kernel_config()
                p = compare("tuned", got, ref, dt, k)
                if p or not cfg.get("tuned"):
                    failures.append((name, [p or "kernel_config has tuned=%r: %r" % (cfg.get("tuned"), cfg)]))
                else:
                    passed += 1
                    print("%s: %s" % (name, cfg))
            except Exception as e:
                failures.append((name, ["%s: %s" % (type(e).__name__, e)]))
        # the wgmma build runs on sm_90 (kernel_config's wgmma) where x is K-contiguous, from one row
        for rows in (1, 16):
            op = tilerun.op("GemmFwdOp", trans_b=True)
            op(torch.randn(rows, 4096, device=dev).to(torch.bfloat16),
               torch.randn(4096, 4096, device=dev).to(torch.bfloat16))
            cfg = op.kernel_config()
            want = torch.cuda.get_device_capability() == (9, 0)
            if bool(cfg.get("wgmma")) == want:
                passed += 1
            else:
                failures.append(("wgmma build at m=%d (sm_90: on)" % rows, ["kernel_config: %r" % (cfg,)]))
        # determinism of the split sum, and graph capture
        op = tilerun.op("GemmFwdOp", trans_b=True)
        a = torch.randn(16, 14336, device=dev).to(torch.bfloat16)
        b = torch.randn(4096, 14336, device=dev).to(torch.bfloat16)
        first = op(a, b)
        again = op(a, b)
        torch.cuda.synchronize()
        cfg = op.kernel_config()
        name = "skinny split sum deterministic (%s)" % cfg
        if torch.equal(first, again) and cfg.get("implementation") == "gemm_skinny":
            passed += 1
        else:
            failures.append((name, ["two runs differ, or not the skinny kernel"]))
        outs = [torch.empty(16, 4096, device=dev, dtype=torch.bfloat16) for _ in range(100)]
        xs = [torch.randn(16, 14336, device=dev).to(torch.bfloat16) for _ in range(100)]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            op.call_into([xs[0], b], [outs[0]])
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(100):
                op.call_into([xs[i], b], [outs[i]])
        for o in outs:
            o.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        bad = [i for i in range(100) if not torch.equal(outs[i], op(xs[i], b))]
        if bad:
            failures.append(("graph replay of 100 skinny calls", ["calls %s differ from eager" % bad[:5]]))
        else:
            passed += 1

    # LinearFwdOp against F.linear
    lin_cases = [((1, 2048, 4096), 14336), ((1, 1, 4096), 14336), ((2, 7, 64), 3), ((3, 5, 127), 64), ((4, 1, 64), 65)]
    for dt in DTYPES:
        for shape, nout in lin_cases:
            for with_bias in (False, True):
                name = "LinearFwdOp %s x=%s n=%d bias=%s" % (dt, list(shape), nout, with_bias)
                if not all(f in name for f in args.filters):
                    continue
                tdt = getattr(torch, dt)
                x = torch.randn(shape, device=dev).to(tdt)
                w = torch.randn(nout, shape[-1], device=dev).to(tdt)
                bias = torch.randn(nout, device=dev).to(tdt) if with_bias else None
                ref = F.linear(x.double(), w.double(), bias.double() if bias is not None else None)
                op = tilerun.op("LinearFwdOp")
                try:
                    got = op(x, w, bias) if with_bias else op(x, w)
                    torch.cuda.synchronize()
                    # the bias add rounds the GEMM's output once more
                    p = compare("linear", got, ref, dt, shape[-1] + (64 if with_bias else 0))
                    if p:
                        failures.append((name, [p]))
                    else:
                        passed += 1
                except Exception as e:
                    failures.append((name, ["%s: %s" % (type(e).__name__, e)]))

    for name, problems in failures:
        print("FAIL %s: %s" % (name, "; ".join(problems)))
    print("test_gemm_gpu: %d passed, %d failed (%s, torch %s)" % (passed, len(failures), torch.cuda.get_device_name(),
                                                                 torch.__version__))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
