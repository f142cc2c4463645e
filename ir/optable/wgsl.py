"""WGSL building blocks the op records share: bit tests, float16 rounding, fold-proof wrappers.

Every function returns WGSL text for a type t (f32, vec4<f16>, vec2<i32>...); nothing here
imports wgpu. The workarounds say which driver folded what, next to the code that avoids it.
"""

from __future__ import annotations

from collections.abc import Callable

from ir.optable.record import Code, suffix


def scalar_of(t: str) -> str:
    """The scalar of WGSL type t: vec4<f16> -> f16."""
    return t.split("<")[1].rstrip(">") if "<" in t else t


def bool_of(t: str) -> str:
    """The bool type of t's shape: vec4<f16> -> vec4<bool>."""
    return t.split("<")[0] + "<bool>" if "<" in t else "bool"


def with_scalar(t: str, scalar: str) -> str:
    """t with its scalar replaced: with_scalar("vec2<f16>", "f32") -> vec2<f32>."""
    return t.replace(scalar_of(t), scalar)


def _float_bits(x: str, t: str) -> tuple[str, str]:
    """The bits of float expression x of type t as u32 (vector) and that u32 type (f16 goes via f32)."""
    scalar = scalar_of(t)
    u = t.replace(scalar, "u32")
    if scalar == "f16":
        x = f"{t.replace(scalar, 'f32')}({x})"
    return f"bitcast<{u}>({x})", u


def isnan(x: str, t: str) -> str:
    """WGSL: true where x is NaN, tested on its bits.

    WGSL lets a compiler assume no NaN, and lavapipe folds `x != x` to false, so the
    obvious test silently breaks NaN propagation (max, min, argmax...).
    """
    bits, u = _float_bits(x, t)
    return f"(({bits} & {u}(0x7fffffffu)) > {u}(0x7f800000u))"


def isinf(x: str, t: str) -> str:
    """WGSL: true where x is +inf or -inf, tested on its bits (see isnan)."""
    bits, u = _float_bits(x, t)
    return f"(({bits} & {u}(0x7fffffffu)) == {u}(0x7f800000u))"


def is_zero(x: str, t: str) -> str:
    """WGSL: true where float x is +0.0 or -0.0, tested on its bits (see isnan)."""
    bits, u = _float_bits(x, t)
    return f"(({bits} & {u}(0x7fffffffu)) == {u}(0u))"


def negative(x: str, t: str) -> str:
    """WGSL: true where the sign bit of float x is set (-0.0 included)."""
    bits, u = _float_bits(x, t)
    return f"(({bits} & {u}(0x80000000u)) != {u}(0u))"


def nan_let(t: str) -> str:
    """WGSL lines that define `nan` of type t (a NaN literal is a WGSL compile error, so via a var)."""
    return (
        "  var nan_bits = 0x7fc00000u;\n"
        f"  let nan = {t}({scalar_of(t)}(bitcast<f32>(nan_bits)));  // via the scalar: f16 has no f32 vector ctor\n"
    )


def horner(t: str, x: str, coefficients: list[str]) -> str:
    """WGSL: the polynomial c0 + x * (c1 + x * (c2 + ...)) in type t, coefficients as literals."""
    head, *rest = coefficients
    return f"{t}({head})" if not rest else f"{t}({head}) + {x} * ({horner(t, x, rest)})"


def opaque(code: str) -> Code:
    """A transcendental (template over {0}) whose compositions the compiler must not rewrite.

    lavapipe rewrites them as if no NaN, infinity or overflow existed: exp(log(x)) became x
    (so exp(log(-2)) gave -2, not NaN), log(exp(x)) would become x (log(exp(100)) is inf in
    float32). Passing the result through a select on the operand's NaN bits leaves the value
    alone and hides the composition from those rewrites.
    """

    def render(args: list[str], t: str) -> str:
        return f"select({code.format(*args, t=t, s=suffix(t))}, {args[0]}, {isnan(args[0], t)})"

    return render


def float_compare(symbol: str) -> Code:
    """A float comparison `x symbol y` that says what numpy says about NaN (only != is true).

    NVIDIA's compiler folds x >= x, x <= x and x == x to true and x != x to false, as WGSL lets
    it assume no NaN, so floats also test the NaN bits of both sides.
    """

    def render(args: list[str], t: str) -> str:
        either_nan = f"({isnan(args[0], t)} | {isnan(args[1], t)})"
        if symbol == "!=":
            return f"({plain_compare(symbol)(args, t)} | {either_nan})"
        return f"({plain_compare(symbol)(args, t)} & !{either_nan})"

    return render


def plain_compare(symbol: str) -> Callable[[list[str], str], str]:
    """`x symbol y` as WGSL; != is spelled !(x == y): `!=` compiles to an ordered compare, so NaN != x gave false."""
    if symbol == "!=":
        return lambda a, t: f"(!({a[0]} == {a[1]}))"
    return lambda a, t: f"({a[0]} {symbol} {a[1]})"


def via_u32(code: Callable[[list[str], str], str], to_bool: bool = False) -> Code:
    """The code of an ordering on bools (<, max...), run on them as 0u/1u.

    WGSL orders no bools; numpy orders False < True. `to_bool` turns a u32 result back to bool.
    """

    def render(args: list[str], t: str) -> str:
        u = t.replace("bool", "u32")
        value = code([f"{u}({a})" for a in args], u)
        return f"({value} != {u}(0u))" if to_bool else value

    return render


def f16_rounded(x: str, w: str) -> str:
    """WGSL: f32 expression x (of type w: f32 or vecN<f32>) rounded to the nearest float16 value.

    Wrap every f32 -> f16 conversion of a value that stays in registers: NVIDIA's compiler drops
    an f32 -> f16 -> f32 round trip (even through pack2x16float), so a fused float16 chain kept
    values float16 cannot hold (exp(-17.88) stayed 1.7e-8 and log gave back -17.88, not -inf).
    The helper, `f16_round_helper(w)`, rounds on the bits, which no compiler can skip.
    """
    return f"wg_round_f16_{suffix(w)}({x})"


def f16_round_helper(w: str) -> dict[str, str]:
    """The helper function `f16_rounded` calls, for f32 type w, keyed by name."""
    u = w.replace("f32", "u32")
    name = f"wg_round_f16_{suffix(w)}"
    code = (
        f"fn {name}(x: {w}) -> {w} {{\n"
        f"  let bits = bitcast<{u}>(x);\n"
        f"  let a = bits & {u}(0x7fffffffu);\n"
        f"  let sign = bits & {u}(0x80000000u);\n"
        f"  // normal float16 range: keep 10 mantissa bits, ties to even\n"
        f"  let normal = bitcast<{w}>(sign | ((a + {u}(0xfffu) + ((a >> {u}(13u)) & {u}(1u))) & {u}(0xffffe000u)));\n"
        f"  // below 2**-14: float16 subnormals, multiples of 2**-24 (round() ties to even)\n"
        f"  let subnormal = round(x * {w}(16777216.0)) * {w}(5.9604644775390625e-8);\n"
        f"  let inf = bitcast<{w}>(sign | {u}(0x7f800000u));\n"
        f"  // from 65520 up, the nearest float16 is infinity\n"
        f"  let r = select(select(normal, subnormal, a < {u}(0x38800000u)), inf, a >= {u}(0x477ff000u));\n"
        f"  return select(r, x, a >= {u}(0x7f800000u));  // inf and NaN as they are\n}}"
    )
    return {name: code}
