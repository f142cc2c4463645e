"""The Python Array API standard (2024.12) over wgjit's lazy Tensors: `x.__array_namespace__()`.

The dtypes are WebGPU's: bool, int32, uint32, float32, and float16 where the adapter has
shader-f16 (an extension dtype here: the standard names no float16). The functions are lazy:
each builds nodes, and values are computed when read. Functions whose output shape depends on
the data (`nonzero`, `unique_*`), and the `linalg`/`fft` extensions, are not provided: calling
one raises `ArrayAPIUnsupported` naming the function and why (`capabilities()` says
"data-dependent shapes": False). Functions wgjit has no GPU kernel for raise the same way
(`UNSUPPORTED` lists each with its reason). Composed functions (var, tensordot, tril, logaddexp,
...) are built from wgjit's ops and stay on the GPU.

Checked against the data-apis array-api-tests suite: `tests/array_api_tests_run.py` runs it
with the skips in `tests/array_api_skips.txt`.
"""

from __future__ import annotations

import builtins
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ir import shapes
from ir.dtypes import DType, promote, to_dtype
from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError, WgjitError
from ir.ops import Op
from tracer import factories, sorting
from tracer.nn import gather, index_select
from tracer.tensor import (
    Tensor,
    as_tensor,
    as_tensors,
    binary,
    clamp,
)
from tracer.tensor import (
    concat as _concat,
)
from tracer.tensor import (
    logical_xor as _xor,
)
from tracer.tensor import (
    matmul as _matmul,
)
from tracer.tensor import (
    maximum as _maximum,
)
from tracer.tensor import (
    minimum as _minimum,
)
from tracer.tensor import (
    stack as _stack,
)
from tracer.tensor import (
    where as _where,
)

__array_api_version__ = "2024.12"

bool = DType.bool  # noqa: A001
int32 = DType.int32
uint32 = DType.uint32
float32 = DType.float32
float16 = DType.float16  # beyond the standard: only where the adapter has shader-f16

e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None

Array = Tensor


class ArrayAPIUnsupported(WgjitError, NotImplementedError):
    """A function of the standard that wgjit does not provide, with the reason."""


class Device:
    """The one device wgjit's tensors live on: the WebGPU adapter it chose."""

    def __repr__(self) -> str:
        return "wgjit.Device('webgpu')"


DEVICE = Device()


def _check_device(device: Any) -> None:
    if device is not None and device is not DEVICE and device != "webgpu":
        raise ValueError(f"device {device!r}: wgjit's tensors live on {DEVICE!r} only")


# --- inspection ---------------------------------------------------------------------------


class Info:
    """What `__array_namespace_info__()` returns."""

    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": True, "data-dependent shapes": False, "max dimensions": None}

    def default_device(self) -> Device:
        return DEVICE

    def devices(self) -> list[Device]:
        return [DEVICE]

    def default_dtypes(self, *, device: Any = None) -> dict[str, DType]:
        _check_device(device)
        return {"real floating": float32, "integral": int32, "indexing": int32}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, DType]:
        _check_device(device)
        every = {"bool": bool, "int32": int32, "uint32": uint32, "float32": float32}  # float16: not a standard dtype
        if kind is None:
            return every
        return {n: d for n, d in every.items() if isdtype(d, kind)}


def __array_namespace_info__() -> Info:  # noqa: N807
    return Info()


# --- creation -----------------------------------------------------------------------------


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: builtins.bool | None = None) -> Tensor:
    _check_device(device)
    if isinstance(obj, Tensor):
        out = obj if dtype is None else obj.astype(to_dtype(dtype), copy=copy is True)
        return out.copy() if copy and out is obj else out
    if copy is False:
        raise ValueError("asarray: copy=False, but host data must be copied to the GPU")
    if dtype is None and isinstance(obj, builtins.bool | int | float):
        dtype = bool if isinstance(obj, builtins.bool) else int32 if isinstance(obj, int) else float32
    if dtype is None and _nested_python_floats(obj):
        dtype = float32
    return factories.tensor(obj, dtype)


def _nested_python_floats(obj: Any) -> builtins.bool:
    return isinstance(obj, list | tuple) and builtins.any(isinstance(v, float) or _nested_python_floats(v) for v in obj)


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None) -> Tensor:
    _check_device(device)
    return factories.arange(start, stop, step, dtype)


def _shape(shape: Any) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 0, dtype=dtype or float32, device=device)


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 1, dtype=dtype or float32, device=device)


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros(shape, dtype=dtype, device=device)


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    _check_device(device)
    if dtype is None and isinstance(fill_value, float):
        dtype = float32
    return factories.full(_shape(shape), fill_value, dtype)


def zeros_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(x.shape, 0, dtype=dtype or x.dtype, device=device)


def ones_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(x.shape, 1, dtype=dtype or x.dtype, device=device)


def empty_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros_like(x, dtype=dtype, device=device)


def full_like(x: Tensor, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=device)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None, device: Any = None) -> Tensor:
    _check_device(device)
    n_cols = n_rows if n_cols is None else n_cols
    k = builtins.max(-n_rows, builtins.min(n_cols, k))  # beyond the matrix: no diagonal at all
    rows = factories.arange(n_rows).reshape(n_rows, 1)
    cols = factories.arange(n_cols).reshape(1, n_cols)
    return (rows + k == cols).astype(to_dtype(dtype or float32))


def linspace(
    start: Any, stop: Any, /, num: int, *, dtype: Any = None, device: Any = None, endpoint: builtins.bool = True
) -> Tensor:
    _check_device(device)
    dt = to_dtype(dtype or float32)
    if num == 0:
        return zeros((0,), dtype=dt)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div else 0.0
    out = factories.arange(num).astype(float32) * step + start
    if endpoint and num > 1:
        out = _where(factories.arange(num) == num - 1, float(stop), out)
    return out.astype(dt)


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    sizes = [a.size for a in arrays]
    if indexing == "xy" and len(arrays) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, a in enumerate(arrays):
        axis = i if indexing == "ij" or len(arrays) < 2 else {0: 1, 1: 0}.get(i, i)
        shape = [1] * len(arrays)
        shape[axis] = a.size
        out.append(a.reshape(tuple(shape)).expand(tuple(sizes)).copy())
    return out


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    return _where(_band(x, k, lower=True), x, zeros_like(x))


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    return _where(_band(x, k, lower=False), x, zeros_like(x))


def _band(x: Tensor, k: int, lower: builtins.bool) -> Tensor:
    m, n = x.shape[-2], x.shape[-1]
    rows = factories.arange(m).reshape(m, 1)
    cols = factories.arange(n).reshape(1, n)
    return (cols - rows <= k) if lower else (cols - rows >= k)


def from_dlpack(x: Any, /, *, device: Any = None, copy: Any = None) -> Tensor:
    raise ArrayAPIUnsupported("from_dlpack: wgjit's buffers live in WebGPU, which has no DLPack interchange")


# --- data types ---------------------------------------------------------------------------


def astype(x: Tensor, dtype: Any, /, *, copy: builtins.bool = True, device: Any = None) -> Tensor:
    _check_device(device)
    return x.astype(to_dtype(dtype), copy=copy)


def can_cast(from_: Any, to: Any, /) -> builtins.bool:
    src = from_.dtype if isinstance(from_, Tensor) else to_dtype(from_)
    return builtins.bool(np.can_cast(src.np, to_dtype(to).np, casting="safe"))


class finfo:  # noqa: N801
    def __init__(self, type: Any, /) -> None:  # noqa: A002
        dt = type.dtype if isinstance(type, Tensor) else to_dtype(type)
        if not dt.is_float:
            raise ValueError(f"finfo: {dt.value} is not a floating dtype")
        info = np.finfo(dt.np)
        self.bits, self.dtype = info.bits, dt
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.smallest_normal = float(info.smallest_normal)


class iinfo:  # noqa: N801
    def __init__(self, type: Any, /) -> None:  # noqa: A002
        dt = type.dtype if isinstance(type, Tensor) else to_dtype(type)
        if not dt.is_int:
            raise ValueError(f"iinfo: {dt.value} is not an integer dtype")
        info = np.iinfo(dt.np)
        self.bits, self.max, self.min, self.dtype = info.bits, int(info.max), int(info.min), dt


_KINDS = {
    "bool": lambda d: d is DType.bool,
    "signed integer": lambda d: d is DType.int32,
    "unsigned integer": lambda d: d is DType.uint32,
    "integral": lambda d: d.is_int,
    "real floating": lambda d: d.is_float,
    "complex floating": lambda d: False,
    "numeric": lambda d: d is not DType.bool,
}


def isdtype(dtype: Any, kind: Any) -> builtins.bool:
    dt = to_dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r}; one of {sorted(_KINDS)}")
        return _KINDS[kind](dt)
    return dt == to_dtype(kind)


def result_type(*arrays_and_dtypes: Any) -> DType:
    dts = [a.dtype for a in arrays_and_dtypes if isinstance(a, Tensor)]
    dts += [to_dtype(a) for a in arrays_and_dtypes if isinstance(a, DType | str | np.dtype | type)]
    scalars = [a for a in arrays_and_dtypes if isinstance(a, builtins.bool | int | float)]
    if not dts:
        raise DTypeError("result_type: needs at least one array or dtype")
    out = dts[0]
    for d in dts[1:]:
        out = promote(out, d, "result_type")
    for s in scalars:
        if isinstance(s, float) and not out.is_float:
            out = float32
    return out


# --- elementwise --------------------------------------------------------------------------


def _unary_method(name: str) -> Any:
    def fn(x: Tensor, /) -> Tensor:
        return getattr(as_tensor(x, name), name)()

    fn.__name__ = name
    return fn


abs = _unary_method("abs")  # noqa: A001
exp = _unary_method("exp")
log = _unary_method("log")
sqrt = _unary_method("sqrt")
sin = _unary_method("sin")
cos = _unary_method("cos")
tanh = _unary_method("tanh")
square = _unary_method("square")
floor = _unary_method("floor")
ceil = _unary_method("ceil")


def _binary(op: Op) -> Any:
    def fn(x1: Any, x2: Any, /) -> Tensor:
        return binary(op, x1, x2)

    fn.__name__ = op.value
    return fn


add = _binary(Op.ADD)
subtract = _binary(Op.SUB)
multiply = _binary(Op.MUL)
divide = _binary(Op.DIV)
floor_divide = _binary(Op.FLOORDIV)
remainder = _binary(Op.MOD)
less = _binary(Op.LT)
less_equal = _binary(Op.LE)
greater = _binary(Op.GT)
greater_equal = _binary(Op.GE)
equal = _binary(Op.EQ)
not_equal = _binary(Op.NE)


def pow(x1: Any, x2: Any, /) -> Tensor:  # noqa: A001
    return binary(Op.POW, x1, x2)


def maximum(x1: Any, x2: Any, /) -> Tensor:
    return _maximum(x1, x2)


def minimum(x1: Any, x2: Any, /) -> Tensor:
    return _minimum(x1, x2)


def negative(x: Tensor, /) -> Tensor:
    return -x


def positive(x: Tensor, /) -> Tensor:
    return x.copy()


def reciprocal(x: Tensor, /) -> Tensor:
    return x.reciprocal()


def logical_and(x1: Any, x2: Any, /) -> Tensor:
    return binary(Op.AND, x1, x2)


def logical_or(x1: Any, x2: Any, /) -> Tensor:
    return binary(Op.OR, x1, x2)


def logical_xor(x1: Any, x2: Any, /) -> Tensor:
    return _xor(x1, x2)


def logical_not(x: Tensor, /) -> Tensor:
    return ~x


def bitwise_and(x1: Any, x2: Any, /) -> Tensor:
    return _bool_bitwise("bitwise_and", Op.AND, x1, x2)


def bitwise_or(x1: Any, x2: Any, /) -> Tensor:
    return _bool_bitwise("bitwise_or", Op.OR, x1, x2)


def bitwise_xor(x1: Any, x2: Any, /) -> Tensor:
    a, b = as_tensors("bitwise_xor", x1, x2)
    if a.dtype is not DType.bool or b.dtype is not DType.bool:
        raise ArrayAPIUnsupported("bitwise_xor: integer bitwise ops have no GPU kernel in wgjit yet (bools work)")
    return _xor(a, b)


def bitwise_invert(x: Tensor, /) -> Tensor:
    if x.dtype is not DType.bool:
        raise ArrayAPIUnsupported("bitwise_invert: integer bitwise ops have no GPU kernel in wgjit yet (bools work)")
    return ~x


def _bool_bitwise(name: str, op: Op, x1: Any, x2: Any) -> Tensor:
    a, b = as_tensors(name, x1, x2)
    if a.dtype is not DType.bool or b.dtype is not DType.bool:
        raise ArrayAPIUnsupported(f"{name}: integer bitwise ops have no GPU kernel in wgjit yet (bools work)")
    return binary(op, a, b)


def _float(x: Any, name: str) -> Tensor:
    t = as_tensor(x, name)
    return t if t.dtype.is_float else t.astype(float32)


def _method_or(name: str, x: Tensor, fallback: Any) -> Tensor:
    """The op table's method where wgjit has it (issue 15 item 1), else a composition."""
    method = getattr(x, name, None)
    return method() if method is not None else fallback(x)


def isnan(x: Tensor, /) -> Tensor:
    return _method_or("isnan", x, lambda t: t != t if t.dtype.is_float else zeros(t.shape, dtype=bool))


def isinf(x: Tensor, /) -> Tensor:
    return _method_or("isinf", x, lambda t: abs(t) == inf if t.dtype.is_float else zeros(t.shape, dtype=bool))


def isfinite(x: Tensor, /) -> Tensor:
    return _method_or("isfinite", x, lambda t: ~(isnan(t) | isinf(t)))


def sign(x: Tensor, /) -> Tensor:
    return _method_or("sign", x, lambda t: _where(t > 0, 1, _where(t < 0, -1, t)).astype(t.dtype))


def trunc(x: Tensor, /) -> Tensor:
    return _method_or("trunc", x, lambda t: _where(t < 0, t.ceil(), t.floor()) if t.dtype.is_float else t.copy())


def round(x: Tensor, /) -> Tensor:  # noqa: A001
    method = getattr(x, "round", None)
    if method is not None:
        return method()
    raise ArrayAPIUnsupported("round: half-to-even rounding has no GPU kernel in wgjit yet")


def expm1(x: Tensor, /) -> Tensor:
    return _method_or("expm1", _float(x, "expm1"), lambda t: t.exp() - 1)


def log1p(x: Tensor, /) -> Tensor:
    return _method_or("log1p", _float(x, "log1p"), lambda t: (t + 1).log())


def log2(x: Tensor, /) -> Tensor:
    return _float(x, "log2").log() * (1 / math.log(2))


def log10(x: Tensor, /) -> Tensor:
    return _float(x, "log10").log() * (1 / math.log(10))


def logaddexp(x1: Any, x2: Any, /) -> Tensor:
    a, b = as_tensors("logaddexp", x1, x2)
    a, b = _float(a, "logaddexp"), _float(b, "logaddexp")
    m = _maximum(a, b)
    safe = _where(isinf(m), 0.0, m)  # inf + log(...) would be inf - inf
    return safe + ((a - safe).exp() + (b - safe).exp()).log()


def hypot(x1: Any, x2: Any, /) -> Tensor:
    a, b = as_tensors("hypot", x1, x2)
    a, b = abs(_float(a, "hypot")), abs(_float(b, "hypot"))
    m = _maximum(a, b)
    scale = _where(m == 0, 1.0, m)
    out = m * ((a / scale).square() + (b / scale).square()).sqrt()
    return _where(isinf(a) | isinf(b), inf, out)


def tan(x: Tensor, /) -> Tensor:
    t = _float(x, "tan")
    return t.sin() / t.cos()


def sinh(x: Tensor, /) -> Tensor:
    t = _float(x, "sinh")
    return _where(abs(t) < 1e-4, t, (t.exp() - (-t).exp()) * 0.5)


def cosh(x: Tensor, /) -> Tensor:
    t = _float(x, "cosh")
    return (t.exp() + (-t).exp()) * 0.5


def clip(x: Tensor, /, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    if min is None and max is None:
        return x.copy()
    out = clamp(x, min, max)
    return out if out.dtype is x.dtype else out.astype(x.dtype)


def conj(x: Tensor, /) -> Tensor:
    return x.copy()


def real(x: Tensor, /) -> Tensor:
    return x.copy()


def signbit(x: Tensor, /) -> Tensor:
    method = getattr(x, "signbit", None)
    if method is not None:
        return method()
    raise ArrayAPIUnsupported("signbit: reading the sign bit (of -0.0 and NaN) has no GPU kernel in wgjit yet")


# --- statistics, searching and utility ----------------------------------------------------


def _reduce(name: str) -> Any:
    def fn(x: Tensor, /, *, axis: Any = None, keepdims: builtins.bool = False, dtype: Any = None) -> Tensor:
        t = x if dtype is None else x.astype(to_dtype(dtype))
        return getattr(t, name)(axis=axis, keepdims=keepdims)

    fn.__name__ = name
    return fn


sum = _reduce("sum")  # noqa: A001
mean = _reduce("mean")


def max(x: Tensor, /, *, axis: Any = None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    return x.max(axis=axis, keepdims=keepdims)


def min(x: Tensor, /, *, axis: Any = None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    return x.min(axis=axis, keepdims=keepdims)


def prod(x: Tensor, /, *, axis: Any = None, dtype: Any = None, keepdims: builtins.bool = False) -> Tensor:
    t = x if dtype is None else x.astype(to_dtype(dtype))
    if not hasattr(t, "prod"):
        raise ArrayAPIUnsupported("prod: no product reduction kernel in wgjit yet")
    return t.prod(axis=axis, keepdims=keepdims)


def var(x: Tensor, /, *, axis: Any = None, correction: float = 0.0, keepdims: builtins.bool = False) -> Tensor:
    t = _float(x, "var")
    axes = shapes.normalize_axes("var", axis, t.shape)
    n = math.prod(t.shape[a] for a in axes)
    centered = t - t.mean(axis=axis, keepdims=True)
    total = centered.square().sum(axis=axis, keepdims=keepdims)
    return total * (1.0 / (n - correction)) if n - correction > 0 else total * nan


def std(x: Tensor, /, *, axis: Any = None, correction: float = 0.0, keepdims: builtins.bool = False) -> Tensor:
    return var(x, axis=axis, correction=correction, keepdims=keepdims).sqrt()


def _cumulative(name: str) -> Any:
    def fn(x: Tensor, /, *, axis: int | None = None, dtype: Any = None, include_initial: builtins.bool = False) -> Any:
        method = {"cumulative_sum": "cumsum", "cumulative_prod": "cumprod"}[name]
        if not hasattr(x, method):
            raise ArrayAPIUnsupported(f"{name}: no scan kernel in wgjit yet")
        t = x if dtype is None else x.astype(to_dtype(dtype))
        if axis is None:
            if t.ndim > 1:
                raise ShapeError(f"{name}: axis is required for a {t.ndim}-d array (shape {t.shape})")
            axis = 0
        out = getattr(t, method)(axis=axis)
        if include_initial:
            a = axis % t.ndim  # the initial value's slice has size 1 along the axis, even when x is empty there
            first = factories.full(out.shape[:a] + (1,) + out.shape[a + 1 :], 0 if method == "cumsum" else 1, out.dtype)
            out = _concat([first, out], axis)
        return out

    fn.__name__ = name
    return fn


cumulative_sum = _cumulative("cumulative_sum")
cumulative_prod = _cumulative("cumulative_prod")


def argmax(x: Tensor, /, *, axis: int | None = None, keepdims: builtins.bool = False) -> Tensor:
    return x.argmax(axis=axis, keepdims=keepdims)


def argmin(x: Tensor, /, *, axis: int | None = None, keepdims: builtins.bool = False) -> Tensor:
    return x.argmin(axis=axis, keepdims=keepdims)


def count_nonzero(x: Tensor, /, *, axis: Any = None, keepdims: builtins.bool = False) -> Tensor:
    return (x != 0).astype(int32).sum(axis=axis, keepdims=keepdims)


def where(condition: Any, x1: Any, x2: Any, /) -> Tensor:
    return _where(condition, x1, x2)


def any(x: Tensor, /, *, axis: Any = None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    truth = x if x.dtype is DType.bool else x != 0
    return truth.astype(int32).sum(axis=axis, keepdims=keepdims) > 0  # empty: False


def all(x: Tensor, /, *, axis: Any = None, keepdims: builtins.bool = False) -> Tensor:  # noqa: A001
    truth = x if x.dtype is DType.bool else x != 0
    return ~any(~truth, axis=axis, keepdims=keepdims)  # empty: True


def diff(x: Tensor, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Tensor:
    a = shapes.normalize_axis("diff", axis, x.ndim, x.shape)
    parts = [p for p in (prepend, x, append) if p is not None]
    t = _concat([as_tensor(p, "diff") for p in parts], a) if len(parts) > 1 else x
    for _ in range(n):
        head = (slice(None),) * a
        t = t[head + (slice(1, None),)] - t[head + (slice(None, -1),)]
    return t


def searchsorted(x1: Tensor, x2: Tensor, /, *, side: str = "left", sorter: Any = None) -> Tensor:
    if sorter is not None:
        x1 = index_select(x1, sorter, 0)
    a = x1.reshape((1,) * x2.ndim + (x1.shape[0],))
    b = x2.reshape(x2.shape + (1,))
    before = (a < b) if side == "left" else (a <= b)
    return before.astype(int32).sum(axis=-1)


# --- manipulation -------------------------------------------------------------------------


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    shape = shapes.broadcast_shapes("broadcast_arrays", *(a.shape for a in arrays))
    return [a.broadcast_to(shape) for a in arrays]


def broadcast_to(x: Tensor, /, shape: Sequence[int]) -> Tensor:
    return x.broadcast_to(tuple(shape))


def concat(arrays: Sequence[Tensor], /, *, axis: int | None = 0) -> Tensor:
    if axis is None:
        return _concat([a.reshape(-1) for a in arrays], 0)
    return _concat(list(arrays), axis)


def stack(arrays: Sequence[Tensor], /, *, axis: int = 0) -> Tensor:
    return _stack(list(arrays), axis)


def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    a = shapes.normalize_axis("unstack", axis, x.ndim, x.shape)
    return tuple(x[(slice(None),) * a + (i,)] for i in range(x.shape[a]))


def expand_dims(x: Tensor, /, axis: int = 0) -> Tensor:
    if isinstance(axis, int) and not -x.ndim - 1 <= axis <= x.ndim:  # the standard asks for an IndexError
        raise IndexOutOfRangeError(
            f"expand_dims: axis {axis} is out of range for shape {x.shape}; valid axes are {-x.ndim - 1}..{x.ndim}"
        )
    a = shapes.normalize_axis("expand_dims", axis, x.ndim + 1, x.shape)
    return x.reshape(x.shape[:a] + (1,) + x.shape[a:])


def squeeze(x: Tensor, /, axis: Any) -> Tensor:
    return x.squeeze(axis)


def reshape(x: Tensor, /, shape: Sequence[int], *, copy: builtins.bool | None = None) -> Tensor:
    out = x.reshape(tuple(shape))
    if copy is False and out.base is None and x.size:
        raise ValueError(f"reshape: copy=False, but reshaping shape {x.shape} to {tuple(shape)} needs a copy")
    return out.copy() if copy else out


def permute_dims(x: Tensor, /, axes: Sequence[int]) -> Tensor:
    return x.permute(tuple(axes))


def moveaxis(x: Tensor, source: Any, destination: Any, /) -> Tensor:
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [shapes.normalize_axis("moveaxis", s, x.ndim, x.shape) for s in src]
    dst = [shapes.normalize_axis("moveaxis", d, x.ndim, x.shape) for d in dst]
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x.permute(tuple(order))


def flip(x: Tensor, /, *, axis: Any = None) -> Tensor:
    axes = shapes.normalize_axes("flip", axis, x.shape)
    return x[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))].copy()


def roll(x: Tensor, /, shift: Any, *, axis: Any = None) -> Tensor:
    if axis is None:
        return roll(x.reshape(-1), shift, axis=0).reshape(x.shape)
    shifts = [shift] if isinstance(shift, int) else list(shift)
    axes = [axis] if isinstance(axis, int) else list(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    out = x
    for s, a in zip(shifts, axes):
        a = shapes.normalize_axis("roll", a, x.ndim, x.shape)
        n = x.shape[a]
        if n == 0:
            continue
        s %= n
        if s:
            head = (slice(None),) * a
            out = _concat([out[head + (slice(n - s, None),)], out[head + (slice(0, n - s),)]], a)
    return out.copy()


def repeat(x: Tensor, repeats: Any, /, *, axis: int | None = None) -> Tensor:
    if axis is None:
        x, axis = x.reshape(-1), 0
    a = shapes.normalize_axis("repeat", axis, x.ndim, x.shape)
    if isinstance(repeats, int):
        moved = x.unsqueeze(a + 1)
        shape = moved.shape[: a + 1] + (repeats,) + moved.shape[a + 2 :]
        return moved.expand(shape).reshape(x.shape[:a] + (x.shape[a] * repeats,) + x.shape[a + 1 :]).copy()
    counts = np.asarray(repeats.numpy() if isinstance(repeats, Tensor) else repeats).reshape(-1)
    ids = np.repeat(np.arange(x.shape[a]), counts)  # the counts decide the shape: they are read on the host
    return index_select(x, ids.astype(np.int32), a)


def tile(x: Tensor, repetitions: Sequence[int], /) -> Tensor:
    reps = tuple(repetitions)
    nd = builtins.max(x.ndim, len(reps))
    t = x.reshape((1,) * (nd - x.ndim) + x.shape)
    reps = (1,) * (nd - len(reps)) + reps
    inter = []
    for r, d in zip(reps, t.shape):
        inter += [r, d]
    expanded = t.reshape(tuple(v for d in t.shape for v in (1, d))).expand(tuple(inter))
    return expanded.reshape(tuple(r * d for r, d in zip(reps, t.shape))).copy()


# --- linear algebra and indexing ----------------------------------------------------------


def matmul(x1: Tensor, x2: Tensor, /) -> Tensor:
    dt = promote(x1.dtype, x2.dtype, "matmul")
    if dt.is_float:
        return _matmul(x1, x2)
    a = x1.reshape(1, -1) if x1.ndim == 1 else x1  # integers: exact products summed (no GEMM kernel)
    b = x2.reshape(-1, 1) if x2.ndim == 1 else x2
    if a.shape[-1] != b.shape[-2]:
        return _matmul(x1.astype(float32), x2.astype(float32))  # raises the matmul ShapeError
    out = (a.astype(dt).unsqueeze(-1) * b.astype(dt).unsqueeze(-3)).sum(axis=-2)
    if x1.ndim == 1:
        out = out.squeeze(-2)
    if x2.ndim == 1:
        out = out.squeeze(-1)
    return out


def matrix_transpose(x: Tensor, /) -> Tensor:
    return x.mT


def tensordot(x1: Tensor, x2: Tensor, /, *, axes: Any = 2) -> Tensor:
    if isinstance(axes, int):
        a_axes, b_axes = list(range(x1.ndim - axes, x1.ndim)), list(range(axes))
    else:
        a_axes, b_axes = [list(v) if isinstance(v, Sequence) else [v] for v in axes]
    a_axes = [shapes.normalize_axis("tensordot", v, x1.ndim, x1.shape) for v in a_axes]
    b_axes = [shapes.normalize_axis("tensordot", v, x2.ndim, x2.shape) for v in b_axes]
    a_free = [i for i in range(x1.ndim) if i not in a_axes]
    b_free = [i for i in range(x2.ndim) if i not in b_axes]
    k = math.prod(x1.shape[i] for i in a_axes)
    a = x1.permute(a_free + a_axes).reshape(math.prod(x1.shape[i] for i in a_free), k)
    b = x2.permute(b_axes + b_free).reshape(k, math.prod(x2.shape[i] for i in b_free))
    out = matmul(a, b)
    return out.reshape(tuple(x1.shape[i] for i in a_free) + tuple(x2.shape[i] for i in b_free))


def vecdot(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    nd = builtins.max(x1.ndim, x2.ndim)
    a = shapes.normalize_axis("vecdot", axis, nd)
    n1, n2 = ((1,) * (nd - t.ndim) + t.shape for t in (x1, x2))
    if n1[a] != n2[a]:  # the summed axis must match exactly: it does not broadcast
        raise ShapeError(f"vecdot: shapes {x1.shape} and {x2.shape} differ along axis {axis} ({n1[a]} vs {n2[a]})")
    return (x1 * x2).sum(axis=axis)


def take(x: Tensor, indices: Any, /, *, axis: int | None = None) -> Tensor:
    if axis is None:
        if x.ndim != 1:
            raise ShapeError(f"take: axis is required for a {x.ndim}-d array (shape {x.shape})")
        axis = 0
    a = shapes.normalize_axis("take", axis, x.ndim, x.shape)
    return index_select(x, _from_the_end(indices, x.shape[a]), a)


def take_along_axis(x: Tensor, indices: Tensor, /, *, axis: int = -1) -> Tensor:
    a = shapes.normalize_axis("take_along_axis", axis, x.ndim, x.shape)
    return gather(x, _from_the_end(indices, x.shape[a]), a)


def _from_the_end(indices: Any, n: int) -> Any:
    """Negative indices count from the end (2024.12). Ids known on the host stay on the host,
    so an id still out of range gets index_select's clear error; lazy ids wrap on the GPU."""
    host = indices._lazy.host if isinstance(indices, Tensor) else np.asarray(indices)
    if host is not None:
        host = np.asarray(host)
        return np.where(host < 0, host + n, host).astype(np.int32) if host.dtype.kind == "i" else host
    return _where(indices < 0, indices + n, indices) if indices.dtype is int32 else indices


def sort(x: Tensor, /, *, axis: int = -1, descending: builtins.bool = False, stable: builtins.bool = True) -> Tensor:
    return sorting.sort(x, axis, descending=descending)  # always stable


def argsort(x: Tensor, /, *, axis: int = -1, descending: builtins.bool = False, stable: builtins.bool = True) -> Tensor:
    return sorting.argsort(x, axis, descending=descending)  # always stable: ties in index order


# --- what is not provided -----------------------------------------------------------------

DATA_DEPENDENT = "its output shape depends on the data, which a lazy array cannot know before it runs"
UNSUPPORTED = {
    "nonzero": DATA_DEPENDENT,
    "unique_all": DATA_DEPENDENT,
    "unique_counts": DATA_DEPENDENT,
    "unique_inverse": DATA_DEPENDENT,
    "unique_values": DATA_DEPENDENT,
    "acos": "no GPU kernel in wgjit yet",
    "acosh": "no GPU kernel in wgjit yet",
    "asin": "no GPU kernel in wgjit yet",
    "asinh": "no GPU kernel in wgjit yet",
    "atan": "no GPU kernel in wgjit yet",
    "atan2": "no GPU kernel in wgjit yet",
    "atanh": "no GPU kernel in wgjit yet",
    "copysign": "no GPU kernel in wgjit yet",
    "nextafter": "no GPU kernel in wgjit yet",
    "imag": "wgjit has no complex dtypes",
    "bitwise_left_shift": "integer bitwise ops have no GPU kernel in wgjit yet",
    "bitwise_right_shift": "integer bitwise ops have no GPU kernel in wgjit yet",
}


def _refuser(name: str, why: str) -> Any:
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise ArrayAPIUnsupported(f"{name}: not provided by wgjit's array API namespace: {why}")

    fn.__name__ = name
    return fn


globals().update({name: _refuser(name, why) for name, why in UNSUPPORTED.items()})


def _namespace_method(self: Tensor, *, api_version: str | None = None) -> Any:
    """The Array API namespace of wgjit's tensors (tracer.array_api, standard 2024.12)."""
    if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
        raise ValueError(f"__array_namespace__: api_version {api_version!r} is not one wgjit implements")
    return sys.modules[__name__]


def _to_device_method(self: Tensor, device: Any, /, *, stream: Any = None) -> Tensor:
    _check_device(device)
    return self


Tensor.__array_namespace__ = _namespace_method  # type: ignore[attr-defined]
Tensor.device = property(lambda self: DEVICE, doc="The device the tensor lives on (the Array API's x.device)")  # type: ignore[attr-defined]
Tensor.to_device = _to_device_method  # type: ignore[attr-defined]

EXTENSIONS = {
    "linalg": "the linalg extension (decompositions, solves, norms) has no kernels in wgjit",
    "fft": "the fft extension has no kernels in wgjit",
}


def __getattr__(name: str) -> Any:
    """Absent names (the linalg and fft extensions, other dtypes) raise AttributeError saying why."""
    why = EXTENSIONS.get(
        name, "not part of wgjit's array API namespace (wgjit stores bool, int32, uint32, float32, float16)"
    )
    raise AttributeError(f"tracer.array_api.{name}: {why}")
