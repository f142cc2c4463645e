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
from ir.ops import Conv1dArg, NormArg, Op
from ir.quant import dequantize
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


def interpret(graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate `graph` on host arrays given by input index; returns the outputs.

    A quantized input (ir/quant.py) is given as its GPU layout (u32 words) and evaluated as
    its float32 values; the ops that read it (matmul, gather, cast) then need no rule of their own.
    """
    values: dict[int, np.ndarray] = {}
    for node in graph:
        if node.op is Op.INPUT and node.dtype.is_quantized:  # its blocks (u32 words), as float32 values
            values[node.id] = dequantize(np.asarray(inputs[node.arg.index]), node.dtype, node.shape)
        elif node.op is Op.INPUT:
            values[node.id] = np.asarray(inputs[node.arg.index]).astype(node.dtype.np).reshape(node.shape)
        else:
            values[node.id] = eval_node(node, [values[s] for s in node.srcs])
    return [values[o] for o in graph.outputs]
