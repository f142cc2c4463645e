"""numpy's products lowered to permutes, reshapes and batched matmuls: dot, vdot, outer,
tensordot and einsum. Float products run on the matmul kernels; int ones (which have no
matmul kernel) multiply with broadcasting and sum; bool ones are int ones read as != 0."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from ir.dtypes import DType, promote
from ir.errors import ShapeError
from tracer.tensor import Tensor, add_methods, as_tensor, matmul

Axes = int | tuple[Sequence[int] | int, Sequence[int] | int]


def _common(op: str, *xs: Any) -> tuple[list[Tensor], DType]:
    """The operands as tensors of their common dtype (bools as int32: their products are counts)."""
    ts = [as_tensor(x, op) for x in xs]
    dt = ts[0].dtype
    for t in ts[1:]:
        dt = promote(dt, t.dtype, op)
    work = DType.int32 if dt is DType.bool else dt
    return [t.astype(work, copy=False) for t in ts], dt


def _finish(y: Tensor, dt: DType) -> Tensor:
    return y != 0 if dt is DType.bool else y


def _batched_product(x: Tensor, y: Tensor) -> Tensor:
    """(B, M, K) x (B, K, N) -> (B, M, N): matmul for floats, multiply-and-sum for ints."""
    if x.dtype.is_float:
        return matmul(x, y)
    b, m, k = x.shape
    n = y.shape[2]
    return (x.reshape(b, m, k, 1) * y.reshape(b, 1, k, n)).sum(axis=2)


def tensordot(a: Any, b: Any, axes: Axes = 2) -> Tensor:
    """The sum of products over axes[0] of a and axes[1] of b (an int n: a's last n and b's first
    n), as np.tensordot; the result's axes are a's others, then b's others."""
    (a, b), dt = _common("tensordot", a, b)
    if isinstance(axes, int):
        if axes < 0 or axes > min(a.ndim, b.ndim):
            raise ShapeError(f"tensordot: axes={axes} for shapes {a.shape} and {b.shape}")
        ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        ax_a, ax_b = ([x] if isinstance(x, int) else list(x) for x in axes)
    ax_a = [operator.index(x) % max(a.ndim, 1) for x in ax_a]
    ax_b = [operator.index(x) % max(b.ndim, 1) for x in ax_b]
    sizes_a, sizes_b = [a.shape[i] for i in ax_a], [b.shape[i] for i in ax_b]
    if sizes_a != sizes_b or len(set(ax_a)) != len(ax_a) or len(set(ax_b)) != len(ax_b):
        raise ShapeError(
            f"tensordot: axes {ax_a} of shape {a.shape} and {ax_b} of shape {b.shape} do not pair up "
            "(each named once, equal lengths)"
        )
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    shape_a, shape_b = tuple(a.shape[i] for i in free_a), tuple(b.shape[i] for i in free_b)
    k = math.prod(sizes_a)
    left = a.permute(free_a + ax_a).reshape(1, math.prod(shape_a), k)
    right = b.permute(ax_b + free_b).reshape(1, k, math.prod(shape_b))
    return _finish(_batched_product(left, right).reshape(shape_a + shape_b), dt)


def dot(a: Any, b: Any) -> Tensor:
    """np.dot: a product with a 0-d operand, the inner product of vectors, and otherwise the sum
    over a's last axis and b's second to last (its only one when 1-D)."""
    a, b = as_tensor(a, "dot"), as_tensor(b, "dot")
    if a.ndim == 0 or b.ndim == 0:
        (x, y), dt = _common("dot", a, b)
        return _finish(x * y, dt)
    if a.shape[-1] != b.shape[max(b.ndim - 2, 0)]:
        raise ShapeError(f"dot: shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (a's last axis) differs")
    return tensordot(a, b, ([a.ndim - 1], [max(b.ndim - 2, 0)]))


def vdot(a: Any, b: Any) -> Tensor:
    """The dot product of the flattened tensors, as np.vdot (real: no conjugate)."""
    a, b = as_tensor(a, "vdot"), as_tensor(b, "vdot")
    if a.size != b.size:
        raise ShapeError(f"vdot: shapes {a.shape} and {b.shape} have {a.size} and {b.size} elements")
    return dot(a.reshape(-1), b.reshape(-1))


def outer(a: Any, b: Any) -> Tensor:
    """out[i, j] = a[i] * b[j] over the flattened tensors, as np.outer."""
    (x, y), dt = _common("outer", a, b)
    return _finish(x.reshape(-1, 1) * y.reshape(1, -1), dt)


# --- einsum -----------------------------------------------------------------------------------


def _parse(subscripts: str, xs: list[Tensor]) -> tuple[list[str], str]:
    """Each operand's labels and the output's, with "..." spelled out as labels of its own
    (aligned from the right, as broadcasting does)."""
    spec = subscripts.replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    parts = inputs.split(",")
    if len(parts) != len(xs):
        raise ShapeError(f"einsum: {subscripts!r} names {len(parts)} operands, got {len(xs)}")
    ell = max((x.ndim - len(p.replace("...", "")) for p, x in zip(parts, xs) if "..." in p), default=0)
    ell_labels = "".join(chr(0x2460 + i) for i in range(ell))  # circled digits: never a user's label
    labels = []
    for p, x in zip(parts, xs):
        n = x.ndim - len(p.replace("...", "")) if "..." in p else 0
        full = p.replace("...", ell_labels[ell - n :] if n else "")
        named = p.replace("...", "")
        if len(full) != x.ndim or not all(c.isascii() and c.isalpha() for c in named):
            raise ShapeError(f"einsum: {p!r} does not label the {x.ndim} axes of shape {x.shape} ({subscripts!r})")
        labels.append(full)
    if arrow:
        out = output.replace("...", ell_labels)
    else:  # numpy's implicit output: the broadcast axes, then every label used once, sorted
        counts = {c: "".join(labels).count(c) for c in "".join(labels)}
        out = ell_labels + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell_labels))
    if len(set(out)) != len(out) or any(c not in "".join(labels) for c in out):
        raise ShapeError(f"einsum: output {output!r} repeats a label or names one no operand has ({subscripts!r})")
    return labels, out


def _diagonals(x: Tensor, labels: str) -> tuple[Tensor, str]:
    """x with every repeated label reduced to its diagonal (einsum's "ii")."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i, j = labels.index(c), labels.index(c, labels.index(c) + 1)
        n = x.shape[i]
        if x.shape[j] != n:
            raise ShapeError(f"einsum: label {c!r} has sizes {n} and {x.shape[j]} in one operand of shape {x.shape}")
        rest = [k for k in range(x.ndim) if k not in (i, j)]
        x = x.permute(rest + [i, j])
        x = x.reshape(x.shape[:-2] + (n * n,))[..., :: n + 1]  # the diagonal of the last two axes
        labels = "".join(labels[k] for k in rest) + c
    return x, labels


def _sum_labels(x: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    drop = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not drop:
        return x, labels
    return x.sum(axis=drop), "".join(c for c in labels if c in keep)


def _contract(x: Tensor, lx: str, y: Tensor, ly: str, keep: set[str]) -> tuple[Tensor, str]:
    """x and y multiplied over their shared labels, summed over the shared ones not in `keep`."""
    x, lx = _sum_labels(x, lx, keep | set(ly))
    y, ly = _sum_labels(y, ly, keep | set(lx))
    size = {c: max(d for t, lt in ((x, lx), (y, ly)) for e, d in zip(lt, t.shape) if e == c) for c in lx + ly}
    batch = [c for c in lx if c in ly and c in keep]
    summed = [c for c in lx if c in ly and c not in keep]
    only_x, only_y = [c for c in lx if c not in ly], [c for c in ly if c not in lx]

    def arrange(t: Tensor, lt: str, order: list[str], groups: list[list[str]]) -> Tensor:
        t = t.permute([lt.index(c) for c in order]).expand(tuple(size[c] for c in order))  # size-1 broadcasts
        return t.reshape(tuple(math.prod(size[c] for c in g) for g in groups))

    left = arrange(x, lx, batch + only_x + summed, [batch, only_x, summed])
    right = arrange(y, ly, batch + summed + only_y, [batch, summed, only_y])
    out = _batched_product(left, right)
    labels = batch + only_x + only_y
    return out.reshape(tuple(size[c] for c in labels)), "".join(labels)


def einsum(subscripts: str, *operands: Any) -> Tensor:
    """Einstein summation, as np.einsum (labels, "...", implicit output): repeated labels take
    diagonals, labels used once are summed, the operands are contracted pairwise, left to right,
    as batched matmuls."""
    xs, dt = _common("einsum", *operands)
    labels, out = _parse(subscripts, xs)
    terms = []
    for i, (x, lx) in enumerate(zip(xs, labels)):
        x, lx = _diagonals(x, lx)
        elsewhere = set(out).union(*(set(other) for j, other in enumerate(labels) if j != i))
        terms.append(_sum_labels(x, lx, elsewhere))
    x, lx = terms[0]
    for j, (y, ly) in enumerate(terms[1:], start=1):
        later = set(out).union(*(set(lt) for _, lt in terms[j + 1 :]))
        x, lx = _contract(x, lx, y, ly, later)
    x, lx = _sum_labels(x, lx, set(out))
    return _finish(x.permute([lx.index(c) for c in out]), dt)


add_methods(dot)
