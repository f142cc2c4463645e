"""Every kernel keeps each thread's loop iterations within kernel.LOOP_BUDGET (issue 16.1).

lavapipe ends every loop of an invocation once the shader has run 65,535 iterations in all
(tests/probe_loop_limit.py); past it sums, argmaxes, softmaxes, norms and matmuls over long
rows came back short without an error. The first test asks every kernel the pipeline picks
for its worst thread's count (Kernel.loop_iterations) at sizes up to the largest binding the
adapter allows, without running anything; the `slow` ones run the reproducers of the issue
on the device against numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.kernel import LOOP_BUDGET
from backend_wgpu.kernels import kernel_class
from passes import run_pipeline
from tests.helpers import assert_close
from tests.strategies import Program, long_rows
from tests.test_fuzz import check_program

pytestmark = pytest.mark.gpu


def _largest() -> int:
    """Elements of the largest float32 tensor one binding holds on this adapter."""
    return get_device().caps.max_storage_binding // 4


# programs over broadcast constants: no memory is allocated, nothing runs
BIG: dict[str, Callable[[int], tr.Tensor]] = {
    "sum strided": lambda n: tr.ones((n // 2, 2)).sum(0),
    "argmax strided": lambda n: tr.ones((n // 2, 2)).argmax(0),
    "max contiguous": lambda n: (tr.ones(n) * 2).max(),
    "sum contiguous odd": lambda n: (tr.ones(n - 1) * 2).sum(),
    "softmax": lambda n: tr.softmax(tr.ones((n // 2, 2)), axis=0),
    "log_softmax": lambda n: tr.ones((2, n // 2)).log_softmax(-1),
    "layer_norm": lambda n: tr.nn.layer_norm(tr.ones((2, n // 2)), tr.ones(n // 2), tr.ones(n // 2)),
    "rms_norm": lambda n: tr.nn.rms_norm(tr.ones((2, n // 2)).T.T),
    "gemv k": lambda n: tr.ones((1, n)) @ tr.ones((n, 1)),
    "gemv split": lambda n: tr.ones((1, n // 2)) @ (tr.ones((n // 2, 2)) * 1),
    "gemm k": lambda n: tr.ones((8, n // 8)) @ tr.ones((n // 8, 8)),
    "gemm odd k": lambda n: tr.ones((3, n // 8 + 7)) @ tr.ones((n // 8 + 7, 3)),
    # a million channel x tap products per output (past LOOP_STEPS x MAX_UNROLL conv1d refuses loudly)
    "conv1d": lambda n: tr.nn.conv1d(tr.ones((1, 1 << 16, 4)), tr.ones((2, 1 << 16, 16)), padding=8),
}


@pytest.mark.parametrize("name", list(BIG))
def test_every_kernel_stays_within_the_loop_budget(name: str) -> None:
    dev = get_device()
    y = BIG[name](_largest())
    graph = run_pipeline(y.graph(), dev.caps).graph
    for node in graph:
        if node.kernel is not None:
            kernel = kernel_class(node.kernel.name)(node, graph, dev.caps.max_workgroups_per_dim)
            assert kernel.loop_iterations() <= LOOP_BUDGET, (name, node.kernel)


# --- the reproducers, run ------------------------------------------------------------------


@pytest.mark.slow
def test_sum_of_two_to_the_24_ones() -> None:
    assert float(tr.ones(1 << 24).sum()) == float(1 << 24)  # was 131070


@pytest.mark.slow
def test_reductions_and_rows_along_two_to_the_24() -> None:
    rng = np.random.default_rng(16)
    x = rng.standard_normal((1 << 24, 2)).astype(np.float32)
    x64, t = x.astype(np.float64), tr.tensor(x)
    scale = np.abs(x64).sum(0)
    np.testing.assert_allclose(t.sum(0).numpy(), x64.sum(0), atol=1e-6 * scale.max())
    np.testing.assert_array_equal(t.max(0).numpy(), x.max(0))
    np.testing.assert_array_equal(t.argmax(0).numpy(), x.argmax(0))
    np.testing.assert_array_equal(tr.tensor(x[:, 0].copy()).argmax().numpy(), x[:, 0].argmax())
    e = np.exp(x64 - x64.max(0))
    assert_close(tr.softmax(t, axis=0).numpy(), e / e.sum(0), rtol=1e-4, atol=1e-12)
    mean, var = x64.mean(0), x64.var(0)
    assert_close(tr.nn.layer_norm(t.T).numpy(), ((x64 - mean) / np.sqrt(var + 1e-5)).T, rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_long_k_matmuls() -> None:
    x = np.ones((1 << 20, 8), np.float32)
    assert float((tr.tensor(x).T @ tr.tensor(x))[0, 0]) == float(1 << 20)  # was 1048560
    rng = np.random.default_rng(16)
    a, b = rng.standard_normal((1, 1 << 24)).astype(np.float32), rng.standard_normal((1 << 24, 1)).astype(np.float32)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose((tr.tensor(a) @ tr.tensor(b)).numpy(), want, atol=1e-6 * np.abs(a).sum() * 4)


def test_work_no_kernel_can_split_is_refused_loudly() -> None:
    """Past LOOP_STEPS x MAX_UNROLL products per output, conv1d raises at compile instead of summing less."""
    y = tr.nn.conv1d(tr.ones((1, 1 << 20, 4)), tr.ones((2, 1 << 20, 32)), padding=16)
    with pytest.raises(tr.DeviceError, match=r"conv1d \(1, 2, 5\): kernel conv1d\[\] would run \d+ loop iterations"):
        tr.compile(y)
    assert float(tr.ones(8).sum()) == 8.0  # the device still works


@pytest.mark.slow
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.generate],  # shrinking a program of 2**24 elements takes longer than it tells
    suppress_health_check=list(HealthCheck),
)
@given(long_rows(f16=get_device().caps.shader_f16))
def test_random_long_rows_match_numpy(program: Program) -> None:
    """The fuzzer's check (GPU and interpreter after every pass, against numpy) on rows of 2**24 and more."""
    check_program(program)
