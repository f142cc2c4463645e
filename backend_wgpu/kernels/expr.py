"""Op -> WGSL expression table for elementwise math, with the helper functions some need.

Each entry takes the operand expressions and the arithmetic type T (f32, vec4<f16>,
vec2<i32>...) and returns an expression; `helpers` lists helper functions to emit, which
are generated per type because WGSL has no generics.
"""

from __future__ import annotations

from collections.abc import Callable

from ir.dtypes import DType
from ir.ops import Op

Expr = Callable[[list[str], str], str]


def _scalar_of(t: str) -> str:
    return t.split("<")[1].rstrip(">") if "<" in t else t


def _bool_of(t: str) -> str:
    return t.split("<")[0] + "<bool>" if "<" in t else "bool"


def _float_bits(x: str, t: str) -> tuple[str, str]:
    """The bits of float expression x of type t as u32 (vector) and that u32 type (f16 goes via f32)."""
    scalar = _scalar_of(t)
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


def _is_zero(x: str, t: str) -> str:
    """WGSL: true where float x is +0.0 or -0.0, tested on its bits (see isnan)."""
    bits, u = _float_bits(x, t)
    return f"(({bits} & {u}(0x7fffffffu)) == {u}(0u))"


def _nan_let(t: str) -> str:
    """WGSL lines that define `nan` of type t (a NaN literal is a WGSL compile error, so via a var)."""
    return (
        "  var nan_bits = 0x7fc00000u;\n"
        f"  let nan = {t}({_scalar_of(t)}(bitcast<f32>(nan_bits)));  // via the scalar: f16 has no f32 vector ctor\n"
    )


def _negative(x: str, t: str) -> str:
    """WGSL: true where the sign bit of float x is set (-0.0 included)."""
    bits, u = _float_bits(x, t)
    return f"(({bits} & {u}(0x80000000u)) != {u}(0u))"


def _suffix(t: str) -> str:
    return t.replace("<", "_").replace(">", "")


FLOAT_EXPR: dict[Op, Expr] = {
    Op.NEG: lambda a, t: f"(-{a[0]})",
    Op.ABS: lambda a, t: f"abs({a[0]})",
    Op.EXP: lambda a, t: f"exp({a[0]})",
    Op.LOG: lambda a, t: f"log({a[0]})",
    Op.SQRT: lambda a, t: f"sqrt({a[0]})",
    Op.RSQRT: lambda a, t: f"inverseSqrt({a[0]})",
    Op.RECIPROCAL: lambda a, t: f"({t}(1.0) / {a[0]})",
    # x * x of one value through a helper: lavapipe folds sqrt(a) * sqrt(a) to a (or |a|), so
    # square(sqrt(-4)) gave 4 instead of NaN
    Op.SQUARE: lambda a, t: f"wg_square_{_suffix(t)}({a[0]})",
    Op.SIN: lambda a, t: f"sin({a[0]})",
    Op.COS: lambda a, t: f"cos({a[0]})",
    Op.TANH: lambda a, t: f"wg_tanh_{_suffix(t)}({a[0]})",
    Op.SIGMOID: lambda a, t: f"({t}(1.0) / ({t}(1.0) + exp(-{a[0]})))",
    # relu tests the sign bit, not `x < 0`: lavapipe's range analysis decides rsqrt(x) >= 0 and
    # drops the compare, so relu(rsqrt(-0.0)) gave -inf; NaN (any sign) passes through as numpy's
    Op.RELU: lambda a, t: f"select({a[0]}, {t}(0.0), {_negative(a[0], t)} & !{isnan(a[0], t)})",
    Op.GELU: lambda a, t: f"({t}(0.5) * {a[0]} * ({t}(1.0) + wg_erf_{_suffix(t)}({a[0]} * {t}(0.7071067811865476))))",
    Op.GELU_TANH: lambda a, t: (
        f"({t}(0.5) * {a[0]} * ({t}(1.0) + wg_tanh_{_suffix(t)}({t}(0.7978845608028654) * ({a[0]} + {t}(0.044715) * {a[0]} * {a[0]} * {a[0]}))))"
    ),
    Op.SILU: lambda a, t: f"({a[0]} / ({t}(1.0) + exp(-{a[0]})))",
    Op.ERF: lambda a, t: f"wg_erf_{_suffix(t)}({a[0]})",
    Op.FLOOR: lambda a, t: f"floor({a[0]})",
    Op.CEIL: lambda a, t: f"ceil({a[0]})",
    Op.ADD: lambda a, t: f"wg_add_{_suffix(t)}({a[0]}, {a[1]})",
    Op.SUB: lambda a, t: f"wg_sub_{_suffix(t)}({a[0]}, {a[1]})",
    Op.MUL: lambda a, t: f"wg_mul_{_suffix(t)}({a[0]}, {a[1]})",  # sqrt(a) * sqrt(a) again, via two nodes
    Op.DIV: lambda a, t: f"wg_div_{_suffix(t)}({a[0]}, {a[1]})",
    Op.FLOORDIV: lambda a, t: f"wg_ffloordiv_{_suffix(t)}({a[0]}, {a[1]})",
    Op.MOD: lambda a, t: f"wg_fmod_{_suffix(t)}({a[0]}, {a[1]})",
    Op.POW: lambda a, t: f"wg_pow_{_suffix(t)}({a[0]}, {a[1]})",
    Op.MAXIMUM: lambda a, t: f"wg_max_{_suffix(t)}({a[0]}, {a[1]})",
    Op.MINIMUM: lambda a, t: f"wg_min_{_suffix(t)}({a[0]}, {a[1]})",
}

INT_EXPR: dict[Op, Expr] = {
    Op.NEG: lambda a, t: f"(-{a[0]})",
    Op.ABS: lambda a, t: f"abs({a[0]})",
    Op.SQUARE: lambda a, t: f"({a[0]} * {a[0]})",
    Op.RELU: lambda a, t: f"max({a[0]}, {t}(0))",
    Op.ADD: lambda a, t: f"({a[0]} + {a[1]})",
    Op.SUB: lambda a, t: f"({a[0]} - {a[1]})",
    Op.MUL: lambda a, t: f"({a[0]} * {a[1]})",
    Op.FLOORDIV: lambda a, t: f"wg_ifloordiv_{_suffix(t)}({a[0]}, {a[1]})",
    Op.MOD: lambda a, t: f"wg_imod_{_suffix(t)}({a[0]}, {a[1]})",
    Op.POW: lambda a, t: f"wg_ipow_{_suffix(t)}({a[0]}, {a[1]})",
    Op.MAXIMUM: lambda a, t: f"max({a[0]}, {a[1]})",
    Op.MINIMUM: lambda a, t: f"min({a[0]}, {a[1]})",
}

COMMON_EXPR: dict[Op, Expr] = {
    Op.COPY: lambda a, t: a[0],
    Op.LT: lambda a, t: f"({a[0]} < {a[1]})",
    Op.LE: lambda a, t: f"({a[0]} <= {a[1]})",
    Op.GT: lambda a, t: f"({a[0]} > {a[1]})",
    Op.GE: lambda a, t: f"({a[0]} >= {a[1]})",
    Op.EQ: lambda a, t: f"({a[0]} == {a[1]})",
    Op.NE: lambda a, t: f"(!({a[0]} == {a[1]}))",  # `!=` compiles to an ordered compare: NaN != x gave false
    Op.AND: lambda a, t: f"({a[0]} & {a[1]})",
    Op.OR: lambda a, t: f"({a[0]} | {a[1]})",
    Op.NOT: lambda a, t: f"(!{a[0]})",
    Op.WHERE: lambda a, t: f"select({a[2]}, {a[1]}, {a[0]})",
}


# NVIDIA's compiler folds x >= x, x <= x and x == x to true and x != x to false, as WGSL lets it
# assume no NaN; numpy says a comparison with NaN is false (true for !=), so floats also test
# the NaN bits of both sides
_REFLEXIVE = frozenset({Op.LE, Op.GE, Op.EQ, Op.NE})


def _float_compare(op: Op, args: list[str], t: str) -> str:
    plain = COMMON_EXPR[op](args, t)
    either_nan = f"({isnan(args[0], t)} | {isnan(args[1], t)})"
    return f"({plain} | {either_nan})" if op is Op.NE else f"({plain} & !{either_nan})"


_BOOL_VIA_U32 = frozenset({Op.LT, Op.LE, Op.GT, Op.GE, Op.MAXIMUM, Op.MINIMUM})

# float16 transcendental math is evaluated in f32 and rounded once at the end: lavapipe's f16
# exp is off by ~9 ulp, and in f16 1 + erf(x) cancels to 0, so gelu(x < -3) would be 0.
# Division and sqrt too: NVIDIA's f16 x / y and sqrt are not correctly rounded (x / x gave
# 0.9995, so x // y and x % y picked the wrong quotient); in f32 then rounded they are numpy's
F32_FOR_F16 = frozenset(
    {Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.TANH, Op.SIGMOID, Op.GELU, Op.GELU_TANH, Op.SILU, Op.ERF}
    | {Op.POW, Op.DIV, Op.FLOORDIV, Op.MOD, Op.RECIPROCAL}
)


def f16_rounded(x: str, w: str) -> str:
    """WGSL: f32 expression x (of type w: f32 or vecN<f32>) rounded to the nearest float16 value.

    Wrap every f32 -> f16 conversion of a value that stays in registers: NVIDIA's compiler drops
    an f32 -> f16 -> f32 round trip (even through pack2x16float), so a fused float16 chain kept
    values float16 cannot hold (exp(-17.88) stayed 1.7e-8 and log gave back -17.88, not -inf).
    The helper, `f16_round_helper(w)`, rounds on the bits, which no compiler can skip.
    """
    return f"wg_round_f16_{_suffix(w)}({x})"


def f16_round_helper(w: str) -> dict[str, str]:
    """The helper function `f16_rounded` calls, for f32 type w, keyed by name."""
    u = w.replace("f32", "u32")
    name = f"wg_round_f16_{_suffix(w)}"
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


def _widened(op: Op, t: str, dtype: DType) -> str | None:
    """The f32 type to compute `op` in when its data is f16 (None: compute in `t`)."""
    return t.replace("f16", "f32") if dtype is DType.float16 and op in F32_FOR_F16 else None


def expression(op: Op, args: list[str], t: str, dtype: DType) -> str:
    """The WGSL expression of `op` on `args`, computed in type `t` of element dtype `dtype`."""
    if dtype is DType.bool and op in _BOOL_VIA_U32:
        # WGSL orders no bools: compare (or max/min) them as 0u/1u, as numpy orders False < True
        u = t.replace("bool", "u32")
        ua = [f"{u}({a})" for a in args]
        if op in COMMON_EXPR:
            return COMMON_EXPR[op](ua, u)
        return f"({INT_EXPR[op](ua, u)} != {u}(0u))"
    if op in _REFLEXIVE and dtype.is_float:
        return _float_compare(op, args, t)
    if op in COMMON_EXPR:
        return COMMON_EXPR[op](args, t)
    wide = _widened(op, t, dtype)
    if wide is not None:
        wide_args = [f"{wide}({a})" for a in args]
        return f"{t}({f16_rounded(_opaque(op, FLOAT_EXPR[op](wide_args, wide), wide_args, wide), wide)})"
    table = FLOAT_EXPR if dtype.is_float else INT_EXPR
    if op not in table:
        raise NotImplementedError(f"no WGSL expression for {op.value} on {dtype.value}")
    code = table[op](args, t)
    return _opaque(op, code, args, t) if dtype.is_float else code


# Transcendentals whose compositions lavapipe rewrites as if no NaN, infinity or overflow
# existed: exp(log(x)) became x (so exp(log(-2)) gave -2, not NaN), log(exp(x)) would become x
# (log(exp(100)) is inf in float32). Passing the result through a select on the operand's
# NaN bits leaves the value alone and hides the composition from those rewrites.
_OPAQUE = frozenset({Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS})


def _opaque(op: Op, code: str, args: list[str], t: str) -> str:
    return f"select({code}, {args[0]}, {isnan(args[0], t)})" if op in _OPAQUE else code


def helpers(op: Op, t: str, dtype: DType) -> dict[str, str]:
    """Helper functions the expression of `op` calls, keyed by name."""
    wide = _widened(op, t, dtype)
    if wide is not None:
        return helpers(op, wide, DType.float32) | f16_round_helper(wide)
    s = _suffix(t)
    b = _bool_of(t)
    out: dict[str, str] = {}
    if not dtype.is_float:
        if op is Op.FLOORDIV:
            zero = f"{t}(0)"
            fix = (
                f"select({zero}, {t}(1), (r != {zero}) & ((r < {zero}) != (y < {zero})))"
                if dtype is DType.int32
                else zero
            )
            out[f"wg_ifloordiv_{s}"] = (
                f"fn wg_ifloordiv_{s}(x: {t}, y: {t}) -> {t} {{\n"
                f"  let z = y == {zero};\n  let d = select(y, {t}(1), z);\n  let q = x / d;\n  let r = x - q * d;\n"
                f"  return select(q - {fix}, {zero}, z);\n}}"
            )
        elif op is Op.MOD:
            zero = f"{t}(0)"
            fix = f"select({zero}, d, (r != {zero}) & ((r < {zero}) != (d < {zero})))" if dtype is DType.int32 else zero
            out[f"wg_imod_{s}"] = (
                f"fn wg_imod_{s}(x: {t}, y: {t}) -> {t} {{\n"
                f"  let z = y == {zero};\n  let d = select(y, {t}(1), z);\n  let r = x - (x / d) * d;\n"
                f"  return select(r + {fix}, {zero}, z);\n}}"
            )
        elif op is Op.POW:
            ft = t.replace(_scalar_of(t), "f32")
            out[f"wg_ipow_{s}"] = (
                f"fn wg_ipow_{s}(x: {t}, y: {t}) -> {t} {{\n"
                f"  let fx = {ft}(x);\n  let fy = {ft}(y);\n  let m = pow(abs(fx), fy);\n"
                f"  let odd = abs(fy - {ft}(2.0) * floor(fy * {ft}(0.5))) == {ft}(1.0);\n"
                f"  // x ** 0 is 1 for every x (pow(0, 0) is undefined in WGSL)\n"
                f"  return select({t}(round(select(m, -m, (fx < {ft}(0.0)) & odd))), {t}(1), y == {t}(0));\n}}"
            )
        return out
    if op is Op.TANH or op is Op.GELU_TANH:
        # tanh(x) = 1 - 2 / (exp(2x) + 1): exact at large |x| where exp overflows, keeps NaN
        # evaluated in f32 even for f16: the subtraction cancels badly in f16 for small |x|
        f = t.replace(_scalar_of(t), "f32")
        out[f"wg_tanh_{s}"] = (
            f"fn wg_tanh_{s}(x_in: {t}) -> {t} {{\n"
            f"  let x = {f}(x_in);\n"
            f"  let y = {f}(1.0) - {f}(2.0) / (exp(min(abs(x), {f}(20.0)) * {f}(2.0)) + {f}(1.0));\n"
            f"  return {t}(select(sign(x) * y, x, (abs(x) < {f}(0.0005)) | {isnan('x', f)}));\n}}"
        )
    if op is Op.GELU or op is Op.ERF:
        # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), evaluated in f32 even for f16
        f = t.replace(_scalar_of(t), "f32")
        out[f"wg_erf_{s}"] = (
            f"fn wg_erf_{s}(x_in: {t}) -> {t} {{\n"
            f"  let x = {f}(x_in);\n  let a = abs(x);\n  let k = {f}(1.0) / ({f}(1.0) + {f}(0.3275911) * a);\n"
            f"  let p = k * ({f}(0.254829592) + k * ({f}(-0.284496736) + k * ({f}(1.421413741) + k * ({f}(-1.453152027) + k * {f}(1.061405429)))));\n"
            f"  return {t}(sign(x) * ({f}(1.0) - p * exp(-a * a)));\n}}"
        )
    if op is Op.SQUARE:
        out[f"wg_square_{s}"] = (
            f"fn wg_square_{s}(x: {t}) -> {t} {{\n  return select(x * x, x, {isnan('x', t)});  // NaN stays NaN\n}}"
        )
    if op is Op.MUL:
        out[f"wg_mul_{s}"] = (
            f"fn wg_mul_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  return select(select(x * y, x, {isnan('x', t)}), y, {isnan('y', t)});  // NaN stays NaN\n}}"
        )
    if op in (Op.ADD, Op.SUB):
        # lavapipe folds x - x and x + (-x) to 0, also when x - y became x - x by merging equal
        # subexpressions (exp(a) - exp(a)); IEEE and numpy say NaN for infinite and NaN operands
        name, sym, inf_signs = ("add", "+", "!=") if op is Op.ADD else ("sub", "-", "==")
        out[f"wg_{name}_{s}"] = (
            f"fn wg_{name}_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"{_nan_let(t)}"
            f"  let inf_nan = {isinf('x', t)} & {isinf('y', t)} & ({_negative('x', t)} {inf_signs} {_negative('y', t)});\n"
            f"  return select(x {sym} y, nan, {isnan('x', t)} | {isnan('y', t)} | inf_nan);\n}}"
        )
    if op in (Op.DIV, Op.FLOORDIV, Op.MOD):
        # NVIDIA folds x / x to 1 (WGSL lets a compiler assume finite values), so 0 / 0, inf / inf
        # and NaN / NaN gave 1: those cases are found on the bits and give NaN, as numpy. And it
        # divides as x * (1 / y), where 1 / y flushes to 0 for |y| > 2**126 (3e38 / 3e38 gave 0):
        # such a divisor is scaled down first, with the dividend (the quotient is the same)
        out[f"wg_div_{s}"] = (
            f"fn wg_div_{s}(x: {t}, y: {t}) -> {t} {{\n{_nan_let(t)}"
            f"  let undefined = {isnan('x', t)} | {isnan('y', t)} | ({_is_zero('x', t)} & {_is_zero('y', t)})"
            f" | ({isinf('x', t)} & {isinf('y', t)});\n"
            f"  let scale = select({t}(1.0), {t}(0.25), abs(y) > {t}(8.5070592e37));\n"
            f"  return select((x * scale) / (y * scale), nan, undefined);\n}}"
        )
    if op in (Op.FLOORDIV, Op.MOD):
        # C's fmod from a quotient that may be one off: GPU division is not correctly rounded
        # (NVIDIA's 2x / x gave 1.9999999, so 2x % x was x), so the remainder is moved back
        # into [0, |y|) once in either direction; it takes the sign of x, as C's
        out[f"wg_cfmod_{s}"] = (
            f"fn wg_cfmod_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let ax = abs(x);\n  let ay = abs(y);\n"
            f"  var r = fma(-ay, trunc(wg_div_{s}(ax, ay)), ax);  // fma: one rounding\n"
            f"  r = select(r, r - ay, r >= ay);\n  r = select(r, r + ay, r < {t}(0.0));\n"
            f"  r = select(r, ax, {isinf('y', t)} & !{isinf('x', t)});  // x mod +-inf is x (not inf * 0)\n"
            f"  return select(r, -r, {_negative('x', t)});\n}}"
        )
    if op is Op.FLOORDIV:
        # numpy's algorithm (npy_divmod), not floor(x / y): the quotient comes from the
        # remainder, so -1e-30 // 1e30 is -1 (the rounded quotient -0.0 would give 0), an
        # infinite x gives NaN, a finite x // +-inf gives 0 or -1, and x // 0 is x / 0
        z, one = f"{t}(0.0)", f"{t}(1.0)"
        u = t.replace(_scalar_of(t), "u32")
        out[f"wg_ffloordiv_{s}"] = (
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
    if op is Op.MOD:
        u = t.replace(_scalar_of(t), "u32")
        out[f"wg_fmod_{s}"] = (
            f"fn wg_fmod_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  let r = wg_cfmod_{s}(x, y);\n"
            f"  // numpy: a nonzero remainder takes the sign of y (x mod +-inf is x, or +-inf); a zero one is +-0 as y\n"
            f"  let signed = select(r, r + y, (r != {t}(0.0)) & ((r < {t}(0.0)) != (y < {t}(0.0))));\n"
            f"  let zero = bitcast<{t}>(bitcast<{u}>(y) & {u}(0x80000000u));\n{_nan_let(t)}"
            f"  // NaN for x % 0, inf % y and NaN operands, on the bits: NVIDIA folds x % x to 0\n"
            f"  return select(select(signed, zero, r == {t}(0.0)), nan, {isnan('x', t)} | {isnan('y', t)} | {isinf('x', t)} | {_is_zero('y', t)});\n}}"
        )
    if op is Op.POW:
        out[f"wg_pow_{s}"] = (
            f"fn wg_pow_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  var inf_bits = 0x7f800000u;  // a var: an infinite constant is a WGSL compile error\n"
            f"  let inf = {t}({_scalar_of(t)}(bitcast<f32>(inf_bits)));\n"
            f"  // |x| == 0 explicitly: lavapipe's pow(0, -0.5) gives 0, numpy inf\n"
            f"  let m = select(pow(abs(x), y), select({t}(0.0), inf, y < {t}(0.0)), x == {t}(0.0));\n"
            f"  let is_int = floor(y) == y;\n"
            f"  let odd = is_int & (abs(y - {t}(2.0) * floor(y * {t}(0.5))) == {t}(1.0));\n"
            f"  let neg = select(m, -m, odd);\n"
            f"{_nan_let(t)}"
            f"  // a negative base needs an integer exponent, except -inf (C's pow: (-inf) ** -0.5 is 0)\n"
            f"  let neg_base = select(select(nan, m, {isinf('x', t)}), neg, is_int);\n"
            f"  let r = select(select(m, neg_base, x < {t}(0.0)), nan, {isnan('x', t)} | {isnan('y', t)});\n"
            f"  // as numpy: x ** 0, 1 ** y and (-1) ** +-inf are 1, even for NaN (pow(0, 0) is undefined in WGSL)\n"
            f"  let one = (y == {t}(0.0)) | (x == {t}(1.0)) | ((x == {t}(-1.0)) & {isinf('y', t)});\n"
            f"  return select(r, {t}(1.0), one);\n}}"
        )
    if op in (Op.MAXIMUM, Op.MINIMUM):
        fn = "max" if op is Op.MAXIMUM else "min"
        out[f"wg_{fn}_{s}"] = (
            f"fn wg_{fn}_{s}(x: {t}, y: {t}) -> {t} {{\n"
            f"  // numpy propagates NaN; WGSL's {fn} may not\n"
            f"  let xn: {b} = {isnan('x', t)};\n  let yn: {b} = {isnan('y', t)};\n"
            f"  return select(select({fn}(x, y), y, yn), x, xn);\n}}"
        )
    return out
