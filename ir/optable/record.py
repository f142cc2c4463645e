"""The record every op has (`OpDef`), its dtype rules (`Dtypes`) and WGSL forms (`Wgsl`)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ir.dtypes import DType
from ir.errors import DTypeError

if TYPE_CHECKING:
    from ir.node import Node


class Kind(enum.Enum):
    """What an op does to its operands; the category sets of ir/ops.py are derived from it."""

    LEAF = "leaf"  # enters the graph: a realized buffer or a generated range
    MOVEMENT = "movement"  # traced as the user wrote it, lowered to VIEW by passes.fold_views
    VIEW = "view"  # a strided view of a buffer another node owns
    ELEMENTWISE = "elementwise"  # one output element from the same element of each operand
    REDUCE = "reduce"  # over the last `arg` axes (the tracer permutes the reduced axes last)
    ROW = "row"  # over the last axis, shape kept
    NORM = "norm"  # a normalization over the last axis, with its optional affine operands
    SCAN = "scan"  # a running combination along the last axis, shape kept (cumsum)
    OTHER = "other"  # an op with a kernel of its own: matmul, concat, gather, conv1d, index_write
    FUSED = "fused"  # a group of the above, made by passes.fuse


FAMILIES = ("float", "int", "bool")  # DType.family


@dataclass(frozen=True)
class Dtypes:
    """An op's dtype rule: which operands it computes on and the dtype of its result.

    `families` are the dtype families ("float", "int", "bool") it computes on as they come.
    An operand of another family is cast to float32 first when `float_only` (as numpy:
    np.exp of an int32 array is a float array), and refused with a DTypeError otherwise.
    `result` is "same" (the dtype it computes in), "bool" (comparisons), "int32" (argmax) or
    "given" (the op's caller decides: cast, arange).
    """

    families: frozenset[str]
    float_only: bool = False
    result: str = "same"
    hint: str = "cast with astype() first"

    def compute_dtype(self, op: str, dtype: DType, operands: str | Callable[[], str]) -> DType:
        """The dtype `op` computes in when its operands promote to `dtype` (`operands` says what
        they are, for the error: a function making the text is called only then)."""
        if dtype.family in self.families:
            return dtype
        if self.float_only:
            return DType.float32
        takes = " or ".join(f for f in FAMILIES if f in self.families)
        said = operands() if callable(operands) else operands
        raise DTypeError(f"{op}: takes {takes} tensors, got {said}; {self.hint}")

    def result_dtype(self, dtype: DType) -> DType:
        """The result's dtype when the op computes in `dtype` ("given" results are the caller's)."""
        result = self.result
        return DType.bool if result == "bool" else DType.int32 if result == "int32" else dtype


ANY = Dtypes(frozenset(FAMILIES))
NUMERIC = Dtypes(frozenset({"float", "int"}))
FLOAT = Dtypes(frozenset({"float"}), float_only=True)  # ints and bools become float32 first
COMPARE = Dtypes(frozenset(FAMILIES), result="bool")
LOGICAL = Dtypes(frozenset({"bool"}), hint="compare first (x != 0) or cast with astype(tr.bool)")


# WGSL code over operands {0}, {1}, {2} in arithmetic type {t} ({s} is t spelled for a function
# name: vec4_f16), or a function (operands, t) -> code
Code = str | Callable[[list[str], str], str]


@dataclass(frozen=True)
class Wgsl:
    """An op's WGSL expression for one dtype family, and the helper functions it calls.

    WGSL has no generics, so `helpers(t)` generates them for the arithmetic type t (f32,
    vec4<f16>, vec2<i32>...), keyed by function name (which carries t, so one kernel may hold
    a helper for several types).
    """

    code: Code
    helpers: Callable[[str], dict[str, str]] | None = None

    def expression(self, args: list[str], t: str) -> str:
        if callable(self.code):
            return self.code(args, t)
        return self.code.format(*args, t=t, s=suffix(t))

    def functions(self, t: str) -> dict[str, str]:
        return self.helpers(t) if self.helpers is not None else {}


def suffix(t: str) -> str:
    """WGSL type t spelled for a function name: vec4<f16> -> vec4_f16."""
    return t.replace("<", "_").replace(">", "")


@dataclass(frozen=True)
class OpDef:
    """Everything about one op, in one place (see ir/optable/__init__.py for the layout).

    name          the op's value in ir.ops.Op (Op(name))
    kind, arity   what it does; its number of operands (None: it varies)
    dtypes        which operand dtypes it takes and the result's (`Dtypes`)
    doc           one line saying what it computes (the docstring of a generated method)
    numpy         elementwise ops: the reference, numpy on the operands (float16 ones computed
                  in float32, rounded once at the end, as the kernels do)
    evaluate      other ops: the reference, from the node and its operands' values
    f32_for_f16   float16 data is computed in float32 and rounded once (`f16_rounded`)
    wgsl_float, wgsl_int, wgsl_bool
                  the WGSL for each dtype family the op computes on (plain `Code` is a `Wgsl`
                  without helpers)
    method        a plain unary op: tracer/tensor.py makes x.<name>() and tracer tr.<name>(x)
    api           how a user writes it, over tensors x, y, z (default "x.<name>()" for a method);
                  tests/test_op_table.py checks that it makes this op
    kernel        whether the op dispatches a kernel (views and inputs name memory)
    """

    name: str
    kind: Kind
    arity: int | None
    dtypes: Dtypes
    doc: str
    numpy: Callable[..., np.ndarray] | None = None
    evaluate: Callable[[Node, list[np.ndarray]], np.ndarray] | None = None
    f32_for_f16: bool = False
    wgsl_float: Wgsl | Code | None = None
    wgsl_int: Wgsl | Code | None = None
    wgsl_bool: Wgsl | Code | None = None
    method: bool = False
    api: str | None = None
    kernel: bool = True

    @property
    def float_only(self) -> bool:
        return self.dtypes.float_only

    @property
    def public(self) -> str | None:
        """How a user writes the op (see `api`)."""
        return self.api if self.api is not None or not self.method else f"x.{self.name}()"

    def wgsl(self, family: str) -> Wgsl | None:
        """The WGSL of this op on operands of dtype family `family` (None: it has none)."""
        code = {"float": self.wgsl_float, "int": self.wgsl_int, "bool": self.wgsl_bool}[family]
        return code if code is None or isinstance(code, Wgsl) else Wgsl(code)

    def reference(self, node: Node, args: list[np.ndarray]) -> Any:
        """The numpy value of `node` from its operands' values (ir.interpret casts it to the node's dtype)."""
        if self.evaluate is not None:
            return self.evaluate(node, args)
        if self.numpy is None:
            raise NotImplementedError(f"reference interpreter: no rule for {self.name}")
        return self.numpy(*[upcast(a) for a in args])


def upcast(a: np.ndarray) -> np.ndarray:
    """float16 math happens in float32 (the kernels do the same, rounding once at the end)."""
    return a.astype(np.float32) if a.dtype == np.float16 else a


def unary(name: str, dtypes: Dtypes, doc: str, numpy: Callable[..., np.ndarray], **fields: Any) -> OpDef:
    """An elementwise op of one operand."""
    return OpDef(name, Kind.ELEMENTWISE, 1, dtypes, doc, numpy=numpy, **fields)


def binary(name: str, dtypes: Dtypes, doc: str, numpy: Callable[..., np.ndarray], **fields: Any) -> OpDef:
    """An elementwise op of two operands of the same dtype and shape (the tracer promotes and broadcasts)."""
    return OpDef(name, Kind.ELEMENTWISE, 2, dtypes, doc, numpy=numpy, **fields)
