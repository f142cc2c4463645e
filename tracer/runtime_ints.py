"""Runtime integers: a position or length bound per call, so one program serves every value.

    pos = tr.dynamic(5)
    cache.index_write(k, (0, 0, pos, 0))        # the offset is read from the kernel's uniform
    keys = cache[:, :, : pos + 1]               # a runtime length (see below)
    row = table[pos]                            # a runtime offset: the view's start is in the uniform

`tr.dynamic(value)` makes a `RuntimeInt`; `+`, `-` and `*` with ints keep it one (the
difference of two of one variable is an int again: `x[p : p + 1]` has length 1). Where
it selects a position (index_write offsets, slice starts, integer indices) the program
reads its value from the uniform, and the program cache key (and `@tr.jit`'s signature)
holds only that the value is a runtime one. index_write's plain int offsets into a tensor
that owns its values are runtime values by themselves.

A slice whose length is a runtime value (`cache[:, :, : pos + 1]`) is a tensor whose
length along that axis is known only at run time: its shape shows the RuntimeInt there,
its storage is the slice to a bucket length (the next power of two, at least
MIN_BUCKET, at most the axis), and `scaled_dot_product_attention` attends over its true
length (the attention kernels read it from the uniform). So a decode loop compiles one
program per bucket, not per token. Other ops refuse such a tensor (ShapeError naming the
op): what they would compute depends on a shape nobody knows when compiling.

Values must stay in range (0 <= position, position + size <= the axis): bad values raise
IndexOutOfRangeError at the call that uses them, or when a jitted function is called with
them. Reading the value as a python int (`int(p)`, `range(p)`, `if p > 3`) is fine in lazy
code, where each value runs as written; inside a `@tr.jit` trace it raises JitError for a
RuntimeInt argument, since a replay could not repeat what python did with it.
"""

from __future__ import annotations

import operator
from typing import Any

from ir.errors import IndexOutOfRangeError, JitError, ShapeError
from ir.symbolic import Sym
from tracer import tracing

MIN_BUCKET = 16  # the shortest bucket of a runtime length


class Var:
    """One runtime variable: its value for this call, and whether it is a jitted function's argument."""

    __slots__ = ("value", "argument", "buckets", "__weakref__")

    def __init__(self, value: int, argument: bool = False) -> None:
        self.value = value
        self.argument = argument  # a @tr.jit argument being traced: python may not read its value
        # (length's scale, const, axis size, bucket) chosen while traced: plain ints, not the RuntimeInt,
        # which points back here (a cycle per traced call that only a full collection would free)
        self.buckets: list[tuple[int, int, int, int]] = []


class RuntimeInt:
    """`scale * v + const` of a runtime variable v (see the module docstring)."""

    __slots__ = ("var", "scale", "const")

    def __init__(self, var: Var, scale: int = 1, const: int = 0) -> None:
        self.var, self.scale, self.const = var, scale, const

    @property
    def value(self) -> int:
        """The value for this call; JitError inside a trace for a jitted function's argument."""
        if self.var.argument and tracing.current() is not None:
            raise JitError(
                "a tr.dynamic argument was read as a python int while @tr.jit traced the function; a replay "
                "cannot repeat what python did with it. Use it as a position or length (index_write offsets, "
                "slices, indices), or pass a plain int to trace each value apart"
            )
        return self.scale * self.var.value + self.const

    def in_range(self, lo: int, hi: int) -> bool:
        """This call's value lies in [lo, hi] (what sym() checks, without a message or a Sym to build)."""
        return lo <= self.scale * self.var.value + self.const <= hi

    def sym(self, lo: int, hi: int, what: str) -> Sym:
        """This value in a node's arg, allowed to range over [lo, hi] (checked now)."""
        v = self.scale * self.var.value + self.const
        if not lo <= v <= hi:
            raise IndexOutOfRangeError(f"{what}: {v} is outside {lo}..{hi} (a runtime position or length)")
        return Sym(self.var, self.scale, self.const, lo, hi, what)

    # --- affine arithmetic with ints --------------------------------------------------------
    def __add__(self, other: Any) -> RuntimeInt | int:
        if isinstance(other, RuntimeInt):
            if other.var is not self.var:
                raise ShapeError("tr.dynamic: two different runtime integers cannot be added; use one variable")
            scale = self.scale + other.scale
            return self.const + other.const if scale == 0 else RuntimeInt(self.var, scale, self.const + other.const)
        try:
            k = operator.index(other)
        except TypeError:
            return NotImplemented
        return RuntimeInt(self.var, self.scale, self.const + k)

    __radd__ = __add__

    def __neg__(self) -> RuntimeInt:
        return RuntimeInt(self.var, -self.scale, -self.const)

    def __sub__(self, other: Any) -> RuntimeInt | int:
        if isinstance(other, RuntimeInt):
            return self + (-other)
        try:
            return self + (-operator.index(other))
        except TypeError:
            return NotImplemented

    def __rsub__(self, other: Any) -> RuntimeInt | int:
        return (-self) + other

    def __mul__(self, other: Any) -> RuntimeInt | int:
        try:
            k = operator.index(other)
        except TypeError:
            return NotImplemented
        return 0 if k == 0 else RuntimeInt(self.var, self.scale * k, self.const * k)

    __rmul__ = __mul__

    # --- as a python int (lazy code; refused inside a trace for a jitted function's argument) ----
    def __index__(self) -> int:
        return self.value

    __int__ = __index__

    def __mod__(self, other: Any) -> int:
        return self.value % operator.index(other)

    def __rmod__(self, other: Any) -> int:
        return operator.index(other) % self.value

    def __floordiv__(self, other: Any) -> int:
        return self.value // operator.index(other)

    def __rfloordiv__(self, other: Any) -> int:
        return operator.index(other) // self.value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RuntimeInt):
            return (self.var, self.scale, self.const) == (other.var, other.scale, other.const)
        if isinstance(other, int):
            return self.value == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((id(self.var), self.scale, self.const))

    def __lt__(self, other: Any) -> bool:
        return self.value < operator.index(other)

    def __le__(self, other: Any) -> bool:
        return self.value <= operator.index(other)

    def __gt__(self, other: Any) -> bool:
        return self.value > operator.index(other)

    def __ge__(self, other: Any) -> bool:
        return self.value >= operator.index(other)

    def __repr__(self) -> str:
        return f"dynamic({self.scale * self.var.value + self.const})"


def dynamic(value: int) -> RuntimeInt:
    """A runtime integer holding `value`: programs that use it as a position or length take any value.

    See tracer.runtime_ints. Positions and lengths are never negative.
    """
    if isinstance(value, RuntimeInt):
        return value
    try:
        v = operator.index(value)
    except TypeError:
        raise ShapeError(f"tr.dynamic: {value!r} ({type(value).__name__}) is not an int") from None
    if isinstance(value, bool):
        raise ShapeError("tr.dynamic: a bool is not a position or length")
    return RuntimeInt(Var(v))


def bucket(length: RuntimeInt, size: int) -> int:
    """The static length a runtime length is stored at: a power of two >= it, >= MIN_BUCKET, <= size.

    Remembered on the variable, so a jitted function can tell when a new value needs another trace.
    """
    b = bucket_of(length.scale * length.var.value + length.const, size)
    length.var.buckets.append((length.scale, length.const, size, b))
    return b


def bucket_of(n: int, size: int) -> int:
    """bucket() for a plain value (what a replay compares against the traced bucket)."""
    return min(size, max(MIN_BUCKET, 1 << max(n - 1, 0).bit_length()))
