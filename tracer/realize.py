"""The one place that ties tracer, passes and backend together: compile and run graphs.

Programs are cached by the graph's structural hash, so realizing a graph with the same
structure again (a loop body, a new batch of the same shape) compiles nothing.

Debugging, all to stderr, set in the environment before the script starts:
- WGJIT_DEBUG=1: one line per compiled program (dispatch count, peak bytes, time per pass
  and for the backend) and one per program-cache hit;
- WGJIT_DEBUG=2: also the traced graph, the graph after each pass and the schedule;
- WGJIT_DEBUG=3: also the WGSL of every kernel;
- WGJIT_DUMP_WGSL=DIR: write each kernel's WGSL to DIR (backend_wgpu.program).
Tools (`wgjit dump`, tracer.inspect) see every program through add_compile_listener.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from backend_wgpu import Program, get_device
from backend_wgpu import device as backend_device
from backend_wgpu.device import DeviceBuffer, PendingRead
from ir.dtypes import DType
from ir.graph import Graph, structure_hash
from ir.settings import env_int
from passes import run_pipeline
from passes.fuse import fusion_enabled
from passes.pipeline import PipelineRun
from passes.plan_memory import memory_report
from tracer.graph_builder import graph_of, walk
from tracer.lazy import Lazy
from tracer.limits import check_graph_features
from tracer.tracing import check_host_read, to_compute_now

LOCK = threading.RLock()  # one realization at a time: the runtime is thread-safe by serializing
_PROGRAMS: OrderedDict[_Key, Program] = OrderedDict()  # by structure, fusion and tuning
MAX_CACHED_PROGRAMS = 256
# Cached programs keep their temporaries allocated; a loop over many large shapes would
# otherwise hold up to MAX_CACHED_PROGRAMS arenas. Past this many bytes, the least recently
# used programs go first (the newest always stays).
MAX_CACHED_TEMP_BYTES = env_int("WGJIT_PROGRAM_CACHE_BYTES", 1 << 30)
# Programs keep their last run's bind groups and output buffers for cheap replays (that
# holds those buffers); only the most recently run few keep them.
MAX_WARM_PROGRAMS = 8
_WARM: OrderedDict[int, Program] = OrderedDict()
stats = {"programs_compiled": 0, "program_cache_hits": 0, "realizations": 0}


def debug_level() -> int:
    try:
        return int(os.environ.get("WGJIT_DEBUG", "0"))
    except ValueError:
        return 0


@dataclass
class CompileEvent:
    """What a compile listener is told each time a graph is turned into a program."""

    graph: Graph  # the traced graph, before any pass
    program: Program
    cached: bool  # True: the program came from the cache; nothing was compiled
    run: PipelineRun | None  # the pass pipeline's stages and timings (None on a cache hit)


CompileListener = Callable[[CompileEvent], None]
_LISTENERS: list[CompileListener] = []


def add_compile_listener(listener: CompileListener) -> Callable[[], None]:
    """Call `listener` for every program compiled or fetched from the cache; returns its remover.

    While a listener is registered the pipeline keeps the graph after every pass.
    """
    with LOCK:
        _LISTENERS.append(listener)

    def remove() -> None:
        with LOCK:
            if listener in _LISTENERS:
                _LISTENERS.remove(listener)

    return remove


def program_for(graph: Graph) -> Program:
    """The compiled program for a graph, from the cache when its structure was seen before.

    Its `ints` (what `run()` uses unless given others) become the graph's runtime integers.
    """
    program = _program(graph.structure(), lambda: graph)
    program.ints = graph.ints
    return program


def _program(structure: tuple, make_graph: Callable[[], Graph]) -> Program:
    """The program for a structure: cached, or compiled from make_graph() (only called on a miss or for listeners)."""
    key = _Key((structure, fusion_enabled(), get_device().caps.tuning.digest()))  # a new tuning compiles anew
    program = _PROGRAMS.get(key)
    if program is not None:
        _PROGRAMS.move_to_end(program._cache_key)  # the stored key: found by identity, not compared again
        stats["program_cache_hits"] += 1
        if debug_level() >= 1:
            print(
                f"[wgjit] program cache hit {structure_hash(structure)}: {len(program.dispatches)} dispatches",
                file=sys.stderr,
            )
        if _LISTENERS:
            _notify(CompileEvent(make_graph(), program, True, None))
        return program
    graph = make_graph()
    check_graph_features(graph)
    device = get_device()
    t0 = time.perf_counter()
    run = run_pipeline(graph, device.caps, keep=debug_level() >= 2 or bool(_LISTENERS))
    program = Program(run.graph, device, pass_seconds=run.seconds, stages=run.stages)
    stats["programs_compiled"] += 1
    program._cache_key = key
    _PROGRAMS[key] = program
    while len(_PROGRAMS) > 1 and (
        len(_PROGRAMS) > MAX_CACHED_PROGRAMS or sum(p.temp_bytes for p in _PROGRAMS.values()) > MAX_CACHED_TEMP_BYTES
    ):
        _PROGRAMS.popitem(last=False)[1].trim()
    _debug_report(
        structure_hash(structure) + ("" if key.key[1] else ":unfused"), program, run.seconds, time.perf_counter() - t0
    )
    _notify(CompileEvent(graph, program, False, run))
    return program


class _Key:
    """A program-cache key that hashes its structure once.

    A structure is hundreds of nested tuples, built anew by every realization: a tuple does
    not keep its hash, and a lookup followed by the LRU's move_to_end would walk it twice
    (three times with the comparison to the stored key).
    """

    __slots__ = ("key", "hash")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.hash = hash(key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is _Key and self.hash == other.hash and self.key == other.key)


def note_run(program: Program) -> None:
    """Record that `program` ran; the least recently run beyond MAX_WARM_PROGRAMS drop their replay state."""
    key = id(program)
    if key in _WARM:
        _WARM.move_to_end(key)
        return
    _WARM[key] = program
    if len(_WARM) > MAX_WARM_PROGRAMS:
        _WARM.popitem(last=False)[1].trim()


def _notify(event: CompileEvent) -> None:
    for listener in list(_LISTENERS):
        listener(event)


def _debug_report(key: str, program: Program, seconds: dict[str, float], total: float) -> None:
    level = debug_level()
    if level <= 0:
        return
    timing = ", ".join(f"{k} {v * 1e3:.2f}ms" for k, v in seconds.items())
    print(
        f"[wgjit] compiled program {key}: {len(program.dispatches)} dispatches, peak {program.peak_bytes} bytes, "
        f"{total * 1e3:.1f} ms (passes: {timing}; backend {program.compile_seconds * 1e3:.2f}ms)",
        file=sys.stderr,
    )
    print(f"[wgjit] memory: {memory_report(program.graph)}", file=sys.stderr)
    if level >= 2:
        for name, g in program.stages:
            title = "traced graph" if name == "traced" else f"after {name}"
            print(f"[wgjit] --- {title} ---\n{g}", file=sys.stderr)
        print(program.summary(), file=sys.stderr)
    if level >= 3:
        for kernel_key, code in program.sources.items():
            print(f"[wgjit] --- WGSL {kernel_key} ---\n{code}", file=sys.stderr)


def device_buffer(lz: Lazy, hint: Hashable | None = None) -> DeviceBuffer:
    """The device buffer of a leaf Lazy, uploading its host data first when it has not been yet.

    `hint` (what the data is for: a program and input index) lets the upload take the GPU buffer
    the last upload for the same hint had, once that one's tensor died (backend_wgpu.device.UploadPool):
    a lazy loop's host inputs then bind the same buffers every call, and the program's plan hits.
    """
    if lz.buffer is None:
        lz.buffer = get_device().upload(lz.host, hint)
        lz.host = None
    elif lz.buffer.device is not get_device():
        lz.buffer.device.check_alive()  # raises: lost, or replaced by tr.reset_device()
    return lz.buffer


def realize_lazies(lazies: Sequence[Lazy]) -> None:
    """Compute every given Lazy that is still pending, in one submission; upload the others' host data.

    Inside a jit trace, values computed from the arguments are left to the traced program.
    """
    lazies = to_compute_now(lazies)
    with LOCK:
        for lz in lazies:  # leaves with host data: upload now, as asked
            if lz.host is not None:
                device_buffer(lz)
        targets = [lz for lz in lazies if not lz.is_leaf]
        if not targets:
            return
        w = walk(targets)
        program = _program(w.structure, lambda: graph_of(w))
        dev = get_device()
        # device_buffer(lz), without the call for the usual leaf: already on this device (weights, caches)
        key = id(program)
        inputs = [
            b if (b := lz.buffer) is not None and b.device is dev else device_buffer(lz, (key, i))
            for i, lz in enumerate(w.inputs)
        ]
        outputs = program.run(inputs, ints=w.ints)
        note_run(program)
        for lz, buf in zip(w.outputs, outputs, strict=True):
            lz.mark_realized(buf)
        stats["realizations"] += 1


def compile_lazies(lazies: Sequence[Lazy]) -> Program:
    """The compiled program that would compute these Lazies, without running it."""
    with LOCK:
        targets = [lz for lz in lazies if not lz.is_leaf]
        if not targets:
            raise ValueError("compile: every tensor is already realized; there is nothing to compile")
        w = walk(targets)
        program = _program(w.structure, lambda: graph_of(w))
        program.ints = w.ints  # run()'s default: this graph's runtime integers
        return program


def read_lazy(lz: Lazy) -> np.ndarray:
    """A Lazy's values as a new numpy array (computed first when pending).

    A read started by copy_to_host_async is finished here: it waits only for the work that
    was submitted before it started.
    """
    check_host_read(lz)
    if lz.host is not None:
        return lz.host.copy()
    realize_lazies([lz])
    with LOCK:
        dev = get_device()
        pending = _STARTED_READS.pop(lz, None)
        if pending is not None and pending.device is not dev:
            pending = None
        # a large read lies in its mapped staging memory, not copied out (Device.read_array)
        arr = dev.read_array(lz.buffer, lz.shape, _storage(lz.dtype), pending)
    return arr.astype(bool) if lz.dtype is DType.bool else arr


def copy_lazies_to_host_async(lazies: Sequence[Lazy]) -> None:
    """Compute what is pending (one submission), then start copying every value to host memory
    (one more); the next read_lazy of each finishes its copy. A value whose copy was started
    already keeps that copy."""
    for lz in lazies:
        check_host_read(lz)
    realize_lazies(lazies)
    with LOCK:
        todo = {id(lz): lz for lz in lazies if lz.host is None and lz not in _STARTED_READS and _nbytes(lz)}
        if not todo:
            return
        reads = [(lz.buffer, _nbytes(lz)) for lz in todo.values()]
        for lz, pending in zip(todo.values(), get_device().start_reads(reads), strict=True):
            _STARTED_READS[lz] = pending


# reads started by copy_lazies_to_host_async and not finished yet; a Lazy that dies unread takes its
# staging buffer with it (wgpu frees it)
_STARTED_READS: weakref.WeakKeyDictionary[Lazy, PendingRead] = weakref.WeakKeyDictionary()


def has_started_read(lz: Lazy) -> bool:
    """Whether a copy of `lz` to the host was started (copy_lazies_to_host_async) and not finished."""
    return lz in _STARTED_READS


def _storage(dtype: DType) -> type:
    """The numpy dtype a buffer holds `dtype`'s elements in (bool as u32)."""
    return np.uint32 if dtype is DType.bool else dtype.np


def _nbytes(lz: Lazy) -> int:
    return math.prod(lz.shape) * np.dtype(_storage(lz.dtype)).itemsize


def cached_programs() -> list[Program]:
    """The programs in the cache, least recently used first."""
    with LOCK:
        return list(_PROGRAMS.values())


def clear_program_cache() -> None:
    """Forget every compiled program and what programs keep for replays (bind groups, free output buffers),
    and the device's read-back staging buffers and free upload buffers."""
    with LOCK:
        for program in list(_PROGRAMS.values()) + list(_WARM.values()):
            program.trim()
        _PROGRAMS.clear()
        _WARM.clear()
        device = backend_device.device_if_created()
        if device is not None:
            device.drop_readback()
            device.uploads.drop()


ResetHook = Callable[[], None]
_RESET_HOOKS: list[ResetHook] = []


def add_reset_hook(hook: ResetHook) -> None:
    """Call `hook` whenever reset_device() drops the device: caches of device data register here."""
    with LOCK:
        _RESET_HOOKS.append(hook)


def reset_device() -> None:
    """Drop the GPU device and everything compiled or cached for it; the next op makes a new one.

    The way back after a lost device (a DeviceError says so). wgjit has one device per
    process: tensors realized before the reset lived on the old one and raise DeviceError
    when used; tensors whose host data was never uploaded carry over; jitted functions
    trace again.
    """
    with LOCK:
        old = backend_device.device_if_created()
        _PROGRAMS.clear()
        _WARM.clear()
        _STARTED_READS.clear()  # their staging buffers were the old device's
        for hook in list(_RESET_HOOKS):
            hook()
        backend_device.reset_device()
        if old is not None:
            old.pipelines.clear()
            if not old.lost:  # free its memory now; what lived there is unusable anyway
                with contextlib.suppress(Exception):
                    old.device.destroy()
