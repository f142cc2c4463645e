"""arange: out[i] = start + i * step, computed in f32 for floats and i32 for ints."""

from __future__ import annotations

from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.wgsl import WgslBuilder, vtype


class ArangeKernel(Kernel):
    name = "arange"

    def metadata(self) -> Meta:
        start, step = self.node.arg
        t = "f32" if self.node.dtype.is_float else "i32"
        return [("numel", "u32", self.node.size), ("start", t, start), ("step", t, step)]

    def calculate_dispatch(self) -> Workload:
        wg = self.choice.workgroup[0]
        return Workload.for_workgroups(-(-self.node.size // wg), self.choice.workgroup, self.max_workgroups)

    def render(self, b: WgslBuilder) -> None:
        t = "f32" if self.node.dtype.is_float else "i32"
        b.line(f"let idx = wg * {self.choice.workgroup[0]}u + lidx;")
        b.line("if (idx >= params.numel) { return; }")
        b.line(f"out[idx] = {vtype(self.node.dtype, 1, storage=True)}(params.start + {t}(idx) * params.step);")
