"""Per-kernel GPU time of a compiled program, apart from the normal run path.

Program.run records every dispatch into one compute pass; profiling instead gives each
launch its own compute pass with timestamp writes at its start and end (WebGPU reports
timestamps in nanoseconds), all in one encoder and one submit. A pass around one dispatch costs
tens of microseconds on some GPUs (the H200 through Vulkan: 20-30 us), more than a small kernel
takes; `repeat_each=R` records each dispatch R times into its pass, with the barrier between
them that any two dependent dispatches of a program have, and divides by R: that is close to
what the dispatch costs inside the program's one pass. `in_pass=True` (adapters with
"timestamp-query-inside-passes") instead runs the program as it runs, all dispatches in one
pass, and writes a timestamp after each: a dispatch's time is the step from the stamp before
it, with the caches and the barrier the real run has (a dispatch that reads what the one before
wrote finds it in L2, as in the real run; a repeated one finds its own inputs there too, which
flatters bandwidth-bound kernels whose bytes fit in L2). Where the adapter has no
timestamp queries, each launch is submitted alone and timed by the wall clock until the
queue has finished it (`Profile.clock` says which). Each kernel's time is the median over
`repeats` runs after one warm-up run. Bytes and flops per dispatch are counted from the
graph (see dispatch_bytes and dispatch_flops) to give GB/s and GFLOP/s.

Both ways distort on a fast GPU: a lone dispatch pays its own launch (4-30 us on the H200 at
idle clocks), and timestamps between the dispatches of a pass drain it (a ~1B decoder step
measured 4.28 ms that way, 1.52 ms in one plain pass). `marginal=K` instead times only whole
passes (one timestamp pair around each, or the wall clock around submit and wait): the
program as it runs (the base), then, for each distinct kernel key, the program with every
dispatch of that key issued 1+K times back to back (the copies bind what the original binds,
so they read its inputs and write its outputs, behind the barrier any dependent dispatch
gets). A dispatch's marginal cost is (variant - base) / (K * dispatches of that key): what
it adds inside the real step, overlap with its neighbours and caches included. These costs
need not add up to the base pass, and noise may make a small one slightly negative.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import wgpu

from backend_wgpu.device import DeviceBuffer
from backend_wgpu.program import _commands, _encode_py
from ir.fusion import matmul_depths
from ir.graph import Graph
from ir.ops import ELEMENTWISE, NORM, REDUCE, ROW, Op

if TYPE_CHECKING:
    from backend_wgpu.device import Device
    from backend_wgpu.program import Program

QUERIES_PER_SET = 4096  # WebGPU's limit on one query set
# flops per element of a row op (max, subtract, exp, sum, divide): an estimate, said so in the docs
ROW_FLOPS_PER_ELEMENT = 5
MOVE_ONLY = frozenset({Op.COPY, Op.CAST, Op.CONCAT, Op.ARANGE, Op.GATHER, Op.INDEX_WRITE})
# flops per element of a norm (mean, centre, square, sum, scale, affine): an estimate, like ROW's
NORM_FLOPS_PER_ELEMENT = 8


def dispatch_bytes(graph: Graph, node_id: int) -> int:
    """Bytes a dispatch moves: each operand's distinct elements read once, plus its output written.

    A broadcast operand (stride 0) counts only the buffer it reads, not the elements it
    covers; an in-place operand is read and then written over.
    """
    node = graph[node_id]
    read = 0
    for s in node.srcs:
        src = graph[s]
        base = graph[src.srcs[0]] if src.op is Op.VIEW else src
        read += src.dtype.nbytes(min(src.size, base.size))
    return read + node.nbytes


def dispatch_flops(graph: Graph, node_id: int) -> int:
    """Arithmetic a dispatch does: 2*M*N*K per matmul (also inside a fused kernel), one per element for elementwise ops and
    reductions (per input element), ROW_FLOPS_PER_ELEMENT for softmax rows, none for copies."""
    node = graph[node_id]
    if node.op in (Op.MATMUL, Op.FUSED):  # a fused kernel's matmuls (its elementwise epilogue is not counted)
        return sum(2 * t.size * k for t, k in matmul_depths(graph, node))
    if node.op in MOVE_ONLY:
        return 0
    if node.op in ELEMENTWISE:
        return node.size
    if node.op in REDUCE:
        return graph[node.srcs[0]].size
    if node.op in ROW:
        return ROW_FLOPS_PER_ELEMENT * node.size
    if node.op in NORM:
        return NORM_FLOPS_PER_ELEMENT * node.size
    if node.op is Op.CONV1D:
        cin_g, taps = graph[node.srcs[1]].shape[1:]
        return 2 * node.size * cin_g * taps
    return 0


@dataclass(frozen=True)
class KernelTime:
    """One dispatch's measured time and the work it did."""

    node: int
    op: str
    kernel: str
    variant: str
    key: str
    seconds: float
    bytes: int
    flops: int

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0


@dataclass
class Profile:
    """Where a program's GPU time goes, kernel by kernel."""

    kernels: list[KernelTime]
    clock: str  # "gpu-timestamps" or "wall-clock", "-marginal" appended in marginal mode
    device: str
    repeats: int
    notes: list[str] = field(default_factory=list)
    # marginal mode: the whole program's median time in its one pass (the base its kernels' costs are measured against)
    base_seconds: float | None = None

    @property
    def total_seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def by_op(self) -> list[tuple[str, float, float]]:
        """(op, seconds, share of the total) per op type, the largest first."""
        totals: dict[str, float] = {}
        for k in self.kernels:
            totals[k.op] = totals.get(k.op, 0.0) + k.seconds
        whole = self.total_seconds or 1.0
        return sorted(((op, s, s / whole) for op, s in totals.items()), key=lambda t: -t[1])

    def to_dict(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "device": self.device,
            "repeats": self.repeats,
            "total_seconds": self.total_seconds,
            "base_seconds": self.base_seconds,
            "notes": list(self.notes),
            "kernels": [asdict(k) | {"gbps": k.gbps, "gflops": k.gflops} for k in self.kernels],
            "by_op": [{"op": op, "seconds": s, "share": share} for op, s, share in self.by_op()],
        }

    def summary(self) -> str:
        lines = [
            f"Profile on {self.device} ({self.clock}, median of {self.repeats}): total {self.total_seconds * 1e6:.1f} us"
        ]
        if self.base_seconds is not None:
            lines.append(f"  the program in one pass: {self.base_seconds * 1e6:.1f} us")
        width = max((len(f"{k.kernel}[{k.variant}]") for k in self.kernels), default=0)
        for k in self.kernels:
            label = f"{k.kernel}[{k.variant}]".ljust(width)
            lines.append(
                f"  %{k.node:<4} {k.op:<12} {label} {k.seconds * 1e6:10.1f} us {k.gbps:8.2f} GB/s {k.gflops:8.2f} GFLOP/s"
            )
        for op, s, share in self.by_op():
            lines.append(f"  {op:<12} {s * 1e6:10.1f} us {share * 100:5.1f}%")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _buffers(program: Program, inputs: list[DeviceBuffer] | None) -> dict[int, DeviceBuffer]:
    """The buffers a profile binds, by slot: the program's own temporaries, the caller's inputs
    (else fresh zero-filled ones) and fresh outputs.

    Outputs are never the program's pooled ones (a user's tensor may hold them). Temporaries are
    shared with the program's runs, which write each before reading it, so whatever profiling
    leaves there (marginal mode's repeated in-place dispatches leave garbage) is harmless.
    """
    dev = program.device
    buffers: dict[int, DeviceBuffer] = dict(program._temps)
    for i, s in enumerate(program.slots):
        if s.kind == "input":
            # fresh buffers read as zeros (WebGPU zero-initializes), enough to time the kernels
            buffers[i] = inputs[s.index] if inputs is not None else dev.alloc(s.nbytes)
        elif s.kind == "output":
            buffers[i] = dev.alloc(s.nbytes)
    return buffers


def _submit_and_read_stamps(dev: Any, encoder: Any, qset: Any, count: int, resolve: Any) -> np.ndarray:
    """Resolve `count` timestamps into `resolve`, submit the encoder, and read them (int64 ticks)."""
    encoder.resolve_query_set(qset, 0, count, resolve, 0)
    dev.queue.submit([encoder.finish()])
    return np.frombuffer(dev.queue.read_buffer(resolve), dtype=np.uint64).astype(np.int64)


def _time_with_timestamps(program: Program, groups: list[Any], repeats: int, repeat_each: int) -> list[float]:
    dev = program.device
    launches = program._launches
    per_set = QUERIES_PER_SET // 2
    samples: list[list[float]] = [[] for _ in launches]
    for rep in range(repeats + 1):  # the first run warms caches up and is not counted
        for start in range(0, len(launches), per_set):
            chunk = launches[start : start + per_set]
            count = 2 * len(chunk)
            qset = dev.device.create_query_set(type=wgpu.QueryType.timestamp, count=count)
            resolve = dev.device.create_buffer(
                size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            encoder = dev.device.create_command_encoder()
            for i, launch in enumerate(chunk):
                writes = {
                    "query_set": qset,
                    "beginning_of_pass_write_index": 2 * i,
                    "end_of_pass_write_index": 2 * i + 1,
                }
                cpass = encoder.begin_compute_pass(timestamp_writes=writes)
                cpass.set_pipeline(launch.pipeline)
                cpass.set_bind_group(0, groups[start + i])
                for _ in range(repeat_each):
                    cpass.dispatch_workgroups(*launch.count)
                cpass.end()
            stamps = _submit_and_read_stamps(dev, encoder, qset, count, resolve)
            if rep > 0:
                for i in range(len(chunk)):
                    samples[start + i].append(max(0, int(stamps[2 * i + 1] - stamps[2 * i])) * 1e-9 / repeat_each)
            resolve.destroy()
    return [statistics.median(s) for s in samples]


def _time_in_one_pass(program: Program, groups: list[Any], repeats: int) -> list[float]:
    """Per-dispatch seconds from timestamps written between the dispatches of one pass."""
    from wgpu.backends.wgpu_native.extras import write_timestamp

    dev = program.device
    launches = program._launches
    count = len(launches) + 1
    if count > QUERIES_PER_SET:
        raise ValueError(f"profile(in_pass=True): {len(launches)} dispatches, at most {QUERIES_PER_SET - 1}")
    qset = dev.device.create_query_set(type=wgpu.QueryType.timestamp, count=count)
    resolve = dev.device.create_buffer(size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    samples: list[list[float]] = [[] for _ in launches]
    for rep in range(repeats + 1):  # the first run warms caches up and is not counted
        encoder = dev.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        write_timestamp(cpass, qset, 0)
        for i, launch in enumerate(launches):
            cpass.set_pipeline(launch.pipeline)
            cpass.set_bind_group(0, groups[i])
            cpass.dispatch_workgroups(*launch.count)
            write_timestamp(cpass, qset, i + 1)
        cpass.end()
        stamps = _submit_and_read_stamps(dev, encoder, qset, count, resolve)
        if rep > 0:
            for i in range(len(launches)):
                samples[i].append(max(0, int(stamps[i + 1] - stamps[i])) * 1e-9)
    resolve.destroy()
    return [statistics.median(s) for s in samples]


def _time_with_wall_clock(program: Program, groups: list[Any], repeats: int, probe: DeviceBuffer) -> list[float]:
    dev = program.device
    samples: list[list[float]] = [[] for _ in program._launches]
    for rep in range(repeats + 1):
        for i, launch in enumerate(program._launches):
            t0 = time.perf_counter()
            encoder = dev.device.create_command_encoder()
            cpass = encoder.begin_compute_pass()
            cpass.set_pipeline(launch.pipeline)
            cpass.set_bind_group(0, groups[i])
            cpass.dispatch_workgroups(*launch.count)
            cpass.end()
            dev.queue.submit([encoder.finish()])
            dev.queue.read_buffer(probe.buffer, 0, 4)  # waits for the submitted work
            if rep > 0:
                samples[i].append(time.perf_counter() - t0)
    return [statistics.median(s) for s in samples]


def _encode_pass(dev: Device, commands: list[Any], writes: dict | None) -> Any:
    """A command encoder holding one compute pass of these commands (Program._run's encoding)."""
    encoder = dev.device.create_command_encoder()
    cpass = encoder.begin_compute_pass(timestamp_writes=writes)
    _encode_py(cpass, commands)
    cpass.end()
    return encoder


def _pass_timer(dev: Device) -> Callable[[list[Any]], float]:
    """A function giving the seconds of one compute pass of these commands, submitted alone and waited
    for: its timestamp pair where the adapter has timestamps, else the wall clock around submit and wait."""
    if not dev.caps.timestamps:
        probe = dev.alloc(4)

        def wall_clock(commands: list[Any]) -> float:
            finished = _encode_pass(dev, commands, None).finish()
            t0 = time.perf_counter()
            dev.queue.submit([finished])
            dev.queue.read_buffer(probe.buffer, 0, 4)  # waits for the submitted work
            return time.perf_counter() - t0

        return wall_clock
    qset = dev.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
    resolve = dev.device.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    writes = {"query_set": qset, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}

    def timestamps(commands: list[Any]) -> float:
        stamps = _submit_and_read_stamps(dev, _encode_pass(dev, commands, writes), qset, 2, resolve)
        return max(0, int(stamps[1] - stamps[0])) * 1e-9

    return timestamps


def _with_copies(program: Program, commands: list[Any], key: str, copies: int) -> list[Any]:
    """The program's commands with every dispatch of kernel `key` issued 1+copies times in a row."""
    return [
        c for d, c in zip(program.dispatches, commands, strict=True) for _ in range(1 + copies if d.key == key else 1)
    ]


def _time_marginal(program: Program, groups: list[Any], repeats: int, copies: int) -> tuple[float, list[float]]:
    """(median seconds of the program in its one pass, each dispatch's marginal seconds): see the module docstring.

    Each round times the base pass beside every variant (base, variant 1, base, variant 2...), so
    clock drift during the profile moves both alike; the first round warms up and is not counted.
    """
    base = _commands(program._launches, groups)
    counts = Counter(d.key for d in program.dispatches)
    variants = {key: _with_copies(program, base, key, copies) for key in counts}
    time_pass = _pass_timer(program.device)
    base_samples: list[float] = []
    samples: dict[str, list[float]] = {key: [] for key in variants}
    for rep in range(repeats + 1):
        for key, commands in variants.items():
            pair = time_pass(base), time_pass(commands)
            if rep > 0:
                base_samples.append(pair[0])
                samples[key].append(pair[1])
    base_seconds = statistics.median(base_samples)
    cost = {key: (statistics.median(s) - base_seconds) / (copies * counts[key]) for key, s in samples.items()}
    return base_seconds, [cost[d.key] for d in program.dispatches]


def _check_arguments(repeats: int, repeat_each: int, in_pass: bool, marginal: int) -> None:
    """Refuse counts below their minimum and modes that exclude each other, naming the conflict."""
    if repeats < 1:
        raise ValueError(f"profile: repeats must be at least 1, got {repeats}")
    if repeat_each < 1:
        raise ValueError(f"profile: repeat_each must be at least 1, got {repeat_each}")
    if marginal < 0:
        raise ValueError(f"profile: marginal must be 0 (off) or a number of extra copies per dispatch, got {marginal}")
    if in_pass and repeat_each != 1:
        raise ValueError(
            "profile: in_pass=True times each dispatch once where the program runs it; leave repeat_each at 1"
        )
    if marginal and in_pass:
        raise ValueError(
            "profile: marginal and in_pass=True are two different modes (whole passes against timestamps "
            "between dispatches); pass only one"
        )
    if marginal and repeat_each != 1:
        raise ValueError(
            f"profile: marginal={marginal} already repeats each kind of dispatch inside the program's pass; "
            "leave repeat_each at 1"
        )


def profile_program(
    program: Program,
    inputs: list[DeviceBuffer] | None = None,
    repeats: int = 3,
    repeat_each: int = 1,
    in_pass: bool = False,
    marginal: int = 0,
) -> Profile:
    """Time every dispatch of a program; inputs default to zero-filled buffers of the right sizes.

    repeat_each > 1 runs each dispatch that many times in its pass and reports the time of one;
    in_pass=True times the dispatches between timestamps inside the program's one pass;
    marginal=K > 0 gives each dispatch what it adds to the program's one pass, from runs with
    K extra copies of each kind of dispatch, and the pass's own time as `Profile.base_seconds`
    (see the module docstring). The profiled buffers (_buffers) then hold the last run's values,
    garbage in marginal mode: a repeated in-place dispatch works on its own result. Inputs the
    caller passes are bound as given, so a donated one the program writes in place is written
    over (more than once in marginal mode).
    """
    _check_arguments(repeats, repeat_each, in_pass, marginal)
    dev = program.device
    dev.check_alive()
    if inputs is not None and len(inputs) != program.input_count:
        raise ValueError(f"profile: the program takes {program.input_count} inputs, got {len(inputs)}")
    buffers = _buffers(program, inputs)
    groups = [launch.static_group or program._bind_group(launch, buffers) for launch in program._launches]
    notes: list[str] = []
    base_seconds = None
    if not program._launches:
        seconds: list[float] = []
        clock = "none"
    elif marginal:
        base_seconds, seconds = _time_marginal(program, groups, repeats, marginal)
        clock = ("gpu-timestamps" if dev.caps.timestamps else "wall-clock") + "-marginal"
        notes += [
            f"marginal in-pass cost: the program's one pass took {base_seconds * 1e6:.1f} us; per kernel key, the pass "
            f"again with each dispatch of that key run 1+{marginal} times in a row; a dispatch's time is what one more "
            "run of it adds to the pass, the same for every dispatch of its key",
            "marginal costs need not add up to the pass (overlap, caches), and noise can make a small one negative",
            "a repeated in-place dispatch works on its own result: the profiled buffers hold garbage afterwards",
        ]
        if not dev.caps.timestamps:
            notes.append("this adapter has no timestamp queries: pass times are wall clock around submit and wait")
    elif in_pass:
        if "timestamp-query-inside-passes" not in dev.device.features:
            raise ValueError(
                f"profile(in_pass=True): the adapter {dev.caps.name} has no timestamp queries inside passes; "
                "profile without in_pass (a pass per dispatch) instead"
            )
        seconds = _time_in_one_pass(program, groups, repeats)
        clock = "gpu-timestamps"
        notes.append("timestamps between the dispatches of the program's one pass: a dispatch's time includes the "
                     "barrier before it and any idle time the GPU had there")  # fmt: skip
    elif dev.caps.timestamps:
        seconds = _time_with_timestamps(program, groups, repeats, repeat_each)
        clock = "gpu-timestamps"
        if repeat_each > 1:
            notes.append(
                f"each dispatch ran {repeat_each} times in its pass: times are per run, barriers between included"
            )
    else:
        probe = dev.alloc(4)
        seconds = _time_with_wall_clock(program, groups, repeats, probe)
        clock = "wall-clock"
        notes.append("this adapter has no timestamp queries: times are wall clock per submit, launch overhead included")
    if inputs is None and program.input_count:
        notes.append("inputs were zero-filled buffers of the program's input sizes")
    kernels = [
        KernelTime(
            node=d.node,
            op=d.op,
            kernel=d.kernel,
            variant=d.variant,
            key=d.key,
            seconds=s,
            bytes=dispatch_bytes(program.graph, d.node),
            flops=dispatch_flops(program.graph, d.node),
        )
        for d, s in zip(program.dispatches, seconds, strict=True)
    ]
    return Profile(kernels, clock, dev.caps.name, repeats, notes, base_seconds)
