"""Ways to read a result back, timed on a real GPU (~30 s): which one a `numpy()` should use.

    python -m benchmarks.device.readback [SIDE]

Each read follows a GPU program of about a millisecond (so the wait is part of it, as in a
user's loop), for 4 bytes and for 6.3 MB (MiniLM's 32x128x384 hidden state). Variants:

  wgpu_read_buffer  wgpu-py's queue.read_buffer: a new mappable buffer per read, two copies
  staging_wait      a kept mappable buffer, mapped and waited for through wgpu-py's poll thread
  staging_poll      the same, the calling thread polling the device until the map is done
  staging_poll_nb   the same, polling without blocking in a loop (no sleeping in the driver)
  device_read       what Device.read_into does now

Interleaved in blocks; medians in ms, table last.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import wgpu
from wgpu.backends.wgpu_native import ffi, lib

import tracer as tr
from backend_wgpu import get_device


def main() -> None:
    import sys

    side = int(sys.argv[1]) if len(sys.argv) > 1 else 2048  # the busy work's matrix side (small on lavapipe)
    dev = get_device()
    work_in = tr.tensor(np.random.default_rng(0).standard_normal((side, side), dtype=np.float32))

    @tr.jit
    def busy(x: tr.Tensor) -> tr.Tensor:
        for _ in range(6):
            x = (x @ x) * (1.0 / side)
        return x

    sizes = {"4 B": 4, "6.3 MB": 32 * 128 * 384 * 4}
    sources = {name: dev.upload(np.ones(n // 4, np.float32)) for name, n in sizes.items()}
    kept: dict[int, wgpu.GPUBuffer] = {}

    def staging(n: int) -> wgpu.GPUBuffer:
        if n not in kept:
            kept[n] = dev.device.create_buffer(size=n, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        return kept[n]

    def via_staging(name: str, mode: str) -> Callable[[], np.ndarray]:
        src, n = sources[name], sizes[name]

        def read() -> np.ndarray:
            out = np.empty(n, np.uint8)
            buf = staging(n)
            enc = dev.device.create_command_encoder()
            enc.copy_buffer_to_buffer(src.buffer, 0, buf, 0, n)
            dev.queue.submit([enc.finish()])
            promise = buf.map_async(wgpu.MapMode.READ, 0, n)
            if mode == "poll":
                lib.wgpuDevicePoll(dev.device._internal, True, ffi.NULL)
            elif mode == "poll_nb":
                while promise._state == "pending":
                    lib.wgpuDevicePoll(dev.device._internal, False, ffi.NULL)
            promise.sync_wait()
            view = buf.read_mapped(0, n, copy=False)
            out[:] = np.frombuffer(view, np.uint8, n)
            del view
            buf.unmap()
            return out

        return read

    def variants(name: str) -> dict[str, Callable[[], object]]:
        src, n = sources[name], sizes[name]
        return {
            "wgpu_read_buffer": lambda: bytes(dev.queue.read_buffer(src.buffer, 0, n)),
            "staging_wait": via_staging(name, "wait"),
            "staging_poll": via_staging(name, "poll"),
            "staging_poll_nb": via_staging(name, "poll_nb"),
            "device_read": lambda: dev.read_into(src, np.empty(n, np.uint8)),
        }

    table: dict[tuple[str, str], list[float]] = {}
    for name in sizes:
        fns = variants(name)
        for fn in fns.values():  # warm
            for _ in range(3):
                busy(work_in)
                fn()
        for _ in range(6):
            for v, fn in fns.items():
                for _ in range(8):
                    busy(work_in)  # about a millisecond of GPU work ahead of the read
                    t0 = time.perf_counter()
                    fn()
                    table.setdefault((name, v), []).append((time.perf_counter() - t0) * 1e3)
    # the GPU work alone, waited for the cheapest way we know
    print(f"readback on {dev.caps.name}: ms from after submitting ~1 ms of GPU work to the bytes in numpy")
    print("| size | " + " | ".join(variants("4 B")) + " |")
    print("|---|" + "---|" * len(variants("4 B")))
    for name in sizes:
        row = [statistics.median(table[(name, v)]) for v in variants(name)]
        print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in row) + " |")


if __name__ == "__main__":
    main()
