"""Tensor factories: from host data, constants, ranges and random numbers."""

from __future__ import annotations

import math
import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ir.dtypes import DType, from_numpy, to_dtype
from ir.errors import DTypeError, ShapeError
from ir.ops import Op
from tracer.lazy import Lazy
from tracer.tensor import Tensor, make

_F32_MAX = float(np.finfo(np.float32).max)


def _host_array(data: Any, dtype: DType | None) -> tuple[np.ndarray, DType]:
    if isinstance(data, Tensor):
        data = data.numpy()
    try:
        arr = np.asarray(data)
    except ValueError as e:
        raise DTypeError(f"tensor: cannot make a tensor from ragged or non-numeric data: {e}") from None
    if arr.dtype == object:
        raise DTypeError(f"tensor: cannot make a tensor from ragged or non-numeric data ({type(data).__name__})")
    if arr.dtype.kind == "c":
        raise DTypeError(f"tensor: complex data ({arr.dtype}) is not supported")
    if dtype is not None:
        target = to_dtype(dtype)
    elif arr.dtype == np.float64:
        finite = arr[np.isfinite(arr)]
        if finite.size and np.abs(finite).max() > _F32_MAX:
            raise DTypeError(f"tensor: float64 value {np.abs(finite).max():g} is out of float32 range")
        target = DType.float32
    elif arr.dtype.kind in "iu" and arr.dtype.itemsize == 8 or arr.dtype in (np.int16, np.int8, np.uint8, np.uint16):
        if arr.size and (arr.min() < np.iinfo(np.int32).min or arr.max() > np.iinfo(np.int32).max):
            raise DTypeError(f"tensor: {arr.dtype} values {arr.min()}..{arr.max()} do not fit int32")
        target = DType.int32
    elif arr.dtype.kind in "US":
        raise DTypeError(f"tensor: string data ({arr.dtype}) is not supported")
    else:
        target = from_numpy(arr.dtype)
    return np.array(arr, dtype=target.np, order="C", copy=True), target


def tensor(data: Any, dtype: DType | str | None = None) -> Tensor:
    """A tensor from a list, scalar or numpy array (copied; uploaded when first needed)."""
    arr, dt = _host_array(data, dtype)
    nbytes = arr.size * dt.itemsize
    if nbytes > 128 << 20:
        from tracer.realize import check_binding_size

        check_binding_size("tensor", arr.shape, dt, nbytes)
    if dt is DType.float16:
        from tracer.realize import check_float16

        check_float16("tensor", arr.shape)
    return Tensor(Lazy.from_host(arr, dt))


_CONSTANTS: OrderedDict[tuple[Any, DType], Lazy] = OrderedDict()
_MAX_CONSTANTS = 512
_CONSTANTS_LOCK = threading.Lock()


def constant(value: bool | int | float, dtype: DType) -> Tensor:
    """A 0-d tensor for a python scalar; cached so `x * 2` in a loop uploads 2 once."""
    key = (repr(value), dtype)
    if dtype is DType.float16:
        from tracer.realize import check_float16

        check_float16("constant", ())
    with _CONSTANTS_LOCK:  # threads trace at once: get, move and evict must not interleave
        lz = _CONSTANTS.get(key)
        if lz is None:
            lz = Lazy.from_host(np.array(value).astype(dtype.np), dtype)
            lz.pinned = True
            _CONSTANTS[key] = lz
            if len(_CONSTANTS) > _MAX_CONSTANTS:
                _CONSTANTS.popitem(last=False)
        else:
            _CONSTANTS.move_to_end(key)
    return Tensor(lz)


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
    shape = _shape(shape)
    if dtype is None:
        dt = DType.bool if isinstance(value, bool) else DType.int32 if isinstance(value, int) else DType.float32
    else:
        dt = to_dtype(dtype)
    c = constant(value, dt)
    return c.reshape((1,) * len(shape)).expand(shape) if shape else c


def zeros(shape: Any, dtype: DType | str = DType.float32) -> Tensor:
    return full(shape, 0, to_dtype(dtype))


def ones(shape: Any, dtype: DType | str = DType.float32) -> Tensor:
    return full(shape, 1, to_dtype(dtype))


def zeros_like(x: Tensor, dtype: DType | str | None = None) -> Tensor:
    return zeros(x.shape, dtype or x.dtype)


def ones_like(x: Tensor, dtype: DType | str | None = None) -> Tensor:
    return ones(x.shape, dtype or x.dtype)


def full_like(x: Tensor, value: bool | int | float, dtype: DType | str | None = None) -> Tensor:
    return full(x.shape, value, dtype or x.dtype)


def arange(start: float, stop: float | None = None, step: float = 1, dtype: DType | str | None = None) -> Tensor:
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    all_int = all(isinstance(v, int) for v in (start, stop, step))
    dt = to_dtype(dtype) if dtype is not None else (DType.int32 if all_int else DType.float32)
    n = max(0, math.ceil((stop - start) / step))
    return make(Op.ARANGE, (), (n,), dt, (start, step))


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
