"""Which ops read a quantized tensor (tr.q8_0, tr.q4_0, tr.q4_k, tr.q6_k; ir/quant.py), checked as each op is traced.

A quantized tensor holds a weight matrix's blocks; the kernels that read it dequantize in
registers (backend_wgpu/kernels/quant/). It comes from the host (tr.load_gguf, tr.quantize),
so it is always a leaf, and three ops read it:
  matmul  x @ w.T, w's transpose on the right (tr.nn.linear: w is (out, in), as GGUF and torch store it)
  gather  its rows along axis 0 (tr.nn.embedding, tr.nn.index_select(w, ids, 0))
  cast    to float32 or float16 (.astype)
Its transpose `w.T` is a view for the matmul. Any other op raises DTypeError naming the op.
"""

from __future__ import annotations

from typing import Any

from ir.dtypes import DType
from ir.errors import DTypeError
from ir.ops import Op
from tracer.lazy import Lazy


def quantized_leaf(lz: Lazy) -> bool:
    """A quantized tensor as loaded: host blocks or a device buffer, not a view of one."""
    return lz.dtype.is_quantized and lz.is_leaf


def transposed_leaf(lz: Lazy) -> bool:
    """w.T of a 2-D quantized tensor w: the right operand of x @ w.T."""
    return lz.op is Op.PERMUTE and lz.arg == (1, 0) and quantized_leaf(lz.srcs[0]) and len(lz.srcs[0].shape) == 2


def _allowed(op: Op, srcs: tuple[Lazy, ...], dtype: DType, arg: Any) -> bool:
    first = srcs[0]
    if op is Op.PERMUTE:
        return quantized_leaf(first) and len(first.shape) == 2
    if op is Op.CAST:
        return quantized_leaf(first) and dtype.is_float
    if op is Op.GATHER:
        return quantized_leaf(first) and len(first.shape) == 2 and arg == 0 and not srcs[1].dtype.is_quantized
    if op is Op.MATMUL:
        return transposed_leaf(srcs[1]) and first.dtype.is_float and not first.dtype.is_quantized
    return False


def check_quantized_operands(op: Op, srcs: tuple[Lazy, ...], dtype: DType, arg: Any) -> None:
    """Raise DTypeError naming `op` when it would read a quantized operand it cannot."""
    quant = next((s for s in srcs if s.dtype.is_quantized), None)
    if quant is None or _allowed(op, srcs, dtype, arg):
        return
    refuse(op.value, quant.dtype, quant.shape)


def refuse(op: str, dtype: DType, shape: tuple[int, ...]) -> None:
    """The error for an op that does not read quantized blocks."""
    raise DTypeError(
        f"{op}: the {dtype.value} tensor of shape {shape} holds quantized weight blocks, which only "
        "tr.nn.linear (x @ w.T), tr.nn.embedding and .astype read; convert it first: w.astype(tr.float32)"
    )


def refuse_read(lz: Lazy, what: str) -> None:
    """Host reads of a quantized tensor go through its values: .astype(tr.float32)."""
    if lz.dtype.is_quantized:
        raise DTypeError(
            f"{what}: the {lz.dtype.value} tensor of shape {lz.shape} holds quantized blocks; "
            "read its values with .astype(tr.float32).numpy()"
        )
