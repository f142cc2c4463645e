"""numpy's shape functions built from movement ops, slices and concat: moveaxis, flip, roll,
tile, repeat, split, array_split, chunk, concatenate (functions, and Tensor methods where
numpy's ndarray or torch's Tensor has them with the same meaning)."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ir import shapes
from ir.errors import ShapeError
from tracer.nn import index_select
from tracer.tensor import Tensor, add_methods, as_tensor, concat, from_data

Axes = int | Sequence[int]


def _axes(op: str, axis: Axes | None, x: Tensor) -> tuple[int, ...]:
    return shapes.normalize_axes(op, axis, x.shape)


def transpose(x: Any, axes: Sequence[int] | None = None) -> Tensor:
    """np.transpose(x, axes): the axes reversed, or in the order given (see Tensor.transpose)."""
    x = as_tensor(x, "transpose")
    return x.transpose() if axes is None else x.transpose(tuple(axes))


def swapaxes(x: Any, axis0: int, axis1: int) -> Tensor:
    """x with two axes exchanged, as np.swapaxes."""
    return as_tensor(x, "swapaxes").swapaxes(axis0, axis1)


def moveaxis(x: Any, source: Axes, destination: Axes) -> Tensor:
    """x with the axes `source` moved to the positions `destination`, the others in their order, as np.moveaxis."""
    x = as_tensor(x, "moveaxis")
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: source {source} and destination {destination} must name as many axes")
    src = tuple(shapes.normalize_axis("moveaxis", a, x.ndim, x.shape) for a in src)
    dst = tuple(shapes.normalize_axis("moveaxis", a, x.ndim, x.shape) for a in dst)
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: repeated axis in source {source} or destination {destination}")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x.permute(order)


def flip(x: Any, axis: Axes | None = None) -> Tensor:
    """x in reverse order along `axis` (all axes when None), as np.flip."""
    x = as_tensor(x, "flip")
    axes = _axes("flip", axis, x)
    return x[tuple(slice(None, None, -1) if a in axes else slice(None) for a in range(x.ndim))] if axes else x


def roll(x: Any, shift: int | Sequence[int], axis: Axes | None = None) -> Tensor:
    """x shifted by `shift` places along `axis`, elements leaving one end entering at the other, as
    np.roll (axis None: over the flattened tensor, shape kept)."""
    x = as_tensor(x, "roll")
    if axis is None:
        return roll(x.reshape(-1), shift, 0).reshape(x.shape)
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ShapeError(f"roll: {len(shifts)} shifts {shift} for {len(axes)} axes {axis}; give one per axis")
    for s, a in zip(shifts, axes):
        a = shapes.normalize_axis("roll", a, x.ndim, x.shape)
        n = x.shape[a]
        s = operator.index(s) % n if n else 0
        if s:
            head = tuple(slice(n - s, None) if i == a else slice(None) for i in range(x.ndim))
            tail = tuple(slice(None, n - s) if i == a else slice(None) for i in range(x.ndim))
            x = concat([x[head], x[tail]], a)
    return x


def tile(x: Any, reps: int | Sequence[int]) -> Tensor:
    """x repeated `reps` times along each axis, as np.tile (reps and x's dims padded with leading 1s)."""
    x = as_tensor(x, "tile")
    reps = (reps,) if isinstance(reps, int) else tuple(operator.index(r) for r in reps)
    if any(r < 0 for r in reps):
        raise ShapeError(f"tile: reps must be >= 0, got {reps}")
    nd = max(x.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + reps
    x = x.reshape((1,) * (nd - x.ndim) + x.shape)
    spread = x.reshape(tuple(d for dim in x.shape for d in (1, dim)))  # a 1 before every dim
    big = spread.expand(tuple(d for r, dim in zip(reps, x.shape) for d in (r, dim)))
    return big.reshape(tuple(r * dim for r, dim in zip(reps, x.shape)))


def repeat(x: Any, repeats: int | Sequence[int] | Tensor, axis: int | None = None) -> Tensor:
    """Each element repeated `repeats` times along `axis` (of the flattened x when None), as
    np.repeat; per-element counts are read on the host (a Tensor of them is realized)."""
    x = as_tensor(x, "repeat")
    if axis is None:
        x, axis = x.reshape(-1), 0
    a = shapes.normalize_axis("repeat", axis, x.ndim, x.shape)
    counts = np.asarray(repeats.numpy() if isinstance(repeats, Tensor) else repeats)
    counts = counts.astype(np.int64) if counts.size == 0 else counts  # np.asarray(()) is float
    if counts.dtype.kind not in "iu" or np.any(counts < 0):
        raise ShapeError(f"repeat: repeats must be non-negative ints, got {repeats!r}")
    n = x.shape[a]
    if counts.ndim == 0 or counts.size == 1:
        r = int(counts.reshape(-1)[0])
        wide = x.unsqueeze(a + 1)
        wide = wide.expand(wide.shape[: a + 1] + (r,) + wide.shape[a + 2 :])
        return wide.reshape(x.shape[:a] + (n * r,) + x.shape[a + 1 :])
    if counts.shape != (n,):
        raise ShapeError(f"repeat: {counts.size} counts for axis {axis} of length {n} (shape {x.shape})")
    ids = from_data(np.repeat(np.arange(n, dtype=np.int32), counts))
    return index_select(x, ids, a)


def array_split(x: Any, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """x cut along `axis` into that many nearly equal parts (the first ones one longer), or at
    those indices, as np.array_split."""
    x = as_tensor(x, "array_split")
    a = shapes.normalize_axis("array_split", axis, x.ndim, x.shape)
    n = x.shape[a]
    if isinstance(indices_or_sections, int):
        parts = indices_or_sections
        if parts <= 0:
            raise ShapeError(f"array_split: the number of sections must be > 0, got {parts}")
        size, extra = divmod(n, parts)
        bounds = [0]
        for i in range(parts):
            bounds.append(bounds[-1] + size + (1 if i < extra else 0))
    else:
        bounds = [0, *(operator.index(i) for i in indices_or_sections), n]
    index = [slice(None)] * x.ndim
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        index[a] = slice(lo, hi)
        out.append(x[tuple(index)])
    return out


def split(x: Any, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """x cut along `axis` into equal parts or at those indices, as np.split (unequal parts are an error)."""
    x = as_tensor(x, "split")
    if isinstance(indices_or_sections, int):
        a = shapes.normalize_axis("split", axis, x.ndim, x.shape)
        if indices_or_sections <= 0 or x.shape[a] % indices_or_sections:
            raise ShapeError(
                f"split: axis {axis} of shape {x.shape} does not split into {indices_or_sections} equal parts; "
                "use tr.array_split for unequal ones"
            )
    return array_split(x, indices_or_sections, axis)


def chunk(x: Any, chunks: int, axis: int = 0) -> list[Tensor]:
    """x cut along `axis` into at most `chunks` parts of ceil(n / chunks), as torch.chunk."""
    x = as_tensor(x, "chunk")
    if not isinstance(chunks, int) or chunks <= 0:
        raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
    a = shapes.normalize_axis("chunk", axis, x.ndim, x.shape)
    size = max(1, math.ceil(x.shape[a] / chunks))
    return array_split(x, list(range(size, x.shape[a], size)), a)


def concatenate(tensors: Sequence[Any], axis: int | None = 0) -> Tensor:
    """The tensors joined along `axis` (flattened first when None), as np.concatenate."""
    if axis is None:
        return concat([as_tensor(t, "concatenate").reshape(-1) for t in tensors], 0)
    return concat(tensors, axis)


add_methods(moveaxis, flip, roll, tile, repeat, chunk)
