"""tilerun's ops on a cuda GPU through the Python binding, against torch (run on the GPU machine).

    TILERUN_LIBRARY=.../libtilerun.so TILERUN_MANIFEST_DIR=.../manifest/spec \\
    TILERUN_BACKEND_PATH=... python3 python/tests/test_ops_gpu.py [FILTER...] [options]

Cases: RMSNormFwdOp (with and without weight), LayerNormFwdOp (weight and bias each given or
not), SoftmaxFwdOp (dim=-1; and dtype=float32 from bfloat16 and from float16 inputs), AddFwdOp
(alpha 1 and 0.5 for floating dtypes; alpha 1 and 2 for integer dtypes, since torch refuses a
fractional alpha there), in every dtype the op's manifest entry allows (norm, softmax: float16,
bfloat16, float32; add: also float64, int32, int64), on x of shape [rows, n] with n in
{1, 3, 4095, 4096, 65536} and rows in {1, 7, 1000}; and LayerNorm on rows offset by 300
(float32, bfloat16; rows 7 and 1000, n 4095 to 65536: the variance of values far from zero).
Softmax also on long rows, n in {16384, 100003, 128256}, with rows in {1, 5, 131, 132} (fewer
rows than an H200's 132 SMs are split over a thread-block cluster on sm_90), plain and masked
(the row's first 40% and every third element -inf).
Edge values (variant `edge`), for every op and dtype on the shapes that reach each
implementation (softmax: warp n=8, block n=4096 and 20000, looped n=40000 at 200 rows, split
over a cluster on sm_90 at 9 rows of 20000 and 40000, strided along dim=0; norms: warp n=8,
looped n=4096 and 65536, at 9 and 200 rows; add n=4096): row r takes pattern r % 9 of the op's
list (softmax: all -inf, one NaN, the first half NaN, a NaN among -inf, one +inf, all +inf, +inf
and -inf, plain, the first 40% -inf; norms: one +inf, one -inf, one NaN, all zero, constant, +inf
first, plain; add: inf + -inf, NaN + x, ...), and empty tensors ([0, n] for every op, [n, 0] for softmax). Their
reference is torch's own function (float64), and NaN must be NaN, infinities equal, the rest
within tolerance; `into` pre-fills with 12345 (a NaN would hide an unwritten element).
Inputs are fresh random cuda tensors (--device cpu: cpu tensors, on the cpu backend).

Each case checks:
  routes  the same calls with every tensor through __dlpack__ (tilerun._ext.set_python_route)
          give bit for bit what the DLPack C exchange API's route gave;
  into    tr_op_call_into (Op.call_into) into outputs pre-filled with NaN (integers: -12345), so
          an element the kernel does not write fails;
  call    tr_op_call (plain Op(...)), outputs allocated by tilerun, returned as torch tensors;
  strided the same inputs as non-contiguous views (x[:, ::2] of a wider tensor; a
          transposed-then-transposed-back, i.e. column-major, copy; 1-D params as w[::2]) give
          bit-for-bit the result of the contiguous inputs;
  unaligned contiguous inputs and output whose data starts one element past a 16-byte boundary
          (the kernels' entries for any alignment), within tolerance of the reference.
Results are compared with torch's function computed in float64 on the float64-cast inputs, then
cast to the output dtype: |got - ref| <= atol + rtol * |ref| elementwise, with
  float32 rtol = atol = 1e-5;  bfloat16 rtol = atol = 1.6e-2;  float16 rtol = atol = 2e-3;
  float64 rtol = atol = 1e-12; int32/int64 exact; softmax into float32 or bfloat16: atol 1e-30
  (relative only: most probabilities of a long row are far below the others' atol).
A NaN or infinity where the reference is finite fails.

FILTER arguments are substrings that must all occur in a case's name (e.g. `RMSNorm bfloat16
rows=1000`); --list prints the selected cases (no GPU or torch needed). One line per case, then
a summary; the exit status is non-zero when any case fails.
"""

import argparse
import os
import sys
import time
import traceback

NS = (1, 3, 4095, 4096, 65536)
SPLIT_NS = (16384, 100003, 128256)
SPLIT_ROWS = (1, 5, 131, 132)
ROWS = (1, 7, 1000)
FLOATS = ("float16", "bfloat16", "float32")
ADD_DTYPES = FLOATS + ("float64", "int32", "int64")
TOL = {  # (rtol, atol)
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-12, 1e-12),
    "int32": (0.0, 0.0),
    "int64": (0.0, 0.0),
}
SENTINEL_INT = -12345
SENTINEL_EDGE = 12345.0  # edge cases expect NaN: the poison must be a value none expects
EDGE_PATTERNS = 9  # rows cycle through this many patterns (see make_edge)


class Case:
    """One op variant on one dtype and shape."""

    def __init__(self, op, variant, dtype, rows, n, params, inputs, out_dtype=None):
        self.op = op  # the manifest's op name
        self.variant = variant  # e.g. "weight", "no-weight", "alpha=0.5"
        self.dtype = dtype
        self.out_dtype = out_dtype or dtype
        self.rows = rows
        self.n = n
        self.params = params  # kwargs for tilerun.op
        self.inputs = inputs  # what each input is: "x" [rows, n], "vec" [n], None (absent)

    @property
    def name(self):
        return "%s[%s] %s rows=%d n=%d" % (self.op, self.variant, self.dtype, self.rows, self.n)


def all_cases():
    cases = []
    for dt in FLOATS:
        for rows in ROWS:
            for n in NS:
                shape = dict(dtype=dt, rows=rows, n=n)
                for w in (True, False):
                    cases.append(Case("RMSNormFwdOp", "weight" if w else "no-weight",
                                      params={"normalized_shape": (n,), "eps": 1e-6},
                                      inputs=["x", "vec" if w else None], **shape))
                for w, b in ((True, True), (False, False), (True, False), (False, True)):
                    variant = "+".join(s for s, on in (("weight", w), ("bias", b)) if on)
                    cases.append(Case("LayerNormFwdOp", variant or "no-weight-no-bias",
                                      params={"normalized_shape": (n,), "eps": 1e-5},
                                      inputs=["x", "vec" if w else None, "vec" if b else None],
                                      **shape))
                if dt != "float16" and rows > 1 and n >= 4095:
                    # rows far from zero: the statistics' shift must keep the variance exact
                    cases.append(Case("LayerNormFwdOp", "weight+bias,offset=300",
                                      params={"normalized_shape": (n,), "eps": 1e-5},
                                      inputs=["x", "vec", "vec"], **shape))
                cases.append(Case("SoftmaxFwdOp", "dim=-1", params={"dim": -1}, inputs=["x"],
                                  **shape))
                if dt != "float32":
                    cases.append(Case("SoftmaxFwdOp", "dim=-1,dtype=float32",
                                      params={"dim": -1, "dtype": "float32"}, inputs=["x"],
                                      out_dtype="float32", **shape))
    for dt in FLOATS:
        for rows in SPLIT_ROWS:
            for n in SPLIT_NS:
                shape = dict(dtype=dt, rows=rows, n=n)
                for masked in (False, True):
                    tag = ",masked" if masked else ""
                    cases.append(Case("SoftmaxFwdOp", "dim=-1" + tag, params={"dim": -1},
                                      inputs=["x"], **shape))
                    if dt != "float32":
                        cases.append(Case("SoftmaxFwdOp", "dim=-1,dtype=float32" + tag,
                                          params={"dim": -1, "dtype": "float32"}, inputs=["x"],
                                          out_dtype="float32", **shape))
    cases += edge_cases()
    for dt in ADD_DTYPES:
        alphas = (1.0, 0.5) if dt.startswith(("float", "bfloat")) else (1.0, 2.0)
        for rows in ROWS:
            for n in NS:
                for alpha in alphas:
                    cases.append(Case("AddFwdOp", "alpha=%g" % alpha, dt, rows, n,
                                      params={"alpha": alpha}, inputs=["x", "x"]))
    return cases


def edge_cases():
    """Edge values (-inf rows, NaN, +-inf, empty tensors) on every implementation's shapes."""
    cases = []
    for dt in FLOATS:
        # softmax along the last axis: warp, block, block split (sm_90, rows < SMs), looped,
        # looped split; along dim 0: strided (the patterns run down the columns)
        for rows, n in ((9, 8), (200, 8), (9, 4096), (200, 4096), (9, 20000), (200, 20000),
                        (9, 40000), (200, 40000), (0, 4096), (4, 0)):
            shape = dict(dtype=dt, rows=rows, n=n)
            cases.append(Case("SoftmaxFwdOp", "dim=-1,edge", params={"dim": -1}, inputs=["x"],
                              **shape))
            if dt != "float32" and rows:
                cases.append(Case("SoftmaxFwdOp", "dim=-1,dtype=float32,edge",
                                  params={"dim": -1, "dtype": "float32"}, inputs=["x"],
                                  out_dtype="float32", **shape))
        for rows, n in ((64, 9), (5000, 9)):
            cases.append(Case("SoftmaxFwdOp", "dim=0,edge", params={"dim": 0}, inputs=["x"],
                              dtype=dt, rows=rows, n=n))
        for rows, n in ((9, 8), (200, 8), (9, 4096), (200, 4096), (9, 65536), (200, 65536),
                        (0, 4096)):
            shape = dict(dtype=dt, rows=rows, n=n)
            cases.append(Case("RMSNormFwdOp", "weight,edge",
                              params={"normalized_shape": (n,), "eps": 1e-6},
                              inputs=["x", "vec"], **shape))
            cases.append(Case("LayerNormFwdOp", "weight+bias,edge",
                              params={"normalized_shape": (n,), "eps": 1e-5},
                              inputs=["x", "vec", "vec"], **shape))
            cases.append(Case("LayerNormFwdOp", "no-weight-no-bias,edge",
                              params={"normalized_shape": (n,), "eps": 1e-5},
                              inputs=["x", None, None], **shape))
    for dt in FLOATS + ("float64",):
        for rows, n in ((9, 4096), (0, 4096)):
            cases.append(Case("AddFwdOp", "alpha=1,edge", dt, rows, n, params={"alpha": 1.0},
                              inputs=["x", "x2"]))
    return cases


# ---- running (needs torch and a GPU) -----------------------------------------------------------


def _import_tilerun():
    """The tilerun package: importable as is, else the one in this repository's python/."""
    import importlib
    try:
        return importlib.import_module("tilerun")
    except ModuleNotFoundError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
        return importlib.import_module("tilerun")


class Runner:
    def __init__(self, args):
        import torch
        self.torch = torch
        self.F = torch.nn.functional
        self.tilerun = _import_tilerun()
        self.args = args
        self.device = torch.device(args.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(args.seed)
        self.ops = {}  # one op instance per (op, params): the memo is exercised across shapes
        self.targets = {}

    def dt(self, name):
        return getattr(self.torch, name)

    def make_edge(self, kind, case):
        """x (or add's second input, x2) of an edge case in float32: row r takes pattern
        r % EDGE_PATTERNS; along dim 0 the patterns run down the columns."""
        torch = self.torch
        inf, nan = float("inf"), float("nan")
        along0 = case.params.get("dim") == 0
        rows, n = (case.n, case.rows) if along0 else (case.rows, case.n)
        t = torch.randn((rows, n), generator=self.gen, device=self.device, dtype=torch.float32)
        if case.op == "SoftmaxFwdOp":
            t = t * 4
        for r in range(min(rows, EDGE_PATTERNS) if n > 0 else 0):  # rows of no elements: nothing to place
            p = slice(r, rows, EDGE_PATTERNS)  # every row of pattern r at once
            if case.op == "SoftmaxFwdOp":
                if r == 0:
                    t[p] = -inf  # all -inf: NaN (torch); the in-tree kernels gave 0
                elif r == 1:
                    t[p, n // 2] = nan
                elif r == 2:
                    t[p, : max(1, n // 2)] = nan  # NaN met while the running max is -inf
                elif r == 3:
                    t[p] = -inf
                    t[p, n - 1] = nan
                elif r == 4:
                    t[p, n // 3] = inf
                elif r == 5:
                    t[p] = inf
                elif r == 6:
                    t[p, 0] = inf
                    t[p, n - 1] = -inf
                elif r == 8:
                    t[p, : n * 2 // 5] = -inf
            elif case.op in ("RMSNormFwdOp", "LayerNormFwdOp"):
                if r == 0:
                    t[p, n // 2] = inf  # LayerNorm: NaN throughout (the in-tree kernel gave -inf)
                elif r == 1:
                    t[p, n - 1] = -inf
                elif r == 2:
                    t[p, n // 3] = nan
                elif r == 3:
                    t[p] = 0.0
                elif r == 4:
                    t[p] = 5.0
                elif r == 5:
                    t[p, 0] = inf  # the statistics' shift is x[0]
            else:  # add: the specials in the first elements of every row
                a = [inf, inf, nan, 1.0, -inf, 0.0, -0.0, inf, nan]
                b = [-inf, inf, 1.0, nan, 1.0, -0.0, -0.0, 1.0, nan]
                vals = torch.tensor(a if kind == "x" else b, device=self.device)
                k = min(n, len(vals))
                t[:, :k] = vals[:k]
                break
        if along0:
            t = t.t().contiguous()
        return t.to(self.dt(case.dtype))

    def make(self, kind, case):
        torch = self.torch
        if kind is None:
            return None
        if "edge" in case.variant and kind in ("x", "x2"):
            return self.make_edge(kind, case)
        shape = (case.rows, case.n) if kind in ("x", "x2") else (case.n,)
        dt = self.dt(case.dtype)
        if not dt.is_floating_point:
            return torch.randint(-1000, 1000, shape, generator=self.gen, device=self.device,
                                 dtype=dt)
        t = torch.randn(shape, generator=self.gen, device=self.device, dtype=torch.float32)
        if case.op == "SoftmaxFwdOp":
            t = t * 4  # a spread of logits
        if kind == "x" and "offset=300" in case.variant:
            t = t + 300
        if kind == "x" and "masked" in case.variant:
            t[:, : case.n * 2 // 5] = float("-inf")
            t[:, ::3] = float("-inf")
        return t.to(dt)

    def reference(self, case, inputs):
        torch, F = self.torch, self.F
        out_dt = self.dt(case.out_dtype)
        if case.op == "AddFwdOp" and not out_dt.is_floating_point:
            a, b = (t.long() for t in inputs)
            return torch.add(a, b, alpha=int(case.params["alpha"])).to(out_dt)
        x64 = [None if t is None else t.double() for t in inputs]
        if case.op == "RMSNormFwdOp":
            x, w = x64
            eps = case.params["eps"]
            # the manifest's formula (torch's fused CUDA rms_norm makes a row holding an infinity
            # NaN throughout; its CPU kernel and this formula give NaN at the infinity, 0 elsewhere)
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            y = y * w if w is not None else y
        elif case.op == "LayerNormFwdOp":
            x, w, b = x64
            y = F.layer_norm(x, (case.n,), w, b, case.params["eps"])
        elif case.op == "SoftmaxFwdOp":
            y = F.softmax(x64[0], dim=case.params["dim"])
        elif case.op == "AddFwdOp":
            y = torch.add(x64[0], x64[1], alpha=case.params["alpha"])
        else:
            raise AssertionError(case.op)
        return y.to(out_dt)

    def compare(self, what, got, ref, case):
        """None when got matches ref within the dtype's tolerance; else the problem."""
        torch = self.torch
        if got is None:
            return "%s: no output" % what
        if got.dtype != ref.dtype or tuple(got.shape) != tuple(ref.shape):
            return "%s: got %s %s, expected %s %s" % (what, got.dtype, tuple(got.shape),
                                                      ref.dtype, tuple(ref.shape))
        if got.device != ref.device:
            return "%s: on %s, expected %s" % (what, got.device, ref.device)
        if not ref.dtype.is_floating_point:
            bad = got != ref
            if bad.any():
                i = int(bad.flatten().nonzero()[0])
                return "%s: %d elements differ; first at %d: got %d, expected %d" % (
                    what, int(bad.sum()), i, int(got.flatten()[i]), int(ref.flatten()[i]))
            return None
        rtol, atol = TOL[case.out_dtype]
        if case.op == "SoftmaxFwdOp" and case.out_dtype in ("float32", "bfloat16"):
            # most probabilities of a long row are far below any absolute tolerance: relative
            # only (float32 and bfloat16 keep their relative precision down to 1e-38)
            atol = 1e-30
        if "offset=300" in case.variant:
            # float32 holds values near 300 to 3e-5, and x - mean carries that (torch's own
            # float32 layer_norm too); 1e-3 still fails a variance taken as E[x^2] - mean^2,
            # whose cancellation costs about 5e-3 here
            rtol = atol = max(rtol, 1e-3)
        g, r = got.double(), ref.double()
        err = (g - r).abs()
        bad = ~(err <= atol + rtol * r.abs())  # NaN in got is bad
        if "edge" in case.variant:  # NaN where torch is NaN, the same infinity where it has one
            bad = bad & ~(g.isnan() & r.isnan()) & ~(g == r)
            bad = bad | (g.isnan() != r.isnan())
        if bad.any():
            flat = bad.flatten().nonzero()
            i = int(flat[0])
            return ("%s: %d of %d elements out of tolerance (rtol=atol=%g); first at %d: got %r, "
                    "expected %r; max abs err %.3g" % (
                        what, int(bad.sum()), bad.numel(), rtol, i, float(g.flatten()[i]),
                        float(r.flatten()[i]),
                        float(torch.nan_to_num(err, nan=float("inf")).max())))
        return None

    def op_for(self, case):
        key = (case.op, tuple(sorted((k, repr(v)) for k, v in case.params.items())))
        if key not in self.ops:
            params = dict(case.params)
            if "dtype" in params:
                params["dtype"] = self.dt(params["dtype"])  # passed as a torch dtype
            self.ops[key] = self.tilerun.op(case.op, **params)
        return self.ops[key]

    def strided(self, t, how):
        """A non-contiguous view holding t's values."""
        if t is None:
            return None
        torch = self.torch
        if t.dim() == 1 or how == "slice":
            wide = torch.empty(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype, device=t.device)
            wide[..., ::2] = t
            return wide[..., ::2]
        return t.t().contiguous().t()  # column-major: the transpose of a contiguous transpose

    def unaligned(self, t):
        """A contiguous copy of t whose data is one element past a 16-byte boundary."""
        if t is None:
            return None
        buf = self.torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        u = buf[1:].view(t.shape)
        u.copy_(t)
        return u

    def sync(self):
        if self.args.sync and self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def poison(self, case, ref):
        if not ref.dtype.is_floating_point:
            return SENTINEL_INT
        return SENTINEL_EDGE if "edge" in case.variant else float("nan")

    def same(self, a, b):
        """a and b hold the same values bit for bit, NaN where the other has NaN."""
        torch = self.torch
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.dtype.is_floating_point:
            return torch.equal(a, b)
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))

    def checked_into(self, what, op, inputs, out, ref, case, problems):
        """Op.call_into into `out` poisoned first (NaN, or 12345 for edge cases; integers
        -12345), compared with ref; a problem goes to `problems`. Returns out when the call ran,
        else None."""
        out.fill_(self.poison(case, ref))
        try:
            op.call_into(inputs, [out])
            self.sync()
        except Exception as e:  # tilerun.Error and anything else: reported, the run goes on
            problems.append("%s: %s: %s" % (what, type(e).__name__, e))
            return None
        p = self.compare(what, out, ref, case)
        if p:
            problems.append(p)
        return out

    def run(self, case):
        """The case's problems (empty: passed) and a note."""
        torch = self.torch
        problems = []
        inputs = [self.make(kind, case) for kind in case.inputs]
        ref = self.reference(case, inputs)
        op = self.op_for(case)
        # into: outputs pre-filled so that an unwritten element fails
        out = torch.empty(ref.shape, dtype=ref.dtype, device=self.device)
        got_into = self.checked_into("into", op, inputs, out, ref, case, problems)
        if op.target:
            self.targets[case.op] = op.target
        # call: outputs allocated by tilerun
        got_call = None
        if not self.args.into_only:
            try:
                got_call = op(*inputs)
                self.sync()
                p = self.compare("call", got_call, ref, case)
                if p:
                    problems.append(p)
            except Exception as e:
                problems.append("call: %s: %s" % (type(e).__name__, e))
        # routes: the DLPack C exchange API (torch's) and the __dlpack__ route give the same
        # result bit for bit, through op() and call_into
        base = got_into if got_into is not None else got_call
        if base is not None:
            ext = sys.modules["tilerun._ext"]
            if ext.route_of(inputs[0]) != "exchange":
                problems.append("routes: a torch tensor is read through %r, not the C exchange "
                                "API" % ext.route_of(inputs[0]))
            was = ext.set_python_route(True)
            try:
                via = torch.empty_like(out)
                via.fill_(self.poison(case, ref))
                op.call_into(inputs, [via])
                got_via = [via] if self.args.into_only else [via, op(*inputs)]
                self.sync()
                for g in got_via:
                    if not self.same(g, base):
                        problems.append("routes: the __dlpack__ route differs from the exchange API's")
            except Exception as e:
                problems.append("routes: %s: %s" % (type(e).__name__, e))
            finally:
                ext.set_python_route(was)
        # strided: non-contiguous views give the contiguous result bit for bit
        if base is not None:
            for how in ("slice", "transpose"):
                views = [self.strided(t, how if t is not None and t.dim() == 2 else "slice")
                         for t in inputs]
                if how == "transpose" and case.rows * case.n <= 1:
                    continue  # a 1x1 tensor is contiguous any way round
                try:
                    if self.args.into_only:
                        got = torch.empty_like(out)
                        got.fill_(self.poison(case, ref))
                        op.call_into(views, [got])
                    else:
                        got = op(*views)
                    self.sync()
                    same = self.same(got, base)
                    if not same:
                        p = self.compare("strided(%s) vs reference" % how, got, ref, case)
                        problems.append("strided(%s): differs from the contiguous result%s"
                                        % (how, "; " + p if p else " (within tolerance)"))
                except Exception as e:
                    problems.append("strided(%s): %s: %s" % (how, type(e).__name__, e))
        # unaligned: the same values, data one element past a 16-byte boundary
        self.checked_into("unaligned", op, [self.unaligned(t) for t in inputs],
                          self.unaligned(torch.empty_like(out)), ref, case, problems)
        return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("filters", nargs="*", help="substrings a case's name must all contain")
    ap.add_argument("--list", action="store_true", help="print the selected cases and exit")
    ap.add_argument("--into-only", action="store_true",
                    help="skip plain calls (tilerun-allocated outputs); strided cases then "
                         "use call_into")
    ap.add_argument("--sync", action="store_true",
                    help="synchronize the device after each tilerun call (diagnoses stream order)")
    ap.add_argument("-x", "--stop", action="store_true", help="stop at the first failure")
    ap.add_argument("--device", default="cuda:0",
                    help="torch device (default cuda:0; `cpu` runs the cases on the cpu backend, "
                         "a check of the harness and of the binding with torch)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    cases = [c for c in all_cases() if all(f in c.name for f in args.filters)]
    if args.list:
        for c in cases:
            print(c.name)
        print("%d cases" % len(cases))
        return 0
    if not cases:
        print("no case matches %s" % " ".join(args.filters))
        return 2

    runner = Runner(args)
    on = (runner.torch.cuda.get_device_name(runner.device) if runner.device.type == "cuda"
          else str(runner.device))
    print("tilerun: %s; torch %s on %s"
          % (runner.tilerun.library_path, runner.torch.__version__, on))
    failed = []
    ran = 0
    start = time.time()
    for c in cases:
        ran += 1
        t0 = time.time()
        try:
            problems = runner.run(c)
        except Exception:
            problems = ["harness: " + traceback.format_exc().strip().replace("\n", " | ")]
        ms = (time.time() - t0) * 1e3
        if problems:
            failed.append(c.name)
            print("FAIL %s (%.0f ms): %s" % (c.name, ms, " ;; ".join(problems)), flush=True)
            if args.stop:
                break
        else:
            print("PASS %s (%.0f ms)" % (c.name, ms), flush=True)
    print("targets: %s" % ", ".join("%s -> %s" % kv for kv in sorted(runner.targets.items())))
    print("summary: %d cases run, %d passed, %d failed (%.1f s)%s" % (
        ran, ran - len(failed), len(failed), time.time() - start,
        "" if not failed else "; failed: " + ", ".join(failed[:20]) +
        (" ..." if len(failed) > 20 else "")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
