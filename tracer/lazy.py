"""The trace-time record behind every Tensor: an op applied to sources, not yet run.

A Lazy becomes realized when a program computes it: it then holds a device buffer and
forgets its sources, so the graph above it can be freed and is never recomputed.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from ir.dtypes import DType
from ir.ops import Op


def alive(refs: weakref.WeakSet) -> list[Any]:
    """The live members of a WeakSet, read from one snapshot of its references.

    Tracing takes no lock, so another thread may add a consumer or a handle to a shared
    value (a weight both use) while a realization walks it; iterating the WeakSet itself
    would then fail with "set changed size during iteration". list() of the underlying
    set is one C call, which the GIL keeps whole.
    """
    return [x for r in list(refs.data) if (x := r()) is not None]


class Lazy:
    __slots__ = (
        "op",
        "srcs",
        "shape",
        "dtype",
        "arg",
        "buffer",
        "host",
        "handles",
        "consumers",
        "pinned",
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
        self.handles: weakref.WeakSet = weakref.WeakSet()  # user Tensors that show this value
        self.consumers: weakref.WeakSet = weakref.WeakSet()  # pending Lazies that read it
        self.pinned = False  # never donated to an in-place kernel (cached constants)
        for s in srcs:
            s.consumers.add(self)

    @staticmethod
    def from_host(data: np.ndarray, dtype: DType) -> Lazy:
        lz = Lazy(Op.INPUT, (), tuple(data.shape), dtype)
        lz.host = data
        return lz

    @property
    def is_leaf(self) -> bool:
        """Realized or waiting for upload: enters a graph as an INPUT."""
        return self.buffer is not None or self.host is not None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def live_handles(self) -> list[Any]:
        """The user Tensors that show this value (see `alive`)."""
        return alive(self.handles)

    def live_consumers(self) -> list[Lazy]:
        """The pending Lazies that read this value (see `alive`)."""
        return alive(self.consumers)

    def mark_realized(self, buffer: Any) -> None:
        self.buffer = buffer
        self.op = Op.INPUT
        self.arg = None
        self.host = None
        for s in self.srcs:
            s.consumers.discard(self)
        self.srcs = ()
