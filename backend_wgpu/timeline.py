"""A timeline of a program's real runs, recorded inside the user's loop: where a call's wall time goes.

    with tr.timeline() as tl:
        for _ in range(40):
            y = f(x).numpy()
    tl.print()  # medians per call; tl.to_dict() for JSON

While a timeline records, every Program.run is a call. It stamps the host clock
(time.perf_counter_ns) at the call's entry, when its plan is ready, after each chunk's submit
(backend_wgpu.program's _submit, here as Timeline.submit), and in Device.read_into at the
read-back's entry, its copy submitted, its map done and the bytes copied out. Each submitted
chunk's compute pass also gets timestamp writes at its beginning and end (where the adapter has
"timestamp-query"; elsewhere the timeline says so and records host times only).

The GPU's timestamps and the host's clock are different clocks, and nothing aligns them: every
figure is a duration within one clock. Host: wall (this call's entry to the next call's, the
last call to the block's end), entry to first submit, first to last submit, last submit to the
read's map done, the map's wait, the copy out, and host time after the read until the next call
(the user's code, a jit's argument handling). GPU: busy (the passes' durations summed), span
(first pass's start to last pass's end), the idle gaps between a call's passes (span - busy),
the GPU idle to the next call (last pass end to the next call's first pass start: the read-back's
copy and the host's turn) and the GPU period (first pass start to the next call's, the wall on
the GPU clock).

The recorder's own Python costs little: the pass descriptors with timestamp writes are made once
per query set, two query slots per chunk come from sets of QUERIES_PER_SET kept in a small
per-device pool, and the sets are resolved and read once, when the timeline stops (or when
MAX_PENDING_SETS are full, which the notes then say). The timestamps themselves are not free:
wgpu-native's submit of a command buffer whose pass writes them takes longer (lavapipe: ~110 us
against ~55, whatever the set's size; host stamps alone changed nothing measurable there), so
`gpu=False` records host stamps only, and benchmarks/device/timeline.py shows the wall both
ways. Off, the run path costs checks of a module global: two per run, four per read. Runs from
threads other than the one that opened the timeline are not recorded, and runs timed by their
caller (Program.run's timestamp_writes) or through wgpu-py's own objects record host stamps only.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import numpy as np
import wgpu

import backend_wgpu.device as _device
import backend_wgpu.program as _program
from backend_wgpu.device import Device, get_device

QUERIES_PER_SET = 4096  # WebGPU's limit on one query set: 2048 passes
MAX_PENDING_SETS = 16  # past this many filled sets, they are read back during the loop (and the notes say so)
POOL_SETS = 4  # free query sets (with their resolve buffers) a device keeps for the next timeline

_ACTIVE_LOCK = threading.Lock()


@dataclass
class _Call:
    """One Program.run's stamps (host ns) and its passes' query slots (set, pair index)."""

    program: int  # the Program's number in its timeline (Timeline._program_key)
    dispatches: int
    entry: int
    plan: int = 0  # plan ready, encoding starts (0: no submission through the recorder)
    submits: list[int] = field(default_factory=list)  # after each chunk's submit returned
    slots: list[tuple[int, int]] = field(default_factory=list)  # (set serial, pair) per recorded pass
    reads: list[list[int]] = field(default_factory=list)  # [entry, copy submitted, mapped, copied out] per read
    passes: list[tuple[int, int]] = field(default_factory=list)  # GPU (begin, end) ns per pass, once resolved
    host_only: bool = False  # submitted outside the recorder (a caller-timed run, wgpu-py's path)
    bounds: list[tuple[int, int]] = field(default_factory=list)  # (start, end) dispatches of each chunk


class _QuerySet:
    """A timestamp query set, its resolve buffer, and one pass descriptor per pair of its queries."""

    def __init__(self, dev: Device) -> None:
        from wgpu.backends.wgpu_native import ffi

        self.pairs = pairs = QUERIES_PER_SET // 2
        self.qset = dev.device.create_query_set(type=wgpu.QueryType.timestamp, count=2 * pairs)
        usage = wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
        self.resolve = dev.device.create_buffer(size=16 * pairs, usage=usage)
        # WGPUComputePassDescriptor.timestampWrites -> WGPUPassTimestampWrites (what wgpu-py's
        # begin_compute_pass(timestamp_writes=...) builds per call): made once here, C reads them per begin
        self.writes = ffi.new("WGPUPassTimestampWrites[]", pairs)
        self.descs = ffi.new("WGPUComputePassDescriptor[]", pairs)
        handle = self.qset._internal
        for i in range(pairs):
            self.writes[i].querySet = handle
            self.writes[i].beginningOfPassWriteIndex = 2 * i
            self.writes[i].endOfPassWriteIndex = 2 * i + 1
            self.descs[i].timestampWrites = self.writes + i
        self.used = 0  # pairs handed out
        self.serial = 0  # which set of its timeline it is

    def destroy(self) -> None:
        self.qset.destroy()
        self.resolve.destroy()


_POOLS: weakref.WeakKeyDictionary[Device, list[_QuerySet]] = weakref.WeakKeyDictionary()


def _timestamp_period(dev: Device) -> float:
    """Nanoseconds per timestamp tick (wgpu-native resolves raw ticks unless normalization is on)."""
    try:
        from wgpu.backends.wgpu_native._api import libf

        period = float(libf.wgpuQueueGetTimestampPeriod(dev.queue._internal))
        return period if period > 0 else 1.0
    except Exception:  # noqa: BLE001  another backend: the spec says nanoseconds
        return 1.0


class Timeline:
    """Host and GPU stamps of every program run while it records; `calls()`, `report()`, `to_dict()`, `print()`."""

    def __init__(self, gpu: bool | None = None) -> None:
        self.device = get_device()
        have = self.device.caps.timestamps and _program._SET_PIPELINE is not None
        self.gpu = have if gpu is None else (gpu and have)
        self.notes: list[str] = []
        if not have:
            why = "no timestamp-query feature" if not self.device.caps.timestamps else "no wgpu-native C path"
            self.notes.append(f"{self.device.caps.name}: {why}: host times only, no GPU passes recorded")
        elif not self.gpu:
            self.notes.append("GPU timestamps turned off (gpu=False): host times only")
        self.period_ns = _timestamp_period(self.device) if self.gpu else 1.0
        self._calls: list[_Call] = []
        self._current: _Call | None = None
        self._reads: dict[int, list[int]] = {}  # reads started and not finished: id of the read -> its stamps
        self._thread = threading.get_ident()
        self._pending: list[_QuerySet] = []  # query sets written and not read yet, the last one filling
        self._free: list[_QuerySet] = []  # sets read inside the loop, for reuse by this timeline
        self._serials = 0  # sets taken so far: a recorded pass names its set by this serial
        self._values: dict[int, np.ndarray] = {}  # set serial -> its resolved ticks (once read)
        self.begin_ns = 0
        self.end_ns = 0
        self.recording = False
        self.submit_chunk, self.submit_growth = _program.SUBMIT_CHUNK, _program.SUBMIT_GROWTH
        self.skipped_runs = 0  # runs of other threads, not recorded
        self._programs: dict[int, tuple[weakref.ref, int]] = {}  # id(program) -> (weak reference, its number)
        self._program_count = 0

    # --- recording --------------------------------------------------------------------------
    def start(self) -> None:
        with _ACTIVE_LOCK:
            if _program._TIMELINE is not None:
                raise RuntimeError("tr.timeline(): a timeline is already recording; nest none")
            self.recording = True
            self.submit_chunk, self.submit_growth = _program.SUBMIT_CHUNK, _program.SUBMIT_GROWTH  # at the start
            self.begin_ns = perf_counter_ns()
            _program._TIMELINE = self
            _device.READ_STAMP = self._read_stamp

    def stop(self) -> None:
        """Stop recording, then resolve and read the GPU's timestamps (errors there become notes)."""
        with _ACTIVE_LOCK:
            if _program._TIMELINE is self:
                _program._TIMELINE = None
                _device.READ_STAMP = None
        if not self.recording:
            return
        self.end_ns = perf_counter_ns()
        self.recording = False
        try:
            self._read_sets()
        except Exception as e:  # noqa: BLE001  a lost device: the host stamps still stand
            self.notes.append(f"GPU timestamps could not be read: {type(e).__name__}: {str(e)[:200]}")
        finally:
            self._recycle()
        self._attach_passes()

    def enter(self, program: Any) -> None:
        """Program.run's entry: a new call (called by backend_wgpu.program while this records)."""
        now = perf_counter_ns()
        if threading.get_ident() != self._thread:
            self.skipped_runs += 1  # this thread's current call stays where it is
            return
        self._current = _Call(self._program_key(program), len(program.dispatches), now, host_only=True)
        self._calls.append(self._current)

    def _program_key(self, program: Any) -> int:
        """A number per program run in this timeline (by identity, not kept alive; an id reused is a new one)."""
        key = self._programs.get(id(program))
        if key is None or key[0]() is not program:
            key = self._programs[id(program)] = (weakref.ref(program), self._program_count)
            self._program_count += 1
        return key[1]

    def submit(self, dev: Device, commands: list[tuple[Any, Any, int, int, int]], bounds: list[tuple[int, int]]) -> int:
        """backend_wgpu.program._submit with a stamp after each submit and timestamp writes around each pass."""
        call = self._current
        if call is None or threading.get_ident() != self._thread:
            return _program._submit(dev, commands, bounds)
        call.plan = perf_counter_ns()
        call.host_only = False
        call.bounds = bounds
        P = _program
        device, queue = dev.device._internal, dev.queue._internal
        held = P._ffi.new("WGPUCommandBuffer[1]")
        submitted = 0
        for start, end in bounds:
            if self.gpu:
                qs, pair = self._next_pair()
                desc = qs.descs + pair
            else:
                desc = P._PASS_DESC
            encoder = P._CREATE_ENCODER(device, P._ENCODER_DESC)
            try:
                cpass = P._BEGIN_PASS(encoder, desc)
                try:
                    P._encode(cpass, commands[start:end])
                    P._END_PASS(cpass)
                finally:
                    P._RELEASE_PASS(cpass)
                held[0] = P._FINISH(encoder, P._COMMANDS_DESC)
            finally:
                P._RELEASE_ENCODER(encoder)
            try:
                P._SUBMIT(queue, 1, held)
            finally:
                P._RELEASE_COMMANDS(held[0])
            call.submits.append(perf_counter_ns())
            if self.gpu:  # the pair is used only once its pass went out: an unwritten query is never resolved
                qs.used += 1
                call.slots.append((qs.serial, pair))
            submitted += 1
        return submitted

    def _read_stamp(self, stage: int, read: object) -> None:
        """Device's read stamps: 0 started, 1 copy submitted, 2 map done, 3 copied out. `read` names
        the read: one started ahead (Tensor.copy_to_host_async) finishes during a later call, and
        its stamps stay with the call that started it."""
        now = perf_counter_ns()
        if threading.get_ident() != self._thread:
            return
        if stage == 0:
            call = self._current
            if call is None:
                return
            call.reads.append([now, 0, 0, 0])
            self._reads[id(read)] = call.reads[-1]
            return
        row = self._reads.get(id(read))
        if row is not None:
            row[stage] = now
            if stage == 3:
                del self._reads[id(read)]

    def _next_pair(self) -> tuple[_QuerySet, int]:
        """The next free pair of queries (the set, the pair's index), from a new set when the last one is full."""
        qs = self._pending[-1] if self._pending else None
        if qs is None or qs.used >= qs.pairs:
            if len(self._pending) >= MAX_PENDING_SETS:
                self.notes.append(
                    f"{MAX_PENDING_SETS} query sets filled: read back inside the loop at call {len(self._calls)}"
                )
                self._read_sets()
            pool = self._free or _POOLS.setdefault(self.device, [])
            qs = pool.pop() if pool else _QuerySet(self.device)
            qs.used, qs.serial = 0, self._serials
            self._serials += 1
            self._pending.append(qs)
        return qs, qs.used  # taken (qs.used += 1) by submit once the pass is submitted

    def _read_sets(self) -> None:
        """Resolve the sets in use (one submission) and read each; they are free again after."""
        pending, self._pending = self._pending, []
        self._free += pending
        used = [qs for qs in pending if qs.used]
        if not used:
            return
        dev = self.device
        encoder = dev.device.create_command_encoder()
        for qs in used:
            encoder.resolve_query_set(qs.qset, 0, 2 * qs.used, qs.resolve, 0)
        dev.queue.submit([encoder.finish()])
        for qs in used:
            data = dev.queue.read_buffer(qs.resolve, 0, 16 * qs.used)
            self._values[qs.serial] = np.frombuffer(bytes(data), np.uint64).copy()

    def _recycle(self) -> None:
        """Keep up to POOL_SETS query sets on the device for the next timeline; destroy the rest."""
        pool = _POOLS.setdefault(self.device, [])
        for qs in self._free + self._pending:
            if len(pool) < POOL_SETS and not self.device.lost:
                pool.append(qs)
                continue
            with contextlib.suppress(Exception):  # a lost device's objects may refuse; they go with it
                qs.destroy()
        self._free, self._pending = [], []

    def _attach_passes(self) -> None:
        dropped = 0
        for call in self._calls:
            call.passes = []
            for serial, pair in call.slots:
                values = self._values.get(serial)
                if values is None or 2 * pair + 1 >= len(values):
                    dropped += 1
                    continue
                begin, end = int(values[2 * pair]), int(values[2 * pair + 1])
                if end < begin or begin == 0:  # a wrapped or unwritten pair (some drivers)
                    dropped += 1
                    continue
                call.passes.append((round(begin * self.period_ns), round(end * self.period_ns)))
        if dropped:
            self.notes.append(f"{dropped} pass timestamps were unusable (zero or wrapped) and left out")

    # --- results ----------------------------------------------------------------------------
    def calls(self) -> list[CallTimes]:
        """Every recorded call's durations (ms), in order."""
        out: list[CallTimes] = []
        for i, call in enumerate(self._calls):
            nxt = self._calls[i + 1] if i + 1 < len(self._calls) else None
            out.append(_times(call, nxt.entry if nxt is not None else self.end_ns, nxt))
        return out

    def report(self) -> list[ProgramReport]:
        """The calls grouped by program (most calls first), with medians."""
        groups: dict[int, list[CallTimes]] = {}
        for call, times in zip(self._calls, self.calls(), strict=True):
            groups.setdefault(call.program, []).append(times)
        reports = [ProgramReport(ts[0].dispatches, ts) for ts in groups.values()]
        return sorted(reports, key=lambda r: -len(r.calls))

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device.caps.name,
            "backend": self.device.caps.backend,
            "gpu_timestamps": self.gpu,
            "timestamp_period_ns": self.period_ns,
            "submit_chunk": self.submit_chunk,  # backend_wgpu.program's settings when the timeline started
            "submit_growth": self.submit_growth,
            "skipped_runs": self.skipped_runs,
            "notes": list(self.notes),
            "programs": [r.to_dict() for r in self.report()],
        }

    def table(self, label: str = "") -> str:
        return format_table([(label or "calls", r) for r in self.report()], self.notes)

    def print(self, file: Any = None, use_rich: bool = True, label: str = "") -> None:
        print_table([(label or "calls", r) for r in self.report()], self.notes, file=file, use_rich=use_rich)

    def __str__(self) -> str:
        return self.table()


def chunk_lines(call: CallTimes) -> list[str]:
    """One line per chunk of a call: its dispatches, when the host's submit returned (host clock, after the
    call's entry), when its pass started (GPU clock, after the call's first pass), its duration and the GPU's
    idle before it."""
    lines = []
    aligned = len(call.passes_ms) == len(call.chunk_dispatches)  # else a pass's timestamps were unusable
    for k, size in enumerate(call.chunk_dispatches):
        host = f"submitted +{call.submits_ms[k]:.3f}" if k < len(call.submits_ms) else "not submitted"
        gpu = ""
        if aligned:
            start, dur = call.passes_ms[k]
            idle = start - sum(call.passes_ms[k - 1]) if k else 0.0
            gpu = f" | GPU pass +{start:.3f} ms, {dur:.3f} ms, idle before {idle:.3f} ms"
        lines.append(f"  chunk {k}: {size:4d} dispatches, host {host} ms{gpu}")
    return lines


@dataclass
class CallTimes:
    """One call's durations in ms; None where it has no such stamp (no read, no GPU pass)."""

    dispatches: int
    chunks: int  # submissions through the recorder
    passes: int  # GPU passes with usable timestamps
    reads: int
    wall: float
    prelude: float | None  # entry to the plan ready (lock, uniform, output buffers, plan lookup)
    to_first_submit: float | None  # entry to the first chunk's submit returned
    submitting: float | None  # first submit to last submit
    to_read: float | None  # last submit to the first read's entry (host: outputs handed back, realize)
    to_map_done: float | None  # last submit to the last read's map done (the wait for the GPU and the copy)
    map_wait: float | None  # copy submitted to map done, summed over the reads
    copy_out: float | None  # map done to bytes copied out and unmapped, summed over the reads
    after: float | None  # last read done (or last submit) to the next call's entry
    gpu_busy: float | None  # the passes' durations summed
    gpu_span: float | None  # first pass start to last pass end
    gpu_gaps: float | None  # span - busy: GPU idle between this call's passes
    gpu_max_gap: float | None
    # like the wall, to the next call (None for the last): the GPU idle from this call's last pass end to the
    # next call's first pass start (the read-back's copy, the host's turn), and first pass start to first pass start
    gpu_idle_after: float | None
    gpu_period: float | None
    chunk_dispatches: list[int] = field(default_factory=list)  # dispatches in each submitted chunk
    submits_ms: list[float] = field(default_factory=list)  # host: each chunk's submit returned, after the entry
    passes_ms: list[tuple[float, float]] = field(default_factory=list)  # GPU: (start after the 1st pass's, duration)


def _ms(ns: int) -> float:
    return ns * 1e-6


def _times(call: _Call, next_entry: int, nxt: _Call | None) -> CallTimes:
    submits, reads, passes = call.submits, [r for r in call.reads if all(r)], call.passes
    last_host = reads[-1][3] if reads else (submits[-1] if submits else None)
    gaps = [b - e for (_, e), (b, _) in zip(passes, passes[1:], strict=False)]
    next_passes = nxt.passes if nxt is not None else []
    return CallTimes(
        dispatches=call.dispatches,
        chunks=len(submits),
        passes=len(passes),
        reads=len(reads),
        wall=_ms(next_entry - call.entry),
        prelude=_ms(call.plan - call.entry) if call.plan else None,
        to_first_submit=_ms(submits[0] - call.entry) if submits else None,
        submitting=_ms(submits[-1] - submits[0]) if submits else None,
        to_read=_ms(reads[0][0] - submits[-1]) if submits and reads else None,
        to_map_done=_ms(reads[-1][2] - submits[-1]) if submits and reads else None,
        map_wait=_ms(sum(r[2] - r[1] for r in reads)) if reads else None,
        copy_out=_ms(sum(r[3] - r[2] for r in reads)) if reads else None,
        after=_ms(next_entry - last_host) if last_host is not None else None,
        gpu_busy=_ms(sum(e - b for b, e in passes)) if passes else None,
        gpu_span=_ms(passes[-1][1] - passes[0][0]) if passes else None,
        gpu_gaps=_ms(passes[-1][1] - passes[0][0] - sum(e - b for b, e in passes)) if passes else None,
        gpu_max_gap=_ms(max(gaps)) if gaps else (0.0 if passes else None),
        gpu_idle_after=_ms(next_passes[0][0] - passes[-1][1]) if passes and next_passes else None,
        gpu_period=_ms(next_passes[0][0] - passes[0][0]) if passes and next_passes else None,
        chunk_dispatches=[end - start for start, end in call.bounds],
        submits_ms=[_ms(t - call.entry) for t in submits],
        passes_ms=[(_ms(b - passes[0][0]), _ms(e - b)) for b, e in passes],
    )


# (field, column header) of the table, in order
COLUMNS = [
    ("wall", "wall"),
    ("prelude", "entry>plan"),
    ("to_first_submit", "entry>1st submit"),
    ("submitting", "1st>last submit"),
    ("to_read", "last submit>read"),
    ("to_map_done", "last submit>mapped"),
    ("map_wait", "map wait"),
    ("copy_out", "copy out"),
    ("after", "host after read"),
    ("gpu_busy", "GPU busy"),
    ("gpu_span", "GPU span"),
    ("gpu_gaps", "GPU gaps in call"),
    ("gpu_idle_after", "GPU idle to next"),
    ("gpu_period", "GPU period"),
]


@dataclass
class ProgramReport:
    """The calls of one program, and their medians."""

    dispatches: int
    calls: list[CallTimes]

    def median(self, name: str) -> float | None:
        values = [v for v in (getattr(c, name) for c in self.calls) if v is not None]
        return statistics.median(values) if values else None

    @property
    def chunks(self) -> int:
        return statistics.median_low([c.chunks for c in self.calls]) if self.calls else 0

    def medians(self) -> dict[str, float | None]:
        return {name: self.median(name) for name, _ in COLUMNS} | {"gpu_max_gap": self.median("gpu_max_gap")}

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "dispatches": self.dispatches,
            "chunks": self.chunks,
            "calls": len(self.calls),
            "median_ms": self.medians(),
            "per_call_ms": [asdict(c) for c in self.calls],
        }


def _cells(label: str, r: ProgramReport) -> list[str]:
    m = r.medians()
    return [label, str(len(r.calls)), f"{r.dispatches}/{r.chunks}"] + [
        "-" if m[name] is None else f"{m[name]:.3f}" for name, _ in COLUMNS
    ]


HEADERS = ["case", "calls", "disp/chunks"] + [h for _, h in COLUMNS]
CAPTION = (
    "median ms per call. Host clock: wall (entry to next entry), entry>plan (ready to encode), entry>1st submit, 1st>last submit, "
    "last submit>read (entry of the read-back), last submit>mapped (read-back wait), map wait (copy submitted>mapped), copy out, host after read (to the next "
    "call). GPU clock: busy (passes summed), span (1st pass start>last end), gaps in call (span - busy), idle to next "
    "(last pass end to the next call's first start), period (1st pass start to the next call's). The two clocks are not aligned."
)


def format_table(rows: list[tuple[str, ProgramReport]], notes: list[str] | None = None) -> str:
    """The medians as a plain text table, one row per (label, program)."""
    body = [_cells(label, r) for label, r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(HEADERS)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    out = [CAPTION, line(HEADERS), line(["-" * w for w in widths]), *(line(b) for b in body)]
    if not body:
        out.append("no program ran while the timeline recorded")
    out += [f"note: {n}" for n in notes or []]
    return "\n".join(out)


def print_table(
    rows: list[tuple[str, ProgramReport]], notes: list[str] | None = None, file: Any = None, use_rich: bool = True
) -> None:
    """Print the medians with rich's table when it is installed, else as plain text."""
    try:
        if not use_rich:
            raise ImportError
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        print(format_table(rows, notes), file=file)
        return
    out = file if file is not None else sys.stdout
    # a pipe or file has no width: one row a line there, however wide (a device run's log)
    console = Console(file=out, width=None if out.isatty() else 1000)
    table = Table(title=Text(CAPTION), title_justify="left")
    for i, h in enumerate(HEADERS):
        table.add_column(h, justify="right" if i else "left", no_wrap=True)
    for label, r in rows:
        table.add_row(*(Text(c) for c in _cells(label, r)))
    console.print(table)
    if not rows:
        console.print("no program ran while the timeline recorded")
    for n in notes or []:
        console.print(f"note: {n}", highlight=False, markup=False)


@contextlib.contextmanager
def timeline(gpu: bool | None = None) -> Iterator[Timeline]:
    """Record every program run inside the block (see the module docstring); stops when the block exits."""
    tl = Timeline(gpu)
    tl.start()
    try:
        yield tl
    finally:
        tl.stop()
