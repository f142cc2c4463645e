"""Per-kernel GPU time of the MiniLM forward with its weights inside the program (cast from
the stored dtype every run) and with the weights realized beforehand: a diagnosis aid."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import minilm  # noqa: E402

import tracer as tr  # noqa: E402
from backend_wgpu.profile import profile_program  # noqa: E402
from tracer.graph_builder import build_graph  # noqa: E402
from tracer.realize import device_buffer, program_for  # noqa: E402


def profile_forward(model: minilm.MiniLM, ids: np.ndarray, mask: np.ndarray, label: str) -> None:
    hidden = model.forward(ids, np.zeros_like(ids), mask)
    built = build_graph([hidden._lazy])
    program = program_for(built.graph)
    prof = profile_program(program, [device_buffer(lz) for lz in built.inputs], repeats=5)
    rows = sorted(prof.kernels, key=lambda k: -k.seconds)
    print(f"== {label}: {len(program.dispatches)} dispatches, total {prof.total_seconds * 1e3:.3f} ms ({prof.clock})")
    for k in rows[:12]:
        print(f"  {k.seconds * 1e6:9.1f} us  {k.op:<10} {k.kernel}[{k.variant}]  {k.gbps:8.1f} GB/s")


def one_pass_ms(model: minilm.MiniLM, ids: np.ndarray, mask: np.ndarray) -> float:
    """GPU time of the whole forward as one compute pass (as `wgjit bench` times it)."""
    from backend_wgpu import get_device
    from benchmarks.timing import ProgramTimer, time_program

    hidden = model.forward(ids, np.zeros_like(ids), mask)
    built = build_graph([hidden._lazy])
    program = program_for(built.graph)
    t = time_program(program, [device_buffer(lz) for lz in built.inputs], ProgramTimer(get_device()), 3, 10)
    return t.median


def compare_weight_sources() -> None:
    m = minilm._model()
    ids = np.random.default_rng(0).integers(1000, 20000, (32, 128)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1::2, 96:] = 0
    print(f"one pass, weights cast inside the program: {one_pass_ms(m, ids, mask):.3f} ms")
    tr.realize(*m.w.values())
    print(f"one pass, weights realized by a cast program: {one_pass_ms(m, ids, mask):.3f} ms")
    m.w = {k: tr.tensor(v.numpy()) for k, v in m.w.items()}
    print(f"one pass, weights uploaded from the host: {one_pass_ms(m, ids, mask):.3f} ms")


if __name__ == "__main__" and "--sources" in sys.argv:
    compare_weight_sources()
elif __name__ == "__main__":
    m = minilm._model()
    ids = np.random.default_rng(0).integers(1000, 20000, (32, 128)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1::2, 96:] = 0
    profile_forward(m, ids, mask, "weights cast inside the program")
    tr.realize(*m.w.values())
    profile_forward(m, ids, mask, "weights realized first")
