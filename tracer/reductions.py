"""numpy's reductions built from wgjit's ops: prod, var, std, any, all, logsumexp, the scans
cumsum and cumprod (the scan kernels, along one axis), and quantile, percentile and median
(from the sort kernels).

Each is a function (tr.var(x, axis)) and a Tensor method (x.var(axis)), with numpy's
arguments; ints and bools become float32 where numpy's result would be a float.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ir import shapes
from ir.dtypes import DType, to_dtype
from ir.ops import Op
from tracer.factories import full
from tracer.sorting import sort
from tracer.tensor import Tensor, add_methods, as_tensor, make, reduce, stack, where

Axis = int | Sequence[int] | None


def _float(x: Any, op: str) -> Tensor:
    x = as_tensor(x, op)
    return x if x.dtype.is_float else x.astype(DType.float32, copy=False)


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


def prod(x: Any, axis: Axis = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """The product over `axis` (all axes when None), as np.prod: 1 over no elements; bools count
    as int32; ints multiply in their type and wrap on overflow (numpy's int64 result narrowed to
    int32, NUMERICS.md); floats multiply in float32 (float16 rounded once); `dtype` casts first."""
    x = as_tensor(x, "prod")
    x = x.astype(to_dtype(dtype)) if dtype is not None else x.astype(DType.int32) if x.dtype is DType.bool else x
    return reduce(Op.PROD, x, axis, keepdims)


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


def quantile(x: Any, q: Any, axis: Axis = None, keepdims: bool = False, method: str = "linear") -> Tensor:
    """The q-th quantiles (q in [0, 1], a number or a sequence: then the first axis of the result)
    over `axis`, as np.quantile's default method: the sorted values interpolated linearly at
    q * (n - 1). A row holding NaN gives NaN; over no elements, NaN. Ints become float32 first."""
    x = _float(x, "quantile")
    if method != "linear":
        raise ValueError(f"quantile: only method='linear' (numpy's default) is supported, got {method!r}")
    qs = np.asarray(q, dtype=np.float64)
    if qs.ndim > 1 or qs.size == 0 or not np.all((qs >= 0) & (qs <= 1)):
        raise ValueError(f"quantile: q must be a number or a 1-d sequence in [0, 1], got {q!r}")
    axes = shapes.normalize_axes("quantile", axis, x.shape)
    shape = _kept_shape(x.shape, axes, keepdims)
    n = math.prod(x.shape[a] for a in axes)
    if n == 0:
        values = [full(shape, math.nan, x.dtype) for _ in qs.reshape(-1)]
    else:
        rest = tuple(a for a in range(x.ndim) if a not in axes)
        rows = x.permute(rest + axes).reshape(tuple(x.shape[a] for a in rest) + (n,))
        s = sort(rows, -1)
        nan = s[..., n - 1].isnan()  # NaN sorts last
        values = [where(nan, math.nan, _interpolate(s, float(p) * (n - 1))).reshape(shape) for p in qs.reshape(-1)]
    return values[0] if qs.ndim == 0 else stack(values)


def _interpolate(s: Tensor, pos: float) -> Tensor:
    """numpy's linear interpolation between the sorted neighbours of position pos along the last axis."""
    lo = math.floor(pos)
    t = pos - lo
    a, b = s[..., lo], s[..., min(lo + 1, s.shape[-1] - 1)]
    if t == 0:
        return a
    return b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t  # numpy's _lerp, exact at both ends


def percentile(x: Any, q: Any, axis: Axis = None, keepdims: bool = False, method: str = "linear") -> Tensor:
    """The q-th percentiles (q in [0, 100]), as np.percentile: quantile(x, q / 100)."""
    qs = np.asarray(q, dtype=np.float64)
    if not np.all((qs >= 0) & (qs <= 100)):
        raise ValueError(f"percentile: q must be in [0, 100], got {q!r}")
    return quantile(x, qs / 100 if qs.ndim else float(qs) / 100, axis, keepdims, method)


def median(x: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """The median over `axis`, as np.median (the mean of the two middle values of an even count)."""
    return quantile(x, 0.5, axis, keepdims)


add_methods(prod, var, std, any, all, logsumexp, cumsum, cumprod)
