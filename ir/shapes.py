"""Shape inference rules, each raising ShapeError that names the op and the shapes."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

from ir.errors import ShapeError

Shape = tuple[int, ...]


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    if len(shapes) == 2:
        a, b = shapes
        if a == b:  # the common case, traced for most ops
            return tuple(a)
        out = _broadcast_pair(a, b)
        if out is not None:
            return out  # else a mismatch: the full rule below raises naming it
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            listed = ", ".join(str(tuple(s)) for s in shapes)
            raise ShapeError(
                f"{op}: shapes {listed} do not broadcast (axis {i - ndim}: sizes {sorted(dims)}); "
                "sizes must match or be 1 from the right: reshape or unsqueeze an operand"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _broadcast_pair(a: Shape, b: Shape) -> Shape | None:
    """Two shapes broadcast in one pass without sets (the shorter taking leading 1s), or None when they do not."""
    if len(a) != len(b):
        a, b = (1,) * (len(b) - len(a)) + tuple(a), (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def _as_int(axis: object) -> int | None:
    """An int, or anything numpy takes as one (np.int64 from np.argmax...); None for the rest and bools."""
    if isinstance(axis, bool) or type(axis).__name__ == "bool_":
        return None
    try:
        return operator.index(axis)  # type: ignore[arg-type]
    except TypeError:
        return None


def normalize_axis(op: str, axis: int, ndim: int, shape: Shape | None = None) -> int:
    index = _as_int(axis)
    if index is None:
        where = f" (shape {shape})" if shape is not None else ""
        raise ShapeError(f"{op}: axis must be an int, got {axis!r}{where}")
    axis = index
    # a 0-d tensor takes axis 0 or -1 (as torch does); the old single range test refused -1
    if (ndim == 0 and axis not in (0, -1)) or (ndim > 0 and not -ndim <= axis < ndim):
        where = f" for shape {shape}" if shape is not None else ""
        valid = "0 or -1" if ndim == 0 else f"{-ndim}..{ndim - 1}"
        raise ShapeError(f"{op}: axis {axis} is out of range{where} (ndim {ndim}); valid axes are {valid}")
    return axis % ndim if ndim else 0


def normalize_axes(op: str, axis: int | Sequence[int] | None, shape: Shape) -> tuple[int, ...]:
    ndim = len(shape)
    if type(axis) is int and -ndim <= axis < ndim:  # one axis in range (x.sum(-1)): what the rule below gives
        return (axis % ndim,)
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, tuple | list) and _as_int(axis) is None:
        raise ShapeError(f"{op}: axis must be None, an int or a tuple of ints, got {axis!r} (shape {shape})")
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    out = tuple(normalize_axis(op, a, ndim, shape) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r} for shape {shape}; name each axis once")
    return tuple(sorted(out))


def resolve_reshape(op: str, old: Shape, new: Sequence[int]) -> Shape:
    if type(new) is tuple:  # sizes given in full (the common case); loops, not all() over a generator
        for d in new:
            if type(d) is not int or d < 0:
                break
        else:
            if math.prod(new) == math.prod(old):
                return new
    new = tuple(int(d) for d in new)
    if sum(d == -1 for d in new) > 1:
        raise ShapeError(f"{op}: only one -1 allowed in {new} (reshaping {old}); give the other sizes")
    if any(d < -1 for d in new):
        raise ShapeError(f"{op}: negative size in {new} (reshaping {old}); sizes are >= 0, or -1 for one inferred size")
    size = math.prod(old)
    if -1 in new:
        known = math.prod(d for d in new if d != -1)
        if known == 0 or size % known:
            raise ShapeError(
                f"{op}: cannot reshape {old} ({size} elements) to {new}: no size for -1 fits; the product of sizes must be {size}"
            )
        new = tuple(size // known if d == -1 else d for d in new)
    if math.prod(new) != size:
        raise ShapeError(
            f"{op}: cannot reshape {old} ({size} elements) to {new} ({math.prod(new)} elements); "
            f"the product of sizes must stay {size}"
        )
    return new


def check_permutation(op: str, order: Sequence[int], shape: Shape) -> tuple[int, ...]:
    ndim = len(shape)
    if len(order) == ndim:  # already normalized (the common case); a loop, not all() over a generator
        for a in order:
            if type(a) is not int:
                break
        else:
            if sorted(order) == list(range(ndim)):
                return tuple(order)
    norm = tuple(normalize_axis(op, a, ndim, shape) for a in order)
    if sorted(norm) != list(range(ndim)):
        raise ShapeError(
            f"{op}: {tuple(order)} is not a permutation of the axes of shape {shape}; name each of the {ndim} axes once"
        )
    return norm


def check_expand(op: str, old: Shape, new: Sequence[int]) -> Shape:
    new = tuple(int(d) for d in new)
    if len(new) < len(old):
        raise ShapeError(f"{op}: cannot expand {old} to fewer dims {new}; expand adds leading dims, never drops any")
    lead = len(new) - len(old)
    out = list(new[:lead])
    if any(d < 0 for d in out):
        raise ShapeError(
            f"{op}: -1 is only allowed for existing dims, got {new} (expanding {old}); give new dims a size"
        )
    for o, n in zip(old, new[lead:]):
        n = o if n == -1 else n
        if o != n and o != 1:
            raise ShapeError(
                f"{op}: cannot expand {old} to {new}: size {o} is not 1 and differs from {n}; only size-1 dims expand"
            )
        out.append(n)
    return tuple(out)


def matmul_shapes(a: Shape, b: Shape) -> tuple[Shape, Shape, Shape]:
    """Broadcast batch dims of (..., M, K) @ (..., K, N); both already at least 2-D."""
    if a[-1] != b[-2]:
        raise ShapeError(
            f"matmul: {a} @ {b}: inner dimensions {a[-1]} and {b[-2]} differ; the last dim of the left operand "
            "must equal the second-to-last of the right (transpose one?)"
        )
    try:
        batch = broadcast_shapes("matmul", a[:-2], b[:-2])
    except ShapeError:
        raise ShapeError(
            f"matmul: {a} @ {b}: batch dims {a[:-2]} and {b[:-2]} do not broadcast; they must match or be 1"
        ) from None
    return batch + a[-2:], batch + b[-2:], batch + (a[-2], b[-1])


def concat_shape(axis: int, shapes: Sequence[Shape]) -> Shape:
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(x != y for i, (x, y) in enumerate(zip(s, first)) if i != axis):
            listed = ", ".join(str(t) for t in shapes)
            raise ShapeError(
                f"concat: shapes {listed} differ outside axis {axis}; all dims but the concatenated one must match"
            )
    return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1 :]
