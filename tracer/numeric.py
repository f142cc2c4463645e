"""numpy's elementwise helpers built from wgjit's ops: clip and nan_to_num (functions and methods)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracer.tensor import Tensor, add_methods, as_tensor, clamp, constant, where


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


add_methods(clip, nan_to_num)
