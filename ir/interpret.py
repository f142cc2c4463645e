"""The numpy reference interpreter: evaluates any graph, before or after any pass.

It is the oracle of the tests, so it is written for clarity, computes floats in float32
(float16 ops in float32, rounded at the end, as the GPU kernels do), and shares no code
with the kernels it checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import AttentionArg, Conv1dArg, NormArg, Op, RopeArg, SplitsArg
from ir.view import View

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)  # asarray: 0-d gives a python float


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


UNARY_REF: dict[Op, Callable[[np.ndarray], np.ndarray]] = {
    Op.NEG: np.negative,
    Op.ABS: np.abs,
    Op.EXP: np.exp,
    Op.LOG: np.log,
    Op.SQRT: np.sqrt,
    Op.RSQRT: lambda a: 1.0 / np.sqrt(a),
    Op.RECIPROCAL: lambda a: 1.0 / a,
    Op.SQUARE: np.square,
    Op.SIN: np.sin,
    Op.COS: np.cos,
    Op.TANH: np.tanh,
    Op.SIGMOID: _sigmoid,
    Op.RELU: lambda a: np.maximum(a, 0).astype(a.dtype),
    Op.GELU: lambda a: (0.5 * a * (1.0 + erf(a / math.sqrt(2.0)))).astype(a.dtype),
    Op.GELU_TANH: lambda a: (
        0.5 * a * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (a + np.float32(0.044715) * a**3)))
    ),
    Op.SILU: lambda a: a * _sigmoid(a),
    Op.FLOOR: np.floor,
    Op.CEIL: np.ceil,
    Op.NOT: np.logical_not,
    Op.COPY: lambda a: a.copy(),
    Op.ERF: erf,
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


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":  # computed in float32 and rounded: exact while |result| < 2**24
        return np.round(np.power(a.astype(np.float32), b.astype(np.float32))).astype(a.dtype)
    # never a 0-d exponent: numpy computes x ** 0.5 as sqrt(x) then, and (-inf) ** 0.5 is NaN, not inf
    return np.power(*np.broadcast_arrays(a, b))


BINARY_REF: dict[Op, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Op.ADD: np.add,
    Op.SUB: np.subtract,
    Op.MUL: np.multiply,
    Op.DIV: np.true_divide,
    Op.FLOORDIV: _int_safe(np.floor_divide),
    Op.MOD: _int_safe(np.mod),
    Op.POW: _pow,
    Op.MAXIMUM: np.maximum,
    Op.MINIMUM: np.minimum,
    Op.LT: np.less,
    Op.LE: np.less_equal,
    Op.GT: np.greater,
    Op.GE: np.greater_equal,
    Op.EQ: np.equal,
    Op.NE: np.not_equal,
    Op.AND: np.logical_and,
    Op.OR: np.logical_or,
}


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


def view_of(base: np.ndarray, view: View) -> np.ndarray:
    flat = np.ascontiguousarray(base).reshape(-1)
    if view.size == 0:
        return np.zeros(view.shape, dtype=flat.dtype)
    lo, _ = view.span()
    start = flat[lo:]
    item = flat.itemsize
    out = np.lib.stride_tricks.as_strided(
        start[view.offset - lo :], shape=view.shape, strides=tuple(s * item for s in view.strides)
    )
    return out.copy()


def _compute_dtype(dtype: DType) -> np.dtype:
    return np.dtype(np.float32) if dtype is DType.float16 else dtype.np


def eval_node(node: Node, args: list[np.ndarray]) -> np.ndarray:
    op, arg = node.op, node.arg
    out_np = node.dtype.np

    def up(a: np.ndarray) -> np.ndarray:  # float16 math happens in float32
        return a.astype(np.float32) if a.dtype == np.float16 else a

    with np.errstate(all="ignore"):
        if op is Op.CAST:
            result = cast(args[0], node.dtype)
        elif op in UNARY_REF:
            result = UNARY_REF[op](up(args[0]))
        elif op in BINARY_REF:
            result = BINARY_REF[op](up(args[0]), up(args[1]))
        elif op is Op.WHERE:
            result = np.where(args[0], up(args[1]), up(args[2]))
        elif op in (Op.SUM, Op.MAX, Op.MIN):
            axes = tuple(range(-arg, 0)) if arg else ()
            fn = {Op.SUM: np.sum, Op.MAX: np.max, Op.MIN: np.min}[op]
            a = up(args[0])
            result = fn(a, axis=axes, dtype=_compute_dtype(node.dtype)) if op is Op.SUM else fn(a, axis=axes)
        elif op in (Op.ARGMAX, Op.ARGMIN):
            a = args[0]
            flat = a.reshape(a.shape[: a.ndim - arg] + (-1,))
            result = (np.argmax if op is Op.ARGMAX else np.argmin)(flat, axis=-1)
        elif op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
            a = up(args[0])
            m = np.max(a, axis=-1, keepdims=True, initial=-np.inf)  # initial: rows may be empty
            e = np.exp(a - m)
            s = np.sum(e, axis=-1, keepdims=True)
            result = e / s if op is Op.SOFTMAX else (a - m) - np.log(s)
        elif op is Op.MATMUL:
            result = np.matmul(up(args[0]), up(args[1]))
        elif op is Op.CONCAT:
            result = np.concatenate(args, axis=arg)
        elif op in (Op.LAYER_NORM, Op.RMS_NORM):
            result = _norm(op, arg, [up(a) for a in args])
        elif op is Op.GATHER:
            # the GPU clamps out-of-range ids (documented in tracer/nn.py); so does the oracle
            ids = np.clip(args[1].astype(np.int64), 0, args[0].shape[arg] - 1)
            result = np.take_along_axis(args[0], ids, axis=arg)
        elif op is Op.CONV1D:
            result = _conv1d(up(args[0]), up(args[1]), arg)
        elif op is Op.ATTENTION:
            result = attention(args, arg)
        elif op is Op.ROPE:
            result = rope(args, arg)
        elif op is Op.ATTENTION_SPLITS:
            result = attention_splits(args, arg)
        elif op is Op.ATTENTION_COMBINE:
            result = attention_combine(args[0])
        elif op is Op.INDEX_WRITE:
            result = args[0].copy()
            result[tuple(slice(o, o + n) for o, n in zip(arg, args[1].shape))] = args[1]
        elif op is Op.ARANGE:
            start, step = arg
            result = (start + step * np.arange(node.size, dtype=np.float64)).astype(out_np)
        elif op is Op.RESHAPE:
            result = args[0].reshape(arg)
        elif op is Op.PERMUTE:
            result = np.transpose(args[0], arg)
        elif op is Op.EXPAND:
            result = np.broadcast_to(args[0], arg)
        elif op is Op.SLICE:
            # index lists from range(): a normalized stop of -1 means "before index 0", which a
            # python slice would read as "the last element"
            result = args[0][np.ix_(*(np.arange(a, b, c) for a, b, c in arg))] if arg else args[0]
        elif op is Op.VIEW:
            result = view_of(args[0], arg)
        elif op is Op.FUSED:  # a fused group: evaluate the nodes it holds, one by one
            values = dict(zip(arg.leaves, args))
            for term in arg.terms:
                values[term.id] = eval_node(term, [values[s] for s in term.srcs])
            result = values[arg.root.id]
        else:
            raise NotImplementedError(f"reference interpreter: no rule for {op}")
    return np.array(np.asarray(result).astype(out_np).reshape(node.shape), order="C")


def _norm(op: Op, arg: NormArg, args: list[np.ndarray]) -> np.ndarray:
    """Layer norm (x - mean) / sqrt(var + eps) or RMS norm x / sqrt(mean(x^2) + eps), then affine."""
    x = args[0].astype(np.float32)
    if op is Op.LAYER_NORM:
        centered = x - x.mean(axis=-1, keepdims=True)
        y = centered / np.sqrt(np.mean(centered * centered, axis=-1, keepdims=True) + np.float32(arg.eps))
    else:
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(arg.eps))
    rest = iter(args[1:])
    if arg.weight:
        y = y * next(rest)
    if arg.bias:
        y = y + next(rest)
    return y


def _conv1d(x: np.ndarray, w: np.ndarray, arg: Conv1dArg) -> np.ndarray:
    """out[n, co, l] = sum over ci, k of x[n, g*cin_g + ci, l*stride - pad + k*dil] * w[co, ci, k]."""
    n, cin, length = x.shape
    cout, cin_g, k = w.shape
    g = arg.groups
    xp = np.pad(x, ((0, 0), (0, 0), (arg.padding, arg.padding)))
    lout = (length + 2 * arg.padding - arg.dilation * (k - 1) - 1) // arg.stride + 1
    taps = [xp[:, :, j * arg.dilation : j * arg.dilation + arg.stride * (lout - 1) + 1 : arg.stride] for j in range(k)]
    cols = np.stack(taps, axis=-1).reshape(n, g, cin_g, lout, k)  # (N, G, Cin/G, Lout, K)
    wg = w.reshape(g, cout // g, cin_g, k)
    return np.einsum("ngclk,gock->ngol", cols, wg).reshape(n, cout, lout)


def attention(args: list[np.ndarray], arg: AttentionArg) -> np.ndarray:
    """softmax(q k^T * scale + mask) v in float64, over q (B, H, Lq, E), k, v (B, Hkv, S, E|Ev).

    A query that sees no key (all masked, or causal with Lq > S) gives NaN, as the composed
    softmax does; with no keys at all (S == 0) the result is 0, the empty sum.
    """
    q, k, v = (a.astype(np.float64) for a in args[:3])
    k, v = np.repeat(k, arg.group, axis=1), np.repeat(v, arg.group, axis=1)  # kv head h // group
    s = (q @ np.swapaxes(k, -1, -2)) * arg.scale
    lq, n = s.shape[-2:]
    if n == 0:
        return np.zeros(q.shape[:-1] + v.shape[-1:])
    seen = np.ones(s.shape, bool)
    if arg.causal:
        seen &= np.arange(n)[None, :] <= np.arange(lq)[:, None] + (n - lq)
    if arg.mask == "bool":
        seen &= args[3].astype(bool)
    elif arg.mask == "add":
        s = s + args[3].astype(np.float64)
    s = np.where(seen, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def rope(args: list[np.ndarray], arg: RopeArg) -> np.ndarray:
    """Each pair (a, b) of x becomes (a cos - b sin, b cos + a sin), in float32 (the result in x's dtype)."""
    x, cos, sin = (a.astype(np.float32) for a in args)
    half = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if arg.interleaved else (x[..., :half], x[..., half:])
    first, second = a * cos - b * sin, b * cos + a * sin
    if arg.interleaved:
        return np.stack([first, second], axis=-1).reshape(x.shape)
    return np.concatenate([first, second], axis=-1)


def attention_splits(args: list[np.ndarray], arg: SplitsArg) -> np.ndarray:
    """Per key range of ceil(S / splits): sum(exp(s - m) v), m = the range's max score, sum(exp(s - m)).

    A range with no key, or whose keys are all masked, gives (0, -inf, 0).
    """
    a = arg.attention
    q, k, v = (x.astype(np.float64) for x in args[:3])
    k, v = np.repeat(k, a.group, axis=1), np.repeat(v, a.group, axis=1)
    s = (q @ np.swapaxes(k, -1, -2)) * a.scale
    lq, n = s.shape[-2:]
    if a.causal:
        s = np.where(np.arange(n)[None, :] <= np.arange(lq)[:, None] + (n - lq), s, -np.inf)
    if a.mask == "bool":
        s = np.where(args[3].astype(bool), s, -np.inf)
    elif a.mask == "add":
        s = s + args[3].astype(np.float64)
    ev = v.shape[-1]
    out = np.zeros(q.shape[:-1] + (arg.splits, ev + 2))
    out[..., ev] = -np.inf
    chunk = -(-n // arg.splits)
    for i in range(arg.splits):
        lo, hi = min(i * chunk, n), min((i + 1) * chunk, n)
        if hi == lo:
            continue
        part = s[..., lo:hi]
        m = part.max(-1, keepdims=True)
        p = np.where(m == -np.inf, 0.0, np.exp(part - np.where(m == -np.inf, 0.0, m)))
        out[..., i, :ev] = p @ v[..., lo:hi, :]
        out[..., i, ev] = m[..., 0]
        out[..., i, ev + 1] = p.sum(-1)
    return out


def attention_combine(parts: np.ndarray) -> np.ndarray:
    """The ranges of ATTENTION_SPLITS rescaled to their common max and added: the attention output.

    A row that saw no key (all masked) is NaN, as ATTENTION's; passes.split_attention never
    splits an attention over no keys (ATTENTION gives 0 there).
    """
    p = parts.astype(np.float64)
    ev = p.shape[-1] - 2
    m = p[..., ev]
    top = m.max(-1, keepdims=True)
    w = np.where(m == -np.inf, 0.0, np.exp(m - top))
    total = (w * p[..., ev + 1]).sum(-1)[..., None]
    acc = (w[..., None] * p[..., :ev]).sum(-2)
    return acc / total


def interpret(graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate `graph` on host arrays given by input index; returns the outputs."""
    values: dict[int, np.ndarray] = {}
    for node in graph:
        if node.op is Op.INPUT:
            values[node.id] = np.asarray(inputs[node.arg.index]).astype(node.dtype.np).reshape(node.shape)
        else:
            values[node.id] = eval_node(node, [values[s] for s in node.srcs])
    return [values[o] for o in graph.outputs]
