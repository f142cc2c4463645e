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
from tests.strategies import quantized_values

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


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    k, v = (np.repeat(t, q.shape[1] // t.shape[1], axis=1) for t in (k, v))  # grouped-query: kv head h // group
    return _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])) @ v


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    a, b = np.split(x, 2, axis=-1)
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _rms_swiglu(x: np.ndarray, g: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    h = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * g
    a, b = h @ w1.T, h @ w2.T
    return a / (1 + np.exp(-a)) * b


def _rms_swiglu_run(x: tr.Tensor, g: tr.Tensor, w1: tr.Tensor, w2: tr.Tensor) -> tr.Tensor:
    h = tr.nn.rms_norm(x, g, 1e-5)
    return tr.nn.linear(h, w1).silu() * tr.nn.linear(h, w2)


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
    "scan": Case((K,), lambda a: tr.cumsum(a, -1), lambda a: np.cumsum(a, -1)),
    "flash_attention": Case(
        (_f32(1, 4, 5, 8), _f32(1, 2, 7, 8), _f32(1, 2, 7, 8)), tr.nn.scaled_dot_product_attention, _attention
    ),
    "rope": Case((_f32(1, 2, 3, 8), _f32(1, 2, 3, 4), _f32(1, 2, 3, 4)), tr.nn.rope, _rope),
    "gemv_multi": Case((_f32(1, 64), _f32(64), _f32(8, 64), _f32(8, 64)), _rms_swiglu_run, _rms_swiglu),
    "sample": Case((_f32(3, 50),), lambda z: tr.sample(z, temperature=0.0), lambda z: z.argmax(-1)),
    "qgemv": Case((_f32(1, 64), _f32(8, 64)), lambda x, w: tr.nn.linear(x, tr.quantize(w, tr.q8_0)),
                  lambda x, w: x @ quantized_values(w, "q8_0").T),
    "qgemm": Case((_f32(3, 64), _f32(8, 64)), lambda x, w: tr.nn.linear(x, tr.quantize(w, tr.q4_0)),
                  lambda x, w: x @ quantized_values(w, "q4_0").T),
    "dequant": Case((_f32(4, 64),), lambda w: tr.quantize(w, tr.q4_0).astype(tr.float32),
                    lambda w: quantized_values(w, "q4_0")),
    "qgather": Case((_f32(5, 32),), lambda w: tr.nn.embedding([4, 0, 2], tr.quantize(w, tr.q8_0)),
                    lambda w: quantized_values(w, "q8_0")[[4, 0, 2]]),
}  # fmt: skip
# one query row over 600 keys: attention_decode's key ranges, added up by attention_combine
_DECODE = Case(
    (_f32(1, 4, 1, 16), _f32(1, 2, 600, 16), _f32(1, 2, 600, 16)), tr.nn.scaled_dot_product_attention, _attention
)
CASES["attention_decode"] = CASES["attention_combine"] = _DECODE


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
