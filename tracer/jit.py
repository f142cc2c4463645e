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
from backend_wgpu.device import DeviceBuffer, device_if_created
from ir.errors import JitError
from ir.ops import InputArg, Op
from tracer.graph_builder import BuiltGraph, build_graph, postorder
from tracer.host import CONSTANTS
from tracer.lazy import Lazy
from tracer.realize import LOCK, debug_level, device_buffer, note_run, program_for, realize_lazies
from tracer.tensor import Tensor, from_data

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


# --- checking a replay against its trace --------------------------------------------------------


def _fingerprint(out_leaves: list[Any], out_structure: Hashable, arg_pos: dict[int, int]) -> tuple:
    """What a trace computes and what it captured, comparable across two runs of the function.

    Every pending node reachable from the result (op, arg, shape, dtype, operand positions)
    and every leaf it reads: an argument by position, a python scalar constant by value,
    host data by content, any other realized tensor by identity.
    """
    const_of = CONSTANTS.keys_by_id()
    order: list[Lazy] = []
    seen: set[int] = set()
    for v in out_leaves:
        if isinstance(v, Tensor):
            postorder(v._lazy, order, seen)
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
    result = tuple(("value", pos[id(v._lazy)]) if isinstance(v, Tensor) else ("python", repr(v)) for v in out_leaves)
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


# --- what a trace reads and returns ------------------------------------------------------------


@dataclass(frozen=True)
class ArgTensor:
    """A tensor argument of the call, by its position among the call's leaves."""

    leaf: int


@dataclass(frozen=True)
class CapturedBuffer:
    """The device buffer of a tensor the function captured (a weight, a constant), bound as it is."""

    buffer: DeviceBuffer


@dataclass(frozen=True)
class ProgramOutput:
    """One of the program's outputs, by position."""

    index: int


@dataclass(frozen=True)
class CapturedTensor:
    """A captured, realized tensor that the function returns as it is."""

    lazy: Lazy


@dataclass(frozen=True)
class PythonValue:
    """A returned value that is not a tensor (it was computed at trace time)."""

    value: Any


ProgramInput = ArgTensor | CapturedBuffer
Returned = ProgramOutput | ArgTensor | CapturedTensor | PythonValue


@dataclass
class Trace:
    """One signature's compiled program and how to bind it to a call's leaves and rebuild the result."""

    program: Program | None  # None: the function computes nothing (it returns arguments or constants)
    inputs: list[ProgramInput]  # per program input
    returned: list[Returned]  # per leaf of the returned structure
    out_structure: Hashable
    fingerprint: tuple = ()  # _fingerprint at trace time; the first replay checks it still holds
    verified: bool = False

    def replay(self, leaves: list[Any]) -> Any:
        results = self._run(leaves) if self.program is not None else []
        made: dict[int, Tensor] = {}  # one Tensor per program output, however often it is returned
        values = [self._value(r, leaves, results, made) for r in self.returned]
        return _unflatten(self.out_structure, values, [0])

    def _run(self, leaves: list[Any]) -> list[DeviceBuffer]:
        assert self.program is not None
        buffers = [_arg_buffer(leaves[i.leaf]) if isinstance(i, ArgTensor) else i.buffer for i in self.inputs]
        results = self.program.run(buffers)
        note_run(self.program)
        return results

    def _value(self, r: Returned, leaves: list[Any], results: list[DeviceBuffer], made: dict[int, Tensor]) -> Any:
        if isinstance(r, ProgramOutput):
            t = made.get(r.index)
            if t is None:
                node = self.program.graph[self.program.graph.outputs[r.index]]
                lz = Lazy(Op.INPUT, (), node.shape, node.dtype)
                lz.buffer = results[r.index]
                t = made[r.index] = Tensor(lz)
            return t
        if isinstance(r, ArgTensor):
            return leaves[r.leaf]
        if isinstance(r, CapturedTensor):
            return Tensor(r.lazy)
        return r.value


def _as_tensor(leaf: Any) -> Any:
    return from_data(leaf) if isinstance(leaf, np.ndarray) else leaf


def _arg_buffer(t: Tensor) -> DeviceBuffer:
    lz = t._lazy
    if lz.buffer is not None:
        return lz.buffer
    if lz.host is None:
        realize_lazies([lz])  # a pending argument: computed first, by its own program
        if lz.buffer is not None:
            return lz.buffer
    return device_buffer(lz)


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


# --- one trace, step by step -----------------------------------------------------------------


def _trace(
    fn: Callable[..., Any], call: Callable[[list[Any]], tuple[tuple, dict]], leaves: list[Any]
) -> tuple[Trace, Any]:
    """Run fn on the call's leaves, compile and run the graph of what it returns; the Trace and fn's result."""
    _prepare_arguments(leaves)
    call_args, call_kwargs = call(leaves)
    result = fn(*call_args, **call_kwargs)
    out_leaves, out_structure = _flatten_result(result)
    arg_pos = _argument_positions(leaves)
    targets = [v._lazy for v in out_leaves if isinstance(v, Tensor) and not v._lazy.is_leaf]
    _realize_captured(targets, arg_pos)
    # after the captured values became leaves (as they are when a replay is checked), before the run
    fingerprint = _fingerprint(out_leaves, out_structure, arg_pos)
    program: Program | None = None
    inputs: list[ProgramInput] = []
    out_index: dict[int, int] = {}
    if targets:
        with LOCK:
            program, inputs, out_index = _compile_and_run(targets, arg_pos, leaves)
    returned = [_returned(v, out_index, arg_pos) for v in out_leaves]
    return Trace(program, inputs, returned, out_structure, fingerprint), result


def _prepare_arguments(leaves: list[Any]) -> None:
    """Arguments become leaves of the graph: compute the pending ones, upload host data."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    pending = [t._lazy for t in tensors if not t.is_realized]
    if pending:
        realize_lazies(pending)
    for t in tensors:
        _arg_buffer(t)


def _flatten_result(result: Any) -> tuple[list[Any], Hashable]:
    """The returned structure's leaves and its hashable shape."""
    pairs: list[tuple[str, Any]] = []
    structure = _flatten(result, "result", pairs)
    return [v for _, v in pairs], structure


def _argument_positions(leaves: list[Any]) -> dict[int, int]:
    """id(Lazy) of each tensor argument -> its leaf position."""
    return {id(leaf._lazy): i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)}


def _realize_captured(targets: list[Lazy], arg_pos: dict[int, int]) -> None:
    """Compute now, once, the pending values the user can see that do not depend on the arguments.

    A replay must not recompute them (they are captured: a weight times 2 made outside fn).
    """
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
    memo: dict[int, bool] = {}
    args = set(arg_pos)
    captured = [
        lz for lz in order if lz.live_handles() and id(lz) not in target_ids and not _depends_on(lz, args, memo)
    ]
    if captured:
        realize_lazies(captured)


def _compile_and_run(
    targets: list[Lazy], arg_pos: dict[int, int], leaves: list[Any]
) -> tuple[Program, list[ProgramInput], dict[int, int]]:
    """Compile the graph of `targets` (no input donated: a replay's caller may hold them) and run it once.

    Returns the program, what each of its inputs binds, and id(Lazy) -> output position.
    """
    built = build_graph(targets)
    program = program_for(_no_donation(built))
    inputs: list[ProgramInput] = []
    for lz in built.inputs:
        if id(lz) in arg_pos:
            inputs.append(ArgTensor(arg_pos[id(lz)]))
        else:
            lz.pinned = True  # a captured constant: never donated to an in-place kernel
            inputs.append(CapturedBuffer(device_buffer(lz)))
    buffers = [_arg_buffer(leaves[i.leaf]) if isinstance(i, ArgTensor) else i.buffer for i in inputs]
    results = program.run(buffers)
    note_run(program)
    for lz, buf in zip(built.outputs, results, strict=True):
        lz.mark_realized(buf)
    return program, inputs, {id(lz): i for i, lz in enumerate(built.outputs)}


def _no_donation(built: BuiltGraph) -> Any:
    nodes = [replace(n, arg=InputArg(n.arg.index, donatable=False)) if n.op is Op.INPUT else n for n in built.graph]
    return built.graph.with_nodes(nodes)


def _returned(v: Any, out_index: dict[int, int], arg_pos: dict[int, int]) -> Returned:
    """Where a returned leaf comes from on a replay."""
    if not isinstance(v, Tensor):
        return PythonValue(v)
    if id(v._lazy) in out_index:
        return ProgramOutput(out_index[id(v._lazy)])
    if id(v._lazy) in arg_pos:
        return ArgTensor(arg_pos[id(v._lazy)])
    v._lazy.pinned = True
    return CapturedTensor(v._lazy)


# --- the decorator --------------------------------------------------------------------------


class JitFunction:
    """A function traced once per signature and replayed; see the module docstring."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        try:
            self._signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins have none: arguments are then positional paths
            self._signature = None
        self.traces: OrderedDict[Hashable, Trace] = OrderedDict()
        # positional tensors and scalars only: their key, straight to (trace, where each leaf comes from)
        self._fast: dict[Hashable, tuple[Trace, list[tuple[bool, Any]]]] = {}
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
                with LOCK:
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
            with LOCK:
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

    def _verify(self, trace: Trace, structure: Hashable, leaves: list[Any]) -> None:
        """Run fn once more (tracing only) and check it builds what was traced; see the module docstring."""
        call_args, call_kwargs = self._call_args(structure, leaves)
        out_leaves, out_structure = _flatten_result(self.fn(*call_args, **call_kwargs))
        now = _fingerprint(out_leaves, out_structure, _argument_positions(leaves))
        if not _same_trace(trace.fingerprint, now):
            raise JitError(
                f"jit {self.__name__}: the result depends on python state that changed since the function was "
                f"traced: {_first_difference(trace.fingerprint, now)}. A replay would return the traced value; "
                "pass that value as an argument (a tensor, or a python scalar: a new value traces again)"
            )
        trace.verified = True

    def _remember(self, fast: Hashable | None, trace: Trace, args: tuple, leaves: list[Any]) -> None:
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
        program = next(reversed(self.traces.values())).program
        return program is None or program.device is device_if_created()

    def cache_clear(self) -> None:
        self.traces.clear()
        self._fast.clear()


def jit(fn: Callable[..., Any]) -> JitFunction:
    """Trace `fn` once per input signature and replay the compiled program on later calls."""
    return JitFunction(fn)
