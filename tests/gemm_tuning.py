"""Test helpers: compile a tensor's graph with chosen GEMM configurations named in a tuning table."""

from __future__ import annotations

import dataclasses

import numpy as np

import tracer as tr
from backend_wgpu import Program, get_device
from backend_wgpu.autotune import gemm_keys
from ir.tuning import TunedEntry, TuningTable
from passes import run_pipeline
from tracer.graph_builder import build_graph


def table_for(keys: list[str], config: str, source: str = "test table") -> TuningTable:
    entry = TunedEntry(config, 1e-6, "b64", 2e-6)
    return TuningTable(tuple((k, entry) for k in sorted(keys)), source=source)


def run_tuned(y: tr.Tensor, config: str | None, **caps_changes: object) -> tuple[np.ndarray, Program]:
    """Compile y with every GEMM set to `config` (None: the built-in rules) and run it once."""
    dev = get_device()
    built = build_graph([y._lazy])
    caps = dataclasses.replace(dev.caps, tuning=TuningTable(), **caps_changes)
    if config is not None:
        caps = dataclasses.replace(caps, tuning=table_for(gemm_keys(built.graph, caps), config))
    program = Program(run_pipeline(built.graph, caps).graph, dev)
    buffers = []
    for lz in built.inputs:
        if lz.buffer is None:
            lz.buffer = dev.upload(lz.host)
            lz.host = None
        buffers.append(lz.buffer)
    out = program.run(buffers)[0]
    return np.frombuffer(dev.read(out), dtype=y.dtype.np)[: y.size].reshape(y.shape), program
