"""Per-kernel profiling: one timing per dispatch, bytes and flops counted from the graph, both clocks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from inspect_common import tiny, tiny_reference

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.profile import ROW_FLOPS_PER_ELEMENT, dispatch_bytes, dispatch_flops
from tracer.inspect.profiling import op_shares

# tiny() shows an in-place chain and buffer reuse: fusion would fold them into one kernel
pytestmark = pytest.mark.usefixtures("no_fusion")


def _check(profile, program):
    assert [k.node for k in profile.kernels] == [d.node for d in program.dispatches]
    assert [k.key for k in profile.kernels] == [d.key for d in program.dispatches]
    assert all(k.seconds > 0 for k in profile.kernels)
    assert profile.total_seconds == pytest.approx(sum(k.seconds for k in profile.kernels))
    shares = profile.by_op()
    assert sum(s for _, _, s in shares) == pytest.approx(1.0)
    assert [op for op, _, _ in shares] == sorted(
        {k.op for k in profile.kernels}, key=lambda op: -sum(k.seconds for k in profile.kernels if k.op == op)
    )
    for k in profile.kernels:
        assert k.gbps == pytest.approx(k.bytes / k.seconds / 1e9)
        assert k.gflops == pytest.approx(k.flops / k.seconds / 1e9)


def test_profile_times_every_dispatch_and_counts_work():
    y = tiny()
    program = tr.compile(y)
    profile = program.profile(repeats=2)
    caps = get_device().caps
    assert profile.clock == ("gpu-timestamps" if caps.timestamps else "wall-clock")
    _check(profile, program)
    by_op = {k.op: k for k in profile.kernels}
    # matmul (4x6)@(6x3): 2*M*N*K flops; reads both operands, writes the 4x3 result
    assert by_op["matmul"].flops == 2 * 4 * 3 * 6
    assert by_op["matmul"].bytes == (24 + 18 + 12) * 4
    # add with a broadcast scalar: one flop per element; the scalar counts once, not 12 times
    assert by_op["add"].flops == 12 and by_op["add"].bytes == (12 + 1 + 12) * 4
    assert by_op["sum"].flops == 12 and by_op["sum"].bytes == (12 + 4) * 4
    softmaxes = [k for k in profile.kernels if k.op == "softmax"]
    assert [k.flops for k in softmaxes] == [ROW_FLOPS_PER_ELEMENT * 12] * 2
    # profiling is apart from the run path: the program still computes the right values after it
    np.testing.assert_allclose(y.numpy(), tiny_reference(), rtol=1e-5, atol=1e-6)


def test_wall_clock_when_the_adapter_has_no_timestamps(monkeypatch):
    dev = get_device()
    monkeypatch.setattr(dev, "caps", replace(dev.caps, timestamps=False))
    program = tr.compile(tiny())
    profile = program.profile(repeats=1)
    assert profile.clock == "wall-clock"
    assert any("no timestamp queries" in n for n in profile.notes)
    _check(profile, program)
    assert "wall-clock" in profile.summary()


def test_profile_inputs_are_checked():
    program = tr.compile(tiny())
    with pytest.raises(ValueError, match="takes 3 inputs, got 1"):
        program.profile(inputs=[get_device().alloc(4)])
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        program.profile(repeats=0)
    with pytest.raises(ValueError, match="repeat_each must be at least 1"):
        program.profile(repeat_each=0)


def test_each_dispatch_repeated_in_its_pass():
    y = tiny()
    program = tr.compile(y)
    profile = program.profile(repeats=1, repeat_each=4)
    _check(profile, program)
    if profile.clock == "gpu-timestamps":
        assert any("ran 4 times" in n for n in profile.notes)
    np.testing.assert_allclose(y.numpy(), tiny_reference(), rtol=1e-5, atol=1e-6)


def test_dispatches_timed_inside_the_programs_one_pass():
    y = tiny()
    program = tr.compile(y)
    if "timestamp-query-inside-passes" not in get_device().device.features:
        with pytest.raises(ValueError, match="no timestamp queries inside passes"):
            program.profile(repeats=1, in_pass=True)
        return
    profile = program.profile(repeats=2, in_pass=True)
    _check(profile, program)
    assert profile.clock == "gpu-timestamps" and any("one pass" in n for n in profile.notes)
    assert sum(k.seconds for k in profile.kernels) > 0
    np.testing.assert_allclose(y.numpy(), tiny_reference(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="leave repeat_each at 1"):
        program.profile(repeat_each=2, in_pass=True)


def test_bytes_and_flops_of_copy_and_batched_matmul():
    a = tr.randn(2, 3, 5, seed=0)
    b = tr.randn(2, 5, 4, seed=1)
    g = tr.compile((a @ b).T.contiguous()).graph
    mm = next(n for n in g if n.op.value == "matmul")
    copy = next(n for n in g if n.op.value == "copy")
    assert dispatch_flops(g, mm.id) == 2 * 2 * 3 * 4 * 5
    assert dispatch_flops(g, copy.id) == 0 and dispatch_bytes(g, copy.id) == 2 * 24 * 4


def test_op_shares_weigh_programs_by_realizations():
    with tr.record() as rec:
        tr.compile(tiny())
    prog = rec.programs[0]
    prog.profile = prog.program.profile(repeats=1)
    prog.realizations = 3
    shares = dict((op, s) for op, s, _ in op_shares([prog]))
    for op, s, _ in prog.profile.by_op():
        assert shares[op] == pytest.approx(3 * s)
