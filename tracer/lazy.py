"""The trace-time record behind every Tensor: an op applied to sources, not yet run.

A Lazy becomes realized when a program computes it: it then holds a device buffer and
forgets its sources, so the graph above it can be freed and is never recomputed.

Who can still see a value decides what a realization keeps (graph_builder): the Tensors
that show it and the pending Lazies that read it. Both are kept in one list of weak
references (a reader's is a `ReaderRef`), appended to when a Tensor or a consumer is made
and filtered when read (a dead reference, a Tensor rebound to another value, or a consumer
realized since, no longer counts). Tracing pays one weak reference per node and one list
append per operand, not a WeakSet per node.

That list is the Lazy itself (Lazy subclasses list; `for r in lz` walks its references):
every object a trace keeps alive until its realization counts towards the garbage
collector's next collection (one per 700 objects made, a full walk of the process every
hundred), and a separate list was one of the four such objects per traced op (the Lazy,
the list, the reader's ReaderRef, the Tensor's weak reference); list.append stays atomic
for threads that trace at once. A Lazy keeps object identity for ==, hashing, truth
and repr, not the list's.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Container
from typing import Any

import numpy as np

from ir.dtypes import DType
from ir.ops import Op


def _append(refs: list[weakref.ref], ref: weakref.ref) -> None:
    """Append; at 64, 128, 256... entries drop the dead references if that halves the list (amortized O(1))."""
    refs.append(ref)
    n = len(refs)
    if n >= 64 and n & (n - 1) == 0:
        compact_refs(refs)


def compact_refs(refs: list[weakref.ref], always: bool = False) -> None:
    """Drop the dead references if that halves the list (callers do so at 64, 128, 256... entries), or
    whenever there are any (`always`)."""
    kept = [r for r in refs if r() is not None]
    if len(kept) <= len(refs) // 2 or (always and len(kept) < len(refs)):
        refs[:] = kept


class ReaderRef(weakref.ref):
    """A weak reference to a pending Lazy that reads the value holding it (the Lazy's other references are to Tensors)."""

    __slots__ = ()


class Lazy(list):
    """An op on its sources (see the module docstring); its items are the weak references to what sees it."""

    __slots__ = (
        "op",
        "srcs",
        "shape",
        "dtype",
        "arg",
        "buffer",
        "host",
        "pinned",
        "dyn",
        "ragged",
        "__weakref__",
    )

    def __init__(self, op: Op, srcs: tuple[Lazy, ...], shape: tuple[int, ...], dtype: DType, arg: Any = None) -> None:
        self.op = op
        self.srcs = srcs
        self.shape = shape
        self.dtype = dtype
        self.arg = arg
        self.buffer: Any = None  # backend_wgpu.DeviceBuffer once realized
        self.host: np.ndarray | None = None  # data waiting to be uploaded
        self.pinned = False  # never donated to an in-place kernel (cached constants)
        self.dyn = False  # arg holds runtime integers (ir.symbolic.Sym of tracer.runtime_ints variables)
        self.ragged = False  # a runtime-length slice (tracer.tensor.RuntimeLengthTensor): only attention reads it
        if srcs:
            me = ReaderRef(self)
            for s in srcs:  # _append, inlined: this runs for every operand of every op
                s.append(me)
                n = len(s)
                if n >= 64 and n & (n - 1) == 0:
                    compact_refs(s)

    # object identity, not the list's contents: a Lazy is one value (`lz in srcs`, dict keys, `if lz`)
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__
    __repr__ = object.__repr__

    def __bool__(self) -> bool:
        return True

    @staticmethod
    def from_host(data: np.ndarray, dtype: DType) -> Lazy:
        lz = Lazy(Op.INPUT, (), tuple(data.shape), dtype)
        lz.host = data
        return lz

    @property
    def is_leaf(self) -> bool:
        """Realized or waiting for upload: enters a graph as an INPUT (the only Lazies whose op is INPUT)."""
        return self.op is Op.INPUT

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def handles(self) -> list[weakref.ref]:
        """The references to Tensors made to show this value (some dead or rebound since)."""
        return [r for r in list(self) if type(r) is not ReaderRef]

    @property
    def consumers(self) -> list[weakref.ref]:
        """The references to Lazies made to read this value (some dead or realized since)."""
        return [r for r in list(self) if type(r) is ReaderRef]

    def add_handle(self, tensor: Any) -> None:
        """`tensor` shows this value from now on (until it is rebound: Tensor._lazy is checked when read)."""
        _append(self, weakref.ref(tensor))

    def live_handles(self) -> list[Any]:
        """The Tensors that show this value now."""
        # list(): one snapshot (C call, kept whole by the GIL) while other threads may trace and append
        return [t for r in list(self) if type(r) is not ReaderRef and (t := r()) is not None and t._lazy is self]

    def seen_outside(self, members: Container[Lazy]) -> bool:
        """A Tensor shows this value, or a pending Lazy not in `members` reads it."""
        # iterating a list that another thread appends to is safe (it may or may not see the new entry)
        for r in self:
            o = r()
            if o is None:
                continue
            if type(r) is ReaderRef:
                if o not in members and self in o.srcs:
                    return True
            elif o._lazy is self:
                return True
        return False

    def live_consumers(self) -> list[Lazy]:
        """The pending Lazies that read this value now."""
        return [c for r in list(self) if type(r) is ReaderRef and (c := r()) is not None and self in c.srcs]

    def mark_realized(self, buffer: Any) -> None:
        self.buffer = buffer
        self.op = Op.INPUT
        self.arg = None
        self.dyn = False
        self.host = None
        self.srcs = ()  # no longer a consumer of them: live_consumers() checks srcs
