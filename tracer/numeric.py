"""numpy's elementwise helpers built from wgjit's ops: clip and nan_to_num (functions and
methods), isclose and allclose."""

from __future__ import annotations

from typing import Any

import numpy as np

from ir.dtypes import DType
from tracer.tensor import Tensor, add_methods, as_tensor, as_tensors, clamp, constant, where


def clip(x: Any, a_min: Any = None, a_max: Any = None) -> Tensor:
    """min(max(x, a_min), a_max) elementwise, as np.clip (bounds may be tensors; NaN stays NaN)."""
    return clamp(x, a_min, a_max)


def nan_to_num(x: Any, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """x with NaN, +inf and -inf replaced (by default with 0 and the dtype's largest and smallest
    finite values), as np.nan_to_num; ints and bools are returned as they are."""
    x = as_tensor(x, "nan_to_num")
    if not x.dtype.is_float:
        return x
    big = float(np.finfo(x.dtype.np).max)
    high = big if posinf is None else posinf
    low = -big if neginf is None else neginf
    y = where(x.isnan(), nan, x)
    return where(y.isinf(), where(y > 0, constant(high, x.dtype), low), y)


def isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|a - b| <= atol + rtol * |b| elementwise, as np.isclose: infinities are close only to
    themselves, NaN to nothing (to NaN with equal_nan). Ints and bools compare as float32."""
    x, y = as_tensors("isclose", a, b)
    x = x if x.dtype.is_float else x.astype(DType.float32)
    y = y if y.dtype.is_float else y.astype(DType.float32)
    close = (x - y).abs() <= atol + rtol * y.abs()
    out = where(x.isfinite() & y.isfinite(), close, x == y)
    return out | (x.isnan() & y.isnan()) if equal_nan else out


def allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is close, as np.allclose: a python bool, so it computes (and reads
    back one value) at once; inside @tr.jit use isclose(...).all()."""
    return bool(isclose(a, b, rtol, atol, equal_nan).all().item())


add_methods(clip, nan_to_num)
