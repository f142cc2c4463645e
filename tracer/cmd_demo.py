"""`wgjit demo`: trace a small program, show its graph and kernels, run it, check it."""

from __future__ import annotations

import argparse

import numpy as np


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="trace, compile, run and check a small program")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import tracer as tr
    from backend_wgpu import get_device
    from passes import run_pipeline

    print(f"device: {get_device().caps.name} ({get_device().caps.backend})\n")
    x = tr.randn(64, 96, seed=0)
    w = tr.randn(96, 32, seed=1)
    b = tr.randn(32, seed=2)
    # a small MLP head: nothing runs while these lines execute
    h = (x @ w + b).gelu()
    y = (h - h.mean(axis=-1, keepdims=True)).softmax(axis=-1)
    print("traced graph:")
    print(y.graph())
    program = tr.compile(y)
    print("\nafter the passes (kernel, KernelElement width, in-place, buffer slot):")
    print(run_pipeline(y.graph(), get_device().caps).graph)
    print()
    print(program.summary())

    got = y.numpy()
    xn, wn, bn = x.numpy(), w.numpy(), b.numpy()
    hn = xn @ wn + bn
    from math import erf

    hn = 0.5 * hn * (1 + np.vectorize(erf)(hn / np.sqrt(2)))
    zn = hn - hn.mean(axis=-1, keepdims=True)
    ref = np.exp(zn - zn.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    err = float(np.abs(got - ref).max())
    ok = err < 1e-5
    print(f"\nresult {got.shape}, max |wgjit - numpy| = {err:.2e}: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1
