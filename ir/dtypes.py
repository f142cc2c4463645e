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

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        """Bytes per element in a GPU buffer (bool is stored as u32: WGSL has no bool storage)."""
        return 4 if self is DType.bool else self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float16)

    @property
    def is_int(self) -> bool:
        return self in (DType.int32, DType.uint32)

    @property
    def family(self) -> str:
        """ "float", "int" or "bool": the kinds of operand an op's WGSL is written for (ir/optable)."""
        return "float" if self.is_float else "int" if self.is_int else "bool"

    @property
    def wgsl(self) -> str:
        """The scalar type used for arithmetic in WGSL."""
        return _WGSL[self]

    @property
    def wgsl_storage(self) -> str:
        """The scalar type stored in a buffer."""
        return "u32" if self is DType.bool else _WGSL[self]

    def __repr__(self) -> str:
        return f"tr.{self.value}"

    __str__ = __repr__


_WGSL = {
    DType.float32: "f32",
    DType.float16: "f16",
    DType.int32: "i32",
    DType.uint32: "u32",
    DType.bool: "bool",
}

float32 = DType.float32
float16 = DType.float16
int32 = DType.int32
uint32 = DType.uint32
bool_ = DType.bool

# Promotion lattice over the supported types, as numpy does it (int32 with uint32 would be
# int64 in numpy, which we cannot store: that pair is refused rather than silently narrowed).
_RANK = {DType.bool: 0, DType.uint32: 1, DType.int32: 1, DType.float16: 2, DType.float32: 3}


def from_numpy(dt: np.dtype | type) -> DType:
    """The DType of a numpy dtype that can be stored as it is."""
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
