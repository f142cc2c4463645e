"""`tensor[...]`: ints, slices (with steps), None and Ellipsis, all as zero-copy views."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError
from ir.ops import Op

if TYPE_CHECKING:
    from tracer.tensor import Tensor


def getitem(x: Tensor, index: Any) -> Tensor:
    from tracer.tensor import Tensor, make

    items = index if isinstance(index, tuple) else (index,)
    for it in items:
        if isinstance(it, Tensor) or hasattr(it, "__array__") and not isinstance(it, int):
            raise DTypeError(
                f"index: tensor/array indices are not supported by [] (shape {x.shape}); use tr.gather or index_select"
            )
        if isinstance(it, float | bool):
            raise DTypeError(f"index: {it!r} is not a valid index for shape {x.shape}; use ints, slices, None or ...")
    n_ellipsis = sum(it is Ellipsis for it in items)
    if n_ellipsis > 1:
        raise ShapeError(f"index: more than one Ellipsis in {index!r} (shape {x.shape}); use ... at most once")
    n_real = sum(it is not None and it is not Ellipsis for it in items)
    if n_real > x.ndim:
        raise IndexOutOfRangeError(
            f"index: too many indices ({n_real}) for shape {x.shape}; a {x.ndim}-d tensor takes at most {x.ndim}"
        )
    if n_ellipsis == 0:
        items = items + (Ellipsis,)
    pos = items.index(Ellipsis)
    items = items[:pos] + (slice(None),) * (x.ndim - n_real) + items[pos + 1 :]

    spec: list[tuple[int, int, int]] = []
    out_shape: list[int] = []
    axis = 0
    needs_slice = False
    for it in items:
        if it is None:
            out_shape.append(1)
            continue
        dim = x.shape[axis]
        if isinstance(it, slice):
            try:
                start, stop, step = it.indices(dim)
            except (ValueError, TypeError) as e:  # step 0, or float bounds
                raise ShapeError(f"index: bad slice {it!r} for axis {axis} of shape {x.shape}: {e}") from None
            spec.append((start, stop, step))
            n = len(range(start, stop, step))
            out_shape.append(n)
            needs_slice |= (start, stop, step) != (0, dim, 1)
        else:
            try:
                i = operator.index(it)
            except TypeError:
                raise DTypeError(f"index: {it!r} is not a valid index for shape {x.shape}") from None
            if not -dim <= i < dim:
                raise IndexOutOfRangeError(
                    f"index: {i} is out of range for axis {axis} with size {dim} (shape {x.shape}); "
                    f"valid indices are {-dim}..{dim - 1}"
                )
            i %= dim
            spec.append((i, i + 1, 1))
            needs_slice = True
        axis += 1
    y = x
    if needs_slice:
        sliced = tuple(len(range(*s)) for s in spec)
        y = make(Op.SLICE, (x,), sliced, x.dtype, tuple(spec))
    return y.reshape(tuple(out_shape))
