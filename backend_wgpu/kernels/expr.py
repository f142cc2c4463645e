"""Op -> WGSL expression for elementwise math, read from the op table (ir/optable).

`expression` and `helpers` pick an op's WGSL for the dtype family of its operands; the
expressions themselves, their helper functions and the reasons for their workarounds live
in each op's record. The bit tests and float16 rounding other kernels use are re-exported.
"""

from __future__ import annotations

from ir.dtypes import DType
from ir.ops import ELEMENTWISE, Op
from ir.optable.record import Wgsl
from ir.optable.wgsl import f16_round_helper, f16_rounded, isinf, isnan

__all__ = ["F32_FOR_F16", "expression", "f16_round_helper", "f16_rounded", "helpers", "isinf", "isnan"]

# float16 transcendental math is evaluated in f32 and rounded once at the end: lavapipe's f16
# exp is off by ~9 ulp, and in f16 1 + erf(x) cancels to 0, so gelu(x < -3) would be 0.
# Division and sqrt too: NVIDIA's f16 x / y and sqrt are not correctly rounded (x / x gave
# 0.9995, so x // y and x % y picked the wrong quotient); in f32 then rounded they are numpy's
F32_FOR_F16 = frozenset(op for op in ELEMENTWISE if op.opdef.f32_for_f16)


def _widened(op: Op, t: str, dtype: DType) -> str | None:
    """The f32 type to compute `op` in when its data is f16 (None: compute in `t`)."""
    return t.replace("f16", "f32") if dtype is DType.float16 and op.opdef.f32_for_f16 else None


def _wgsl(op: Op, dtype: DType) -> Wgsl:
    code = op.opdef.wgsl(dtype.family)
    if code is None:
        raise NotImplementedError(f"no WGSL expression for {op.value} on {dtype.value}")
    return code


def expression(op: Op, args: list[str], t: str, dtype: DType) -> str:
    """The WGSL expression of `op` on `args`, computed in type `t` of element dtype `dtype`."""
    wide = _widened(op, t, dtype)
    if wide is not None:
        wide_args = [f"{wide}({a})" for a in args]
        return f"{t}({f16_rounded(_wgsl(op, DType.float32).expression(wide_args, wide), wide)})"
    return _wgsl(op, dtype).expression(args, t)


def helpers(op: Op, t: str, dtype: DType) -> dict[str, str]:
    """Helper functions the expression of `op` calls, keyed by name."""
    wide = _widened(op, t, dtype)
    if wide is not None:
        return helpers(op, wide, DType.float32) | f16_round_helper(wide)
    code = op.opdef.wgsl(dtype.family)
    return code.functions(t) if code is not None else {}
