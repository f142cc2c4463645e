"""The idioms a numpy user types, run twice: on numpy arrays (`xp = np`) and on wgjit tensors
(`xp = tr`), with the same values; the answers must agree (issue 15's "done when"). Those wgjit
lacks must raise an AttributeError that names numpy's function and what to use instead.

Each idiom is a statement that leaves its answer in `r`; a, b, v, c, i, m, n are the data
(float32 matrices, a vector, a 3-d array, int32, bool, and a float vector of edge values).
Mutating idioms (`a[0] = 5`, `a += 1`) read the answer through another name bound to `a`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tracer as tr

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(0)
DATA = {
    "a": RNG.standard_normal((3, 4)).astype(np.float32),
    "b": RNG.standard_normal((4, 5)).astype(np.float32),
    "v": RNG.standard_normal(4).astype(np.float32),
    "c": RNG.standard_normal((2, 3, 4)).astype(np.float32),
    "i": RNG.integers(-5, 6, (3, 4)).astype(np.int32),
    "m": RNG.standard_normal((3, 4)) > 0,
    "n": np.array([1.0, np.nan, np.inf, -np.inf, -2.5, 0.5, 0.0, -0.0], np.float32),
}

IDIOMS = [
    # reductions
    "r = a.sum()", "r = xp.sum(a)", "r = a.sum(axis=0)", "r = a.mean(axis=1, keepdims=True)", "r = xp.mean(a)",
    "r = a.prod()", "r = xp.prod(i, axis=0)", "r = a.var()", "r = a.std(ddof=1)", "r = xp.var(a, axis=0, ddof=1)",
    "r = a.cumsum(axis=1)", "r = xp.cumsum(a)", "r = xp.cumprod(i, axis=0)", "r = a.max()", "r = a.min(axis=0)",
    "r = a.argmax()", "r = a.argmax(axis=1)", "r = xp.argmin(a, axis=0, keepdims=True)", "r = xp.any(m)",
    "r = m.all(axis=0)", "r = xp.median(a)", "r = xp.median(c, axis=(0, 2))", "r = xp.percentile(a, [25, 75])",
    "r = xp.quantile(a, 0.3, axis=0, keepdims=True)", "r = xp.median(n)", "r = xp.mean(a, axis=(0, 1))",
    # predicates and math
    "r = xp.isnan(n)", "r = xp.isinf(n)", "r = xp.isfinite(n)", "r = xp.nan_to_num(n)",
    "r = xp.nan_to_num(n, nan=0.0, posinf=1.0, neginf=-1.0)", "r = xp.log1p(xp.abs(a))", "r = xp.expm1(a)",
    "r = xp.round(a, 2)", "r = a.round()", "r = xp.trunc(a)", "r = xp.sign(a)", "r = xp.clip(a, -0.5, 0.5)",
    "r = a.clip(0, None)", "r = xp.hypot(a, a)", "r = xp.logaddexp(a, a)", "r = xp.isclose(n, n)",
    "r = xp.isclose(a, a + 1e-6)", "r = xp.allclose(a, a)", "r = xp.allclose(a, a + 1)", "r = xp.exp(a)",
    "r = xp.log(xp.abs(a))", "r = xp.sqrt(xp.abs(a))", "r = xp.abs(a)", "r = a ** 2", "r = 2 ** i.clip(0, 5)",
    "r = a // 0.5", "r = a % 0.5", "r = i // 2", "r = i % 3", "r = -a", "r = xp.sin(a)", "r = xp.tanh(a)",
    "r = xp.square(a)", "r = xp.maximum(a, 0)", "r = xp.where(m, a, 0)",
    # sorting
    "r = xp.sort(a)", "r = xp.sort(a, axis=0)", "r = xp.argsort(a)", "r = a.argsort(axis=0)", "a.sort(); r = a",
    "r = xp.sort(n)", "r = xp.sort(i, axis=None)", "r = xp.argsort(i, kind='stable')",
    # linear algebra
    "r = xp.dot(a, b)", "r = a.dot(b)", "r = xp.vdot(v, v)", "r = xp.outer(v, v)", "r = xp.tensordot(a, b, axes=1)",
    "r = xp.einsum('ij,jk->ik', a, b)", "r = xp.einsum('ii', a[:, :3])", "r = a @ b", "r = xp.matmul(a, b)",
    # creation
    "r = xp.eye(3)", "r = xp.linspace(0, 1, 5)", "r = xp.tril(a)", "r = xp.triu(a, 1)", "r = xp.arange(10)",
    "r = xp.zeros((2, 3))", "r = xp.ones_like(a)", "r = xp.full((2, 2), 7)",
    # shape
    "r = xp.tile(v, 2)", "r = xp.repeat(v, 2)", "r = a.repeat(2, axis=0)", "r = xp.flip(a, 0)", "r = xp.roll(v, 1)",
    "r = xp.moveaxis(c, 0, -1)", "r = xp.swapaxes(c, 0, 2)", "r = xp.split(v, 2)", "r = xp.array_split(v, 3)",
    "r = c.transpose(2, 0, 1)", "r = xp.transpose(c, (1, 0, 2))", "r = a.T", "r = xp.concatenate([a, a])",
    "r = xp.concatenate([a, a], axis=1)", "r = xp.stack([v, v])", "r = a.reshape(4, 3)", "r = a.reshape(-1)",
    "r = a.flatten()", "r = a.ravel()", "r = a[None]", "r = a[:, None, :].squeeze(1)",
    # indexing and mutation
    "r = a[0]", "r = a[:, 1]", "r = a[::-1]", "r = a[m]", "r = a[[0, 2]]", "r = a[np.argmax(v)]",
    "r = a[np.int64(1)]", "r = i[i > 0]", "y = a; a[0] = 5; r = y", "y = a; a[a < 0] = 0; r = y",
    "y = a; a[:, 1] = v[:3]; r = y", "y = a; a[[0, 2]] = 1.5; r = y", "y = a; a += 1; r = y", "y = a; a *= 2; r = y",
    "y = a; a -= a; r = y", "w = a[1]; w += 1; r = a", "r = a.copy()", "z = a.copy(); z += 1; r = a",
    # dtypes, logic, python
    "r = a.astype(xp.int32)", "r = a.astype('float16')", "r = (a.dtype == np.float32)", "r = (i.dtype == np.int32)",
    "r = m ^ m[::-1]", "r = m & m", "r = ~m", "r = m | m", "r = a.shape", "r = a.ndim", "r = a.size", "r = len(a)",
    "r = a.tolist()", "r = float(a[0, 0])", "r = a[0, 0].item()", "r = (a == a).all()",
]  # fmt: skip

# numpy names wgjit does not have: the error names numpy's function and the alternative
MISSING = {
    "r = xp.unique(i)": "result's shape depends on the values",
    "r = xp.nonzero(m)": "result's shape depends on the values",
    "r = m.nonzero()": "result's shape depends on the values",
    "r = xp.diff(v)": r"np.diff\(x\) takes a Tensor",
    "r = a.trace()": r"np.trace\(x\) takes a Tensor",
    "r = xp.expand_dims(a, 0)": "stays lazy on the GPU",
    "r = a.astype(xp.int64)": "wgjit stores float32, float16, int32, uint32 and bool",
}


def run(idiom: str, xp: Any) -> Any:
    wrap = (lambda x: x.copy()) if xp is np else tr.tensor
    env = {"xp": xp, "np": np} | {k: wrap(v) for k, v in DATA.items()}
    exec(idiom, env)  # the idioms are this module's own table
    return env["r"]


def host(r: Any) -> Any:
    if isinstance(r, list | tuple):
        return [host(x) for x in r]
    return r.numpy() if isinstance(r, tr.Tensor) else r


def assert_same(got: Any, want: Any, idiom: str) -> None:
    if isinstance(want, list | tuple):
        assert isinstance(got, list) and len(got) == len(want), idiom
        for g, w in zip(got, want):
            assert_same(g, w, idiom)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{idiom}: shape {got.shape}, numpy {want.shape}"
    if want.dtype.kind == "f" or got.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-5, err_msg=idiom)
    else:
        np.testing.assert_array_equal(got, want, err_msg=idiom)


@pytest.mark.parametrize("idiom", IDIOMS)
def test_idiom_gives_numpys_answer(idiom: str) -> None:
    with np.errstate(all="ignore"):
        want = run(idiom, np)
    assert_same(host(run(idiom, tr)), want, idiom)


@pytest.mark.parametrize("idiom", sorted(MISSING))
def test_missing_idiom_names_the_alternative(idiom: str) -> None:
    with pytest.raises(AttributeError, match=MISSING[idiom]):
        run(idiom, tr)
