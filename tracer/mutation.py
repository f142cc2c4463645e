"""Mutation as numpy does it: `x[i] = v`, `x += y`, ..., on lazy tensors.

A Tensor shows a Lazy. A mutation builds the Lazy of the new value and makes the Tensor show
it (tracer.tensor.rebind), so every name bound to that Tensor sees the change, and nothing is
computed yet; values computed earlier from the old value keep the old value. A write through
a view (tracer.views) writes into its root, and then every live view of the root is derived
again from the root's new value: `v = x[1:]; v += 1` changes x, and `x[1] = 5` changes v.

How a write becomes nodes:
- a box of the root (ints and step-1 slices, transposed or not): INDEX_WRITE, which
  passes.inplace turns into a write of only those elements when nothing else sees the old value;
- a bool mask with a value that needs no count (a scalar, or one value per trailing element):
  `where(mask, value, x)`, with the mask staying on the GPU;
- anything else (slices with steps, integer arrays, one value per selected element): the flat
  positions are computed on the host, and the root's new value is
  `where(written, gather(values, positions), old)`. Integer and bool index tensors are read back
  for this (a host read: inside @tr.jit it raises JitError).
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ir.dtypes import DType
from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError
from ir.ops import Op
from ir.symbolic import Sym
from ir.view import View
from tracer.indexing import is_advanced, resolve_index
from tracer.runtime_ints import RuntimeInt, dynamic
from tracer.tensor import Tensor, as_tensor, broadcast_to, broadcasts_to, constant, from_data, make, rebind, where
from tracer.views import as_box, coordinates, positions


def assign_result(x: Tensor, symbol: str, result: Tensor) -> None:
    """`x op= y`: x shows `result`, cast back to x's dtype under numpy's same_kind rule."""
    if result.shape != x.shape:
        raise ShapeError(
            f"{symbol}: the result has shape {result.shape}, but x has shape {x.shape}; an in-place op cannot "
            "change the shape (numpy: non-broadcastable output operand); write x = x op y for a new tensor"
        )
    if result.dtype is not x.dtype:
        if not np.can_cast(result.dtype.np, x.dtype.np, casting="same_kind"):
            raise DTypeError(
                f"{symbol}: cannot store the {result.dtype.value} result in the {x.dtype.value} tensor x of "
                f"shape {x.shape} (numpy's casting='same_kind' rule); write x = x op y for a new tensor, "
                "or cast the operand first"
            )
        result = result.astype(x.dtype, copy=False)
    assign(x, result)


def assign(x: Tensor, value: Tensor) -> None:
    """x shows `value` (same shape and dtype) from now on; a view writes it into its root."""
    info = x._viewof
    if info is None:
        assign_root(x, value)
    else:
        _write_region(x, info.view, value)


def assign_root(root: Tensor, value: Tensor) -> None:
    """The root shows `value`; each of its live views is derived again from it (tracer.tensor.rebind)."""
    rebind(root, value._lazy)


def root_of(x: Tensor) -> Tensor:
    """The Tensor that owns x's values: x itself, its root, or (the root being gone) one made for the write."""
    info = x._viewof
    if info is None:
        return x
    owner = info.cell.owner()
    if owner is None:  # nobody holds the root any more; its views still share its value
        owner = Tensor(info.cell.lazy)
        owner._cell = info.cell
        info.cell.owner = weakref.ref(owner)
    return owner


def write_box(x: Tensor, offsets: tuple[int, ...], src: Tensor) -> None:
    """x[o0:o0+s0, o1:o1+s1, ...] = src (index_write): src already has x's dtype."""
    region = _region_of(x).slice(tuple((o, o + n, 1) for o, n in zip(offsets, src.shape)))
    _write_region(x, region, src)


def setitem(x: Tensor, index: Any, value: Any) -> None:
    """`x[index] = value` as numpy: value cast to x's dtype and broadcast to the selection."""
    if not isinstance(index, tuple):
        index = (index,)
    if not is_advanced(index):
        sel = resolve_index(x.shape, index)
        region = _region_of(x)
        if sel.slices is not None:
            region = region.slice(sel.slices)
        region = region.reshape(sel.shape)
        assert region is not None  # only size-1 axes come and go
        if _is_same_region(value, x, region):
            return  # `x[i] += 1` writes through the view x[i], then assigns that view to itself
        _write_region(x, region, _value(value, x, sel.shape))
        return
    mask = _lone_mask(index, x)
    if mask is not None:
        v = _value(value, x, None)
        if broadcasts_to(v.shape, x.shape[mask.ndim :]):  # no value per selected element: no count needed
            lead = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
            assign(x, where(lead, v, x))
            return
    flat = _host_positions(x, index)
    _write_positions(x, flat, _value(value, x, flat.shape))


# --- what to write ------------------------------------------------------------------


def _value(value: Any, x: Tensor, shape: tuple[int, ...] | None) -> Tensor:
    """The assigned value in x's dtype, broadcast to the selection's shape (None: left as it is)."""
    if isinstance(value, Tensor):
        v = value.astype(x.dtype, copy=False)  # a cast between tensors: NUMERICS.md's cast rules
    elif isinstance(value, bool | int | float | np.generic):
        v = constant(value, x.dtype, "setitem")  # a host value: it must fit x's dtype
    else:
        v = from_data(value, x.dtype, "setitem")
    if shape is None:
        return v
    while v.ndim > len(shape) and v.shape[0] == 1:  # numpy drops leading size-1 axes of the value
        v = v.reshape(v.shape[1:])
    if not broadcasts_to(v.shape, shape):
        raise ShapeError(
            f"setitem: could not broadcast the value of shape {v.shape} into the selection of shape {shape} "
            f"(tensor shape {x.shape})"
        )
    return broadcast_to(v, shape)


def _is_same_region(value: Any, x: Tensor, region: View) -> bool:
    if not isinstance(value, Tensor) or value._viewof is None or value.dtype is not x.dtype:
        return False
    return value._viewof.cell is x._root_cell() and value._viewof.view == region


def _lone_mask(index: tuple, x: Tensor) -> Tensor | None:
    """The index as one bool tensor over x's leading axes (`x[mask] = v`), or None."""
    if len(index) != 1:
        return None
    m = index[0]
    if isinstance(m, np.ndarray) and m.dtype == np.bool_:
        m = from_data(m)
    if not isinstance(m, Tensor) or m.dtype is not DType.bool or m.ndim == 0:
        return None
    if m.shape != x.shape[: m.ndim]:
        raise IndexOutOfRangeError(
            f"setitem: boolean mask of shape {m.shape} does not match the leading axes of the tensor's shape "
            f"{x.shape}; a mask covers the first {m.ndim} axes exactly"
        )
    return m


def _host_positions(x: Tensor, index: tuple) -> np.ndarray:
    """The flat positions in x (row-major) of the elements `x[index]` selects, computed by numpy."""
    host = tuple(_host_item(it) for it in index)
    try:
        return coordinates(x.shape, host)
    except IndexError as e:
        raise IndexOutOfRangeError(f"setitem: {e} (tensor shape {x.shape})") from None


def _host_item(it: Any) -> Any:
    if isinstance(it, Tensor):
        if it.dtype.is_float:
            raise DTypeError(f"setitem: a {it.dtype.value} tensor of shape {it.shape} is not an index; use ints")
        return it.numpy()  # read back: positions are computed on the host
    if isinstance(it, list | tuple):
        arr = np.asarray(it)
        return arr.astype(np.int64) if arr.size == 0 else arr
    if isinstance(it, np.ndarray) and it.dtype.kind == "f":
        raise DTypeError(f"setitem: a {it.dtype} array is not an index; use ints or bools")
    return it


# --- where it goes --------------------------------------------------------------------


def _region_of(x: Tensor) -> View:
    """x's elements as a view of its root's row-major elements."""
    return x._viewof.view if x._viewof is not None else View.contiguous(x.shape)


def _write_region(x: Tensor, region: View, value: Tensor) -> None:
    """Write `value` (the region's shape, x's dtype) into the elements `region` names in x's root."""
    info = x._viewof
    if info is not None and info.readonly:
        raise ShapeError(
            f"setitem: cannot write into a broadcast (expanded) view of shape {x.shape}: its elements share "
            "memory with each other, so numpy makes it read-only; write into the tensor it comes from, or copy() it"
        )
    if region.size == 0:
        return
    if isinstance(region.offset, Sym):
        raise ShapeError(
            f"setitem: the selection of shape {region.shape} starts at a runtime position (tr.dynamic); write it with "
            "index_write on the tensor that owns the values"
        )
    root = root_of(x)
    if region.size == root.size and region.is_identity:
        assign_root(root, value.reshape(root.shape))
        return
    box = as_box(region, root.shape)
    if box is not None:
        offsets, box_shape, order = box
        src = value.reshape(tuple(d for d in region.shape if d != 1))
        src = src.permute(order).reshape(box_shape)
        assign_root(root, make(Op.INDEX_WRITE, (root, src), root.shape, root.dtype, offsets))
        return
    _write_root_positions(root, positions(region), value)


def _write_positions(x: Tensor, flat: np.ndarray, value: Tensor) -> None:
    """Write `value` (flat's shape) at flat positions of x; a view maps them into its root."""
    if flat.size == 0:
        return
    info = x._viewof
    if info is None:
        _write_root_positions(x, flat, value)
        return
    if info.readonly:
        _write_region(x, info.view, value)  # raises the read-only error
    _write_root_positions(root_of(x), positions(info.view).reshape(-1)[flat], value)


def _write_root_positions(root: Tensor, pos: np.ndarray, value: Tensor) -> None:
    """root.flat[pos] = value, the last write winning where positions repeat (as numpy)."""
    flat = pos.reshape(-1)
    gather_from = np.zeros(root.size, np.int32)
    gather_from[flat] = np.arange(flat.size, dtype=np.int32)
    written = np.zeros(root.size, np.bool_)
    written[flat] = True
    ids = from_data(gather_from)  # each position's index into the values, known in range on the host
    spread = make(Op.GATHER, (value.reshape(-1), ids), ids.shape, value.dtype, 0).reshape(root.shape)
    if written.all():
        assign_root(root, spread)
    else:
        assign_root(root, where(from_data(written.reshape(root.shape)), spread, root))


def index_write(x: Tensor, src: Any, offsets: Sequence[int]) -> Tensor:
    """Write `src` into x at per-axis `offsets` (x[o0:o0+s0, o1:o1+s1, ...] = src); returns x.

    The KV-cache append. The rule that keeps it sound with lazy evaluation: the write is a
    node INDEX_WRITE(old x, src) that produces the new value, and the Tensor `x` is
    rebound to it (its views follow it; anything computed from the old x, pending or not,
    keeps seeing the old values). When the new value is realized, passes.inplace lets
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
    xs, ss = x.shape, src.shape
    if len(ss) != len(xs) or len(offsets) != len(xs):
        raise ShapeError(
            f"index_write: x shape {xs}, src shape {ss} and offsets {offsets} must have one entry per axis"
        )
    runtime = False
    for d, (o, n, m) in enumerate(zip(offsets, ss, xs)):
        if isinstance(o, RuntimeInt):
            runtime = True
            continue  # checked by sym() below
        if type(o) is not int and (not isinstance(o, int | np.integer) or isinstance(o, bool)):
            raise ShapeError(f"index_write: offsets must be ints (or tr.dynamic), got {offsets}")
        if o < 0 or o + n > m:
            raise IndexOutOfRangeError(
                f"index_write: src shape {ss} at offsets {offsets} reaches outside x shape {xs} (axis {d})"
            )
    if x.dtype is not src.dtype:
        lossy = (src.dtype.is_float and not x.dtype.is_float) or (x.dtype is DType.bool)
        if lossy:
            raise DTypeError(
                f"index_write: cannot write {src.dtype.value} into {x.dtype.value} without a cast; use astype()"
            )
        src = src.astype(x.dtype, copy=False)
    if x._viewof is None and src.size > 0:  # x owns its values: the offsets are runtime integers
        write_at_runtime_offsets(x, offsets, src)
    elif runtime:
        raise ShapeError(
            f"index_write: x (shape {xs}) is a view; a runtime offset (tr.dynamic) writes into a tensor that "
            "owns its values: index_write into the tensor x was taken from"
        )
    elif src.size > 0:
        write_box(x, tuple(int(o) for o in offsets), src)
    return x


def write_at_runtime_offsets(x: Tensor, offsets: tuple[Any, ...], src: Tensor) -> None:
    """INDEX_WRITE into x (a root) with its offsets read from the uniform: one program for every position.

    An axis that src fills whole keeps the offset 0; the others hold runtime integers
    (tr.dynamic ones as given, plain ints as variables of their own).
    """
    xs, ss = x.shape, src.shape
    arg = []
    dyn = False
    for d, (o, n, m) in enumerate(zip(offsets, ss, xs)):
        if n == m and not isinstance(o, RuntimeInt):
            arg.append(0)
            continue
        o = o if isinstance(o, RuntimeInt) else dynamic(int(o))
        arg.append(o.sym(0, m - n, _offset_what(d, ss, xs)))
        dyn = True
    value = make(Op.INDEX_WRITE, (x, src), xs, x.dtype, tuple(arg))
    value._lazy.dyn = dyn
    assign_root(x, value)


@functools.lru_cache(maxsize=256)
def _offset_what(axis: int, src_shape: tuple[int, ...], x_shape: tuple[int, ...]) -> str:
    """An index_write offset's part in its out-of-range message, formatted once per shapes: a KV cache
    write traces the same one every token."""
    return f"index_write: offset of axis {axis} (src shape {src_shape}, x shape {x_shape})"


# --- the Tensor methods this module adds (tracer.tensor explains why they live here) -----------


def _setitem_method(self: Tensor, index: Any, value: Any) -> None:
    setitem(self, index, value)


def _index_write_method(self: Tensor, src: Any, offsets: Sequence[int]) -> Tensor:
    """Write `src` into this tensor at per-axis `offsets`, in place; returns self (tracer.mutation.index_write)."""
    return index_write(self, src, offsets)


def _inplace_operator(symbol: str, op: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        assign_result(self, symbol, op(self, other))
        return self

    method.__doc__ = f"x {symbol} y: the Tensor x shows the result (numpy's same_kind casting back to x's dtype)"
    return method


Tensor.__setitem__ = _setitem_method  # type: ignore[method-assign]
Tensor.index_write = _index_write_method  # type: ignore[attr-defined]
for _name, _symbol, _op in (
    ("__iadd__", "+=", operator.add),
    ("__isub__", "-=", operator.sub),
    ("__imul__", "*=", operator.mul),
    ("__itruediv__", "/=", operator.truediv),
    ("__ifloordiv__", "//=", operator.floordiv),
    ("__imod__", "%=", operator.mod),
    ("__ipow__", "**=", operator.pow),
    ("__imatmul__", "@=", operator.matmul),
    ("__iand__", "&=", operator.and_),
    ("__ior__", "|=", operator.or_),
    ("__ixor__", "^=", operator.xor),
):
    setattr(Tensor, _name, _inplace_operator(_symbol, _op))
