"""Tracing made cheaper per Lazy: the shortcuts keep what the general paths decided.

x[...] without the alias step, resolve_index counting as it checks, broadcasts_to as a loop,
sdpa and rope reading shapes once, index_write's cached out-of-range text, tr.nn.linear's
product as Lazies, unary and binary ops of plain tensors (and python numbers) without the
general dtype and broadcast steps.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest

import tracer as tr
from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError
from ir.ops import Op
from ir.optable.record import Kind
from tests.helpers import assert_close
from tracer.graph_builder import walk
from tracer.host import ConstantCache
from tracer.indexing import is_advanced, resolve_index
from tracer.tensor import binary, broadcasts_to, unary


def _numpy_broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_to(np.empty(shape), target).shape == target
    except ValueError:
        return False


def test_broadcasts_to_is_numpys_rule() -> None:
    shapes = [(), (1,), (3,), (1, 3), (2, 1), (2, 3), (1, 1, 3), (4, 2, 3), (2, 3, 1)]
    for shape, target in itertools.product(shapes, repeat=2):
        assert broadcasts_to(shape, target) == _numpy_broadcasts(shape, target), (shape, target)


class _Pair(NamedTuple):
    a: int
    b: slice


def test_is_advanced_items_and_tuple_subclasses() -> None:
    assert not is_advanced((slice(None), 1, None, Ellipsis))
    assert not is_advanced(_Pair(0, slice(1, 2)))  # a tuple's items, as numpy reads it
    assert is_advanced((slice(None), [0, 1]))
    assert is_advanced(np.array([0, 2]))
    assert not is_advanced(np.int64(1))


@pytest.mark.parametrize(
    "index",
    [
        (slice(None), slice(1, 3)),
        (0, slice(None, None, 2)),
        (None, Ellipsis, 1),
        (slice(None), None, slice(-2, None)),
        (Ellipsis,),
        (slice(None), slice(None), slice(None)),
        (-1, 2, slice(1, 4)),
    ],
)
def test_resolve_index_shapes_are_numpys(index: tuple) -> None:
    a = np.arange(2 * 3 * 5).reshape(2, 3, 5)
    assert resolve_index(a.shape, index).shape == a[index].shape


def test_slices_are_new_view_objects_that_write_through() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = tr.tensor(a)
    for index in [(slice(None), slice(None)), (slice(0, 2),), (slice(None), slice(1, 3))]:
        y = x[index]
        assert y is not x and y.base is x
    y = x[1:, 1:3]
    y += 1.0
    expect = a.copy()
    expect[1:, 1:3] += 1
    assert_close(x.numpy(), expect)
    assert_close(y.numpy(), expect[1:, 1:3])


def test_runtime_length_out_of_range_names_the_axis() -> None:
    cache = tr.zeros((1, 2, 8, 4))
    with pytest.raises(
        IndexOutOfRangeError, match=r"slice length of axis 2 \(shape \(1, 2, 8, 4\)\): 9 is outside 0..8"
    ):
        cache[:, :, : tr.dynamic(8) + 1]


def test_index_write_out_of_range_text_per_shapes() -> None:
    x = tr.zeros((1, 2, 8, 4))
    for pos in (3, 5):  # the same shapes: the text formatted once serves both writes
        x.index_write(tr.ones((1, 2, 1, 4)), (0, 0, tr.dynamic(pos), 0))
    with pytest.raises(
        IndexOutOfRangeError, match=r"offset of axis 2 \(src shape \(1, 2, 1, 4\), x shape \(1, 2, 8, 4\)\)"
    ):
        x.index_write(tr.ones((1, 2, 1, 4)), (0, 0, tr.dynamic(8), 0))
    expect = np.zeros((1, 2, 8, 4), np.float32)
    expect[:, :, [3, 5]] = 1
    assert_close(x.numpy(), expect)


def test_sdpa_fast_paths_keep_shapes_and_errors(rng: np.random.Generator) -> None:
    q = tr.tensor(rng.standard_normal((1, 4, 2, 8), dtype=np.float32))
    k = tr.tensor(rng.standard_normal((1, 2, 5, 8), dtype=np.float32))
    v = tr.tensor(rng.standard_normal((1, 2, 5, 8), dtype=np.float32))
    out = tr.nn.scaled_dot_product_attention(q, k, v)  # grouped: 4 query heads over 2 kv heads
    assert out._lazy.op is Op.ATTENTION and out.dtype is tr.float32 and out.shape == (1, 4, 2, 8)
    assert out._lazy.arg.group == 2
    with pytest.raises(DTypeError, match="scaled_dot_product_attention: k must be float, got int32"):
        tr.nn.scaled_dot_product_attention(q, k.astype(tr.int32), v)
    with pytest.raises(ShapeError, match="cannot share 3 kv heads"):
        tr.nn.scaled_dot_product_attention(q, tr.zeros((1, 3, 5, 8)), tr.zeros((1, 3, 5, 8)))


def test_rope_shape_dtype_and_arg(rng: np.random.Generator) -> None:
    x = tr.tensor(rng.standard_normal((1, 2, 3, 8), dtype=np.float32))
    cos = tr.tensor(rng.standard_normal((3, 4), dtype=np.float32))
    sin = tr.tensor(rng.standard_normal((3, 4), dtype=np.float32))
    a, b = tr.nn.rope(x, cos, sin), tr.nn.rope(x, cos, sin, interleaved=True)
    assert a.shape == x.shape and a.dtype is tr.float32
    assert not a._lazy.arg.interleaved and b._lazy.arg.interleaved


def _structure(t: tr.Tensor) -> tuple:
    return walk([t._lazy]).structure


def _linear_by_steps(x: tr.Tensor, w: tr.Tensor, bias: tr.Tensor | None, rows: tuple[int, int]) -> tr.Tensor:
    """linear's steps as separate Tensors (none of them outlives the call, so none becomes an output)."""
    product = (x if x.shape == rows else x.reshape(rows)) @ w.T
    return (product if bias is None else product + bias).reshape(x.shape[:-1] + (w.shape[0],))


@pytest.mark.parametrize("dtype", [tr.float32, tr.float16])
def test_linear_product_is_the_general_paths_graph(rng: np.random.Generator, dtype: tr.DType) -> None:
    """tr.nn.linear's product built as Lazies (rows_times_transposed): the nodes of its steps one by one."""
    w = tr.tensor(rng.standard_normal((5, 8)), dtype)
    b = tr.tensor(rng.standard_normal(5), dtype)
    for shape in [(4, 8), (2, 3, 8), (1, 1, 8), (8,)]:
        x = tr.tensor(rng.standard_normal(shape), dtype)
        rows = (int(np.prod(shape[:-1])), 8)
        for bias in (None, b):
            got = tr.nn.linear(x, w, bias)
            want = _linear_by_steps(x, w, bias, rows)
            assert got.shape == want.shape and got.dtype is dtype
            assert _structure(got) == _structure(want)
            expect = np.asarray(x.numpy(), np.float32).reshape(rows) @ w.numpy().astype(np.float32).T
            if bias is not None:
                expect = expect + b.numpy()
            assert_close(got.numpy(), expect.reshape(want.shape), atol=1e-2 if dtype is tr.float16 else 1e-5)


def test_linear_product_leaves_the_rest_to_the_general_path(rng: np.random.Generator) -> None:
    x = tr.tensor(rng.standard_normal((2, 8)), tr.float32)
    with pytest.raises(DTypeError, match=r"matmul: int32 @ int32: only float matmul"):
        tr.nn.linear(x.astype(tr.int32), tr.zeros((3, 8), tr.int32))
    mixed = tr.nn.linear(x, tr.zeros((3, 8), tr.float16))  # promoted, as matmul does
    assert mixed.dtype is tr.float32 and mixed.shape == (2, 3)
    with pytest.raises(ShapeError, match=r"linear: x shape \(2, 8\) does not fit weight shape \(3, 7\)"):
        tr.nn.linear(x, tr.zeros((3, 7)))


class _Shown(tr.Tensor):
    """Another Tensor class showing the same value: unary and binary take their general paths for it."""

    __slots__ = ()


def _outcome(fn: Callable[..., tr.Tensor], *args: object) -> object:
    """The graph fn(*args) makes, or the error it raises."""
    try:
        return _structure(fn(*args))
    except (DTypeError, ShapeError) as e:
        return f"{type(e).__name__}: {e}"


_ELEMENTWISE = [op for op in Op if op.opdef.kind is Kind.ELEMENTWISE]


@pytest.mark.parametrize("dtype", [tr.float32, tr.float16, tr.int32, tr.uint32, tr.bool])
def test_unary_and_binary_fast_paths_make_the_general_paths_nodes(rng: np.random.Generator, dtype: tr.DType) -> None:
    """Plain tensors of one dtype, one shape ending the other's, or a tensor and a python number: the
    general path's graph or error."""
    a = tr.tensor((rng.random((3, 4)) * 4).astype(dtype.np))
    zero_d = tr.tensor(np.asarray(2, dtype.np))
    row = tr.tensor((rng.random(4) * 4).astype(dtype.np))  # a bias: its shape ends a's
    batch = tr.tensor((rng.random((2, 3, 4)) * 4).astype(dtype.np))  # a's shape ends its
    wrong = tr.tensor((rng.random(3) * 4).astype(dtype.np))  # ends neither: the general path's error
    others = [tr.tensor((rng.random((3, 4)) * 4).astype(dtype.np)), zero_d, row, batch, wrong]
    others += [2.0, 3, -1, 2**40, float("nan"), 1e40, -0.0]
    for op in _ELEMENTWISE:
        if op.opdef.arity == 1:
            for x in (a, zero_d):
                assert _outcome(unary, op, x) == _outcome(unary, op, _Shown(x._lazy)), op
            continue
        for x in (a, zero_d):
            for y in others:
                general = _Shown(x._lazy)
                assert _outcome(binary, op, x, y) == _outcome(binary, op, general, y), (op, y)
                assert _outcome(binary, op, y, x) == _outcome(binary, op, y, general), (op, y)


def test_reductions_move_their_axes_without_views(rng: np.random.Generator) -> None:
    """A reduction's operand permute is its own step: the graph numpy's rules give, no view of x registered."""
    x = tr.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    for axis, order in [(-1, None), (2, None), ((1, 2), None), (0, (1, 2, 0)), ((0, 2), (1, 0, 2)), (None, None)]:
        got = x.sum(axis)
        operand = got._lazy.srcs[0]
        if order is None:
            assert operand is x._lazy
        else:
            assert operand.op is Op.PERMUTE and operand.arg == order and operand.srcs == (x._lazy,)
        assert_close(got.numpy(), x.numpy().sum(axis), atol=1e-5)
    assert x._cell is None  # no view was made of x
    with pytest.raises(ShapeError, match=r"sum: axis 3 is out of range for shape \(2, 3, 4\) \(ndim 3\)"):
        x.sum(3)
    with pytest.raises(ShapeError, match="repeated axis"):
        x.sum((1, -2))


def test_transpose_property_is_permutes_view() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = tr.tensor(a)
    t = x.T
    assert t.base is x and t.shape == (4, 3, 2) and t._lazy.arg == (2, 1, 0)
    assert _structure(t) == _structure(x.permute(2, 1, 0))
    t[0] = -1.0  # writes through, as numpy's x.T[0] = -1
    expect = a.copy()
    expect.T[0] = -1
    assert_close(x.numpy(), expect)
    assert tr.tensor(np.ones(3, np.float32)).T.shape == (3,)


def test_constant_cache_hits_without_the_lock_under_threads() -> None:
    """Hits race evictions in other threads: every get returns its value's constant, the cache stays bounded."""
    cache = ConstantCache(capacity=8)
    errors: list[str] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def work(seed: int) -> None:
        for i in range(4000):
            value = float((i * 7 + seed) % 12)  # 12 values through 8 places: hits and evictions interleave
            lz = cache.get(value, tr.float32)
            if lz.host is None or float(lz.host) != value or lz.dtype is not tr.float32 or not lz.pinned:
                errors.append(f"{value}: {lz.host}")
            if len(cache) > cache.capacity + 1:  # one insert may be between its add and its evict
                errors.append(f"size {len(cache)}")

    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:5]
    assert len(cache) <= cache.capacity
    assert cache.get(3.0, tr.float32) is cache.get(3.0, tr.float32)
