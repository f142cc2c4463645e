"""numpy calls on Tensors: `np.exp(x)`, `np.sum(x, axis=0)`, `np.concatenate([x, y])`, `x + ndarray`.

numpy hands a ufunc call with a Tensor operand to `Tensor.__array_ufunc__`, and a numpy function
call (`np.sum`, `np.where`, ...) to `Tensor.__array_function__`; both land here. Where wgjit has
the op, the call stays lazy on the GPU and returns a Tensor (numpy arrays among the operands are
uploaded). Where it has not (a ufunc or function missing below, or an argument it does not
take, such as `where=` on a ufunc), the Tensors are read back and numpy computes the result on
the host, returning a numpy array: `host_fallbacks()` counts those calls, and
`WGJIT_NUMPY_FALLBACK=error` turns them into errors.

`out=`: a Tensor `out` is updated in place (numpy's same_kind casting, as `x += y`), a numpy
`out` receives the result read back; any other `out` is refused.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ir import shapes
from ir.dtypes import DType, to_dtype
from ir.errors import DTypeError, ShapeError
from ir.ops import Op
from tracer import sorting
from tracer.factories import full
from tracer.mutation import assign_result
from tracer.nn import gather, index_select
from tracer.tensor import Tensor, as_tensor, binary, clamp, concat, logical_xor, matmul, maximum, minimum, stack, where

FALLBACKS: Counter[str] = Counter()  # numpy calls computed on the host, by name


def host_fallbacks() -> dict[str, int]:
    """How often each numpy call on Tensors fell back to the host (numpy), since the start."""
    return dict(FALLBACKS)


# --- ufuncs ---------------------------------------------------------------------------------

# numpy ufunc name -> Tensor method (unary) taken when the Tensor has it (the op table grows it)
UNARY_METHODS = {
    "absolute": "abs", "fabs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos",
    "tanh": "tanh", "square": "square", "floor": "floor", "ceil": "ceil", "sign": "sign", "log1p": "log1p",
    "expm1": "expm1", "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite", "trunc": "trunc",
    "rint": "round", "exp2": "exp2", "log2": "log2", "log10": "log10", "tan": "tan", "sinh": "sinh",
    "cosh": "cosh", "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
    "arccosh": "acosh", "arctanh": "atanh", "cbrt": "cbrt", "signbit": "signbit",
}  # fmt: skip
FLOAT_ONLY_UNARY = {"reciprocal"}  # numpy's integer reciprocal truncates; wgjit's is float


def _binary_methods() -> dict[str, Callable[[Any, Any], Tensor]]:
    b = binary
    ops = Op
    return {
        "add": lambda x, y: b(ops.ADD, x, y),
        "subtract": lambda x, y: b(ops.SUB, x, y),
        "multiply": lambda x, y: b(ops.MUL, x, y),
        "true_divide": lambda x, y: b(ops.DIV, x, y),
        "divide": lambda x, y: b(ops.DIV, x, y),
        "floor_divide": lambda x, y: b(ops.FLOORDIV, x, y),
        "remainder": lambda x, y: b(ops.MOD, x, y),
        "power": lambda x, y: as_tensor(x, "power") ** y if not isinstance(x, Tensor) else x**y,
        "maximum": maximum,
        "minimum": minimum,
        "less": lambda x, y: b(ops.LT, x, y),
        "less_equal": lambda x, y: b(ops.LE, x, y),
        "greater": lambda x, y: b(ops.GT, x, y),
        "greater_equal": lambda x, y: b(ops.GE, x, y),
        "equal": lambda x, y: b(ops.EQ, x, y),
        "not_equal": lambda x, y: b(ops.NE, x, y),
        "logical_and": lambda x, y: b(ops.AND, _truth(x), _truth(y)),
        "logical_or": lambda x, y: b(ops.OR, _truth(x), _truth(y)),
        "logical_xor": lambda x, y: logical_xor(_truth(x), _truth(y)),
        "bitwise_and": lambda x, y: _bool_only("bitwise_and", x, y, ops.AND),
        "bitwise_or": lambda x, y: _bool_only("bitwise_or", x, y, ops.OR),
        "bitwise_xor": lambda x, y: logical_xor(x, y),
        "matmul": matmul,
    }


def _truth(x: Any) -> Any:
    """numpy's logical ops read any number as x != 0."""
    if isinstance(x, Tensor):
        return x if x.dtype is DType.bool else x != 0
    if isinstance(x, np.ndarray):
        return x.astype(bool)
    return bool(x) if isinstance(x, int | float | bool | np.generic) else x


def _bool_only(name: str, x: Any, y: Any, op: Op) -> Tensor:
    out = binary(op, x, y) if _is_bool(x) and _is_bool(y) else None
    if out is None:
        raise _Unsupported(f"{name} of integers (bitwise) is not supported yet")
    return out


def _is_bool(x: Any) -> bool:
    if isinstance(x, Tensor):
        return x.dtype is DType.bool
    return isinstance(x, bool | np.bool_) or (isinstance(x, np.ndarray) and x.dtype == np.bool_)


class _Unsupported(Exception):
    """wgjit has no lazy version of this call: numpy computes it on the host."""


def array_ufunc(x: Tensor, ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Tensor.__array_ufunc__: the call on the GPU where wgjit has it, else on the host."""
    if any(not _known(i) for i in inputs):
        return NotImplemented
    out = kwargs.pop("out", None)
    out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    try:
        result = _ufunc_lazy(ufunc, method, inputs, kwargs)
    except _Unsupported as why:
        return _on_host(f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}"), str(why), ufunc,
                        method, inputs, kwargs, out)  # fmt: skip
    return _store(result, out, f"np.{ufunc.__name__}")


def _ufunc_lazy(ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    name = ufunc.__name__
    dtype = kwargs.pop("dtype", None)
    if method == "reduce":
        axis, keepdims = kwargs.pop("axis", 0), kwargs.pop("keepdims", False)
        if kwargs or dtype is not None:
            raise _Unsupported(f"the argument(s) {sorted(kwargs) + (['dtype'] if dtype is not None else [])}")
        return _ufunc_reduce(name, inputs, axis, keepdims)
    if kwargs:
        raise _Unsupported(f"the argument(s) {sorted(kwargs)}")
    if method != "__call__":
        if method == "at":
            raise DTypeError(f"np.{name}.at on a Tensor: write x[idx] = np.{name}(x[idx], v) (repeated ids apply once)")
        raise _Unsupported(f"ufunc method {method}")
    if dtype is not None:
        inputs = tuple(as_tensor(i, name).astype(to_dtype(dtype)) for i in inputs)
    if len(inputs) == 1:
        (a,) = inputs
        if name == "negative":
            return -a
        if name == "positive":
            return a.copy()
        if name == "logical_not" or (name == "invert" and a.dtype is DType.bool):
            return ~_truth(a)
        if name == "reciprocal" and a.dtype.is_float:
            return a.reciprocal()
        method_name = UNARY_METHODS.get(name)
        if method_name is not None and hasattr(a, method_name):
            return getattr(a, method_name)()
        raise _Unsupported(f"the ufunc {name} for {a.dtype.value}")
    fn = _binary_methods().get(name)
    if fn is None or len(inputs) != 2:
        raise _Unsupported(f"the ufunc {name}")
    return fn(*inputs)


_REDUCE_METHODS = {"add": "sum", "maximum": "max", "minimum": "min", "multiply": "prod", "logical_and": "all",
                   "logical_or": "any"}  # fmt: skip


def _ufunc_reduce(name: str, inputs: tuple[Any, ...], axis: Any, keepdims: bool) -> Tensor:
    method = _REDUCE_METHODS.get(name)
    (a,) = inputs
    if method is None or not hasattr(a, method):
        raise _Unsupported(f"np.{name}.reduce")
    return getattr(a, method)(axis=axis, keepdims=keepdims)


# --- numpy functions ------------------------------------------------------------------------

NO_VALUE = np._NoValue  # numpy's "argument not given" marker  # noqa: SLF001


def _given(**kwargs: Any) -> list[str]:
    return [k for k, v in kwargs.items() if v is not None and v is not NO_VALUE and v is not False]


def _reduction(method: str) -> Callable[..., Tensor]:
    def fn(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **rest: Any) -> Any:
        unsupported = _given(**rest)
        if unsupported:
            raise _Unsupported(f"the argument(s) {unsupported}")
        x = _tensor(a, method)
        if dtype is not None:
            x = x.astype(to_dtype(dtype))
        keep = {} if keepdims is NO_VALUE else {"keepdims": bool(keepdims)}
        return _store(getattr(x, method)(axis=axis, **keep), out, f"np.{method}")

    return fn


def _argreduction(method: str) -> Callable[..., Tensor]:
    def fn(a: Any, axis: Any = None, out: Any = None, *, keepdims: Any = NO_VALUE) -> Any:
        keep = {} if keepdims is NO_VALUE else {"keepdims": bool(keepdims)}
        return _store(getattr(_tensor(a, method), method)(axis=axis, **keep), out, f"np.{method}")

    return fn


def _concatenate(arrays: Any, axis: Any = 0, out: Any = None, dtype: Any = None, casting: Any = None) -> Any:
    ts = [_tensor(a, "concatenate") for a in arrays]
    if axis is None:
        ts, axis = [t.reshape(-1) for t in ts], 0
    if dtype is not None:
        ts = [t.astype(to_dtype(dtype)) for t in ts]
    return _store(concat(ts, axis), out, "np.concatenate")


def _stack(arrays: Any, axis: int = 0, out: Any = None, dtype: Any = None, casting: Any = None) -> Any:
    ts = [_tensor(a, "stack") for a in arrays]
    if dtype is not None:
        ts = [t.astype(to_dtype(dtype)) for t in ts]
    return _store(stack(ts, axis), out, "np.stack")


def _where(condition: Any, *xy: Any) -> Tensor:
    if len(xy) != 2:
        raise _Unsupported("np.where(condition) (nonzero: its length depends on the data)")
    return where(condition, *xy)


def _reshape(a: Any, *args: Any, **kwargs: Any) -> Tensor:
    shape = kwargs.pop("shape", kwargs.pop("newshape", args[0] if args else None))
    if kwargs.pop("order", "C") != "C" or (len(args) > 1 and args[1] != "C"):
        raise _Unsupported("order other than 'C'")
    return _tensor(a, "reshape").reshape(shape)


def _transpose(a: Any, axes: Any = None) -> Tensor:
    x = _tensor(a, "transpose")
    return x.permute(tuple(reversed(range(x.ndim))) if axes is None else tuple(axes))


def _expand_dims(a: Any, axis: Any) -> Tensor:
    x = _tensor(a, "expand_dims")
    axes = (axis,) if not isinstance(axis, tuple | list) else tuple(axis)
    n = x.ndim + len(axes)
    norm = sorted(shapes.normalize_axis("expand_dims", ax, n) for ax in axes)
    shape = list(x.shape)
    for ax in norm:
        shape.insert(ax, 1)
    return x.reshape(tuple(shape))


def _like(value: Any) -> Callable[..., Tensor]:
    def fn(a: Any, dtype: Any = None, order: Any = "K", subok: Any = True, shape: Any = None, **rest: Any) -> Tensor:
        x = _tensor(a, "like")
        dt = to_dtype(dtype) if dtype is not None else x.dtype
        return full(x.shape if shape is None else tuple(np.atleast_1d(shape)), value, dt)

    return fn


def _full_like(
    a: Any, fill_value: Any, dtype: Any = None, order: Any = "K", subok: Any = True, shape: Any = None
) -> Any:
    x = _tensor(a, "full_like")
    dt = to_dtype(dtype) if dtype is not None else x.dtype
    return full(x.shape if shape is None else tuple(np.atleast_1d(shape)), fill_value, dt)


def _clip(a: Any, a_min: Any = NO_VALUE, a_max: Any = NO_VALUE, out: Any = None, **kwargs: Any) -> Any:
    lo = kwargs.pop("min", a_min)
    hi = kwargs.pop("max", a_max)
    if kwargs:
        raise _Unsupported(f"the argument(s) {sorted(kwargs)}")
    lo = None if lo is NO_VALUE else lo
    hi = None if hi is NO_VALUE else hi
    return _store(clamp(_tensor(a, "clip"), lo, hi), out, "np.clip")


def _take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: Any = "raise") -> Any:
    x = _tensor(a, "take")
    if axis is None:
        x, axis = x.reshape(-1), 0
    if mode != "raise":
        raise _Unsupported(f"mode={mode!r}")
    return _store(index_select(x, indices, axis), out, "np.take")


def _take_along_axis(arr: Any, indices: Any, axis: Any) -> Tensor:
    return gather(_tensor(arr, "take_along_axis"), indices, axis)


def _copy(a: Any, order: Any = "K", subok: Any = False) -> Tensor:
    return _tensor(a, "copy").copy()


def _astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    return _tensor(x, "astype").astype(to_dtype(dtype), copy=copy)


def _squeeze(a: Any, axis: Any = None) -> Tensor:
    return _tensor(a, "squeeze").squeeze(axis)


def _broadcast_to(array: Any, shape: Any, subok: bool = False) -> Tensor:
    return _tensor(array, "broadcast_to").broadcast_to(tuple(np.atleast_1d(shape)) if np.ndim(shape) else (shape,))


def _ravel(a: Any, order: Any = "C") -> Tensor:
    return _tensor(a, "ravel").ravel()


def _by_method(name: str) -> Callable[..., Any]:
    """A numpy function that is a Tensor method of the same name with the same arguments (the ops' table)."""

    def fn(a: Any, *args: Any, **kwargs: Any) -> Any:
        out = kwargs.pop("out", None)
        x = _tensor(a, name)
        if not hasattr(x, name):
            raise _Unsupported(f"np.{name}")
        return _store(getattr(x, name)(*args, **kwargs), out, f"np.{name}")

    return fn


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sum": _reduction("sum"),
    "mean": _reduction("mean"),
    "max": _reduction("max"),
    "amax": _reduction("max"),
    "min": _reduction("min"),
    "amin": _reduction("min"),
    "prod": _reduction("prod"),
    "any": _reduction("any"),
    "all": _reduction("all"),
    "argmax": _argreduction("argmax"),
    "argmin": _argreduction("argmin"),
    "concatenate": _concatenate,
    "concat": _concatenate,
    "stack": _stack,
    "where": _where,
    "reshape": _reshape,
    "transpose": _transpose,
    "permute_dims": _transpose,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "broadcast_to": _broadcast_to,
    "ravel": _ravel,
    "zeros_like": _like(0),
    "ones_like": _like(1),
    "empty_like": _like(0),
    "full_like": _full_like,
    "clip": _clip,
    "take": _take,
    "take_along_axis": _take_along_axis,
    "copy": _copy,
    "astype": _astype,
    "shape": lambda a: _tensor(a, "shape").shape,
    "ndim": lambda a: _tensor(a, "ndim").ndim,
    "size": lambda a, axis=None: _tensor(a, "size").size if axis is None else _tensor(a, "size").shape[axis],
    "matmul": matmul,
    # the ops' table (issue 15 item 1) adds these as Tensor methods; numpy's signature where it matches
    "sort": sorting.sort,  # x.sort() sorts in place, as ndarray.sort; np.sort returns a copy
    "argsort": sorting.argsort,
    **{name: _by_method(name) for name in ("var", "std", "cumsum", "cumprod", "flip", "roll",
                                           "tile", "repeat", "swapaxes", "moveaxis", "dot", "vdot", "outer",
                                           "round", "nan_to_num", "tril", "triu", "logsumexp", "split")},
}  # fmt: skip


def stays_lazy(name: str) -> bool:
    """Whether `np.<name>(x)` on a Tensor stays lazy on the GPU (else numpy computes it on the host)."""
    if name in FUNCTIONS or name in _binary_methods() or name in ("negative", "positive", "logical_not", "reciprocal"):
        return True
    return name in UNARY_METHODS and hasattr(Tensor, UNARY_METHODS[name])


def array_function(func: Any, types: tuple[type, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Tensor.__array_function__: the call on the GPU where wgjit has it, else on the host."""
    if any(not issubclass(t, Tensor | np.ndarray) for t in types):
        return NotImplemented
    name = func.__name__
    impl = FUNCTIONS.get(name)
    if impl is not None:
        try:
            return impl(*args, **kwargs)
        except _Unsupported as why:
            return _on_host(f"np.{name}", str(why), func, None, args, kwargs, None)
    return _on_host(f"np.{name}", "wgjit has no lazy version of it", func, None, args, kwargs, None)


# --- helpers --------------------------------------------------------------------------------


def _known(x: Any) -> bool:
    return isinstance(x, Tensor | np.ndarray | np.generic | bool | int | float | list | tuple)


def _tensor(a: Any, op: str) -> Tensor:
    return a if isinstance(a, Tensor) else as_tensor(a, op)


def _store(result: Any, out: Any, op: str) -> Any:
    """numpy's out=: a Tensor is updated in place, an ndarray receives the values read back."""
    if out is None:
        return result
    if isinstance(out, tuple) and len(out) == 1:
        out = out[0]
    if isinstance(out, Tensor):
        if not isinstance(result, Tensor):
            result = as_tensor(result, op)
        assign_result(out, f"{op}(out=)", result)
        return out
    if isinstance(out, np.ndarray):
        np.copyto(out, np.asarray(result), casting="same_kind")
        return out
    raise DTypeError(f"{op}: out= must be a Tensor or a numpy array, got {type(out).__name__}")


def _to_host(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.numpy()
    if isinstance(x, list | tuple):
        return type(x)(_to_host(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_host(v) for k, v in x.items()}
    return x


def _on_host(
    what: str,
    why: str,
    fn: Any,
    method: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Any,
) -> Any:
    """numpy computes the call on values read back from the GPU; the result is a numpy array."""
    if os.environ.get("WGJIT_NUMPY_FALLBACK", "") == "error":
        raise DTypeError(
            f"{what} on a Tensor would be computed on the host by numpy ({why}); WGJIT_NUMPY_FALLBACK=error"
        )
    FALLBACKS[what] += 1
    host_args, host_kwargs = _to_host(args), _to_host(kwargs)
    if isinstance(out, Tensor):
        raise ShapeError(f"{what}: out= a Tensor needs the GPU version of the call, which wgjit lacks ({why})")
    if out is not None:
        host_kwargs["out"] = out if isinstance(out, tuple) else (out,)
    if method is None:
        return fn(*host_args, **host_kwargs)
    return getattr(fn, method)(*host_args, **host_kwargs) if method != "__call__" else fn(*host_args, **host_kwargs)


def _array_ufunc_method(self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """`np.exp(x)`, `ndarray + x`, ...: lazy on the GPU where wgjit has the op (tracer.interop)."""
    return array_ufunc(self, ufunc, method, inputs, kwargs)


def _array_function_method(self: Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    """`np.sum(x)`, `np.concatenate([x, y])`, ...: lazy on the GPU where wgjit has it (tracer.interop)."""
    return array_function(func, types, args, kwargs)


Tensor.__array_ufunc__ = _array_ufunc_method  # type: ignore[attr-defined]
Tensor.__array_function__ = _array_function_method  # type: ignore[attr-defined]
