"""One small program per registered kernel, checked against numpy, on whatever adapter runs the tests.

Marked `gl`: `./dev test` runs this module (and the other `gl` tests) a second time on Mesa's
OpenGL adapter when WGJIT_TEST_GL=1 (CI sets it), so a kernel that only compiles where
shader-f16 or subgroups exist cannot break that path silently. Kernels that the rules pick only
on some adapters are forced through the caps, as tests/test_kernels_perf_variants.py does.
A registered kernel without a case here fails `test_every_registered_kernel_has_a_case`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from test_kernels_perf_variants import run_with_caps

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.kernels import KERNELS

pytestmark = [pytest.mark.gpu, pytest.mark.gl]

RNG = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _layer_norm(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


def _conv1d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    k = w.shape[-1]
    return np.stack([np.einsum("bck,ock->bo", xp[..., i : i + k], w) for i in range(xp.shape[-1] - k + 1)], -1)


def _written(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[4:6, 5:8] = b
    return out


@dataclass(frozen=True)
class Case:
    inputs: tuple[np.ndarray, ...]
    run: Callable[..., tr.Tensor]  # on the inputs as tensors
    ref: Callable[..., np.ndarray]  # on the inputs as arrays
    caps: dict[str, Any] = field(default_factory=dict)  # changed caps that make the rules pick this kernel


M, N, K = _f32(70, 40), _f32(40, 36), _f32(130, 300)
CASES: dict[str, Case] = {
    "elementwise": Case(
        (M,), lambda a: tr.maximum(a.exp() * 0.5 - 1.0, 0.0), lambda a: np.maximum(np.exp(a) * 0.5 - 1, 0)
    ),
    "reduce": Case((M,), lambda a: a.sum(axis=0), lambda a: a.sum(axis=0)),
    "row_reduce": Case((K,), lambda a: a.max(axis=1), lambda a: a.max(axis=1)),
    "softmax": Case((K,), lambda a: a.softmax(axis=0), lambda a: _softmax(a, 0)),
    "softmax_regs": Case((K,), lambda a: a.softmax(-1), _softmax),
    "norm": Case((K,), lambda a: tr.nn.layer_norm(a), _layer_norm),
    "gemm": Case((M, N), lambda a, b: a @ b, np.matmul, {"max_workgroup_storage": 8192}),
    "gemm_blocked": Case((_f32(130, 64), _f32(64, 132)), lambda a, b: a @ b, np.matmul),
    "gemv": Case((_f32(1, 300), _f32(36, 300)), lambda v, w: v @ w.T, lambda v, w: v @ w.T),
    "gemv_split": Case((_f32(1, 300), _f32(300, 36)), lambda v, w: v @ w, np.matmul),
    "concat": Case((M, N), lambda a, b: tr.concat([a, b.T], axis=0), lambda a, b: np.concatenate([a, b.T], 0)),
    "arange": Case((), lambda: tr.arange(5, 500, 3) * 2, lambda: np.arange(5, 500, 3, dtype=np.int32) * 2),
    "gather": Case((M,), lambda a: tr.index_select(a, [3, 0, 69], 0), lambda a: a[[3, 0, 69]]),
    "index_write": Case((M, N[:2, :3]), lambda a, b: a.realize().index_write(b, (4, 5)), _written),
    "conv1d": Case((_f32(2, 4, 20), _f32(6, 4, 3)), lambda x, w: tr.nn.conv1d(x, w, padding=1), _conv1d),
    "scan": Case((K,), lambda a: a.cumsum(axis=0), lambda a: np.cumsum(a, axis=0)),
    "bitonic_sort": Case((K,), lambda a: tr.argsort(a, axis=0), lambda a: np.argsort(a, axis=0, kind="stable")),
    "sort_merge": Case((_f32(2, 5000),), lambda a: tr.sort(a, descending=True), lambda a: -np.sort(-a)),
}


def test_every_registered_kernel_has_a_case() -> None:
    missing = sorted(set(KERNELS) - set(CASES))
    assert not missing, f"add a case to tests/test_every_kernel.py for {missing}: the GL pass must run every kernel"


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_runs_and_matches_numpy(name: str) -> None:
    case = CASES[name]
    y = case.run(*(tr.tensor(a) for a in case.inputs))
    got, program = run_with_caps(y, **case.caps)
    kernels = {d.kernel for d in program.dispatches}
    assert name in kernels, f"the rules picked {sorted(kernels)} for the {name} case: update the case"
    want = case.ref(*case.inputs)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-4 * scale)


def test_float16_is_refused_cleanly_without_shader_f16() -> None:
    if get_device().caps.shader_f16:
        pytest.skip("this adapter has shader-f16 (the refusal is tested with patched caps in test_bad_inputs)")
    with pytest.raises(tr.DTypeError, match="shader-f16"):
        tr.ones(3).astype(tr.float16)
    np.testing.assert_allclose((tr.tensor(M) * 2).numpy(), M * 2)  # and float32 still runs
