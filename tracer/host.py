"""Host data entering a trace: numpy conversion under wgjit's dtype rules, and cached scalars.

Both give Lazies (not Tensors), so the Tensor module and the creation functions can use
them without depending on each other.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ir.dtypes import DType, from_numpy, to_dtype
from ir.errors import DTypeError
from tracer.lazy import Lazy
from tracer.limits import check_binding_size, check_float16
from tracer.realize import add_reset_hook

_F32_MAX = float(np.finfo(np.float32).max)


def host_array(data: Any, dtype: DType | str | None) -> tuple[np.ndarray, DType]:
    """`data` as a fresh C-contiguous numpy array of the dtype wgjit stores it in.

    Without a dtype: float64 becomes float32 (refused when out of its range), 64-bit and
    small integers become int32 (refused when they do not fit). A Tensor is read back
    (np.asarray calls its __array__).
    """
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
        if target.is_quantized:
            raise DTypeError(
                f"tensor: a {target.value} tensor is made by quantizing: tr.quantize(data, tr.{target.value})"
            )
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


def lazy_from_data(data: Any, dtype: DType | str | None = None) -> Lazy:
    """A leaf Lazy holding a copy of host data (uploaded when first needed); see host_array."""
    arr, dt = host_array(data, dtype)
    check_binding_size("tensor", arr.shape, dt, arr.size * dt.itemsize)
    if dt is DType.float16:
        check_float16("tensor", arr.shape)
    return Lazy.from_host(arr, dt)


class ConstantCache:
    """0-d Lazies for python scalars, least recently used dropped past `capacity`.

    `x * 2` in a loop uploads 2 once. The cached Lazies are pinned (never donated to an
    in-place kernel). Their buffers live on the device, so a device reset clears the cache.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lazies: OrderedDict[tuple[str, DType], Lazy] = OrderedDict()
        self._lock = threading.Lock()  # threads trace at once: get, move and evict must not interleave

    def get(self, value: bool | int | float, dtype: DType) -> Lazy:
        key = (repr(value), dtype)  # repr: 0.0 and -0.0, 1 and True stay apart
        if dtype is DType.float16:
            check_float16("constant", ())
        with self._lock:
            lz = self._lazies.get(key)
            if lz is None:
                lz = Lazy.from_host(np.array(value).astype(dtype.np), dtype)
                lz.pinned = True
                self._lazies[key] = lz
                if len(self._lazies) > self.capacity:
                    self._lazies.popitem(last=False)
            else:
                self._lazies.move_to_end(key)
        return lz

    def keys_by_id(self) -> dict[int, tuple[str, DType]]:
        """id(Lazy) -> (repr of the value, dtype) for every cached constant."""
        with self._lock:
            return {id(lz): key for key, lz in self._lazies.items()}

    def clear(self) -> None:
        with self._lock:
            self._lazies.clear()

    def __len__(self) -> int:
        return len(self._lazies)


CONSTANTS = ConstantCache(capacity=512)
add_reset_hook(CONSTANTS.clear)  # cached scalars live in the old device's buffers
