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


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]  # the half form's pairs (x[i], x[i + d/2])
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _dequantized(w: np.ndarray, fmt: str) -> np.ndarray:
    """What tr.quantize(w, fmt) holds, by the gguf package's own quantize and dequantize."""
    import gguf

    kind = gguf.GGMLQuantizationType[fmt.upper()]
    return gguf.quants.dequantize(gguf.quants.quantize(w, kind), kind).reshape(w.shape)


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
    needs: str = ""  # a package the case needs (skipped, saying so, without it)


M, N, K = _f32(70, 40), _f32(40, 36), _f32(130, 300)
W = _f32(17, 64)  # quantized weights: 17 rows of two 32-element blocks
Q, KV = _f32(1, 2, 16, 8), _f32(1, 2, 20, 8)
QD, KD = _f32(1, 4, 1, 16), _f32(1, 4, 700, 16)  # one query row over many keys: flash-decoding
SWIGLU = (_f32(1, 32), _f32(24, 32), _f32(24, 32))
CASES: dict[str, Case] = {
    "elementwise": Case(
        (M,), lambda a: tr.maximum(a.exp() * 0.5 - 1.0, 0.0), lambda a: np.maximum(np.exp(a) * 0.5 - 1, 0)
    ),
    "reduce": Case((M,), lambda a: a.sum(axis=0), lambda a: a.sum(axis=0)),
    "row_reduce": Case((K,), lambda a: a.max(axis=1), lambda a: a.max(axis=1)),
    "softmax": Case((K,), lambda a: a.softmax(axis=0), lambda a: _softmax(a, 0)),
    "softmax_regs": Case((K,), lambda a: a.softmax(-1), _softmax),
    "norm": Case((K,), lambda a: tr.nn.layer_norm(a.T), lambda a: _layer_norm(a.T)),  # strided rows
    "norm_regs": Case((K,), lambda a: tr.nn.layer_norm(a), _layer_norm),
    "gemm": Case((M, N), lambda a, b: a @ b, np.matmul, {"max_workgroup_storage": 8192}),
    "gemm_blocked": Case((_f32(130, 64), _f32(64, 132)), lambda a, b: a @ b, np.matmul),
    "gemv": Case((_f32(1, 300), _f32(36, 300)), lambda v, w: v @ w.T, lambda v, w: v @ w.T),
    "gemv_split": Case((_f32(1, 300), _f32(300, 36)), lambda v, w: v @ w, np.matmul),
    "gemm_thin": Case((_f32(7, 300), _f32(36, 300)), lambda x, w: x @ w.T, lambda x, w: x @ w.T),
    "concat": Case((M, N), lambda a, b: tr.concat([a, b.T], axis=0), lambda a, b: np.concatenate([a, b.T], 0)),
    "arange": Case((), lambda: tr.arange(5, 500, 3) * 2, lambda: np.arange(5, 500, 3, dtype=np.int32) * 2),
    "gather": Case((M,), lambda a: tr.index_select(a, [3, 0, 69], 0), lambda a: a[[3, 0, 69]]),
    "index_write": Case((M, N[:2, :3]), lambda a, b: a.realize().index_write(b, (4, 5)), _written),
    "conv1d": Case((_f32(2, 4, 20), _f32(6, 4, 3)), lambda x, w: tr.nn.conv1d(x, w, padding=1), _conv1d),
    "scan": Case((K,), lambda a: a.cumsum(axis=0), lambda a: np.cumsum(a, axis=0)),
    "bitonic_sort": Case((K,), lambda a: tr.argsort(a, axis=0), lambda a: np.argsort(a, axis=0, kind="stable")),
    "sort_merge": Case((_f32(2, 5000),), lambda a: tr.sort(a, descending=True), lambda a: -np.sort(-a)),
    "rope": Case((_f32(2, 3, 8), _f32(3, 4), _f32(3, 4)), tr.nn.rope, _rope),
    "flash_attention": Case((Q, KV, KV), tr.nn.scaled_dot_product_attention, _attention),
    "attention_decode": Case((QD, KD, KD), tr.nn.scaled_dot_product_attention, _attention),
    "attention_combine": Case(
        (QD, KD, KD), tr.nn.scaled_dot_product_attention, _attention, {"max_workgroup_storage": 16384}
    ),
    "gemv_multi": Case(
        SWIGLU,
        lambda x, g, u: (x @ g.T).silu() * (x @ u.T),
        lambda x, g, u: (x @ g.T) / (1 + np.exp(-x @ g.T)) * (x @ u.T),
    ),
    "sample": Case((K,), lambda a: tr.sample(a, temperature=0), lambda a: a.argmax(axis=-1)),
    "dequant": Case(
        (), lambda: tr.quantize(W, tr.q8_0).astype(tr.float32), lambda: _dequantized(W, "q8_0"), needs="gguf"
    ),
    "qgemv": Case(
        (K[0, :64],),
        lambda x: tr.nn.linear(x, tr.quantize(W, tr.q4_0)),
        lambda x: _dequantized(W, "q4_0") @ x,
        needs="gguf",
    ),
    "qgemm": Case(  # a weight whose float copy would not fit a binding keeps qgemm (passes.dequantize_wide)
        (_f32(130, 64),),
        lambda x: x @ tr.quantize(W, tr.q8_0).T,
        lambda x: x @ _dequantized(W, "q8_0").T,
        {"max_storage_binding": 4096},
        needs="gguf",
    ),
    "qgemm_thin": Case(
        (K[:5, :64],), lambda x: x @ tr.quantize(W, tr.q4_0).T, lambda x: x @ _dequantized(W, "q4_0").T, needs="gguf"
    ),
    "qgather": Case(
        (),
        lambda: tr.nn.embedding(tr.tensor([3, 0, 16]), tr.quantize(W, tr.q4_0)),
        lambda: _dequantized(W, "q4_0")[[3, 0, 16]],
        needs="gguf",
    ),
}


def test_every_registered_kernel_has_a_case() -> None:
    missing = sorted(set(KERNELS) - set(CASES))
    assert not missing, f"add a case to tests/test_every_kernel.py for {missing}: the GL pass must run every kernel"


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_runs_and_matches_numpy(name: str) -> None:
    case = CASES[name]
    if case.needs:
        pytest.importorskip(case.needs, reason=f"the {name} case needs the {case.needs} package")
    y = case.run(*(tr.tensor(a) for a in case.inputs))
    got, program = run_with_caps(y, **case.caps)
    kernels = {d.kernel for d in program.dispatches}
    assert name in kernels, f"the rules picked {sorted(kernels)} for the {name} case: update the case"
    want = case.ref(*case.inputs)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-4 * scale)


def test_half_floats_are_refused_cleanly_without_the_feature() -> None:
    """Named without float16 or f16: conftest skips those on adapters lacking shader-f16, exactly where this must run."""
    if get_device().caps.shader_f16:
        pytest.skip("this adapter has shader-f16 (the refusal is tested with patched caps in test_bad_inputs)")
    with pytest.raises(tr.DTypeError, match="shader-f16"):
        tr.ones(3).astype(tr.float16)
    np.testing.assert_allclose((tr.tensor(M) * 2).numpy(), M * 2)  # and float32 still runs
