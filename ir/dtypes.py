"""Element types, their numpy and WGSL spellings, and numpy-style promotion."""

from __future__ import annotations

import enum

import numpy as np

from ir.errors import DTypeError


class DType(enum.Enum):
    float32 = "float32"
    float16 = "float16"
    int32 = "int32"
    uint32 = "uint32"
    bool = "bool"
    # quantized weight formats (llama.cpp's GGML blocks; ir/quant.py has their layout)
    q8_0 = "q8_0"
    q4_0 = "q4_0"
    q4_k = "q4_k"
    q6_k = "q6_k"

    # the properties read facts computed once per member (below the class): tracing asks
    # them for every op, and an Enum member's own lookups cost microseconds each

    @property
    def np(self) -> np.dtype:
        """The numpy dtype of its values (a quantized tensor's values are float32 once dequantized)."""
        return self._facts[0]

    @property
    def itemsize(self) -> int:
        """Bytes per element in a GPU buffer (bool is stored as u32: WGSL has no bool storage).

        Quantized formats have no whole bytes per element: ask `nbytes(numel)` instead.
        """
        size = self._facts[1]
        if not size:
            raise DTypeError(f"{self.value} stores {self.block} elements in {self.block_bytes} bytes: use nbytes()")
        return size

    def nbytes(self, numel: int) -> int:
        """Bytes that `numel` elements take in a GPU buffer (quantized: whole blocks, padded to 16 bytes).

        q4_k's GPU layout takes 148 bytes per 256-value block where GGUF's takes 144; q6_k's 210 as GGUF's (ir/quant.py)."""
        if not self.is_quantized:
            return numel * self.itemsize
        return -(-(numel // self.block * _GPU_BLOCK_BYTES.get(self, self.block_bytes)) // 16) * 16

    @property
    def is_quantized(self) -> bool:
        """A block format (q8_0, q4_0, q4_k, q6_k): read by tr.nn.linear, tr.nn.embedding and .astype only."""
        return self._facts[4]

    @property
    def block(self) -> int:
        """Elements per quantization block (1 for the plain dtypes)."""
        return _BLOCKS[self][0] if self in _BLOCKS else 1

    @property
    def block_bytes(self) -> int:
        """Bytes per block in a GGUF file: 34 for q8_0, 18 for q4_0 (an f16 scale and the quants), 144 for q4_k, 210 for q6_k."""
        return _BLOCKS[self][1] if self in _BLOCKS else self.itemsize

    @property
    def is_float(self) -> bool:
        """Its values are floating point: float32, float16, and the quantized formats (dequantized)."""
        return self._facts[2]

    @property
    def is_int(self) -> bool:
        return self._facts[3]

    @property
    def family(self) -> str:
        """ "float", "int" or "bool": the kinds of operand an op's WGSL is written for (ir/optable)."""
        return self._facts[5]

    @property
    def wgsl(self) -> str:
        """The scalar type used for arithmetic in WGSL."""
        return _WGSL[self]

    @property
    def wgsl_storage(self) -> str:
        """The scalar type stored in a buffer."""
        return "u32" if self is DType.bool else _WGSL[self]

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype this stands for; `np.dtype(x.dtype)` reads it."""
        return self.np

    def __eq__(self, other: object) -> bool:
        """Equal to itself and to what numpy reads as the same dtype: `np.float32`, `"float32"`, `np.dtype("f4")`."""
        if isinstance(other, DType):
            return self is other
        if other is None or isinstance(other, bool | int | float):
            return False
        try:
            return np.dtype(other) == self.np  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self._value_)  # the same as hash(self.value), without the enum property

    def __repr__(self) -> str:
        return f"tr.{self.value}"

    __str__ = __repr__


_WGSL = {
    DType.float32: "f32",
    DType.float16: "f16",
    DType.int32: "i32",
    DType.uint32: "u32",
    DType.bool: "bool",
    DType.q8_0: "u32",  # storage words; kernels unpack the blocks (backend_wgpu/kernels/quant/)
    DType.q4_0: "u32",
    DType.q4_k: "u32",
    DType.q6_k: "u32",
}
# quantized formats: (elements per block, bytes per block), as GGML defines them
_BLOCKS = {DType.q8_0: (32, 34), DType.q4_0: (32, 18), DType.q4_k: (256, 144), DType.q6_k: (256, 210)}
# bytes per block on the GPU where they differ from GGML's (ir/quant.py: q4_k's scales unpacked to bytes)
_GPU_BLOCK_BYTES = {DType.q4_k: 148}

_INTS = (DType.int32, DType.uint32)
for _dt in DType:  # (numpy dtype, bytes per element in a buffer (0: quantized), is float, is int, is quantized, family)
    _quantized = _dt in _BLOCKS
    _np = np.dtype(np.float32) if _quantized else np.dtype(_dt.value)
    _dt._facts = (
        _np,
        0 if _quantized else 4 if _dt is DType.bool else _np.itemsize,
        _quantized or _dt in (DType.float32, DType.float16),
        _dt in _INTS,
        _quantized,
        "float" if _quantized or _dt in (DType.float32, DType.float16) else "int" if _dt in _INTS else "bool",
    )

# from_numpy's answers for the native-order numpy dtypes and their scalar types (not bool's python type)
_FROM_NUMPY: dict[object, DType] = {}
for _dt in (DType.float32, DType.float16, DType.int32, DType.uint32, DType.bool):
    _FROM_NUMPY[_dt.np] = _FROM_NUMPY[_dt.np.type] = _dt

float32 = DType.float32
float16 = DType.float16
int32 = DType.int32
uint32 = DType.uint32
bool_ = DType.bool
q8_0 = DType.q8_0
q4_0 = DType.q4_0
q4_k = DType.q4_k
q6_k = DType.q6_k

# Promotion lattice over the supported types, as numpy does it (int32 with uint32 would be
# int64 in numpy, which we cannot store: that pair is refused rather than silently narrowed).
_RANK = {DType.bool: 0, DType.uint32: 1, DType.int32: 1, DType.float16: 2, DType.float32: 3}


def stored_as_is(dt: np.dtype | type) -> DType | None:
    """The DType of a native-order numpy dtype (or scalar type) stored as it is, else None: one dict lookup."""
    return _FROM_NUMPY.get(dt)


def from_numpy(dt: np.dtype | type) -> DType:
    """The DType of a numpy dtype that can be stored as it is."""
    known = _FROM_NUMPY.get(dt)  # a dict lookup: every tr.tensor asks (numpy builds a dtype's name each time)
    if known is not None:
        return known
    name = np.dtype(dt).name
    try:
        return DType(name)
    except ValueError:
        raise DTypeError(f"dtype {name} is not supported (use float32, float16, int32, uint32 or bool)") from None


def to_dtype(dt: DType | str | np.dtype | type) -> DType:
    """Accept a DType, its name, or a numpy dtype/type."""
    if isinstance(dt, DType):
        return dt
    if isinstance(dt, str):
        if dt == "bool_":
            return DType.bool
        try:
            return DType(dt)
        except ValueError:
            pass
    if dt is bool:
        return DType.bool
    if dt is float:
        return DType.float32
    if dt is int:
        return DType.int32
    try:
        np_dtype = np.dtype(dt)
    except TypeError:
        raise DTypeError(f"{dt!r} is not a dtype (use float32, float16, int32, uint32 or bool)") from None
    return from_numpy(np_dtype)  # DTypeError naming the dtype when wgjit cannot store it


def promote(a: DType, b: DType, op: str = "op") -> DType:
    """numpy's result type of two tensor dtypes, restricted to what we can store."""
    if a.is_quantized or b.is_quantized:
        q = a if a.is_quantized else b
        raise DTypeError(
            f"{op}: {q.value} holds quantized weight blocks, which only tr.nn.linear (x @ w.T), tr.nn.embedding "
            f"and .astype read; convert first with .astype(tr.float32)"
        )
    if a == b:
        return a
    if {a, b} == {DType.int32, DType.uint32}:
        raise DTypeError(f"{op}: int32 with uint32 would need int64; cast one side with astype() first")
    if _RANK[a] == _RANK[b]:  # float16 vs float32 cannot tie; ints handled above
        return a
    return a if _RANK[a] > _RANK[b] else b


def scalar_dtype(value: bool | int | float, other: DType) -> DType:
    """The dtype a python scalar takes next to a tensor of `other` (numpy's weak scalars, NEP 50)."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return DType.int32 if other is DType.bool else other
    return other if other.is_float else DType.float32
