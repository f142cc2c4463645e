"""arange: out[i] = start + i * step, computed in f32 for floats and i32 for ints."""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel
from backend_wgpu.wgsl import WgslBuilder, vtype


class ArangeKernel(PerElementKernel):
    name = "arange"

    def extra_metadata(self) -> Meta:
        start, step = self.node.arg
        t = "f32" if self.node.dtype.is_float else "i32"
        return [("start", t, start), ("step", t, step)]

    def render(self, b: WgslBuilder) -> None:
        t = "f32" if self.node.dtype.is_float else "i32"
        idx = self.thread_index(b)
        b.line(f"out[{idx}] = {vtype(self.node.dtype, 1, storage=True)}(params.start + {t}({idx}) * params.step);")
