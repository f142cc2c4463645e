"""numpy's reductions built from wgjit's ops: var, std, any, all, logsumexp, and the scans
cumsum and cumprod (the scan kernels, along one axis).

Each is a function (tr.var(x, axis)) and a Tensor method (x.var(axis)), with numpy's
arguments; ints and bools become float32 where numpy's result would be a float.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ir import shapes
from ir.dtypes import DType, to_dtype
from ir.ops import Op
from tracer.factories import full
from tracer.tensor import Tensor, add_methods, as_tensor, make, where

Axis = int | Sequence[int] | None


def _float(x: Any, op: str) -> Tensor:
    x = as_tensor(x, op)
    return x if x.dtype.is_float else x.astype(DType.float32, copy=False)


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


def var(x: Any, axis: Axis = None, ddof: int | float = 0, keepdims: bool = False) -> Tensor:
    """The variance, sum((x - mean)**2) / (n - ddof), as np.var (NaN or inf where n <= ddof).

    float16 data is centered and squared in float32, as numpy does (a square past 65504 would be
    inf in float16 though the variance fits), and the variance rounded to float16 once.
    """
    x = _float(x, "var")
    return _variance(x, "var", axis, ddof, keepdims).astype(x.dtype, copy=False)


def std(x: Any, axis: Axis = None, ddof: int | float = 0, keepdims: bool = False) -> Tensor:
    """The standard deviation, sqrt(var), as np.std (float16 data: the root taken in float32, then rounded)."""
    x = _float(x, "std")
    return _variance(x, "std", axis, ddof, keepdims).sqrt().astype(x.dtype, copy=False)


def _variance(x: Tensor, op: str, axis: Axis, ddof: int | float, keepdims: bool) -> Tensor:
    """The variance of a float tensor, in float32 for float16 data."""
    if x.dtype is DType.float16:
        x = x.astype(DType.float32, copy=False)
    axes = shapes.normalize_axes(op, axis, x.shape)
    n = math.prod(x.shape[a] for a in axes)
    centered = x - x.mean(axes, keepdims=True)
    return (centered * centered).sum(axes, keepdims=keepdims) / float(max(n - ddof, 0))


def any(x: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether any element is nonzero (NaN counts), as np.any; False over no elements."""
    x = as_tensor(x, "any")
    return (x != 0).astype(DType.int32, copy=False).sum(axis, keepdims) > 0


def all(x: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether every element is nonzero (NaN counts), as np.all; True over no elements."""
    x = as_tensor(x, "all")
    return (x == 0).astype(DType.int32, copy=False).sum(axis, keepdims) == 0


def logsumexp(x: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) without overflow, as scipy.special.logsumexp: the largest element is taken
    out first (where it is finite); -inf over no elements."""
    x = _float(x, "logsumexp")
    axes = shapes.normalize_axes("logsumexp", axis, x.shape)
    shape = _kept_shape(x.shape, axes, keepdims)
    if 0 in (x.shape[a] for a in axes):
        return full(shape, -math.inf, x.dtype)
    top = x.max(axes, keepdims=True)
    top = where(top.isfinite(), top, 0.0)
    total = (x - top).exp().sum(axes, keepdims=keepdims)
    return total.log() + top.reshape(shape)


def _scan(op: Op, x: Any, axis: int | None, dtype: Any) -> Tensor:
    """The running sum or product along `axis` (over the flattened x when None), as numpy's:
    bools count as int32, `dtype` casts first."""
    x = as_tensor(x, op.value)
    x = (
        x.astype(to_dtype(dtype), copy=False)
        if dtype is not None
        else x.astype(DType.int32, copy=False)
        if x.dtype is DType.bool
        else x
    )
    if axis is None or x.ndim == 0:
        x, axis = x.reshape(-1), 0
    a = shapes.normalize_axis(op.value, axis, x.ndim, x.shape)
    moved = x.swapaxes(a, -1)
    if moved.size == 0:
        return x
    return make(op, (moved,), moved.shape, moved.dtype).swapaxes(a, -1)


def cumsum(x: Any, axis: int | None = None, dtype: Any = None) -> Tensor:
    """The running sum along `axis` (of the flattened x when None), as np.cumsum."""
    return _scan(Op.CUMSUM, x, axis, dtype)


def cumprod(x: Any, axis: int | None = None, dtype: Any = None) -> Tensor:
    """The running product along `axis` (of the flattened x when None), as np.cumprod."""
    return _scan(Op.CUMPROD, x, axis, dtype)


add_methods(var, std, any, all, logsumexp, cumsum, cumprod)
