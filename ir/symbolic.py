"""Integers known only when a program runs: positions and lengths bound per call.

A `Sym` is `scale * v + const` where v is one runtime value of the program (its `slot`),
with the bounds [lo, hi] the expression's value must stay in (the op that made it derived
them from static shapes, so a program never reads or writes outside a buffer). Node args
hold Syms where a position or length is a runtime value: an index_write's offsets, a slice's
start (a VIEW's offset after passes.fold_views), an attention's key length. Two graphs that
differ only in those values have the same structure, hence one compiled program.

Kernels write such a value into their uniform like any other field (`Kernel.metadata`); the
Program records where it went and writes the value of each run there (backend_wgpu.program).
Affine arithmetic with ints (and the difference of two Syms of one slot) stays exact, `//` too
when it divides; `%`
is exact when the modulus divides `scale` and is 1 (reads "not a multiple") otherwise, which
is what the alignment checks of vectorization need; anything else (`int()`, comparisons)
raises TypeError instead of guessing a value.

In the tracer, `slot` is the tracer's variable object; tracer.graph_builder numbers the
variables of a graph in order of first appearance (`with_slots`), so structures compare
equal whatever the values are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ir.errors import IndexOutOfRangeError


@dataclass(frozen=True)
class Sym:
    slot: Any  # an int in a graph; the tracer's variable object in a Lazy's arg
    scale: int = 1
    const: int = 0
    lo: int = 0  # the value's bounds, both included
    hi: int = 0
    what: str = field(default="", compare=False)  # the op and axis, for the out-of-range message

    def value(self, ints: Sequence[int]) -> int:
        """The value for the program's runtime values `ints` (by slot)."""
        return self.scale * ints[self.slot] + self.const

    def check(self, ints: Sequence[int]) -> int:
        """value(ints), or IndexOutOfRangeError naming the op when it is outside [lo, hi]."""
        v = self.value(ints)
        if not self.lo <= v <= self.hi:
            raise IndexOutOfRangeError(
                f"{self.what or 'runtime integer'}: {v} is outside {self.lo}..{self.hi} (a runtime position or length)"
            )
        return v

    # --- affine arithmetic --------------------------------------------------------------
    def __add__(self, other: Any) -> Sym | int:
        if isinstance(other, Sym):
            if other.slot != self.slot:
                return NotImplemented
            scale = self.scale + other.scale
            if scale == 0:
                return self.const + other.const
            return Sym(self.slot, scale, self.const + other.const, self.lo + other.lo, self.hi + other.hi, self.what)
        if isinstance(other, int):
            return Sym(self.slot, self.scale, self.const + other, self.lo + other, self.hi + other, self.what)
        return NotImplemented

    __radd__ = __add__

    def __neg__(self) -> Sym:
        return Sym(self.slot, -self.scale, -self.const, -self.hi, -self.lo, self.what)

    def __sub__(self, other: Any) -> Sym | int:
        if isinstance(other, Sym | int):
            return self + (-other)
        return NotImplemented

    def __rsub__(self, other: Any) -> Sym | int:
        return (-self) + other

    def __mul__(self, other: Any) -> Sym | int:
        if not isinstance(other, int):
            return NotImplemented
        if other == 0:
            return 0
        lo, hi = sorted((self.lo * other, self.hi * other))
        return Sym(self.slot, self.scale * other, self.const * other, lo, hi, self.what)

    __rmul__ = __mul__

    def __mod__(self, k: Any) -> int:
        if not isinstance(k, int):
            return NotImplemented
        return self.const % k if self.scale % k == 0 else 1

    def __floordiv__(self, k: Any) -> Sym:
        """Exact division only (an offset in elements to one in vectors whose width divides it)."""
        if not isinstance(k, int) or k <= 0 or self.scale % k or self.const % k:
            raise TypeError(f"{self} // {k} is not exact")
        return Sym(self.slot, self.scale // k, self.const // k, self.lo // k, self.hi // k, self.what)

    def __int__(self) -> int:
        raise TypeError(f"{self} is known only when the program runs; it has no value at compile time")

    def __repr__(self) -> str:
        lead = f"{self.scale}*" if self.scale != 1 else ""
        tail = f"{self.const:+d}" if self.const else ""
        return f"${lead}v{self.slot if isinstance(self.slot, int) else '?'}{tail}[{self.lo}..{self.hi}]"


def is_sym(x: Any) -> bool:
    return isinstance(x, Sym)


def upper(x: int | Sym) -> int:
    """The largest value x can take."""
    return x.hi if isinstance(x, Sym) else x


def lower(x: int | Sym) -> int:
    """The smallest value x can take."""
    return x.lo if isinstance(x, Sym) else x


_ATOMS = (int, float, str, bool, type(None))  # never hold a Sym: returned as they are, without a call per item
_FIELDS: dict[type, tuple[str, ...] | None] = {}  # per type: a dataclass's field names, None for other types


def _fields_of(cls: type) -> tuple[str, ...] | None:
    names = _FIELDS.get(cls, ())
    if names == ():
        names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
        _FIELDS[cls] = names
    return names


def map_syms(value: Any, fn: Callable[[Sym], Any]) -> Any:
    """`value` with every Sym inside it (tuples, lists, frozen dataclasses) replaced by fn(sym)."""
    cls = type(value)
    if cls in _ATOMS:
        return value
    if cls is Sym:
        return fn(value)
    if isinstance(value, tuple | list):
        items = [v if type(v) in _ATOMS else map_syms(v, fn) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, Sym):  # a subclass
        return fn(value)
    names = _fields_of(cls)
    if names:
        changes = {}
        for name in names:
            old = getattr(value, name)
            new = map_syms(old, fn)
            if new is not old:
                changes[name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value


def syms_in(value: Any) -> list[Sym]:
    """Every Sym inside `value`, in order."""
    found: list[Sym] = []

    def keep(s: Sym) -> Sym:
        found.append(s)
        return s

    map_syms(value, keep)
    return found


def bind(value: Any, ints: Sequence[int]) -> Any:
    """`value` with every Sym replaced by its checked value for these runtime values."""
    return map_syms(value, lambda s: s.check(ints))
