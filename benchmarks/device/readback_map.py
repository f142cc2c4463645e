"""Where a large read-back's host time goes once the GPU is done: page faults of the map, or the copy.

    python -m benchmarks.device.readback_map [--mb 6.3] [--reads 60]

A 6.3 MB result (MiniLM's 32x128x384 hidden state) is copied into mappable staging memory, laid
out as one buffer or as chunks of 2 MB, 512 KB or 64 KB, mapped through wgpu-native, and:
  copy1   copied out of the mapping into a warm numpy array (what Device.finish_read does)
  copy2   copied out again from the same mapping (its pages already touched)
  sum     summed in place from the mapping, without a copy (what a zero-copy result costs a reader)
  faults  the process's minor page faults over copy1 (getrusage)
The `host` row does the same from a plain, warm numpy array: the host's own memory speed.
Medians in microseconds per read, interleaved over the layouts; the table is last.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Any

import numpy as np
import wgpu
from wgpu.backends.wgpu_native import ffi, lib

from backend_wgpu import get_device


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=6.291456)
    ap.add_argument("--reads", type=int, default=60)
    args = ap.parse_args()
    dev = get_device()
    n = int(args.mb * 1e6) // 4096 * 4096
    src = dev.upload(np.arange(n // 4, dtype=np.float32))
    usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
    layouts: dict[str, list[Any]] = {}
    for name, chunk in (("one", n), ("2MB", 2 << 20), ("512KB", 512 << 10), ("64KB", 64 << 10)):
        layouts[name] = [dev.device.create_buffer(size=min(chunk, n - o), usage=usage) for o in range(0, n, chunk)]
    out = np.empty(n, np.uint8)
    rows: dict[str, dict[str, list[float]]] = {
        k: {c: [] for c in ("map", "copy1", "copy2", "sum", "faults")} for k in layouts
    }

    host = np.arange(n // 4, dtype=np.float32).view(np.uint8)  # the baseline: a plain, warm numpy array
    rows["host"] = {c: [] for c in ("map", "copy1", "copy2", "sum", "faults")}

    def one(name: str) -> None:
        if name == "host":
            return one_host()
        bufs = layouts[name]
        enc = dev.device.create_command_encoder()
        o = 0
        for b in bufs:
            enc.copy_buffer_to_buffer(src.buffer, o, b, 0, b.size)
            o += b.size
        dev.queue.submit([enc.finish()])
        t0 = time.perf_counter()
        for b in bufs:
            b.map_sync(wgpu.MapMode.READ)
        t1 = time.perf_counter()
        views, o = [], 0
        for b in bufs:
            ptr = lib.wgpuBufferGetConstMappedRange(b._internal, 0, b.size)
            views.append((o, np.frombuffer(ffi.buffer(ptr, b.size), np.uint8)))
            o += b.size
        f0 = faults()
        t2 = time.perf_counter()
        for o, v in views:
            out[o : o + v.size] = v
        t3 = time.perf_counter()
        f1 = faults()
        for o, v in views:
            out[o : o + v.size] = v
        t4 = time.perf_counter()
        total = sum(float(v.view(np.float32).sum()) for _, v in views)
        t5 = time.perf_counter()
        assert total > 0
        del views
        for b in bufs:
            b.unmap()
        r = rows[name]
        r["map"].append((t1 - t0) * 1e6)
        r["copy1"].append((t3 - t2) * 1e6)
        r["copy2"].append((t4 - t3) * 1e6)
        r["sum"].append((t5 - t4) * 1e6)
        r["faults"].append(f1 - f0)

    def one_host() -> None:
        r = rows["host"]
        f0 = faults()
        t2 = time.perf_counter()
        out[:] = host
        t3 = time.perf_counter()
        f1 = faults()
        out[:] = host
        t4 = time.perf_counter()
        assert float(host.view(np.float32).sum()) > 0
        t5 = time.perf_counter()
        r["map"].append(0.0)
        r["copy1"].append((t3 - t2) * 1e6)
        r["copy2"].append((t4 - t3) * 1e6)
        r["sum"].append((t5 - t4) * 1e6)
        r["faults"].append(f1 - f0)

    for _ in range(5):
        for name in rows:
            one(name)
    for r in rows.values():
        for c in r.values():
            c.clear()
    for _ in range(args.reads):
        for name in rows:
            one(name)
    assert np.array_equal(out.view(np.float32), np.arange(n // 4, dtype=np.float32))
    print(
        f"read-back of {n / 1e6:.1f} MB on {dev.caps.name} ({dev.caps.backend}): us per read (medians of {args.reads}), faults per copy1"
    )
    print(f"{'layout':8s} {'buffers':>7s} {'map':>8s} {'copy1':>8s} {'copy2':>8s} {'sum':>8s} {'faults':>7s}")
    for name, r in rows.items():
        med = {c: statistics.median(v) for c, v in r.items()}
        print(
            f"{name:8s} {len(layouts.get(name, [])):7d} {med['map']:8.1f} {med['copy1']:8.1f} {med['copy2']:8.1f} "
            f"{med['sum']:8.1f} {med['faults']:7.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
