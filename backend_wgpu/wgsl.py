"""A small WGSL builder: bindings (which also make the bind-group layout), helpers, body.

Also the tables that map dtypes to WGSL types; kernels compose code from these instead of
formatting whole shaders by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ir.dtypes import DType

# what makes WGSL need `enable f16;`: the f16 type, its vector/matrix aliases, or an f16 literal (`1.5h`)
_F16_TOKEN = re.compile(r"\bf16\b|\b(?:vec[234]|mat[234]x[234])h\b|(?<![\w.])(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?h\b")


def uses_f16(code: str) -> bool:
    """Does this WGSL use float16 (comments aside)? Only then may a shader say `enable f16;`, which
    adapters without shader-f16 (Mesa's GL adapter, many mobile GPUs) refuse to compile."""
    return any(_F16_TOKEN.search(line.split("//", 1)[0]) for line in code.splitlines())


def vtype(dtype: DType, width: int = 1, storage: bool = False) -> str:
    """WGSL type of one element of `width` lanes: f32, vec4<f16>, vec2<u32> (bool stored as u32)."""
    scalar = dtype.wgsl_storage if storage else dtype.wgsl
    return scalar if width == 1 else f"vec{width}<{scalar}>"


def f32v(width: int) -> str:
    """f32 or vec{width}<f32>: `width` lanes of the f32 arithmetic most kernels compute in."""
    return vtype(DType.float32, width)


def load_cast(expr: str, dtype: DType, width: int) -> str:
    """Turn a loaded storage value into an arithmetic value (u32 -> bool for bool tensors)."""
    if dtype is DType.bool:
        return f"({expr} != {vtype(DType.uint32, width)}(0u))"
    return expr


def store_cast(expr: str, dtype: DType, width: int) -> str:
    """Turn an arithmetic value into its storage form (bool -> u32)."""
    if dtype is DType.bool:
        u = vtype(DType.uint32, width)
        return f"select({u}(0u), {u}(1u), {expr})"
    return expr


@dataclass(frozen=True)
class Binding:
    name: str
    kind: str  # "read" | "read_write" | "uniform"
    type: str  # element type for storage arrays, struct name for uniforms


@dataclass(frozen=True)
class KernelSource:
    code: str
    bindings: tuple[Binding, ...]

    def layout_entries(self) -> list[dict]:
        import wgpu

        kinds = {
            "read": wgpu.BufferBindingType.read_only_storage,
            "read_write": wgpu.BufferBindingType.storage,
            "uniform": wgpu.BufferBindingType.uniform,
        }
        return [
            {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kinds[b.kind]}}
            for i, b in enumerate(self.bindings)
        ]


@dataclass
class WgslBuilder:
    bindings: list[Binding] = field(default_factory=list)
    meta_fields: list[tuple[str, str]] = field(default_factory=list)
    helpers: dict[str, str] = field(default_factory=dict)
    shared: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    uses_f16: bool = False
    builtins: list[str] = field(default_factory=list)  # extra entry-point parameters (subgroup ids)

    def storage(self, name: str, elem_type: str, read_only: bool = True) -> None:
        self.uses_f16 |= uses_f16(elem_type)
        self.bindings.append(Binding(name, "read" if read_only else "read_write", elem_type))

    def uniform_meta(self, fields: list[tuple[str, str]]) -> None:
        self.meta_fields = fields or [("unused", "u32")]
        self.bindings.append(Binding("params", "uniform", "Params"))

    def helper(self, name: str, code: str) -> None:
        self.helpers.setdefault(name, code)

    def workgroup_var(self, decl: str) -> None:
        self.uses_f16 |= uses_f16(decl)
        self.shared.append(decl)

    def builtin(self, decl: str) -> None:
        """Add an entry-point parameter, e.g. `@builtin(subgroup_size) sg_size: u32`."""
        if decl not in self.builtins:
            self.builtins.append(decl)

    def line(self, text: str) -> None:
        self.body.append(text)

    def build(self, workgroup: tuple[int, int, int]) -> KernelSource:
        out: list[str] = []
        if self.uses_f16 or any(uses_f16(h) for h in self.helpers.values()) or any(uses_f16(b) for b in self.body):
            out.append("enable f16;")
        out.append("struct Params {")
        out.extend(f"  {n}: {t}," for n, t in self.meta_fields)
        out.append("};")
        for i, b in enumerate(self.bindings):
            if b.kind == "uniform":
                out.append(f"@group(0) @binding({i}) var<uniform> {b.name}: {b.type};")
            else:
                access = "read" if b.kind == "read" else "read_write"
                out.append(f"@group(0) @binding({i}) var<storage, {access}> {b.name}: array<{b.type}>;")
        out.extend(f"var<workgroup> {d};" for d in self.shared)
        out.extend(self.helpers.values())
        x, y, z = workgroup
        out.append(f"@compute @workgroup_size({x}, {y}, {z})")
        out.append(
            "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,"
            " @builtin(local_invocation_index) lidx: u32, @builtin(local_invocation_id) lid: vec3<u32>"
            + "".join(f", {d}" for d in self.builtins)
            + ") {"
        )
        out.append("  let wg = wid.x + wid.y * nwg.x + wid.z * nwg.x * nwg.y;  // folded workgroup index")
        out.extend("  " + line for line in self.body)
        out.append("}")
        return KernelSource("\n".join(out) + "\n", tuple(self.bindings))
