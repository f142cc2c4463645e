"""The WGSL that reads quantized blocks (ir/quant.py's GPU layout), written once for every quant kernel.

A quantized operand is bound as array<vec4<u32>>. Its quants come first: one "unit" is one
vec4<u32> load (16 bytes), half a q8_0 block (16 int8 values) or a whole q4_0 block (32
nibbles); unit u of the tensor is element u of the binding, so a row's units are
consecutive and a thread walking them issues one 16-byte load each. The f16 scales follow,
from element `s4` (the tensor's unit count) on, two per u32 word, eight per element.

q4_k's unit is one 32-value sub-block, its nibbles in q4_0's order but not centred; its
`{binding}_scale(unit)` is a vec2<f32>: the sub-block's scale d * sc and offset dmin * m,
unpacked from the 6-bit pair (u16 words from word 4 * s4 on) and the super-block's f16
pair (d, dmin; words from 4 * s4 + 2 * s4 / 4 on). A kernel writes a value as `fmt.value(d, q)`
and, in a dot product, subtracts offset * sum(x) once per unit (`fmt.has_offset`).

q6_k's unit is one 32-value sub-block too: its low nibbles in q4_0's order, and its high
bits, an 8-byte piece that a kernel loads beside the unit (`fmt.loads`: the vec4<u32> of
two sub-blocks' pieces from element s4 on, half of it); `{binding}_scale(unit)` is a
vec2<f32>, d * scale of the unit's values 0..15 and of 16..31 (int8 scales from word
6 * s4 on, f16 d from word 6.5 * s4 on), so `fmt.value(d, q, offset)` picks its half
by the lanes' offset and a dot product scales the two halves apart (`fmt.half_scales`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend_wgpu.wgsl import WgslBuilder
from ir.dtypes import DType


@dataclass(frozen=True)
class QuantFormat:
    dtype: DType
    values_per_unit: int  # values one vec4<u32> of quants holds
    units_per_block: int

    @property
    def name(self) -> str:
        return self.dtype.value

    def units(self, numel: int) -> int:
        """Units (vec4<u32> loads of quants) of a tensor of `numel` values; also where its scales start."""
        return numel // self.values_per_unit

    @property
    def half_scales(self) -> bool:
        """A scale per 16 values (q6_k): `{binding}_scale` returns vec2(scale of values 0..15, of 16..31)."""
        return self.dtype is DType.q6_k

    @property
    def has_offset(self) -> bool:
        """Its values are scale * q - offset (q4_k): `{binding}_scale` returns vec2(scale, offset)."""
        return self.dtype is DType.q4_k

    def value(self, d: str, q: str, offset: int = 0) -> str:
        """WGSL: the dequantized values of lanes `q` (vec4<f32>, its first value at `offset` in the unit)
        given the scale expression `d`."""
        if self.half_scales:
            return f"{d}.{'x' if offset < 16 else 'y'} * {q}"
        return f"({d}.x * {q} - vec4<f32>({d}.y))" if self.has_offset else f"{d} * {q}"

    def define(self, b: WgslBuilder, binding: str, s4: str = "s4") -> None:
        """The helpers: `{binding}_scale(block)` (its scales from uniform field `s4` on) and the
        unpacking of one word into four f32 values."""
        if self.dtype is DType.q4_k:
            self._define_q4_k(b, binding, s4)
            return
        if self.dtype is DType.q6_k:
            self._define_q6_k(b, binding, s4)
            return
        b.helper(
            f"{binding}_scale",
            f"fn {binding}_scale(blk: u32) -> f32 {{\n"
            f"  let w = {binding}[params.{s4} + blk / 8u][(blk / 2u) % 4u];  // two half-precision scales per word\n"
            f"  return unpack2x16float(w)[blk & 1u];\n}}",
        )
        if self.dtype is DType.q8_0:
            b.helper(
                "q8x4",
                "fn q8x4(w: u32) -> vec4<f32> {  // four int8, sign-extended by the arithmetic shift\n"
                "  return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));\n}",
            )
        else:
            b.helper(
                "q4lo",
                "fn q4lo(w: u32) -> vec4<f32> {  // the low nibbles of four bytes, centred: q - 8\n"
                "  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u)) - vec4<f32>(8.0);\n}",
            )
            b.helper(
                "q4hi",
                "fn q4hi(w: u32) -> vec4<f32> {  // the high nibbles: values 16..31 of the block\n"
                "  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(15u)) - vec4<f32>(8.0);\n}",
            )

    def _define_q4_k(self, b: WgslBuilder, binding: str, s4: str) -> None:
        b.helper(
            f"{binding}_word",
            f"fn {binding}_word(i: u32) -> u32 {{\n  return {binding}[i / 4u][i % 4u];\n}}",
        )
        b.helper(
            f"{binding}_scale",
            f"fn {binding}_scale(sub: u32) -> vec2<f32> {{  // (d * sc, dmin * m) of one 32-value sub-block\n"
            f"  let sm = {binding}_word(params.{s4} * 4u + sub / 2u) >> ((sub & 1u) * 16u);  // sc | m << 8\n"
            f"  let dm = unpack2x16float({binding}_word(params.{s4} * 4u + params.{s4} / 2u + sub / 8u));\n"
            f"  return dm * vec2<f32>(f32(sm & 63u), f32((sm >> 8u) & 63u));\n}}",
        )
        b.helper(
            "q4klo",
            "fn q4klo(w: u32) -> vec4<f32> {  // the low nibbles of four bytes (q4_k: not centred)\n"
            "  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u));\n}",
        )
        b.helper(
            "q4khi",
            "fn q4khi(w: u32) -> vec4<f32> {  // the high nibbles: values 16..31 of the sub-block\n"
            "  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(15u));\n}",
        )

    def _define_q6_k(self, b: WgslBuilder, binding: str, s4: str) -> None:
        b.helper(
            f"{binding}_word",
            f"fn {binding}_word(i: u32) -> u32 {{\n  return {binding}[i / 4u][i % 4u];\n}}",
        )
        b.helper(
            f"{binding}_high",
            f"fn {binding}_high(unit: u32) -> vec2<u32> {{  // the unit's 8 bytes of high bits: values 0..15, 16..31\n"
            f"  let v = {binding}[params.{s4} + unit / 2u];\n"
            f"  return select(v.xy, v.zw, (unit & 1u) == 1u);\n}}",
        )
        b.helper(
            f"{binding}_scale",
            f"fn {binding}_scale(unit: u32) -> vec2<f32> {{  // d * scale of the unit's values 0..15 and 16..31\n"
            f"  let s = {binding}_word(params.{s4} * 6u + unit / 2u) >> ((unit & 1u) * 16u);  // two int8\n"
            f"  let sc = bitcast<vec2<i32>>(vec2<u32>(s << 24u, s << 16u)) >> vec2<u32>(24u);\n"
            f"  let d = unpack2x16float({binding}_word(params.{s4} * 6u + params.{s4} / 2u + unit / 16u))[(unit / 8u) & 1u];\n"
            f"  return d * vec2<f32>(sc);\n}}",
        )
        b.helper(
            "q6x4",
            "fn q6x4(w: u32, h: u32) -> vec4<f32> {  // four 6-bit values, centred: low nibbles of w's bytes, 2 bits of h's\n"
            "  let s = vec4<u32>(0u, 8u, 16u, 24u);\n"
            "  return vec4<f32>(((vec4<u32>(w) >> s) & vec4<u32>(15u)) | (((vec4<u32>(h) >> s) & vec4<u32>(3u)) << vec4<u32>(4u)))"
            " - vec4<f32>(32.0);\n}",
        )

    def loads(self, binding: str, q: str, unit: str) -> list[str]:
        """WGSL statements that load what the lanes of unit `q` read besides the unit itself (q6_k: its high bits)."""
        return [f"let {q}h = {binding}_high({unit});"] if self.dtype is DType.q6_k else []

    def lanes(self, q: str) -> list[tuple[str, int]]:
        """The unit `q` (a vec4<u32>) as vec4<f32> values before scaling, each with its first value's offset in the unit."""
        if self.dtype is DType.q8_0:
            return [(f"q8x4({q}.{c})", 4 * j) for j, c in enumerate("xyzw")]
        if self.dtype is DType.q6_k:  # word c's high bits sit 2 c bits up (ir/quant.py)
            sh = ["", " >> 2u", " >> 4u", " >> 6u"]
            return [(f"q6x4({q}.{c}, {q}h.x{sh[j]})", 4 * j) for j, c in enumerate("xyzw")] + [
                (f"q6x4({q}.{c} >> 4u, {q}h.y{sh[j]})", 16 + 4 * j) for j, c in enumerate("xyzw")
            ]
        if self.dtype is DType.q4_k:
            return [(f"q4klo({q}.{c})", 4 * j) for j, c in enumerate("xyzw")] + [
                (f"q4khi({q}.{c})", 16 + 4 * j) for j, c in enumerate("xyzw")
            ]
        return [(f"q4lo({q}.{c})", 4 * j) for j, c in enumerate("xyzw")] + [
            (f"q4hi({q}.{c})", 16 + 4 * j) for j, c in enumerate("xyzw")
        ]

    def word_lanes(self, q: str, w: str) -> list[tuple[str, int]]:
        """The lanes of word `w` (a WGSL u32 expression, 0..3) of unit `q`, for a kernel that splits a unit's
        words among threads: (vec4<f32> values before scaling, 0 or 16). Lane (value, h) holds the unit's
        values h + 4 w .. h + 4 w + 3 (q8_0: one lane of the word's four int8; q4_0, q4_k, q6_k: two, the
        low nibbles at h = 0 and the high at h = 16, as `lanes`)."""
        word = f"{q}[{w}]"
        if self.dtype is DType.q8_0:
            return [(f"q8x4({word})", 0)]
        if self.dtype is DType.q6_k:  # word w's high bits sit 2 w bits up (ir/quant.py)
            return [
                (f"q6x4({word}, {q}h.x >> (2u * {w}))", 0),
                (f"q6x4({word} >> 4u, {q}h.y >> (2u * {w}))", 16),
            ]
        lo, hi = ("q4klo", "q4khi") if self.dtype is DType.q4_k else ("q4lo", "q4hi")
        return [(f"{lo}({word})", 0), (f"{hi}({word})", 16)]

    def block_of(self, unit: str) -> str:
        """WGSL: the block (index of its scale) that unit `unit` belongs to."""
        return unit if self.units_per_block == 1 else f"({unit}) / {self.units_per_block}u"


FORMATS = {
    DType.q8_0: QuantFormat(DType.q8_0, values_per_unit=16, units_per_block=2),
    DType.q4_0: QuantFormat(DType.q4_0, values_per_unit=32, units_per_block=1),
    DType.q4_k: QuantFormat(DType.q4_k, values_per_unit=32, units_per_block=1),  # a "block" here: a sub-block
    DType.q6_k: QuantFormat(DType.q6_k, values_per_unit=32, units_per_block=1),
}


def quant_format(dtype: DType) -> QuantFormat:
    return FORMATS[dtype]


def describe(dtype: DType, shape: tuple[int, ...]) -> str:
    """For `explain`: the format and bytes of a quantized operand."""
    numel = 1
    for d in shape:
        numel *= d
    if dtype is DType.q4_k:  # its GPU bytes differ from the file's (ir/quant.py)
        return f"q4_k {'x'.join(map(str, shape))}, {dtype.nbytes(numel)} bytes (148 per 256 weights; 144 in GGUF)"
    return f"{dtype.value} {'x'.join(map(str, shape))}, {dtype.nbytes(numel)} bytes ({dtype.block_bytes} per {dtype.block} weights)"
