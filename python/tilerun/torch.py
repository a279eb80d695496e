"""tilerun.torch: the manifest's ops as PyTorch custom ops, so that torch.compile traces through
them (the spec's compile boundary, op-layer contract item 6)::

    import torch, tilerun.torch
    rms = tilerun.torch.op("RMSNormFwdOp", normalized_shape=(4096,), eps=1e-6)

    @torch.compile(fullgraph=True)          # no graph break at the tilerun op
    def f(x, w):
        return rms(x, w) * 2

Importing the module registers, in the ``tilerun`` namespace of ``torch.ops``, each manifest op
that takes a tensor at call time and is not a composition (``torch.ops.tilerun.RMSNormFwdOp``).
Its schema is the op's inputs in the manifest's order (optional ones ``Tensor?``, those the op
writes in place ``Tensor(a!)``) and one ``str params``: the op's params, encoded by
:func:`op`. Its fake implementation, what torch.compile traces with, is tilerun's own inference
of the outputs (``Op.output_specs``: the manifest alone, no builder, no kernel), so a call the
manifest refuses fails while tracing, with tilerun's message. The real implementation allocates
the outputs with torch (inside a CUDA graph: in the graph's pool) and runs ``Op.call_into`` on
torch's current stream, so ``mode="reduce-overhead"`` captures it.
"""
import json
import threading

import torch

import tilerun as _tilerun

NAMESPACE = "tilerun"

_library = None
_runtime = None
_registered = {}  # op name -> (input names, optional, output names, mutated)
_instances = {}  # (op name, params key) -> tilerun.Op
_lock = threading.Lock()

_TORCH_DTYPES = {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def _torch_dtype(name):
    return _TORCH_DTYPES.get(name) or getattr(torch, name)


def params_key(params):
    """The ``str params`` argument for these params: JSON, keys sorted (dtypes by name)."""
    encoded = {}
    for k, v in params.items():
        name = _tilerun._as_dtype_name(v)
        if name is not None:
            encoded[k] = {"dtype": name}
        elif isinstance(v, (list, tuple)):
            encoded[k] = [int(x) for x in v]
        else:
            encoded[k] = v
    return json.dumps(encoded, sort_keys=True)


def _params_of(key):
    out = {}
    for k, v in json.loads(key).items():
        if isinstance(v, dict):
            v = _tilerun.dtype(v["dtype"])
        elif isinstance(v, list):
            v = tuple(v)
        out[k] = v
    return out


def _instance(name, key):
    """The tilerun op instance for (op, params), made once."""
    op = _instances.get((name, key))
    if op is None:
        with _lock:
            op = _instances.get((name, key))
            if op is None:
                op = _tilerun.op(name, runtime=_runtime, **_params_of(key))
                op._torch_outputs = {}  # input signature -> output specs
                _instances[(name, key)] = op
    return op


def _placeholder(tensors):
    """What an output that does not exist for the call returns (a schema has no None return):
    an empty float32 tensor on the first input's device."""
    first = next(t for t in tensors if t is not None)
    return torch.empty(0, dtype=torch.float32, device=first.device)


def _outputs(specs):
    """Outputs made by torch (None for one that does not exist for the call)."""
    return [None if s is None else torch.empty(s[0], dtype=_torch_dtype(s[1]),
                                                device=torch.device(s[2])) for s in specs]


def _result(outs, tensors):
    done = [o if o is not None else _placeholder(tensors) for o in outs]
    return done[0] if len(done) == 1 else tuple(done)


def _make_impls(name):
    def real(*args):
        *tensors, key = args
        op = _instance(name, key)
        sig = tuple(None if t is None else (tuple(t.shape), t.dtype, t.device) for t in tensors)
        specs = op._torch_outputs.get(sig)
        if specs is None:
            specs = op.output_specs(*tensors)
            op._torch_outputs[sig] = specs
        outs = _outputs(specs)
        op.call_into(tensors, outs)
        return _result(outs, tensors)

    def fake(*args):
        *tensors, key = args
        op = _instance(name, key)
        return _result(_outputs(op.output_specs(*tensors)), tensors)

    return real, fake


def _schema(name, inputs, optional, outputs, mutated):
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    args = []
    for n, opt, mut in zip(inputs, optional, mutated):
        t = "Tensor"
        if mut:
            t += "(%s!)" % next(letters)
        if opt:
            t += "?"
        args.append("%s %s" % (t, n))
    args.append("str params")
    ret = "Tensor" if len(outputs) == 1 else "(%s)" % ", ".join(["Tensor"] * len(outputs))
    return "%s(%s) -> %s" % (name, ", ".join(args), ret)


def register(runtime=None):
    """Registers the manifest's ops (those with a tensor input and no composition) as torch
    custom ops in ``torch.ops.tilerun``, once per process; `runtime` (default: tilerun's
    default runtime) is the one their calls run on. Returns the names registered."""
    global _library, _runtime
    with _lock:
        if _library is not None:
            return sorted(_registered)
        rt = runtime if runtime is not None else _tilerun.default_runtime()
        lib = torch.library.Library(NAMESPACE, "DEF")
        for name in rt.op_names():
            inputs, optional, outputs, composite, mutated = rt.op_info(name)
            if composite or not inputs or not outputs:
                continue
            lib.define(_schema(name, inputs, optional, outputs, mutated))
            real, fake = _make_impls(name)
            lib.impl(name, real, "CompositeExplicitAutograd")
            torch.library.register_fake("%s::%s" % (NAMESPACE, name), fake, lib=lib)
            _registered[name] = (inputs, optional, outputs, mutated)
        _runtime = rt
        _library = lib
        return sorted(_registered)


class BoundOp:
    """A registered op with its params bound: ``BoundOp(x, w)`` calls
    ``torch.ops.tilerun.<name>(x, w, params)``, trailing optional inputs left out as None."""

    def __init__(self, name, params):
        if name not in _registered:
            raise LookupError("tilerun.torch: %r is not registered as a torch op (registered: %s)"
                              % (name, ", ".join(sorted(_registered))))
        self.name = name
        self.params = dict(params)
        self.key = params_key(self.params)
        self.n_inputs = len(_registered[name][0])
        self.overload = getattr(getattr(torch.ops, NAMESPACE), name).default
        _instance(name, self.key)  # bad params fail here, not inside a trace

    def __call__(self, *tensors):
        if len(tensors) > self.n_inputs:
            raise TypeError("tilerun.torch: %s takes %d tensors, got %d"
                            % (self.name, self.n_inputs, len(tensors)))
        return self.overload(*tensors, *([None] * (self.n_inputs - len(tensors))), self.key)

    def __repr__(self):
        params = ", ".join("%s=%r" % kv for kv in self.params.items())
        return "tilerun.torch.op(%r%s)" % (self.name, ", " + params if params else "")


def op(name, **params):
    """The registered torch op `name` with its params bound (see :class:`BoundOp`); a bad
    param raises tilerun's error now."""
    register()
    return BoundOp(name, params)


def instance(name, **params):
    """The tilerun.Op a registered op's calls with these params run on (for memo_count,
    kernel_config, request_tune)."""
    register()
    return _instance(name, params_key(params))


register()
