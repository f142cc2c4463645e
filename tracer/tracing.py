"""The `@tr.jit` trace in progress on this thread, as the rest of the tracer sees it.

While a jitted function runs to be traced, the values computed from its tensor
arguments are symbolic for every later call: a replay runs only the compiled program.
So, inside a trace:

- reading such a value on the host (`numpy()`, `item()`, `float()`, `bool()`, `tolist()`,
  `np.asarray()`) raises JitError: a replay could not repeat the read, nor whatever the
  function decided from it;
- realizing such a value (`realize()`) is left to the program: it computes it anyway;
- rebinding a Tensor (`index_write`) is recorded, so that the replay repeats it.

Values that do not depend on the arguments (weights, constants) are read and realized
as usual.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ir.errors import JitError
from ir.symbolic import syms_in
from tracer.lazy import Lazy


@dataclass
class Rebind:
    """A Tensor that the traced function made show another value (index_write)."""

    tensor: weakref.ref  # the Tensor
    before: Lazy  # what it showed when it was first rebound in this trace


@dataclass
class TraceScope:
    name: str  # the jitted function's name, for messages
    args: set[int]  # id() of the argument Lazies
    rebinds: dict[int, Rebind] = field(default_factory=dict)  # by id(Tensor)
    inlined: list[Any] = field(default_factory=list)  # jitted functions called (and inlined) by the traced one
    _memo: dict[int, bool] = field(default_factory=dict)

    def depends_on_args(self, lz: Lazy) -> bool:
        """Does `lz` read any argument? (memoized: Lazies built in a trace keep their sources)"""
        return depends_on(lz, self.args, self._memo)


def depends_on(lz: Lazy, args: set[int], memo: dict[int, bool]) -> bool:
    """Does `lz` read any of the Lazies whose id() is in `args`, or a RuntimeInt argument? Iterative; `memo`
    caches answers by id()."""
    stack = [lz]
    while stack:
        cur = stack[-1]
        if id(cur) in memo:
            stack.pop()
            continue
        if id(cur) in args or cur.is_leaf:
            memo[id(cur)] = id(cur) in args
            stack.pop()
            continue
        if cur.dyn and any(getattr(s.slot, "argument", False) for s in syms_in(cur.arg)):
            memo[id(cur)] = True  # a position or length given as an argument (tracer.runtime_ints)
            stack.pop()
            continue
        todo = [s for s in cur.srcs if id(s) not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[id(cur)] = any(memo[id(s)] for s in cur.srcs)
        stack.pop()
    return memo[id(lz)]


_LOCAL = threading.local()


def current() -> TraceScope | None:
    """The trace running on this thread, if any."""
    return getattr(_LOCAL, "scope", None)


@contextmanager
def tracing(name: str, arg_lazies: list[Lazy]) -> Iterator[TraceScope]:
    """Mark this thread as tracing the function `name` whose arguments are these Lazies."""
    if current() is not None:
        raise JitError(f"jit {name}: a trace is already running on this thread")  # callers inline instead
    scope = TraceScope(name, {id(lz) for lz in arg_lazies})
    _LOCAL.scope = scope
    try:
        yield scope
    finally:
        _LOCAL.scope = None


def check_host_read(lz: Lazy) -> None:
    """Raise JitError when a trace is running and `lz` is computed from its arguments."""
    scope = current()
    if scope is not None and scope.depends_on_args(lz):
        raise JitError(
            f"jit {scope.name}: the function reads a tensor computed from its arguments (shape {lz.shape}, "
            f"{lz.dtype.value}) on the host (numpy(), item(), float(), bool(), tolist()...) while it is traced. "
            "A replay runs only the compiled program and cannot repeat that read or what the function decided "
            "from it; return the tensor and read it after the call, or call the function without @tr.jit"
        )


def to_compute_now(lazies: list[Lazy]) -> list[Lazy]:
    """Of the Lazies asked to be realized, those to compute now: inside a trace, not the argument-dependent ones."""
    scope = current()
    if scope is None:
        return lazies
    return [lz for lz in lazies if lz.is_leaf or not scope.depends_on_args(lz)]


def note_rebind(tensor: Any, before: Lazy) -> None:
    """Record that `tensor` stops showing `before` (the first time in this trace)."""
    scope = current()
    if scope is not None and id(tensor) not in scope.rebinds:
        scope.rebinds[id(tensor)] = Rebind(weakref.ref(tensor), before)
