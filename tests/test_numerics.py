"""The numerics rules of NUMERICS.md, checked on the GPU: NaN/inf as numpy, integer division
by zero, float floor division, saturating casts. Each row states numpy's answer (or the
documented rule where numpy has none) for a vector of awkward values."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device

pytestmark = pytest.mark.gpu

NAN, INF = np.nan, np.inf
SPECIAL = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -3.5, 1e-30, 3e38], np.float32)
OTHER = np.array([1.0, INF, INF, -0.0, 2.0, NAN, INF, 0.0, -INF, 1e30, 3e38], np.float32)


def check(got: np.ndarray, want: np.ndarray, rtol: float = 2e-6) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind == "f":
        # exact NaN/inf placement; finite values within rounding (transcendental builtins)
        assert np.array_equal(np.isnan(got), np.isnan(want)), (
            f"NaN at {np.isnan(got)} vs {np.isnan(want)}\n{got}\n{want}"
        )
        signed_inf = [np.where(np.isinf(v), np.sign(v), 0) for v in (got, want)]
        assert np.array_equal(*signed_inf), f"infinities differ\n{got}\n{want}"
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin].astype(np.float64), want[fin].astype(np.float64), rtol=rtol, atol=1e-30)
    else:
        np.testing.assert_array_equal(got, want)


BINARY: list[tuple[str, Callable, Callable]] = [
    ("add", lambda a, b: a + b, np.add),
    ("sub", lambda a, b: a - b, np.subtract),
    ("mul", lambda a, b: a * b, np.multiply),
    ("div", lambda a, b: a / b, np.divide),
    ("maximum", tr.maximum, np.maximum),
    ("minimum", tr.minimum, np.minimum),
    ("pow", lambda a, b: a**b, np.power),
    ("lt", lambda a, b: a < b, np.less),
    ("le", lambda a, b: a <= b, np.less_equal),
    ("gt", lambda a, b: a > b, np.greater),
    ("ge", lambda a, b: a >= b, np.greater_equal),
    ("eq", lambda a, b: a == b, np.equal),
    ("ne", lambda a, b: a != b, np.not_equal),
    ("floordiv", lambda a, b: a // b, np.floor_divide),
    ("mod", lambda a, b: a % b, np.mod),
    ("hypot", tr.hypot, np.hypot),
    ("logaddexp", tr.logaddexp, np.logaddexp),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("name", "op", "ref"), BINARY, ids=[b[0] for b in BINARY])
def test_binary_nan_inf_as_numpy(name: str, op: Callable, ref: Callable, dtype: str) -> None:
    with np.errstate(over="ignore"):  # 3e38 is inf in float16
        a, b = SPECIAL.astype(dtype), OTHER.astype(dtype)
    if name in ("floordiv", "mod"):  # documented range: |x / y| < 2**24 (1e30 / 1e-30 is not)
        a[SPECIAL == np.float32(1e-30)] = 0.5
    with np.errstate(all="ignore"):
        want = ref(a, b)
        check(op(tr.tensor(a), tr.tensor(b)).numpy(), want)
        check(op(tr.tensor(b), tr.tensor(a)).numpy(), ref(b, a))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("name", "op", "ref"), BINARY, ids=[b[0] for b in BINARY])
def test_binary_of_a_value_with_itself(name: str, op: Callable, ref: Callable, dtype: str) -> None:
    # one value on both sides: NVIDIA's compiler folded x / x and x // x to 1, x % x to 0,
    # x >= x, x <= x and x == x to true, x != x to false, also for 0, inf and NaN (found by
    # fuzzing on the H200; lavapipe folds x - x the same way)
    with np.errstate(over="ignore"):
        a = SPECIAL.astype(dtype)
    x = tr.tensor(a)
    with np.errstate(all="ignore"):
        check(op(x, x).numpy(), ref(a, a))


def test_self_subtraction_of_inf_is_nan() -> None:
    # lavapipe folds x - x (and exp(x) - exp(x), after merging the two exps) to 0
    x = tr.tensor(SPECIAL)
    with np.errstate(all="ignore"):
        check((x - x).numpy(), SPECIAL - SPECIAL)
        check((x + -x).numpy(), SPECIAL + -SPECIAL)
        check((x.exp() - x.exp()).numpy(), np.exp(SPECIAL) - np.exp(SPECIAL))


UNARY: list[tuple[str, Callable, Callable]] = [
    ("neg", lambda x: -x, np.negative),
    ("abs", abs, np.abs),
    ("relu", lambda x: x.relu(), lambda x: np.maximum(x, np.float32(0))),
    ("exp", lambda x: x.exp(), np.exp),
    ("log", lambda x: x.log(), np.log),
    ("sqrt", lambda x: x.sqrt(), np.sqrt),
    ("tanh", lambda x: x.tanh(), np.tanh),
    ("sigmoid", lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    ("floor", lambda x: x.floor(), np.floor),
    ("ceil", lambda x: x.ceil(), np.ceil),
    ("relu(rsqrt)", lambda x: x.rsqrt().relu(), lambda x: np.maximum(1 / np.sqrt(x), np.float32(0))),
]


@pytest.mark.parametrize(("name", "op", "ref"), UNARY, ids=[u[0] for u in UNARY])
def test_unary_nan_inf_as_numpy(name: str, op: Callable, ref: Callable) -> None:
    with np.errstate(all="ignore"):
        check(op(tr.tensor(SPECIAL)).numpy(), ref(SPECIAL).astype(np.float32))


# unary ops against numpy where they need care, on float32 and float16: the values near 0 where
# log1p and expm1 must keep x's precision (log(1 + x) and exp(x) - 1 lose it), the poles and
# limits, large values, +-0 (whose sign must be numpy's too), NaN and infinities
EDGES: list[tuple[str, Callable, Callable, list[float]]] = [
    (
        "log1p",
        lambda x: x.log1p(),
        np.log1p,
        [1e-10, -1e-10, 1e-30, -1e-30, 3e-5, -3e-5, 1e-3, -0.4999, 0.9999, 1.0, -0.5, -0.9999, -1.0, -1.5]
        + [10.0, 1e10, 3e38, 0.0, -0.0, NAN, INF, -INF],
    ),
    (
        "expm1",
        lambda x: x.expm1(),
        np.expm1,
        [1e-10, -1e-10, 1e-30, -1e-30, 3e-5, -3e-5, 1e-3, 0.4999, -0.4999, 0.5, -0.5, 1.0, -1.0, 10.0, -10.0]
        + [20.0, -20.0, 88.0, 89.0, -100.0, 0.0, -0.0, NAN, INF, -INF],
    ),
    (
        "sign",
        lambda x: x.sign(),
        np.sign,
        [0.0, -0.0, 1e-30, -1e-30, 1e-40, -1e-40, 2.5, -3.5, 3e38, -3e38, NAN, INF, -INF],
    ),
    (
        "round",
        lambda x: x.round(),
        np.round,
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1e-30, -0.0, 0.0, 8388607.5, 16777215.0, 3e38, NAN, INF, -INF],
    ),  # ties to even
    (
        "trunc",
        lambda x: x.trunc(),
        np.trunc,
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1e-30, -0.0, 0.0, 8388607.5, 16777215.0, 3e38, NAN, INF, -INF],
    ),
    ("isnan", lambda x: x.isnan(), np.isnan, [NAN, -NAN, INF, -INF, 0.0, -0.0, 1.0, 1e-40, 3e38]),
    ("isinf", lambda x: x.isinf(), np.isinf, [NAN, -NAN, INF, -INF, 0.0, -0.0, 1.0, 1e-40, 3e38]),
    ("isfinite", lambda x: x.isfinite(), np.isfinite, [NAN, -NAN, INF, -INF, 0.0, -0.0, 1.0, 1e-40, 3e38]),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("name", "op", "ref", "values"), EDGES, ids=[e[0] for e in EDGES])
def test_unary_edges_as_numpy(name: str, op: Callable, ref: Callable, values: list[float], dtype: str) -> None:
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip(f"the adapter ({get_device().caps.name}) lacks shader-f16")
    with np.errstate(all="ignore"):
        x = np.array(values, np.float32).astype(dtype)  # float16: tiny values become 0 or subnormals
        want = ref(x)
    got = op(tr.tensor(x)).numpy()
    # float16 is computed in float32 and rounded once: one float16 ulp
    check(got, want, rtol=2e-6 if dtype == "float32" else 9.8e-4)
    zero = want == 0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])), f"signs of zero: {got[zero]} vs {want[zero]}"


ROWS = np.array(
    [[1, NAN, 3, 2], [1, INF, 3, -INF], [-INF] * 4, [INF, INF, 1, 2], [1, -INF, 3, 4], [1, 2, 3, 4]], np.float32
)


@pytest.mark.parametrize("width", [1, 40], ids=["short-rows", "long-rows"])  # 4 or 160: both reduce kernels
@pytest.mark.parametrize(
    ("name", "op", "ref"),
    [
        ("sum", lambda x: x.sum(axis=1), lambda r: r.sum(axis=1)),
        ("mean", lambda x: x.mean(axis=1), lambda r: r.mean(axis=1)),
        ("max", lambda x: x.max(axis=1), lambda r: r.max(axis=1)),
        ("min", lambda x: x.min(axis=1), lambda r: r.min(axis=1)),
        ("argmax", lambda x: x.argmax(axis=1), lambda r: r.argmax(axis=1).astype(np.int32)),
        ("argmin", lambda x: x.argmin(axis=1), lambda r: r.argmin(axis=1).astype(np.int32)),
        (
            "softmax",
            lambda x: x.softmax(-1),
            lambda r: np.exp(r - r.max(1, keepdims=True)) / np.exp(r - r.max(1, keepdims=True)).sum(1, keepdims=True),
        ),
        (
            "log_softmax",
            lambda x: x.log_softmax(-1),
            lambda r: (r - r.max(1, keepdims=True)) - np.log(np.exp(r - r.max(1, keepdims=True)).sum(1, keepdims=True)),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_reductions_and_rows_propagate_nan_inf(name: str, op: Callable, ref: Callable, width: int) -> None:
    rows = np.tile(ROWS, (1, width))
    with np.errstate(all="ignore"):
        check(op(tr.tensor(rows)).numpy(), ref(rows))


def test_matmul_propagates_nan_and_inf() -> None:
    a = np.array([[1, NAN], [INF, 1], [INF, -INF]], np.float32)
    b = np.array([[1, 0], [0, 1]], np.float32)
    with np.errstate(all="ignore"):
        check((tr.tensor(a) @ tr.tensor(b)).numpy(), a @ b)


def test_empty_reductions() -> None:
    with np.errstate(all="ignore"):
        check(tr.zeros((0,)).mean().numpy(), np.float32(NAN))
    check(tr.zeros((0,)).sum().numpy(), np.float32(0))
    with pytest.raises(tr.ShapeError, match="max"):
        tr.zeros((2, 0)).max(axis=1)


def test_integer_division_and_modulo_by_zero_give_zero() -> None:
    x = np.array([7, -7, 0, 2**31 - 1, -(2**31)], np.int32)
    z = tr.tensor(np.zeros(5, np.int32))
    check((tr.tensor(x) // z).numpy(), np.zeros(5, np.int32))
    check((tr.tensor(x) % z).numpy(), np.zeros(5, np.int32))
    check((tr.tensor(x) // 0).numpy(), np.zeros(5, np.int32))


def test_integer_floor_semantics_and_overflow_as_numpy() -> None:
    a = np.array([7, -7, 7, -7, -(2**31), -(2**31), 2**31 - 1, 5], np.int32)
    b = np.array([2, 2, -2, -2, -1, 1, 1, -3], np.int32)
    x, y = tr.tensor(a), tr.tensor(b)
    with np.errstate(all="ignore"):
        check((x // y).numpy(), a // b)
        check((x % y).numpy(), a % b)
        check((x + y).numpy(), a + b)  # 2**31 - 1 + 1 wraps
        check((x * y).numpy(), a * b)
        check((tr.tensor(np.array([3, -2, 5], np.int32)) ** 3).numpy(), np.array([27, -8, 125], np.int32))


def test_float_floor_division_follows_numpy_divmod() -> None:
    a = np.array([-1e-30, 0.001, -0.001, 7, -7, INF, 5, -5, 0, 3], np.float32)
    b = np.array([1e30, -INF, -INF, 2, 2, 2, 0, 0, 0, INF], np.float32)
    with np.errstate(all="ignore"):
        check((tr.tensor(a) // tr.tensor(b)).numpy(), a // b)
        check((tr.tensor(a) % tr.tensor(b)).numpy(), a % b)


def _saturate(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The documented float -> int rule, written out independently of wgjit."""
    info = np.iinfo(dtype)
    hi = float(np.nextafter(np.float32(info.max), np.float32(0)))  # the largest float32 inside the range
    out = np.where(np.isnan(x), 0.0, np.clip(np.trunc(x.astype(np.float64)), info.min, hi))
    return out.astype(dtype)


@pytest.mark.parametrize("src", ["float32", "float16"])
@pytest.mark.parametrize("dst", ["int32", "uint32"])
def test_float_to_int_casts_saturate_and_nan_is_zero(src: str, dst: str) -> None:
    x = np.array([NAN, INF, -INF, 3e9, -3e9, 2.7, -2.7, 0.0, 65504, -65504, 2**31, 1e20], np.float32)
    with np.errstate(all="ignore"):
        x = x.astype(src)
    got = tr.tensor(x).astype(dst).numpy()
    check(got, _saturate(x.astype(np.float32), np.dtype(dst)))
    assert got[0] == 0  # NaN -> 0
    assert got[2] == (np.iinfo(dst).min if dst == "int32" else 0)


def test_float_to_bool_is_nonzero_and_nan_is_true() -> None:
    check(tr.tensor(SPECIAL).astype(tr.bool).numpy(), SPECIAL != 0)


def test_int_to_float_and_float16_rounding() -> None:
    i = np.array([2**24 + 1, -(2**31), 2**31 - 1, 3], np.int32)
    check(tr.tensor(i).astype(tr.float32).numpy(), i.astype(np.float32))
    f = np.array([1e5, 65504, 65520, 1.0009765625, -7e-8], np.float32)
    with np.errstate(all="ignore"):
        check(tr.tensor(f).astype(tr.float16).numpy(), f.astype(np.float16))


def test_pow_special_cases_as_numpy() -> None:
    a = np.array([0, 0, NAN, 1, -1, -2, -INF, -INF, 2, -8], np.float32)
    b = np.array([0, -1, 0, NAN, INF, 0.5, -0.5, 3, -INF, 1 / 3], np.float32)
    with np.errstate(all="ignore"):
        check((tr.tensor(a) ** tr.tensor(b)).numpy(), a**b)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pow_of_signed_zero_keeps_the_sign_under_odd_powers(dtype: str) -> None:
    # issue 16 (fuzz survey on the H200): float16 (-0.0) ** -1 gave +inf, numpy -inf
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip(f"the adapter ({get_device().caps.name}) lacks shader-f16")
    a = np.array([-0.0, 0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, 0.0, -0.0], dtype)
    b = np.array([-1, -1, -2, 1, 3, -0.5, 0.5, -3, 3, 2], dtype)
    with np.errstate(all="ignore"):
        want = a**b
        got = (tr.tensor(a) ** tr.tensor(b)).numpy()
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want)), (got, want)
        scalar = (tr.tensor(a) ** -1.0).numpy()  # a constant exponent takes the same path
        np.testing.assert_array_equal(np.signbit(scalar), np.signbit(a ** np.asarray(-1.0, dtype)))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_remainder_of_exact_multiples_and_its_sign(dtype: str) -> None:
    # numpy: a zero remainder takes the sign of the divisor (4 % -2 is -0.0), and (k * x) % x is
    # exactly 0; GPU division is not correctly rounded (NVIDIA's 2x / x gave 1.9999999, so 2x % x
    # was x), which the remainder must survive (found by fuzzing on the H200)
    rng = np.random.default_rng(1)
    # multiples of 1/64 up to 8 (and k up to 6): k * x is exact in float16 too
    x = (rng.integers(1, 512, 500) / 64 * rng.choice([-1, 1], 500)).astype(dtype)
    k = rng.integers(-6, 7, 500).astype(dtype)
    a, b = (k * x).astype(dtype), x
    for got, want in (
        ((tr.tensor(a) % tr.tensor(b)).numpy(), np.mod(a, b)),
        ((tr.tensor(a) // tr.tensor(b)).numpy(), np.floor_divide(a, b)),
    ):
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want)), (a[np.signbit(got) != np.signbit(want)][:5],)


@pytest.mark.parametrize("decimals", [1, 2, -1, -2])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint32"])
def test_round_to_decimals_as_numpy(dtype: str, decimals: int) -> None:
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip(f"the adapter ({get_device().caps.name}) lacks shader-f16")
    if dtype.startswith(("int", "uint")):  # ties of x / 10**-d in integers: half to even
        values = [
            0,
            5,
            15,
            25,
            35,
            45,
            150,
            250,
            251,
            249,
            1005,
            9995,
            2**31 - 8,
        ]  # no overflow: numpy goes via float64
        values += [] if dtype == "uint32" else [-5, -15, -25, -150, -250, -(2**31) + 8]
    else:  # binary fractions are exact ties after the scaling by 10**d
        values = [0.125, 0.375, -0.625, 1.25, 2.5, -3.75, 12.5, 25.0, 150.0, -250.0, 1e-3, 123.456, 0.0, -0.0]
        values += [NAN, INF, -INF]
    x = np.array(values, np.float64).astype(dtype)
    with np.errstate(all="ignore"):
        want = np.round(x, decimals)
    got = tr.tensor(x).round(decimals).numpy()
    assert got.dtype == want.dtype
    check(got, want, rtol=2e-6 if dtype != "float16" else 9.8e-4)


def test_sums_of_products_of_signed_zeros_are_positive_zero() -> None:
    """NUMERICS.md: a matmul's sums start at +0.0, so 0 * -0.0 (and any sum of such zeros) is +0.0,
    as BLAS and np.vdot give, in every product kernel a shape picks (GEMV, GEMM, batched)."""
    zero, neg = np.zeros((1, 1), np.float32), np.full((1, 1), -0.0, np.float32)
    cases = [
        tr.vdot(tr.tensor(zero.reshape(1)), tr.tensor(neg.reshape(1))),
        tr.tensor(zero) @ tr.tensor(neg),
        tr.tensor(np.zeros((3, 5, 4), np.float32)) @ tr.tensor(np.full((3, 4, 2), -0.0, np.float32)),
        tr.tensor(np.full((70, 33), -0.0, np.float32)) @ tr.tensor(np.ones((33, 65), np.float32)),
    ]
    for y in cases:
        got = np.asarray(y.numpy())
        assert (got == 0).all() and not np.signbit(got).any(), got
