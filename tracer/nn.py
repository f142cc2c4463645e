"""Neural-network ops for transformer inference, exposed as `tr.nn` (and a few as `tr.*`).

Which ops have their own kernel and which are composed from other ops (lossless: the
same arithmetic the kernel would do, in the same precision):

  kernel    layer_norm, rms_norm (kernels/norm/norm.py), gather/index_select/embedding
            (kernels/movement/gather.py), conv1d (kernels/conv/conv1d.py), index_write
            (kernels/movement/index_write.py), rope (Op.ROPE, kernels/rope/rope.py), erf (an
            elementwise op), scaled_dot_product_attention (Op.ATTENTION, kernels/attention/flash.py
            or, for one query row over a long cache, kernels/attention/decode.py: one dispatch;
            grouped-query attention reads kv head h // group, masks through stride-0 views, never copies)
  composed  group_norm = layer_norm over (N, groups, -1) + elementwise affine;
            attention with head dims past 512 = matmul + scale + mask + softmax + matmul;
            clamp = maximum + minimum; masked_fill = where; linear = matmul + add.

Ids (index_select, embedding, gather) are int32 (uint32 is accepted). Valid ids are
0 <= id < dim. When the ids are host data known at trace time (a list, a numpy array,
or a tensor made from one and not yet uploaded), an id outside that range raises
IndexOutOfRangeError at the call; ids computed on the GPU cannot be checked without a
read-back, so there an id outside the range is clamped to [0, dim - 1] (never an
out-of-bounds read, never an error).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from backend_wgpu.kernels.attention.flash import max_fused_keys
from ir import shapes
from ir.dtypes import DType, promote
from ir.errors import DTypeError, IndexOutOfRangeError, ShapeError
from ir.ops import AttentionArg, Conv1dArg, NormArg, Op, RopeArg
from ir.symbolic import Sym
from tracer.factories import arange
from tracer.lazy import Lazy
from tracer.mutation import index_write
from tracer.tensor import (
    RuntimeLengthTensor,
    Tensor,
    as_tensor,
    binary,
    broadcast_to,
    broadcasts_to,
    clamp,
    from_data,
    make,
    masked_fill,
    matmul,
    moved,
    rows_times_transposed,
    where,
)

__all__ = [
    "clamp", "conv1d", "embedding", "gather", "group_norm", "index_select", "index_write", "layer_norm",
    "linear", "masked_fill", "pow", "rms_norm", "rope", "scaled_dot_product_attention",
]  # fmt: skip


# looked up once: an Enum member read from its class costs ~70 ns (linear and attention trace these per call)
_RESHAPE, _PERMUTE, _EXPAND = Op.RESHAPE, Op.PERMUTE, Op.EXPAND


def _float(x: Tensor) -> Tensor:
    """Norms and convolutions compute on floats: ints become float32, as numpy's mean does."""
    return x if x.dtype.is_float else x.astype(DType.float32, copy=False)


# --- norms ---------------------------------------------------------------------------


def _affine(op: str, t: Any, x: Tensor, what: str) -> Tensor:
    t = _float(as_tensor(t, op, what))
    n = x.shape[-1]
    if t.shape != (n,):
        raise ShapeError(f"{op}: {what} has shape {t.shape}, expected ({n},) for x of shape {x.shape}")
    return t


def _norm(op: Op, x: Any, weight: Any, bias: Any, eps: float) -> Tensor:
    name = op.value
    x = _float(as_tensor(x, name))
    if x.ndim == 0:
        raise ShapeError(f"{name}: x must have at least one dimension, got shape {x.shape}")
    if isinstance(eps, bool) or not isinstance(eps, int | float | np.integer | np.floating):
        raise DTypeError(f"{name}: eps must be a python number, got {eps!r} ({type(eps).__name__}); x shape {x.shape}")
    if not eps >= 0:
        raise ValueError(f"{name}: eps must be >= 0, got {eps}")
    srcs = [x]
    if weight is not None:
        srcs.append(_affine(name, weight, x, "weight"))
    if bias is not None:
        srcs.append(_affine(name, bias, x, "bias"))
    return make(op, tuple(srcs), x.shape, x.dtype, NormArg(float(eps), weight is not None, bias is not None))


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (statistics in f32).

    weight and bias are optional vectors of the last axis' length; the result has x's dtype.
    """
    return _norm(Op.LAYER_NORM, x, weight, bias, eps)


def rms_norm(x: Any, weight: Any = None, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (statistics in f32)."""
    return _norm(Op.RMS_NORM, x, weight, None, eps)


def group_norm(x: Any, groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Group norm of x (N, C, *spatial): statistics per (sample, group of C/groups channels).

    Composed: layer_norm over the (N, groups, -1) reshape, then the per-channel affine.
    """
    x = _float(as_tensor(x, "group_norm"))
    if x.ndim < 2:
        raise ShapeError(f"group_norm: x must be (N, C, ...), got shape {x.shape}")
    c = x.shape[1]
    if not isinstance(groups, int) or groups <= 0 or c % groups:
        raise ShapeError(f"group_norm: {c} channels of x shape {x.shape} do not split into {groups} groups")
    y = layer_norm(x.reshape(x.shape[0], groups, -1), eps=eps).reshape(x.shape)
    per_channel = (c,) + (1,) * (x.ndim - 2)
    for t, what, combine in ((weight, "weight", Tensor.__mul__), (bias, "bias", Tensor.__add__)):
        if t is None:
            continue
        t = _float(as_tensor(t, "group_norm", what))
        if t.shape != (c,):
            raise ShapeError(f"group_norm: {what} has shape {t.shape}, expected ({c},) for x of shape {x.shape}")
        y = combine(y, t.reshape(per_channel)).astype(x.dtype, copy=False)
    return y


# --- gathers ------------------------------------------------------------------------


def _ids(op: str, ids: Any, axis: int, x: Tensor) -> Tensor:
    """ids as an int tensor, checked against [0, dim) when their values are known on the host."""
    dim = x.shape[axis]
    if isinstance(ids, Tensor):
        host = ids._lazy.host  # host data not uploaded yet: its values are known now
        t = ids
    else:
        host = np.asarray(ids)
        if host.size == 0:
            host = host.astype(np.int32)
        if host.dtype.kind not in "iu":
            raise DTypeError(f"{op}: ids must be integers, got {host.dtype} for x of shape {x.shape}")
        t = None
    if t is not None and t.dtype not in (DType.int32, DType.uint32):
        raise DTypeError(f"{op}: ids must be int32, got {t.dtype.value} (shape {t.shape}) for x of shape {x.shape}")
    if host is not None and host.size:
        lo, hi = int(host.min()), int(host.max())
        if lo < 0 or hi >= dim:
            bad = lo if lo < 0 else hi
            raise IndexOutOfRangeError(
                f"{op}: id {bad} is out of range for axis {axis} with size {dim} (x shape {x.shape}); valid ids are 0..{dim - 1}"
            )
    if dim == 0 and (t.size if t is not None else host.size):
        raise IndexOutOfRangeError(f"{op}: cannot take ids from axis {axis} of size 0 (x shape {x.shape})")
    return t if t is not None else from_data(host.astype(np.int32))


def index_select(x: Any, ids: Any, axis: int = 0) -> Tensor:
    """x's entries at `ids` along `axis` (np.take): shape x.shape[:axis] + ids.shape + x.shape[axis+1:]."""
    return _select("index_select", x, ids, axis)


def _select(op: str, x: Any, ids: Any, axis: int) -> Tensor:
    x = as_tensor(x, op)
    if x.ndim == 0:
        raise ShapeError(f"{op}: x must have at least one dimension, got shape {x.shape}")
    a = shapes.normalize_axis(op, axis, x.ndim, x.shape)
    ids = _ids(op, ids, a, x)
    flat = ids.reshape(-1)
    k = flat.shape[0]
    out_shape = x.shape[:a] + (k,) + x.shape[a + 1 :]
    # the 1-D ids broadcast over the other axes: a zero-copy view, not a copy per row
    spread = flat.reshape((1,) * a + (k,) + (1,) * (x.ndim - a - 1)).expand(out_shape)
    # rows of a quantized table come out dequantized (tracer/quantized.py)
    out = make(Op.GATHER, (x, spread), out_shape, DType.float32 if x.dtype.is_quantized else x.dtype, a)
    return out.reshape(x.shape[:a] + ids.shape + x.shape[a + 1 :])


def embedding(ids: Any, table: Any) -> Tensor:
    """Rows of `table` (vocab, dim) at `ids` (any shape): shape ids.shape + (dim,)."""
    table = as_tensor(table, "embedding", "table")
    if table.ndim != 2:
        raise ShapeError(f"embedding: table must be (vocab, dim), got shape {table.shape}")
    return _select("embedding", table, ids, 0)


def gather(x: Any, ids: Any, axis: int) -> Tensor:
    """np.take_along_axis: out[c] = x[c with c[axis] = ids[c]]; x and ids broadcast on the other axes."""
    x = as_tensor(x, "gather")
    if x.ndim == 0:
        raise ShapeError(f"gather: x must have at least one dimension, got shape {x.shape} (take_along_axis)")
    if x.dtype.is_quantized:
        raise DTypeError(
            f"gather: x is a {x.dtype.value} tensor of shape {x.shape}; quantized rows are read with "
            "tr.nn.embedding or index_select(x, ids, 0), other gathers after .astype(tr.float32)"
        )
    a = shapes.normalize_axis("gather", axis, x.ndim, x.shape)
    ids = _ids("gather", ids, a, x)
    if ids.ndim != x.ndim:
        raise ShapeError(f"gather: ids shape {ids.shape} must have as many dims as x shape {x.shape}")
    out_shape = []
    for d, (n, m) in enumerate(zip(x.shape, ids.shape)):
        if d == a:
            out_shape.append(m)
        elif n == m or 1 in (n, m):
            out_shape.append(max(n, m) if 0 not in (n, m) else 0)
        else:
            raise ShapeError(f"gather: x shape {x.shape} and ids shape {ids.shape} do not broadcast on axis {d}")
    out = tuple(out_shape)
    x_shape = out[:a] + (x.shape[a],) + out[a + 1 :]
    return make(Op.GATHER, (x.expand(x_shape), ids.expand(out)), out, x.dtype, a)


# --- elementwise compositions --------------------------------------------------------


def pow(x: Any, y: Any) -> Tensor:  # noqa: A001
    """x ** y elementwise, either side a tensor or a scalar (the same as the ** operator)."""
    return binary(Op.POW, x, y)


def linear(x: Any, weight: Any, bias: Any = None) -> Tensor:
    """x @ weight.T + bias, weight (out, in) as torch stores it; leading dims of x are batch."""
    x = as_tensor(x, "linear")
    weight = as_tensor(weight, "linear", "weight")
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: x shape {x.shape} does not fit weight shape {weight.shape} (out, in)")
    lead = x.shape[:-1]
    out, k = weight.shape
    plain = type(x) is Tensor and type(weight) is Tensor
    # one GEMM over every row, not a batch of small ones (rows counted: reshape(-1, 0) is ambiguous);
    # the reshapes and the transpose are this function's own steps, not views (tracer.tensor.moved)
    rows = (math.prod(lead), k)
    product = rows_times_transposed(x, weight, rows) if plain else None
    if product is not None:
        if bias is None:  # the usual case: only the result is a Tensor
            final = lead + (out,)
            return Tensor(
                product if product.shape == final else Lazy(_RESHAPE, (product,), final, product.dtype, final)
            )
        y = Tensor(product)
    elif not plain:
        y = x.reshape(rows) @ weight.T
    else:
        y = matmul(x if x.shape == rows else moved(x, _RESHAPE, rows, rows), moved(weight, _PERMUTE, (k, out), (1, 0)))
    if bias is not None:
        bias = as_tensor(bias, "linear", "bias")
        if bias.shape != (out,):
            raise ShapeError(f"linear: bias shape {bias.shape} does not match {out} outputs")
        y = y + bias
    final = lead + (out,)  # one tuple, the new node's shape and arg: each tuple a trace keeps is walked by the gc
    if not plain:
        return y.reshape(final)
    return y if y.shape == final else moved(y, _RESHAPE, final, final)


# --- rotary embeddings and attention -------------------------------------------------


def rope(x: Any, cos: Any, sin: Any, interleaved: bool = False) -> Tensor:
    """Rotary position embedding of x (..., d) with angles given as cos and sin.

    cos/sin broadcast to x.shape[:-1] + (d/2,), one angle per rotated pair; a last axis of
    d (the duplicated table Hugging Face models build) is accepted too. Half form
    (interleaved=False, GPT-NeoX/Llama): pairs are (x[i], x[i + d/2]). Interleaved
    (GPT-J): pairs are (x[2i], x[2i+1]). Each pair (a, b) becomes
    (a cos - b sin, b cos + a sin), computed in float32 and returned in x's dtype.
    """
    x = as_tensor(x, "rope")
    cos, sin = as_tensor(cos, "rope", "cos"), as_tensor(sin, "rope", "sin")
    xs = x.shape
    if not xs or xs[-1] % 2:
        raise ShapeError(f"rope: the last axis of x must have an even size, got shape {xs}")
    d = xs[-1]
    half = d // 2
    target = xs[:-1] + (half,)
    pairs: list[Tensor] = []
    for t, what in ((cos, "cos"), (sin, "sin")):
        ts = t.shape
        if not ts or ts[-1] not in (half, d):
            raise ShapeError(f"rope: {what} shape {ts} must end in {half} (or {d}) for x shape {xs}")
        if ts[-1] == d:  # the duplicated table: keep one angle per pair
            t = t[..., :half] if not interleaved else t[..., ::2]
            ts = t.shape
        if not broadcasts_to(ts, target):
            raise ShapeError(f"rope: {what} shape {ts} does not broadcast to {target} for x shape {xs}")
        pairs.append(broadcast_to(t, target))  # not a view: read by this rope only
    xf = _float(x)
    arg = _ROPE_HALF if interleaved is False else RopeArg(interleaved)
    out = make(Op.ROPE, (xf, *pairs), xs, xf.dtype, arg)
    return out if out.dtype is x.dtype else out.astype(x.dtype, copy=False)


_ROPE_HALF = RopeArg(False)  # the usual rope's arg, made once (an immutable record)


def _causal_mask(q_len: int, kv_len: int) -> Tensor:
    """True where key j may be seen by query i, aligned bottom-right: j <= i + (kv_len - q_len)."""
    i = arange(q_len).reshape(q_len, 1)
    j = arange(kv_len).reshape(1, kv_len)
    return j <= i + (kv_len - q_len)


# head dims above this are composed (matmul, softmax, matmul): the flash kernel's smallest
# tiles hold a block of keys of this width in any adapter's workgroup memory
FUSED_MAX_HEAD_DIM = 512
# Past max_fused_keys(head dim) keys (about 27,000 at 128, 45,000 at 64), attention of several
# query rows is composed of matmuls and softmax: the flash kernel's threads walk every key block in
# one loop nest, and some adapters (lavapipe) end a shader's loops after 65,535 iterations
# (backend_wgpu.kernel.LOOP_BUDGET). One query row (decoding) takes attention_decode, which splits
# the keys over workgroups.


def scaled_dot_product_attention(
    q: Any, k: Any, v: Any, mask: Any = None, is_causal: bool = False, scale: float | None = None
) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., L, E) queries, (..., S, E) keys and (..., S, Ev) values.

    mask: bool (True = attend) or float (added to the scores), broadcast to (..., H, L, S).
    is_causal: query i sees keys j <= i + S - L (bottom-right aligned, so a single decode
    query sees the whole cache; the same as top-left when L == S). A row that sees no key
    is NaN, as in torch; with no keys at all (S == 0) the result is 0. Grouped-query
    attention: q (..., H, L, E) with k and v (..., Hkv, S, E) where Hkv divides H; query
    head h uses kv head h // (H / Hkv). One dispatch (Op.ATTENTION, the flash kernel:
    scores and probabilities stay in f32 registers, never in memory); head dims above
    FUSED_MAX_HEAD_DIM are composed from matmul, where and softmax instead. A key of
    weight 0 (masked) whose value is inf or NaN may still make the row NaN (0 * inf).
    """
    q, k, v = as_tensor(q, "sdpa", "q"), as_tensor(k, "sdpa", "k"), as_tensor(v, "sdpa", "v")
    length = None
    if type(k) is RuntimeLengthTensor or type(v) is RuntimeLengthTensor:
        k, v, length = _runtime_keys(q, k, v, mask)
    qs, ks, vs = q.shape, k.shape, v.shape  # read once: each check below asks (a decode step traces this per layer)
    if min(len(qs), len(ks), len(vs)) < 2:
        raise ShapeError(f"scaled_dot_product_attention: q {qs}, k {ks}, v {vs} must be at least 2-D")
    if qs[-1] != ks[-1] or ks[-2] != vs[-2]:
        raise ShapeError(
            f"scaled_dot_product_attention: q {qs}, k {ks}, v {vs}: need q and k to share the last "
            "axis and k and v the second-to-last"
        )
    if not (q.dtype.is_float and k.dtype.is_float and v.dtype.is_float):
        for t, what in ((q, "q"), (k, "k"), (v, "v")):
            if not t.dtype.is_float:
                raise DTypeError(f"scaled_dot_product_attention: {what} must be float, got {t.dtype.value}")
    if scale is None and qs[-1] == 0:
        raise ShapeError(
            f"scaled_dot_product_attention: q {qs}, k {ks}: a head dim of 0 has no default scale "
            "(1 / sqrt(0)); pass scale="
        )
    scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
    heads = qs[-3] if len(qs) >= 3 else 1
    grouped = len(qs) >= 3 and len(ks) >= 3 and ks[-3] != heads
    if grouped:
        kv_heads = ks[-3]
        if len(vs) < 3 or vs[-3] != kv_heads or heads % kv_heads:
            raise ShapeError(
                f"scaled_dot_product_attention: {heads} query heads (q {qs}) cannot share {kv_heads} kv heads "
                f"(k {ks}, v {vs})"
            )
    masks = [] if mask is None else [as_tensor(mask, "sdpa", "mask")]
    long_keys = ks[-2] > max_fused_keys(qs[-1]) and qs[-2] > 1
    if max(qs[-1], vs[-1]) > FUSED_MAX_HEAD_DIM or long_keys:
        if length is not None:
            raise ShapeError(
                f"scaled_dot_product_attention: head dims above {FUSED_MAX_HEAD_DIM}, or more than "
                f"{max_fused_keys(qs[-1])} keys for several queries (q {qs}, k {ks}, v {vs}), "
                "take keys of a fixed length, not a runtime one"
            )
        return _composed_attention(q, k, v, masks, is_causal, scale, grouped)
    out = _fused_attention(q, k, v, masks, is_causal, scale, grouped, length)
    out._lazy.dyn = length is not None
    return out


def _runtime_keys(q: Tensor, k: Tensor, v: Tensor, mask: Any) -> tuple[Tensor, Tensor, Sym]:
    """k and v sliced to a runtime length (tracer.runtime_ints): their stored buckets and the length attended."""
    for t, what in ((k, "k"), (v, "v")):
        if type(t) is not RuntimeLengthTensor or t.axis != t.ndim - 2:
            raise ShapeError(
                f"scaled_dot_product_attention: k {k.shape} and v {v.shape} must both have the runtime length on "
                f"their key axis (-2); {what} does not"
            )
    assert isinstance(k, RuntimeLengthTensor) and isinstance(v, RuntimeLengthTensor)
    if k.length != v.length or k._lazy.shape[-2] != v._lazy.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: k {k.shape} and v {v.shape} have different runtime lengths")
    if type(q) is RuntimeLengthTensor:
        raise ShapeError(f"scaled_dot_product_attention: q {q.shape} cannot have a runtime length")
    if mask is not None:
        raise ShapeError(
            "scaled_dot_product_attention: a mask cannot go with keys of a runtime length; use is_causal, or slice "
            "the keys with python ints"
        )
    stored = k._lazy.shape[-2]
    sym = k.length.sym(0, stored, f"scaled_dot_product_attention: key length (stored as {stored})")
    return k.padded, v.padded, sym


def _attention_batch(qs: tuple[int, ...], ks: tuple[int, ...], vs: tuple[int, ...], grouped: bool) -> tuple[int, ...]:
    """The batch dims of the result (the heads last): q's, k's and v's broadcast (heads from q when grouped)."""
    lead = -3 if grouped else -2
    qb, kb, vb = qs[:lead], ks[:lead], vs[:lead]
    try:
        batch = qb if qb == kb == vb else shapes.broadcast_shapes("sdpa", qb, kb, vb)
    except ShapeError:
        raise ShapeError(
            f"scaled_dot_product_attention: the batch dims of q {qs}, k {ks} and v {vs} do not broadcast"
        ) from None
    return batch + (qs[-3],) if grouped else batch


def _fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    masks: list[Tensor],
    causal: bool,
    scale: float,
    grouped: bool,
    length: Sym | None = None,
) -> Tensor:
    """One Op.ATTENTION over 4-D (B, H, L, E) operands: views of the caller's tensors (broadcasts stride 0)."""
    qs, ks, vs = q.shape, k.shape, v.shape
    batch = _attention_batch(qs, ks, vs, grouped)
    q_len, kv_len, ev = qs[-2], ks[-2], vs[-1]
    b, h = math.prod(batch[:-1]), batch[-1] if batch else 1
    dt = q.dtype
    if k.dtype is not dt or v.dtype is not dt or dt.is_quantized:  # promote raises naming a quantized one
        dt = promote(promote(q.dtype, k.dtype, "sdpa"), v.dtype, "sdpa")

    def as4(t: Tensor, heads: int) -> Tensor:  # (..., heads, rows, dim) -> (B, heads, rows, dim)
        lead = batch[:-1] + (heads,) if batch else (heads,)
        rows_dim = t.shape[-2:]
        return _as_shape(t if t.dtype is dt else t.astype(dt, copy=False), lead + rows_dim, (b, heads, *rows_dim))

    kv_heads = ks[-3] if grouped else h
    srcs = [as4(q, h), as4(k, kv_heads), as4(v, kv_heads)]
    kind = "none"
    if masks:
        m = masks[0]
        target = batch + (q_len, kv_len)
        if not broadcasts_to(m.shape, target):
            raise ShapeError(
                f"scaled_dot_product_attention: mask shape {m.shape} does not broadcast to the scores' shape {target}"
            )
        kind = "bool" if m.dtype is DType.bool else "add"
        if kind == "add" and not m.dtype.is_float:
            m = m.astype(dt, copy=False)
        srcs.append(_as_shape(m, target, (b, h, q_len, kv_len)))
    arg = AttentionArg(scale, causal, kind, h // kv_heads, length=length)
    # the result keeps the caller's batch dims: (B, H, L, Ev) in memory either way, and no copy
    return make(Op.ATTENTION, tuple(srcs), batch + (q_len, ev), dt, arg)


def _as_shape(t: Tensor, full: tuple[int, ...], shape: tuple[int, ...]) -> Tensor:
    """t broadcast to `full`, then reshaped to `shape`: attention's own operands, not views (tracer.tensor.moved)."""
    ts = t.shape
    if ts != full:
        ts = shapes.check_expand("expand", ts, full)
        t = moved(t, _EXPAND, ts, ts)
    return t if ts == shape else moved(t, _RESHAPE, shape, shape)


def _composed_attention(
    q: Tensor, k: Tensor, v: Tensor, masks: list[Tensor], causal: bool, scale: float, grouped: bool
) -> Tensor:
    """matmul, scale, mask, softmax, matmul: the scores are written to memory (head dims past the fused kernel's)."""
    q_len, e = q.shape[-2], q.shape[-1]
    kv_len = k.shape[-2]
    heads = q.shape[-3] if q.ndim >= 3 else 1
    if grouped:
        kv_heads = k.shape[-3]
        # q (..., H, L, E) -> (..., Hkv, H/Hkv, L, E); k, v (..., Hkv, 1, S, E) broadcast in the matmul
        q = q.reshape(q.shape[:-3] + (kv_heads, heads // kv_heads, q_len, e))
        k, v = k.unsqueeze(-3), v.unsqueeze(-3)
    scores = (q * scale) @ k.swapaxes(-2, -1)
    if causal:
        masks = [_causal_mask(q_len, kv_len), *masks]
    # the mask is written against (..., H, L, S); grouped scores split H as q did
    target = scores.shape[:-4] + (heads, q_len, kv_len) if grouped else scores.shape
    for m in masks:
        if not broadcasts_to(m.shape, target):
            raise ShapeError(
                f"scaled_dot_product_attention: mask shape {m.shape} does not broadcast to the scores' shape {target}"
            )
        if grouped:
            m = m.broadcast_to(target).reshape(scores.shape)
        scores = (
            where(m, scores, float("-inf")) if m.dtype is DType.bool else scores + m.astype(scores.dtype, copy=False)
        )
    out = scores.softmax(-1) @ v
    if grouped:
        out = out.reshape(out.shape[:-4] + (heads, q_len, v.shape[-1]))
    return out


# --- convolution ----------------------------------------------------------------------


def conv1d(
    x: Any, weight: Any, bias: Any = None, stride: int = 1, padding: int = 0, dilation: int = 1, groups: int = 1
) -> Tensor:
    """1-D cross-correlation as torch.nn.functional.conv1d: x (N, Cin, L) or (Cin, L), weight (Cout, Cin/groups, K)."""
    x = _float(as_tensor(x, "conv1d"))
    weight = _float(as_tensor(weight, "conv1d", "weight"))
    for name, value, low in (
        ("stride", stride, 1),
        ("padding", padding, 0),
        ("dilation", dilation, 1),
        ("groups", groups, 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"conv1d: {name} must be an int >= {low}, got {value!r}")
    unbatched = x.ndim == 2
    if unbatched:
        x = x.unsqueeze(0)
    if x.ndim != 3 or weight.ndim != 3:
        raise ShapeError(
            f"conv1d: x must be (N, Cin, L) and weight (Cout, Cin/groups, K), got {x.shape} and {weight.shape}"
        )
    n, cin, length = x.shape
    cout, cin_g, taps = weight.shape
    if cin % groups or cout % groups or cin // groups != cin_g:
        raise ShapeError(
            f"conv1d: x shape {x.shape} and weight shape {weight.shape} do not fit {groups} groups "
            f"(need Cin/groups == weight.shape[1] and Cout divisible by groups)"
        )
    lout = (length + 2 * padding - dilation * (taps - 1) - 1) // stride + 1
    if lout <= 0:
        raise ShapeError(
            f"conv1d: input length {length} with padding {padding} is shorter than the kernel's reach "
            f"{dilation * (taps - 1) + 1} (x {x.shape}, weight {weight.shape})"
        )
    dt = promote(x.dtype, weight.dtype, "conv1d")
    out = make(
        Op.CONV1D,
        (x.astype(dt, copy=False), weight.astype(dt, copy=False)),
        (n, cout, lout),
        dt,
        Conv1dArg(stride, padding, dilation, groups),
    )
    if bias is not None:
        bias = _float(as_tensor(bias, "conv1d", "bias"))
        if bias.shape != (cout,):
            raise ShapeError(f"conv1d: bias shape {bias.shape} does not match {cout} output channels")
        out = (out + bias.reshape(cout, 1)).astype(dt, copy=False)
    return out.reshape(cout, lout) if unbatched else out
