"""GGUF files (llama.cpp's format) and quantized weights: tr.load_gguf, tr.gguf_metadata, tr.quantize.

Reading goes through the `gguf` package from PyPI (pip install 'wgjit[gguf]'). What each
tensor type becomes:
  F32, I32                          as they are
  F16                               float16 (float32 where the adapter has no shader-f16)
  BF16, F64                         float32 (WGSL has no bfloat16 or float64)
  I8, I16, I64                      int32, by tr.tensor's rules
  Q8_0, Q4_0, Q4_K, Q6_K            quantized tensors (tr.q8_0, tr.q4_0, tr.q4_k, tr.q6_k): the
                                    blocks stay blocks on the GPU (ir/quant.py), read by
                                    tr.nn.linear, tr.nn.embedding and .astype
  other quantizations (Q5_K, Q3_K...) dequantized to float32 on load by gguf.quants
GGUF lists a tensor's dims innermost first (ne[0] is the row length); the tensors here have
numpy's order, so a weight stored as ne = (in, out) is (out, in): torch's layout, which
tr.nn.linear(x, w) takes as x @ w.T.

A file wgjit cannot read raises FormatError at load time, naming the file and, where one is
to blame, the tensor: not a GGUF file, a truncated file, a tensor type no reader knows, a
quantized row that is not whole blocks.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from ir import quant
from ir.dtypes import DType
from ir.errors import DTypeError, FormatError
from ir.ops import Op
from tracer.factories import tensor
from tracer.lazy import Lazy
from tracer.limits import check_binding_size, float16_supported
from tracer.tensor import Tensor

log = logging.getLogger("wgjit")

MAGIC = b"GGUF"
# GGML type names that stay quantized on the GPU
KEPT = {"Q8_0": DType.q8_0, "Q4_0": DType.q4_0, "Q4_K": DType.q4_k, "Q6_K": DType.q6_k}


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as e:
        raise ImportError("reading GGUF files and quantizing need the gguf package: pip install 'wgjit[gguf]'") from e
    return gguf


def quantized_tensor(blocks: np.ndarray, dtype: DType, shape: tuple[int, ...], what: str = "quantize") -> Tensor:
    """A quantized Tensor of logical `shape` from GGML blocks (uint8, in row order); uploaded when first used."""
    quant.check_shape(dtype, shape, what)
    nblocks = int(np.prod(shape, dtype=np.int64)) // dtype.block
    if blocks.size != nblocks * dtype.block_bytes:
        raise FormatError(
            f"{what}: {blocks.size} bytes of {dtype.value} blocks for shape {shape}; "
            f"expected {nblocks} blocks of {dtype.block_bytes} bytes"
        )
    words = quant.pack(blocks, dtype)
    check_binding_size(what, shape, dtype, words.nbytes)
    lz = Lazy(Op.INPUT, (), tuple(int(d) for d in shape), dtype)
    lz.host = words
    return Tensor(lz)


def quantize(x: Any, dtype: DType | str) -> Tensor:
    """x (a float array or Tensor) quantized to q8_0, q4_0 (last dim a multiple of 32), q4_k or q6_k (of 256).

    The blocks are made on the host: q8_0 and q4_0 by gguf.quants (bit-identical to llama.cpp's
    reference quantizers), q4_k and q6_k by ir/quant.py from the format's definition (simpler scales than
    llama.cpp's search, valid blocks all the same); weights (out, in) are quantized along `in`,
    the rows tr.nn.linear reads.
    """
    try:
        dt = DType(dtype) if isinstance(dtype, str) else dtype
    except ValueError:
        dt = None
    if not isinstance(dt, DType) or not dt.is_quantized:
        raise DTypeError(f"quantize: {dtype!r} is not a quantized format (tr.q8_0, tr.q4_0, tr.q4_k or tr.q6_k)")
    data = np.asarray(x.numpy() if isinstance(x, Tensor) else x, dtype=np.float32)  # host data: no GPU run
    quant.check_shape(dt, data.shape, "quantize")
    if dt in (DType.q4_k, DType.q6_k):
        if not np.isfinite(data).all():
            raise DTypeError(f"quantize: the {data.shape} weights hold inf or NaN, which {dt.value} blocks cannot hold")
        blocks = quant.quantize_q4_k(data) if dt is DType.q4_k else quant.quantize_q6_k(data)
    else:
        gguf = _gguf()
        blocks = gguf.quants.quantize(np.ascontiguousarray(data), gguf.GGMLQuantizationType[dt.value.upper()])
    _check_scales(data, blocks, dt)
    return quantized_tensor(blocks, dt, data.shape)


def _check_scales(data: np.ndarray, blocks: np.ndarray, dt: DType) -> None:
    """Finite weights must stay finite (NUMERICS.md "Values entering wgjit"): a block's float16
    scale overflows when its largest |value| is past about 65504 * 127 (q8_0), 65504 * 8 (q4_0)
    or 65504 * 63 * 15 / 2 (q4_k's d and dmin, the first four bytes), 65504 * 127 * 31 (q6_k's d, the last two)."""
    blocks = blocks.reshape(-1, dt.block_bytes)
    head = blocks[:, 208:210] if dt is DType.q6_k else blocks[:, :4] if dt is DType.q4_k else blocks[:, :2]
    scales = head.copy().view(np.float16).reshape(len(blocks), -1)
    scales = np.isfinite(scales).all(axis=1)  # every scale of the block finite
    finite = np.isfinite(data.reshape(-1, dt.block)).all(axis=1)
    bad = finite & ~scales
    if bad.any():
        worst = float(np.abs(data.reshape(-1, dt.block)[bad]).max())
        raise DTypeError(
            f"quantize: a block of the {data.shape} weights reaches |{worst:.6g}|, whose {dt.value} scale overflows "
            "float16 (the values would become inf); scale the weights down, or keep them float32/float16"
        )


def take_rows(t: Tensor, rows: np.ndarray) -> Tensor:
    """t[rows] along the first axis, rearranged on the host before upload (a loader's fix-up).

    For a tensor whose data has not gone to the GPU yet (just loaded); a quantized tensor's
    rows move as whole blocks, so its values are exactly the rearranged ones.
    """
    lz = t._lazy
    if lz.host is None or lz.op is not Op.INPUT:
        raise ValueError(f"take_rows: the tensor of shape {t.shape} is not host data waiting for upload")
    rows = np.asarray(rows)
    if not t.dtype.is_quantized:
        return tensor(lz.host[rows])
    blocks = quant.unpack(lz.host, t.dtype, t.size).reshape(t.shape[0], -1)
    return quantized_tensor(blocks[rows], t.dtype, (len(rows),) + t.shape[1:], "take_rows")


def _reader(path: str) -> Any:
    """A gguf.GGUFReader that checks every tensor's entry before the package builds its arrays."""
    gguf = _gguf()

    class CheckedReader(gguf.GGUFReader):
        def _build_tensors(self, start_offs: int, fields: list) -> None:
            for field in fields:
                _check_entry(path, field, start_offs, len(self.data), gguf)
            super()._build_tensors(start_offs, fields)

    with open(path, "rb") as f:
        head = f.read(4)
    if head != MAGIC:
        raise FormatError(f"load_gguf: {path} is not a GGUF file: it starts with {head!r}, not {MAGIC!r}")
    try:
        return CheckedReader(path)
    except FormatError:
        raise
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as e:
        raise FormatError(f"load_gguf: cannot read the header of {path} (truncated or damaged?): {e}") from e


def _check_entry(path: str, field: Any, start: int, file_size: int, gguf: Any) -> None:
    """One tensor's entry: a known type, whole blocks per row, and its data inside the file."""
    if len(field.parts) != 6:
        return  # a layout this check does not know: the package's own checks apply
    name = field.name
    dims = [int(d) for d in field.parts[3]]
    raw_type, offset = int(field.parts[4][0]), int(field.parts[5][0])
    try:
        kind = gguf.GGMLQuantizationType(raw_type)
    except ValueError:
        raise FormatError(
            f"load_gguf: tensor {name!r} in {path} has tensor type {raw_type}, which is no GGML type "
            "the gguf package knows (damaged, or newer than the installed gguf?)"
        ) from None
    block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    if dims and dims[0] % block:
        raise FormatError(
            f"load_gguf: tensor {name!r} in {path} has rows of {dims[0]} values, not whole {kind.name} blocks of {block}"
        )
    nbytes = int(np.prod(dims, dtype=np.int64)) // block * block_bytes
    if start + offset + nbytes > file_size:
        raise FormatError(
            f"load_gguf: tensor {name!r} in {path} ({kind.name}, {nbytes} bytes at offset {start + offset}) "
            f"reaches past the end of the file ({file_size} bytes): the file is truncated"
        )


def gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (general.architecture, llama.*, tokenizer.ggml.*...)."""
    reader = _reader(os.fspath(path))
    return {name: f.contents() for name, f in reader.fields.items() if not name.startswith("GGUF.")}


def load_gguf(path: str | os.PathLike, dequantize: bool = False) -> dict[str, Tensor]:
    """Every tensor of a GGUF file by name, in the file's order, uploaded to the GPU when first used.

    Q8_0, Q4_0, Q4_K and Q6_K stay quantized (dequantize=True makes them float32 instead); the module
    docstring lists what every other type becomes.
    """
    path = os.fspath(path)
    gguf = _gguf()
    reader = _reader(path)
    out: dict[str, Tensor] = {}
    widened: list[str] = []
    f16 = float16_supported()
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        kind = t.tensor_type.name
        if kind in KEPT and not dequantize:
            out[t.name] = quantized_tensor(np.asarray(t.data), KEPT[kind], shape, f"load_gguf: tensor {t.name!r}")
        elif kind in ("F32", "F64", "I32", "I8", "I16", "I64") or (kind == "F16" and f16):
            out[t.name] = tensor(np.asarray(t.data).reshape(shape))
        else:
            try:
                values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            except NotImplementedError:
                raise FormatError(
                    f"load_gguf: tensor {t.name!r} in {path} is {kind}, which the installed gguf package cannot dequantize"
                ) from None
            out[t.name] = tensor(np.asarray(values, dtype=np.float32).reshape(shape))
            widened.append(f"{t.name} ({kind})")
    if widened:
        log.info("load_gguf: %d tensors of %s became float32 (%s...)", len(widened), path, widened[0])
    return out
