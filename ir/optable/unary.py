"""Elementwise ops of one operand: math, activations, rounding, cast and copy."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ir.dtypes import DType
from ir.optable.record import ANY, FLOAT, NUMERIC, Dtypes, Kind, OpDef, Wgsl, suffix, unary
from ir.optable.wgsl import horner, is_zero, isnan, negative, opaque, scalar_of, with_scalar

if TYPE_CHECKING:
    from ir.node import Node


# --- sign and magnitude ----------------------------------------------------------------


def _neg_int(a: list[str], t: str) -> str:
    # WGSL has no unary minus on u32: 0 - x wraps around as numpy's negative of a uint32 does
    return f"(-{a[0]})" if scalar_of(t) == "i32" else f"({t}(0u) - {a[0]})"


NEG = unary("neg", NUMERIC, "-x, elementwise", np.negative, api="-x", wgsl_float="(-{0})", wgsl_int=_neg_int)
ABS = unary("abs", NUMERIC, "|x|, elementwise", np.abs, method=True, wgsl_float="abs({0})", wgsl_int="abs({0})")


def _sign_float(a: list[str], t: str) -> str:
    # on the bits, as numpy: +-0 gives +0 (WGSL's sign() may keep -0), NaN stays NaN, and a
    # subnormal is +-1 also where the GPU flushes subnormals to zero
    one = f"select({t}(1.0), {t}(-1.0), {negative(a[0], t)})"
    return f"select(select({one}, {t}(0.0), {is_zero(a[0], t)}), {a[0]}, {isnan(a[0], t)})"


def _sign_int(a: list[str], t: str) -> str:
    return f"sign({a[0]})" if scalar_of(t) == "i32" else f"select({t}(0u), {t}(1u), {a[0]} != {t}(0u))"


SIGN = unary(
    "sign",
    NUMERIC,
    "-1, 0 or 1 by the sign of x, elementwise (NaN stays NaN)",
    np.sign,
    method=True,
    wgsl_float=_sign_float,
    wgsl_int=_sign_int,
)


def _square_fn(t: str) -> dict[str, str]:
    # x * x of one value through a helper: lavapipe folds sqrt(a) * sqrt(a) to a (or |a|), so
    # square(sqrt(-4)) gave 4 instead of NaN
    s = suffix(t)
    return {
        f"wg_square_{s}": f"fn wg_square_{s}(x: {t}) -> {t} {{\n  return select(x * x, x, {isnan('x', t)});  // NaN stays NaN\n}}"
    }


SQUARE = unary(
    "square",
    NUMERIC,
    "x * x, elementwise",
    np.square,
    method=True,
    wgsl_float=Wgsl("wg_square_{s}({0})", _square_fn),
    wgsl_int="({0} * {0})",
)


def _relu_float(a: list[str], t: str) -> str:
    # relu tests the sign bit, not `x < 0`: lavapipe's range analysis decides rsqrt(x) >= 0 and
    # drops the compare, so relu(rsqrt(-0.0)) gave -inf; NaN (any sign) passes through as numpy's
    return f"select({a[0]}, {t}(0.0), {negative(a[0], t)} & !{isnan(a[0], t)})"


RELU = unary(
    "relu",
    NUMERIC,
    "max(x, 0), elementwise (NaN stays NaN)",
    lambda a: np.maximum(a, 0).astype(a.dtype),
    method=True,
    wgsl_float=_relu_float,
    wgsl_int="max({0}, {t}(0))",
)

# --- transcendentals (float only: ints are cast to float32 first, as numpy does) -------------
# float16 data is computed in f32 and rounded once at the end (f32_for_f16): lavapipe's f16 exp
# is off by ~9 ulp; NVIDIA's f16 sqrt is not correctly rounded, in f32 then rounded it is numpy's

EXP = unary("exp", FLOAT, "e ** x, elementwise", np.exp, method=True, f32_for_f16=True, wgsl_float=opaque("exp({0})"))


def _expm1_fn(t: str) -> dict[str, str]:
    # exp(x) - 1 cancels for small |x| (expm1(1e-10) would be 0). On |x| < 0.5 it is the Taylor
    # series x (1 + x/2 + x^2/6 + ... + x^8/9!), whose next term is 5e-10 relative; outside,
    # exp(x) - 1 loses at most a factor 2.6 of exp's precision, and gives inf past 88.7 and -1
    # at -inf. Selected on x's NaN bits: NaN stays NaN and compositions stay hidden (see opaque)
    s = suffix(t)
    series = horner(t, "x", [f"{1 / math.factorial(k):.9g}" for k in range(1, 10)])  # 1/1! ... 1/9!
    return {
        f"wg_expm1_{s}": (
            f"fn wg_expm1_{s}(x: {t}) -> {t} {{\n"
            f"  let near = x * ({series});\n"
            f"  let far = exp(x) - {t}(1.0);\n"
            f"  return select(select(far, near, abs(x) < {t}(0.5)), x, {isnan('x', t)});\n}}"
        )
    }


EXPM1 = unary(
    "expm1",
    FLOAT,
    "exp(x) - 1, elementwise, precise for small |x|",
    np.expm1,
    method=True,
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_expm1_{s}({0})", _expm1_fn),
)

LOG = unary(
    "log",
    FLOAT,
    "the natural logarithm, elementwise",
    np.log,
    method=True,
    f32_for_f16=True,
    wgsl_float=opaque("log({0})"),
)


def _log1p_fn(t: str) -> dict[str, str]:
    # log(1 + x) drops the low bits of a small x (log1p(1e-10) would be 0). On (-0.5, 1) it is
    # 2 atanh(u) = 2u (1 + u^2/3 + u^4/5 + ...) with u = x / (2 + x), which keeps them: |u| < 1/3,
    # so seven terms leave 1.4e-8 relative. Outside, 1 + x costs under an ulp of the log, which
    # WGSL bounds relatively there (it bounds it absolutely on [0.5, 2]); -1 gives -inf, below NaN.
    # Selected on x's NaN bits: NaN stays NaN and compositions stay hidden (see opaque)
    s = suffix(t)
    series = horner(t, "z", [f"{1 / (2 * k + 1):.9g}" for k in range(7)])  # 1, 1/3, ... 1/13
    return {
        f"wg_log1p_{s}": (
            f"fn wg_log1p_{s}(x: {t}) -> {t} {{\n"
            f"  let u = x / ({t}(2.0) + x);\n"
            f"  let z = u * u;\n"
            f"  let near = {t}(2.0) * u * ({series});\n"
            f"  let far = log({t}(1.0) + x);\n"
            f"  let r = select(far, near, (x > {t}(-0.5)) & (x < {t}(1.0)));\n"
            f"  return select(r, x, {isnan('x', t)});\n}}"
        )
    }


LOG1P = unary(
    "log1p",
    FLOAT,
    "log(1 + x), elementwise, precise for small |x|",
    np.log1p,
    method=True,
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_log1p_{s}({0})", _log1p_fn),
)

SQRT = unary(
    "sqrt",
    FLOAT,
    "the square root, elementwise",
    np.sqrt,
    method=True,
    f32_for_f16=True,
    wgsl_float=opaque("sqrt({0})"),
)
RSQRT = unary(
    "rsqrt",
    FLOAT,
    "1 / sqrt(x), elementwise",
    lambda a: 1.0 / np.sqrt(a),
    method=True,
    f32_for_f16=True,
    wgsl_float=opaque("inverseSqrt({0})"),
)
RECIPROCAL = unary(
    "reciprocal",
    FLOAT,
    "1 / x, elementwise",
    lambda a: 1.0 / a,
    method=True,
    f32_for_f16=True,
    wgsl_float="({t}(1.0) / {0})",
)
SIN = unary("sin", FLOAT, "the sine, elementwise", np.sin, method=True, f32_for_f16=True, wgsl_float=opaque("sin({0})"))
COS = unary(
    "cos", FLOAT, "the cosine, elementwise", np.cos, method=True, f32_for_f16=True, wgsl_float=opaque("cos({0})")
)


def _tanh_fn(t: str) -> dict[str, str]:
    # tanh(x) = 1 - 2 / (exp(2x) + 1): exact at large |x| where exp overflows, keeps NaN
    # evaluated in f32 even for f16: the subtraction cancels badly in f16 for small |x|
    s, f = suffix(t), with_scalar(t, "f32")
    return {
        f"wg_tanh_{s}": (
            f"fn wg_tanh_{s}(x_in: {t}) -> {t} {{\n"
            f"  let x = {f}(x_in);\n"
            f"  let y = {f}(1.0) - {f}(2.0) / (exp(min(abs(x), {f}(20.0)) * {f}(2.0)) + {f}(1.0));\n"
            f"  return {t}(select(sign(x) * y, x, (abs(x) < {f}(0.0005)) | {isnan('x', f)}));\n}}"
        )
    }


TANH = unary(
    "tanh",
    FLOAT,
    "the hyperbolic tangent, elementwise",
    np.tanh,
    method=True,
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_tanh_{s}({0})", _tanh_fn),
)


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


SIGMOID = unary(
    "sigmoid",
    FLOAT,
    "1 / (1 + exp(-x)), elementwise",
    _sigmoid,
    method=True,
    f32_for_f16=True,
    wgsl_float="({t}(1.0) / ({t}(1.0) + exp(-{0})))",
)
SILU = unary(
    "silu",
    FLOAT,
    "x * sigmoid(x), elementwise",
    lambda a: a * _sigmoid(a),
    method=True,
    f32_for_f16=True,
    wgsl_float="({0} / ({t}(1.0) + exp(-{0})))",
)

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """math.erf elementwise, in float64."""
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)  # asarray: 0-d gives a python float


def _erf_fn(t: str) -> dict[str, str]:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), evaluated in f32 even for f16
    s, f = suffix(t), with_scalar(t, "f32")
    return {
        f"wg_erf_{s}": (
            f"fn wg_erf_{s}(x_in: {t}) -> {t} {{\n"
            f"  let x = {f}(x_in);\n  let a = abs(x);\n  let k = {f}(1.0) / ({f}(1.0) + {f}(0.3275911) * a);\n"
            f"  let p = k * ({f}(0.254829592) + k * ({f}(-0.284496736) + k * ({f}(1.421413741) + k * ({f}(-1.453152027) + k * {f}(1.061405429)))));\n"
            f"  return {t}(sign(x) * ({f}(1.0) - p * exp(-a * a)));\n}}"
        )
    }


# in f16, 1 + erf(x) cancels to 0, so gelu(x < -3) would be 0: erf and gelu run in f32
ERF = unary(
    "erf",
    FLOAT,
    "the error function, elementwise",
    erf,
    method=True,
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_erf_{s}({0})", _erf_fn),
)
GELU = unary(
    "gelu",
    FLOAT,
    "x * (1 + erf(x / sqrt(2))) / 2, elementwise",
    lambda a: (0.5 * a * (1.0 + erf(a / math.sqrt(2.0)))).astype(a.dtype),
    api="x.gelu()",
    f32_for_f16=True,
    wgsl_float=Wgsl("({t}(0.5) * {0} * ({t}(1.0) + wg_erf_{s}({0} * {t}(0.7071067811865476))))", _erf_fn),
)
GELU_TANH = unary(
    "gelu_tanh",
    FLOAT,
    "gelu's tanh approximation, elementwise",
    lambda a: 0.5 * a * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (a + np.float32(0.044715) * a**3))),
    api="x.gelu(approximate='tanh')",
    f32_for_f16=True,
    wgsl_float=Wgsl(
        "({t}(0.5) * {0} * ({t}(1.0) + wg_tanh_{s}({t}(0.7978845608028654) * ({0} + {t}(0.044715) * {0} * {0} * {0}))))",
        _tanh_fn,
    ),
)

# --- rounding (of a float: the floor of an int is the int itself, and the tracer adds no node) --

FLOOR = unary(
    "floor",
    Dtypes(frozenset({"float"})),
    "rounded down, elementwise",
    np.floor,
    api="x.floor()",
    wgsl_float="floor({0})",
)
CEIL = unary(
    "ceil", Dtypes(frozenset({"float"})), "rounded up, elementwise", np.ceil, api="x.ceil()", wgsl_float="ceil({0})"
)

# --- dtype and memory ------------------------------------------------------------------------


def cast(a: np.ndarray, dtype: DType) -> np.ndarray:
    """Casts as the GPU does them: float to int saturates, NaN becomes 0, to bool is != 0."""
    if a.dtype.kind == "f" and dtype.is_int:
        info = np.iinfo(dtype.np)
        with np.errstate(invalid="ignore"):
            # clip to the largest float32 inside the int range, as WGSL's conversion does
            hi = np.float32(np.nextafter(np.float32(info.max), np.float32(0)))
            x = np.clip(np.nan_to_num(a.astype(np.float32), nan=0.0), np.float32(info.min), hi)
        return np.trunc(x).astype(dtype.np)
    return a.astype(dtype.np)


def _cast(node: Node, args: list[np.ndarray]) -> np.ndarray:
    return cast(args[0], node.dtype)


# the kernels render casts themselves (backend_wgpu/kernels/fused.py): saturation, NaN -> 0 and
# float16 rounding depend on both dtypes, which an expression of one type cannot see
CAST = OpDef(
    "cast",
    Kind.ELEMENTWISE,
    1,
    Dtypes(ANY.families, result="given"),
    "x converted to another dtype",
    evaluate=_cast,
    api="x.astype(tr.int32)",
)
COPY = unary(
    "copy",
    ANY,
    "a contiguous copy of x",
    lambda a: a.copy(),
    api="x.contiguous()",
    wgsl_float="{0}",
    wgsl_int="{0}",
    wgsl_bool="{0}",
)
