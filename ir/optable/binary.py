"""Elementwise arithmetic of two operands: + - * / // % ** maximum minimum hypot logaddexp.

The float forms go through helper functions: GPU compilers may assume no NaN or infinity
and fold x - x, x / x, x % x and friends, which numpy does not (each helper says where).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ir.optable.record import ANY, FLOAT, NUMERIC, OpDef, Wgsl, binary, suffix
from ir.optable.unary import log1p_fn
from ir.optable.wgsl import (
    bool_of,
    inf_let,
    is_zero,
    isinf,
    isnan,
    nan_let,
    negative,
    scalar_of,
    via_u32,
    with_scalar,
)

# --- + - * --------------------------------------------------------------------------------------


def _add_sub_fn(name: str, sym: str, inf_signs: str) -> Callable[[str], dict[str, str]]:
    # lavapipe folds x - x and x + (-x) to 0, also when x - y became x - x by merging equal
    # subexpressions (exp(a) - exp(a)); IEEE and numpy say NaN for infinite and NaN operands
    def helpers(t: str) -> dict[str, str]:
        s = suffix(t)
        return {
            f"wg_{name}_{s}": (
                f"fn wg_{name}_{s}(x: {t}, y: {t}) -> {t} {{\n"
                f"{nan_let(t)}"
                f"  let inf_nan = {isinf('x', t)} & {isinf('y', t)} & ({negative('x', t)} {inf_signs} {negative('y', t)});\n"
                f"  return select(x {sym} y, nan, {isnan('x', t)} | {isnan('y', t)} | inf_nan);\n}}"
            )
        }

    return helpers


ADD = binary(
    "add",
    NUMERIC,
    "x + y",
    np.add,
    api="x + y",
    wgsl_float=Wgsl("wg_add_{s}({0}, {1})", _add_sub_fn("add", "+", "!=")),
    wgsl_int="({0} + {1})",
)
SUB = binary(
    "sub",
    NUMERIC,
    "x - y",
    np.subtract,
    api="x - y",
    wgsl_float=Wgsl("wg_sub_{s}({0}, {1})", _add_sub_fn("sub", "-", "==")),
    wgsl_int="({0} - {1})",
)


def _mul_fn(t: str) -> dict[str, str]:
    # sqrt(a) * sqrt(a) again (see square), via two nodes: NaN must stay NaN
    s = suffix(t)
    return {
        f"wg_mul_{s}": (
            f"fn wg_mul_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  return select(select(x * y, x, {isnan('x', t)}), y, {isnan('y', t)});  // NaN stays NaN\n}}"
        )
    }


MUL = binary(
    "mul",
    NUMERIC,
    "x * y",
    np.multiply,
    api="x * y",
    wgsl_float=Wgsl("wg_mul_{s}({0}, {1})", _mul_fn),
    wgsl_int="({0} * {1})",
)

# --- / // % (float16 in f32: NVIDIA's f16 x / y is not correctly rounded: x / x gave 0.9995, so
# x // y and x % y picked the wrong quotient; in f32 then rounded they are numpy's) ----------------


def _div_fn(t: str) -> dict[str, str]:
    # NVIDIA folds x / x to 1 (WGSL lets a compiler assume finite values), so 0 / 0, inf / inf
    # and NaN / NaN gave 1: those cases are found on the bits and give NaN, as numpy. And it
    # divides as x * (1 / y), where 1 / y flushes to 0 for |y| > 2**126 (3e38 / 3e38 gave 0):
    # such a divisor is scaled down first, with the dividend (the quotient is the same)
    s = suffix(t)
    return {
        f"wg_div_{s}": (
            f"fn wg_div_{s}(x: {t}, y: {t}) -> {t} {{\n{nan_let(t)}"
            f"  let undefined = {isnan('x', t)} | {isnan('y', t)} | ({is_zero('x', t)} & {is_zero('y', t)})"
            f" | ({isinf('x', t)} & {isinf('y', t)});\n"
            f"  let scale = select({t}(1.0), {t}(0.25), abs(y) > {t}(8.5070592e37));\n"
            f"  return select((x * scale) / (y * scale), nan, undefined);\n}}"
        )
    }


DIV = binary(
    "div",
    FLOAT,
    "x / y (true division: ints give floats)",
    np.true_divide,
    api="x / y",
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_div_{s}({0}, {1})", _div_fn),
)


def _cfmod_fn(t: str) -> dict[str, str]:
    # C's fmod from a quotient that may be one off: GPU division is not correctly rounded
    # (NVIDIA's 2x / x gave 1.9999999, so 2x % x was x), so the remainder is moved back
    # into [0, |y|) once in either direction; it takes the sign of x, as C's
    s = suffix(t)
    return _div_fn(t) | {
        f"wg_cfmod_{s}": (
            f"fn wg_cfmod_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let ax = abs(x);\n  let ay = abs(y);\n"
            f"  var r = fma(-ay, trunc(wg_div_{s}(ax, ay)), ax);  // fma: one rounding\n"
            f"  r = select(r, r - ay, r >= ay);\n  r = select(r, r + ay, r < {t}(0.0));\n"
            f"  r = select(r, ax, {isinf('y', t)} & !{isinf('x', t)});  // x mod +-inf is x (not inf * 0)\n"
            f"  return select(r, -r, {negative('x', t)});\n}}"
        )
    }


def _ffloordiv_fn(t: str) -> dict[str, str]:
    # numpy's algorithm (npy_divmod), not floor(x / y): the quotient comes from the
    # remainder, so -1e-30 // 1e30 is -1 (the rounded quotient -0.0 would give 0), an
    # infinite x gives NaN, a finite x // +-inf gives 0 or -1, and x // 0 is x / 0
    s = suffix(t)
    z, one = f"{t}(0.0)", f"{t}(1.0)"
    u = with_scalar(t, "u32")
    return _cfmod_fn(t) | {
        f"wg_ffloordiv_{s}": (
            f"fn wg_ffloordiv_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let q = wg_div_{s}(x, y);\n"
            f"  let m = wg_cfmod_{s}(x, y);\n"
            f"  let div = wg_div_{s}(x - m, y) - select({z}, {one}, (m != {z}) & ((y < {z}) != (m < {z})));\n"
            f"  var f = floor(div);\n"
            f"  f += select({z}, {one}, div - f > {t}(0.5));\n"
            f"  // a zero quotient keeps the sign of x / y: on the bits (lavapipe folds q * 0.0 to +0.0)\n"
            f"  f = select(f, bitcast<{t}>(bitcast<{u}>(q) & {u}(0x80000000u)), div == {z});\n"
            f"  return select(f, q, y == {z});\n}}"
        )
    }


def _ifloordiv_fn(t: str) -> dict[str, str]:
    # integer division by zero gives 0 (the documented rule, as numpy); i32 rounds toward
    # -infinity, as numpy, where WGSL truncates
    s, zero = suffix(t), f"{t}(0)"
    fix = f"select({zero}, {t}(1), (r != {zero}) & ((r < {zero}) != (y < {zero})))" if scalar_of(t) == "i32" else zero
    return {
        f"wg_ifloordiv_{s}": (
            f"fn wg_ifloordiv_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let z = y == {zero};\n  let d = select(y, {t}(1), z);\n  let q = x / d;\n  let r = x - q * d;\n"
            f"  return select(q - {fix}, {zero}, z);\n}}"
        )
    }


def _int_safe(op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Integer division and modulo by zero give 0 (the documented rule, as numpy does)."""

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu":
            a, b = np.broadcast_arrays(a, b)
            zero = b == 0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                out = op(a, np.where(zero, 1, b))
            return np.where(zero, 0, out).astype(a.dtype)
        return op(a, b)

    return run


FLOORDIV = binary(
    "floordiv",
    NUMERIC,
    "floor(x / y), as numpy's // (int division by 0 gives 0)",
    _int_safe(np.floor_divide),
    api="x // y",
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_ffloordiv_{s}({0}, {1})", _ffloordiv_fn),
    wgsl_int=Wgsl("wg_ifloordiv_{s}({0}, {1})", _ifloordiv_fn),
)


def _fmod_fn(t: str) -> dict[str, str]:
    s = suffix(t)
    u = with_scalar(t, "u32")
    return _cfmod_fn(t) | {
        f"wg_fmod_{s}": (
            f"fn wg_fmod_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let r = wg_cfmod_{s}(x, y);\n"
            f"  // numpy: a nonzero remainder takes the sign of y (x mod +-inf is x, or +-inf); a zero one is +-0 as y\n"
            f"  let signed = select(r, r + y, (r != {t}(0.0)) & ((r < {t}(0.0)) != (y < {t}(0.0))));\n"
            f"  let zero = bitcast<{t}>(bitcast<{u}>(y) & {u}(0x80000000u));\n{nan_let(t)}"
            f"  // NaN for x % 0, inf % y and NaN operands, on the bits: NVIDIA folds x % x to 0\n"
            f"  return select(select(signed, zero, r == {t}(0.0)), nan, {isnan('x', t)} | {isnan('y', t)} | {isinf('x', t)} | {is_zero('y', t)});\n}}"
        )
    }


def _imod_fn(t: str) -> dict[str, str]:
    # x % 0 gives 0 (documented, as numpy); an i32 remainder takes the sign of y, as numpy's
    s, zero = suffix(t), f"{t}(0)"
    fix = f"select({zero}, d, (r != {zero}) & ((r < {zero}) != (d < {zero})))" if scalar_of(t) == "i32" else zero
    return {
        f"wg_imod_{s}": (
            f"fn wg_imod_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let z = y == {zero};\n  let d = select(y, {t}(1), z);\n  let r = x - (x / d) * d;\n"
            f"  return select(r + {fix}, {zero}, z);\n}}"
        )
    }


MOD = binary(
    "mod",
    NUMERIC,
    "x % y, with the sign of y as numpy's (int modulo 0 gives 0)",
    _int_safe(np.mod),
    api="x % y",
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_fmod_{s}({0}, {1})", _fmod_fn),
    wgsl_int=Wgsl("wg_imod_{s}({0}, {1})", _imod_fn),
)

# --- ** -------------------------------------------------------------------------------------------


def _pow_fn(t: str) -> dict[str, str]:
    s = suffix(t)
    return {
        f"wg_pow_{s}": (
            f"fn wg_pow_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  var inf_bits = 0x7f800000u;  // a var: an infinite constant is a WGSL compile error\n"
            f"  let inf = {t}({scalar_of(t)}(bitcast<f32>(inf_bits)));\n"
            f"  // |x| == 0 explicitly: lavapipe's pow(0, -0.5) gives 0, numpy inf\n"
            f"  let m = select(pow(abs(x), y), select({t}(0.0), inf, y < {t}(0.0)), x == {t}(0.0));\n"
            f"  let is_int = floor(y) == y;\n"
            f"  let odd = is_int & (abs(y - {t}(2.0) * floor(y * {t}(0.5))) == {t}(1.0));\n"
            f"  let neg = select(m, -m, odd);\n"
            f"{nan_let(t)}"
            f"  // a negative base needs an integer exponent, except -inf (C's pow: (-inf) ** -0.5 is 0)\n"
            f"  let neg_base = select(select(nan, m, {isinf('x', t)}), neg, is_int);\n"
            f"  // -0.0 keeps its sign under an odd integer power ((-0.0) ** -1 is -inf), on the bits: -0.0 < 0 is false\n"
            f"  let neg_zero = (x == {t}(0.0)) & {negative('x', t)};\n"
            f"  let signed = select(select(m, neg_base, x < {t}(0.0)), neg, neg_zero);\n"
            f"  let r = select(signed, nan, {isnan('x', t)} | {isnan('y', t)});\n"
            f"  // as numpy: x ** 0, 1 ** y and (-1) ** +-inf are 1, even for NaN (pow(0, 0) is undefined in WGSL)\n"
            f"  let one = (y == {t}(0.0)) | (x == {t}(1.0)) | ((x == {t}(-1.0)) & {isinf('y', t)});\n"
            f"  return select(r, {t}(1.0), one);\n}}"
        )
    }


def _ipow_fn(t: str) -> dict[str, str]:
    # computed in f32 and rounded: exact while |result| < 2**24
    s, ft = suffix(t), with_scalar(t, "f32")
    if scalar_of(t) == "i32":
        rounded = f"round(select(m, -m, (fx < {ft}(0.0)) & odd))"
    else:
        # lavapipe drops round() of a pow of u32 operands, as if a power of integers were one:
        # 5u ** 2u gave 24 (pow is 24.999998). A u32 power is never negative nor a half (no
        # negative exponents), so floor(m + 0.5) rounds it as round() would
        rounded = f"floor(m + {ft}(0.5))"
    return {
        f"wg_ipow_{s}": (
            f"fn wg_ipow_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let fx = {ft}(x);\n  let fy = {ft}(y);\n  let m = pow(abs(fx), fy);\n"
            f"  let odd = abs(fy - {ft}(2.0) * floor(fy * {ft}(0.5))) == {ft}(1.0);\n"
            f"  // x ** 0 is 1 for every x (pow(0, 0) is undefined in WGSL)\n"
            f"  return select({t}({rounded}), {t}(1), y == {t}(0));\n}}"
        )
    }


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":  # computed in float32 and rounded: exact while |result| < 2**24
        return np.round(np.power(a.astype(np.float32), b.astype(np.float32))).astype(a.dtype)
    # never a 0-d exponent: numpy computes x ** 0.5 as sqrt(x) then, and (-inf) ** 0.5 is NaN, not inf
    return np.power(*np.broadcast_arrays(a, b))


POW = binary(
    "pow",
    NUMERIC,
    "x ** y, as numpy's",
    _pow,
    api="x ** y",
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_pow_{s}({0}, {1})", _pow_fn),
    wgsl_int=Wgsl("wg_ipow_{s}({0}, {1})", _ipow_fn),
)

# --- maximum, minimum ------------------------------------------------------------------------------


def _extreme_fn(fn: str) -> Callable[[str], dict[str, str]]:
    def helpers(t: str) -> dict[str, str]:
        s, b = suffix(t), bool_of(t)
        return {
            f"wg_{fn}_{s}": (
                f"fn wg_{fn}_{s}(x: {t}, y: {t}) -> {t} {{\n"
                f"  // numpy propagates NaN; WGSL's {fn} may not\n"
                f"  let xn: {b} = {isnan('x', t)};\n  let yn: {b} = {isnan('y', t)};\n"
                f"  return select(select({fn}(x, y), y, yn), x, xn);\n}}"
            )
        }

    return helpers


def _extreme(name: str, fn: str, numpy: Callable[..., np.ndarray]) -> OpDef:
    return binary(
        name,
        ANY,
        f"the elementwise {fn} of x and y (NaN wins, as numpy's)",
        numpy,
        api=f"tr.{name}(x, y)",
        wgsl_float=Wgsl(f"wg_{fn}_{{s}}({{0}}, {{1}})", _extreme_fn(fn)),
        wgsl_int=f"{fn}({{0}}, {{1}})",
        wgsl_bool=via_u32(lambda a, t: f"{fn}({a[0]}, {a[1]})", to_bool=True),
    )


MAXIMUM = _extreme("maximum", "max", np.maximum)
MINIMUM = _extreme("minimum", "min", np.minimum)

# --- hypot, logaddexp (float only; float16 in f32) --------------------------------------------------


def _hypot_fn(t: str) -> dict[str, str]:
    # sqrt(x^2 + y^2) overflows (and underflows) long before the result does: the larger magnitude
    # is factored out, hi * sqrt(1 + (lo / hi)^2), dividing through wg_div (NVIDIA's 1 / y flushes
    # above 2**126). numpy's answers on the bits: an infinity wins even over NaN, then NaN; two
    # zeros give 0 (lo / hi would be NaN)
    s = suffix(t)
    return _div_fn(t) | {
        f"wg_hypot_{s}": (
            f"fn wg_hypot_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let a = abs(x);\n  let b = abs(y);\n  let hi = max(a, b);\n  let r = wg_div_{s}(min(a, b), hi);\n"
            f"  var h = select(hi * sqrt({t}(1.0) + r * r), {t}(0.0), {is_zero('hi', t)});\n"
            f"{nan_let(t)}"
            f"  h = select(h, nan, {isnan('x', t)} | {isnan('y', t)});\n"
            f"{inf_let(t)}"
            f"  return select(h, inf, {isinf('x', t)} | {isinf('y', t)});\n}}"
        )
    }


HYPOT = binary(
    "hypot",
    FLOAT,
    "sqrt(x**2 + y**2) without overflow, elementwise",
    np.hypot,
    api="tr.hypot(x, y)",
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_hypot_{s}({0}, {1})", _hypot_fn),
)


def _logaddexp_fn(t: str) -> dict[str, str]:
    # numpy's: the larger plus log1p(exp(-|x - y|)), which neither overflows nor loses the smaller
    # term; equal operands give x + log(2), also two infinities of one sign (where x - y is NaN);
    # NaN on the bits
    s = suffix(t)
    return log1p_fn(t) | {
        f"wg_logaddexp_{s}": (
            f"fn wg_logaddexp_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let hi = select(y, x, x > y);\n"
            f"  let r = select(hi + wg_log1p_{s}(exp(-abs(x - y))), x + {t}(0.6931471805599453), x == y);\n"
            f"{nan_let(t)}"
            f"  return select(r, nan, {isnan('x', t)} | {isnan('y', t)});\n}}"
        )
    }


LOGADDEXP = binary(
    "logaddexp",
    FLOAT,
    "log(exp(x) + exp(y)) without overflow, elementwise",
    np.logaddexp,
    api="tr.logaddexp(x, y)",
    f32_for_f16=True,
    wgsl_float=Wgsl("wg_logaddexp_{s}({0}, {1})", _logaddexp_fn),
)
