"""Sorting on the GPU (tracer/sorting.py, kernels/sort): argsort, sort, topk against numpy.

The oracle is numpy's stable argsort (ascending: NaN last, -0.0 equal to +0.0) and, for
descending order, a lexsort written here: NaN first, then the largest, ties in index order.
Every dtype, rows of every length class (one short workgroup, one full workgroup, the merge
steps of longer rows, asserted through the dispatches), edge values, strided operands, empty
and 0-d tensors, and the reference interpreter on the graph before and after the passes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.kernel import LOOP_BUDGET
from backend_wgpu.kernels.sort.bitonic import BitonicSortKernel
from ir.interpret import interpret
from ir.ops import Op
from passes.pipeline import run_pipeline
from tests.helpers import kernels_of
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu

NAN, INF = np.nan, np.inf
DTYPES = ["float32", "float16", "int32", "uint32", "bool"]
LENGTHS = [1, 2, 3, 5, 64, 127, 128, 129, 1000, 2048, 2049, 5000]


def needs(dtype: str) -> None:
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip(f"the adapter ({get_device().caps.name}) lacks shader-f16")


def oracle(x: np.ndarray, descending: bool = False, axis: int = -1) -> np.ndarray:
    """The stable argsort of x along axis: numpy's for ascending; NaN first, then the largest for descending."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    moved = np.moveaxis(x, axis, -1)
    nan = np.isnan(moved) if moved.dtype.kind == "f" else np.zeros(moved.shape, bool)
    neg = -np.where(nan, 0, moved).astype(np.float64 if moved.dtype.kind == "f" else np.int64)
    ids = np.broadcast_to(np.arange(moved.shape[-1]), moved.shape)
    out = np.lexsort((ids, neg, ~nan), axis=-1)  # the last key sorts first: NaN, then -x, then index
    return np.moveaxis(out, -1, axis)


def data(shape: tuple[int, ...], dtype: str, seed: int = 0, distinct: int = 20) -> np.ndarray:
    """Random values from a few distinct ones (so ties abound), NaN among the floats."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    v = rng.integers(0 if dtype == "uint32" else -distinct // 2, distinct // 2 + 1, shape).astype(dtype)
    if dtype.startswith("float") and v.size:
        v = v / np.asarray(4, dtype)
        v.reshape(-1)[:: max(v.size // 5, 1)] = NAN
    return v


def sort_kernels(*tensors: tr.Tensor) -> list[tuple[str, str]]:
    return [(k, v) for k, v, _ in kernels_of(*tensors) if k in ("bitonic_sort", "sort_merge")]


def expected_kernels(n: int) -> list[tuple[str, str]]:
    """The dispatches of one argsort of rows of n: one bitonic run sort, then a merge per doubling."""
    block = BitonicSortKernel.block
    if n <= 128:
        return [("bitonic_sort", "small")]
    if n <= block:
        return [("bitonic_sort", "block")]
    return [("bitonic_sort", "block")] + [("sort_merge", "")] * math.ceil(math.log2(n / block))


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_argsort_every_dtype_and_length(dtype: str, descending: bool) -> None:
    needs(dtype)
    for n in LENGTHS:
        x = data((3, n), dtype, seed=n)
        got = tr.argsort(tr.tensor(x), descending=descending)
        assert got.dtype is tr.int32
        assert sort_kernels(got) == expected_kernels(n), n
        np.testing.assert_array_equal(got.numpy(), oracle(x, descending), err_msg=f"n={n}")


@pytest.mark.parametrize("n", [70_000, 2048 * 8])
def test_long_rows_take_merge_steps(n: int) -> None:
    """Rows past one workgroup's 2,048: runs sorted in workgroup memory, then log2(n / 2048) merges."""
    x = data((2, n), "float32", seed=1, distinct=1000)
    t = tr.tensor(x)
    got = tr.argsort(t)
    assert sort_kernels(got) == expected_kernels(n)
    np.testing.assert_array_equal(got.numpy(), oracle(x))
    np.testing.assert_array_equal(tr.argsort(t, descending=True).numpy(), oracle(x, True))
    np.testing.assert_array_equal(tr.sort(t).numpy(), np.sort(x, kind="stable"))
    i = np.random.default_rng(2).integers(-(2**31), 2**31, (1, n)).astype(np.int32)  # all 32 bits matter
    np.testing.assert_array_equal(tr.argsort(tr.tensor(i)).numpy(), oracle(i))


EDGES = {
    "float32": [NAN, -NAN, INF, -INF, 0.0, -0.0, 1e-45, -1e-45, 1.2e-38, -3.4e38, 3.4e38, 1.0, -1.0, 1.0, NAN, 0.0],
    "float16": [NAN, -NAN, INF, -INF, 0.0, -0.0, 6e-8, -6e-8, 65504.0, -65504.0, 1.0, -1.0, 1.0, NAN, 0.0, -0.0],
    "int32": [2**31 - 1, -(2**31), 0, -1, 1, -(2**31), 2**31 - 1, 7, -7, 0],
    "uint32": [2**32 - 1, 0, 2**31, 2**31 - 1, 1, 0, 2**32 - 1, 5],
    "bool": [True, False, True, True, False, False, True],
}


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_values_and_ties(dtype: str) -> None:
    """NaN of both signs last (first descending) in index order, -0.0 == +0.0 (index order kept),
    subnormals, the extremes of each dtype."""
    needs(dtype)
    x = np.array(EDGES[dtype], dtype=dtype)
    for descending in (False, True):
        got = tr.argsort(tr.tensor(x), descending=descending).numpy()
        np.testing.assert_array_equal(got, oracle(x, descending), err_msg=f"descending={descending}")
    values, want = tr.sort(tr.tensor(x)).numpy(), np.sort(x, kind="stable")
    bits = (lambda a: a) if dtype == "bool" else (lambda a: a.view(f"u{x.itemsize}"))
    np.testing.assert_array_equal(bits(values), bits(want))  # bit for bit: -0.0 and +0.0 keep their order


def test_float_order_matches_numpy_on_random_bits() -> None:
    """Any float32 bit pattern (NaN payloads, subnormals, both zeros): numpy's stable order."""
    bits = np.random.default_rng(3).integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    np.testing.assert_array_equal(tr.argsort(tr.tensor(x)).numpy(), np.argsort(x, kind="stable"))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, None])
def test_axes_and_strided_operands(axis: Any) -> None:
    x = data((4, 5, 6), "float32", seed=4)
    t = tr.tensor(x)
    np.testing.assert_array_equal(tr.argsort(t, axis).numpy(), np.argsort(x, axis=axis, kind="stable"))
    np.testing.assert_array_equal(tr.sort(t, axis).numpy(), np.sort(x, axis=axis, kind="stable"))
    if axis is not None:
        xt = np.swapaxes(x, 0, 2)[:, 1:, ::2]  # a transposed, sliced view: a strided operand
        tt = t.swapaxes(0, 2)[:, 1:, ::2]
        np.testing.assert_array_equal(tr.argsort(tt, axis).numpy(), np.argsort(xt, axis=axis, kind="stable"))
        np.testing.assert_array_equal(tr.argsort(tt, axis, descending=True).numpy(), oracle(xt, True, axis))


def test_long_strided_rows() -> None:
    """A long row read down a column (stride 3) through every merge step."""
    x = data((5000, 3), "int32", seed=5, distinct=300)
    got = tr.argsort(tr.tensor(x), axis=0)
    np.testing.assert_array_equal(got.numpy(), oracle(x, axis=0))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 3)])
def test_empty(shape: tuple[int, ...]) -> None:
    x = np.zeros(shape, np.float32)
    for axis in (-1, 0):
        got = tr.argsort(tr.tensor(x), axis)
        assert got.shape == shape and got.dtype is tr.int32
        assert tr.sort(tr.tensor(x), axis).shape == shape
    values, ids = tr.topk(tr.tensor(x), 0, axis=-1)
    assert values.shape == ids.shape == shape[:-1] + (0,)


def test_zero_d() -> None:
    x = np.array(2.5, np.float32)
    np.testing.assert_array_equal(tr.argsort(tr.tensor(x)).numpy(), np.argsort(x))  # numpy: [0]
    np.testing.assert_array_equal(tr.sort(tr.tensor(x), axis=None).numpy(), np.sort(x, axis=None))
    with pytest.raises(tr.ShapeError, match="sort: x is 0-d.*axis=None"):
        tr.sort(tr.tensor(x))
    values, ids = tr.topk(tr.tensor(x), 1)
    assert values.numpy().tolist() == [2.5] and ids.numpy().tolist() == [0]


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_topk(dtype: str, largest: bool) -> None:
    """torch.topk's order: largest (smallest) first, ties by lower index, NaN the largest value."""
    needs(dtype)
    for n, k in [(1, 1), (7, 3), (300, 17), (5000, 5), (10, 10), (10, 0)]:
        x = data((3, n), dtype, seed=n)
        values, ids = tr.topk(tr.tensor(x), k, largest=largest)
        want = oracle(x, descending=largest)[:, :k]
        np.testing.assert_array_equal(ids.numpy(), want)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, axis=-1))
    x = data((6, 4, 5), dtype, seed=9)
    values, ids = tr.tensor(x).topk(2, axis=0, largest=largest)  # along an outer axis, as a method
    want = np.moveaxis(oracle(np.moveaxis(x, 0, -1), largest)[..., :2], -1, 0)
    np.testing.assert_array_equal(ids.numpy(), want)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, axis=0))


def test_sort_method_sorts_in_place_as_numpy() -> None:
    """x.sort() is numpy's ndarray.sort: x itself changes (every name bound to it, its views), None returned."""
    x = data((3, 6), "float32", seed=6)
    t = tr.tensor(x)
    alias, row = t, t[1]
    assert t.sort(axis=0) is None
    x.sort(axis=0, kind="stable")
    np.testing.assert_array_equal(alias.numpy(), x)
    np.testing.assert_array_equal(row.numpy(), x[1])
    row.sort()  # through a view: its base changes
    x[1].sort()
    np.testing.assert_array_equal(t.numpy(), x)
    t.sort(descending=True)
    np.testing.assert_array_equal(t.numpy(), np.take_along_axis(x, oracle(x, True), -1))


def test_numpy_functions_and_array_api() -> None:
    x = data((4, 9), "int32", seed=7)
    t = tr.tensor(x)
    got = np.sort(t)
    assert isinstance(got, tr.Tensor)  # on the GPU, not a host fallback
    np.testing.assert_array_equal(got.numpy(), np.sort(x))
    np.testing.assert_array_equal(np.argsort(t, axis=0, kind="stable").numpy(), np.argsort(x, 0, kind="stable"))
    np.testing.assert_array_equal(t.argsort(0).numpy(), np.argsort(x, 0, kind="stable"))
    xp = t.__array_namespace__()
    np.testing.assert_array_equal(xp.argsort(t, descending=True).numpy(), oracle(x, True))
    np.testing.assert_array_equal(xp.sort(t, axis=0, descending=True).numpy(), -np.sort(-x, axis=0, kind="stable"))
    m = np.array([[np.iinfo(np.int32).min, 0, np.iinfo(np.int32).max]], np.int32)  # -x would overflow
    np.testing.assert_array_equal(xp.argsort(tr.tensor(m), descending=True).numpy(), [[2, 1, 0]])


def test_interpreter_agrees_before_and_after_the_passes() -> None:
    """ARGSORT and its merge steps have references: the graph after split_sort evaluates the same."""
    x = data((2, 5000), "float32", seed=8, distinct=500)
    y = tr.argsort(tr.tensor(x), descending=True)
    built = build_graph([y._lazy])
    inputs = [tr.Tensor(lz).numpy() for lz in built.inputs]
    after = run_pipeline(built.graph, get_device().caps).graph
    assert sum(n.op is Op.ARGSORT_MERGE for n in after) == 2
    want = oracle(x, True)
    np.testing.assert_array_equal(interpret(built.graph, inputs)[0], want)
    np.testing.assert_array_equal(interpret(after, inputs)[0], want)
    np.testing.assert_array_equal(y.numpy(), want)


def test_every_loop_is_within_the_budget() -> None:
    """The bitonic block and a merge of the longest run a binding can hold stay far under lavapipe's budget."""
    x = tr.tensor(np.zeros((1, 3 * 2048), np.float32))
    program = tr.compile(tr.argsort(x))
    assert [d.kernel for d in program.dispatches] == ["bitonic_sort", "sort_merge", "sort_merge"]
    from backend_wgpu.kernels import KERNELS

    for nid in program.graph.schedule.dispatches:
        node = program.graph[nid]
        assert KERNELS[node.kernel.name](node, program.graph).loop_iterations() < LOOP_BUDGET // 50


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: tr.topk(t, 6), r"topk: k must be an int in \[0, 5\]"),
        (lambda t: tr.topk(t, -1), r"topk: k must be an int in \[0, 5\]"),
        (lambda t: tr.argsort(t, axis=2), "argsort"),
        (lambda t: tr.sort(t, order="x"), "order= sorts numpy's structured arrays"),
        (lambda t: t.sort(axis=None), r"tr.sort\(x, axis=None\)"),
    ],
)
def test_bad_arguments_name_the_op(call: Any, message: str) -> None:
    t = tr.tensor(np.arange(10, dtype=np.float32).reshape(2, 5))
    with pytest.raises(tr.WgjitError, match=message):
        call(t)
    with pytest.raises(ValueError, match="kind must be one of"):
        tr.argsort(t, kind="bogus")
    np.testing.assert_array_equal(tr.argsort(t).numpy(), np.argsort(t.numpy()))  # nothing else broke
