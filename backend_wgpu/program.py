"""A compiled program: the dispatches of a scheduled graph, run in one submission.

Compiling builds (or fetches from the device's cache) one pipeline per kernel key, packs
every dispatch's metadata into one uniform buffer, and allocates the temporary pool the
memory plan asked for. Running binds the caller's input buffers and fresh output buffers,
records every dispatch into one compute pass of one command encoder, and submits once.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wgpu

from backend_wgpu.device import Device, DeviceBuffer
from backend_wgpu.kernel import Kernel, Workload
from backend_wgpu.kernels import KERNELS
from ir.graph import Graph
from ir.ops import Op

if TYPE_CHECKING:
    from backend_wgpu.profile import Profile


@dataclass(frozen=True)
class Dispatch:
    """One kernel launch, as tests and tools see it."""

    node: int
    op: str
    kernel: str
    variant: str
    element: int
    inplace: bool
    workgroup_size: tuple[int, int, int]
    workgroup_count: tuple[int, int, int]
    slots: tuple[int, ...]  # buffer slot per storage binding, output last
    key: str
    uniform_offset: int
    metadata: tuple[tuple[str, float | int], ...]


@dataclass
class _Launch:
    pipeline: Any
    layout: Any
    slots: list[int | None]
    uniform_offset: int
    uniform_size: int
    count: tuple[int, int, int]
    static_group: Any = None  # bind group when every slot is a temp (reused on every run)


class Program:
    def __init__(self, graph: Graph, device: Device) -> None:
        assert graph.schedule is not None, "compile a scheduled graph (passes.run_pipeline)"
        self.graph = graph
        self.device = device
        self.slots = graph.schedule.slots
        self.outputs = [graph[o].slot for o in graph.outputs]
        self.dispatches: list[Dispatch] = []
        self.sources: dict[str, str] = {}  # kernel key -> WGSL
        self._launches: list[_Launch] = []
        self.compile_seconds = 0.0
        self.runs = 0
        t0 = time.perf_counter()
        self._build()
        self.compile_seconds = time.perf_counter() - t0

    def _build(self) -> None:
        caps = self.device.caps
        align = caps.uniform_align
        uniform = bytearray()
        dump_dir = os.environ.get("WGJIT_DUMP_WGSL")
        for nid in self.graph.schedule.dispatches:
            node = self.graph[nid]
            kernel: Kernel = KERNELS[node.kernel.name](node, self.graph, caps.max_workgroups_per_dim)
            key = kernel.kernel_key()
            source = kernel.build_kernel()
            self.sources[key] = source.code
            if dump_dir:
                _dump(dump_dir, key, source.code)
            pipeline, layout = self.device.pipeline(key, source.code, source.layout_entries())
            meta = kernel.pack_metadata()
            offset = len(uniform)
            uniform += meta + b"\0" * ((-len(meta)) % align)
            work: Workload = kernel.calculate_dispatch()
            slots = kernel.binding_slots()
            self._launches.append(_Launch(pipeline, layout, slots, offset, len(meta), work.count))
            self.dispatches.append(
                Dispatch(
                    node=nid,
                    op=node.op.value,
                    kernel=kernel.name,
                    variant=kernel.variant_key(),
                    element=kernel.kernel_element(),
                    inplace=kernel.inplace,
                    workgroup_size=work.size,
                    workgroup_count=work.count,
                    slots=tuple(s for s in slots if s is not None),
                    key=key,
                    uniform_offset=offset,
                    metadata=tuple((n, v) for n, _, v in kernel.metadata()),
                )
            )
        dev = self.device.device
        self._uniform = dev.create_buffer_with_data(data=bytes(uniform) or b"\0" * 16, usage=wgpu.BufferUsage.UNIFORM)
        self._temps = {i: self.device.alloc(s.nbytes) for i, s in enumerate(self.slots) if s.kind == "temp"}
        for launch in self._launches:
            if all(s is None or self.slots[s].kind == "temp" for s in launch.slots):
                launch.static_group = self._bind_group(launch, self._temps)

    def _bind_group(self, launch: _Launch, buffers: dict[int, DeviceBuffer]) -> Any:
        entries = []
        for i, slot in enumerate(launch.slots):
            if slot is None:
                res = {"buffer": self._uniform, "offset": launch.uniform_offset, "size": launch.uniform_size}
            else:
                buf = buffers[slot]
                res = {"buffer": buf.buffer, "offset": 0, "size": buf.buffer.size}
            entries.append({"binding": i, "resource": res})
        return self.device.device.create_bind_group(layout=launch.layout, entries=entries)

    @property
    def input_count(self) -> int:
        return sum(1 for n in self.graph if n.op is Op.INPUT)

    @property
    def peak_bytes(self) -> int:
        """Bytes this program allocates: its temporary pool plus its outputs."""
        return sum(s.nbytes for s in self.slots if s.kind != "input")

    def run(self, inputs: list[DeviceBuffer], timestamp_writes: dict | None = None) -> list[DeviceBuffer]:
        """Run on these input buffers (by input index); returns one buffer per output.

        `timestamp_writes` (a wgpu ComputePassTimestampWrites dict) brackets the one compute
        pass with GPU timestamps: the benchmark harness times programs with it.
        """
        dev = self.device
        dev.check_alive()
        buffers: dict[int, DeviceBuffer] = dict(self._temps)
        for i, s in enumerate(self.slots):
            if s.kind == "input":
                buffers[i] = inputs[s.index]
            elif s.kind == "output":
                buffers[i] = dev.alloc(s.nbytes)
        if self._launches:
            encoder = dev.device.create_command_encoder()
            cpass = encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
            for launch in self._launches:
                group = launch.static_group or self._bind_group(launch, buffers)
                cpass.set_pipeline(launch.pipeline)
                cpass.set_bind_group(0, group)
                cpass.dispatch_workgroups(*launch.count)
            cpass.end()
            dev.queue.submit([encoder.finish()])
            dev.stats["submits"] += 1
            dev.stats["dispatches"] += len(self._launches)
        self.runs += 1
        return [buffers[s] for s in self.outputs]

    def summary(self) -> str:
        lines = [
            f"Program: {len(self.dispatches)} dispatches, {len(self.slots)} buffer slots, peak {self.peak_bytes} bytes"
        ]
        for d in self.dispatches:
            ip = " inplace" if d.inplace else ""
            lines.append(
                f"  %{d.node:<4} {d.op:<12} {d.kernel}[{d.variant}] x{d.element}{ip} wg={d.workgroup_size} count={d.workgroup_count} slots={d.slots}"
            )
        return "\n".join(lines)

    def profile(self, inputs: list[DeviceBuffer] | None = None, repeats: int = 3) -> Profile:
        """Per-kernel GPU time (backend_wgpu.profile.Profile), apart from the normal run path."""
        from backend_wgpu.profile import profile_program

        return profile_program(self, inputs, repeats)

    DISPATCH_HEADERS = ("node", "op", "kernel", "variant", "width", "in-place", "workgroup", "count", "slots")

    def dispatch_rows(self) -> list[tuple[Any, ...]]:
        """One row per dispatch, for tables (DISPATCH_HEADERS names the columns)."""
        return [
            (d.node, d.op, d.kernel, d.variant, d.element, "yes" if d.inplace else "", "x".join(map(str, d.workgroup_size)),
             "x".join(map(str, d.workgroup_count)), " ".join(map(str, d.slots)))
            for d in self.dispatches
        ]  # fmt: skip

    def _repr_html_(self) -> str:
        from ir.display import graph_html, html_table

        head = f"<p><b>Program</b>: {len(self.dispatches)} dispatches, {len(self.slots)} buffer slots, peak {self.peak_bytes} bytes</p>"
        return head + graph_html(self.graph) + html_table(self.DISPATCH_HEADERS, self.dispatch_rows())

    def __repr__(self) -> str:
        return f"<Program {len(self.dispatches)} dispatches, {self.input_count} inputs, {len(self.outputs)} outputs>"


def compile_program(graph: Graph, device: Device) -> Program:
    return Program(graph, device)


def _dump(directory: str, key: str, code: str) -> None:
    import hashlib

    os.makedirs(directory, exist_ok=True)
    name = key.split("[")[0] + "_" + hashlib.sha1(key.encode()).hexdigest()[:10] + ".wgsl"
    with open(os.path.join(directory, name), "w") as f:
        f.write(f"// {key}\n{code}")
