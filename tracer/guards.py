"""Cheap checks, made on every call of a jitted function, that what its trace captured still holds.

A replay does not run the function: what the function read besides its arguments was
captured when it was traced. Two kinds of captured state are checked before each replay,
each check an identity test (a few hundred nanoseconds):

- names: every global the function's code reads, and every variable it closes over
  (those of the jitted functions it calls, too), still names the same object. Rebinding
  one (`scale = 0.7`, `count += 1`, `W = new_tensor`) fails the check, and the function
  is traced again.
- tensors: each captured tensor is read through the Tensors that showed it when traced,
  at every call. A write into it (`index_write`) is seen by the next replay; when none of
  those Tensors is alive, or they show different values now, the check fails.

What these checks cannot see: changes inside objects (a list's items, a dict entry that
held a python number, an attribute set to another python number), random numbers drawn
inside the function, and the globals of plain helper functions it calls. Such values
are frozen at trace time; pass them as arguments, or call `f.cache_clear()`.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracer.lazy import Lazy

_MISSING = object()


@dataclass
class NameGuards:
    """The objects the function's globals and closure variables named when it was traced."""

    globals_: list[tuple[dict[str, Any], str, Any]] = field(default_factory=list)
    cells: list[tuple[str, Any, Any]] = field(default_factory=list)  # (name, cell, object)

    def add_function(self, fn: Callable[..., Any]) -> None:
        """Guard what `fn`'s code reads by name (nested functions and comprehensions included)."""
        fn = getattr(fn, "__func__", fn)  # a bound method: its function
        code = getattr(fn, "__code__", None)
        if code is None:  # a builtin or a callable object: nothing to read
            return
        g = fn.__globals__
        seen = {(id(d), n) for d, n, _ in self.globals_}
        for name in _names_read(code):
            if name in g and (id(g), name) not in seen:
                self.globals_.append((g, name, g[name]))
                seen.add((id(g), name))
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            if not any(c is cell for _, c, _ in self.cells):
                self.cells.append((name, cell, _cell_value(cell)))

    def failure(self) -> str | None:
        """Why the guards no longer hold (None: they hold)."""
        for g, name, obj in self.globals_:
            if g.get(name, _MISSING) is not obj:
                return f"the global {name!r} names another object than when traced"
        for name, cell, obj in self.cells:
            if _cell_value(cell) is not obj:
                return f"the closure variable {name!r} names another object than when traced"
        return None


def _names_read(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # not assigned yet
        return _MISSING


@dataclass
class CapturedState:
    """A captured tensor, read at each call through the Tensors that showed it when traced."""

    shape: tuple[int, ...]
    dtype: Any
    tensors: list[weakref.ref]

    def current(self) -> Lazy | None:
        """The value those Tensors show now; None when none is alive or they disagree, or it changed type."""
        found: Lazy | None = None
        for ref in self.tensors:
            t = ref()
            if t is None:
                continue
            lz = t._lazy
            if found is None:
                found = lz
            elif lz is not found:
                return None
        if found is None or found.shape != self.shape or found.dtype is not self.dtype:
            return None
        return found
