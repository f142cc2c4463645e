"""`@tr.jit`: trace a function once per input signature, then replay its compiled program.

    @tr.jit
    def layer(x, w, scale=0.5):
        return (x @ w * scale).gelu()

    y = layer(x, w)       # traced, compiled, run
    y = layer(x2, w)      # same shapes and dtypes: replayed, nothing traced or compiled

The signature of a call is the structure of its arguments (tuples, lists and dicts are
walked), each tensor's shape and dtype, which arguments are the same tensor, and the
value of every other argument ("static" arguments: ints, floats, strings, None...). A
numpy array argument is uploaded and treated as a tensor. A new signature traces again;
WGJIT_DEBUG>=1 says why on stderr.

Tracing runs the function once on the real tensors, builds the graph of the values it
returns and compiles it (the realize cache is shared: a structurally identical graph is
compiled once). What the function reads besides its tensor arguments (closed-over
weights, tensors it creates, python scalars) is captured as a constant of that trace;
side effects happen at trace time only. Pending tensors that do not depend on the
arguments are computed once, before the trace, so replays do not recompute them.

Because a replay reuses what the trace captured, the first replay of each signature runs
the function once more and checks that it would build the same graph from the same
captured values (python scalars by value, host data by content, other tensors by
identity). A function whose result depends on python state that changed in between (a
counter, a global rebound to a new tensor, unseeded random numbers) raises JitError at
that call instead of silently replaying the stale value; pass such values as arguments.

A replay binds the new arguments' buffers and runs the program: pipelines, bind groups
(cached by buffer identity), temporaries and the metadata uniform are reused; only the
input and output buffers change, and an output buffer is reused only once nothing holds
the tensor an earlier call returned in it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from backend_wgpu import Program
from backend_wgpu.device import DeviceBuffer
from ir.errors import JitError
from ir.ops import InputArg, Op
from tracer.graph_builder import _postorder, build_graph
from tracer.lazy import Lazy
from tracer.realize import _LOCK, _input_buffer, debug_level, note_run, program_for, realize
from tracer.tensor import Tensor

MAX_SIGNATURES = 64  # traces kept per function (least recently used dropped)


# --- argument structure ---------------------------------------------------------------------


def _flatten(value: Any, path: str, leaves: list[tuple[str, Any]]) -> Hashable:
    """Walk tuples, lists and dicts; collect (path, leaf) pairs; return the hashable structure."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_flatten(v, f"{path}[{i}]", leaves) for i, v in enumerate(value)))
    if isinstance(value, dict):
        keys = tuple(value)
        return ("dict", keys, tuple(_flatten(value[k], f"{path}[{k!r}]", leaves) for k in keys))
    leaves.append((path, value))
    return "*"


def _unflatten(structure: Hashable, leaves: list[Any], pos: list[int]) -> Any:
    if structure == "*":
        pos[0] += 1
        return leaves[pos[0] - 1]
    kind = structure[0]
    if kind == "dict":
        _, keys, items = structure
        return {k: _unflatten(s, leaves, pos) for k, s in zip(keys, items, strict=True)}
    items = [_unflatten(s, leaves, pos) for s in structure[1]]
    return tuple(items) if kind == "tuple" else items


def _leaf_key(leaf: Any, seen: dict[int, int], path: str) -> Hashable:
    if isinstance(leaf, Tensor):
        first = seen.setdefault(id(leaf._lazy), len(seen))
        return ("tensor", leaf.shape, leaf.dtype.value, first)
    try:
        hash(leaf)
    except TypeError:
        raise TypeError(
            f"jit: argument {path} ({type(leaf).__name__}) is neither a Tensor nor hashable; pass it as a Tensor or a static value"
        ) from None
    return ("static", type(leaf).__name__, leaf)


def _fast_key(args: tuple) -> Hashable | None:
    """A signature for calls with positional tensors and plain scalars only (None otherwise)."""
    key: list[Hashable] = []
    seen: dict[int, int] = {}
    for a in args:
        if isinstance(a, Tensor):
            lz = a._lazy
            key.append((lz.shape, lz.dtype, seen.setdefault(id(lz), len(seen))))
        elif a is None or type(a) in (int, float, bool, str):
            key.append((type(a), a))
        else:
            return None
    return tuple(key)


def _describe(key: Hashable) -> str:
    if key[0] == "tensor":
        return f"tensor {key[1]} {key[2]}"
    return f"{key[2]!r}"


# --- one trace --------------------------------------------------------------------------------


def _fingerprint(out_leaves: list[tuple[str, Any]], out_structure: Hashable, arg_pos: dict[int, int]) -> tuple:
    """What a trace computes and what it captured, comparable across two runs of the function.

    Every pending node reachable from the result (op, arg, shape, dtype, operand positions)
    and every leaf it reads: an argument by position, a python scalar constant by value,
    host data by content, any other realized tensor by identity.
    """
    from tracer.factories import _CONSTANTS

    const_of = {id(lz): key for key, lz in _CONSTANTS.items()}
    order: list[Lazy] = []
    seen: set[int] = set()
    for _, v in out_leaves:
        if isinstance(v, Tensor):
            _postorder(v._lazy, order, seen)
    pos: dict[int, int] = {}
    parts: list[Hashable] = []
    for lz in order:
        pos[id(lz)] = len(parts)
        if id(lz) in arg_pos:
            parts.append(("arg", arg_pos[id(lz)]))
        elif not lz.is_leaf:
            parts.append((lz.op.value, repr(lz.arg), lz.shape, lz.dtype, tuple(pos[id(s)] for s in lz.srcs)))
        elif id(lz) in const_of:
            parts.append(("constant", *const_of[id(lz)]))
        else:  # the same tensor, or one made again from the same host data (uploaded since: by identity)
            digest = hashlib.sha1(lz.host.tobytes()).hexdigest() if lz.host is not None else None
            parts.append(("tensor", lz.shape, lz.dtype, id(lz), digest))
    result = tuple(("value", pos[id(v._lazy)]) if isinstance(v, Tensor) else ("python", repr(v)) for _, v in out_leaves)
    return (out_structure, tuple(parts), result)


def _same_part(a: Hashable, b: Hashable) -> bool:
    if a == b:
        return True
    if a[0] == b[0] == "tensor" and a[1:3] == b[1:3]:
        return a[3] == b[3] or (a[4] is not None and a[4] == b[4])
    return False


def _same_trace(old: tuple, new: tuple) -> bool:
    return (
        old[0] == new[0]
        and old[2] == new[2]
        and len(old[1]) == len(new[1])
        and all(_same_part(a, b) for a, b in zip(old[1], new[1], strict=True))
    )


def _first_difference(old: tuple, new: tuple) -> str:
    """A short account of how two fingerprints differ, for the JitError message."""
    if old[0] != new[0] or len(old[2]) != len(new[2]):
        return "it returns a different structure"
    for a, b in zip(old[2], new[2], strict=True):
        if a != b and a[0] == b[0] == "python":
            return f"it returns the python value {b[1]} where the trace returned {a[1]}"
    for a, b in zip(old[1], new[1]):
        if _same_part(a, b):
            continue
        if a[0] == b[0] == "constant":
            return f"a captured python scalar was {a[1]} when traced and is {b[1]} now"
        if a[0] == b[0] == "tensor":
            return (
                f"it reads another tensor of shape {b[1]} than when traced (a rebound global, or new data "
                "made inside the function)"
            )
        return f"its graph differs from the traced one ({a[0]} became {b[0]})"
    return "its graph differs from the traced one"


@dataclass
class _Trace:
    program: Program
    inputs: list[tuple[str, Any]]  # per program input: ("arg", leaf position) or ("const", DeviceBuffer)
    # per returned leaf: ("out", program output), ("arg", leaf position), ("const", Lazy) or ("py", value)
    outputs: list[tuple[str, Any]]
    out_structure: Hashable
    fingerprint: tuple = ()  # _fingerprint at trace time; the first replay checks it still holds
    verified: bool = False

    def replay(self, leaves: list[Any]) -> Any:
        buffers: list[DeviceBuffer] = []
        for kind, what in self.inputs:
            buffers.append(_arg_buffer(leaves[what]) if kind == "arg" else what)
        results = self.program.run(buffers)
        note_run(self.program)
        made: dict[int, Tensor] = {}
        out: list[Any] = []
        for kind, what in self.outputs:
            if kind == "out":
                t = made.get(what)
                if t is None:
                    buf = results[what]
                    lz = Lazy(Op.INPUT, (), self.shapes[what], self.dtypes[what])
                    lz.buffer = buf
                    t = made[what] = Tensor(lz)
                out.append(t)
            elif kind == "arg":
                out.append(leaves[what])
            elif kind == "const":
                out.append(Tensor(what))
            else:
                out.append(what)
        return _unflatten(self.out_structure, out, [0])

    def __post_init__(self) -> None:
        graph = self.program.graph
        self.shapes = [graph[o].shape for o in graph.outputs]
        self.dtypes = [graph[o].dtype for o in graph.outputs]


def _as_tensor(leaf: Any) -> Any:
    if isinstance(leaf, np.ndarray):
        from tracer.factories import tensor

        return tensor(leaf)
    return leaf


def _arg_buffer(t: Tensor) -> DeviceBuffer:
    lz = t._lazy
    if lz.buffer is not None:
        return lz.buffer
    if lz.host is None:
        realize(t)  # a pending argument: computed first, by its own program
        if lz.buffer is not None:
            return lz.buffer
    return _input_buffer(lz)


def _depends_on(lz: Lazy, args: set[int], memo: dict[int, bool]) -> bool:
    """Does pending `lz` read any of the argument Lazies (by id)? Iterative, memoized."""
    stack = [lz]
    while stack:
        cur = stack[-1]
        if id(cur) in memo:
            stack.pop()
            continue
        if id(cur) in args:
            memo[id(cur)] = True
            stack.pop()
            continue
        if cur.is_leaf:
            memo[id(cur)] = False
            stack.pop()
            continue
        todo = [s for s in cur.srcs if id(s) not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[id(cur)] = any(memo[id(s)] for s in cur.srcs)
        stack.pop()
    return memo[id(lz)]


def _trace(
    fn: Callable[..., Any], call: Callable[[list[Any]], tuple[tuple, dict]], leaves: list[Any]
) -> tuple[_Trace | _NoProgram, Any]:
    # arguments become leaves of the graph: compute pending ones, upload host data
    tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    pending = [t for t in tensors if not t.is_realized]
    if pending:
        realize(*pending)
    for t in tensors:
        _arg_buffer(t)
    call_args, call_kwargs = call(leaves)
    result = fn(*call_args, **call_kwargs)

    out_leaves: list[tuple[str, Any]] = []
    out_structure = _flatten(result, "result", out_leaves)
    arg_pos = {id(leaf._lazy): i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)}
    targets = [v._lazy for _, v in out_leaves if isinstance(v, Tensor) and not v._lazy.is_leaf]

    # captured pending values that do not depend on the arguments: compute them once now
    memo: dict[int, bool] = {}
    order: list[Lazy] = []
    seen: set[int] = set()
    stack = list(targets)
    while stack:
        lz = stack.pop()
        if id(lz) in seen or lz.is_leaf:
            continue
        seen.add(id(lz))
        order.append(lz)
        stack.extend(lz.srcs)
    target_ids = {id(lz) for lz in targets}
    captured = [
        lz for lz in order if lz.live_handles() and id(lz) not in target_ids and not _depends_on(lz, set(arg_pos), memo)
    ]
    if captured:
        realize(*[Tensor(lz) for lz in captured])
    # after the captured values became leaves (as they are when a replay is checked), before the run
    fingerprint = _fingerprint(out_leaves, out_structure, arg_pos)

    with _LOCK:
        if targets:
            built = build_graph(targets)
            nodes = [
                replace(n, arg=InputArg(n.arg.index, donatable=False)) if n.op is Op.INPUT else n for n in built.graph
            ]
            graph = built.graph.with_nodes(nodes)
            program = program_for(graph)
            inputs: list[tuple[str, Any]] = []
            for lz in built.inputs:
                if id(lz) in arg_pos:
                    inputs.append(("arg", arg_pos[id(lz)]))
                else:
                    lz.pinned = True  # a captured constant: never donated to an in-place kernel
                    inputs.append(("const", _input_buffer(lz) if lz.buffer is None else lz.buffer))
            buffers = [_arg_buffer(leaves[w]) if k == "arg" else w for k, w in inputs]
            results = program.run(buffers)
            note_run(program)
            for lz, buf in zip(built.outputs, results, strict=True):
                lz.mark_realized(buf)
            out_index = {id(lz): i for i, lz in enumerate(built.outputs)}
        else:  # nothing to compute: the function returns arguments or constants
            program, inputs, out_index = None, [], {}

    outputs: list[tuple[str, Any]] = []
    for _, v in out_leaves:
        if not isinstance(v, Tensor):
            outputs.append(("py", v))
        elif id(v._lazy) in out_index:
            outputs.append(("out", out_index[id(v._lazy)]))
        elif id(v._lazy) in arg_pos:
            outputs.append(("arg", arg_pos[id(v._lazy)]))
        else:
            v._lazy.pinned = True
            outputs.append(("const", v._lazy))
    trace = (
        _Trace(program, inputs, outputs, out_structure, fingerprint)
        if program is not None
        else _NoProgram(inputs, outputs, out_structure, fingerprint=fingerprint)
    )
    return trace, result


@dataclass
class _NoProgram:
    """A trace that computes nothing (the function returns its arguments or constants)."""

    inputs: list[tuple[str, Any]]
    outputs: list[tuple[str, Any]]
    out_structure: Hashable
    program: None = None
    fingerprint: tuple = ()
    verified: bool = False

    def replay(self, leaves: list[Any]) -> Any:
        out = [leaves[w] if k == "arg" else Tensor(w) if k == "const" else w for k, w in self.outputs]
        return _unflatten(self.out_structure, out, [0])


# --- the decorator --------------------------------------------------------------------------


class JitFunction:
    """A function traced once per signature and replayed; see the module docstring."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        try:
            self._signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins have none: arguments are then positional paths
            self._signature = None
        self.traces: OrderedDict[Hashable, _Trace | _NoProgram] = OrderedDict()
        # positional tensors and scalars only: their key, straight to (trace, where each leaf comes from)
        self._fast: dict[Hashable, tuple[_Trace | _NoProgram, list[tuple[bool, Any]]]] = {}
        self.trace_count = 0  # how many times fn ran (once per new signature)
        self.replay_count = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.traces and not self._same_device():
            self.cache_clear()  # compiled for a device tr.reset_device() replaced: trace again
        fast = None if kwargs else _fast_key(args)
        if fast is not None:
            hit = self._fast.get(fast)
            if hit is not None:  # the replay path: no binding, no flattening
                trace, plan = hit
                self.replay_count += 1
                with _LOCK:
                    return trace.replay([args[v] if from_args else v for from_args, v in plan])
        leaves_with_paths: list[tuple[str, Any]] = []
        if self._signature is not None:  # by parameter name, defaults filled in: f(x) and f(x, s=default) agree
            bound = self._signature.bind(*args, **kwargs)
            bound.apply_defaults()
            names = tuple(bound.arguments)
            structure = (names, tuple(_flatten(v, k, leaves_with_paths) for k, v in bound.arguments.items()))
        else:
            names = None
            structure = (
                None,
                (_flatten(args, "args", leaves_with_paths), _flatten(kwargs, "kwargs", leaves_with_paths)),
            )
        leaves = [_as_tensor(leaf) for _, leaf in leaves_with_paths]  # numpy arrays become tensors
        seen: dict[int, int] = {}
        signature = (
            structure,
            tuple(_leaf_key(leaf, seen, path) for (path, _), leaf in zip(leaves_with_paths, leaves, strict=True)),
        )
        trace = self.traces.get(signature)
        if trace is not None:
            self.traces.move_to_end(signature)
            if not trace.verified:
                self._verify(trace, structure, leaves)
            self._remember(fast, trace, args, leaves)
            self.replay_count += 1
            with _LOCK:
                return trace.replay(leaves)
        if debug_level() >= 1:
            print(f"[wgjit] jit {self.__name__}: {self._why(signature, leaves_with_paths)}", file=sys.stderr)
        trace, result = _trace(self.fn, functools.partial(self._call_args, structure), leaves)
        self.trace_count += 1
        self.traces[signature] = trace
        if len(self.traces) > MAX_SIGNATURES:
            self.traces.popitem(last=False)
            self._fast.clear()
        return result  # not remembered for the fast path yet: the next call checks the trace

    def _verify(self, trace: _Trace | _NoProgram, structure: Hashable, leaves: list[Any]) -> None:
        """Run fn once more (tracing only) and check it builds what was traced; see the module docstring."""
        call_args, call_kwargs = self._call_args(structure, leaves)
        result = self.fn(*call_args, **call_kwargs)
        out_leaves: list[tuple[str, Any]] = []
        out_structure = _flatten(result, "result", out_leaves)
        arg_pos = {id(leaf._lazy): i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)}
        now = _fingerprint(out_leaves, out_structure, arg_pos)
        if not _same_trace(trace.fingerprint, now):
            raise JitError(
                f"jit {self.__name__}: the result depends on python state that changed since the function was "
                f"traced: {_first_difference(trace.fingerprint, now)}. A replay would return the traced value; "
                "pass that value as an argument (a tensor, or a python scalar: a new value traces again)"
            )
        trace.verified = True

    def _remember(self, fast: Hashable | None, trace: _Trace | _NoProgram, args: tuple, leaves: list[Any]) -> None:
        """Let later calls with this fast key skip binding: each leaf is an argument (by index) or a default."""
        if fast is None:
            return
        index = {id(a): i for i, a in reversed(list(enumerate(args)))}
        self._fast[fast] = (trace, [(True, index[id(leaf)]) if id(leaf) in index else (False, leaf) for leaf in leaves])

    def _call_args(self, structure: Hashable, leaves: list[Any]) -> tuple[tuple, dict]:
        """Positional and keyword arguments for fn from (possibly converted) leaves."""
        names, parts = structure
        pos = [0]
        values = [_unflatten(part, leaves, pos) for part in parts]
        if names is None:
            return tuple(values[0]), dict(values[1])
        bound = inspect.BoundArguments(self._signature, OrderedDict(zip(names, values, strict=True)))
        return bound.args, bound.kwargs

    def _why(self, signature: Hashable, leaves: list[tuple[str, Any]]) -> str:
        """Why this call traces: first call, or what differs from the closest earlier signature."""
        if not self.traces:
            return "tracing (first call)"
        structure, keys = signature
        same_shape = [s for s in reversed(self.traces) if s[0] == structure and len(s[1]) == len(keys)]
        if not same_shape:
            return "retracing: the arguments' structure changed"
        old = min(same_shape, key=lambda s: sum(a != b for a, b in zip(s[1], keys, strict=True)))
        diffs = [
            f"{path}: {_describe(a)} -> {_describe(b)}"
            for (path, _), a, b in zip(leaves, old[1], keys, strict=True)
            if a != b
        ]
        return "retracing: " + "; ".join(diffs)

    def _same_device(self) -> bool:
        from backend_wgpu.device import device_if_created

        program = next(reversed(self.traces.values())).program
        return program is None or program.device is device_if_created()

    def cache_clear(self) -> None:
        self.traces.clear()
        self._fast.clear()


def jit(fn: Callable[..., Any]) -> JitFunction:
    """Trace `fn` once per input signature and replay the compiled program on later calls."""
    return JitFunction(fn)
