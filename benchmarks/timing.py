"""Timers for the harness: wgjit programs (GPU timestamps + wall), torch on CUDA (events + wall), numpy (wall).

A wgjit run is one compute pass; `ProgramTimer` brackets that pass with two timestamp
writes (the adapter's `timestamp-query` feature), so its GPU time excludes host work and
the queue's wait. Wall time is always measured too: from the call until the result is
ready (a 4-byte read-back waits for the queue), per run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import wgpu

from backend_wgpu.device import Device, DeviceBuffer


@dataclass
class Timing:
    """Per-run samples in milliseconds; `gpu_ms` is empty where the device has no GPU timer."""

    wall_ms: list[float] = field(default_factory=list)
    gpu_ms: list[float] = field(default_factory=list)

    @property
    def timer(self) -> str:
        return "gpu" if self.gpu_ms else "wall"

    @property
    def samples(self) -> list[float]:
        return self.gpu_ms or self.wall_ms

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall_ms)

    @property
    def spread(self) -> float:
        """Interquartile range over the median, in percent."""
        s = self.samples
        if len(s) < 4:
            return 100.0 * (max(s) - min(s)) / max(self.median, 1e-12)
        q1, _, q3 = statistics.quantiles(s, n=4)
        return 100.0 * (q3 - q1) / max(self.median, 1e-12)


def adaptive_repeat(first_ms: float, repeat: int, budget_ms: float = 3000.0) -> int:
    """Fewer repeats for slow cases (numpy's 4096^3 matmul, anything on lavapipe), at least 3."""
    return max(3, min(repeat, int(budget_ms / max(first_ms, 1e-3))))


class ProgramTimer:
    """Runs a wgjit Program repeatedly, timing each run with timestamps around its compute pass."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.has_timestamps = device.caps.timestamps
        self._sync_buf = device.alloc(4)
        self.period_ns = _timestamp_period(device)

    def sync(self) -> None:
        """Wait for every submitted command (queue.read_buffer waits for the queue)."""
        self.device.read(self._sync_buf)

    def time(self, run: Callable[[dict | None], Any], warmup: int, repeat: int) -> Timing:
        """`run(timestamp_writes)` submits one run; returns wall and GPU samples of `repeat` runs."""
        for _ in range(warmup):
            run(None)
        self.sync()
        t = Timing()
        # a slow first run (lavapipe, huge cases) shortens the series
        t0 = time.perf_counter()
        run(None)
        self.sync()
        repeat = adaptive_repeat((time.perf_counter() - t0) * 1e3, repeat)
        qs = None
        if self.has_timestamps:
            qs = self.device.device.create_query_set(type=wgpu.QueryType.timestamp, count=2 * repeat)
        for i in range(repeat):
            writes = None
            if qs is not None:
                writes = {"query_set": qs, "beginning_of_pass_write_index": 2 * i, "end_of_pass_write_index": 2 * i + 1}
            t0 = time.perf_counter()
            run(writes)
            self.sync()
            t.wall_ms.append((time.perf_counter() - t0) * 1e3)
        if qs is not None:
            t.gpu_ms = self._resolve(qs, repeat)
        return t

    def _resolve(self, qs: Any, repeat: int) -> list[float]:
        dev = self.device.device
        buf = dev.create_buffer(size=16 * repeat, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        enc = dev.create_command_encoder()
        enc.resolve_query_set(qs, 0, 2 * repeat, buf, 0)
        self.device.queue.submit([enc.finish()])
        ticks = np.frombuffer(bytes(self.device.queue.read_buffer(buf)), dtype=np.uint64).reshape(repeat, 2)
        buf.destroy()
        qs.destroy()
        # timestamps are raw ticks; a wrapped or zero pair (some drivers) is dropped
        out = [float(e - b) * self.period_ns * 1e-6 for b, e in ticks if e > b]
        return out


def _timestamp_period(device: Device) -> float:
    """Nanoseconds per timestamp tick (wgpu-native returns raw ticks unless normalization is on)."""
    try:
        from wgpu.backends.wgpu_native._api import libf

        period = float(libf.wgpuQueueGetTimestampPeriod(device.queue._internal))
        return period if period > 0 else 1.0
    except Exception:  # noqa: BLE001  older or other backends: the spec says nanoseconds
        return 1.0


def time_program(program: Any, inputs: list[DeviceBuffer], timer: ProgramTimer, warmup: int, repeat: int) -> Timing:
    """Time `program.run(inputs)`; each run allocates its outputs, as a user's realize does."""

    def run(writes: dict | None) -> None:
        outs = program.run(inputs, timestamp_writes=writes) if writes else program.run(inputs)
        del outs  # released when the queue is done with them

    return timer.time(run, warmup, repeat)


def time_host(fn: Callable[[], Any], warmup: int, repeat: int, sync: Callable[[], None] | None = None) -> Timing:
    """Wall time of a host call (numpy), or of a device call followed by `sync`."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    t = Timing()
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    repeat = adaptive_repeat((time.perf_counter() - t0) * 1e3, repeat)
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        t.wall_ms.append((time.perf_counter() - t0) * 1e3)
    return t


def time_torch(fn: Callable[[], Any], warmup: int, repeat: int) -> Timing:
    """CUDA events around each call (GPU time), and wall time with a synchronize after each call."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t = time_host(fn, 0, repeat, torch.cuda.synchronize)
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(len(t.wall_ms))
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    t.gpu_ms = [s.elapsed_time(e) for s, e in events]
    return t
