"""What every matrix-product kernel shares: (..., M, K) @ (..., K, N) over strided, batch-broadcast operands.

The kernels in this folder: gemm_blocked (register-blocked tiles, the usual GEMM),
gemm_tiled (a plain tiled GEMM for adapters below WebGPU's default workgroup memory),
gemv (M == 1, B contiguous along K) and gemv_split (M == 1, B contiguous along N). All
accumulate in f32. As the core of a fused group (kernels/elementwise/fused.py) a matmul
writes each output element through an elementwise epilogue (bias, activation, residual).
"""

from __future__ import annotations

import math

from backend_wgpu.kernel import Kernel, Meta, index_to_coords
from backend_wgpu.kernels.elementwise.fused import FusedCode, store_value
from backend_wgpu.wgsl import WgslBuilder
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op


def rule_said(node: Node) -> str:
    """For explain: the tuning cache entry that chose this kernel's configuration, or the built-in rule."""
    return node.kernel.param("tuned") or "built-in rule"


class MatmulKernel(Kernel):
    """The operands (A, B, and an epilogue's leaves), the uniform and the batch offsets."""

    takes_epilogue = True  # bias, activation, residual: per output element (wg_epilogue)

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        self.core = node.arg.core if node.op is Op.FUSED else node
        self.code: FusedCode | None = None
        self.ia, self.ib = 0, 1  # operands holding A and B
        if node.op is Op.FUSED:
            self.ia, self.ib = (node.arg.leaf_index(s) for s in self.core.srcs)
            # the epilogue runs per element (wg_epilogue), also where a store writes several lanes
            self.code = FusedCode(self, node.arg, {"in": 1, "out": 1})

    def variant_key(self) -> str:
        return self.choice.variant + (f":{self.code.key()}" if self.code else "")

    def role(self, i: int) -> str:
        return "a" if i == self.ia else "b" if i == self.ib else "epilogue"

    def store(self, b: WgslBuilder, index: str, value: str, lanes: int = 1, indent: str = "") -> None:
        """out[index] = value (`lanes` f32 lanes), through the fused epilogue when there is one."""
        store_value(b, self, self.code, index, value, lanes, indent)

    def _dims(self) -> tuple[int, int, int, int]:
        a = self.operands[self.ia].view
        m, k = a.shape[-2], a.shape[-1]
        n = self.core.shape[-1]
        return math.prod(self.core.shape[:-2]), m, n, k

    def metadata(self) -> Meta:
        batch, m, n, k = self._dims()
        a, b = self.operands[self.ia].view, self.operands[self.ib].view
        nb = len(self.core.shape) - 2
        meta: Meta = [("batch", "u32", batch), ("m", "u32", m), ("n", "u32", n), ("k", "u32", k)]
        meta += [("a_off", "u32", a.offset), ("a_sm", "i32", a.strides[-2]), ("a_sk", "i32", a.strides[-1])]
        meta += [("b_off", "u32", b.offset), ("b_sk", "i32", b.strides[-2]), ("b_sn", "i32", b.strides[-1])]
        meta += [(f"bs{d}", "u32", self.core.shape[d]) for d in range(nb)]
        meta += [(f"ab{d}", "i32", a.strides[d]) for d in range(nb)] + [
            (f"bb{d}", "i32", b.strides[d]) for d in range(nb)
        ]
        return meta + (self.code.metadata() if self.code else [])

    def _batch_offsets(self, b: WgslBuilder, bt: str) -> None:
        nb = len(self.core.shape) - 2
        for line in index_to_coords(bt, [f"bs{d}" for d in range(nb)], "q"):
            b.line(line)
        a_terms = ["i32(params.a_off)"] + [f"i32(q{d}) * params.ab{d}" for d in range(nb)]
        b_terms = ["i32(params.b_off)"] + [f"i32(q{d}) * params.bb{d}" for d in range(nb)]
        b.line(f"let a_base = {' + '.join(a_terms)};")
        b.line(f"let b_base = {' + '.join(b_terms)};")
