"""`tensor[...]`: ints, slices (with steps), None and Ellipsis, all as zero-copy views.

`resolve_index` turns such a basic index into the view it selects (shape arithmetic only);
the Tensor builds the SLICE and RESHAPE nodes from it. `is_advanced` tells an index with
integer or bool arrays (numpy's advanced indexing, tracer.advanced) from a basic one.
Numpy integer scalars (what np.argmax returns) are ints.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError
from ir.symbolic import Sym
from tracer.runtime_ints import RuntimeInt, bucket


class IndexView(NamedTuple):
    """What `x[index]` selects: a SLICE (None: the whole of x), then a reshape to `shape`.

    A NamedTuple, not a frozen dataclass: one is made for every `x[...]` traced, and a frozen
    dataclass's __init__ sets each field through object.__setattr__.
    """

    slices: tuple[tuple[int, int, int], ...] | None  # (start, stop, step) per axis of x
    sliced_shape: tuple[int, ...]
    shape: tuple[int, ...]  # with the int axes dropped and the None axes added
    # a slice whose length is a runtime integer: (axis of `shape`, the length, its largest value);
    # the slice then reaches the length's bucket (tracer.runtime_ints) and shape holds the bucket
    runtime_length: tuple[int, RuntimeInt, int] | None = None
    runtime: bool = False  # some slice start is a runtime integer (ir.symbolic.Sym)


def is_array_index(it: Any) -> bool:
    """An item of an index that numpy treats as an array: lists, arrays (not 0-d ints) and tensors."""
    cls = type(it)
    if cls is slice or cls is int or it is None or it is Ellipsis:  # the common items, without hasattr's miss
        return False
    if isinstance(it, list | tuple):
        return True
    if isinstance(it, np.ndarray):
        return it.ndim > 0 or it.dtype == np.bool_
    return hasattr(it, "_lazy")  # a Tensor (checked by attribute: this module does not import tensors)


def is_advanced(index: Any) -> bool:
    """Does `x[index]` use numpy's advanced indexing (integer or bool arrays, lists, tensors)?"""
    if not isinstance(index, tuple):
        return is_array_index(index)
    for it in index:  # a loop, not any() over a generator: every `x[...]` asks
        if is_array_index(it):
            return True
    return False


def resolve_index(shape: tuple[int, ...], index: Any) -> IndexView:
    """The view `x[index]` selects from an x of this shape; bad indices raise naming the shape."""
    ndim = len(shape)
    items = index if isinstance(index, tuple) else (index,)
    n_ellipsis = n_real = 0  # counted in the loop that checks the items' types (every `x[...]` runs it)
    for it in items:
        if it is None:
            continue
        if it is Ellipsis:
            n_ellipsis += 1
            continue
        n_real += 1
        if type(it) is slice or type(it) is int:  # the common items: valid
            continue
        if is_array_index(it):
            raise DTypeError(f"index: array index {type(it).__name__} in a basic index (shape {shape})")
        if isinstance(it, float | bool | np.bool_ | np.floating):
            raise DTypeError(
                f"index: {it!r} ({type(it).__name__}) is not a valid index for shape {shape}; "
                "use ints, slices, None, ..., or integer/bool arrays"
            )
    if n_ellipsis > 1:
        raise ShapeError(f"index: more than one Ellipsis in {index!r} (shape {shape}); use ... at most once")
    if n_real > ndim:
        raise IndexOutOfRangeError(
            f"index: too many indices ({n_real}) for shape {shape}; a {ndim}-d tensor takes at most {ndim}"
        )
    if n_ellipsis == 0:
        items = items + (Ellipsis,)
    pos = items.index(Ellipsis)
    items = items[:pos] + (slice(None),) * (ndim - n_real) + items[pos + 1 :]

    spec: list[tuple[Any, Any, int]] = []
    sliced: list[int] = []  # the length of each spec entry
    out_shape: list[int] = []
    axis = 0
    needs_slice = False
    runtime = False
    runtime_length = None
    for it in items:
        if it is None:
            out_shape.append(1)
            continue
        dim = shape[axis]
        is_slice = type(it) is slice
        if (
            isinstance(it.start, RuntimeInt) or isinstance(it.stop, RuntimeInt)
            if is_slice
            else isinstance(it, RuntimeInt)
        ):
            start, stop, length = _runtime_slice(it, axis, dim, shape)
            spec.append((start, stop, 1))
            if isinstance(start, Sym):
                runtime = True
                sliced.append(stop - start)
            else:
                sliced.append(len(range(start, stop)))
            if isinstance(length, RuntimeInt):
                if runtime_length is not None:
                    raise ShapeError(f"index: {index!r} has runtime lengths on two axes (shape {shape}); one at most")
                runtime_length = (len(out_shape), length, dim - start)
            if is_slice:
                out_shape.append(stop - start if isinstance(length, RuntimeInt) else length)
            needs_slice = True
        elif is_slice:
            try:
                start, stop, step = it.indices(dim)
            except (ValueError, TypeError) as e:  # step 0, or float bounds
                raise ShapeError(f"index: bad slice {it!r} for axis {axis} of shape {shape}: {e}") from None
            spec.append((start, stop, step))
            n = len(range(start, stop, step))
            sliced.append(n)
            out_shape.append(n)
            if not needs_slice and (start != 0 or stop != dim or step != 1):
                needs_slice = True
        else:
            try:
                i = operator.index(it)
            except TypeError:
                raise DTypeError(f"index: {it!r} is not a valid index for shape {shape}") from None
            if not -dim <= i < dim:
                raise IndexOutOfRangeError(
                    f"index: {i} is out of range for axis {axis} with size {dim} (shape {shape}); "
                    f"valid indices are {-dim}..{dim - 1}"
                )
            i %= dim
            spec.append((i, i + 1, 1))
            sliced.append(1)
            needs_slice = True
        axis += 1
    return IndexView(tuple(spec) if needs_slice else None, tuple(sliced), tuple(out_shape), runtime_length, runtime)


def _runtime_slice(it: Any, axis: int, dim: int, shape: tuple[int, ...]) -> tuple[Any, Any, int | RuntimeInt]:
    """(start, stop, length) of an index item holding a runtime integer (tracer.runtime_ints).

    A runtime start of a fixed length becomes a Sym (the view's offset is read at run time);
    a runtime length from a fixed start becomes the static slice to its bucket.
    """
    if not isinstance(it, slice):  # x[p]: one element at a runtime position
        what = f"index of axis {axis} (shape {shape})"
        return it.sym(0, dim - 1, what), it.sym(0, dim - 1, what) + 1, 1
    if it.step not in (None, 1):
        raise ShapeError(f"index: a slice with a runtime bound takes step 1, got {it!r} (shape {shape})")
    start = 0 if it.start is None else it.start
    stop = dim if it.stop is None else it.stop
    for bound in (start, stop):
        if not isinstance(bound, RuntimeInt) and operator.index(bound) < 0:
            raise ShapeError(
                f"index: {it!r}: a slice with a runtime bound counts from the start (no negative bounds; shape {shape})"
            )
    length = stop - start
    if isinstance(length, RuntimeInt):
        if isinstance(start, RuntimeInt):
            raise ShapeError(
                f"index: {it!r} has a runtime start and a runtime length (shape {shape}); one of them must be an int"
            )
        if not length.in_range(0, dim - start):  # the message is built only to raise it
            length.sym(0, dim - start, f"slice length of axis {axis} (shape {shape})")
        return start, start + bucket(length, dim - start), length
    n = operator.index(length)
    if not 0 <= n <= dim:
        raise IndexOutOfRangeError(f"index: {it!r} selects {n} elements of axis {axis} with size {dim} (shape {shape})")
    lo = start.sym(0, dim - n, f"slice start of axis {axis} (shape {shape})")
    return lo, lo + n, n
