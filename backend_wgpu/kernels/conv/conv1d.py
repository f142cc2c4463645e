"""Direct 1-D convolution (N, Cin, L) * (Cout, Cin/groups, K) -> (N, Cout, Lout), f32 accumulation.

One thread per output element sums over its group's input channels and the K taps (one
loop over both, unrolled when they are many: kernel.LOOP_BUDGET).
Zero padding is a bounds test on the input position, so nothing is copied; stride,
padding, dilation and groups live in the uniform, so one shader serves every shape.
Whisper's front end (two convolutions over 80/384 channels) is the size this is for;
a tiled im2col-GEMM would be the kernel to add for large channel counts.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel, index_to_coords
from backend_wgpu.kernels.blocks import strided_loop, strided_loop_cost
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Conv1dArg


class Conv1dKernel(PerElementKernel):
    name = "conv1d"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return "direct convolution: one thread per output element"

    def extra_metadata(self) -> Meta:
        arg: Conv1dArg = self.node.arg
        x, w = self.operands[0].view, self.operands[1].view
        n, cout, lout = self.node.shape
        meta: Meta = [
            ("batch", "u32", n),
            ("cout", "u32", cout),
            ("lout", "u32", lout),
        ]
        meta += [("cin_g", "u32", w.shape[1]), ("cout_g", "u32", cout // arg.groups), ("taps", "u32", w.shape[2])]
        meta += [
            ("length", "i32", x.shape[2]),
            ("stride", "i32", arg.stride),
            ("pad", "i32", arg.padding),
            ("dil", "i32", arg.dilation),
        ]
        meta += [("x_off", "u32", x.offset)] + [(f"xs{d}", "i32", s) for d, s in enumerate(x.strides)]
        meta += [("w_off", "u32", w.offset)] + [(f"ws{d}", "i32", s) for d, s in enumerate(w.strides)]
        return meta

    def render(self, b: WgslBuilder) -> None:
        out_t = vtype(self.node.dtype, 1, storage=True)
        idx = self.thread_index(b)
        for line in index_to_coords(idx, ["batch", "cout", "lout"]):
            b.line(line)
        b.line("let group = c1 / params.cout_g;")
        b.line("let x_base = i32(params.x_off) + i32(c0) * params.xs0 + i32(group * params.cin_g) * params.xs1;")
        b.line("let w_base = i32(params.w_off) + i32(c1) * params.ws0;")
        b.line("let start = i32(c2) * params.stride - params.pad;")
        b.line("var acc = 0.0;")

        def tap(t: str, _copy: int, indent: str) -> None:
            """One (input channel, tap) pair: channel-major, as the nested loops it replaces."""
            b.line(f"{indent}let ci = {t} / params.taps;")
            b.line(f"{indent}let pos = start + i32({t} % params.taps) * params.dil;")
            # a padded position is a zero that still multiplies its weight: 0 * inf is NaN, as in
            # numpy and the interpreter (skipping the tap would hide an infinite or NaN weight)
            b.line(f"{indent}var xv = 0.0;")
            b.line(f"{indent}if (pos >= 0 && pos < params.length) {{")
            b.line(f"{indent}  xv = f32(in0[u32(x_base + i32(ci) * params.xs1 + pos * params.xs2)]);")
            b.line(f"{indent}}}")
            b.line(
                f"{indent}let wv = f32(in1[u32(w_base + i32(ci) * params.ws1 + i32({t} % params.taps) * params.ws2)]);"
            )
            b.line(f"{indent}acc = fma(xv, wv, acc);")

        # one loop over channels x taps, not two nested ones: each inner loop's exit test would
        # cost an iteration of the loop budget too (kernel.LOOP_BUDGET)
        strided_loop(b, "t", "0u", "params.cin_g * params.taps", "1u", self.unroll, tap)
        b.line(f"out[{idx}] = {out_t}(acc);")

    @property
    def unroll(self) -> int:
        return self.choice.param("unroll", 1)

    def loop_iterations(self) -> int:
        _, cin_g, taps = self.operands[1].view.shape
        return strided_loop_cost(cin_g * taps, 1, self.unroll)
