"""The lazy Tensor: every op records a node; values are computed only when asked for.

The Tensor wraps a `Lazy` (tracer.lazy); `Tensor._lazy` is the tracer's internal handle to
it. Tensors are made here from Lazies: host data and python scalars enter through
tracer.host, device limits are checked by tracer.limits, and tracer.realize computes and
reads values. The creation functions (tr.tensor, tr.zeros, tr.arange...) live beside this
module in tracer.factories.

Four modules that build on this one add methods to Tensor when they are imported (the
`tracer` package imports them all): tracer.mutation (`x[i] = v`, `x += y`, `index_write`),
tracer.advanced (`x[int_array]`, `x[mask]`), tracer.interop (numpy's `__array_ufunc__` and
`__array_function__`) and tracer.array_api (`__array_namespace__`, `device`, `to_device`).
"""

from __future__ import annotations

import itertools
import math
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from backend_wgpu import Program
from ir import shapes
from ir.dtypes import DType, promote, scalar_dtype, to_dtype
from ir.errors import DTypeError, ShapeError
from ir.graph import Graph
from ir.ops import MOVEMENT, Op
from tracer.graph_builder import build_graph
from tracer.host import CONSTANTS, host_scalar, lazy_from_data
from tracer.indexing import resolve_index
from tracer.lazy import Lazy, compact_refs
from tracer.limits import LARGEST_SAFE_BINDING, check_binding_size, check_float16, max_storage_buffers
from tracer.quantized import check_quantized_operands, refuse, refuse_read, transposed_leaf
from tracer.realize import compile_lazies, copy_lazies_to_host_async, read_lazy, realize_lazies
from tracer.runtime_ints import RuntimeInt
from tracer.tracing import note_rebind
from tracer.views import RootCell, ViewInfo, child_view, derive, same_view

Scalar = bool | int | float
Operand = "Tensor | Scalar"


class Tensor:
    """A lazily computed n-dimensional array on the GPU.

    Nothing runs when an op is called; `numpy()`, `item()`, `tolist()` and `realize()`
    compile and run what is needed. `repr()` never computes anything.
    """

    __slots__ = ("_lazy", "_viewof", "_cell", "__weakref__")
    __array_priority__ = 1000  # so numpy defers `ndarray + Tensor` to us

    def __init__(self, lazy: Lazy) -> None:
        self._lazy = lazy
        self._viewof: ViewInfo | None = None  # set when this tensor is a view of another (tracer.views)
        self._cell: RootCell | None = None  # on a root with views: its value and views (tracer.views)
        lazy.append(weakref.ref(self))  # lazy.add_handle(self), inlined: every op makes a Tensor
        n = len(lazy)
        if n >= 64 and n & (n - 1) == 0:
            compact_refs(lazy)

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

    def copy_to_host_async(self) -> Tensor:
        """Start copying the values to host memory now; returns the tensor.

        The next numpy() (item(), tolist()...) then waits only for the work submitted up to
        this call, not for work submitted after it. A decode loop starts the read of token t,
        submits step t+1, and only then waits for token t: the GPU never idles while the host
        reads (tr.copy_to_host_async starts several reads in one submission).
        """
        copy_to_host_async(self)
        return self

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

    # --- copies and views -----------------------------------------------------------
    def copy(self) -> Tensor:
        """A new tensor with this value that no later write to this one changes (numpy's copy)."""
        return Tensor(self._lazy)  # values are immutable: sharing the Lazy is a copy

    def clone(self) -> Tensor:
        """torch's name for copy()."""
        return self.copy()

    @property
    def base(self) -> Tensor | None:
        """The tensor this one is a view of (numpy's `base`): None when it owns its values or that one is gone."""
        return self._viewof.cell.owner() if self._viewof is not None else None

    def _root_cell(self) -> RootCell:
        """The cell this tensor's views share (a root makes its own on its first view)."""
        if self._viewof is not None:
            return self._viewof.cell
        if self._cell is None:
            self._cell = RootCell(self)
        return self._cell

    def _movement(self, op: Op, shape: tuple[int, ...], arg: Any) -> Tensor:
        """A movement op's result: a view of this tensor's root where numpy makes a view, else a copy."""
        src = self._lazy
        dt = src.dtype
        if src.ragged or (dt is not _F32 and dt.is_quantized) or (op is _EXPAND and math.prod(shape) > _SMALL):
            out = make(op, (self,), shape, src.dtype, arg)  # make's checks (the others add no bytes, keep the dtype)
        else:
            out = Tensor(Lazy(op, (src,), shape, src.dtype, arg))
        info = child_view(self._viewof, self._root_cell(), op, shape, arg)
        if info is not None:
            out._viewof = info
            info.cell.add(out)
        return out

    def _alias(self) -> Tensor:
        """A new view object showing what this tensor shows (numpy's `x.reshape(x.shape)`, `x[...]`)."""
        out = Tensor(self._lazy)
        _register_view(out, same_view(self._viewof, self._root_cell()))
        return out

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

    def __xor__(self, o: Any) -> Tensor:
        return logical_xor(self, o)

    def __rand__(self, o: Any) -> Tensor:
        return binary(Op.AND, o, self)

    def __ror__(self, o: Any) -> Tensor:
        return binary(Op.OR, o, self)

    def __rxor__(self, o: Any) -> Tensor:
        return logical_xor(o, self)

    def __invert__(self) -> Tensor:
        if self.dtype is not DType.bool:
            raise DTypeError(f"~: only bool tensors, got {self.dtype.value}")
        return unary(Op.NOT, self)

    def __neg__(self) -> Tensor:
        return unary(Op.NEG, self)

    def __pos__(self) -> Tensor:
        return self.copy()

    def __abs__(self) -> Tensor:
        return unary(Op.ABS, self)

    # x.exp(), x.silu(), ...: the plain unary ops are made from the op table (end of this module)

    def gelu(self, approximate: str = "none") -> Tensor:
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return unary(Op.GELU if approximate == "none" else Op.GELU_TANH, self)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return clamp(self, min, max)

    def masked_fill(self, mask: Any, value: Scalar) -> Tensor:
        return masked_fill(self, mask, value)

    def floor(self) -> Tensor:
        return self.copy() if not self.dtype.is_float else unary(Op.FLOOR, self)

    def ceil(self) -> Tensor:
        return self.copy() if not self.dtype.is_float else unary(Op.CEIL, self)

    def trunc(self) -> Tensor:
        return self.copy() if not self.dtype.is_float else unary(Op.TRUNC, self)

    def round(self, decimals: int = 0) -> Tensor:
        """Rounded to `decimals` decimal places, ties to even, as numpy's round: a float times 10**d,
        rounded, divided by 10**d (d < 0: divided, rounded, multiplied); an int with d >= 0 is a copy,
        with d < 0 it is rounded exactly in integers."""
        if not isinstance(decimals, int) or isinstance(decimals, bool):
            raise TypeError(f"round: decimals must be an int, got {decimals!r}")
        if self.dtype.is_float:
            if decimals == 0:
                return unary(Op.ROUND, self)
            if decimals > 0:
                return unary(Op.ROUND, self * 10.0**decimals) / 10.0**decimals
            return unary(Op.ROUND, self / 10.0**-decimals) * 10.0**-decimals
        if decimals >= 0:
            return self.copy()
        p = 10**-decimals
        if p > np.iinfo(self.dtype.np).max:
            return self * 0
        q = self // p
        twice_r = (self - q * p) * 2
        up = (twice_r > p) | ((twice_r == p) & (q % 2 != 0))
        return (q + up.astype(self.dtype)) * p

    def astype(self, dtype: DType | str | type, copy: bool = True) -> Tensor:
        """This tensor's values as `dtype` (float to int truncates and saturates, NaN to 0: NUMERICS.md).

        Always a new tensor, as numpy's astype (copy=False may return this one when the dtype is already right).
        """
        dt = to_dtype(dtype)
        if dt is self.dtype:
            return self if not copy else self.copy()
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
        x = self.astype(DType.int32, copy=False) if self.dtype is DType.bool else self
        return reduce(Op.SUM, x, axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        # the total is float32 whatever the input: a float16 total overflows at 65504 (numpy too sums in f32)
        x = self if self.dtype is DType.float32 else self.astype(DType.float32, copy=False)
        axes = shapes.normalize_axes("mean", axis, self.shape)
        n = math.prod(self.shape[a] for a in axes)
        total = reduce(Op.SUM, x, axis, keepdims)
        out = total * (1.0 / n) if n else total * float("nan")
        return out.astype(DType.float16) if self.dtype is DType.float16 else out

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
            return self._alias()
        return self._movement(_RESHAPE, new, new)

    def permute(self, *order: Any) -> Tensor:
        shape = self.shape
        perm = shapes.check_permutation("permute", _shape_arg(order), shape)
        if perm == tuple(range(len(shape))):
            return self._alias()
        return self._movement(_PERMUTE, tuple([shape[i] for i in perm]), perm)

    def transpose(self, *axes: Any) -> Tensor:
        """numpy's transpose: no axes reverses them all, all axes (or one tuple of them) reorder
        them. Two axes of a tensor of other than 2 dims are swapped, as torch's transpose(a, b)
        (numpy refuses that call). On a 2-D tensor numpy reads (0, 1) as "keep the order" and torch
        as "swap": that call is refused, naming x.T and x.swapaxes(0, 1)."""
        if len(axes) == 1 and isinstance(axes[0], list | tuple):
            axes = tuple(axes[0])
        if not axes or axes == (None,):
            return self.permute(tuple(reversed(range(self.ndim))))
        if len(axes) == 2 and self.ndim != 2:
            return self.swapaxes(*axes)
        norm = tuple(shapes.normalize_axis("transpose", a, self.ndim, self.shape) for a in axes)
        if self.ndim == 2 and norm == (0, 1):
            raise ShapeError(
                f"transpose{axes} of shape {self.shape}: numpy keeps the order, torch swaps the axes; "
                "write x.T or x.swapaxes(0, 1) to swap, or leave x as it is"
            )
        return self.permute(shapes.check_permutation("transpose", norm, self.shape))

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """The tensor with two axes exchanged, as np.swapaxes (torch's transpose(a, b))."""
        a = shapes.normalize_axis("swapaxes", axis0, self.ndim, self.shape)
        b = shapes.normalize_axis("swapaxes", axis1, self.ndim, self.shape)
        if self.ndim == 0:  # axes 0/-1 of a 0-d tensor: nothing to swap
            return self._alias()
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802
        shape = self._lazy.shape
        n = len(shape)
        if n < 2 or type(self) is not Tensor:  # an alias, or a runtime length: permute decides
            return self.permute(tuple(reversed(range(n))))
        # permute's result without its checks of an order that is valid by construction
        return self._movement(_PERMUTE, shape[::-1], tuple(range(n - 1, -1, -1)))

    @property
    def mT(self) -> Tensor:  # noqa: N802
        """The last two axes swapped (the Array API's matrix transpose)."""
        if self.ndim < 2:
            raise ShapeError(f"mT: needs at least 2 dimensions, got shape {self.shape}")
        return self.swapaxes(-2, -1)

    def __complex__(self) -> complex:
        return complex(self.item())

    def expand(self, *shape: Any) -> Tensor:
        new = shapes.check_expand("expand", self.shape, _shape_arg(shape))
        if new == self.shape:
            return self._alias()
        return self._movement(_EXPAND, new, new)

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

    def ravel(self) -> Tensor:
        """The elements in one axis: a view where numpy makes one (numpy's ravel)."""
        return self.reshape(-1)

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        """Axes start..end merged into one; a copy, as numpy's flatten (ravel() gives a view)."""
        return self._flattened(start_axis, end_axis).copy()

    def _flattened(self, start_axis: int, end_axis: int) -> Tensor:
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
        """Basic indexing (ints, slices, None, ...): a view. tracer.advanced extends it to integer and bool arrays.

        Runtime integers (tr.dynamic) may be starts, indices or a slice's stop (tracer.runtime_ints).
        """
        view = resolve_index(self.shape, index)
        if view.slices is None:
            y = self.reshape(view.shape)  # a new view object, even of the same shape
        else:
            y = self._movement(_SLICE, view.sliced_shape, view.slices)  # new: no alias of it is needed
            if view.runtime:
                y._lazy.dyn = True
            if view.shape != view.sliced_shape:
                y = y.reshape(view.shape)
        if view.runtime_length is None:
            return y
        axis, length, largest = view.runtime_length
        return RuntimeLengthTensor(y, axis, length, largest)

    # --- debugging ----------------------------------------------------------------
    def graph(self) -> Graph:
        """The ir.Graph that would compute this tensor (nothing runs)."""
        return build_graph([self._lazy]).graph


class RuntimeLengthTensor(Tensor):
    """A slice whose length along one axis is a runtime integer (`cache[:, :, : pos + 1]`, tracer.runtime_ints).

    It stores the slice to the length's bucket; `shape` shows the RuntimeInt on that axis,
    `numpy()` the true length, and scaled_dot_product_attention attends over the true length.
    Other ops refuse it (`make`): their result's shape would be known only at run time. It is
    a snapshot, not a view: slice after writing into x (as a decode step does).
    """

    __slots__ = ("axis", "length", "largest")

    def __init__(self, padded: Tensor, axis: int, length: RuntimeInt, largest: int) -> None:
        shape = padded._lazy.shape
        lz = Lazy(_RESHAPE, (padded._lazy,), shape, padded.dtype, shape)  # its own value, marked
        lz.ragged = True
        super().__init__(lz)
        self.axis, self.length, self.largest = axis, length, largest

    @property
    def shape(self) -> tuple[Any, ...]:
        s = list(self._lazy.shape)
        s[self.axis] = self.length
        return tuple(s)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def padded(self) -> Tensor:
        """The stored slice, to the bucket length (what lies past the true length is whatever x holds there)."""
        shape = self._lazy.shape
        return Tensor(Lazy(_RESHAPE, (self._lazy,), shape, self.dtype, shape))

    def numpy(self) -> np.ndarray:
        full = super().numpy()
        return full[(slice(None),) * self.axis + (slice(0, int(self.length)),)].copy()

    def __getitem__(self, index: Any) -> Tensor:
        raise ShapeError(
            f"index: a tensor with a runtime length along axis {self.axis} (shape {self.shape}) cannot be indexed; "
            "index the tensor it was sliced from"
        )

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype.value}, runtime length, stored as {self._lazy.shape})"


def refuse_runtime_length(op: str, srcs: tuple[Tensor, ...]) -> None:
    """ShapeError when an operand has a runtime length (RuntimeLengthTensor): only attention reads those."""
    for s in srcs:
        if s._lazy.ragged:
            raise ShapeError(
                f"{op}: an operand of shape {s.shape} has a runtime length (a slice ending at a tr.dynamic value); "
                "only scaled_dot_product_attention reads such a tensor. Slice with python ints for a fixed shape"
            )


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


def copy_to_host_async(*tensors: Tensor) -> None:
    """Compute the pending tensors (one submission) and start copying each to host memory (one more);
    each one's next numpy() waits only for the work submitted before this call (Tensor.copy_to_host_async)."""
    for t in tensors:
        if isinstance(t, Tensor):
            refuse_read(t._lazy, "copy_to_host_async")
    copy_lazies_to_host_async(_lazies(tensors))


def compile(*tensors: Tensor) -> Program:  # noqa: A001  (tr.compile, as the API names it)
    """The compiled program that would compute these tensors, without running it."""
    return compile_lazies(_lazies(tensors))


# --- node construction ---------------------------------------------------------------


MAX_ELEMENTS = 2**32 - 1  # kernels count elements in u32
_F16, _F32, _I32 = DType.float16, DType.float32, DType.int32
# looked up once: an Enum member read from its class costs ~70 ns, and these run for every traced op
_RESHAPE, _PERMUTE, _EXPAND, _SLICE, _MATMUL = Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SLICE, Op.MATMUL
_SMALL = LARGEST_SAFE_BINDING // 16  # elements: at most 16 bytes each (a lone quantized block's padding)


def _kept_dtypes() -> dict[tuple[str, str], DType]:
    """(op, dtype) -> the result's dtype, for every op and plain dtype its record computes on as
    it comes (compute_dtype returns the dtype itself): unary's and binary's fast paths look their
    operands up here, by the members' string values (an Enum member hashes in Python, its value in C)."""
    table: dict[tuple[str, str], DType] = {}
    for op in Op:
        rule = op.opdef.dtypes
        for dt in DType:
            if dt.is_quantized:
                continue
            try:
                computed = rule.compute_dtype(op._value_, dt, "")
            except DTypeError:
                continue
            if computed is dt:
                table[(op._value_, dt._value_)] = rule.result_dtype(dt)
    return table


_KEEPS = _kept_dtypes()


def make(op: Op, srcs: tuple[Tensor, ...], shape: tuple[int, ...], dtype: DType, arg: Any = None) -> Tensor:
    """The Tensor of a new node. Runs for every op: its checks cost nothing in the common case."""
    lazies = tuple([s._lazy for s in srcs])
    for lz in lazies:  # the rare operands (one loop: this runs for every op; `is _F32` skips a property)
        if lz.ragged or (lz.dtype is not _F32 and lz.dtype.is_quantized):
            refuse_runtime_length(op.value, srcs)
            check_quantized_operands(op, lazies, dtype, arg)
            break
    n = math.prod(shape)
    if n > _SMALL:  # below, no dtype's bytes reach a binding limit (quantized blocks pad to 16 bytes)
        nbytes = dtype.nbytes(n) if dtype.is_quantized else n * dtype.itemsize
        if nbytes > LARGEST_SAFE_BINDING or n > MAX_ELEMENTS:
            if n > MAX_ELEMENTS:
                raise ShapeError(
                    f"{op.value}: shape {shape} has {n} elements, over the {MAX_ELEMENTS} (2**32 - 1) that wgjit's "
                    "kernels count with 32-bit integers; split the work into smaller tensors"
                )
            if op not in MOVEMENT:  # views add no bytes
                check_binding_size(op.value, shape, dtype, nbytes)
    if dtype is _F16 and not any(lz.dtype is _F16 for lz in lazies):
        check_float16(op.value, shape)  # where float16 enters a graph, not later at realize
    return Tensor(Lazy(op, lazies, shape, dtype, arg))


def moved(x: Tensor, op: Op, shape: tuple[int, ...], arg: Any) -> Tensor:
    """x moved by a movement op as a new value, not a view of x: for a composition's own intermediate steps.

    numpy's view semantics are for what users hold; nobody writes through a composition's
    inner steps (tr.nn.linear's reshapes and weight.T), and a view's bookkeeping costs more
    than the op. The caller has checked `shape` and `arg`.
    """
    src = x._lazy
    dt = src.dtype
    if src.ragged or (dt is not _F32 and dt.is_quantized) or (op is _EXPAND and math.prod(shape) > _SMALL):
        return make(op, (x,), shape, dt, arg)  # make's checks
    return Tensor(Lazy(op, (src,), shape, dt, arg))


def rows_times_transposed(x: Tensor, w: Tensor, rows: tuple[int, int]) -> Lazy | None:
    """The Lazy of x reshaped to `rows` times w.T, for a plain float w (out, in) of x's dtype, else None.

    tr.nn.linear's product: the nodes `moved` and `matmul` would make (a RESHAPE unless x has
    `rows` already, the PERMUTE of w, the MATMUL), without a Tensor and a call per step. None
    whenever make would have something to check (a runtime length, another or a quantized
    dtype, a product near the binding limits): the caller then takes those steps, whose errors
    name what they check.
    """
    xl, wl = x._lazy, w._lazy
    dt = xl.dtype
    out, k = wl.shape
    m = rows[0]
    if wl.dtype is not dt or (dt is not _F32 and dt is not _F16) or xl.ragged or wl.ragged or m * out > _SMALL:
        return None
    xr = xl if xl.shape == rows else Lazy(_RESHAPE, (xl,), rows, dt, rows)
    return Lazy(_MATMUL, (xr, Lazy(_PERMUTE, (wl,), (k, out), dt, (1, 0))), (m, out), dt)


def from_data(data: Any, dtype: DType | str | None = None, op: str = "tensor") -> Tensor:
    """A tensor holding a copy of host data (tr.tensor; see tracer.host.host_array)."""
    return Tensor(lazy_from_data(data, dtype, op))


def constant(value: bool | int | float, dtype: DType, op: str = "constant") -> Tensor:
    """A 0-d tensor for a python scalar, from the constants cache (tracer.host.CONSTANTS).

    The value must be representable in `dtype` (tracer.host.host_scalar), or DTypeError naming `op`.
    """
    return Tensor(CONSTANTS.get(host_scalar(value, dtype, op), dtype))


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
    for a in args:
        if type(a) is not int:
            break
    else:
        return args  # plain ints (the common case) need no conversion
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
    return constant(value, scalar_dtype(value, other), op)


def broadcast_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    if x.shape == shape:
        return x
    return make(_EXPAND, (x,), shape, x.dtype, shape)


def unary(op: Op, x: Tensor) -> Tensor:
    """`op` of x, computed in the dtype its record's rule says (ints become float32 for float-only ops)."""
    if type(x) is Tensor:  # the common case, made as below: a plain tensor of a dtype its record takes as it is
        lz = x._lazy
        out = _KEEPS.get((op._value_, lz.dtype._value_))
        if out is not None and not lz.ragged and math.prod(lz.shape) <= _SMALL:
            return Tensor(Lazy(op, (lz,), lz.shape, out))
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op.value}: expected a Tensor, got {type(x).__name__}")
    rule = op.opdef.dtypes
    dt = x.dtype
    cd = rule.compute_dtype(op._value_, dt, lambda: f"{dt.value} {x.shape}")
    if cd is not dt:
        x = x.astype(cd, copy=False)
    return make(op, (x,), x.shape, rule.result_dtype(cd))


def binary(op: Op, a: Any, b: Any) -> Tensor:
    """`op` of a and b: promoted as numpy does, then to the dtype its record's rule says, and broadcast."""
    name = op._value_
    # the common cases, made as the general path below makes them: two plain tensors of one dtype
    # and shape, or a plain tensor and a python number, of a dtype the op's record takes as it is
    ta, tb = type(a), type(b)
    if ta is Tensor:
        if tb is Tensor:
            la, lb = a._lazy, b._lazy
            dt, shape = la.dtype, la.shape
            if lb.dtype is dt and not la.ragged and not lb.ragged:
                out = _KEEPS.get((name, dt._value_))
                if out is not None:
                    if lb.shape == shape:
                        if math.prod(shape) <= _SMALL:
                            return Tensor(Lazy(op, (la, lb), shape, out))
                    else:
                        made = _with_trailing(op, la, lb, out)
                        if made is not None:
                            return made
        elif tb is float or tb is int:
            made = _with_number(op, a._lazy, b, False)
            if made is not None:
                return made
    elif tb is Tensor and (ta is float or ta is int):
        made = _with_number(op, b._lazy, a, True)
        if made is not None:
            return made
    a, b = as_tensors(name, a, b)
    rule = op.opdef.dtypes
    da, db = a.dtype, b.dtype
    sa, sb = a.shape, b.shape
    dt = rule.compute_dtype(
        name, da if da is db else promote(da, db, name), lambda: f"{da.value} {sa} and {db.value} {sb}"
    )
    shape = sa if sa == sb else shapes.broadcast_shapes(name, sa, sb)
    if da is not dt:
        a = a.astype(dt, copy=False)
    if db is not dt:
        b = b.astype(dt, copy=False)
    if sa != shape:
        a = make(_EXPAND, (a,), shape, dt, shape)
    if sb != shape:
        b = make(_EXPAND, (b,), shape, dt, shape)
    return make(op, (a, b), shape, rule.result_dtype(dt))


def _with_trailing(op: Op, la: Lazy, lb: Lazy, out: DType) -> Tensor | None:
    """`op` of two plain Lazies of one dtype where one's shape ends the other's (a bias, a row, a 0-d
    value), as binary's general path makes it: the shorter one broadcast by EXPAND. None otherwise."""
    sa, sb = la.shape, lb.shape
    if len(sb) < len(sa) and sa[len(sa) - len(sb) :] == sb:
        full = sa
    elif len(sa) < len(sb) and sb[len(sb) - len(sa) :] == sa:
        full = sb
    else:
        return None
    if math.prod(full) > _SMALL:
        return None  # make's size checks
    if sa != full:
        la = Lazy(_EXPAND, (la,), full, la.dtype, full)
    if sb != full:
        lb = Lazy(_EXPAND, (lb,), full, lb.dtype, full)
    return Tensor(Lazy(op, (la, lb), full, out))


def _with_number(op: Op, lz: Lazy, value: float | int, number_first: bool) -> Tensor | None:
    """`op` of a plain tensor's Lazy and a python float or int (`number_first`: the number is the left
    operand), as binary's general path makes it: the cached constant, broadcast by EXPAND unless the
    tensor is 0-d. None when that path has more to decide: the number's dtype differs from the
    tensor's (an int tensor with a float), the record changes the dtype, a runtime length, a large shape.
    """
    dt = lz.dtype
    # ir.dtypes.scalar_dtype gives a float or int the dtype of a float tensor, an int that of an int32 one
    if dt is not _F32 and dt is not _F16 and (dt is not _I32 or type(value) is not int):
        return None
    name = op._value_
    out = _KEEPS.get((name, dt._value_))
    shape = lz.shape
    if out is None or lz.ragged or math.prod(shape) > _SMALL:
        return None
    c = CONSTANTS.get(host_scalar(value, dt, name), dt)  # constant(), without its Tensor
    if shape:
        c = Lazy(_EXPAND, (c,), shape, dt, shape)
    return Tensor(Lazy(op, (c, lz) if number_first else (lz, c), shape, out))


def where(cond: Any, a: Any, b: Any) -> Tensor:
    if not isinstance(cond, Tensor):
        cond = from_data(cond)
    cond = cond if cond.dtype is DType.bool else cond != 0
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = from_data(a)
    a, b = as_tensors("where", a, b)
    dt = promote(a.dtype, b.dtype, "where")
    shape = shapes.broadcast_shapes("where", cond.shape, a.shape, b.shape)
    srcs = (
        broadcast_to(cond, shape),
        broadcast_to(a.astype(dt, copy=False), shape),
        broadcast_to(b.astype(dt, copy=False), shape),
    )
    return make(Op.WHERE, srcs, shape, dt)


def maximum(a: Any, b: Any) -> Tensor:
    return binary(Op.MAXIMUM, a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return binary(Op.MINIMUM, a, b)


def hypot(a: Any, b: Any) -> Tensor:
    """sqrt(a**2 + b**2) elementwise, without overflow (ints become float32), as np.hypot."""
    return binary(Op.HYPOT, a, b)


def logaddexp(a: Any, b: Any) -> Tensor:
    """log(exp(a) + exp(b)) elementwise, without overflow (ints become float32), as np.logaddexp."""
    return binary(Op.LOGADDEXP, a, b)


def _move_axes_last(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    """x with `axes` (sorted) moved last: the operand of a reduction over them.

    For a plain Tensor it is the reduction's own step (tracer.tensor.moved), not a view of x,
    and x itself when the axes are last already; other Tensors (a runtime length) take permute.
    """
    n = len(x._lazy.shape)
    order = tuple([i for i in range(n) if i not in axes]) + axes
    if type(x) is not Tensor:
        return x.permute(order)
    if order == tuple(range(n)):  # nothing moves (the common x.sum(-1))
        return x
    return moved(x, _PERMUTE, tuple([x._lazy.shape[i] for i in order]), order)


def reduce(op: Op, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    name = op.value
    axes = shapes.normalize_axes(name, axis, x.shape)
    if x.ndim == 0:  # axis 0 or -1 of a 0-d tensor (as torch): nothing to reduce
        return x.copy()
    if op in (Op.MAX, Op.MIN) and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            f"{name}: zero-size reduction over axes {axes} of shape {x.shape} has no identity; "
            "reduce non-empty axes (sum and mean do accept empty ones)"
        )
    if x.dtype is DType.bool and op in (Op.MAX, Op.MIN):
        x = x.astype(DType.int32, copy=False)
        return reduce(op, x, axis, keepdims).astype(DType.bool, copy=False)
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
    if x.ndim == 0:  # the only element is at index 0
        return constant(0, DType.int32)
    if any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            f"{name}: attempt to get {name} of an empty sequence (shape {x.shape}); the axis must be non-empty"
        )
    if x.dtype is DType.bool:
        x = x.astype(DType.int32, copy=False)
    kept_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    out = make(op, (_move_axes_last(x, axes),), kept_shape, DType.int32, len(axes))
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def row_op(op: Op, x: Tensor, axis: int) -> Tensor:
    a = shapes.normalize_axis(op.value, axis, x.ndim, x.shape)
    if not x.dtype.is_float:
        x = x.astype(DType.float32, copy=False)
    if x.ndim == 0:
        return make(op, (x.reshape(1),), (1,), x.dtype).reshape(())
    if a == x.ndim - 1:
        return make(op, (x,), x.shape, x.dtype)
    order = [i for i in range(x.ndim) if i != a] + [a]
    inverse = [order.index(i) for i in range(x.ndim)]
    moved = x.permute(order)
    return make(op, (moved,), moved.shape, x.dtype).permute(inverse)


def matmul(a: Any, b: Any) -> Tensor:
    if type(a) is Tensor and type(b) is Tensor:  # two matrices of one float dtype (linear's product): nothing to adapt
        la, lb = a._lazy, b._lazy
        sa, sb, dt = la.shape, lb.shape, la.dtype
        if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0] and lb.dtype is dt and dt.is_float and not dt.is_quantized:
            return make(_MATMUL, (a, b), (sa[0], sb[1]), dt)
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
    out = make(
        Op.MATMUL, (broadcast_to(a2.astype(dt, copy=False), sa), broadcast_to(b2.astype(dt, copy=False), sb)), so, dt
    )
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
    x = x if x.dtype.is_float else x.astype(DType.float32, copy=False)
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
    ts = [t.astype(dt) for t in ts if t.shape[a] > 0] or [ts[0].astype(dt)]  # new tensors, as np.concatenate
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
    skip = len(target) - len(shape)
    if skip < 0:
        return False
    for s, t in zip(shape, target[skip:]):  # a loop, not all() over a generator: traced per broadcast
        if s != 1 and s != t:
            return False
    return True


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
        fill = value.reshape(()).astype(x.dtype, copy=False)
    elif isinstance(value, bool | int | float):
        fill = constant(value, x.dtype, "masked_fill")
    else:
        raise DTypeError(f"masked_fill: value must be a python scalar or a 0-d tensor, got {type(value).__name__}")
    return where(mask, fill, x)


def _register_view(out: Tensor, info: ViewInfo | None) -> None:
    """Make `out` a view described by `info` (None: it is a copy, owning its values)."""
    if info is None:
        return
    out._viewof = info
    info.cell.add(out)


def logical_xor(a: Any, b: Any) -> Tensor:
    """a ^ b: for bools, a != b; integer (bitwise) xor is not supported yet."""
    a, b = as_tensors("xor", a, b)
    dt = promote(a.dtype, b.dtype, "xor")
    if dt is not DType.bool:
        raise DTypeError(
            f"xor: ^ of {a.dtype.value} {a.shape} and {b.dtype.value} {b.shape}: only bool tensors "
            "(logical xor); bitwise xor of integers is not supported yet"
        )
    return binary(Op.NE, a, b)


def rebind(t: Tensor, lazy: Lazy) -> None:
    """Make `t` show another value; the views of a root follow it, every other Tensor keeps its value."""
    _show(t, lazy)
    if t._cell is not None:  # a root: its views are derived again from its new value
        t._cell.lazy = lazy
        for view in t._cell.views():
            assert view._viewof is not None
            _show(view, derive(lazy, view._viewof.steps))


# a fresh number per rebind (see value_epoch); next() on a count is atomic, so two threads rebinding at once
# still store two different numbers, and the epoch never comes back to a value a reader saw before
_EPOCHS = itertools.count(1)
_value_epoch = 0


def value_epoch() -> int:
    """A number that changes whenever some Tensor shows another value (rebind).

    tracer.jit keeps what it checked of a trace's captured Tensors while this number stays the
    same: no Tensor has been rebound since, so each still shows the value it showed then. A
    reader takes the number before it reads any Tensor; a rebind stores a new one after it
    changed the Tensor, so a change the reader missed always leaves the number moved.
    """
    return _value_epoch


def _show(t: Tensor, lazy: Lazy) -> None:
    global _value_epoch
    note_rebind(t, t._lazy)  # a jit trace repeats the rebinding on every replay
    t._lazy = lazy  # the old value's live_handles() no longer counts t
    _value_epoch = next(_EPOCHS)  # after the change (see value_epoch)
    lazy.add_handle(t)


def add_methods(*functions: Callable[..., Any]) -> None:
    """Make each function a Tensor method of its name (x.var(axis) is var(x, axis)).

    For the modules built on Tensor (reductions, shaping, linalg, sorting): numpy's ndarray has
    these methods, and those modules come after this one. A name Tensor already has is an error.
    """
    for fn in functions:
        if hasattr(Tensor, fn.__name__):
            raise TypeError(f"Tensor.{fn.__name__} exists already; {fn.__module__}.{fn.__name__} would replace it")
        setattr(Tensor, fn.__name__, fn)


def _unary_method(op: Op) -> Callable[[Tensor], Tensor]:
    def method(self: Tensor) -> Tensor:
        return unary(op, self)

    method.__name__, method.__qualname__ = op.value, f"Tensor.{op.value}"
    method.__doc__ = f"x.{op.value}(): {op.opdef.doc}."
    return method


# the plain unary ops of the op table (ir/optable, `method=True`): x.exp(), x.silu(), ...
add_methods(*(_unary_method(op) for op in Op if op.opdef.method))
