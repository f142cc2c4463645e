"""Host data entering a trace: numpy conversion under wgjit's dtype rules, and cached scalars.

Both give Lazies (not Tensors), so the Tensor module and the creation functions can use
them without depending on each other.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ir.dtypes import DType, from_numpy, stored_as_is, to_dtype
from ir.errors import DTypeError
from tracer.lazy import Lazy
from tracer.limits import check_binding_size, check_float16
from tracer.realize import add_reset_hook

_F16 = DType.float16


def host_array(data: Any, dtype: DType | str | None, op: str = "tensor") -> tuple[np.ndarray, DType]:
    """`data` as a fresh C-contiguous numpy array of the dtype wgjit stores it in.

    Without a dtype: float64 becomes float32, 64-bit and small integers become int32. Every
    value must be representable in the dtype it enters as, or DTypeError (`check_fits`,
    NUMERICS.md "Values entering wgjit"). A Tensor is read back (np.asarray calls its __array__).
    """
    if dtype is None and type(data) is np.ndarray:  # stored as it is (a decode loop's token ids): only the copy
        as_is = stored_as_is(data.dtype)
        if as_is is not None:
            return np.array(data, order="C", copy=True), as_is
    try:
        arr = np.asarray(data)
    except (ValueError, OverflowError) as e:
        raise DTypeError(f"{op}: cannot make a tensor from ragged or non-numeric data: {e}") from None
    if arr.dtype == object:
        raise DTypeError(
            f"{op}: cannot make a tensor from ragged or non-numeric data ({type(data).__name__}), "
            "or from python ints beyond 64 bits"
        )
    if arr.dtype.kind == "c":
        raise DTypeError(f"{op}: complex data ({arr.dtype}) is not supported")
    if arr.dtype.kind in "US":
        raise DTypeError(f"{op}: string data ({arr.dtype}) is not supported")
    if arr.dtype.kind in "MmV":
        raise DTypeError(f"{op}: {arr.dtype} data is not supported (numbers and bools only)")
    if dtype is not None:
        target = to_dtype(dtype)
        if target.is_quantized:
            raise DTypeError(
                f"tensor: a {target.value} tensor is made by quantizing: tr.quantize(data, tr.{target.value})"
            )
    elif arr.dtype == np.float64:
        target = DType.float32
    elif arr.dtype.kind in "iu" and (arr.dtype.itemsize == 8 or arr.dtype in (np.int16, np.int8, np.uint8, np.uint16)):
        target = DType.int32
    else:
        target = from_numpy(arr.dtype)
    return fitted(arr, target, op), target


def fitted(arr: np.ndarray, target: DType, op: str) -> np.ndarray:
    """`arr` converted to `target` (a fresh C-contiguous copy), or DTypeError when a value would change.

    The one rule for values entering wgjit: integers must be inside the target's range;
    floats entering an integer dtype are truncated toward zero (as numpy does) and must be
    finite and inside the range; finite floats must stay finite in a float dtype. NaN and
    infinities enter float dtypes as themselves. `astype` on a tensor is the explicit cast
    that saturates instead (NUMERICS.md).
    """
    if arr.dtype is target.np or arr.dtype == target.np:  # every value fits as it is: only the copy
        return np.array(arr, order="C", copy=True)
    kind = arr.dtype.kind
    if arr.size and target.is_int and kind in "fiu":
        info = np.iinfo(target.np)
        if kind == "f":
            bad = ~np.isfinite(arr)
            if bad.any():
                raise DTypeError(
                    f"{op}: {arr[bad].flat[0]} cannot be stored in {target.value} (it has no integer value); "
                    f"replace it first, or cast a float tensor explicitly: tr.tensor(a).astype(tr.{target.value}) "
                    "saturates and maps NaN to 0"
                )
            arr = np.trunc(arr)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            hint = (
                f"cast a float tensor explicitly: tr.tensor(a).astype(tr.{target.value}) saturates"
                if kind == "f"
                else "choose a wider dtype (float32) or reduce the values first"
            )
            raise DTypeError(
                f"{op}: {arr.dtype} values {lo}..{hi} do not fit {target.value} "
                f"(range {info.min}..{info.max}); wgjit never wraps values on entry; {hint}"
            )
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.array(arr, dtype=target.np, order="C", copy=True)
    if arr.size and target.is_float and kind in "fiu":
        overflow = np.isinf(out) & (np.isfinite(arr) if kind == "f" else True)
        if overflow.any():
            value = arr[overflow].flat[0]
            limit = float(np.finfo(target.np).max)
            raise DTypeError(
                f"{op}: {arr.dtype} value {value:g} is out of {target.value} range (largest {limit:.6g}); "
                "wgjit never turns finite values into infinities on entry; scale the data or use float32"
            )
    return out


_LARGEST = {DType.float32: float(np.finfo(np.float32).max), DType.float16: float(np.finfo(np.float16).max)}


def host_scalar(value: Any, dtype: DType, op: str) -> bool | int | float:
    """A python (or numpy) scalar as it enters a tensor of `dtype`, under `fitted`'s rule."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, bool | int | float):
        raise DTypeError(f"{op}: expected a python number, got {type(value).__name__}")
    if dtype is DType.bool:
        return bool(value)
    if dtype.is_int:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise DTypeError(
                    f"{op}: {value} cannot be stored in {dtype.value} (it has no integer value); "
                    "use a float tensor, or a finite value"
                )
            value = int(value)  # toward zero, as numpy
        info = np.iinfo(dtype.np)
        if not info.min <= value <= info.max:
            raise DTypeError(
                f"{op}: python int {value} does not fit {dtype.value} (range {info.min}..{info.max}); "
                "wgjit never wraps values on entry; choose a wider dtype (float32) or a smaller value"
            )
        return int(value)
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    largest = _LARGEST.get(dtype)
    if largest is not None and -largest <= as_float <= largest:  # fits: no numpy round trip (the common case)
        return as_float
    with np.errstate(over="ignore"):
        stored = dtype.np.type(as_float)
    if math.isfinite(as_float) and not np.isfinite(stored) or (isinstance(value, int) and math.isinf(as_float)):
        limit = float(np.finfo(dtype.np).max)
        raise DTypeError(
            f"{op}: python number {value:g} is out of {dtype.value} range (largest {limit:.6g}); "
            "wgjit never turns finite values into infinities on entry"
        )
    return as_float


def lazy_from_data(data: Any, dtype: DType | str | None = None, op: str = "tensor") -> Lazy:
    """A leaf Lazy holding a copy of host data (uploaded when first needed); see host_array."""
    arr, dt = host_array(data, dtype, op)
    check_binding_size(op, arr.shape, dt, arr.size * dt.itemsize)
    if dt is DType.float16:
        check_float16(op, arr.shape)
    return Lazy.from_host(arr, dt)


class ConstantCache:
    """0-d Lazies for python scalars, least recently used dropped past `capacity`.

    `x * 2` in a loop uploads 2 once. The cached Lazies are pinned (never donated to an
    in-place kernel). Their buffers live on the device, so a device reset clears the cache.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lazies: OrderedDict[tuple[str, str], Lazy] = OrderedDict()
        self._lock = threading.Lock()  # threads trace at once: a miss's insert and evict must not interleave

    def get(self, value: bool | int | float, dtype: DType) -> Lazy:
        key = (repr(value), dtype._value_)  # repr: 0.0 and -0.0, 1 and True stay apart; str keys hash in C
        if dtype is _F16:
            check_float16("constant", ())
        lazies = self._lazies
        # A hit takes no lock: get and move_to_end are each one C call on str keys, which the GIL
        # keeps whole. Another thread may evict the key between them (move_to_end then raises):
        # the Lazy found is still a valid constant, as when the eviction comes just after a return.
        lz = lazies.get(key)
        if lz is not None:
            try:
                lazies.move_to_end(key)
            except KeyError:
                pass
            return lz
        with self._lock:  # a miss: look again, insert and evict without another thread in between
            lz = lazies.get(key)
            if lz is None:
                lz = Lazy.from_host(np.array(value).astype(dtype.np), dtype)
                lz.pinned = True
                lazies[key] = lz
                if len(lazies) > self.capacity:
                    lazies.popitem(last=False)
            else:
                lazies.move_to_end(key)
        return lz

    def clear(self) -> None:
        with self._lock:
            self._lazies.clear()

    def __len__(self) -> int:
        return len(self._lazies)


CONSTANTS = ConstantCache(capacity=512)
add_reset_hook(CONSTANTS.clear)  # cached scalars live in the old device's buffers
