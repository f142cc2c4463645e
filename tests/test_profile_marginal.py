"""Marginal profiling: what each kind of dispatch adds to the program's one pass.

No timed assertions: lavapipe's times say nothing about a GPU's, and a marginal cost is a
difference of two medians, which noise may make slightly negative; only finiteness is checked.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import replace

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.profile import Profile
from backend_wgpu.program import Program
from tracer.graph_builder import build_graph

XN = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
W1 = np.linspace(-0.5, 0.5, 64, dtype=np.float32).reshape(8, 8)
W2 = np.linspace(0.3, -0.2, 64, dtype=np.float32).reshape(8, 8)


def two_layers(x: tr.Tensor, w1: tr.Tensor, w2: tr.Tensor) -> tr.Tensor:
    """matmul, add and softmax over two same-shaped weights, summed: each kind of kernel runs twice
    (not softmax(x @ w1) @ w2, which fuse_attention makes one attention)."""
    return ((x @ w1) + 1.0).softmax(axis=-1) + ((x @ w2) + 1.0).softmax(axis=-1)


def reference() -> np.ndarray:
    total = np.zeros((4, 8), np.float32)
    for w in (W1, W2):
        h = XN @ w + 1.0
        h = np.exp(h - h.max(-1, keepdims=True))
        total += h / h.sum(-1, keepdims=True)
    return total


def compiled() -> tuple[tuple[tr.Tensor, ...], tr.Tensor, Program]:
    """The realized leaves, the pending result and its program."""
    leaves = tr.tensor(XN), tr.tensor(W1), tr.tensor(W2)
    tr.realize(*leaves)
    y = two_layers(*leaves)
    return leaves, y, tr.compile(y)


def check_marginal(profile: Profile, program: Program) -> None:
    """One KernelTime per dispatch, in order; one value per kernel key; a positive base pass."""
    assert [k.node for k in profile.kernels] == [d.node for d in program.dispatches]
    by_key: dict[str, set[float]] = defaultdict(set)
    for k in profile.kernels:
        by_key[k.key].add(k.seconds)
        assert math.isfinite(k.seconds)  # may be slightly negative: noise
    assert all(len(values) == 1 for values in by_key.values())
    assert profile.base_seconds is not None and profile.base_seconds > 0
    assert profile.clock.endswith("-marginal")
    assert any("marginal in-pass cost" in n for n in profile.notes)
    assert "the program in one pass" in profile.summary()
    assert profile.to_dict()["base_seconds"] == profile.base_seconds


@pytest.mark.usefixtures("no_fusion")
def test_marginal_gives_one_value_per_kernel_key_and_leaves_the_program_intact():
    leaves, y, program = compiled()
    counts = Counter(d.key for d in program.dispatches)
    assert {d.op for d in program.dispatches} >= {"matmul", "add", "softmax"}
    assert any(d.inplace for d in program.dispatches), program.summary()  # its copies work on their own result
    assert max(counts.values()) >= 2, program.summary()  # a key with several dispatches shares one value
    profile = program.profile(repeats=2, marginal=3)
    check_marginal(profile, program)
    assert profile.clock == ("gpu-timestamps" if get_device().caps.timestamps else "wall-clock") + "-marginal"
    # the duplicated in-place dispatches wrote over the program's temporaries only: it still computes right
    np.testing.assert_allclose(y.numpy(), reference(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(two_layers(*leaves).numpy(), reference(), rtol=1e-5, atol=1e-6)


def test_marginal_on_the_callers_inputs_and_fused_kernels():
    leaves, y, program = compiled()
    assert any(d.op == "fused" for d in program.dispatches), program.summary()
    inputs = [lz.buffer for lz in build_graph([y._lazy]).inputs]
    assert all(b is not None for b in inputs)
    profile = program.profile(inputs=inputs, repeats=1, marginal=1)
    check_marginal(profile, program)
    # the user's tensors are inputs nothing lets the program overwrite: unchanged
    for t, want in zip(leaves, (XN, W1, W2), strict=True):
        np.testing.assert_array_equal(t.numpy(), want)
    out = program.run(inputs)[0]
    got = np.frombuffer(get_device().read(out), np.float32).reshape(y.shape)
    np.testing.assert_allclose(got, reference(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), reference(), rtol=1e-5, atol=1e-6)


def test_marginal_by_wall_clock_without_timestamps(monkeypatch):
    dev = get_device()
    monkeypatch.setattr(dev, "caps", replace(dev.caps, timestamps=False))
    _, y, program = compiled()
    profile = program.profile(repeats=1, marginal=2)
    check_marginal(profile, program)
    assert profile.clock == "wall-clock-marginal"
    assert any("wall clock around submit and wait" in n for n in profile.notes)
    np.testing.assert_allclose(y.numpy(), reference(), rtol=1e-5, atol=1e-6)


def test_marginal_argument_errors_name_the_conflict():
    program = compiled()[2]
    with pytest.raises(ValueError, match="marginal must be 0 .* got -1"):
        program.profile(marginal=-1)
    with pytest.raises(ValueError, match="marginal and in_pass=True"):
        program.profile(marginal=2, in_pass=True)
    with pytest.raises(ValueError, match="marginal=2 .* leave repeat_each at 1"):
        program.profile(marginal=2, repeat_each=4)
    assert program.profile(repeats=1).base_seconds is None  # the other modes have no base pass
