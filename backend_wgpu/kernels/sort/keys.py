"""The sort key of an element, in WGSL: a u32 whose unsigned order is the sort order.

The same keys as the reference (ir/optable/sorting.py): floats by their bits (negatives
inverted, the others with the sign bit set; -0.0 as +0.0; every NaN the largest key), int32
with the sign bit flipped, uint32 and bool as they are; descending inverts every key. float32
is read as its u32 bits (the kernels bind it so: no float arithmetic touches the value, so no
driver flushes a subnormal or folds a NaN test); float16 goes through f32, which holds it exactly.
"""

from __future__ import annotations

from ir.dtypes import DType


def key_binding_type(dtype: DType) -> str:
    """The element type a sort kernel binds a tensor of `dtype` as."""
    return {DType.float32: "u32", DType.float16: "f16", DType.int32: "i32"}.get(dtype, "u32")


def sort_key_fn(dtype: DType, descending: bool) -> str:
    """WGSL `fn sort_key(v) -> u32` for elements bound as key_binding_type(dtype)."""
    t = key_binding_type(dtype)
    if dtype.is_float:
        bits = "v" if dtype is DType.float32 else "bitcast<u32>(f32(v))"
        body = (
            f"  var b = {bits};\n"
            "  if ((b & 0x7fffffffu) == 0u) { b = 0u; }  // -0.0 sorts as +0.0\n"
            "  var k = select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);\n"
            "  if ((b & 0x7fffffffu) > 0x7f800000u) { k = 0xffffffffu; }  // every NaN last\n"
        )
    elif dtype is DType.int32:
        body = "  let k = bitcast<u32>(v) ^ 0x80000000u;\n"
    elif dtype is DType.bool:
        body = "  let k = select(0u, 1u, v != 0u);\n"
    else:
        body = "  let k = v;\n"
    result = "~k" if descending else "k"
    return f"fn sort_key(v: {t}) -> u32 {{\n{body}  return {result};\n}}"
