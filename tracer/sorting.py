"""Sorting on the GPU: argsort, sort and topk, as numpy's (and torch's topk).

Every sort is stable: equal elements keep their index order, as numpy's kind="stable" (the
other kinds leave ties in an unspecified order, which this is one of). Ascending puts NaN last,
as numpy; descending (topk's largest) puts it first, as torch: NaN is the largest value, and
-0.0 equals +0.0 (ir/optable/sorting.py defines the order). One ARGSORT node along the last
axis does the work (the axis is moved there as a view); values are x gathered at the indices.

`x.sort()` sorts x in place, as numpy's ndarray.sort (it returns None); `tr.sort(x)` returns a
sorted copy. `x.argsort()` and `x.topk(k)` return new tensors.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ir import shapes
from ir.dtypes import DType
from ir.errors import ShapeError
from ir.ops import Op, SortArg
from tracer.factories import zeros
from tracer.nn import gather
from tracer.tensor import Tensor, add_methods, as_tensor, make

KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")


class TopK(NamedTuple):
    """topk's result, as torch.topk's: the k values and their indices along the axis."""

    values: Tensor
    indices: Tensor


def _check(op: str, x: Tensor, kind: Any, order: Any) -> None:
    if order is not None:
        raise ShapeError(f"{op}: order= sorts numpy's structured arrays, which wgjit has no dtype for")
    if kind not in KINDS:
        raise ValueError(f"{op}: kind must be one of {KINDS}, got {kind!r} (wgjit's sort is always stable)")
    if x.dtype.is_quantized:
        raise ShapeError(f"{op}: x is a {x.dtype.value} tensor of shape {x.shape}; .astype(tr.float32) it first")


def _argsort_last(x: Tensor, descending: bool) -> Tensor:
    """The stable argsort of x along its last axis (int32)."""
    if x.size == 0:
        return zeros(x.shape, DType.int32)
    return make(Op.ARGSORT, (x,), x.shape, DType.int32, SortArg(bool(descending)))


def argsort(
    x: Any, axis: int | None = -1, kind: str | None = None, order: Any = None, *, stable: bool | None = None,
    descending: bool = False,
) -> Tensor:  # fmt: skip
    """The indices that sort x along `axis` (of the flattened x when None), as np.argsort(kind="stable");
    `descending` (the Array API's and torch's) puts the largest first, NaN before them, ties in index order."""
    x = as_tensor(x, "argsort")
    _check("argsort", x, kind, order)
    if axis is None or x.ndim == 0:  # numpy's argsort of a 0-d array is [0], as of its flattening
        x, axis = x.reshape(-1), 0
    a = shapes.normalize_axis("argsort", axis, x.ndim, x.shape)
    return _argsort_last(x.swapaxes(a, -1), descending).swapaxes(a, -1)


def sort(
    x: Any, axis: int | None = -1, kind: str | None = None, order: Any = None, *, stable: bool | None = None,
    descending: bool = False,
) -> Tensor:  # fmt: skip
    """A sorted copy of x along `axis` (of the flattened x when None), as np.sort: NaN last
    (first when `descending`), -0.0 and +0.0 in their index order."""
    x = as_tensor(x, "sort")
    _check("sort", x, kind, order)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if x.ndim == 0:
        raise ShapeError(f"sort: x is 0-d (shape ()), it has no axis {axis}; sort(x, axis=None) flattens it")
    a = shapes.normalize_axis("sort", axis, x.ndim, x.shape)
    moved = x.swapaxes(a, -1)
    if moved.size == 0:
        return x.copy()
    return gather(moved, _argsort_last(moved, descending), -1).swapaxes(a, -1)


def topk(x: Any, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> TopK:  # noqa: A002
    """The k largest (or smallest) elements along `axis` and their indices, as torch.topk: in
    order, largest first (smallest first when not `largest`), ties by lower index, NaN the
    largest value. `sorted=False` gives them sorted too."""
    x = as_tensor(x, "topk")
    _check("topk", x, None, None)
    if x.ndim == 0:
        x = x.reshape(1)
    a = shapes.normalize_axis("topk", axis, x.ndim, x.shape)
    n = x.shape[a]
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ShapeError(f"topk: k must be an int in [0, {n}] (the size of axis {axis} of shape {x.shape}), got {k!r}")
    moved = x.swapaxes(a, -1)
    ids = _argsort_last(moved, largest)[..., :k]
    values = gather(moved, ids, -1) if ids.size else zeros(ids.shape, x.dtype)
    return TopK(values.swapaxes(a, -1), ids.swapaxes(a, -1))


def _sort_in_place(
    self: Tensor, axis: int = -1, kind: str | None = None, order: Any = None, *, stable: bool | None = None,
    descending: bool = False,
) -> None:  # fmt: skip
    """x.sort(axis=-1): sorts x in place along `axis`, as numpy's ndarray.sort (returns None;
    tr.sort(x) returns a sorted copy)."""
    if axis is None:
        raise ShapeError(f"sort: x.sort() sorts in place along one axis (x has shape {self.shape}); "
                         "tr.sort(x, axis=None) returns the sorted flattening")  # fmt: skip
    self[...] = sort(self, axis, kind, order, stable=stable, descending=descending)


_sort_in_place.__name__, _sort_in_place.__qualname__ = "sort", "Tensor.sort"
add_methods(_sort_in_place, argsort, topk)
