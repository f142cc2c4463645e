"""`@tr.jit`: trace a function once per input signature, then replay its compiled program.

    @tr.jit
    def layer(x, w, scale=0.5):
        return (x @ w * scale).gelu()

    y = layer(x, w)       # traced, compiled, run
    y = layer(x2, w)      # same shapes and dtypes: replayed, nothing traced or compiled

The signature of a call (tracer.signature) is the structure of its arguments (tuples,
lists and dicts are walked), each tensor's shape and dtype, which arguments are the same
tensor, and the value of every other argument ("static" arguments: ints, floats by their
bits, strings, None...). A numpy array argument is uploaded and treated as a tensor. A
new signature traces again; WGJIT_DEBUG>=1 says why on stderr.

Tracing runs the function once on the real tensors, builds the graph of the values it
returns and compiles it (the realize cache is shared: a structurally identical graph is
compiled once). Pending arguments are computed first. Pending tensors that do not depend
on the arguments are computed once, during the trace, so replays do not recompute them.

A replay runs only the compiled program: the function's body runs when it is traced and
never on a replay (its side effects happen once per trace). Hence:

- Reading a value computed from the arguments on the host while tracing (`numpy()`,
  `item()`, `float()`, `bool()`, `tolist()`) raises JitError: no replay could repeat it
  (tracer.tracing). `realize()` of such a value is left to the program.
- Tensors the function writes into with `index_write` (arguments, or tensors it
  captured) are written on every replay too, as in the traced call. An argument written
  into is donated: the program writes into its buffer in place (a decode step appends one
  row to each KV cache instead of copying every cache), unless something else can still see
  the value it had (another Tensor, a pending value that reads it, the same tensor passed
  twice): that call then writes into a copy, and what saw the old value keeps it.
- What the function reads besides its arguments is captured, and checked before every
  replay (tracer.guards): globals and closure variables must still name the same objects
  (else the function is traced again), and captured tensors are read at each call through
  the Tensors that showed them, so writes into them are seen. Changes inside objects
  (list items, a dict entry or attribute set to another python number) and random draws
  inside the function are not seen: pass such values as arguments.
- Calling a jitted function while another is traced inlines it (nested and recursive
  jitted functions trace into the caller's program).

A replay binds the new arguments' buffers and runs the program: pipelines, bind groups
(cached by buffer identity), temporaries and the metadata uniform are reused; only the
input and output buffers change, and an output buffer is reused only once nothing holds
the tensor an earlier call returned in it. The captured tensors' buffers are looked up in
full only when one of the Tensors that showed them shows another value (or is gone):
otherwise those of the last full bind are reused (`_Bound`), and the program's plan is
found by the argument buffers alone.
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from typing import Any

import numpy as np

from backend_wgpu import Program, get_device
from backend_wgpu.device import Device, DeviceBuffer, device_if_created
from ir.graph import Graph
from ir.ops import InputArg, Op
from tracer import tracing
from tracer.arg_staging import ArgumentStaging
from tracer.graph_builder import BuiltGraph, build_graph
from tracer.guards import CapturedState, NameGuards
from tracer.lazy import Lazy, compact_refs
from tracer.realize import (
    LOCK,
    debug_level,
    device_buffer,
    has_started_read,
    note_run,
    program_for,
    realize_lazies,
)
from tracer.runtime_ints import RuntimeInt, Var, bucket_of
from tracer.signature import describe, fast_key, flatten, leaf_key, unflatten
from tracer.tensor import Tensor, from_data, rebind, value_epoch

MAX_SIGNATURES = 64  # traces kept per function (least recently used dropped)
MAX_BUCKET_TRACES = 16  # per signature, traces kept for other buckets of its runtime lengths


# --- what a trace reads, returns and rebinds -------------------------------------------------


@dataclass(frozen=True)
class ArgTensor:
    """A tensor argument of the call, by its position among the call's leaves."""

    leaf: int


@dataclass(frozen=True, eq=False)
class CapturedBuffer:
    """The buffer of a captured tensor no Tensor outside shows (a constant the function made): bound as it is."""

    buffer: DeviceBuffer


@dataclass(frozen=True)
class ProgramOutput:
    """One of the program's outputs, by position."""

    index: int


@dataclass(frozen=True, eq=False)
class CapturedTensor:
    """A captured, realized tensor that the function returns as it is."""

    lazy: Lazy


@dataclass(frozen=True)
class PythonValue:
    """A returned value that is not a tensor (computed at trace time from static values)."""

    value: Any


@dataclass(frozen=True, eq=False)
class RebindArg:
    """After the run, the argument Tensor at `leaf` shows program output `output` (an index_write on it)."""

    leaf: int
    output: int


@dataclass(frozen=True, eq=False)
class RebindCaptured:
    """After the run, a captured Tensor shows program output `output` (an index_write on it)."""

    tensor: weakref.ref
    output: int


@dataclass(frozen=True)
class RuntimeSource:
    """Where a runtime integer of the program comes from: a RuntimeInt argument (by leaf), or a traced value."""

    leaf: int | None
    value: int = 0


@dataclass(frozen=True)
class BucketGuard:
    """A runtime length `scale * argument + const`, stored at `bucket` of an axis of `size` when traced."""

    leaf: int
    scale: int
    const: int
    size: int
    bucket: int


ProgramInput = ArgTensor | CapturedBuffer | CapturedState

_BUFFER_OF = operator.attrgetter("buffer")
_LAZY_OF = operator.attrgetter("_lazy")
_HOST_OF = operator.attrgetter("host")
_CELL_OF = operator.attrgetter("_cell")
_VIEW_REFS = operator.attrgetter("refs")  # a root's tracer.views.RootCell: the references to its views
_DEVICE_OF = operator.attrgetter("device")
_CALL = operator.call  # a weak reference's referent, as map's function


@dataclass(eq=False)
class _Bound:
    """What a trace's last full bind found for its captured inputs, checked and reused by the next calls.

    A replay usually reads the same captured tensors (weights) in the same buffers as the call
    before: while every Tensor that showed one still shows the value it showed then, their
    buffers are those of then. Held by weak references (the values and the Tensors), so a
    replaced weight's buffer is not kept alive by this cache: `captured`, the buffers as last
    checked, is dropped by a callback when one of those dies.

    The check itself is skipped while tracer.tensor.value_epoch() is what it was at the last
    one: no Tensor anywhere has been rebound since, so each still shows what it showed then.
    A decode loop's replays find it unchanged, and skip reading ~100 weights' Tensors and
    values each call, cold in the CPU's caches after the wait for the previous read-back.
    """

    device: Device
    tensors: list[weakref.ref]  # each live Tensor that showed a captured value (CapturedState.tensors)
    shown: list[weakref.ref]  # the value (Lazy) each of them showed
    first: Callable[[list[Lazy]], tuple[Lazy, ...]]  # those values -> one per CapturedState input, in order
    constants: list[DeviceBuffer]  # the CapturedBuffer inputs' buffers, in order
    args: list[int]  # the leaf of each ArgTensor input, in order
    arg_flags: list[bool]  # [True] per ArgTensor input (for _leaf_buffers)
    order: Callable[[list[DeviceBuffer]], tuple[DeviceBuffer, ...]]  # constants + captured + arguments -> inputs
    pick_args: Callable[[list[DeviceBuffer]], tuple[DeviceBuffer, ...]]  # the inputs -> the argument inputs
    pick_leaves: Callable[[list[Any]], tuple[Any, ...]]  # the call's leaves -> those of the ArgTensor inputs
    # id() of every buffer bound for a CapturedBuffer or CapturedState input: while _bind_fast holds, those
    # buffers are the same live objects (the values that hold them are checked alive), so their ids stand
    fixed_ids: frozenset[int]
    captured: list[DeviceBuffer]  # the CapturedState inputs' buffers, in order, as last checked
    epoch: int  # tracer.tensor.value_epoch() when `captured` was checked: while it holds, no check is needed
    dead: bool = False  # a watched Tensor or value died (_forgetter): the next call binds in full

    def varying(self) -> tuple[Hashable, Callable[[list[DeviceBuffer]], tuple[DeviceBuffer, ...]]]:
        """Program.run's plan-key hint: under this token (self) only the argument inputs change."""
        return (self, self.pick_args)


Returned = ProgramOutput | ArgTensor | CapturedTensor | PythonValue
Rebinding = RebindArg | RebindCaptured


@dataclass
class Trace:
    """One signature's compiled program, how a call binds it, and how its result is rebuilt."""

    program: Program | None  # None: the function computes nothing (it returns arguments or constants)
    inputs: list[ProgramInput]  # per program input
    returned: list[Returned]  # per leaf of the returned structure
    out_structure: Hashable
    rebinds: list[Rebinding] = field(default_factory=list)
    names: NameGuards = field(default_factory=NameGuards)
    ints: list[RuntimeSource] = field(default_factory=list)  # per runtime integer of the program
    buckets: list[BucketGuard] = field(default_factory=list)  # the runtime lengths' buckets this trace holds
    staging: ArgumentStaging = field(default_factory=ArgumentStaging)  # host-data arguments of a replay
    bound: _Bound | None = field(default=None, repr=False)  # the captured inputs of the last full bind
    out_meta: list[tuple[tuple[int, ...], Any]] | None = field(default=None, repr=False)  # per output: shape, dtype
    fast_bound: _Bound | None = field(default=None, repr=False)  # set by a bind that reused `bound`, for the run
    plain: bool | None = field(default=None, repr=False)  # see replay (None: not known yet)
    # (program input, argument leaf) of the arguments the program overwrites in place (donated)
    donated: list[tuple[int, int]] = field(default_factory=list)
    # the RebindArg targets' leaves and outputs (pickers) and their count, for _rebind (None: not made yet)
    _kept_pick: tuple[Callable[[list[Any]], tuple[Any, ...]], Callable[[list[Any]], tuple[Any, ...]], int] | None = (
        field(default=None, repr=False)
    )

    def bind(self, leaves: list[Any]) -> list[DeviceBuffer] | str:
        """The program's input buffers for this call, or why the trace no longer holds."""
        self.fast_bound = None
        failure = self.names.failure() or (self._bucket_failure(leaves) if self.buckets else None)
        if failure is not None:
            return failure
        bound = self.bound
        if bound is not None and bound.device is device_if_created():
            buffers = self._bind_fast(leaves, bound)
            if buffers is not None:
                return buffers
        return self._bind_all(leaves)

    def _bind_fast(self, leaves: list[Any], bound: _Bound) -> list[DeviceBuffer] | None:
        """The buffers when the captured inputs are those of the last full bind (None: they are not)."""
        if bound.dead:
            return None
        epoch = value_epoch()
        if bound.epoch != epoch:  # some Tensor was rebound since the last check: look again
            try:  # (list comprehensions: faster here than map over weakref.ref.__call__)
                now = [r()._lazy for r in bound.tensors]
            except AttributeError:  # a Tensor that showed a captured value is gone (r() is None)
                return None
            if now != list(map(_CALL, bound.shown)):  # identity: Lazy has no __eq__; a dead value is None
                return None
            bound.captured = list(map(_BUFFER_OF, bound.first(now)))
            bound.epoch = epoch
        arg_buffers: list[DeviceBuffer] = []
        if bound.args:
            device = bound.device
            lazies = list(map(_LAZY_OF, bound.pick_leaves(leaves)))
            arg_buffers = list(map(_BUFFER_OF, lazies))
            present = list(filter(None, arg_buffers))  # (a DeviceBuffer is true)
            if not all(map(operator.is_, map(_DEVICE_OF, present), repeat(device))):
                arg_buffers = self._leaf_buffers(lazies, bound.arg_flags, device)  # one on another device: it says
            elif len(present) != len(arg_buffers):  # host data (staged) or pending values: those alone, as in full
                missing = list(compress(range(len(arg_buffers)), map(operator.is_, arg_buffers, repeat(None))))
                found = self._leaf_buffers([lazies[m] for m in missing], [True] * len(missing), device)
                for m, buf in zip(missing, found, strict=True):
                    arg_buffers[m] = buf
        self.fast_bound = bound  # the run may key its plan by it (Program.run's varying)
        return list(bound.order([*bound.constants, *bound.captured, *arg_buffers]))

    def _bind_all(self, leaves: list[Any]) -> list[DeviceBuffer] | str:
        """Bind every input as it is now (and remember the captured ones for _bind_fast)."""
        epoch = value_epoch()  # before any Tensor is read (see tracer.tensor.value_epoch)
        lazies: list[Lazy] = []
        for i in self.inputs:
            if isinstance(i, ArgTensor):
                lazies.append(leaves[i.leaf]._lazy)
            elif isinstance(i, CapturedState):
                lz = i.current()
                if lz is None:
                    return f"a captured tensor of shape {i.shape} is gone, or changed shape or dtype"
                lazies.append(lz)
        pending = [lz for lz in lazies if lz.op is not Op.INPUT]  # not is_leaf: this runs per input per call
        if pending:  # pending arguments or captured values: computed first, in one submission
            realize_lazies(pending)
        device = get_device()
        is_arg = [type(i) is ArgTensor for i in self.inputs if type(i) is not CapturedBuffer]
        found = iter(self._leaf_buffers(lazies, is_arg, device, realized=True))
        buffers = [i.buffer if type(i) is CapturedBuffer else next(found) for i in self.inputs]
        self.bound = self._remember(device, epoch)
        return buffers

    def _leaf_buffers(
        self, lazies: list[Lazy], is_arg: list[bool], device: Device, realized: bool = False
    ) -> list[DeviceBuffer]:
        """Each value's buffer; argument host data never uploaded goes into the trace's staging buffer.

        Pending values are computed first, in one submission (unless `realized`: done already).
        """
        if not realized:
            pending = [lz for lz in lazies if lz.op is not Op.INPUT]  # not is_leaf: this runs per input per call
            if pending:
                realize_lazies(pending)
        buffers: list[DeviceBuffer | None] = []
        fresh: list[tuple[int, np.ndarray]] = []  # (position, host data) of arguments never uploaded
        for lz, arg in zip(lazies, is_arg, strict=True):
            buf = lz.buffer
            if buf is not None and buf.device is device:  # the common case, without a call
                buffers.append(buf)
            elif arg and buf is None and lz.host is not None and ArgumentStaging.wanted(lz.host):
                fresh.append((len(buffers), lz.host))
                buffers.append(None)
            else:
                buffers.append(device_buffer(lz))
        if fresh:  # into the trace's reused buffer: the program's bind groups stay the same
            staged = self.staging.write(device, [a for _, a in fresh])
            for (index, _), buf in zip(fresh, staged, strict=True):
                buffers[index] = buf
        return buffers  # type: ignore[return-value]  # every None was filled

    def _remember(self, device: Device, epoch: int) -> _Bound | None:
        """The captured inputs as they are now (after a full bind), for _bind_fast; None if one cannot be.
        `epoch`: value_epoch() taken before the full bind read them."""
        tensors: list[Tensor] = []
        shown: list[Lazy] = []
        firsts: list[int] = []
        fixed: list[DeviceBuffer] = []  # the buffers of the captured inputs
        constants: list[DeviceBuffer] = []
        args: list[int] = []
        kinds: list[tuple[int, int]] = []  # per input: (kind, position among its kind)
        for i in self.inputs:
            if type(i) is CapturedBuffer:
                kinds.append((0, len(constants)))
                constants.append(i.buffer)
            elif type(i) is ArgTensor:
                kinds.append((2, len(args)))
                args.append(i.leaf)
            else:
                live = [t for r in i.tensors if (t := r()) is not None]
                lz = live[0]._lazy if live else None
                if (
                    lz is None
                    or lz.buffer is None
                    or lz.buffer.device is not device
                    or any(t._lazy is not lz for t in live)
                ):
                    return None  # changed since bound: the next call binds in full again
                kinds.append((1, len(firsts)))
                firsts.append(len(tensors))
                fixed.append(lz.buffer)
                for t in live:
                    tensors.append(t)
                    shown.append(lz)
        base = {0: 0, 1: len(constants), 2: len(constants) + len(firsts)}
        order = _picker([base[k] + p for k, p in kinds])
        pick_args = _picker([n for n, (k, _) in enumerate(kinds) if k == 2])
        fixed_ids = frozenset(map(id, [*constants, *fixed]))
        bound = _Bound(
            device,
            [],
            [],
            _picker(firsts),
            constants,
            args,
            [True] * len(args),
            order,
            pick_args,
            _picker(args),
            fixed_ids,
            fixed,
            epoch,
        )
        forget = _forgetter(weakref.ref(bound))
        bound.tensors = [weakref.ref(t, forget) for t in tensors]
        bound.shown = [weakref.ref(lz, forget) for lz in shown]  # a dead value's buffer is not kept by `captured`
        return bound

    def _bucket_failure(self, leaves: list[Any]) -> str | None:
        for g in self.buckets:
            n = g.scale * leaves[g.leaf].value + g.const
            if bucket_of(n, g.size) != g.bucket:
                return f"a runtime length ({n}) needs another bucket than {g.bucket} (tracer.runtime_ints)"
        return None

    def runtime_ints(self, leaves: list[Any]) -> tuple[int, ...]:
        """The program's runtime integers for this call: from RuntimeInt arguments, or as traced."""
        return tuple(leaves[i.leaf].value if i.leaf is not None else i.value for i in self.ints)

    def replay(self, leaves: list[Any], buffers: list[DeviceBuffer]) -> Any:
        if self.donated:
            repeats = None
            fast = self.fast_bound
            if fast is not None:  # only the argument inputs changed since the full bind: their buffers alone
                ids = set(map(id, fast.pick_args(buffers)))
                repeats = len(ids) != len(fast.args) or not fast.fixed_ids.isdisjoint(ids)
            _protect_shared_values(self.donated, leaves, buffers, repeats)
        results: list[DeviceBuffer] = []
        if self.program is not None:
            outputs, results = self._run(buffers, self.runtime_ints(leaves))
        else:
            outputs = _no_outputs
        if self.rebinds:
            self._rebind(leaves, outputs, results)
        if self.plain is None:  # no rebinding and no output returned twice: each output's Lazy is new and unseen
            indices = [r.index for r in self.returned if type(r) is ProgramOutput]
            self.plain = not self.rebinds and len(indices) == len(set(indices))
        if self.plain:
            values = [
                Tensor(outputs(r.index)) if type(r) is ProgramOutput else self._value(r, leaves, outputs)
                for r in self.returned
            ]
        else:
            values = [self._value(r, leaves, outputs) for r in self.returned]
        return unflatten(self.out_structure, values, [0])

    def _rebind(self, leaves: list[Any], outputs: Callable[[int], Lazy], results: list[DeviceBuffer]) -> None:
        """After a run: each Tensor the function wrote into shows its new value (RebindArg, RebindCaptured)."""
        keep = tracing.current() is None  # a trace running records rebinds: nothing is kept then
        if self._kept_pick is None:
            args = [r for r in self.rebinds if type(r) is RebindArg]
            self._kept_pick = (_picker([r.leaf for r in args]), _picker([r.output for r in args]), len(args))
        pick_leaves, pick_results, n = self._kept_pick
        if keep and n == len(self.rebinds):  # every argument kept in place (_kept_in_place, all at once)?
            targets = pick_leaves(leaves)
            lazies = list(map(_LAZY_OF, targets))
            if (
                all(map(operator.is_, map(_BUFFER_OF, lazies), pick_results(results)))
                and all(map(operator.is_, map(_HOST_OF, lazies), repeat(None)))
                and not any(map(_VIEW_REFS, filter(None, map(_CELL_OF, targets))))  # no view, live or dead
                and not any(map(has_started_read, lazies))
            ):
                return
        for r in self.rebinds:
            target = leaves[r.leaf] if type(r) is RebindArg else r.tensor()
            if target is not None and not (keep and type(r) is RebindArg and _kept_in_place(target, results[r.output])):
                rebind(target, outputs(r.output))

    def _run(
        self, buffers: list[DeviceBuffer], ints: tuple[int, ...]
    ) -> tuple[Callable[[int], Lazy], list[DeviceBuffer]]:
        """Run the program; returns output index -> the one realized Lazy that shows it, and the output buffers."""
        assert self.program is not None
        fast, self.fast_bound = self.fast_bound, None
        results = self.program.run(buffers, ints=ints, varying=fast.varying() if fast is not None else None)
        note_run(self.program)
        if self.out_meta is None:
            graph = self.program.graph
            self.out_meta = [(graph[o].shape, graph[o].dtype) for o in graph.outputs]
        meta = self.out_meta
        made: list[Lazy | None] = [None] * len(meta)

        def output(index: int) -> Lazy:
            lz = made[index]
            if lz is None:
                shape, dtype = meta[index]
                lz = made[index] = Lazy(Op.INPUT, (), shape, dtype)
                lz.buffer = results[index]
            return lz

        return output, results

    @staticmethod
    def _value(r: Returned, leaves: list[Any], output: Callable[[int], Lazy]) -> Any:
        if isinstance(r, ProgramOutput):
            lz = output(r.index)
            shown = lz.live_handles()  # one Tensor per output, however often it is returned
            return shown[0] if shown else Tensor(lz)
        if isinstance(r, ArgTensor):
            return leaves[r.leaf]
        if isinstance(r, CapturedTensor):
            return Tensor(r.lazy)
        return r.value


def _forgetter(ref: weakref.ref) -> Callable[[Any], None]:
    """A weakref callback: the _Bound drops the buffers it checked (a Tensor or a value it watched died)."""

    def forget(_: Any) -> None:
        bound = ref()
        if bound is not None:
            bound.captured, bound.dead = [], True  # for good: a new full bind makes a new _Bound

    return forget


def _picker(positions: list[int]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """items -> the items at `positions`, as a tuple (itemgetter, in C; it gives one item bare)."""
    if len(positions) == 1:
        p = positions[0]
        return lambda items: (items[p],)
    if not positions:
        return lambda items: ()
    return operator.itemgetter(*positions)


def _no_outputs(index: int) -> Lazy:
    raise AssertionError(f"a trace without a program has no output {index}")


# --- one trace, step by step -----------------------------------------------------------------


def trace_call(
    name: str, fn: Callable[..., Any], call: Callable[[list[Any]], tuple[tuple, dict]], leaves: list[Any]
) -> tuple[Trace, Any]:
    """Run fn on the call's leaves, compile and run the graph of what it computes; the Trace and fn's result."""
    _prepare_arguments(leaves)
    arg_pos = {id(leaf._lazy): i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)}
    names = NameGuards()
    names.add_function(fn)  # before fn runs: the state it reads is the state it sees
    # each RuntimeInt argument is a variable of its own while traced (python may not read it)
    traced = [RuntimeInt(Var(leaf.value, argument=True)) if isinstance(leaf, RuntimeInt) else leaf for leaf in leaves]
    arg_vars = {id(t.var): i for i, t in enumerate(traced) if isinstance(t, RuntimeInt)}
    call_args, call_kwargs = call(traced)
    with tracing.tracing(name, [leaf._lazy for leaf in leaves if isinstance(leaf, Tensor)]) as scope:
        result = fn(*call_args, **call_kwargs)
    for inner in scope.inlined:
        names.add_function(inner)
    out_pairs: list[tuple[str, Any]] = []
    out_structure = flatten(result, "result", out_pairs)
    out_leaves = [v for _, v in out_pairs]
    rebound = _rebound_tensors(scope, leaves)
    targets = [v._lazy for v in out_leaves if isinstance(v, Tensor) and not v._lazy.is_leaf]
    targets += [t._lazy for t in rebound if not t._lazy.is_leaf]
    states = _state_before_rebinds(scope, rebound, arg_pos)
    _realize_captured(targets, arg_pos, [lz for lz in states if not lz.is_leaf])
    trace = Trace(None, [], [], out_structure, names=names)
    # each distinct guard once (a decoder's layers all slice their caches at the same length: 24 -> 1)
    trace.buckets = list(
        dict.fromkeys(
            BucketGuard(arg_vars[id(t.var)], scale, const, size, b)
            for t in traced
            if isinstance(t, RuntimeInt)
            for scale, const, size, b in t.var.buckets
        )
    )
    out_index: dict[int, int] = {}
    arg_tensors = {id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)}
    written = {arg_tensors[id(t)] for t in rebound if id(t) in arg_tensors}  # argument leaves written into
    if targets:
        with LOCK:
            out_index = _compile_and_run(trace, targets, arg_pos, states, out_leaves, arg_vars, written)
    trace.returned = [_returned(v, out_index, arg_pos, arg_tensors) for v in out_leaves]
    trace.rebinds = [_rebinding(t, out_index, arg_tensors) for t in rebound if id(t._lazy) in out_index]
    return trace, result


def _prepare_arguments(leaves: list[Any]) -> None:
    """Arguments become leaves of the graph: compute the pending ones (together), upload host data."""
    lazies = [leaf._lazy for leaf in leaves if isinstance(leaf, Tensor)]
    realize_lazies(lazies)
    for lz in lazies:
        device_buffer(lz)


def _rebound_tensors(scope: tracing.TraceScope, leaves: list[Any]) -> list[Tensor]:
    """The Tensors still alive that the function made show a new value: arguments and captured ones."""
    out = []
    for r in scope.rebinds.values():
        t = r.tensor()
        if t is not None and t._lazy is not r.before:
            out.append(t)
    return out


def _state_before_rebinds(
    scope: tracing.TraceScope, rebound: list[Tensor], arg_pos: dict[int, int]
) -> dict[Lazy, list[Tensor]]:
    """Captured values the function rebound Tensors away from -> those Tensors (read there at each call)."""
    states: dict[Lazy, list[Tensor]] = {}
    for t in rebound:
        before = scope.rebinds[id(t)].before
        if id(before) not in arg_pos and not scope.depends_on_args(before):
            states.setdefault(before, []).append(t)
    return states


def _realize_captured(targets: list[Lazy], arg_pos: dict[int, int], also: list[Lazy]) -> None:
    """Compute now, once, the pending values a user can see that do not depend on the arguments.

    A replay must not recompute them (a weight times 2 made outside fn is captured). `also`:
    captured values the function rebound a Tensor away from (the state a write starts from).
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
    args, memo = set(arg_pos), {}
    captured = [
        lz for lz in order if lz.live_handles() and id(lz) not in target_ids and not tracing.depends_on(lz, args, memo)
    ]
    if captured or also:
        realize_lazies(captured + also)


def _compile_and_run(
    trace: Trace,
    targets: list[Lazy],
    arg_pos: dict[int, int],
    states: dict[Lazy, list[Tensor]],
    out_leaves: list[Any],
    arg_vars: dict[int, int],
    written: set[int],
) -> dict[int, int]:
    """Compile the graph of `targets`, fill in the trace's program and inputs, run it once.

    Only the arguments at the leaves in `written` (the function writes into them) may be
    donated: the program may overwrite their buffers, and a replay checks before each call
    that nothing else sees their values (_protect_shared_values). Every other input is kept:
    a replay's caller may still hold it. Returns id(Lazy) -> output position.
    """
    built = build_graph(targets)
    donate = {i for i, lz in enumerate(built.inputs) if arg_pos.get(id(lz), -1) in written}
    program = program_for(_donating(built, donate))
    returned = {id(v) for v in out_leaves if isinstance(v, Tensor)}
    for lz in built.inputs:
        if id(lz) in arg_pos:
            trace.inputs.append(ArgTensor(arg_pos[id(lz)]))
            continue
        lz.pinned = True  # captured: never donated to an in-place kernel
        readers = states.get(lz) or [t for t in lz.live_handles() if id(t) not in returned]
        if readers:
            trace.inputs.append(CapturedState(lz.shape, lz.dtype, [weakref.ref(t) for t in readers]))
        else:
            trace.inputs.append(CapturedBuffer(device_buffer(lz)))
    trace.ints = [
        RuntimeSource(arg_vars[id(v)]) if id(v) in arg_vars else RuntimeSource(None, v.value) for v in built.variables
    ]
    overwritten = {program.slots[s].index for s in program.outputs if program.slots[s].kind == "input"}
    trace.donated = [(i, arg_pos[id(built.inputs[i])]) for i in sorted(overwritten & donate)]
    buffers = [device_buffer(lz) for lz in built.inputs]  # arguments as they were when called
    for i, _ in trace.donated:  # the traced call writes into copies: what it traced from may still be seen
        buffers[i] = buffers[i].device.copy_of(buffers[i])
    results = program.run(buffers, ints=built.ints)
    note_run(program)
    for lz, buf in zip(built.outputs, results, strict=True):
        lz.mark_realized(buf)
    trace.program = program
    return {id(lz): i for i, lz in enumerate(built.outputs)}


def _donating(built: BuiltGraph, donate: set[int]) -> Graph:
    """The graph with only the inputs in `donate` (by input index) donatable."""
    nodes = [
        replace(n, arg=InputArg(n.arg.index, n.arg.index in donate)) if n.op is Op.INPUT else n for n in built.graph
    ]
    return built.graph.with_nodes(nodes)


def _protect_shared_values(
    donated: list[tuple[int, int]], leaves: list[Any], buffers: list[DeviceBuffer], repeats: bool | None = None
) -> None:
    """Before a replay: a donated argument whose value something else can see is replaced by a copy.

    The program overwrites a donated argument's buffer; that is safe when the argument Tensor
    alone shows the value (after the run it shows the result: rebound, or its value object kept,
    _kept_in_place), no pending value reads it, it is no cached constant, and no other input of
    this call is the same buffer. `repeats`: whether a donated argument's buffer may be another input's too
    (False only when none is; None: found here, over every input).
    """
    counts: dict[int, int] | None = None  # per buffer, how many inputs it is (only when some buffer repeats)
    ids = list(map(id, buffers)) if repeats is not False else []  # as they are before any copy
    if repeats is None:
        repeats = len(set(ids)) != len(ids)
    for i, leaf in donated:
        t = leaves[leaf]
        lz = t._lazy  # a Lazy is the list of its references (tracer.lazy)
        if not repeats and len(lz) == 1 and lz[0]() is t and not lz.pinned:
            continue  # the common case (a decode step's caches): the argument alone shows its value
        buf = buffers[i]
        alone = not lz.pinned and (
            (len(lz) == 1 and lz[0]() is t) or (lz.live_handles() == [t] and not lz.live_consumers())
        )
        if alone and len(lz) > 1:  # dead references (the traced call's readers) kept it off the quick test
            compact_refs(lz, always=True)
        if alone and repeats:
            if counts is None:
                counts = {}
                for b in ids:
                    counts[b] = counts.get(b, 0) + 1
            alone = counts[id(buf)] == 1
        if not alone:
            buffers[i] = buf.device.copy_of(buf)


def _kept_in_place(t: Tensor, result: DeviceBuffer) -> bool:
    """Whether a donated argument keeps its Lazy after a replay instead of being rebound: the program wrote
    the result into the argument's own buffer, and nothing else holds the old value's identity (no
    views of it, no host copy, no started read; the caller checks that no trace records rebinds). A
    decode step then makes no new Lazy, handle and rebinding per cache per token."""
    lz = t._lazy
    return (
        lz.buffer is result
        and lz.host is None
        and (t._cell is None or not t._cell.views())
        and not has_started_read(lz)
    )


def _returned(v: Any, out_index: dict[int, int], arg_pos: dict[int, int], arg_tensors: dict[int, int]) -> Returned:
    """Where a returned leaf comes from on a replay."""
    if not isinstance(v, Tensor):
        return PythonValue(v)
    if id(v) in arg_tensors:  # an argument Tensor itself (maybe written into: the rebinding comes first)
        return ArgTensor(arg_tensors[id(v)])
    if id(v._lazy) in out_index:
        return ProgramOutput(out_index[id(v._lazy)])
    if id(v._lazy) in arg_pos:
        return ArgTensor(arg_pos[id(v._lazy)])
    v._lazy.pinned = True
    return CapturedTensor(v._lazy)


def _rebinding(t: Tensor, out_index: dict[int, int], arg_tensors: dict[int, int]) -> Rebinding:
    if id(t) in arg_tensors:
        return RebindArg(arg_tensors[id(t)], out_index[id(t._lazy)])
    return RebindCaptured(weakref.ref(t), out_index[id(t._lazy)])


# --- the decorator --------------------------------------------------------------------------


@dataclass
class _Call:
    """One call's arguments, flattened: what tracing and binding need."""

    structure: Hashable
    paths: list[str]
    leaves: list[Any]  # numpy arrays already made tensors
    signature: Hashable


class JitFunction:
    """A function traced once per signature and replayed; see the module docstring."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        try:
            self._signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins have none: arguments are then positional paths
            self._signature = None
        self.traces: OrderedDict[Hashable, Trace] = OrderedDict()
        self._others: dict[Hashable, list[Trace]] = {}  # per signature, its traces for other buckets (runtime_ints)
        # positional tensors and scalars only: their key, straight to (trace, where each leaf comes from)
        self._fast: dict[Hashable, tuple[Trace, list[tuple[bool, Any]]]] = {}
        self._device: Device | None = None  # the device the kept traces' programs run on (None: no program yet)
        self.trace_count = 0  # how many times fn ran to be traced
        self.replay_count = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        scope = tracing.current()
        if scope is not None:  # called while another jitted function is traced: part of that trace
            scope.inlined.append(self.fn)
            return self.fn(*args, **kwargs)
        if self._device is not None and self._device is not device_if_created():
            self.cache_clear()  # compiled for a device tr.reset_device() replaced: trace again
        fast = None if kwargs else fast_key(args)
        hit = self._fast.get(fast) if fast is not None else None
        if hit is not None:  # the replay path: no binding, no flattening
            trace, plan = hit
            done, out = self._replay(trace, [args[v] if from_args else v for from_args, v in plan])
            if done:
                return out
        call = self._flatten_call(args, kwargs)
        trace = self.traces.get(call.signature)
        why = None
        if trace is not None:
            self.traces.move_to_end(call.signature)
            for t in [trace, *self._others.get(call.signature, [])]:  # the buckets traced before, newest first
                done, out = self._replay(t, call.leaves)
                if done:
                    if t is not trace:
                        self._keep(call.signature, t)
                    self._remember(fast, t, args, call.leaves)
                    return out
                why = why or f"retracing: {out}"
        if debug_level() >= 1:
            print(f"[wgjit] jit {self.__name__}: {why or self._why(call)}", file=sys.stderr)
        trace, result = trace_call(
            self.__name__, self.fn, functools.partial(self._call_args, call.structure), call.leaves
        )
        self.trace_count += 1
        self._keep(call.signature, trace)
        self.traces.move_to_end(call.signature)
        if len(self.traces) > MAX_SIGNATURES:
            self._others.pop(self.traces.popitem(last=False)[0], None)
            self._fast.clear()
        self._remember(fast, trace, args, call.leaves)
        return result

    def _keep(self, signature: Hashable, trace: Trace) -> None:
        """`trace` is the signature's trace now; one it replaces for another bucket of a runtime length stays."""
        old = self.traces.get(signature)
        if old is not None and old is not trace and old.buckets:
            others = [t for t in self._others.get(signature, []) if t is not trace]
            self._others[signature] = [old, *others][:MAX_BUCKET_TRACES]
        elif old is None or not trace.buckets:
            self._others.pop(signature, None)
        self.traces[signature] = trace
        if trace.program is not None:
            self._device = trace.program.device

    def _replay(self, trace: Trace, leaves: list[Any]) -> tuple[bool, Any]:
        """(True, the result) after a replay; (False, why) when the trace's guards fail."""
        with LOCK:
            buffers = trace.bind(leaves)
            if isinstance(buffers, str):
                return False, buffers
            self.replay_count += 1
            return True, trace.replay(leaves, buffers)

    def _flatten_call(self, args: tuple, kwargs: dict) -> _Call:
        pairs: list[tuple[str, Any]] = []
        if self._signature is not None:  # by parameter name, defaults filled in: f(x) and f(x, s=default) agree
            bound = self._signature.bind(*args, **kwargs)
            bound.apply_defaults()
            names = tuple(bound.arguments)
            structure = (names, tuple(flatten(v, k, pairs) for k, v in bound.arguments.items()))
        else:
            structure = (None, (flatten(args, "args", pairs), flatten(kwargs, "kwargs", pairs)))
        leaves = [from_data(leaf) if isinstance(leaf, np.ndarray) else leaf for _, leaf in pairs]
        seen: dict[int, int] = {}
        keys = tuple(leaf_key(leaf, seen, path) for (path, _), leaf in zip(pairs, leaves, strict=True))
        return _Call(structure, [path for path, _ in pairs], leaves, (structure, keys))

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
        values = [unflatten(part, leaves, pos) for part in parts]
        if names is None:
            return tuple(values[0]), dict(values[1])
        bound = inspect.BoundArguments(self._signature, OrderedDict(zip(names, values, strict=True)))
        return bound.args, bound.kwargs

    def _why(self, call: _Call) -> str:
        """Why this call traces: first call, or what differs from the closest earlier signature."""
        if not self.traces:
            return "tracing (first call)"
        structure, keys = call.signature
        same_shape = [s for s in reversed(self.traces) if s[0] == structure and len(s[1]) == len(keys)]
        if not same_shape:
            return "retracing: the arguments' structure changed"
        old = min(same_shape, key=lambda s: sum(a != b for a, b in zip(s[1], keys, strict=True)))
        diffs = [
            f"{path}: {describe(a)} -> {describe(b)}"
            for path, a, b in zip(call.paths, old[1], keys, strict=True)
            if a != b
        ]
        return "retracing: " + "; ".join(diffs)

    def cache_clear(self) -> None:
        self.traces.clear()
        self._others.clear()
        self._fast.clear()
        self._device = None


def jit(fn: Callable[..., Any]) -> JitFunction:
    """Trace `fn` once per input signature and replay the compiled program on later calls."""
    return JitFunction(fn)
