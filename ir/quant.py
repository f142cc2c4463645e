"""Quantized weight formats: GGML's Q8_0, Q4_0, Q4_K and Q6_K blocks, and how wgjit lays them out on the GPU.

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

Q4_K (GGML's "k-quant"): super-blocks of 256 values, 144 bytes: f16 d, f16 dmin, 12 bytes
packing eight 6-bit scales sc[j] and eight 6-bit mins m[j] (one each per 32-value sub-block j),
then 128 bytes of 4-bit quants; value = d * sc[j] * q - dmin * m[j]. The 12 bytes: for j < 4,
sc[j] and m[j] are the low 6 bits of bytes j and j + 4; for j >= 4 their low 4 bits are the
low and high nibbles of byte j + 4 and their high 2 bits the top bits of bytes j - 4 and j.
The quants come in four 32-byte groups: byte l of group g holds value l of sub-block 2g in its
low nibble and value l of sub-block 2g + 1 in its high nibble.
On the GPU a q4_k tensor holds, per 32-value sub-block, one 16-byte unit of nibbles in q4_0's
order (byte i: value i low, value i + 16 high; not centred), so the kernels read it as they
read q4_0; then every sub-block's sc | m << 8 as a u16 (two per word); then every super-block's
d and dmin as one word (an f16 pair); padded to 16 bytes: 148 bytes per 256 values. Why not the
f32 scale d * sc and offset dmin * m per sub-block (exact too): 192 bytes per 256 values, 30%
more to read in a decode step's GEMVs, which are bound by memory; unpacking two 6-bit
integers and an f16 pair costs a few instructions per 32 values. Why not GGML's 12 bytes as
they are: their bit fields cross sub-blocks, and the unpacked u16 costs 4 bytes per 256 values.
A kernel's sub-block scale is d * sc (an f16 times a 6-bit integer: exact in f32) and offset
dmin * m; its dot product with x is scale * dot(q, x) - offset * sum(x).

Q6_K: super-blocks of 256 values, 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), 16
int8 scales (one per 16 values), f16 d; value = d * scale[v / 16] * (q - 32), q the 6-bit
value. The block is two halves of 128 values (ql 64 bytes, qh 32 bytes each); in a half, value
32 s + l (s < 4, l < 32) has its low 4 bits in ql byte 32 (s % 2) + l (low nibble for s < 2,
high for s >= 2) and its high 2 bits in bits 2 s, 2 s + 1 of qh byte l.
On the GPU a q6_k tensor holds, per 32-value sub-block, one 16-byte unit of low nibbles in
q4_0's order (byte i: value i low, value i + 16 high); then per sub-block an 8-byte piece of
high bits, its word 0 for values 0..15 and word 1 for 16..31, value 4 c + b of a word's half
at bits 8 b + 2 c (so the same byte shifts that pick the nibbles of the unit's word c pick
the high bits of the word shifted right by 2 c); then the 16 int8 scales of every
super-block as they are; then every super-block's f16 d (two per word); padded to 16 bytes:
210 bytes per 256 values, GGUF's size. Every part starts on a 16-byte boundary (the nibbles
take 128 and the high bits 64 bytes per super-block), so a unit is one vec4<u32> load and two
sub-blocks' high bits another. Why not one 24-byte record per sub-block (nibbles and high bits
together): it is not 16-byte aligned every other sub-block, so a kernel would need three
8-byte loads instead of a 16-byte and a shared 16-byte one. Why not f32 scales d * scale
per 16 values (exact too): 64 bytes more per 256 values (30% more to read in a memory-bound
GEMV) to save one multiply per 16 values. A kernel's scale for a unit is the pair
(d * scale[2 j], d * scale[2 j + 1]) (an f16 times an int8: exact in f32), the first for
the unit's values 0..15, the second for 16..31: dot = s0 * dot(q - 32, x)[:16] + s1 * ...[16:].

`dequantize` is written from the definitions above and shares no code with the kernels
or the gguf package; it is what the reference interpreter (ir/interpret.py) computes with.
"""

from __future__ import annotations

import numpy as np

from ir.dtypes import DType
from ir.errors import DTypeError

QUANTIZED = (DType.q8_0, DType.q4_0, DType.q4_k, DType.q6_k)
SUB = 32  # values per q4_k sub-block


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
    if dtype is DType.q4_k:
        return _pack_q4_k(blocks)
    if dtype is DType.q6_k:
        return _pack_q6_k(blocks)
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1, dtype.block_bytes)
    n = raw.shape[0]
    out = np.zeros(dtype.nbytes(n * dtype.block), dtype=np.uint8)
    qb = quant_bytes(dtype)
    out[: n * qb] = raw[:, 2:].reshape(-1)
    out[n * qb : n * qb + 2 * n] = raw[:, :2].reshape(-1)
    return out.view("<u4")


def unpack(words: np.ndarray, dtype: DType, numel: int) -> np.ndarray:
    """The GPU layout back to GGML blocks: uint8 of shape (blocks, block_bytes)."""
    if dtype is DType.q4_k:
        return _unpack_q4_k(words, numel)
    if dtype is DType.q6_k:
        return _unpack_q6_k(words, numel)
    data = np.ascontiguousarray(words).view(np.uint8)
    n = numel // dtype.block
    qb = quant_bytes(dtype)
    raw = np.empty((n, dtype.block_bytes), dtype=np.uint8)
    raw[:, 2:] = data[: n * qb].reshape(n, qb)
    raw[:, :2] = data[n * qb : n * qb + 2 * n].reshape(n, 2)
    return raw


def dequantize_blocks(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """GGML blocks (uint8 (n, block_bytes)) to float32 values (n, block), from the definitions above."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, dtype.block_bytes)
    if dtype is DType.q4_k:
        scale, offset, q = _fields_q4_k(raw)
        with np.errstate(invalid="ignore", over="ignore"):
            return (scale[:, :, None] * q - offset[:, :, None]).reshape(-1, dtype.block)
    if dtype is DType.q6_k:
        q, sc, d = _fields_q6_k(raw)
        with np.errstate(invalid="ignore", over="ignore"):  # (d * scale) * (q - 32), GGML's order
            scale = d[:, None] * sc.astype(np.float32)  # (n, 16)
            return (scale[:, :, None] * (q.reshape(-1, 16, 16).astype(np.float32) - 32.0)).reshape(-1, dtype.block)
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


# --- Q4_K ------------------------------------------------------------------------------------


def _scale_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 packed bytes (n, 12) as the eight 6-bit scales and mins (n, 8) each, uint8."""
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([a & 63, (c & 15) | ((a >> 6) << 4)], axis=1)
    m = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)
    return sc, m


def _pack_scale_mins(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins (n, 8) each as GGML's 12 bytes (n, 12): the inverse of _scale_mins."""
    sc, m = sc.astype(np.uint8), m.astype(np.uint8)
    a = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    b = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    c = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    return np.concatenate([a, b, c], axis=1).astype(np.uint8)


def _nibbles_q4_k(qs: np.ndarray) -> np.ndarray:
    """The 128 quant bytes (n, 128) as values (n, 8, 32): sub-block 2g from group g's low nibbles, 2g + 1 its high."""
    groups = qs.reshape(-1, 4, 1, 32)
    return ((groups >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 15).reshape(-1, 8, SUB)


def _fields_q4_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each sub-block's scale d * sc and offset dmin * m (float32 (n, 8)), and its quants (float32 (n, 8, 32))."""
    d = raw[:, 0:2].copy().view("<f2").astype(np.float32)
    dmin = raw[:, 2:4].copy().view("<f2").astype(np.float32)
    sc, m = _scale_mins(raw[:, 4:16])
    with np.errstate(invalid="ignore", over="ignore"):  # an infinite d times sc = 0 is NaN, as on the GPU
        scale, offset = d * sc.astype(np.float32), dmin * m.astype(np.float32)
    return scale, offset, _nibbles_q4_k(raw[:, 16:]).astype(np.float32)


def _pack_q4_k(blocks: np.ndarray) -> np.ndarray:
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1, DType.q4_k.block_bytes)
    n = raw.shape[0]
    q = _nibbles_q4_k(raw[:, 16:])  # (n, 8, 32)
    units = q[:, :, :16] | (q[:, :, 16:] << 4)  # q4_0's order: byte i holds values i and i + 16
    sc, m = _scale_mins(raw[:, 4:16])
    sm = (sc.astype("<u2") | (m.astype("<u2") << 8)).view(np.uint8)  # (n, 16)
    out = np.zeros(DType.q4_k.nbytes(n * 256), dtype=np.uint8)
    out[: n * 128] = units.reshape(-1)
    out[n * 128 : n * 144] = sm.reshape(-1)
    out[n * 144 : n * 148] = raw[:, :4].reshape(-1)  # d, dmin
    return out.view("<u4")


def _unpack_q4_k(words: np.ndarray, numel: int) -> np.ndarray:
    data = np.ascontiguousarray(words).view(np.uint8)
    n = numel // 256
    units = data[: n * 128].reshape(n, 8, 16)
    q = np.concatenate([units & 15, units >> 4], axis=2)  # (n, 8, 32)
    sm = data[n * 128 : n * 144].copy().view("<u2").reshape(n, 8)
    raw = np.empty((n, 144), dtype=np.uint8)
    raw[:, :4] = data[n * 144 : n * 148].reshape(n, 4)
    raw[:, 4:16] = _pack_scale_mins(sm & 63, (sm >> 8) & 63)
    pairs = q.reshape(n, 4, 2, SUB)
    raw[:, 16:] = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, 128)
    return raw


def quantize_q4_k(values: np.ndarray) -> np.ndarray:
    """float32 values (any shape, last dim a multiple of 256) as GGML Q4_K blocks (uint8 (n, 144)).

    From the format's definition, not llama.cpp's search for the best scales: each sub-block
    spans [min(lo, 0), hi] in 15 steps; d and dmin are the largest step and offset over 63 (f16),
    sc and m those of each sub-block rounded to 6 bits, then q = round((x + dmin m) / (d sc)) in 0..15.
    Values must be finite (the caller checks).
    """
    x = np.asarray(values, dtype=np.float32).reshape(-1, 8, SUB)
    n = x.shape[0]
    lo = np.minimum(x.min(axis=2), 0.0)
    step = (x.max(axis=2) - lo) / 15.0  # (n, 8)
    off = -lo
    with np.errstate(over="ignore"):
        d = (step.max(axis=1) / 63.0).astype(np.float16)  # (n,)
        dmin = (off.max(axis=1) / 63.0).astype(np.float16)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.clip(np.rint(step / d32), 0, 63), 0).astype(np.uint8)
        m = np.where(dmin32 > 0, np.clip(np.rint(off / dmin32), 0, 63), 0).astype(np.uint8)
        scale, offset = d32 * sc, dmin32 * m  # exact in float32
        q = np.rint((x + offset[:, :, None]) / scale[:, :, None])
    q = np.where(scale[:, :, None] > 0, np.clip(np.nan_to_num(q), 0, 15), 0).astype(np.uint8)  # (n, 8, 32)
    raw = np.empty((n, 144), dtype=np.uint8)
    raw[:, 0:2] = d.reshape(n, 1).view(np.uint8)
    raw[:, 2:4] = dmin.reshape(n, 1).view(np.uint8)
    raw[:, 4:16] = _pack_scale_mins(sc, m)
    pairs = q.reshape(n, 4, 2, SUB)
    raw[:, 16:] = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, 128)
    return raw


# --- Q6_K ------------------------------------------------------------------------------------


def _fields_q6_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GGML Q6_K blocks (n, 210) as their 6-bit quants in value order (uint8 (n, 8, 32)), the 16 int8
    scales (n, 16) and d (float32 (n,))."""
    n = raw.shape[0]
    ql = raw[:, 0:128].reshape(n, 2, 2, 32)  # (half, s % 2, l)
    qh = raw[:, 128:192].reshape(n, 2, 1, 32)  # (half, -, l)
    lo = (ql[:, :, None] >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1, 1)) & 15  # (half, s // 2, s % 2, l)
    hi = (qh >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 3  # (half, s, l)
    q = lo.reshape(n, 2, 4, 32) | (hi << 4)
    sc = raw[:, 192:208].view(np.int8)
    d = raw[:, 208:210].copy().view("<f2").astype(np.float32).reshape(n)
    return q.reshape(n, 8, SUB), sc, d


def _raw_q6_k(q: np.ndarray, sc: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The inverse of _fields_q6_k: quants (n, 8, 32) in 0..63, int8 scales (n, 16), f16 d (n,) as blocks (n, 210)."""
    n = q.shape[0]
    q = q.astype(np.uint8).reshape(n, 2, 2, 2, 32)  # (half, s // 2, s % 2, l)
    ql = (q[:, :, 0] & 15) | ((q[:, :, 1] & 15) << 4)  # (half, s % 2, l)
    hi = (q.reshape(n, 2, 4, 32) >> 4) << np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    raw = np.empty((n, 210), dtype=np.uint8)
    raw[:, 0:128] = ql.reshape(n, 128)
    raw[:, 128:192] = np.bitwise_or.reduce(hi, axis=2).reshape(n, 64)
    raw[:, 192:208] = np.asarray(sc).astype(np.int8).view(np.uint8)
    raw[:, 208:210] = np.asarray(d, dtype=np.float16).reshape(n, 1).view(np.uint8)
    return raw


def _pack_q6_k(blocks: np.ndarray) -> np.ndarray:
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1, DType.q6_k.block_bytes)
    n = raw.shape[0]
    q, sc, _ = _fields_q6_k(raw)
    lo = q & 15
    units = lo[:, :, :16] | (lo[:, :, 16:] << 4)  # (n, 8, 16): q4_0's order
    hi = (q >> 4).reshape(n, 8, 2, 4, 4)  # (sub-block, word, c, b): value 16 word + 4 c + b
    pieces = np.bitwise_or.reduce(hi << np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 1, 4, 1), axis=3)  # byte b
    out = np.zeros(DType.q6_k.nbytes(n * 256), dtype=np.uint8)
    out[: n * 128] = units.reshape(-1)
    out[n * 128 : n * 192] = pieces.reshape(-1)
    out[n * 192 : n * 208] = sc.view(np.uint8).reshape(-1)
    out[n * 208 : n * 210] = raw[:, 208:210].reshape(-1)
    return out.view("<u4")


def _unpack_q6_k(words: np.ndarray, numel: int) -> np.ndarray:
    data = np.ascontiguousarray(words).view(np.uint8)
    n = numel // 256
    units = data[: n * 128].reshape(n, 8, 16)
    pieces = data[n * 128 : n * 192].reshape(n, 8, 2, 1, 4)  # (sub-block, word, -, byte b)
    hi = (pieces >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 1, 4, 1)) & 3  # (.., c, b)
    q = np.concatenate([units & 15, units >> 4], axis=2) | (hi.reshape(n, 8, 32) << 4)
    sc = data[n * 192 : n * 208].reshape(n, 16).view(np.int8)
    d = data[n * 208 : n * 210].copy().view("<f2").reshape(n)
    return _raw_q6_k(q, sc, d)


def quantize_q6_k(values: np.ndarray) -> np.ndarray:
    """float32 values (any shape, last dim a multiple of 256) as GGML Q6_K blocks (uint8 (n, 210)).

    From the format's definition, not llama.cpp's search for the best scales: each 16 values
    step by max |x| / 31 (q - 32 in -31..31); d is the largest step over 127 (f16, rounded up), each
    scale its step rounded to an integer multiple of d, then q - 32 = round(x / (d scale)) in -32..31.
    Values must be finite (the caller checks).
    """
    x = np.asarray(values, dtype=np.float32).reshape(-1, 16, 16)
    n = x.shape[0]
    step = np.abs(x).max(axis=2) / 31.0  # (n, 16)
    want = step.max(axis=1) / 127.0
    with np.errstate(over="ignore"):
        d = want.astype(np.float16)
    # rounded up, not to nearest: every step is then at most 127 d (no scale clipped), which matters
    # where d is an f16 subnormal of few bits (largest |x| below about 0.24)
    low = d.astype(np.float32) < want
    d[low] = np.nextafter(d[low], np.float16(np.inf))
    d32 = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.clip(np.rint(step / d32), 0, 127), 0).astype(np.int8)
        scale = d32 * sc  # exact in float32
        q = np.rint(x / scale[:, :, None])
    q = np.where(scale[:, :, None] > 0, np.clip(np.nan_to_num(q), -32, 31), 0) + 32
    return _raw_q6_k(q.reshape(n, 8, SUB), sc, d)
