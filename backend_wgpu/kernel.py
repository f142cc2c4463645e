"""The Kernel contract (ratchet's Kernel + KernelRenderable, in Python).

A Kernel is one concrete GPU kernel for one node. It says its KernelElement, its metadata
(the uniform: shapes, strides, sizes; shapes never enter the WGSL, so one shader serves
every shape), its dispatch size, its cache key, which bindings it registers (the
bind-group layout is derived from them), and how it renders its body.

Before any code exists the passes ask the kernel class what it allows (class attributes
and classmethods, with defaults here so a kernel states only what differs): the widest
KernelElement for a node's operand views (passes.vectorize), whether it renders a fused
prologue or epilogue (passes.fuse), which operands it may overwrite in place
(passes.inplace), and the one-line reason `explain` prints (tracer/inspect/why.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from backend_wgpu.wgsl import KernelSource, WgslBuilder, vtype
from ir.errors import DeviceError
from ir.graph import Graph
from ir.node import KernelChoice, Node
from ir.ops import Op
from ir.symbolic import Sym
from ir.view import View

# lavapipe gives each invocation one budget of loop iterations for the whole shader; past it every
# loop exits early and the kernel silently computes less (tests/probe_loop_limit.py: a loop of n
# iterations costs n + 1, nested and sequential loops share the budget). Every kernel keeps the sum
# over its loops within it on every adapter (Kernel.loop_iterations, checked when it is built).
LOOP_BUDGET = 65535


@dataclass(frozen=True)
class Workload:
    size: tuple[int, int, int]  # workgroup size
    count: tuple[int, int, int]  # workgroup count, folded into y/z past the per-dim limit

    @staticmethod
    def for_workgroups(total: int, size: tuple[int, int, int], limit: int = 65535) -> Workload:
        total = max(total, 1)
        if total <= limit:
            return Workload(size, (total, 1, 1))
        y = math.ceil(total / limit)
        if y <= limit:
            return Workload(size, (math.ceil(total / y), y, 1))
        z = math.ceil(y / limit)
        return Workload(size, (limit, math.ceil(total / (limit * z)), z))


@dataclass(frozen=True)
class Operand:
    owner: Node  # the node whose buffer is read
    view: View  # how this operand reads it
    slot: int
    dtype: object


Meta = list[tuple[str, str, float | int]]  # (field, wgsl scalar type, value)


class Kernel:
    """Base class: subclasses set `name` and implement metadata, dispatch and render."""

    name: ClassVar[str] = ""

    # --- what the passes ask (class-level: no instance, no device) ------------------------
    # passes.fuse: renders an elementwise prologue per element it reads, an epilogue per element it writes
    takes_prologue: ClassVar[bool] = False
    takes_epilogue: ClassVar[bool] = False
    # passes.vectorize: the epilogue is evaluated KernelElement lanes at a time (the others call
    # a per-element wg_epilogue, kernels/elementwise/fused.py), so its terms must allow the width too
    vector_epilogue: ClassVar[bool] = False
    # passes.inplace: threads move elements (each writes where another may still read), so no
    # other operand may read the overwritten buffer at all
    inplace_exclusive: ClassVar[bool] = False
    # explain: the KernelElement runs along the matmul's k (a row times a matrix), not the output's last dim
    width_along_k: ClassVar[bool] = False

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        """The widest KernelElement (4, 2 or 1) for `node` when its operands are read through `views`."""
        return 1

    @classmethod
    def widest_group(cls, node: Node, views: list[View]) -> int | None:
        """For a FUSED node the kernel runs in its own way: its widest KernelElement, given its
        leaves' views; None (the default) lets passes.vectorize apply the fused-group rule."""
        return None

    @classmethod
    def inplace_operands(cls, node: Node) -> tuple[int, ...]:
        """The operands whose buffer the output may overwrite (passes.inplace checks liveness and views)."""
        return ()

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        """One line for `explain`: what this kernel does with the node ('' says nothing)."""
        return ""

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        """For `explain`: what kept node.kernel.element (below 4) from being wider."""
        return "" if node.kernel.element > 1 else f"{cls.name} reads scalars"

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        assert node.kernel is not None
        self.node = node
        self.choice: KernelChoice = node.kernel
        self.max_workgroups = max_workgroups
        self.operands: list[Operand] = []
        for s in node.srcs:
            src = graph[s]
            owner, view = (graph[src.srcs[0]], src.arg) if src.op is Op.VIEW else (src, View.contiguous(src.shape))
            self.operands.append(Operand(owner, view, owner.slot, src.dtype))
        slots = graph.schedule.slots if graph.schedule is not None else ()
        # slots that are ranges of the program's arena buffer (passes.plan_memory)
        self.arena_slots = frozenset(i for i, s in enumerate(slots) if s.offset is not None)

    # --- the contract ----------------------------------------------------------------
    def kernel_element(self) -> int:
        return self.choice.element

    @property
    def inplace(self) -> bool:
        return self.node.inplace is not None

    def reads_output(self, i: int) -> bool:
        """Operand i lives in the output buffer (in-place): it is read through `out`."""
        return self.inplace and self.operands[i].slot == self.node.slot

    def metadata(self) -> Meta:
        raise NotImplementedError

    def calculate_dispatch(self) -> Workload:
        raise NotImplementedError

    def variant_key(self) -> str:
        """What besides name/dtypes/width/workgroup/inplace changes the WGSL."""
        return self.choice.variant

    def kernel_key(self) -> str:
        dtypes = ",".join(o.dtype.value for o in self.operands)
        meta = ",".join(n for n, _, _ in self.metadata())
        wg = "x".join(map(str, self.choice.workgroup))
        # which operands are read through `out` changes the WGSL, not just whether any is
        ip = ",".join(str(i) for i in range(len(self.operands)) if self.reads_output(i)) if self.inplace else ""
        # a fused group's node ids (the "group" param) name it for tools, and "tuned" says which tuning
        # cache entry chose it (for explain): neither changes the code
        extra = "".join(f" {k}={v}" for k, v in self.choice.params if k not in ("group", "tuned"))
        rw = ",".join(
            str(i) for i in range(len(self.operands)) if self.writable_operand(i) and not self.reads_output(i)
        )
        extra += f" rw({rw})" if rw else ""
        return f"{self.name}[{self.variant_key()}]({dtypes})->{self.node.dtype.value} w{self.kernel_element()} wg{wg} ip{int(self.inplace)}{ip and f'({ip})'}{extra} m[{meta}]"

    def operand_type(self, i: int) -> str:
        """Storage element type of operand i's binding (vector or scalar)."""
        return vtype(self.operands[i].dtype, 1, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, self.kernel_element(), storage=True)

    def writable_operand(self, i: int) -> bool:
        """Operand i is bound read_write: it and the output are ranges of the arena buffer.

        WebGPU forbids one buffer bound read-only and writable in a dispatch, whatever the
        ranges; two writable ranges that do not overlap are allowed.
        """
        return self.node.slot in self.arena_slots and self.operands[i].slot in self.arena_slots

    def register_bindings(self, b: WgslBuilder) -> None:
        for i in range(len(self.operands)):
            if not self.reads_output(i):
                b.storage(f"in{i}", self.operand_type(i), read_only=not self.writable_operand(i))
        b.storage("out", self.output_type(), read_only=False)
        b.uniform_meta([(n, t) for n, t, _ in self.metadata()])

    def binding_slots(self) -> list[int | None]:
        """The buffer slot behind each registered binding, None for the uniform."""
        slots: list[int | None] = [o.slot for i, o in enumerate(self.operands) if not self.reads_output(i)]
        return slots + [self.node.slot, None]

    def render(self, b: WgslBuilder) -> None:
        raise NotImplementedError

    def unchecked(self) -> bool:
        """True when every index this kernel forms is in range by construction, so its WGSL may be
        compiled without the bounds clamps wgpu adds to each array access (Device.pipeline)."""
        return False

    def loop_iterations(self) -> int:
        """The most loop iterations one thread runs, exit tests included (see LOOP_BUDGET)."""
        return 0

    def check_loop_budget(self) -> None:
        """A kernel whose threads would run past LOOP_BUDGET is a selection bug: fail loudly, never short."""
        n = self.loop_iterations()
        if n > LOOP_BUDGET:
            raise DeviceError(
                f"{self.node.op.value} {self.node.shape}: kernel {self.name}[{self.choice.variant}] would run {n} "
                f"loop iterations per thread, past the {LOOP_BUDGET} some adapters (lavapipe) allow, "
                "and wgjit cannot split this kernel's work further"
            )

    def build_kernel(self) -> KernelSource:
        self.check_loop_budget()
        b = WgslBuilder()
        self.register_bindings(b)
        self.render(b)
        return b.build(self.choice.workgroup)

    def in_name(self, i: int) -> str:
        return "out" if self.reads_output(i) else f"in{i}"

    def pack_metadata(self) -> tuple[bytes, list[RuntimeField]]:
        """The uniform's bytes, and where runtime integers (ir.symbolic.Sym) go: a 0 is packed there for now."""
        raw = bytearray()
        runtime: list[RuntimeField] = []
        for _, t, v in self.metadata() or [("unused", "u32", 0)]:
            if isinstance(v, Sym):
                runtime.append(RuntimeField(len(raw), t, v))
                v = 0
            raw += np.array(v, dtype=_FIELD_TYPES[t]).tobytes()
        raw += b"\0" * ((-len(raw)) % 16)
        return bytes(raw), runtime


_FIELD_TYPES = {"u32": np.uint32, "i32": np.int32, "f32": np.float32}


@dataclass(frozen=True)
class RuntimeField:
    """A uniform field whose value is a runtime integer: its byte offset in the kernel's metadata."""

    offset: int
    type: str  # "u32" or "i32"
    value: Sym


class PerElementKernel(Kernel):
    """One thread per output element (or KernelElement): the `numel` bound, the dispatch, the thread index.

    Subclasses give `extra_metadata` (after `numel`) and render after `thread_index(b)`;
    `threads()` is the output's size in KernelElements unless they say otherwise.
    """

    def threads(self) -> int:
        return self.node.size // self.kernel_element()

    def extra_metadata(self) -> Meta:
        return []

    def metadata(self) -> Meta:
        return [("numel", "u32", self.threads())] + self.extra_metadata()

    def calculate_dispatch(self) -> Workload:
        wg = self.choice.workgroup[0]
        return Workload.for_workgroups(-(-self.threads() // wg), self.choice.workgroup, self.max_workgroups)

    def thread_index(self, b: WgslBuilder) -> str:
        """Emit `let idx` (this thread's element) and the return past the last one; returns "idx"."""
        b.line(f"let idx = wg * {self.choice.workgroup[0]}u + lidx;")
        b.line("if (idx >= params.numel) { return; }")
        return "idx"


def index_to_coords(var: str, shape_fields: list[str], prefix: str = "c") -> list[str]:
    """WGSL lines that split linear index `var` into coordinates c0..c{r-1} (row-major)."""
    lines = [f"var rem_{prefix} = {var};"]
    for d in reversed(range(len(shape_fields))):
        lines.append(f"let {prefix}{d} = rem_{prefix} % params.{shape_fields[d]};")
        lines.append(f"rem_{prefix} = rem_{prefix} / params.{shape_fields[d]};")
    return lines


def address(offset_field: str, stride_fields: list[str], coords: list[str]) -> str:
    """WGSL i32 expression: offset + sum(coord * stride)."""
    terms = [f"i32(params.{offset_field})"] + [f"i32({c}) * params.{s}" for c, s in zip(coords, stride_fields)]
    return " + ".join(terms)
