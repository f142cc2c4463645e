"""Long use: many realizations of mixed shapes, printing what wgjit holds as it goes.

    python tests/long_use_run.py 10000

Each line: realizations so far, seconds, live wgpu objects (buffers and their bytes, bind
groups, pipelines), wgjit's caches (pipelines, programs, constants), python heap
(tracemalloc) and the process's peak RSS. tests/test_long_use.py runs the same workload
with a smaller count and asserts the plateau.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tracer as tr  # noqa: E402


def step(i: int, rng: np.random.Generator) -> np.ndarray:
    """One realization: five program shapes over a cycle of 23 sizes, and a random size every 7th."""
    n = int(rng.integers(1, 300)) if i % 7 == 0 else (1 + i % 23) * 4
    x = tr.tensor(rng.standard_normal((n, 8), dtype=np.float32))
    kind = i % 5
    if kind == 0:
        y = (x * 2 + 1).relu().sum(axis=1)
    elif kind == 1:
        y = (x @ x.T).softmax(-1)
    elif kind == 2:
        y = tr.concat([x, x[::2]], axis=0).max(axis=0)
    elif kind == 3:
        y = (x.exp() - x.mean(axis=1, keepdims=True)).astype(tr.float16)
    else:
        y = x[None, :, 1:5].transpose(0, 2).argmax(axis=-1)
    return y.numpy()


def snapshot() -> dict[str, float]:
    """Live GPU objects and wgjit's cache sizes (after a collection: what is really held)."""
    import wgpu

    from backend_wgpu.device import get_device
    from tracer.host import CONSTANTS

    realize = sys.modules["tracer.realize"]  # the package exports a function of that name
    gc.collect()
    counts = wgpu.diagnostics.object_counts.get_dict()
    return {
        "buffers": counts["Buffer"]["count"],
        "buffer_MiB": round(counts["Buffer"].get("resource_mem", 0) / 2**20, 2),
        "bind_groups": counts["BindGroup"]["count"],
        "pipelines": counts["ComputePipeline"]["count"],
        "pipeline_cache": len(get_device().pipelines),
        "programs": len(realize.cached_programs()),
        "constants": len(CONSTANTS),
        "python_MiB": round(tracemalloc.get_traced_memory()[0] / 2**20, 2) if tracemalloc.is_tracing() else -1,
        "maxrss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    tracemalloc.start()
    rng = np.random.default_rng(0)
    t0 = time.time()
    for i in range(n):
        step(i, rng)
        if (i + 1) % max(1, n // 10) == 0:
            print(i + 1, f"{time.time() - t0:.0f}s", snapshot(), flush=True)


if __name__ == "__main__":
    main()
