"""A compiled program: the dispatches of a scheduled graph, run in one submission.

Compiling builds (or fetches from the device's cache) one pipeline per kernel key, packs
every dispatch's metadata into one uniform buffer, and allocates the temporaries the
memory plan asked for (pool buffers, or one arena buffer whose ranges the slots are). Running binds the caller's input buffers and output buffers,
records the dispatches into compute passes and submits them (see SUBMIT_CHUNK below).

Replaying is cheap: pipelines, the uniform and the temporaries never change, so the bind
groups of dispatches that touch only temporaries are built once. The others depend on the
input and output buffers of a run: for each set of them (up to PLANS_KEPT sets, least
recently used dropped) the program keeps a plan, every dispatch's pipeline, bind group and
workgroup counts, ready to encode; a run on buffers seen before builds nothing.

Output buffers come from a pool (OutputPool): a buffer whose DeviceBuffer nobody holds any
more goes back to its program and output slot, and the next run takes the one freed last
(so a loop that drops or replaces its result alternates between at most two buffers, and
finds their plans). Outputs the caller holds are never overwritten. What the pools keep
free is bounded in bytes across all programs (WGJIT_SPARE_OUTPUT_BYTES); `trim()` drops a
program's plans and free buffers. Host data uploaded for a lazy call's inputs likewise goes back
to the device's UploadPool when its tensor dies (backend_wgpu.device), and the next call's upload
for the same input takes that buffer: a lazy loop's replay binds what it bound before, and its
plan hits.

A long run is submitted in chunks of SUBMIT_CHUNK dispatches, each its own command buffer:
the GPU starts on the first while the host records the next, so a replay's host cost and
its GPU time overlap instead of adding up (on a fast GPU the host is the larger part).
Each submission has a fixed host cost of its own (wgpu-native and the driver: ~190 us per
extra chunk on lavapipe); with SUBMIT_GROWTH g > 1 each chunk is g times the one before
(16, 32, 64... dispatches), so the GPU still starts early but a run of n dispatches takes
about log_g(n) submissions instead of n / SUBMIT_CHUNK.

A loop that reads each result back leaves the host waiting while the GPU finishes; the program
uses that wait (Device.when_reading) to record its next run's command buffers ahead, for the plan the
next run is expected to use (_record_next), so the next call submits them as soon as its uniform and
arguments are written, instead of encoding its dispatches while the GPU idles. A run whose plan is
another releases them unsubmitted (WGJIT_PRERECORD=0: never recorded).

Encoding and submitting call wgpu-native's C functions straight through wgpu-py's cffi
library: wgpu-py wraps each call in Python error capture and each object in a Python class
(made, tracked and released per chunk), which costs more than the calls themselves on a
fast GPU. Creating the encoder, beginning, recording and ending the pass are plain C calls
(WebGPU reports their errors at finish); finishing and submitting go through wgpu-py's
error-capturing wrappers of the same C functions, so an encoder's errors still raise there.
A timed run (timestamp_writes) uses wgpu-py's objects.
"""

from __future__ import annotations

import operator
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import wgpu

from backend_wgpu.device import Device, DeviceBuffer
from backend_wgpu.kernel import Kernel, Workload
from backend_wgpu.kernels import KERNELS
from backend_wgpu.runtime_fields import RuntimeFields
from ir.errors import DeviceError
from ir.graph import Graph
from ir.ops import Op
from ir.settings import env_float, env_int
from ir.symbolic import Sym

if TYPE_CHECKING:
    from backend_wgpu.profile import Profile


SPARE_OUTPUTS = 4  # per output slot, how many free buffers a program keeps
PLANS_KEPT = 4  # per program, how many sets of input/output buffers keep their bind groups
# Dispatches per submitted command buffer (0: the whole run in one). Each submission costs the
# host tens of microseconds; a chunk lets the GPU run while the host records the next one.
SUBMIT_CHUNK = env_int("WGJIT_SUBMIT_CHUNK", 16)
# each chunk this many times the last one: 16, 32, 64... (H200 run H, host_split: 12L token 1.543 -> 1.258 ms,
# ~1B 2.504 -> 2.398 against chunks of 16 throughout; benchmarks/runs/2026-12-01-H/host_split_growth.txt)
SUBMIT_GROWTH = env_float("WGJIT_SUBMIT_GROWTH", 2.0)
SPARE_OUTPUT_BYTES = env_int("WGJIT_SPARE_OUTPUT_BYTES", 256 << 20)  # free outputs, all programs
# Record a replay's next run while the host waits for a read-back (Program._record_next; 0: never).
PRERECORD = os.environ.get("WGJIT_PRERECORD", "1") != "0"
# A recorded run's first command buffer: smaller than SUBMIT_CHUNK, as its encoding is done already and a
# smaller buffer's submission returns sooner (H200 run S, 12L step: plan to first submit 27 us with 8 against 34 with 16)
RECORDED_FIRST_CHUNK = 8
_TIMELINE: Any = None  # the backend_wgpu.timeline.Timeline recording runs (None: off, the normal path)

try:  # wgpu-native's C functions, for the per-dispatch commands (see the module docstring)
    from wgpu.backends.wgpu_native import ffi as _ffi
    from wgpu.backends.wgpu_native import lib as _lib
    from wgpu.backends.wgpu_native._api import libf as _libf

    _SET_PIPELINE = _lib.wgpuComputePassEncoderSetPipeline
    _SET_BIND_GROUP = _lib.wgpuComputePassEncoderSetBindGroup
    _DISPATCH = _lib.wgpuComputePassEncoderDispatchWorkgroups
    _NULL = _ffi.NULL
    _CREATE_ENCODER = _lib.wgpuDeviceCreateCommandEncoder
    _BEGIN_PASS = _lib.wgpuCommandEncoderBeginComputePass
    _END_PASS = _lib.wgpuComputePassEncoderEnd
    _RELEASE_PASS = _lib.wgpuComputePassEncoderRelease
    _RELEASE_ENCODER = _lib.wgpuCommandEncoderRelease
    _RELEASE_COMMANDS = _lib.wgpuCommandBufferRelease
    _FINISH = _libf.wgpuCommandEncoderFinish  # wgpu-py's error capture: an encoder's errors raise here
    _SUBMIT = _libf.wgpuQueueSubmit
    # empty descriptors (no label, no timestamps), made once: C reads them during each call only
    _ENCODER_DESC = _ffi.new("WGPUCommandEncoderDescriptor *")
    _PASS_DESC = _ffi.new("WGPUComputePassDescriptor *")
    _COMMANDS_DESC = _ffi.new("WGPUCommandBufferDescriptor *")
except (ImportError, AttributeError):  # another backend: wgpu-py's own methods
    _SET_PIPELINE = None

_RAW = operator.attrgetter("buffer")  # a plan key's entries: the GPU buffers, then the offsets of the inputs
_OFFSET = operator.attrgetter("offset")
_DEVICE_OF = operator.attrgetter("device")


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
    io_slots: tuple[int, ...] = ()  # the input/output slots it binds
    groups: dict[tuple, Any] = field(default_factory=dict)  # its bind group per buffers of those slots


@dataclass
class _Plan:
    """Every dispatch ready to encode for one set of input and output buffers."""

    groups: list[Any]  # the bind groups (kept alive: `commands` holds their C handles)
    commands: list[tuple[Any, Any, int, int, int]]  # (pipeline handle, group handle, x, y, z)


class OutputPool:
    """Free output buffers of all programs, the least recently freed dropped past a byte budget.

    A program hands out an output buffer wrapped in a new DeviceBuffer; when that
    DeviceBuffer dies (nothing holds the tensor any more), the buffer comes back here,
    filed under its program and output slot. Taking gives the one freed last.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.free_bytes = 0
        self._stacks: dict[tuple[weakref.ref, int], list[Any]] = {}  # (program, slot) -> free buffers
        self._order: OrderedDict[int, tuple[tuple[weakref.ref, int], Any]] = OrderedDict()  # id(raw), oldest first
        # buffers are freed from any thread, by the garbage collector, and that may run inside a locked
        # section of this very thread (an allocation there starts a collection): reentrant
        self._lock = threading.RLock()

    def take(self, program_ref: weakref.ref, slot: int) -> Any | None:
        """A free buffer for this program's output slot, the one freed last; None when there is none."""
        return self.take_all(program_ref, [slot])[0]

    def take_all(self, program_ref: weakref.ref, slots: list[int]) -> list[Any | None]:
        """`take` for each slot, under one acquisition of the lock."""
        with self._lock:
            out: list[Any | None] = []
            for slot in slots:
                stack = self._stacks.get((program_ref, slot))
                if stack:
                    raw = stack.pop()
                    del self._order[id(raw)]
                    self.free_bytes -= raw.size
                    out.append(raw)
                else:
                    out.append(None)
            return out

    def give_back(self, program_ref: weakref.ref, slot: int, raw: Any) -> None:
        """`raw` is free again; past SPARE_OUTPUTS per slot or the byte budget, the oldest free ones are dropped."""
        if program_ref() is None or getattr(raw, "_wgjit_destroyed", False):
            return
        key = (program_ref, slot)
        dropped: list[tuple[weakref.ref, Any]] = []
        with self._lock:
            stack = self._stacks.setdefault(key, [])
            if len(stack) >= SPARE_OUTPUTS:
                dropped.append(self._forget(stack[0]))
            stack.append(raw)
            self._order[id(raw)] = (key, raw)
            self.free_bytes += raw.size
            while self.free_bytes > self.budget and self._order:
                dropped.append(self._forget(next(iter(self._order.values()))[1]))
        for ref, old in dropped:  # outside the lock: the program takes its own
            program = ref() if ref is not None else None
            if program is not None:
                program.released(old)  # its bind groups let go of the buffer too; wgpu frees it when idle

    def _forget(self, raw: Any) -> tuple[weakref.ref | None, Any]:
        entry = self._order.pop(id(raw), None)
        if entry is None:  # forgotten already by a give_back the garbage collector ran inside this one
            return None, raw
        key = entry[0]
        self._stacks[key].remove(raw)
        self.free_bytes -= raw.size
        return key[0], raw

    def drop(self, program_ref: weakref.ref | None = None) -> None:
        """Forget the free buffers of one program (all programs when None)."""
        with self._lock:
            for key in [k for k in self._stacks if program_ref is None or k[0] is program_ref]:
                for raw in list(self._stacks.pop(key)):
                    del self._order[id(raw)]
                    self.free_bytes -= raw.size


OUTPUT_POOL = OutputPool(SPARE_OUTPUT_BYTES)


# The output buffers handed out, until their DeviceBuffer dies: id(weak reference to it) -> (that weak
# reference, program, slot, GPU buffer) (by id: a weak reference hashes its referent, which has no hash).
# A plain weakref callback per output, as weakref.finalize would make but without its bookkeeping; the
# GPU buffer is held here (not only by the dying DeviceBuffer), so a garbage cycle never finalizes it first.
_HANDED: dict[int, tuple[weakref.ref, weakref.ref, int, Any]] = {}


def _handed_back(ref: weakref.ref) -> None:
    if _HANDED is None:  # interpreter shutdown: this module's globals are gone, and so is the pool
        return
    entry = _HANDED.pop(id(ref), None)
    if entry is not None:
        OUTPUT_POOL.give_back(entry[1], entry[2], entry[3])


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
        self._cache_key: Any = None  # tracer.realize's program-cache key for it (its LRU moves it by that object)
        t0 = time.perf_counter()
        with device.guard("compiling a program"):
            self._build()
        self.compile_seconds = time.perf_counter() - t0

    def _build(self) -> None:
        caps = self.device.caps
        align = caps.uniform_align
        uniform = bytearray()
        self._runtime: list[tuple[int, str, Sym]] = []  # (byte offset in the uniform, type, value) per runtime field
        dump_dir = os.environ.get("WGJIT_DUMP_WGSL")
        for nid in self.graph.schedule.dispatches:
            node = self.graph[nid]
            kernel: Kernel = KERNELS[node.kernel.name](node, self.graph, caps.max_workgroups_per_dim)
            key = kernel.kernel_key()
            source = kernel.build_kernel()
            self.sources[key] = source.code
            if dump_dir:
                _dump(dump_dir, key, source.code)
            pipeline, layout = self.device.pipeline(key, source.code, source.layout_entries(), kernel.unchecked())
            meta, runtime = kernel.pack_metadata()
            offset = len(uniform)
            self._runtime += [(offset + f.offset, f.type, f.value) for f in runtime]
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
        usage = wgpu.BufferUsage.UNIFORM | (wgpu.BufferUsage.COPY_DST if self._runtime else 0)
        self._uniform = dev.create_buffer_with_data(data=bytes(uniform) or b"\0" * 16, usage=usage)
        self._fields = RuntimeFields(bytes(uniform), self._runtime) if self._runtime else None
        self._written_ints: tuple[int, ...] | None = None  # the runtime integers the uniform holds now
        self.int_count = self._fields.count if self._fields is not None else 0
        self.ints: tuple[int, ...] = self.graph.ints  # run()'s default runtime integers
        self._temps = self._allocate_temps()
        for launch in self._launches:
            launch.io_slots = tuple(
                dict.fromkeys(s for s in launch.slots if s is not None and self.slots[s].kind != "temp")
            )
            if not launch.io_slots:
                launch.static_group = self._bind_group(launch, self._temps)
        self._input_slots = [(i, s.index) for i, s in enumerate(self.slots) if s.kind == "input"]
        picks = [index for _, index in self._input_slots]
        # the run's inputs that a plan binds, in slot order, as a tuple (itemgetter of one index gives the item)
        self._pick_inputs = operator.itemgetter(*picks) if len(picks) > 1 else (lambda inputs: (inputs[picks[0]],))
        self._output_slots = [i for i, s in enumerate(self.slots) if s.kind == "output"]
        self._plans: OrderedDict[tuple, _Plan] = OrderedDict()  # by the run's input and output buffers
        self._ref = weakref.ref(self)
        # runs and the forgetting of released buffers exclude each other (buffers are released from
        # any thread, when the garbage collector frees a tensor)
        self._lock = threading.Lock()
        self._released: list[Any] = []
        weakref.finalize(self, OUTPUT_POOL.drop, self._ref)  # its free outputs go when it does
        # the next run's command buffers, recorded ahead for the plan it is expected to use (_record_next)
        self._recorded: tuple[_Plan, list[Any]] | None = None
        self._keys: tuple[tuple | None, tuple | None] = (None, None)
        self._record_task = weakref.WeakMethod(self._record_next)
        self._unsubmitted: list[Any] = []  # the recorded handles, for the finalizer
        weakref.finalize(self, _release_recorded, self._unsubmitted)

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

    def run(
        self,
        inputs: list[DeviceBuffer],
        timestamp_writes: dict | None = None,
        ints: tuple[int, ...] | None = None,
        varying: tuple[Hashable, Callable[[list[DeviceBuffer]], tuple[DeviceBuffer, ...]]] | None = None,
    ) -> list[DeviceBuffer]:
        """Run on these input buffers (by input index); returns one buffer per output.

        `ints`: the graph's runtime integers by slot (ir.symbolic): positions and lengths that
        are written into the uniform before the run (IndexOutOfRangeError when one is outside
        the range its op allows, before anything runs). None: `self.ints`, the values of the
        graph this program was last compiled or fetched for (tracer.realize sets them).

        `timestamp_writes` (a wgpu ComputePassTimestampWrites dict) brackets the one compute
        pass with GPU timestamps: the benchmark harness times programs with it.

        `varying` (token, pick): the caller promises that whenever it passes this token, every
        input that `pick(inputs)` leaves out is the same buffer at the same offset as before;
        the plan is then found by the token and the picked inputs alone (tracer.jit passes one
        while a trace's captured inputs are unchanged: its arguments vary, its weights do not).
        """
        if _TIMELINE is not None:  # a timeline records this call (backend_wgpu.timeline)
            _TIMELINE.enter(self)
        ints = self.ints if ints is None else tuple(ints)
        words = self._fields.words(ints) if self._fields is not None else None
        dev = self.device
        with dev.guard("running a program"):
            return self._run(inputs, timestamp_writes, words, ints, varying)

    def _run(
        self,
        inputs: list[DeviceBuffer],
        timestamp_writes: dict | None,
        words: np.ndarray | None,
        ints: tuple[int, ...],
        varying: tuple[Hashable, Callable[[list[DeviceBuffer]], tuple[DeviceBuffer, ...]]] | None = None,
    ) -> list[DeviceBuffer]:
        with self._lock:
            self._forget_released()
            if words is not None and ints != self._written_ints:  # into the uniform before the dispatches read it
                self.device.write_raw(self._uniform, self._fields.byte_offset, words)
                self._written_ints = ints
            return self._run_locked(inputs, timestamp_writes, varying)

    def _run_locked(
        self,
        inputs: list[DeviceBuffer],
        timestamp_writes: dict | None,
        varying: tuple[Hashable, Callable[[list[DeviceBuffer]], tuple[DeviceBuffer, ...]]] | None = None,
    ) -> list[DeviceBuffer]:
        dev = self.device
        # under `varying` the inputs its pick leaves out are those of the run that made the token's plan,
        # which checked them all (_plan): the picked ones alone are checked here
        picked = varying[1](inputs) if varying is not None else None
        checked = inputs if picked is None else picked
        if any(map(operator.is_not, map(_DEVICE_OF, checked), repeat(dev))):
            for buf in checked:
                if buf.device is not dev:  # a tensor realized before tr.reset_device()
                    buf.device.check_alive()
                    raise DeviceError("an input tensor lives on another GPU device than this program; recreate it")
        outs = self._output_buffers()
        if self._launches:
            plan = self._plan(inputs, outs, varying, picked)
            commands = plan.commands
            # timestamps bracket one pass: a timed run is one submission
            timed = timestamp_writes is not None
            bounds = _chunks(len(commands), len(commands) if timed else SUBMIT_CHUNK, SUBMIT_GROWTH)
            recorded, self._recorded = self._recorded, None
            if recorded is not None and (recorded[0] is not plan or timed or _TIMELINE is not None):
                _release_recorded(recorded[1])  # recorded for another plan: not this run's commands
                recorded = None
            if recorded is not None:  # recorded while the host waited for a read-back (_record_next)
                dev.stats["submits"] += _submit_recorded(dev, recorded[1])
                dev.stats["runs_prerecorded"] += 1
            elif not timed and _SET_PIPELINE is not None:
                timeline = _TIMELINE
                if timeline is None:
                    dev.stats["submits"] += _submit(dev, commands, bounds)
                else:  # the same submission, stamped, with timestamp writes around each pass
                    dev.stats["submits"] += timeline.submit(dev, commands, bounds)
            else:
                for start, end in bounds:
                    encoder = dev.device.create_command_encoder()
                    cpass = encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
                    _encode_py(cpass, commands[start:end])
                    cpass.end()
                    dev.queue.submit([encoder.finish()])
                    dev.stats["submits"] += 1
            dev.stats["dispatches"] += len(self._launches)
            # a program run before (a replay, or a lazy loop's cached graph) is likely to run again: a
            # one-off program's next run would be recorded for nothing
            if PRERECORD and self.runs and _SET_PIPELINE is not None and not timed and _TIMELINE is None:
                dev.when_reading(self._record_task)
        self.runs += 1
        # an output in an input slot (an in-place chain over a donated input) keeps that input's DeviceBuffer
        return [outs[s] if s in outs else inputs[self.slots[s].index] for s in self.outputs]

    def _output_buffers(self) -> dict[int, DeviceBuffer]:
        """A buffer per output slot: one of this slot's that nothing holds any more, else a new one.

        The slot may be larger than the tensor (it hosted temporaries first): the DeviceBuffer
        says the tensor's bytes, the GPU buffer has the slot's. Each comes back to the pool when
        its DeviceBuffer dies (_handed_back).
        """
        ref, device, sizes = self._ref, self.device, self._output_bytes
        outs: dict[int, DeviceBuffer] = {}
        reused = 0
        for slot, raw in zip(self._output_slots, OUTPUT_POOL.take_all(ref, self._output_slots), strict=True):
            if raw is None:
                raw = device.alloc(self.slots[slot].nbytes).buffer
            else:
                reused += 1
            buf = outs[slot] = DeviceBuffer(raw, sizes[slot], device)
            back = weakref.ref(buf, _handed_back)
            _HANDED[id(back)] = (back, ref, slot, raw)
        if reused:
            device.stats["outputs_reused"] += reused
        return outs

    def _plan(
        self,
        inputs: list[DeviceBuffer],
        outs: dict[int, DeviceBuffer],
        varying: tuple[Hashable, Callable[[list[DeviceBuffer]], tuple[DeviceBuffer, ...]]] | None = None,
        picked: tuple[DeviceBuffer, ...] | None = None,
    ) -> _Plan:
        """The plan for these buffers: from the cache, else built (bind groups only where missing).

        Keyed by the GPU buffer of each input a plan binds (under `varying`: its token, then the inputs
        its pick keeps, `picked` when the caller has them), then their offsets, then the outputs' GPU
        buffers: one flat tuple, without a pair to make and hash per input.
        """
        if varying is not None:  # see run(): the token stands for the inputs pick leaves out
            if picked is None:
                picked = varying[1](inputs)
            key = (varying[0], *map(_RAW, picked), *map(_OFFSET, picked), *map(_RAW, outs.values()))
        else:
            picked = self._pick_inputs(inputs) if self._input_slots else ()
            key = (*map(_RAW, picked), *map(_OFFSET, picked), *map(_RAW, outs.values()))
        self._keys = (self._keys[1], key)  # the keys of the last two runs: _record_next predicts from them
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        if varying is not None:  # the token's first plan: its inputs checked in full (_run_locked checks the picked)
            dev = self.device
            for buf in inputs:
                if buf.device is not dev:
                    buf.device.check_alive()
                    raise DeviceError("an input tensor lives on another GPU device than this program; recreate it")
        buffers = dict(self._temps)
        buffers.update(outs)
        buffers.update((slot, inputs[i]) for slot, i in self._input_slots)
        groups = []
        for launch in self._launches:
            group = launch.static_group
            if group is None:
                bound = tuple((buffers[s].buffer, buffers[s].offset) for s in launch.io_slots)
                group = launch.groups.get(bound)
                if group is None:
                    group = launch.groups[bound] = self._bind_group(launch, buffers)
            groups.append(group)
        plan = _Plan(groups, _commands(self._launches, groups))
        self._plans[key] = plan
        if len(self._plans) > PLANS_KEPT:
            self._plans.popitem(last=False)
            self._forget_unplanned_groups()
        return plan

    def _record_next(self) -> None:
        """Record the next run's command buffers now, while the host waits for a read-back (Device.when_reading).

        The next run's plan is predicted from the last two: a loop that drops its result before the
        next call gets the same output buffers back each time (the same plan twice), one that keeps it
        until after the next call alternates between two (the plan before last). The run submits these
        command buffers only if its plan is the one they were recorded for (identity), else releases
        them: a wrong guess costs the recording, never a wrong result. Pipelines, bind groups and
        workgroup counts are fixed per plan; the uniform is written before the submission as always.
        """
        if not self._lock.acquire(blocking=False):  # another thread runs the program: not now
            return
        try:
            before, last = self._keys
            if self._recorded is not None or last is None:
                return
            plan = self._plans.get(last if before is None or before == last else before)
            if plan is None or not plan.commands:
                return
            first = min(SUBMIT_CHUNK, RECORDED_FIRST_CHUNK) if SUBMIT_CHUNK > 0 else 0  # 0: one submission
            bounds = _chunks(len(plan.commands), first, SUBMIT_GROWTH)
            device, handles = self.device.device._internal, self._unsubmitted
            _release_recorded(handles)
            try:
                for start, end in bounds:
                    handles.append(_record(device, plan.commands[start:end]))
            except Exception:  # noqa: BLE001  a guess failed to record: the run encodes its commands itself,
                _release_recorded(handles)  # and any real error shows there, at the call that caused it
                return
            self._recorded = (plan, handles)
        finally:
            self._lock.release()

    def released(self, raw: Any) -> None:
        """The output pool dropped `raw`: forget the plans and bind groups that bind it (now, or before the next run)."""
        self._released.append(raw)
        if self._lock.acquire(blocking=False):  # not while this thread or another is running the program
            try:
                self._forget_released()
            finally:
                self._lock.release()

    def _forget_released(self) -> None:
        if not self._released:
            return
        gone = {id(raw) for raw in self._released}
        self._released.clear()
        self._plans = OrderedDict((k, p) for k, p in self._plans.items() if not any(id(b) in gone for b in k))
        for launch in self._launches:
            launch.groups = {k: g for k, g in launch.groups.items() if not any(id(b) in gone for b, _ in k)}
        self._keys = tuple(None if k is None or any(id(b) in gone for b in k) else k for k in self._keys)  # type: ignore[assignment]
        if self._recorded is not None and not any(p is self._recorded[0] for p in self._plans.values()):
            self._recorded = None  # its plan binds a released buffer: never submitted
            _release_recorded(self._unsubmitted)

    def _forget_unplanned_groups(self) -> None:
        """Drop the cached bind groups no kept plan uses (they hold their buffers)."""
        used = {id(g) for plan in self._plans.values() for g in plan.groups}
        for launch in self._launches:
            launch.groups = {k: g for k, g in launch.groups.items() if id(g) in used}

    def trim(self) -> None:
        """Forget what this program keeps for replays: its plans, cached bind groups and free outputs."""
        with self._lock:
            self._released.clear()
            self._plans.clear()
            self._recorded, self._keys = None, (None, None)
            _release_recorded(self._unsubmitted)
            for launch in self._launches:
                launch.groups = {}
        OUTPUT_POOL.drop(self._ref)

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

    def profile(
        self,
        inputs: list[DeviceBuffer] | None = None,
        repeats: int = 3,
        repeat_each: int = 1,
        in_pass: bool = False,
        marginal: int = 0,
    ) -> Profile:
        """Per-kernel GPU time (backend_wgpu.profile.Profile), apart from the normal run path.

        marginal=K > 0: what each dispatch adds to the program's one pass, from passes with K extra
        copies of each kind of dispatch (the others' launch overhead and timestamps distort on fast
        GPUs); the pass's own time is `Profile.base_seconds`. See backend_wgpu.profile.
        """
        from backend_wgpu.profile import profile_program

        return profile_program(self, inputs, repeats, repeat_each, in_pass, marginal)

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


def _commands(launches: list[_Launch], groups: list[Any]) -> list[tuple[Any, Any, int, int, int]]:
    """Each dispatch as (pipeline, bind group, x, y, z): wgpu-native handles where _encode calls C directly."""
    if _SET_PIPELINE is None:
        return [(launch.pipeline, group, *launch.count) for launch, group in zip(launches, groups, strict=True)]
    return [
        (launch.pipeline._internal, group._internal, *launch.count)
        for launch, group in zip(launches, groups, strict=True)
    ]


def _chunks(n: int, first: int, growth: float) -> list[tuple[int, int]]:
    """(start, end) of each submitted chunk of n dispatches: `first` (<= 0: all), then growing by `growth`."""
    if first <= 0 or first >= n:
        return [(0, n)] if n else []
    bounds, start, size = [], 0, float(first)
    while start < n:
        end = min(n, start + max(1, int(size)))
        bounds.append((start, end))
        start, size = end, size * max(growth, 1.0)
    return bounds


def _submit(dev: Device, commands: list[tuple[Any, Any, int, int, int]], bounds: list[tuple[int, int]]) -> int:
    """Encode and submit `commands` in one command buffer per (start, end) of `bounds`, through C; how many."""
    device, queue = dev.device._internal, dev.queue._internal
    held = _ffi.new("WGPUCommandBuffer[1]")
    for start, end in bounds:
        held[0] = _record(device, commands[start:end])
        try:
            _SUBMIT(queue, 1, held)
        finally:
            _RELEASE_COMMANDS(held[0])
    return len(bounds)


def _record(device: Any, commands: list[tuple[Any, Any, int, int, int]]) -> Any:
    """`commands` encoded into one compute pass of a new command buffer, finished but not submitted (its C handle)."""
    encoder = _CREATE_ENCODER(device, _ENCODER_DESC)
    try:
        cpass = _BEGIN_PASS(encoder, _PASS_DESC)
        try:
            _encode(cpass, commands)
            _END_PASS(cpass)
        finally:
            _RELEASE_PASS(cpass)
        return _FINISH(encoder, _COMMANDS_DESC)
    finally:
        _RELEASE_ENCODER(encoder)


def _submit_recorded(dev: Device, handles: list[Any]) -> int:
    """Submit command buffers recorded before (_record), one submission each, in order; how many."""
    queue, held = dev.queue._internal, _ffi.new("WGPUCommandBuffer[1]")
    try:
        for handle in handles:
            held[0] = handle
            _SUBMIT(queue, 1, held)
    finally:
        _release_recorded(handles)
    return len(handles)


def _release_recorded(handles: list[Any]) -> None:
    """Release command buffers recorded and not wanted (or submitted already); empties the list."""
    while handles:
        _RELEASE_COMMANDS(handles.pop())


def _encode_py(cpass: Any, commands: list[tuple[Any, Any, int, int, int]]) -> None:
    """Record dispatches into a wgpu-py compute pass: C calls where the library is there, else its methods."""
    if _SET_PIPELINE is not None:
        _encode(cpass._internal, commands)
        return
    last = None
    for pipeline, group, x, y, z in commands:
        if pipeline is not last:
            cpass.set_pipeline(pipeline)
            last = pipeline
        cpass.set_bind_group(0, group)
        cpass.dispatch_workgroups(x, y, z)


def _encode(handle: Any, commands: list[tuple[Any, Any, int, int, int]]) -> None:
    """Record dispatches into a compute pass (its C handle); a pipeline is set only where it changes."""
    last = None
    set_pipeline, set_group, dispatch, null = _SET_PIPELINE, _SET_BIND_GROUP, _DISPATCH, _NULL
    for pipeline, group, x, y, z in commands:
        if pipeline is not last:
            set_pipeline(handle, pipeline)
            last = pipeline
        set_group(handle, 0, group, 0, null)
        dispatch(handle, x, y, z)


def compile_program(graph: Graph, device: Device) -> Program:
    return Program(graph, device)


def _dump(directory: str, key: str, code: str) -> None:
    import hashlib

    os.makedirs(directory, exist_ok=True)
    name = key.split("[")[0] + "_" + hashlib.sha1(key.encode()).hexdigest()[:10] + ".wgsl"
    with open(os.path.join(directory, name), "w") as f:
        f.write(f"// {key}\n{code}")
