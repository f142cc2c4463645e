"""Creation functions: tensors from host data, constants, ranges, random numbers, and the
numpy matrix builders (eye, tril, triu).

`constant` (a cached 0-d tensor for a python scalar) is tracer.tensor.constant.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ir.dtypes import DType, to_dtype
from ir.errors import DTypeError, ShapeError
from ir.ops import Op
from tracer.host import host_scalar
from tracer.tensor import MAX_ELEMENTS, Tensor, as_tensor, constant, from_data, make, where

__all__ = [
    "arange", "as_tensor_list", "constant", "eye", "full", "full_like", "linspace", "ones", "ones_like", "rand",
    "randn", "tensor", "tril", "triu", "zeros", "zeros_like",
]  # fmt: skip


def tensor(data: Any, dtype: DType | str | None = None) -> Tensor:
    """A tensor from a list, scalar or numpy array (copied; uploaded when first needed)."""
    return from_data(data, dtype)


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(operator.index(d) for d in shape)  # index(): 2.5 is refused, not truncated to 2
    except TypeError:
        raise ShapeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in out):
        raise ShapeError(f"negative dimensions are not allowed: {out}")
    return out


def full(shape: Any, value: bool | int | float, dtype: DType | str | None = None) -> Tensor:
    """A tensor of `shape` filled with `value`, which must fit the dtype (inferred as numpy does for python scalars)."""
    return _full("full", shape, value, dtype)


def _full(op: str, shape: Any, value: Any, dtype: DType | str | None) -> Tensor:
    shape = _shape(shape)
    n = math.prod(shape)
    if n > MAX_ELEMENTS:
        raise ShapeError(
            f"{op}: shape {shape} has {n} elements, over the {MAX_ELEMENTS} (2**32 - 1) wgjit's kernels count"
        )
    if isinstance(value, np.generic):
        value = value.item()
    if dtype is None:
        dt = DType.bool if isinstance(value, bool) else DType.int32 if isinstance(value, int) else DType.float32
    else:
        dt = to_dtype(dtype)
    c = constant(value, dt, op)
    if not shape:
        return c
    ones = (1,) * len(shape)
    return make(Op.EXPAND, (make(Op.RESHAPE, (c,), ones, dt, ones),), shape, dt, shape)  # its own values, not a view


def zeros(shape: Any, dtype: DType | str = DType.float32) -> Tensor:
    return _full("zeros", shape, 0, to_dtype(dtype))


def ones(shape: Any, dtype: DType | str = DType.float32) -> Tensor:
    return _full("ones", shape, 1, to_dtype(dtype))


def zeros_like(x: Tensor, dtype: DType | str | None = None) -> Tensor:
    return _full("zeros_like", x.shape, 0, dtype or x.dtype)


def ones_like(x: Tensor, dtype: DType | str | None = None) -> Tensor:
    return _full("ones_like", x.shape, 1, dtype or x.dtype)


def full_like(x: Tensor, value: bool | int | float, dtype: DType | str | None = None) -> Tensor:
    return _full("full_like", x.shape, value, dtype or x.dtype)


def arange(start: float, stop: float | None = None, step: float = 1, dtype: DType | str | None = None) -> Tensor:
    """start, start + step, ... up to (not including) stop, as numpy; every value must fit the dtype."""
    if stop is None:
        start, stop = 0, start
    start, stop, step = (_arange_bound(name, v) for name, v in (("start", start), ("stop", stop), ("step", step)))
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    all_int = all(isinstance(v, int) for v in (start, stop, step))
    dt = to_dtype(dtype) if dtype is not None else (DType.int32 if all_int else DType.float32)
    n = max(0, -((start - stop) // step) if all_int else math.ceil((stop - start) / step))
    if n:
        last = start + (n - 1) * step
        host_scalar(start, dt, "arange")  # the first and the last value must fit dt (never wrapped)
        host_scalar(last, dt, "arange")
        if dt.is_int and not all(-(2**31) <= v < 2**31 for v in (start, step)):
            raise DTypeError(
                f"arange: start {start} and step {step} must fit int32, in which the kernel counts; "
                f"add the offset afterwards: tr.arange({n}, dtype=tr.{dt.value}) * step + start"
            )
    return make(Op.ARANGE, (), (n,), dt, (start, step))


def linspace(
    start: float, stop: float, num: int = 50, endpoint: bool = True, retstep: bool = False, dtype: Any = None
) -> Tensor | tuple[Tensor, float]:
    """`num` evenly spaced values from start to stop (stop itself when `endpoint`), as np.linspace;
    float32 unless `dtype` says otherwise (ints are truncated, as numpy's astype)."""
    if not isinstance(num, int) or isinstance(num, bool) or num < 0:
        raise ValueError(f"linspace: num must be a non-negative int, got {num!r}")
    div = num - 1 if endpoint else num
    step = (stop - start) / div if div > 0 else math.nan
    y = make(Op.ARANGE, (), (num,), DType.float32, (float(start), 0.0 if div <= 0 else float(step)))
    if endpoint and num > 1:  # numpy sets the last value to stop exactly
        y = where(arange(num) == num - 1, float(stop), y)
    y = y if dtype is None else y.astype(dtype)
    return (y, step) if retstep else y


def _row_col(rows: int, cols: int, k: int) -> tuple[Tensor, Tensor]:
    """(row index + k) as a column and the column index as a row: their comparison is a triangle."""
    return (arange(rows) + k).reshape(rows, 1), arange(cols).reshape(1, cols)


def eye(n: int, m: int | None = None, k: int = 0, dtype: DType | str = DType.float32) -> Tensor:
    """The (n, m) matrix with ones on diagonal k and zeros elsewhere, as np.eye."""
    n, m = operator.index(n), operator.index(n if m is None else m)
    if n < 0 or m < 0:
        raise ShapeError(f"eye: negative dimensions are not allowed: ({n}, {m})")
    row, col = _row_col(n, m, operator.index(k))
    return (row == col).astype(dtype)


def _triangle(op: str, x: Any, k: int, lower: bool) -> Tensor:
    x = as_tensor(x, op)
    if x.ndim == 0:
        raise ShapeError(f"{op}: needs at least 1 dimension, got a 0-d tensor")
    rows, cols = (x.shape[-1], x.shape[-1]) if x.ndim == 1 else x.shape[-2:]  # numpy: a 1-D x is a row
    row, col = _row_col(rows, cols, operator.index(k))
    keep = row >= col if lower else row <= col
    return where(keep, x, constant(False if x.dtype is DType.bool else 0, x.dtype))


def tril(x: Any, k: int = 0) -> Tensor:
    """x with the elements above diagonal k set to 0 (over its last two axes), as np.tril."""
    return _triangle("tril", x, k, lower=True)


def triu(x: Any, k: int = 0) -> Tensor:
    """x with the elements below diagonal k set to 0 (over its last two axes), as np.triu."""
    return _triangle("triu", x, k, lower=False)


def _arange_bound(name: str, v: Any) -> int | float:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise DTypeError(f"arange: {name} must be a python number, got {v!r} ({type(v).__name__})")
    if isinstance(v, float) and not math.isfinite(v):
        raise ShapeError(f"arange: {name} is {v}; start, stop and step must be finite (the length would be undefined)")
    return v


def _rng(seed: int | None) -> np.random.Generator:
    return np.random.default_rng(seed)


def rand(*shape: Any, seed: int | None = None, dtype: DType | str = DType.float32) -> Tensor:
    """Uniform [0, 1) numbers (drawn on the host by numpy's PCG64, then uploaded)."""
    s = _shape(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
    return tensor(_rng(seed).random(s, dtype=np.float32), dtype)


def randn(*shape: Any, seed: int | None = None, dtype: DType | str = DType.float32) -> Tensor:
    """Standard normal numbers (drawn on the host by numpy's PCG64, then uploaded)."""
    s = _shape(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
    return tensor(_rng(seed).standard_normal(s, dtype=np.float32), dtype)


def as_tensor_list(tensors: Sequence[Any]) -> list[Tensor]:
    return [t if isinstance(t, Tensor) else tensor(t) for t in tensors]
