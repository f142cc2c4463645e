"""numpy's advanced indexing for reads: `x[[0, 2]]`, `x[idx_tensor]`, `x[:, idx]`, `x[mask]`.

The result is a copy (as in numpy), computed lazily by one gather: the basic part of the index
(slices, None) is applied first as a view, the indexed axes are moved to the front and merged
into one, and their broadcast integer indices are merged into one linear index. Where the
indexed axes stand next to each other the result's index axes take their place, otherwise
they come first (numpy's rule).

Integer indices known on the host are checked against their axis (IndexOutOfRangeError);
integer tensors on the GPU wrap negative values and are clamped into the axis as `gather`
does. A bool mask selects a data-dependent number of elements, so a mask tensor on the GPU
is read back first (a host read: inside @tr.jit it raises JitError); a numpy mask is not.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ir.dtypes import DType
from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError
from tracer.indexing import is_advanced, is_array_index
from tracer.nn import index_select
from tracer.tensor import Tensor, from_data, where

Index = int | np.ndarray | Tensor


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index] for an index holding integer or bool arrays, lists or tensors (a copy)."""
    items = _masks_to_ids(x.shape, _expand(x.shape, _items(index)))
    advanced = [k for k, it in enumerate(items) if _is_index(it)]
    basic = tuple(slice(None) if k in advanced else it for k, it in enumerate(items))
    y = x[basic]  # every item leaves one axis of y (None adds one, an indexed axis stays whole)
    dims = [y.shape[k] for k in advanced]
    x_axis = [sum(it is not None for it in items[:k]) for k in advanced]  # None items add axes to y, not to x
    ids = [_checked(items[k], d, a, x.shape) for k, d, a in zip(advanced, dims, x_axis)]
    try:
        out_shape = np.broadcast_shapes(*(i.shape if isinstance(i, Tensor) else np.shape(i) for i in ids))
    except ValueError:
        shown = [i.shape if isinstance(i, Tensor) else np.shape(i) for i in ids]
        raise ShapeError(f"index: index arrays of shapes {shown} do not broadcast (tensor shape {x.shape})") from None
    linear = _linear(ids, dims, x.shape)
    others = [k for k in range(y.ndim) if k not in advanced]
    merged = y.permute(advanced + others).reshape((math.prod(dims),) + tuple(y.shape[k] for k in others))
    out = index_select(merged, linear, 0).reshape(tuple(out_shape) + merged.shape[1:])
    if advanced == list(range(advanced[0], advanced[-1] + 1)) and advanced[0] > 0:
        nb, before = len(out_shape), advanced[0]  # adjacent: the index axes stand where the indexed ones stood
        order = list(range(nb, nb + before)) + list(range(nb)) + list(range(nb + before, out.ndim))
        out = out.permute(order)
    return out.copy()


def _items(index: Any) -> list[Any]:
    """The index's items with lists made arrays, numpy scalars made ints and bool masks made integer arrays."""
    out: list[Any] = []
    for it in index if isinstance(index, tuple) else (index,):
        if isinstance(it, list | tuple):
            it = np.asarray(it)
            if it.size == 0:
                it = it.astype(np.int64)
        if isinstance(it, np.ndarray) and it.ndim == 0 and it.dtype.kind in "iu":
            it = int(it)
        if isinstance(it, np.integer):
            it = int(it)
        if isinstance(it, Tensor) and it.dtype is DType.bool:
            it = it.numpy()  # a mask on the GPU: its count decides the shape, so it is read back
        if isinstance(it, np.ndarray) and it.dtype == np.bool_:
            if it.ndim == 0:
                raise DTypeError("index: a 0-d bool index adds an axis in numpy; reshape or use where() instead")
            out.append(_Mask(it))
            continue
        if isinstance(it, np.ndarray) and it.dtype.kind not in "iu":
            raise DTypeError(f"index: a {it.dtype} array is not an index; use integer or bool arrays")
        if isinstance(it, Tensor) and it.dtype.is_float:
            raise DTypeError(
                f"index: a {it.dtype.value} tensor of shape {it.shape} is not an index; use an integer or bool tensor"
            )
        if isinstance(it, bool | float | np.bool_ | np.floating):
            raise DTypeError(f"index: {it!r} is not a valid index; use ints, slices, None, ..., or integer/bool arrays")
        out.append(it)
    return out


class _Mask:
    """A bool mask in an index: it covers as many axes as it has."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask


def _masks_to_ids(shape: tuple[int, ...], items: list[Any]) -> list[Any]:
    """Each mask checked against the axes it covers and made one integer array per axis (np.nonzero)."""
    out: list[Any] = []
    axis = 0
    for it in items:
        if isinstance(it, _Mask):
            covered = shape[axis : axis + it.mask.ndim]
            if it.mask.shape != covered:
                raise IndexOutOfRangeError(
                    f"index: boolean mask of shape {it.mask.shape} does not match axes {axis}.."
                    f"{axis + it.mask.ndim - 1} of shape {shape} (sizes {covered})"
                )
            out.extend(np.nonzero(it.mask))
            axis += it.mask.ndim
            continue
        out.append(it)
        axis += it is not None
    return out


def _expand(shape: tuple[int, ...], items: list[Any]) -> list[Any]:
    """Items with the Ellipsis (or the missing trailing axes) made whole slices."""
    n_real = sum(it.mask.ndim if isinstance(it, _Mask) else it is not None and it is not Ellipsis for it in items)
    if n_real > len(shape):
        raise IndexOutOfRangeError(
            f"index: too many indices ({n_real}) for shape {shape}; a {len(shape)}-d tensor takes at most {len(shape)}"
        )
    if sum(it is Ellipsis for it in items) > 1:
        raise ShapeError(f"index: more than one Ellipsis (shape {shape}); use ... at most once")
    fill = [slice(None)] * (len(shape) - n_real)
    if Ellipsis in [it for it in items if not _is_index(it)]:
        pos = next(k for k, it in enumerate(items) if it is Ellipsis)
        return items[:pos] + fill + items[pos + 1 :]
    return items + fill


def _is_index(it: Any) -> bool:
    """An item that takes part in the advanced index: arrays, tensors, and ints next to them."""
    return is_array_index(it) or isinstance(it, _Mask) or (isinstance(it, int) and not isinstance(it, bool))


def _checked(it: Index, dim: int, k: int, shape: tuple[int, ...]) -> np.ndarray | Tensor:
    """One axis's indices in [0, dim): host values checked and wrapped, tensor values wrapped on the GPU."""
    if isinstance(it, Tensor):
        if it.dtype is DType.int32:
            it = where(it < 0, it + dim, it)
        if dim == 0 and it.size:
            raise IndexOutOfRangeError(f"index: axis {k} has size 0 (shape {shape}); nothing can be indexed")
        return it
    arr = np.asarray(it, dtype=np.int64)
    if arr.size:
        bad = arr[(arr < -dim) | (arr >= dim)]
        if bad.size:
            raise IndexOutOfRangeError(
                f"index: {int(bad.flat[0])} is out of range for axis {k} with size {dim} (shape {shape}); "
                f"valid indices are {-dim}..{dim - 1}"
            )
    return np.where(arr < 0, arr + dim, arr)


def _linear(ids: list[np.ndarray | Tensor], dims: list[int], shape: tuple[int, ...]) -> Tensor | np.ndarray:
    """One linear index into the indexed axes merged (row-major), broadcast over the index shapes."""
    if math.prod(dims) >= 2**31:
        raise IndexOutOfRangeError(f"index: the indexed axes {dims} of shape {shape} hold 2**31 elements or more")
    strides = [math.prod(dims[j + 1 :]) for j in range(len(dims))]
    if not any(isinstance(i, Tensor) for i in ids):
        return np.asarray(sum(i * s for i, s in zip(ids, strides)), dtype=np.int32)
    total: Tensor | None = None
    for i, s in zip(ids, strides):
        t = i if isinstance(i, Tensor) else from_data(np.asarray(i, dtype=np.int32))
        t = t.astype(DType.int32, copy=False)
        term = t * s if s != 1 else t
        total = term if total is None else total + term
    assert total is not None
    return total


def _getitem_method(self: Tensor, index: Any) -> Tensor:
    """numpy indexing: ints, slices, None and ... give a view; integer and bool arrays a copy (tracer.advanced)."""
    return getitem(self, index) if is_advanced(index) else _basic_getitem(self, index)


_basic_getitem = Tensor.__getitem__
Tensor.__getitem__ = _getitem_method  # type: ignore[method-assign]
