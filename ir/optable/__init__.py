"""The op table: one record (`OpDef`) per op, holding everything the compiler knows about it.

A record says what the op is (kind, arity), which dtypes it takes and gives, how numpy
computes it (the reference ir.interpret evaluates) and, for elementwise ops, its WGSL for
each dtype family with the helper functions that WGSL calls, each written beside the op it
serves, with the reasons for its workarounds. Everything else is derived from the records:
the category sets of ir/ops.py (UNARY, ELEMENTWISE, FLOAT_ONLY...), the interpreter, the
expressions of backend_wgpu/kernels/expr.py, and the plain unary methods of tracer.Tensor.

  record.py      OpDef, its dtype rules (Dtypes) and WGSL forms (Wgsl)
  wgsl.py        WGSL building blocks shared by records: NaN/inf tests on the bits, f16 rounding
  unary.py       elementwise, one operand: math, activations, rounding, cast, copy
  binary.py      elementwise arithmetic: + - * / // % ** maximum minimum
  logic.py       comparisons, and/or/not, where
  accumulate.py  reductions, softmax, norms, matmul, conv1d
  data.py        inputs, arange, movement, views, concat, gather, index_write, fused
  transformer.py rope, attention, and flash-decoding's key ranges and their combine
  sorting.py     stable argsort along the last axis (its keys: NaN last, -0 == +0) and its merge steps
  sampling.py    one id per row of logits: temperature, top-k, top-p, a counter-based generator

This package imports no wgpu and nothing else of ir but dtypes, errors and view: its WGSL is
plain text. The records are keyed by name, the value of their ir.ops.Op member.
"""

from __future__ import annotations

from types import ModuleType

from ir.optable import accumulate, binary, data, logic, sampling, sorting, transformer, unary
from ir.optable.record import Dtypes, Kind, OpDef, Wgsl


def _records(*modules: ModuleType) -> dict[str, OpDef]:
    """Every OpDef defined at the top level of these modules, by name, in definition order."""
    table: dict[str, OpDef] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, OpDef):
                if value.name in table and table[value.name] is not value:
                    raise ValueError(f"op table: two records named {value.name!r}")
                table[value.name] = value
    return table


OPDEFS: dict[str, OpDef] = _records(data, unary, binary, logic, accumulate, sorting, transformer, sampling)

__all__ = ["OPDEFS", "Dtypes", "Kind", "OpDef", "Wgsl"]
