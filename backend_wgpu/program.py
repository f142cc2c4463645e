"""A compiled program: the dispatches of a scheduled graph, run in one submission.

Compiling builds (or fetches from the device's cache) one pipeline per kernel key, packs
every dispatch's metadata into one uniform buffer, and allocates the temporaries the
memory plan asked for (pool buffers, or one arena buffer whose ranges the slots are). Running binds the caller's input buffers and output buffers,
records every dispatch into one compute pass of one command encoder, and submits once.

Replaying is cheap: pipelines, the uniform and the temporaries never change, so the bind
groups of dispatches that touch only temporaries are built once; the others are cached
by the identity of the input/output buffers they bind (a run on the same buffers builds
none). The output buffers of the last SPARE_OUTPUTS runs are reused once nothing holds
the DeviceBuffer a run returned for them, so outputs the caller holds are never
overwritten; programs keep one DeviceBuffer object per GPU buffer so the test is exact.
`trim()` drops what a program keeps for replays (its last bind groups and spare outputs).
"""

from __future__ import annotations

import operator
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wgpu

from backend_wgpu.device import Device, DeviceBuffer
from backend_wgpu.kernel import Kernel, Workload
from backend_wgpu.kernels import KERNELS
from ir.errors import DeviceError
from ir.graph import Graph
from ir.ops import Op

if TYPE_CHECKING:
    from backend_wgpu.profile import Profile


SPARE_OUTPUTS = 4  # per output slot, how many recent runs' buffers a program may reuse


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
    group: tuple[int, ...] = ()  # ids of the nodes a fused kernel holds (ir.fusion.FusedArg.holds)


@dataclass
class _Launch:
    pipeline: Any
    layout: Any
    slots: list[int | None]
    uniform_offset: int
    uniform_size: int
    count: tuple[int, int, int]
    static_group: Any = None  # bind group when every slot is a temp (reused on every run)
    io_key: Callable[[list[Any]], Any] | None = None  # picks the input/output GPU buffers it binds from a run's list
    cached_key: Any = None  # the GPU buffers its cached group binds (held, so their ids stay unique)
    cached_group: Any = None


class Program:
    def __init__(
        self,
        graph: Graph,
        device: Device,
        *,
        pass_seconds: dict[str, float] | None = None,
        stages: list[tuple[str, Graph]] | None = None,
    ) -> None:
        assert graph.schedule is not None, "compile a scheduled graph (passes.run_pipeline)"
        self.graph = graph
        self.device = device
        # what the pass pipeline reported (for inspection): seconds per pass, and the graph
        # after each pass when the pipeline kept them (empty otherwise)
        self.pass_seconds: dict[str, float] = dict(pass_seconds or {})
        self.stages: list[tuple[str, Graph]] = list(stages or [])
        self.slots = graph.schedule.slots
        self.outputs = [graph[o].slot for o in graph.outputs]
        # an output slot may be larger than its tensor (it hosted temporaries first)
        self._output_bytes = {graph[o].slot: graph[o].nbytes for o in graph.outputs}
        self.dispatches: list[Dispatch] = []
        self.sources: dict[str, str] = {}  # kernel key -> WGSL
        self._launches: list[_Launch] = []
        self.compile_seconds = 0.0
        self.runs = 0
        t0 = time.perf_counter()
        with device.guard("compiling a program"):
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
                    group=node.arg.holds if node.op is Op.FUSED else (),
                )
            )
        dev = self.device.device
        self._uniform = dev.create_buffer_with_data(data=bytes(uniform) or b"\0" * 16, usage=wgpu.BufferUsage.UNIFORM)
        self._temps = self._allocate_temps()
        for launch in self._launches:
            io_slots = tuple(dict.fromkeys(s for s in launch.slots if s is not None and self.slots[s].kind != "temp"))
            if not io_slots:
                launch.static_group = self._bind_group(launch, self._temps)
            else:
                launch.io_key = operator.itemgetter(*io_slots)
        # for run(): every slot's GPU buffer, temporaries filled in; inputs and outputs per run
        self._raw_template: list[Any] = [
            self._temps[i].buffer if i in self._temps else None for i in range(len(self.slots))
        ]
        self._input_slots = [(i, s.index) for i, s in enumerate(self.slots) if s.kind == "input"]
        self._output_slots = [i for i, s in enumerate(self.slots) if s.kind == "output"]
        self._io_slots = [i for i, s in enumerate(self.slots) if s.kind != "temp"]
        # output slot -> the last runs' (DeviceBuffer, its GPU buffer), most recent last
        self._spare: dict[int, list[tuple[weakref.ref, Any]]] = {}
        self._last_io: tuple[Any, ...] | None = None
        self._last_groups: list[Any] = []
        self._run_pipelines = [launch.pipeline for launch in self._launches]
        self._run_counts = [launch.count for launch in self._launches]

    @property
    def temp_bytes(self) -> int:
        """GPU bytes this program holds for as long as it lives: its temporaries (arena once)."""
        return sum({id(b.buffer): b.buffer.size for b in self._temps.values()}.values())

    def _allocate_temps(self) -> dict[int, DeviceBuffer]:
        """One buffer per pooled temporary slot, and one arena buffer holding the ranges of the others."""
        temps: dict[int, DeviceBuffer] = {}
        ranges = {i: s for i, s in enumerate(self.slots) if s.kind == "temp" and s.offset is not None}
        if ranges:
            size = max(s.offset + max(4, (s.nbytes + 3) & ~3) for s in ranges.values())
            arena = self.device.alloc(size)
            for i, s in ranges.items():
                temps[i] = DeviceBuffer(arena.buffer, s.nbytes, self.device, s.offset, max(4, (s.nbytes + 3) & ~3))
        for i, s in enumerate(self.slots):
            if s.kind == "temp" and s.offset is None:
                temps[i] = self.device.alloc(s.nbytes)
        return temps

    def _bind_group(self, launch: _Launch, buffers: dict[int, DeviceBuffer]) -> Any:
        """A bind group for `launch` over these buffers (by slot)."""
        entries = []
        for i, slot in enumerate(launch.slots):
            if slot is None:
                res = {"buffer": self._uniform, "offset": launch.uniform_offset, "size": launch.uniform_size}
            else:
                buf = buffers[slot]
                res = {"buffer": buf.buffer, "offset": buf.offset, "size": buf.binding_size}
            entries.append({"binding": i, "resource": res})
        self.device.stats["bind_groups_created"] += 1
        return self.device.device.create_bind_group(layout=launch.layout, entries=entries)

    @property
    def input_count(self) -> int:
        return sum(1 for n in self.graph if n.op is Op.INPUT)

    @property
    def peak_bytes(self) -> int:
        """Bytes this program allocates: its temporaries (the arena counted once) plus its outputs."""
        arena = max((s.offset + max(4, (s.nbytes + 3) & ~3) for s in self.slots if s.offset is not None), default=0)
        return arena + sum(s.nbytes for s in self.slots if s.kind != "input" and s.offset is None)

    def run(self, inputs: list[DeviceBuffer], timestamp_writes: dict | None = None) -> list[DeviceBuffer]:
        """Run on these input buffers (by input index); returns one buffer per output.

        `timestamp_writes` (a wgpu ComputePassTimestampWrites dict) brackets the one compute
        pass with GPU timestamps: the benchmark harness times programs with it.
        """
        dev = self.device
        with dev.guard("running a program"):
            return self._run(inputs, timestamp_writes)

    def _run(self, inputs: list[DeviceBuffer], timestamp_writes: dict | None) -> list[DeviceBuffer]:
        dev = self.device
        for buf in inputs:
            if buf.device is not dev:  # a tensor realized before tr.reset_device()
                buf.device.check_alive()
                raise DeviceError("an input tensor lives on another GPU device than this program; recreate it")
        raw = list(self._raw_template)
        for slot, index in self._input_slots:
            raw[slot] = inputs[index].buffer
        outs: dict[int, DeviceBuffer] = {}
        for slot in self._output_slots:
            buf = outs[slot] = self._output_buffer(slot)
            raw[slot] = buf.buffer
        if self._launches:
            groups = self._groups(raw, lambda: self._slot_buffers(inputs, outs))
            encoder = dev.device.create_command_encoder()
            cpass = encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
            set_pipeline, set_bind_group, dispatch = cpass.set_pipeline, cpass.set_bind_group, cpass.dispatch_workgroups
            last = None
            for pipeline, group, (x, y, z) in zip(self._run_pipelines, groups, self._run_counts, strict=True):
                if pipeline is not last:  # consecutive dispatches of one kernel keep it bound
                    set_pipeline(pipeline)
                    last = pipeline
                set_bind_group(0, group)
                dispatch(x, y, z)
            cpass.end()
            dev.queue.submit([encoder.finish()])
            dev.stats["submits"] += 1
            dev.stats["dispatches"] += len(self._launches)
        self.runs += 1
        # an output in an input slot (an in-place chain over a donated input) keeps that input's DeviceBuffer
        return [outs[s] if s in outs else inputs[self.slots[s].index] for s in self.outputs]

    def _output_buffer(self, slot: int) -> DeviceBuffer:
        """The buffer for an output slot: a recent run's that nothing holds any more, else a new one."""
        recent = self._spare.setdefault(slot, [])
        nbytes = self._output_bytes[slot]
        free = next(
            (k for k, (ref, raw) in enumerate(recent) if ref() is None and not getattr(raw, "_wgjit_destroyed", False)),
            None,
        )
        if free is not None:
            buf = DeviceBuffer(recent.pop(free)[1], nbytes, self.device)
            self.device.stats["outputs_reused"] += 1
        else:
            buf = self.device.alloc(self.slots[slot].nbytes)
            buf.nbytes = nbytes  # the slot may be larger than the tensor (it hosted temporaries)
        recent.append((weakref.ref(buf), buf.buffer))
        del recent[:-SPARE_OUTPUTS]
        return buf

    def _slot_buffers(self, inputs: list[DeviceBuffer], outs: dict[int, DeviceBuffer]) -> dict[int, DeviceBuffer]:
        buffers = dict(self._temps)
        buffers.update(outs)
        buffers.update((slot, inputs[index]) for slot, index in self._input_slots)
        return buffers

    def _groups(self, raw: list[Any], slot_buffers: Callable[[], dict[int, DeviceBuffer]]) -> list[Any]:
        """Every launch's bind group for these GPU buffers (by slot), built only where they changed."""
        io = tuple(raw[s] for s in self._io_slots)
        if io == self._last_io:
            return self._last_groups
        groups = []
        buffers: dict[int, DeviceBuffer] | None = None
        for launch in self._launches:
            if launch.static_group is not None:
                groups.append(launch.static_group)
                continue
            key = launch.io_key(raw)
            if launch.cached_group is None or key != launch.cached_key:
                buffers = buffers if buffers is not None else slot_buffers()
                launch.cached_group = self._bind_group(launch, buffers)
                launch.cached_key = key
            groups.append(launch.cached_group)
        self._last_io, self._last_groups = io, groups
        return groups

    def trim(self) -> None:
        """Forget the buffers kept for replays (cached bind groups, spare outputs)."""
        self._spare.clear()
        self._last_io, self._last_groups = None, []
        for launch in self._launches:
            launch.cached_key = launch.cached_group = None

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
