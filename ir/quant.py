"""Quantized weight formats: GGML's Q8_0 and Q4_0 blocks, and how wgjit lays them out on the GPU.

GGML (llama.cpp, GGUF files) stores a row of a weight matrix in blocks of 32 values, each
an f16 scale `d` followed by the block's quants:
  q8_0  34 bytes: d, then 32 int8 q;               value i = d * q[i]
  q4_0  18 bytes: d, then 16 bytes of 4-bit q;     value i = d * (nibble - 8), where byte j
        holds value j in its low nibble and value j + 16 in its high nibble
A block is 2-byte aligned in the file, and WGSL reads storage only in 4-byte words, so a
34- or 18-byte block cannot be one vector load. On the GPU each tensor keeps the same bytes
de-interleaved: first every block's quants (32 or 16 bytes each, so block i starts at
16-byte boundary), then every block's f16 scale (two per u32 word), padded to 16 bytes.
Blocks follow the file's order: row by row, along the row. A kernel then reads a block's
quants with one or two vec4<u32> loads (backend_wgpu/kernels/quant/).

`dequantize` is written from the definitions above and shares no code with the kernels
or the gguf package; it is what the reference interpreter (ir/interpret.py) computes with.
"""

from __future__ import annotations

import numpy as np

from ir.dtypes import DType
from ir.errors import DTypeError

QUANTIZED = (DType.q8_0, DType.q4_0)


def quant_bytes(dtype: DType) -> int:
    """Bytes of quants per block (the block without its 2-byte scale): 32 for q8_0, 16 for q4_0."""
    return dtype.block_bytes - 2


def check_shape(dtype: DType, shape: tuple[int, ...], what: str) -> None:
    """A quantized tensor's rows are whole blocks: its last dim is a multiple of the block size."""
    if not shape or shape[-1] % dtype.block:
        raise DTypeError(
            f"{what}: shape {shape} cannot be {dtype.value}: its last dim must be a multiple of {dtype.block} "
            f"(whole blocks of {dtype.block})"
        )


def pack(blocks: np.ndarray, dtype: DType) -> np.ndarray:
    """GGML blocks (uint8, any shape ending in whole blocks) as the GPU layout: u32 words.

    The result holds dtype.nbytes(numel) bytes: every block's quants, then every scale.
    """
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1, dtype.block_bytes)
    n = raw.shape[0]
    out = np.zeros(dtype.nbytes(n * dtype.block), dtype=np.uint8)
    qb = quant_bytes(dtype)
    out[: n * qb] = raw[:, 2:].reshape(-1)
    out[n * qb : n * qb + 2 * n] = raw[:, :2].reshape(-1)
    return out.view("<u4")


def unpack(words: np.ndarray, dtype: DType, numel: int) -> np.ndarray:
    """The GPU layout back to GGML blocks: uint8 of shape (blocks, block_bytes)."""
    data = np.ascontiguousarray(words).view(np.uint8)
    n = numel // dtype.block
    qb = quant_bytes(dtype)
    raw = np.empty((n, dtype.block_bytes), dtype=np.uint8)
    raw[:, 2:] = data[: n * qb].reshape(n, qb)
    raw[:, :2] = data[n * qb : n * qb + 2 * n].reshape(n, 2)
    return raw


def dequantize_blocks(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """GGML blocks (uint8 (n, block_bytes)) to float32 values (n, 32), from the definitions above."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, dtype.block_bytes)
    d = raw[:, :2].copy().view("<f2").astype(np.float32)  # (n, 1)
    qs = raw[:, 2:]
    if dtype is DType.q8_0:
        q = qs.view(np.int8).astype(np.float32)
    elif dtype is DType.q4_0:
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
    else:
        raise DTypeError(f"dequantize: {dtype.value} is not a quantized format")
    with np.errstate(invalid="ignore", over="ignore"):  # an infinite scale times 0 is NaN, as on the GPU
        return d * q


def dequantize(words: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor in the GPU layout (u32 words) as float32 values of its logical shape."""
    numel = int(np.prod(shape, dtype=np.int64))
    return dequantize_blocks(unpack(words, dtype, numel), dtype).reshape(shape)
