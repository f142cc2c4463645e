"""numpy's everyday API against numpy: reductions (var, std, any, all, logsumexp), clip,
nan_to_num, argmax/argmin keepdims; on edge values, every dtype, empty and 0-d tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from tests.helpers import assert_close, kernels_of

pytestmark = pytest.mark.gpu

NAN, INF = np.nan, np.inf
DTYPES = ["float32", "float16", "int32", "bool"]
# axis arguments and the shapes they apply to: all axes, one, negative, a tuple, none at all
AXES = [None, 0, -1, (0, 2), ()]
SHAPES = [(3, 4, 5), (2, 0, 3), (1, 1, 1)]


def needs(dtype: str) -> None:
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip(f"the adapter ({get_device().caps.name}) lacks shader-f16")


def data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "int32":
        return rng.integers(-5, 6, shape).astype(np.int32)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def close(got: np.ndarray, want: np.ndarray, dtype: str, rtol: float = 2e-5, atol: float = 1e-5) -> None:
    """float16 results are float16 roundings of float32 work: a few float16 ulp."""
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype == "float16":
        rtol, atol = max(rtol, 4e-3), max(atol, 4e-3)
    assert_close(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std(name: str, dtype: str, axis: Any, keepdims: bool, ddof: int) -> None:
    needs(dtype)
    for shape in SHAPES:
        x = data(shape, dtype)
        with np.errstate(all="ignore"):  # n <= ddof: numpy divides by 0 too (inf, or NaN for 0 / 0)
            want = getattr(np, name)(x.astype(np.float64), axis=axis, ddof=ddof, keepdims=keepdims)
        got = getattr(tr, name)(tr.tensor(x), axis=axis, ddof=ddof, keepdims=keepdims)
        assert got.dtype == (tr.float16 if dtype == "float16" else tr.float32)
        close(got.numpy(), want.astype(got.dtype.np), dtype)
        method = getattr(tr.tensor(x), name)(axis, ddof=ddof, keepdims=keepdims)
        close(method.numpy(), want.astype(got.dtype.np), dtype)


def test_var_of_special_values_and_0d() -> None:
    x = np.array([[1.0, NAN, 3.0], [INF, 1.0, 2.0], [1e20, -1e20, 0.0], [5.0, 5.0, 5.0]], np.float32)
    with np.errstate(all="ignore"):
        close(tr.var(tr.tensor(x), axis=1).numpy(), np.var(x.astype(np.float64), axis=1).astype(np.float32), "float32")
        assert np.isnan(tr.tensor(np.float32(2.0)).var(ddof=1).item())  # 0-d: n = 1, 0 / 0
        assert tr.tensor(np.float32(2.0)).std().item() == 0.0


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all(name: str, dtype: str, axis: Any, keepdims: bool) -> None:
    needs(dtype)
    for shape in SHAPES:
        x = data(shape, dtype)
        if dtype != "bool":
            x = np.where(data(shape, "bool", seed=1), 0, x).astype(dtype)  # zeros in every row
        want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
        got = getattr(tr, name)(tr.tensor(x), axis=axis, keepdims=keepdims)
        assert got.dtype == tr.bool
        np.testing.assert_array_equal(got.numpy(), want)
        np.testing.assert_array_equal(getattr(tr.tensor(x), name)(axis, keepdims=keepdims).numpy(), want)


def test_any_all_count_nan_as_true_and_0d() -> None:
    x = np.array([[NAN, 0.0], [0.0, 0.0], [-0.0, INF]], np.float32)
    np.testing.assert_array_equal(tr.any(tr.tensor(x), axis=1).numpy(), np.any(x, axis=1))
    np.testing.assert_array_equal(tr.all(tr.tensor(x), axis=0).numpy(), np.all(x, axis=0))
    assert tr.tensor(np.float32(0.0)).any().item() is False
    assert tr.tensor(np.int32(3)).all().item() is True


# --- prod -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES + ["uint32"])
def test_prod(dtype: str, axis: Any, keepdims: bool) -> None:
    """numpy's product, its int64 narrowed to int32 (so ints wrap), floats within their roundings."""
    needs(dtype)
    for shape in SHAPES:
        x = data(shape, dtype) if dtype != "uint32" else data(shape, "int32").astype(np.uint32)
        up = x.astype(np.float32) if dtype == "float16" else x  # float16 multiplies in float32, rounded once
        with np.errstate(over="ignore"):  # products past 65504 are inf in float16, as numpy's
            want = np.prod(up, axis=axis, keepdims=keepdims).astype(np.int32 if dtype == "bool" else x.dtype)
        got = tr.prod(tr.tensor(x), axis=axis, keepdims=keepdims)
        assert got.dtype.np == (np.int32 if dtype == "bool" else x.dtype)
        if dtype in ("int32", "uint32", "bool"):
            np.testing.assert_array_equal(got.numpy(), want)
        else:  # each term's rounding in any order: n ulp of the product
            n = x.size // max(want.size, 1)
            close(got.numpy(), want, dtype, rtol=n * 1.2e-7 + 1e-7, atol=0)
        np.testing.assert_array_equal(tr.tensor(x).prod(axis, keepdims=keepdims).numpy(), got.numpy())


def test_prod_edges_wrapping_and_long_rows() -> None:
    x = np.array([[NAN, 1, 0], [INF, 0, 1], [-INF, 2, 3], [1e30, 1e30, -1.0], [-0.0, 1, 1]], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(tr.prod(tr.tensor(x), 1).numpy(), np.prod(x, 1))  # NaN, inf*0, overflow, -0
    seven = np.full((3, 40), 7, np.int32)  # 7**40 wraps: numpy's int64 product narrowed to int32
    np.testing.assert_array_equal(tr.prod(tr.tensor(seven), 1).numpy(), np.prod(seven, 1).astype(np.int32))
    assert tr.prod(tr.zeros((3, 0))).item() == 1.0  # the empty product
    np.testing.assert_array_equal(tr.prod(tr.zeros((3, 0)), 1).numpy(), [1, 1, 1])
    assert tr.tensor(np.float32(2.5)).prod().item() == 2.5
    assert tr.prod(tr.tensor([True, True, False])).item() == 0
    np.testing.assert_array_equal(tr.prod(tr.tensor([[1, 2], [3, 4]]), dtype=tr.float32).numpy(), 24.0)
    # long rows: a workgroup per row, vec4 loads where contiguous, fused with what comes before and after
    y = np.random.default_rng(0).uniform(0.99, 1.01, (3, 20_000)).astype(np.float32)
    got = (tr.tensor(y) * 1.0001).prod(axis=1) + 1.0
    ((kernel, variant, width),) = kernels_of(got)  # one kernel: the multiply, the product and the add
    assert (kernel, variant.split(":")[0], width) == ("reduce", "prod_rows", 4)
    want = np.prod(y.astype(np.float64) * 1.0001, axis=1) + 1.0
    assert_close(got.numpy(), want, rtol=20_000 * 1.2e-7, atol=0)
    strided = tr.tensor(y.T.copy()).prod(axis=0)  # the same rows read down columns
    assert_close(strided.numpy(), np.prod(y.astype(np.float64), axis=1), rtol=20_000 * 1.2e-7, atol=0)


def test_prod_through_numpy_and_the_array_api() -> None:
    x = data((3, 4), "int32")
    t = tr.tensor(x)
    for got in (np.prod(t, axis=1), np.multiply.reduce(t, axis=1), t.__array_namespace__().prod(t, axis=1)):
        assert isinstance(got, tr.Tensor)  # lazy, on the GPU
        np.testing.assert_array_equal(got.numpy(), np.prod(x, axis=1).astype(np.int32))


def _logsumexp(x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    """scipy.special.logsumexp, written out in float64."""
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else axis
    shape = np.sum(x, axis=axes, keepdims=keepdims).shape
    if any(x.shape[a] == 0 for a in axes):
        return np.full(shape, -INF)
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(all="ignore"):
        return np.log(np.sum(np.exp(x - m), axis=axes, keepdims=keepdims)) + m.reshape(shape)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_logsumexp(dtype: str, axis: Any, keepdims: bool) -> None:
    needs(dtype)
    for shape in SHAPES:
        x = data(shape, dtype)
        want = _logsumexp(x.astype(np.float64), axis, keepdims)
        got = tr.logsumexp(tr.tensor(x), axis=axis, keepdims=keepdims)
        close(got.numpy(), want.astype(got.dtype.np), dtype)


def test_logsumexp_of_large_and_infinite_values() -> None:
    rows = np.array(
        [[1000.0, 1000.0, 0.0], [-INF, -INF, -INF], [INF, 1.0, 2.0], [NAN, 1.0, 2.0], [-1000.0, -1001.0, -INF]],
        np.float32,
    )
    got = tr.tensor(rows).logsumexp(axis=1).numpy()
    want = _logsumexp(rows.astype(np.float64), 1, False).astype(np.float32)
    close(got, want, "float32")
    assert tr.logsumexp(tr.tensor(np.float32(3.0))).item() == 3.0  # 0-d


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_clip(dtype: str) -> None:
    needs(dtype)
    x = np.array([-5, -1, 0, 1, 2, 7, NAN if dtype != "int32" else 3], np.float64).astype(dtype)
    np.testing.assert_array_equal(tr.clip(tr.tensor(x), -1, 2).numpy(), np.clip(x, -1, 2))
    np.testing.assert_array_equal(tr.tensor(x).clip(None, 1).numpy(), np.clip(x, None, 1))
    lo = np.array([0, 0, 1, 1, -3, 3, 0], dtype)
    np.testing.assert_array_equal(tr.clip(tr.tensor(x), tr.tensor(lo), 5).numpy(), np.clip(x, lo, 5))
    np.testing.assert_array_equal(tr.clip(tr.tensor(x[:0]), 0, 1).numpy(), np.clip(x[:0], 0, 1))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_nan_to_num(dtype: str) -> None:
    needs(dtype)
    if dtype in ("int32", "bool"):
        x = data((2, 3), dtype)
        np.testing.assert_array_equal(tr.nan_to_num(tr.tensor(x)).numpy(), np.nan_to_num(x))
        return
    with np.errstate(over="ignore"):
        x = np.array([[NAN, INF, -INF], [1.5, -0.0, 3e38]], np.float32).astype(dtype)
    for kwargs in ({}, {"nan": -1.0}, {"nan": 2.5, "posinf": 7.0, "neginf": -7.0}):
        got = tr.nan_to_num(tr.tensor(x), **kwargs)
        assert got.dtype.np == x.dtype
        np.testing.assert_array_equal(got.numpy(), np.nan_to_num(x, **kwargs))
    np.testing.assert_array_equal(tr.tensor(x[0, 0]).nan_to_num().numpy(), np.nan_to_num(x[0, 0]))  # 0-d


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_keepdims(name: str) -> None:
    x = data((3, 4, 5), "float32")
    for axis in (None, 0, 1, -1):
        want = getattr(np, name)(x, axis=axis, keepdims=True)
        got = getattr(tr, name)(tr.tensor(x), axis=axis, keepdims=True).numpy()
        np.testing.assert_array_equal(got, want)


# --- creation -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_eye(dtype: str) -> None:
    needs(dtype)
    for n, m, k in [(3, None, 0), (3, 5, 1), (4, 2, -1), (0, 3, 0), (2, 2, 5), (1, None, -1)]:
        got = tr.eye(n, m, k=k, dtype=dtype)
        np.testing.assert_array_equal(got.numpy(), np.eye(n, m, k, dtype=dtype))


def test_linspace() -> None:
    for start, stop, num, endpoint in [(0, 1, 5, True), (2, 3, 4, False), (-1, 1, 1, True), (5, 5, 3, True)]:
        want = np.linspace(start, stop, num, endpoint=endpoint).astype(np.float32)
        got = tr.linspace(start, stop, num, endpoint=endpoint)
        assert got.dtype == tr.float32 and got.shape == want.shape
        assert_close(got.numpy(), want, rtol=1e-6, atol=1e-6)
    assert tr.linspace(0, 1, 0).shape == (0,)
    assert tr.linspace(0.0, 1e6, 7).numpy()[-1] == np.float32(1e6)  # the end point exactly
    y, step = tr.linspace(0, 10, 5, retstep=True)
    assert step == np.linspace(0, 10, 5, retstep=True)[1]
    np.testing.assert_array_equal(tr.linspace(0, 10, 4, dtype=tr.int32).numpy(), np.linspace(0, 10, 4, dtype=np.int32))
    with pytest.raises(ValueError, match="linspace: num"):
        tr.linspace(0, 1, -1)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("name", ["tril", "triu"])
def test_tril_triu(name: str, dtype: str) -> None:
    for shape in [(4, 4), (3, 5), (2, 3, 4), (4,), (0, 3), (3, 0)]:
        x = data(shape, dtype)
        for k in (-2, -1, 0, 1, 3):
            np.testing.assert_array_equal(getattr(tr, name)(tr.tensor(x), k).numpy(), getattr(np, name)(x, k))


# --- shape ----------------------------------------------------------------------------------------

X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
SHAPE_CASES: list[tuple[str, Any, Any]] = [
    ("transpose()", lambda t: t.transpose(), lambda x: x.transpose()),
    ("transpose(1,2,0)", lambda t: t.transpose(1, 2, 0), lambda x: x.transpose(1, 2, 0)),
    ("transpose((2,0,1))", lambda t: t.transpose((2, 0, -2)), lambda x: x.transpose((2, 0, -2))),
    ("tr.transpose(axes)", lambda t: tr.transpose(t, (0, 2, 1)), lambda x: np.transpose(x, (0, 2, 1))),
    ("swapaxes", lambda t: t.swapaxes(0, -1), lambda x: x.swapaxes(0, -1)),
    ("moveaxis", lambda t: tr.moveaxis(t, 0, -1), lambda x: np.moveaxis(x, 0, -1)),
    ("moveaxis-many", lambda t: t.moveaxis([0, 1], [-1, 0]), lambda x: np.moveaxis(x, [0, 1], [-1, 0])),
    ("flip", lambda t: t.flip(1), lambda x: np.flip(x, 1)),
    ("flip-all", lambda t: tr.flip(t), lambda x: np.flip(x)),
    ("flip-tuple", lambda t: tr.flip(t, (0, -1)), lambda x: np.flip(x, (0, -1))),
    ("roll-flat", lambda t: tr.roll(t, 5), lambda x: np.roll(x, 5)),
    ("roll-axis", lambda t: t.roll(-1, 1), lambda x: np.roll(x, -1, 1)),
    ("roll-many", lambda t: tr.roll(t, (1, -5), (0, 2)), lambda x: np.roll(x, (1, -5), (0, 2))),
    ("tile", lambda t: tr.tile(t, (2, 1, 1, 2)), lambda x: np.tile(x, (2, 1, 1, 2))),
    ("tile-int", lambda t: t.tile(2), lambda x: np.tile(x, 2)),
    ("tile-zero", lambda t: tr.tile(t, (0, 1)), lambda x: np.tile(x, (0, 1))),
    ("repeat-flat", lambda t: t.repeat(2), lambda x: x.repeat(2)),
    ("repeat-axis", lambda t: tr.repeat(t, 3, -1), lambda x: np.repeat(x, 3, -1)),
    ("repeat-counts", lambda t: tr.repeat(t, [1, 0, 3], 1), lambda x: np.repeat(x, [1, 0, 3], 1)),
    ("split", lambda t: tr.split(t, 2, 2)[1], lambda x: np.split(x, 2, 2)[1]),
    ("split-at", lambda t: tr.split(t, [1, 3], -1)[2], lambda x: np.split(x, [1, 3], -1)[2]),
    ("array_split", lambda t: tr.array_split(t, 3, 2)[0], lambda x: np.array_split(x, 3, 2)[0]),
    ("chunk", lambda t: t.chunk(3, 2)[1], lambda x: np.array_split(x, [2], 2)[1]),
    ("concatenate", lambda t: tr.concatenate([t, t * 2], 1), lambda x: np.concatenate([x, x * 2], 1)),
    ("concatenate-flat", lambda t: tr.concatenate([t, t[0]], None), lambda x: np.concatenate([x, x[0]], None)),
]


@pytest.mark.parametrize(("name", "fn", "ref"), SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_shape_functions(name: str, fn: Any, ref: Any) -> None:
    for x in (X, X[:, :, :0], X.astype(np.int32), X > 5):
        if name.startswith(("split", "chunk", "array_split")) and x.shape[2] == 0:
            continue
        np.testing.assert_array_equal(fn(tr.tensor(x)).numpy(), ref(x))


def test_shape_functions_on_0d_and_1d() -> None:
    s = np.float32(3.0)
    np.testing.assert_array_equal(tr.tensor(s).transpose().numpy(), s.transpose())
    np.testing.assert_array_equal(tr.flip(tr.tensor(s)).numpy(), np.flip(s))
    np.testing.assert_array_equal(tr.roll(tr.tensor(s), 3).numpy(), np.roll(s, 3))
    np.testing.assert_array_equal(tr.tile(tr.tensor(s), (2, 2)).numpy(), np.tile(s, (2, 2)))
    np.testing.assert_array_equal(tr.repeat(tr.tensor(s), 3).numpy(), np.repeat(s, 3))
    v = np.arange(5, dtype=np.float32)
    assert len(tr.chunk(tr.tensor(v), 3)) == 3 and len(tr.split(tr.tensor(v), [2])) == 2


def test_shape_function_errors_name_the_alternative() -> None:
    m = tr.ones((2, 2))
    with pytest.raises(tr.ShapeError, match=r"transpose.*x\.T or x\.swapaxes"):
        m.transpose(0, 1)
    with pytest.raises(tr.ShapeError, match="array_split"):
        tr.split(tr.ones((5,)), 2)
    with pytest.raises(tr.ShapeError, match="moveaxis"):
        tr.moveaxis(tr.ones((2, 3)), 0, 2)
    with pytest.raises(tr.ShapeError, match="repeat"):
        tr.repeat(tr.ones((3,)), [1, 2])


# --- linear algebra -------------------------------------------------------------------------------

LINALG_CASES: list[tuple[str, Any, Any, list[tuple[int, ...]]]] = [
    ("dot-vv", tr.dot, np.dot, [(5,), (5,)]),
    ("dot-mv", tr.dot, np.dot, [(3, 5), (5,)]),
    ("dot-vm", tr.dot, np.dot, [(5,), (5, 2)]),
    ("dot-mm", lambda a, b: a.dot(b), np.dot, [(3, 5), (5, 2)]),
    ("dot-nd", tr.dot, np.dot, [(2, 3, 5), (4, 5, 2)]),
    ("dot-0d", tr.dot, np.dot, [(), (3, 2)]),
    ("dot-empty-k", tr.dot, np.dot, [(3, 0), (0, 2)]),
    ("vdot", tr.vdot, np.vdot, [(2, 3), (6,)]),
    ("outer", tr.outer, np.outer, [(3,), (2, 2)]),
    ("tensordot-2", tr.tensordot, np.tensordot, [(2, 3, 4), (3, 4, 5)]),
    ("tensordot-0", lambda a, b: tr.tensordot(a, b, 0), lambda a, b: np.tensordot(a, b, 0), [(2, 3), (2,)]),
    (
        "tensordot-pairs",
        lambda a, b: tr.tensordot(a, b, ([0, 2], [2, 0])),
        lambda a, b: np.tensordot(a, b, ([0, 2], [2, 0])),
        [(2, 3, 4), (4, 5, 2)],
    ),
]
EINSUM_CASES: list[tuple[str, list[tuple[int, ...]]]] = [
    ("ij,jk->ik", [(3, 4), (4, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),
    ("...ij,jk", [(2, 3, 4), (4, 5)]),
    ("i,i", [(5,), (5,)]),
    ("i,i->", [(0,), (0,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
]


def operands_for(shapes: list[tuple[int, ...]], dtype: str) -> list[np.ndarray]:
    return [data(s, dtype, seed=i) for i, s in enumerate(shapes)]


def check_product(got: tr.Tensor, want: np.ndarray, dtype: str) -> None:
    """A product's sums are reordered on the GPU: within the sum of |terms| of numpy's."""
    want = np.asarray(want)
    assert got.shape == want.shape
    if dtype in ("int32", "bool"):
        np.testing.assert_array_equal(got.numpy(), want)
    else:
        close(got.numpy(), want.astype(got.dtype.np), dtype, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
@pytest.mark.parametrize(("name", "fn", "ref", "shapes"), LINALG_CASES, ids=[c[0] for c in LINALG_CASES])
def test_dot_vdot_outer_tensordot(name: str, fn: Any, ref: Any, shapes: list, dtype: str) -> None:
    needs(dtype)
    ops = operands_for(shapes, dtype)
    check_product(fn(*map(tr.tensor, ops)), ref(*ops), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize(("spec", "shapes"), EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum(spec: str, shapes: list, dtype: str) -> None:
    needs(dtype)
    ops = operands_for(shapes, dtype)
    check_product(tr.einsum(spec, *map(tr.tensor, ops)), np.einsum(spec, *ops), dtype)


def test_products_refuse_mismatched_shapes_clearly() -> None:
    with pytest.raises(tr.ShapeError, match=r"dot.*\(2, 3\).*\(4,\)"):
        tr.dot(tr.ones((2, 3)), tr.ones((4,)))
    with pytest.raises(tr.ShapeError, match="tensordot"):
        tr.tensordot(tr.ones((2, 3)), tr.ones((4, 3)), 1)
    with pytest.raises(tr.ShapeError, match="einsum.*'ij'.*3 axes"):
        tr.einsum("ij,jk", tr.ones((2, 3, 4)), tr.ones((4, 2)))
    with pytest.raises(tr.ShapeError, match="einsum.*2 operands"):
        tr.einsum("ij,jk->ik", tr.ones((2, 3)))


# --- scans ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint32", "bool"])
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumsum_cumprod(name: str, dtype: str) -> None:
    needs(dtype)
    for shape, axis in [((3, 4, 5), None), ((3, 4, 5), 1), ((3, 4, 5), -1), ((3, 4, 5), 0), ((7,), 0), ((2, 0, 3), 2)]:
        x = data(shape, dtype) if dtype != "uint32" else data(shape, "int32").astype(np.uint32) % 4
        if name == "cumprod" and dtype.startswith("float"):
            x = (x / 3).astype(dtype)  # factors near 1: the products stay in range
        want = getattr(np, name)(x.astype(np.float64) if dtype.startswith("float") else x, axis=axis)
        got = getattr(tr, name)(tr.tensor(x), axis)
        assert got.dtype.np == (np.int32 if dtype == "bool" else x.dtype)
        if dtype == "float32":  # short rows are scanned in numpy's order: float32 as numpy's, bit for bit
            np.testing.assert_array_equal(got.numpy(), getattr(np, name)(x, axis=axis))
        close(got.numpy(), want.astype(got.dtype.np), dtype, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(getattr(tr.tensor(x), name)(axis).numpy(), got.numpy())


@pytest.mark.parametrize("n", [1024, 1025, 5000, 70_000])
def test_cumsum_of_long_rows(n: int) -> None:
    """Rows past ScanKernel.serial_max take a workgroup each (chunks, then their prefixes)."""
    x = np.random.default_rng(n).standard_normal((2, n)).astype(np.float32)
    got = tr.cumsum(tr.tensor(x), axis=1)
    assert kernels_of(got)[-1][:2] == ("scan", "serial" if n <= 1024 else "blocks")
    want = np.cumsum(x.astype(np.float64), axis=1)
    # reordered sums: within a few ulp of the running sum of |x|
    bound = 1e-6 * np.cumsum(np.abs(x).astype(np.float64), axis=1) + 1e-6
    assert np.all(np.abs(got.numpy() - want) <= bound)
    i = (np.arange(n) % 7 - 3).astype(np.int32).reshape(1, n)
    np.testing.assert_array_equal(tr.cumsum(tr.tensor(i), 1).numpy(), np.cumsum(i, 1))


def test_scans_propagate_nan_and_inf_and_take_dtype() -> None:
    x = np.array([1.0, NAN, 2.0, INF, -INF, 0.0], np.float32)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(tr.cumsum(tr.tensor(x)).numpy(), np.cumsum(x))
        np.testing.assert_array_equal(tr.cumprod(tr.tensor(x)).numpy(), np.cumprod(x))
    np.testing.assert_array_equal(tr.cumsum(tr.tensor(np.float32(3.0))).numpy(), np.cumsum(np.float32(3.0)))  # 0-d
    got = tr.cumsum(tr.tensor(np.array([1, 2, 3], np.int32)), dtype=tr.float32)
    assert got.dtype == tr.float32 and got.numpy().tolist() == [1.0, 3.0, 6.0]


# --- quantile, percentile, median; isclose, allclose -----------------------------------------------


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_quantile_percentile_median(dtype: str, axis: Any, keepdims: bool) -> None:
    """numpy's linear interpolation between the sorted neighbours; ints as float32."""
    needs(dtype)
    x = data((4, 7, 6), dtype)
    f = x.astype(np.float32)
    for q in (0.0, 0.25, 0.5, 0.9, 1.0, [0.1, 0.5, 0.75]):
        got = tr.quantile(tr.tensor(x), q, axis=axis, keepdims=keepdims)
        close(got.numpy(), np.quantile(f, q, axis=axis, keepdims=keepdims).astype(got.dtype.np), dtype, 1e-6, 1e-6)
    got = tr.percentile(tr.tensor(x), [5, 50], axis=axis, keepdims=keepdims)
    close(got.numpy(), np.percentile(f, [5, 50], axis=axis, keepdims=keepdims).astype(got.dtype.np), dtype, 1e-6, 1e-6)
    got = tr.median(tr.tensor(x), axis=axis, keepdims=keepdims)
    close(got.numpy(), np.median(f, axis=axis, keepdims=keepdims).astype(got.dtype.np), dtype, 1e-6, 1e-6)


def test_quantile_nan_empty_and_bad_q() -> None:
    x = np.array([[1.0, NAN, 3.0], [4.0, 5.0, 6.0], [-INF, 0.0, INF]], np.float32)
    np.testing.assert_array_equal(tr.median(tr.tensor(x), axis=1).numpy(), np.median(x, axis=1))  # NaN row: NaN
    np.testing.assert_array_equal(tr.median(tr.zeros((3, 0)), axis=1).numpy(), [NAN] * 3)  # numpy: NaN, warning
    assert tr.median(tr.tensor([3, 1, 2, 10])).item() == np.median([3, 1, 2, 10])
    for bad in (1.5, -0.1, [[0.5]]):
        with pytest.raises(ValueError, match="quantile: q must be"):
            tr.quantile(tr.tensor(x), bad)
    with pytest.raises(ValueError, match="percentile: q must be in"):
        tr.percentile(tr.tensor(x), 101)
    with pytest.raises(ValueError, match="method='linear'"):
        tr.quantile(tr.tensor(x), 0.5, method="nearest")


def test_isclose_allclose() -> None:
    a = np.array([1.0, INF, -INF, NAN, 1.0, 0.0, 1e-9], np.float32)
    b = np.array([1.000001, INF, INF, NAN, 1.1, 1e-9, 0.0], np.float32)
    for kw in ({}, {"equal_nan": True}, {"rtol": 0.2}, {"atol": 0.0}):
        np.testing.assert_array_equal(tr.isclose(tr.tensor(a), tr.tensor(b), **kw).numpy(), np.isclose(a, b, **kw))
        assert tr.allclose(tr.tensor(a[:3:2]), b[:3:2], **kw) == np.allclose(a[:3:2], b[:3:2], **kw)
    i = np.arange(5, dtype=np.int32)
    np.testing.assert_array_equal(tr.isclose(tr.tensor(i), i + 1, atol=1).numpy(), np.isclose(i, i + 1, atol=1))
    assert tr.allclose(tr.tensor(i), i) is True
