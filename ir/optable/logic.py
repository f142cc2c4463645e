"""Elementwise comparisons, logic on bools, and where."""

from __future__ import annotations

import numpy as np

from ir.optable.record import ANY, COMPARE, LOGICAL, Kind, OpDef, binary, unary
from ir.optable.wgsl import float_compare, plain_compare, via_u32


def _compare(name: str, symbol: str, numpy: np.ufunc, reflexive: bool) -> OpDef:
    """`x symbol y` to bool. WGSL orders no bools: <, <=, >, >= compare them as 0u/1u.

    `reflexive`: x symbol x is true for numbers, so a compiler that assumes no NaN folds it
    (see float_compare); those float forms test the NaN bits.
    """
    plain = plain_compare(symbol)
    ordering = symbol not in ("==", "!=")
    return binary(
        name,
        COMPARE,
        f"x {symbol} y, elementwise, as a bool tensor",
        numpy,
        api=f"x {symbol} y",
        wgsl_float=float_compare(symbol) if reflexive else plain,
        wgsl_int=plain,
        wgsl_bool=via_u32(plain) if ordering else plain,
    )


LT = _compare("lt", "<", np.less, reflexive=False)
LE = _compare("le", "<=", np.less_equal, reflexive=True)
GT = _compare("gt", ">", np.greater, reflexive=False)
GE = _compare("ge", ">=", np.greater_equal, reflexive=True)
EQ = _compare("eq", "==", np.equal, reflexive=True)
NE = _compare("ne", "!=", np.not_equal, reflexive=True)

AND = binary("and", LOGICAL, "x and y, elementwise", np.logical_and, api="x & y", wgsl_bool="({0} & {1})")
OR = binary("or", LOGICAL, "x or y, elementwise", np.logical_or, api="x | y", wgsl_bool="({0} | {1})")
NOT = unary("not", LOGICAL, "not x, elementwise", np.logical_not, api="~x", wgsl_bool="(!{0})")

# srcs: the bool condition, then the two values (computed in the values' dtype)
WHERE = OpDef(
    "where",
    Kind.ELEMENTWISE,
    3,
    ANY,
    "y where x is true, z elsewhere",
    numpy=np.where,
    api="tr.where(x > 0, y, z)",
    wgsl_float="select({2}, {1}, {0})",
    wgsl_int="select({2}, {1}, {0})",
    wgsl_bool="select({2}, {1}, {0})",
)
