"""One kernel for every elementwise op: unary, binary, where, casts and copies.

Each thread computes one KernelElement (1, 2 or 4 lanes) of the contiguous output. Each
operand is read in the cheapest way its view allows:
  contig  - the view is contiguous: a direct (vector) load at idx + offset
  vector  - strided outer dims, unit stride inner dim: address from coordinates, vector load
  splat   - broadcast along the inner dim (stride 0): one scalar load, splatted
  strided - scalar element, any strides
"""

from __future__ import annotations

from backend_wgpu.kernel import Kernel, Meta, Workload, address, index_to_coords
from backend_wgpu.kernels import expr
from backend_wgpu.wgsl import WgslBuilder, load_cast, store_cast, vtype
from ir.ops import Op


class ElementwiseKernel(Kernel):
    name = "elementwise"

    def access(self, i: int) -> str:
        w = self.kernel_element()
        view = self.operands[i].view
        if self.reads_output(i) or view.is_contiguous:
            return "contig"
        if w > 1:
            return "splat" if view.strides[-1] == 0 else "vector"
        return "strided"

    def variant_key(self) -> str:
        return self.choice.variant + ":" + ",".join(self.access(i) for i in range(len(self.operands)))

    def operand_type(self, i: int) -> str:
        width = self.kernel_element() if self.access(i) in ("contig", "vector") else 1
        return vtype(self.operands[i].dtype, width, storage=True)

    def _needs_coords(self) -> bool:
        return any(self.access(i) != "contig" for i in range(len(self.operands)))

    def metadata(self) -> Meta:
        w = self.kernel_element()
        meta: Meta = [("numel", "u32", self.node.size // w)]
        coords = self._needs_coords()
        if coords:
            meta += [(f"shape{d}", "u32", n) for d, n in enumerate(self.node.shape)]
        for i, op in enumerate(self.operands):
            mode = self.access(i)
            if mode == "contig":
                meta.append((f"off{i}", "u32", op.view.offset // w if not self.reads_output(i) else 0))
            else:
                meta.append((f"off{i}", "u32", op.view.offset))
                meta += [(f"st{i}_{d}", "i32", s) for d, s in enumerate(op.view.strides)]
        return meta

    def calculate_dispatch(self) -> Workload:
        wg = self.choice.workgroup[0]
        return Workload.for_workgroups(
            -(-(self.node.size // self.kernel_element()) // wg), self.choice.workgroup, self.max_workgroups
        )

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        node = self.node
        rank = len(node.shape)
        b.line(f"let idx = wg * {self.choice.workgroup[0]}u + lidx;")
        b.line("if (idx >= params.numel) { return; }")
        if self._needs_coords():
            b.line(f"let e = idx * {w}u;")
            for line in index_to_coords("e", [f"shape{d}" for d in range(rank)]):
                b.line(line)
        coords = [f"c{d}" for d in range(rank)]
        args = []
        for i, op in enumerate(self.operands):
            mode = self.access(i)
            name = self.in_name(i)
            if mode == "contig":
                raw = f"{name}[idx + params.off{i}]"
            else:
                addr = address(f"off{i}", [f"st{i}_{d}" for d in range(rank)], coords)
                b.line(f"let a{i} = {addr};")
                if mode == "vector":
                    raw = f"{name}[u32(a{i}) / {w}u]"
                elif mode == "splat":
                    raw = f"{vtype(op.dtype, w, storage=True)}({name}[u32(a{i})])"
                else:
                    raw = f"{name}[u32(a{i})]"
            b.line(f"let v{i} = {load_cast(raw, op.dtype, w)};")
            args.append(f"v{i}")
        b.line(f"out[idx] = {store_cast(self._expression(args, b), node.dtype, w)};")

    def _expression(self, args: list[str], b: WgslBuilder) -> str:
        node = self.node
        w = self.kernel_element()
        if node.op is Op.CAST:
            to = vtype(node.dtype, w)
            src = self.operands[0].dtype
            if src.is_float and node.dtype.is_int:  # saturating (WGSL) and NaN -> 0 (documented)
                return f"select({to}({args[0]}), {to}(0), {expr.isnan(args[0], vtype(src, w))})"
            return f"{to}({args[0]})"
        # comparisons and where compute in the operands' type; everything else in the output's
        math_dtype = (
            self.operands[-1].dtype if node.op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.WHERE) else node.dtype
        )
        t = vtype(math_dtype, w)
        for name, code in expr.helpers(node.op, t, math_dtype).items():
            b.helper(name, code)
        return expr.expression(node.op, args, t, math_dtype)
