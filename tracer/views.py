"""Which Tensors are views of which, as numpy decides it, and where a view's elements live.

A Tensor made by basic indexing, `reshape`, `permute`/`transpose`/`T`, `squeeze`/`unsqueeze`
or `expand` from another is a view of the same root (the tensor that owns the values):
`ViewInfo` holds the root's `RootCell`, the `ir.view.View` that places the view's elements in
the root's row-major order, and the movement steps that compute the view from the root's
value. A reshape that no strides express makes a copy instead, exactly when numpy's does.

Writing through a view (tracer.mutation) writes into the root, and every live view of a
root is derived again from the root's new value; all of this only builds Lazies.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import numpy as np

from ir.ops import Op
from ir.symbolic import Sym
from ir.view import View, contiguous_strides
from tracer.lazy import Lazy

Step = tuple[Op, tuple[int, ...], Any]  # a movement op: (op, result shape, arg)
# looked up once: an Enum member read from its class costs ~70 ns, and every traced view asks
_RESHAPE, _SLICE, _PERMUTE, _EXPAND = Op.RESHAPE, Op.SLICE, Op.PERMUTE, Op.EXPAND


class RootCell:
    """What the views of one root share: the root's current value and the live views.

    The root Tensor points at its cell, and so does every view; the cell holds the root's
    Lazy, not the root Tensor, so a root nobody holds any more is no user-visible value
    (realization fuses it freely), while its views stay linked, as numpy's views keep their
    base's memory alive.
    """

    __slots__ = ("lazy", "owner", "refs", "shape")

    def __init__(self, owner: Any) -> None:
        self.lazy: Lazy = owner._lazy
        self.shape: tuple[int, ...] = self.lazy.shape  # the root's shape: writes never change it
        self.owner = weakref.ref(owner)  # the root Tensor, while it lives
        self.refs: list[weakref.ref] = []  # the views, while they live

    def add(self, view: Any) -> None:
        if len(self.refs) >= 32 and len(self.refs) % 32 == 0:
            self.refs = [r for r in self.refs if r() is not None]
        self.refs.append(weakref.ref(view))

    def views(self) -> list[Any]:
        out = [t for r in self.refs if (t := r()) is not None]
        if len(out) != len(self.refs):
            self.refs = [weakref.ref(t) for t in out]
        return out


class ViewInfo:
    """Where a view's elements are in its root, and how its value is derived from the root's.

    A view is its parent's view (None: the root's) with one movement step applied. Its
    `ir.view.View` is computed when first asked (writes through views ask; tracing a slice,
    permute or expand, which always make a view, does not), and its steps are read along
    the parents. A plain class with slots, never changed but for that cache: one is made
    for every traced view.
    """

    __slots__ = ("cell", "parent", "step", "readonly", "_view")

    def __init__(
        self, cell: RootCell, parent: ViewInfo | None, step: Step | None, readonly: bool, view: View | None = None
    ) -> None:
        self.cell = cell  # the root's value and its other views
        self.parent = parent  # the view this one applies `step` to (None: the root)
        self.step = step  # the movement op that makes this view from the parent's (None: the root itself)
        self.readonly = readonly  # made through expand: elements alias each other, numpy refuses writes
        self._view = view

    @property
    def view(self) -> View:
        """The view's elements as a strided view of the root's row-major elements."""
        if self._view is None:
            chain: list[ViewInfo] = []
            info: ViewInfo | None = self
            while info is not None and info._view is None:  # iterative: chains of views can be long
                chain.append(info)
                info = info.parent
            view = info._view if info is not None else contiguous_view(self.cell.shape)
            for link in reversed(chain):
                assert link.step is not None and view is not None
                op, shape, arg = link.step
                view = (
                    view.slice(arg) if op is Op.SLICE else view.permute(arg) if op is Op.PERMUTE else view.expand(shape)
                )
                link._view = view
        return self._view

    @property
    def steps(self) -> tuple[Step, ...]:
        """Movement ops that make the view's value from the root's."""
        out = []
        info: ViewInfo | None = self
        while info is not None:
            if info.step is not None:
                out.append(info.step)
            info = info.parent
        return tuple(reversed(out))


def child_view(parent: ViewInfo | None, cell: RootCell, op: Op, shape: tuple[int, ...], arg: Any) -> ViewInfo | None:
    """The ViewInfo of `op` applied to a view `parent` of the cell's root (None: to the root), or None for a copy."""
    step = (op, shape, arg)
    if op is _RESHAPE:
        if parent is None:  # of the root: always a view, contiguous
            return ViewInfo(cell, None, step, False, contiguous_view(shape))
        view = parent.view.reshape(shape)
        if view is None:  # a reshape that strides cannot express: numpy copies, so the result is not a view
            return None
        return ViewInfo(cell, parent, step, parent.readonly, view)
    if op is _SLICE or op is _PERMUTE or op is _EXPAND:  # always a view: its View when asked
        return ViewInfo(cell, parent, step, op is _EXPAND or (parent is not None and parent.readonly))
    raise AssertionError(f"not a movement op: {op}")


@functools.lru_cache(maxsize=1024)
def contiguous_view(shape: tuple[int, ...]) -> View:
    """View.contiguous(shape), made once per shape (a View never changes)."""
    return View.contiguous(shape)


def same_view(parent: ViewInfo | None, cell: RootCell) -> ViewInfo:
    """A new view object showing exactly what its parent shows (numpy's `x.reshape(x.shape)`)."""
    if parent is not None:
        return parent
    return ViewInfo(cell, None, None, False, contiguous_view(cell.shape))


def derive(root_lazy: Lazy, steps: tuple[Step, ...]) -> Lazy:
    """The view's value from the root's value: the movement steps applied to it."""
    lz = root_lazy
    for op, shape, arg in steps:
        lz = Lazy(op, (lz,), shape, lz.dtype, arg)
        lz.dyn = op is Op.SLICE and any(isinstance(a[0], Sym) for a in arg)  # a runtime start
    return lz


def as_box(view: View, root_shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """A view that is a box of the root, possibly with its axes permuted, else None.

    Returns (offsets, box shape, order): the view's non-unit axes, taken in `order`, run along
    increasing root axes, so `value.reshape(non-unit dims).permute(order).reshape(box shape)`
    is the box's content (an INDEX_WRITE at `offsets`).
    """
    if view.size == 0:
        return None
    strides = contiguous_strides(root_shape)
    offsets = [int(i) for i in np.unravel_index(view.offset, root_shape)] if root_shape else []
    box = [1] * len(root_shape)
    taken: list[tuple[int, int]] = []  # (root axis, index among the view's non-unit axes)
    for d, s in zip(view.shape, view.strides):
        if d == 1:
            continue
        axes = [a for a in range(len(root_shape)) if root_shape[a] > 1 and strides[a] == s and box[a] == 1]
        if not axes or offsets[axes[0]] + d > root_shape[axes[0]]:
            return None
        box[axes[0]] = d
        taken.append((axes[0], len(taken)))
    order = tuple(i for _, i in sorted(taken))
    return tuple(offsets), tuple(box), order


def positions(view: View) -> np.ndarray:
    """The root's flat index of every element of the view (int64, the view's shape)."""
    out = np.full(view.shape, view.offset, dtype=np.int64)
    n = len(view.shape)
    for k, (d, s) in enumerate(zip(view.shape, view.strides)):
        out += (np.arange(d, dtype=np.int64) * s).reshape([d if j == k else 1 for j in range(n)])
    return out


def coordinates(shape: tuple[int, ...], index: Any) -> np.ndarray:
    """The flat (row-major) index of every element `x[index]` selects from an x of this shape.

    numpy itself applies the index (every rule of basic and advanced indexing), to one
    zero-copy grid per axis, so the host work is the size of the selection, not of x.
    """
    if not shape:
        return np.asarray(np.zeros((), np.int64)[index])
    strides = contiguous_strides(shape)
    flat: np.ndarray | int = 0
    for k, d in enumerate(shape):
        axis = np.arange(d, dtype=np.int64).reshape([d if j == k else 1 for j in range(len(shape))])
        flat = flat + np.broadcast_to(axis, shape)[index] * strides[k]
    return np.asarray(flat, dtype=np.int64)
