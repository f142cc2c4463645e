"""The lazy Tensor: every op records a node; values are computed only when asked for.

The Tensor wraps a `Lazy` (tracer.lazy); `Tensor._lazy` is the tracer's internal handle to
it. Tensors are made here from Lazies: host data and python scalars enter through
tracer.host, device limits are checked by tracer.limits, and tracer.realize computes and
reads values. The creation functions (tr.tensor, tr.zeros, tr.arange...) live beside this
module in tracer.factories.
"""

from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from backend_wgpu import Program
from ir import shapes
from ir.dtypes import DType, promote, scalar_dtype, to_dtype
from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError
from ir.graph import Graph
from ir.ops import FLOAT_ONLY, MOVEMENT, Op
from tracer.graph_builder import build_graph
from tracer.host import CONSTANTS, lazy_from_data
from tracer.indexing import resolve_index
from tracer.lazy import Lazy
from tracer.limits import check_binding_size, check_float16, max_storage_buffers
from tracer.quantized import check_quantized_operands, refuse, refuse_read, transposed_leaf
from tracer.realize import compile_lazies, read_lazy, realize_lazies
from tracer.tracing import note_rebind

Scalar = bool | int | float
Operand = "Tensor | Scalar"


class Tensor:
    """A lazily computed n-dimensional array on the GPU.

    Nothing runs when an op is called; `numpy()`, `item()`, `tolist()` and `realize()`
    compile and run what is needed. `repr()` never computes anything.
    """

    __slots__ = ("_lazy", "__weakref__")
    __array_priority__ = 1000  # so numpy defers `ndarray + Tensor` to us

    def __init__(self, lazy: Lazy) -> None:
        self._lazy = lazy
        lazy.handles.add(self)

    # --- properties ---------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._lazy.shape

    @property
    def dtype(self) -> DType:
        return self._lazy.dtype

    @property
    def ndim(self) -> int:
        return len(self._lazy.shape)

    @property
    def size(self) -> int:
        return math.prod(self._lazy.shape)

    @property
    def is_realized(self) -> bool:
        return self._lazy.buffer is not None or self._lazy.host is not None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "realized" if self.is_realized else f"lazy {self._lazy.op.value}"
        return f"Tensor(shape={self.shape}, dtype={self.dtype.value}, {state})"

    # --- realization --------------------------------------------------------------
    def realize(self) -> Tensor:
        realize_lazies(_lazies((self,)))
        return self

    def numpy(self) -> np.ndarray:
        refuse_read(self._lazy, "numpy")
        return read_lazy(self._lazy)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def item(self) -> Scalar:
        if self.size != 1:
            raise ShapeError(
                f"item: tensor of shape {self.shape} has {self.size} elements, not 1; use numpy() or tolist()"
            )
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_float or self.dtype is DType.bool:
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype.value}")
        return int(self.item())

    def __iter__(self):  # noqa: ANN204
        for i in range(len(self)):
            yield self[i]

    def __hash__(self) -> int:
        return id(self)

    # --- elementwise ---------------------------------------------------------------
    def __add__(self, o: Any) -> Tensor:
        return binary(Op.ADD, self, o)

    def __radd__(self, o: Any) -> Tensor:
        return binary(Op.ADD, o, self)

    def __sub__(self, o: Any) -> Tensor:
        return binary(Op.SUB, self, o)

    def __rsub__(self, o: Any) -> Tensor:
        return binary(Op.SUB, o, self)

    def __mul__(self, o: Any) -> Tensor:
        return binary(Op.MUL, self, o)

    def __rmul__(self, o: Any) -> Tensor:
        return binary(Op.MUL, o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return binary(Op.DIV, self, o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return binary(Op.DIV, o, self)

    def __floordiv__(self, o: Any) -> Tensor:
        return binary(Op.FLOORDIV, self, o)

    def __rfloordiv__(self, o: Any) -> Tensor:
        return binary(Op.FLOORDIV, o, self)

    def __mod__(self, o: Any) -> Tensor:
        return binary(Op.MOD, self, o)

    def __rmod__(self, o: Any) -> Tensor:
        return binary(Op.MOD, o, self)

    def __pow__(self, o: Any) -> Tensor:
        if isinstance(o, int) and not isinstance(o, bool) and o < 0 and not self.dtype.is_float:
            raise DTypeError(
                f"pow: {self.dtype.value} tensor of shape {self.shape} to the negative power {o}: integers to "
                "negative integer powers are not allowed (as numpy); cast to float first: x.astype(tr.float32) ** n"
            )
        if isinstance(o, int | float) and not isinstance(o, bool) and o == 2:
            return unary(Op.SQUARE, self)
        return binary(Op.POW, self, o)

    def __rpow__(self, o: Any) -> Tensor:
        return binary(Op.POW, o, self)

    def __matmul__(self, o: Any) -> Tensor:
        return matmul(self, o)

    def __rmatmul__(self, o: Any) -> Tensor:
        return matmul(o, self)

    def __lt__(self, o: Any) -> Tensor:
        return binary(Op.LT, self, o)

    def __le__(self, o: Any) -> Tensor:
        return binary(Op.LE, self, o)

    def __gt__(self, o: Any) -> Tensor:
        return binary(Op.GT, self, o)

    def __ge__(self, o: Any) -> Tensor:
        return binary(Op.GE, self, o)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return binary(Op.EQ, self, o)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return binary(Op.NE, self, o)

    def __and__(self, o: Any) -> Tensor:
        return binary(Op.AND, self, o)

    def __or__(self, o: Any) -> Tensor:
        return binary(Op.OR, self, o)

    def __invert__(self) -> Tensor:
        if self.dtype is not DType.bool:
            raise DTypeError(f"~: only bool tensors, got {self.dtype.value}")
        return unary(Op.NOT, self)

    def __neg__(self) -> Tensor:
        return unary(Op.NEG, self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return unary(Op.ABS, self)

    def abs(self) -> Tensor:
        return unary(Op.ABS, self)

    def exp(self) -> Tensor:
        return unary(Op.EXP, self)

    def log(self) -> Tensor:
        return unary(Op.LOG, self)

    def sqrt(self) -> Tensor:
        return unary(Op.SQRT, self)

    def rsqrt(self) -> Tensor:
        return unary(Op.RSQRT, self)

    def reciprocal(self) -> Tensor:
        return unary(Op.RECIPROCAL, self)

    def square(self) -> Tensor:
        return unary(Op.SQUARE, self)

    def sin(self) -> Tensor:
        return unary(Op.SIN, self)

    def cos(self) -> Tensor:
        return unary(Op.COS, self)

    def tanh(self) -> Tensor:
        return unary(Op.TANH, self)

    def sigmoid(self) -> Tensor:
        return unary(Op.SIGMOID, self)

    def relu(self) -> Tensor:
        return unary(Op.RELU, self)

    def gelu(self, approximate: str = "none") -> Tensor:
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return unary(Op.GELU if approximate == "none" else Op.GELU_TANH, self)

    def silu(self) -> Tensor:
        return unary(Op.SILU, self)

    def erf(self) -> Tensor:
        return unary(Op.ERF, self)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return clamp(self, min, max)

    def masked_fill(self, mask: Any, value: Scalar) -> Tensor:
        return masked_fill(self, mask, value)

    def index_write(self, src: Any, offsets: Sequence[int]) -> Tensor:
        """Write `src` into this tensor at per-axis `offsets`, in place; returns self (see index_write below)."""
        return index_write(self, src, offsets)

    def floor(self) -> Tensor:
        return self if not self.dtype.is_float else unary(Op.FLOOR, self)

    def ceil(self) -> Tensor:
        return self if not self.dtype.is_float else unary(Op.CEIL, self)

    def astype(self, dtype: DType | str | type) -> Tensor:
        dt = to_dtype(dtype)
        if dt is self.dtype:
            return self
        if dt.is_quantized:
            raise DTypeError(
                f"astype: {self.dtype.value} tensor of shape {self.shape} to {dt.value}: quantizing runs on the "
                f"host, tr.quantize(array, tr.{dt.value})"
            )
        if self._lazy.op is Op.PERMUTE and self._lazy.srcs[0].dtype.is_quantized:  # w.T.astype(): dequantize w
            return Tensor(self._lazy.srcs[0]).astype(dt).permute(self._lazy.arg)
        if self.dtype.is_quantized and not dt.is_float:
            raise DTypeError(f"astype: {self.dtype.value} dequantizes to float32 or float16, not {dt.value}")
        return make(Op.CAST, (self,), self.shape, dt)

    # --- reductions ---------------------------------------------------------------
    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        x = self.astype(DType.int32) if self.dtype is DType.bool else self
        return reduce(Op.SUM, x, axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        x = self if self.dtype.is_float else self.astype(DType.float32)
        axes = shapes.normalize_axes("mean", axis, self.shape)
        n = math.prod(self.shape[a] for a in axes)
        total = reduce(Op.SUM, x, axis, keepdims)
        return total * (1.0 / n) if n else total * float("nan")

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return reduce(Op.MAX, self, axis, keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return reduce(Op.MIN, self, axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return arg_reduce(Op.ARGMAX, self, axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return arg_reduce(Op.ARGMIN, self, axis, keepdims)

    def softmax(self, axis: int = -1) -> Tensor:
        return row_op(Op.SOFTMAX, self, axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return row_op(Op.LOG_SOFTMAX, self, axis)

    # --- movement -----------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        new = shapes.resolve_reshape("reshape", self.shape, _shape_arg(shape))
        if new == self.shape:
            return self
        return make(Op.RESHAPE, (self,), new, self.dtype, new)

    def permute(self, *order: Any) -> Tensor:
        perm = shapes.check_permutation("permute", _shape_arg(order), self.shape)
        if perm == tuple(range(self.ndim)):
            return self
        return make(Op.PERMUTE, (self,), tuple(self.shape[i] for i in perm), self.dtype, perm)

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Tensor:
        if self.ndim < 2 and (axis0, axis1) == (-2, -1):
            return self
        a = shapes.normalize_axis("transpose", axis0, self.ndim, self.shape)
        b = shapes.normalize_axis("transpose", axis1, self.ndim, self.shape)
        if self.ndim == 0:  # axes 0/-1 of a 0-d tensor: nothing to swap
            return self
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape: Any) -> Tensor:
        new = shapes.check_expand("expand", self.shape, _shape_arg(shape))
        if new == self.shape:
            return self
        return make(Op.EXPAND, (self,), new, self.dtype, new)

    def broadcast_to(self, *shape: Any) -> Tensor:
        return self.expand(*shape)

    def squeeze(self, axis: int | Sequence[int] | None = None) -> Tensor:
        if axis is None:
            axes = tuple(i for i, d in enumerate(self.shape) if d == 1)
        else:
            axes = shapes.normalize_axes("squeeze", axis, self.shape)
            for a in axes:
                if self.shape[a] != 1:
                    raise ShapeError(
                        f"squeeze: axis {a} of shape {self.shape} has size {self.shape[a]}, not 1; "
                        "only size-1 axes can be squeezed"
                    )
        return self.reshape(tuple(d for i, d in enumerate(self.shape) if i not in axes))

    def unsqueeze(self, axis: int) -> Tensor:
        a = shapes.normalize_axis("unsqueeze", axis, self.ndim + 1, self.shape)
        return self.reshape(self.shape[:a] + (1,) + self.shape[a:])

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s = shapes.normalize_axis("flatten", start_axis, self.ndim, self.shape)
        e = shapes.normalize_axis("flatten", end_axis, self.ndim, self.shape)
        if s > e:
            raise ShapeError(
                f"flatten: start axis {start_axis} comes after end axis {end_axis} (shape {self.shape}); swap them"
            )
        return self.reshape(self.shape[:s] + (math.prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def contiguous(self) -> Tensor:
        return make(Op.COPY, (self,), self.shape, self.dtype)

    def __getitem__(self, index: Any) -> Tensor:
        view = resolve_index(self.shape, index)
        y = self if view.slices is None else make(Op.SLICE, (self,), view.sliced_shape, self.dtype, view.slices)
        return y.reshape(view.shape)

    # --- debugging ----------------------------------------------------------------
    def graph(self) -> Graph:
        """The ir.Graph that would compute this tensor (nothing runs)."""
        return build_graph([self._lazy]).graph


# --- realization of several tensors at once ------------------------------------------


def _lazies(tensors: tuple[Any, ...]) -> list[Lazy]:
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensors, got {type(t).__name__}")
    # w.T of a quantized w is a view computed by nothing: realizing it uploads w
    return [t._lazy.srcs[0] if transposed_leaf(t._lazy) else t._lazy for t in tensors]


def realize(*tensors: Tensor) -> None:
    """Compute every given tensor that is still pending, in one submission."""
    realize_lazies(_lazies(tensors))


def compile(*tensors: Tensor) -> Program:  # noqa: A001  (tr.compile, as the API names it)
    """The compiled program that would compute these tensors, without running it."""
    return compile_lazies(_lazies(tensors))


# --- node construction ---------------------------------------------------------------


def make(op: Op, srcs: tuple[Tensor, ...], shape: tuple[int, ...], dtype: DType, arg: Any = None) -> Tensor:
    check_quantized_operands(op, tuple(s._lazy for s in srcs), dtype, arg)
    if op not in MOVEMENT:  # views add no bytes
        check_binding_size(op.value, shape, dtype, math.prod(shape) * dtype.itemsize)
    if dtype is DType.float16 and not any(s.dtype is DType.float16 for s in srcs):
        check_float16(op.value, shape)  # where float16 enters a graph, not later at realize
    return Tensor(Lazy(op, tuple(s._lazy for s in srcs), shape, dtype, arg))


def from_data(data: Any, dtype: DType | str | None = None) -> Tensor:
    """A tensor holding a copy of host data (tr.tensor; see tracer.host.host_array)."""
    return Tensor(lazy_from_data(data, dtype))


def constant(value: bool | int | float, dtype: DType) -> Tensor:
    """A 0-d tensor for a python scalar, from the constants cache (tracer.host.CONSTANTS)."""
    return Tensor(CONSTANTS.get(value, dtype))


def as_tensor(x: Any, op: str, what: str = "x") -> Tensor:
    """x as a Tensor: Tensors pass, arrays, lists and scalars become host data; others are refused."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray | list | tuple | int | float | bool | np.generic):
        return from_data(x)
    raise DTypeError(f"{op}: {what} must be a Tensor or array-like, got {type(x).__name__}")


def _shape_arg(args: tuple[Any, ...]) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], list | tuple):
        args = tuple(args[0])
    out = []
    for a in args:
        try:
            out.append(operator.index(a))
        except TypeError:
            raise ShapeError(f"shape entries must be ints, got {a!r}") from None
    return tuple(out)


def as_tensors(op: str, a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Bring a pair of operands to tensors, python scalars taking numpy's weak dtype."""
    for t in (a, b):
        if isinstance(t, Tensor) and t.dtype.is_quantized:
            refuse(op, t.dtype, t.shape)
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a, b
    if isinstance(a, Tensor):
        return a, _scalar_operand(op, b, a.dtype)
    if isinstance(b, Tensor):
        return _scalar_operand(op, a, b.dtype), b
    raise DTypeError(f"{op}: needs at least one tensor, got {type(a).__name__} and {type(b).__name__}")


def _scalar_operand(op: str, value: Any, other: DType) -> Tensor:
    if isinstance(value, np.ndarray | np.generic | list):
        return from_data(value)
    if not isinstance(value, bool | int | float):
        raise DTypeError(f"{op}: cannot combine a tensor with {type(value).__name__}")
    dt = scalar_dtype(value, other)
    if dt.is_int and isinstance(value, int) and not np.iinfo(dt.np).min <= value <= np.iinfo(dt.np).max:
        raise DTypeError(f"{op}: python int {value} does not fit {dt.value}")
    return constant(value, dt)


def broadcast_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    if x.shape == shape:
        return x
    return make(Op.EXPAND, (x,), shape, x.dtype, shape)


def unary(op: Op, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op.value}: expected a Tensor, got {type(x).__name__}")
    if op in FLOAT_ONLY and not x.dtype.is_float:
        x = x.astype(DType.float32)
    if op in (Op.NEG, Op.ABS, Op.SQUARE, Op.RELU) and x.dtype is DType.bool:
        raise DTypeError(f"{op.value}: not defined for bool tensors; use ~ or astype()")
    return make(op, (x,), x.shape, x.dtype)


def binary(op: Op, a: Any, b: Any) -> Tensor:
    name = op.value
    a, b = as_tensors(name, a, b)
    dt = promote(a.dtype, b.dtype, name)
    if op in (Op.AND, Op.OR) and dt is not DType.bool:
        raise DTypeError(f"{name}: logical ops need bool tensors, got {a.dtype.value} and {b.dtype.value}")
    if op in FLOAT_ONLY and not dt.is_float:
        dt = DType.float32
    if dt is DType.bool and op in (Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.MOD, Op.POW):
        raise DTypeError(f"{name}: arithmetic on bool tensors; cast with astype() first")
    shape = shapes.broadcast_shapes(name, a.shape, b.shape)
    a = broadcast_to(a.astype(dt), shape)
    b = broadcast_to(b.astype(dt), shape)
    out = DType.bool if op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE) else dt
    return make(op, (a, b), shape, out)


def where(cond: Any, a: Any, b: Any) -> Tensor:
    if not isinstance(cond, Tensor):
        cond = from_data(cond)
    cond = cond if cond.dtype is DType.bool else cond != 0
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = from_data(a)
    a, b = as_tensors("where", a, b)
    dt = promote(a.dtype, b.dtype, "where")
    shape = shapes.broadcast_shapes("where", cond.shape, a.shape, b.shape)
    srcs = (broadcast_to(cond, shape), broadcast_to(a.astype(dt), shape), broadcast_to(b.astype(dt), shape))
    return make(Op.WHERE, srcs, shape, dt)


def maximum(a: Any, b: Any) -> Tensor:
    return binary(Op.MAXIMUM, a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return binary(Op.MINIMUM, a, b)


def _move_axes_last(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    kept = [i for i in range(x.ndim) if i not in axes]
    return x.permute(kept + list(axes))


def reduce(op: Op, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    name = op.value
    axes = shapes.normalize_axes(name, axis, x.shape)
    if op in (Op.MAX, Op.MIN) and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            f"{name}: zero-size reduction over axes {axes} of shape {x.shape} has no identity; "
            "reduce non-empty axes (sum and mean do accept empty ones)"
        )
    if x.dtype is DType.bool and op in (Op.MAX, Op.MIN):
        x = x.astype(DType.int32)
        return reduce(op, x, axis, keepdims).astype(DType.bool)
    kept_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    out = make(op, (_move_axes_last(x, axes),), kept_shape, x.dtype, len(axes))
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def arg_reduce(op: Op, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    name = op.value
    if axis is None:
        axes = tuple(range(x.ndim))
    else:
        axes = (shapes.normalize_axis(name, axis, x.ndim, x.shape),)
    if any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            f"{name}: attempt to get {name} of an empty sequence (shape {x.shape}); the axis must be non-empty"
        )
    if x.dtype is DType.bool:
        x = x.astype(DType.int32)
    kept_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    out = make(op, (_move_axes_last(x, axes),), kept_shape, DType.int32, len(axes))
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def row_op(op: Op, x: Tensor, axis: int) -> Tensor:
    a = shapes.normalize_axis(op.value, axis, x.ndim, x.shape)
    if not x.dtype.is_float:
        x = x.astype(DType.float32)
    if x.ndim == 0:
        return make(op, (x.reshape(1),), (1,), x.dtype).reshape(())
    if a == x.ndim - 1:
        return make(op, (x,), x.shape, x.dtype)
    order = [i for i in range(x.ndim) if i != a] + [a]
    inverse = [order.index(i) for i in range(x.ndim)]
    moved = x.permute(order)
    return make(op, (moved,), moved.shape, x.dtype).permute(inverse)


def matmul(a: Any, b: Any) -> Tensor:
    a = a if isinstance(a, Tensor) else from_data(a)
    b = b if isinstance(b, Tensor) else from_data(b)
    if a.dtype.is_quantized or b.dtype.is_quantized:
        return quantized_matmul(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: {a.shape} @ {b.shape}: operands must have at least 1 dimension")
    dt = promote(a.dtype, b.dtype, "matmul")
    if not dt.is_float:
        raise DTypeError(
            f"matmul: {a.dtype.value} @ {b.dtype.value}: only float matmul is supported; cast with astype()"
        )
    a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(
            f"matmul: {a.shape} @ {b.shape}: inner dimensions {a2.shape[-1]} and {b2.shape[-2]} differ; the last "
            "dim of the left operand must equal the second-to-last of the right (transpose one?)"
        )
    sa, sb, so = shapes.matmul_shapes(a2.shape, b2.shape)
    out = make(Op.MATMUL, (broadcast_to(a2.astype(dt), sa), broadcast_to(b2.astype(dt), sb)), so, dt)
    if a.ndim == 1 and b.ndim == 1:
        return out.reshape(())
    if a.ndim == 1:
        return out.reshape(so[:-2] + (so[-1],))
    if b.ndim == 1:
        return out.reshape(so[:-1])
    return out


def quantized_matmul(x: Tensor, wt: Tensor) -> Tensor:
    """x @ w.T for a quantized w (out, in): one GEMV or GEMM over every row of x, in x's float dtype."""
    if x.dtype.is_quantized or not transposed_leaf(wt._lazy):
        q = x if x.dtype.is_quantized else wt
        raise DTypeError(
            f"matmul: {x.shape} @ {wt.shape} with a {q.dtype.value} operand: a quantized weight w (out, in) is "
            "read as x @ w.T (tr.nn.linear(x, w)), its transpose on the right; else convert it with .astype(tr.float32)"
        )
    x = x if x.dtype.is_float else x.astype(DType.float32)
    k, n = wt.shape
    if x.ndim == 0 or x.shape[-1] != k:
        raise ShapeError(
            f"matmul: {x.shape} @ {wt.shape} ({wt.dtype.value}): the last dim of x must be {k}, the weight's in-features"
        )
    lead = x.shape[:-1]
    rows = x.reshape(math.prod(lead), k)
    return make(Op.MATMUL, (rows, wt), (rows.shape[0], n), x.dtype).reshape(lead + (n,))


MAX_CONCAT_INPUTS = 7  # stays under the 8 storage buffers per stage that every adapter has


def _concat_fan_in(n: int) -> int:
    """Inputs one concat kernel may take: 7 everywhere, more where the device binds more buffers."""
    if n <= MAX_CONCAT_INPUTS:
        return MAX_CONCAT_INPUTS
    return max(MAX_CONCAT_INPUTS, max_storage_buffers() - 1)  # one binding is the output


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    ts = [t if isinstance(t, Tensor) else from_data(t) for t in tensors]
    if not ts:
        raise ShapeError("concat: needs at least one tensor, got an empty list")
    if any(t.ndim == 0 for t in ts):
        raise ShapeError(
            f"concat: zero-dimensional tensors cannot be concatenated (shapes {[t.shape for t in ts]}); "
            "use tr.stack, or reshape them to (1,)"
        )
    a = shapes.normalize_axis("concat", axis, ts[0].ndim, ts[0].shape)
    shape = shapes.concat_shape(a, [t.shape for t in ts])
    dt = ts[0].dtype
    for t in ts[1:]:
        dt = promote(dt, t.dtype, "concat")
    ts = [t.astype(dt) for t in ts if t.shape[a] > 0] or [ts[0].astype(dt)]
    if len(ts) == 1:
        return ts[0].contiguous() if ts[0].shape == shape else ts[0]
    fan_in = _concat_fan_in(len(ts))
    while len(ts) > fan_in:
        ts = [concat(ts[i : i + fan_in], a) for i in range(0, len(ts), fan_in)]
    return make(Op.CONCAT, tuple(ts), shape, dt, a)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    ts = [t if isinstance(t, Tensor) else from_data(t) for t in tensors]
    if not ts:
        raise ShapeError("stack: needs at least one tensor, got an empty list")
    if any(t.shape != ts[0].shape for t in ts):
        raise ShapeError(f"stack: all shapes must be equal, got {[t.shape for t in ts]}; tr.concat joins unequal sizes")
    a = shapes.normalize_axis("stack", axis, ts[0].ndim + 1, ts[0].shape)
    return concat([t.unsqueeze(a) for t in ts], a)


# --- compositions that are also Tensor methods (tr.nn re-exports them) -----------------


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """numpy's broadcast_to rule: `shape` stretches to `target` without changing it."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def clamp(x: Any, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """Elementwise min(max(x, min), max), as np.clip (NaN stays NaN); bounds may be tensors."""
    x = as_tensor(x, "clamp")
    if min is None and max is None:
        raise ValueError("clamp: give min, max or both")
    y = x if min is None else maximum(x, min)
    return y if max is None else minimum(y, max)


def masked_fill(x: Any, mask: Any, value: Any) -> Tensor:
    """x with `value` where `mask` (bool, broadcast to x's shape) is true; keeps x's dtype."""
    x = as_tensor(x, "masked_fill")
    mask = as_tensor(mask, "masked_fill", "mask")
    if mask.dtype is not DType.bool:
        raise DTypeError(f"masked_fill: mask must be bool, got {mask.dtype.value}")
    if not broadcasts_to(mask.shape, x.shape):
        raise ShapeError(f"masked_fill: mask shape {mask.shape} does not broadcast to x shape {x.shape}")
    if isinstance(value, Tensor):
        if value.size != 1:
            raise ShapeError(f"masked_fill: value must be a scalar, got shape {value.shape}")
        fill = value.reshape(()).astype(x.dtype)
    elif isinstance(value, bool | int | float):
        fill = constant(value, x.dtype)
    else:
        raise DTypeError(f"masked_fill: value must be a python scalar or a 0-d tensor, got {type(value).__name__}")
    return where(mask, fill, x)


def index_write(x: Tensor, src: Any, offsets: Sequence[int]) -> Tensor:
    """Write `src` into x at per-axis `offsets` (x[o0:o0+s0, o1:o1+s1, ...] = src); returns x.

    The KV-cache append. The rule that keeps it sound with lazy evaluation: the write is a
    node INDEX_WRITE(old x, src) that produces the new value, and the Tensor `x` is
    rebound to it (no other Tensor changes: anything computed from the old x, pending or
    not, keeps seeing the old values). When the new value is realized, passes.inplace lets
    the kernel write straight into the old buffer, touching only |src| elements, exactly
    when nothing else can still see the old value: no other Tensor shows it and no
    pending computation (a lazy view included) reads it; otherwise the kernel copies x
    and writes src into the copy. Reads of the old value are never reordered after the
    write, because a pending read makes the old buffer non-donatable.
    """
    if not isinstance(x, Tensor):
        raise DTypeError(f"index_write: x must be a Tensor, got {type(x).__name__}")
    src = as_tensor(src, "index_write", "src")
    offsets = tuple(offsets)
    if src.ndim != x.ndim or len(offsets) != x.ndim:
        raise ShapeError(
            f"index_write: x shape {x.shape}, src shape {src.shape} and offsets {offsets} must have one entry per axis"
        )
    for d, (o, n, m) in enumerate(zip(offsets, src.shape, x.shape)):
        if not isinstance(o, int | np.integer) or isinstance(o, bool):
            raise ShapeError(f"index_write: offsets must be ints, got {offsets}")
        if o < 0 or o + n > m:
            raise IndexOutOfRangeError(
                f"index_write: src shape {src.shape} at offsets {offsets} reaches outside x shape {x.shape} (axis {d})"
            )
    if x.dtype is not src.dtype:
        lossy = (src.dtype.is_float and not x.dtype.is_float) or (x.dtype is DType.bool)
        if lossy:
            raise DTypeError(
                f"index_write: cannot write {src.dtype.value} into {x.dtype.value} without a cast; use astype()"
            )
        src = src.astype(x.dtype)
    if src.size == 0:
        return x
    rebind(x, make(Op.INDEX_WRITE, (x, src), x.shape, x.dtype, tuple(int(o) for o in offsets))._lazy)
    return x


def rebind(t: Tensor, lazy: Lazy) -> None:
    """Make `t` show another value; every other Tensor keeps showing what it showed."""
    old = t._lazy
    note_rebind(t, old)  # a jit trace repeats the rebinding on every replay
    # rebuilt rather than discard(): WeakSet.discard compares by ==, which Tensor overloads
    old.handles = weakref.WeakSet([h for h in old.handles if h is not t])
    t._lazy = lazy
    lazy.handles.add(t)
