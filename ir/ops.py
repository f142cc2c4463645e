"""Op kinds: the Op enum, the category sets derived from the op table, and the args some ops carry.

Everything about an op lives in its record, `op.opdef` (ir/optable); this module names the ops.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ir.optable import OPDEFS, Kind, OpDef


class Op(enum.Enum):
    # leaves
    INPUT = "input"  # a realized buffer entering the graph; arg: InputArg
    ARANGE = "arange"  # arg: (start, step)
    # movement (traced as the user wrote them; lowered to VIEW by passes.fold_views)
    RESHAPE = "reshape"  # arg: new shape
    PERMUTE = "permute"  # arg: axis order
    EXPAND = "expand"  # arg: new shape
    SLICE = "slice"  # arg: tuple of (start, stop, step) per axis
    VIEW = "view"  # arg: View over the source buffer
    COPY = "copy"  # a contiguous copy of its source
    # unary elementwise
    NEG = "neg"
    ABS = "abs"
    SIGN = "sign"
    EXP = "exp"
    EXPM1 = "expm1"
    LOG = "log"
    LOG1P = "log1p"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SQUARE = "square"
    SIN = "sin"
    COS = "cos"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SILU = "silu"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    TRUNC = "trunc"
    NOT = "not"
    ISNAN = "isnan"
    ISINF = "isinf"
    ISFINITE = "isfinite"
    CAST = "cast"
    # binary elementwise
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOORDIV = "floordiv"
    MOD = "mod"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    HYPOT = "hypot"
    LOGADDEXP = "logaddexp"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    # ternary
    WHERE = "where"
    # reductions over the last `arg` axes (the tracer permutes the reduced axes last)
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    # scans along the last axis
    CUMSUM = "cumsum"
    CUMPROD = "cumprod"
    # stable sorting along the last axis (int32 indices); arg: SortArg
    ARGSORT = "argsort"  # srcs: x; each run of arg.run elements (0: the whole row) sorted on its own
    ARGSORT_MERGE = "argsort_merge"  # srcs: x, an argsort of x by runs of arg.run; out: by runs of 2 * arg.run
    # row ops over the last axis
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    # contractions and joins
    MATMUL = "matmul"  # (..., M, K) @ (..., K, N), batch dims already broadcast
    CONCAT = "concat"  # arg: axis
    # transformer inference ops (tracer/nn.py)
    ERF = "erf"  # unary elementwise
    LAYER_NORM = "layer_norm"  # srcs: x[, weight][, bias]; arg: NormArg; over the last axis
    RMS_NORM = "rms_norm"  # srcs: x[, weight]; arg: NormArg; over the last axis
    GATHER = "gather"  # srcs: x, ids (int32, the output's shape); arg: axis; ids clamped to [0, dim)
    CONV1D = "conv1d"  # srcs: x (N, Cin, L), weight (Cout, Cin/groups, K); arg: Conv1dArg
    INDEX_WRITE = "index_write"  # srcs: x, src; arg: per-axis offsets; x with src written at offsets
    # rotary position embedding: srcs x (..., d), cos, sin (x.shape[:-1] + (d/2,)); arg: RopeArg
    ROPE = "rope"
    # srcs: q (B, H, Lq, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev)[, mask (B, H, Lq, S)]; arg: AttentionArg
    ATTENTION = "attention"  # softmax(q k^T * scale + mask) v, out (B, H, Lq, Ev), or (B, Lq, H, Ev): heads_inner
    # flash-decoding (passes.split_attention): the keys cut into `splits` ranges of ceil(S / splits)
    # srcs as ATTENTION; arg: SplitsArg; out float32 (B, H, Lq, splits, Ev + 2): per range the
    # unnormalized output sum(exp(s - m) v), then m (the range's max score) and sum(exp(s - m))
    ATTENTION_SPLITS = "attention_splits"
    ATTENTION_COMBINE = "attention_combine"  # srcs: the splits; out (B, H, Lq, Ev): the ranges rescaled and added
    # one id per row of logits (..., V), drawn on the GPU: srcs logits, seed, step (uint32 scalars); arg: SampleArg
    SAMPLE = "sample"
    # a fused group of the nodes above, from passes.fuse; arg: ir.fusion.FusedArg
    FUSED = "fused"

    @property
    def opdef(self) -> OpDef:
        """Everything known about this op: its record in the op table (ir/optable)."""
        return self._opdef  # set below the class: OPDEFS[self.value], read for every traced op


def _check_table() -> None:
    """Every Op has a record and every record an Op: a new op is one record plus its member above."""
    members = {op.value for op in Op}
    missing, extra = sorted(members - OPDEFS.keys()), sorted(OPDEFS.keys() - members)
    if missing or extra:
        raise ImportError(
            f"ir.ops: Op members without a record in ir/optable: {missing}; records without an Op: {extra}"
        )


_check_table()
for _op in Op:
    _op._opdef = OPDEFS[_op.value]


def _ops(kind: Kind, arity: int | None = None) -> frozenset[Op]:
    return frozenset(op for op in Op if op.opdef.kind is kind and (arity is None or op.opdef.arity == arity))


# the category sets, derived from the records
UNARY = _ops(Kind.ELEMENTWISE, 1)
BINARY = _ops(Kind.ELEMENTWISE, 2)
TERNARY = _ops(Kind.ELEMENTWISE, 3)
ELEMENTWISE = _ops(Kind.ELEMENTWISE)
COMPARISON = frozenset(op for op in ELEMENTWISE if op.opdef.dtypes.result == "bool")  # bool results of any operands
REDUCE = _ops(Kind.REDUCE)
ROW = _ops(Kind.ROW)
SCAN = _ops(Kind.SCAN)
NORM = _ops(Kind.NORM)
MOVEMENT = _ops(Kind.MOVEMENT)
LEAF = _ops(Kind.LEAF)
# ops that do not dispatch a kernel: they name memory another node owns
NO_KERNEL = frozenset(op for op in Op if not op.opdef.kernel)
# ops defined only on floats (the tracer casts ints to float32 first, as numpy does)
FLOAT_ONLY = frozenset(op for op in Op if op.opdef.float_only)


@dataclass(frozen=True)
class InputArg:
    """Which program input a node reads, and whether it may be overwritten in place.

    `donatable` is true when nothing outside the graph can see the buffer after the run:
    no live user handle, no pending tensor outside the graph, not a cached constant.
    """

    index: int
    donatable: bool = False


@dataclass(frozen=True)
class NormArg:
    """A norm's epsilon and which of its optional affine operands follow x in `srcs`."""

    eps: float
    weight: bool = False
    bias: bool = False


@dataclass(frozen=True)
class SortArg:
    """How an ARGSORT or ARGSORT_MERGE node orders a row: ascending (NaN last) or descending (NaN
    first), ties in index order; `run`: the length of the runs sorted on their own (0: the whole row)."""

    descending: bool = False
    run: int = 0


@dataclass(frozen=True)
class Conv1dArg:
    """A 1-D convolution's hyper-parameters, as torch.nn.functional.conv1d takes them."""

    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1


# the largest head dim an ATTENTION node takes: the flash kernel's smallest tile holds a block
# of keys this wide in any adapter's workgroup memory (tracer/nn.py composes wider heads)
ATTENTION_MAX_HEAD_DIM = 512


@dataclass(frozen=True)
class AttentionArg:
    """What an ATTENTION node computes besides its operands: softmax(q k^T * scale + mask) v.

    causal    query i sees keys j <= i + S - Lq only (bottom-right aligned)
    mask      "none", "bool" (a bool operand: True = attend) or "add" (a float operand added
              to the scores); the mask operand follows v in srcs, broadcast to (B, H, Lq, S)
    group     query heads per kv head (grouped-query attention): head h reads kv head h // group
    hide      a bool mask's True hides the key instead (masked_fill's sense)
    fill      a scalar operand is the score of a key the bool mask hides (else -inf)
    scale_by  "mul" or "div": a scalar operand multiplies or divides the scores after `scale`
    length    the keys attended: the first `length` of k and v's S rows (None: all S). A runtime
              integer (ir.symbolic.Sym) when k and v are slices to a bucket (tracer.runtime_ints);
              causal alignment and the softmax then use this length, never S
    heads_inner  the output is stored (B, Lq, H, Ev), the node's shape, rather than (B, H, Lq, Ev): each
              query row holds every head's values, as the output projection reads them
              (passes.attention_layout sets it in place of the copy a transpose would need)
    The scalar operands (a view of one element) follow the mask: scale_by's first, then fill's.
    passes.fuse_attention sets hide, fill and scale_by for attention written by hand.
    """

    scale: float
    causal: bool = False
    mask: str = "none"
    group: int = 1
    hide: bool = False
    fill: bool = False
    scale_by: str = ""
    length: Any = None
    heads_inner: bool = False

    def __post_init__(self) -> None:
        if self.mask not in ("none", "bool", "add"):
            raise ValueError(f"AttentionArg: mask must be 'none', 'bool' or 'add', got {self.mask!r}")
        if self.length is not None and self.mask != "none":
            raise ValueError("AttentionArg: a mask over a runtime key length is not supported")
        if self.scale_by not in ("", "mul", "div") or (self.hide or self.fill) and self.mask != "bool":
            raise ValueError(f"AttentionArg: inconsistent {self}")

    def operand(self, what: str) -> int | None:
        """Where in srcs the 'mask', 'scale' or 'fill' operand is (None: this node has none)."""
        order = [("mask", self.mask != "none"), ("scale", bool(self.scale_by)), ("fill", self.fill)]
        index = 3
        for name, present in order:
            if name == what:
                return index if present else None
            index += present
        raise ValueError(f"AttentionArg.operand: no operand named {what!r}")


@dataclass(frozen=True)
class SplitsArg:
    """An ATTENTION_SPLITS node: the attention it computes a part of, and into how many key ranges."""

    attention: AttentionArg
    splits: int


@dataclass(frozen=True)
class RopeArg:
    """Which elements a ROPE node rotates together: (i, i + d/2) (half, Llama) or (2i, 2i + 1) (interleaved)."""

    interleaved: bool = False


@dataclass(frozen=True)
class SampleArg:
    """How a SAMPLE node draws: temperature (0: the first largest logit), then top-k (0: all), then top-p (1: all)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
