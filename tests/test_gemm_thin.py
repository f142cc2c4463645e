"""gemm_thin: products of a few rows (2..THIN_GEMM_MAX_M, by passes.select_kernels.thin_gemm_wins) with B
contiguous along k, against numpy."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.kernels.matmul.gemm_thin import parts_size
from ir.dtypes import DType
from ir.view import View
from passes.select_kernels import THIN_GEMM_MAX_M, GemmProblem, gemv_candidates, thin_gemm_choice
from tests.helpers import assert_close
from tests.test_kernels_perf_variants import run_with_caps

RNG = np.random.default_rng(11)


def _kernels(t: tr.Tensor) -> str:
    return str(tr.explain(t)).replace("test_gemm_thin.py", "")  # the kernels, not the caller's file name


@pytest.mark.parametrize(
    ("m", "n", "k"),
    [
        (2, 8, 12),
        (5, 7, 9),
        (16, 384, 1536),
        (16, 40, 384),
        (17, 33, 64),
        (20, 24, 100),
        (THIN_GEMM_MAX_M, 64, 128),
        (48, 1536, 400),
    ],
)
def test_thin_products_match_numpy(m: int, n: int, k: int) -> None:
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    y = tr.tensor(x) @ tr.tensor(w).T
    assert "gemm_thin" in _kernels(y)
    assert_close(y.numpy(), x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_a_fused_epilogue_batches_and_a_strided_a() -> None:
    """MiniLM's shape of linear: bias, gelu and a residual on the product; a batch of 2; A a column slice."""
    big = RNG.standard_normal((2, 6, 80)).astype(np.float32)
    x = big[:, :, 8:72]  # rows 80 apart: A read through its strides (vec4 along k: 8 and 80 are multiples of 4)
    w = RNG.standard_normal((24, 64)).astype(np.float32)
    bias = RNG.standard_normal(24).astype(np.float32)
    res = RNG.standard_normal((2, 6, 24)).astype(np.float32)
    y = (tr.tensor(big)[:, :, 8:72] @ tr.tensor(w).T + tr.tensor(bias)).gelu() + tr.tensor(res)
    assert "gemm_thin" in _kernels(y)
    h = x.astype(np.float64) @ w.T + bias
    want = 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2))) + res
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_float16_operands_and_scalar_loads() -> None:
    x = RNG.standard_normal((4, 13)).astype(np.float16)  # k = 13: no vector loads along k
    w = RNG.standard_normal((10, 13)).astype(np.float16)
    y = tr.tensor(x) @ tr.tensor(w).T
    assert "gemm_thin" in _kernels(y)
    assert_close(y.numpy(), x.astype(np.float64) @ w.T.astype(np.float64), rtol=2e-3, atol=2e-3)


def test_more_rows_or_b_along_n_stay_with_the_blocked_gemm() -> None:
    x = RNG.standard_normal((THIN_GEMM_MAX_M + 1, 32)).astype(np.float32)
    w = RNG.standard_normal((16, 32)).astype(np.float32)
    y = tr.tensor(x) @ tr.tensor(w).T
    assert "gemm_thin" not in _kernels(y) and "gemm_blocked" in _kernels(y)
    assert_close(y.numpy(), x @ w.T, rtol=1e-5, atol=1e-4)
    v = RNG.standard_normal((4, 32)).astype(np.float32)
    z = tr.tensor(v) @ tr.tensor(w.T.copy())  # B (32, 16) contiguous along n
    assert "gemm_thin" not in _kernels(z)
    assert_close(z.numpy(), v @ w.T, rtol=1e-5, atol=1e-4)


def test_rule_sizes_and_tuning_names() -> None:
    """Rows split evenly in blocks of at most 16; threads along k 32..256; the tuner's names are gemv's."""
    caps = get_device().caps
    b = View((1536, 8), (1, 1536), 0)  # W.T of a (8, 1536) weight: contiguous along k
    p = GemmProblem(1, 20, 8, 1536, View.contiguous((20, 1536)), b, (DType.float32,) * 3)
    assert p.family == "gemm_thin"
    choice = thin_gemm_choice(p, caps)
    assert choice.param("rows") == 10  # 20 rows: two blocks of ten
    assert 32 <= choice.workgroup[0] <= 256
    names = gemv_candidates(p, caps)
    assert names and all(n.startswith("wg") for n in names)


@pytest.mark.parametrize("subgroups", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), [(16, 40, 384), (9, 13, 1000), (3, 64, 2048)])
def test_with_and_without_subgroups_and_more_block_outputs_than_threads(
    subgroups: bool, m: int, n: int, k: int
) -> None:
    """The parts of each block element meet through workgroup memory alone, or after subgroup sums; blocks of
    rows x cols larger than the workgroup store through a loop; k = 1000 reads vec4 with a ragged tail of threads."""
    if subgroups and not get_device().caps.subgroups:
        pytest.skip("the adapter has no subgroups")
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    got, program = run_with_caps(tr.tensor(x) @ tr.tensor(w).T, subgroups=subgroups)
    (d,) = program.dispatches
    assert d.kernel == "gemm_thin" and (":sg" in d.variant) == subgroups, d.variant
    assert_close(got, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-3)


def test_batched_operands_on_both_sides() -> None:
    """q @ k.T per head (B batched too, read along k): every batch's own rows and columns."""
    q = RNG.standard_normal((3, 2, 40, 48)).astype(np.float32)
    k = RNG.standard_normal((3, 1, 24, 48)).astype(np.float32)  # broadcast over the second batch dim
    y = tr.tensor(q) @ tr.tensor(k).transpose(-1, -2)
    assert "gemm_thin[" in _kernels(y)
    assert_close(y.numpy(), q.astype(np.float64) @ np.swapaxes(k, -1, -2), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("config", ["wg32.u1", "wg64.u4", "wg256.u2"])
def test_a_tuned_configuration_sets_threads_and_unroll(config: str) -> None:
    """`wgjit tune`'s winners for a gemm_thin problem (gemv's names) reach the kernel; values stay numpy's."""
    from gemm_tuning import run_tuned

    x = RNG.standard_normal((12, 520)).astype(np.float32)
    w = RNG.standard_normal((40, 520)).astype(np.float32)
    got, program = run_tuned(tr.tensor(x) @ tr.tensor(w).T, config)
    (d,) = program.dispatches
    threads, unroll = (int(p.lstrip("wgu")) for p in config.split("."))
    assert d.kernel == "gemm_thin" and d.workgroup_size[0] == threads and f":u{unroll}" in d.variant, d
    assert_close(got, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-3)


def test_tuning_candidates_fit_the_workgroup_memory() -> None:
    """Without subgroups each thread keeps its own partial sums in workgroup memory: the tuner never offers a
    workgroup whose sums would not fit."""
    caps = dataclasses.replace(get_device().caps, subgroups=False, max_workgroup_storage=16384, max_invocations=1024)
    b = View((4096, 64), (1, 4096), 0)
    p = GemmProblem(1, 16, 64, 4096, View.contiguous((16, 4096)), b, (DType.float32,) * 3)
    names = gemv_candidates(p, caps)
    threads = {int(n.split(".")[0][2:]) for n in names}
    assert threads and max(threads) == 256  # 16 rows x 256 threads x 4 bytes = 16 KiB
    assert 4 * parts_size(16, 1, max(threads), False) <= caps.max_workgroup_storage


@pytest.mark.parametrize("a_shape,b_shape", [((0, 8, 0, 3), (3, 3)), ((2, 0, 5), (5, 4)), ((0, 3), (3, 7))])
def test_products_of_no_rows(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    """A product with no rows (the fuzzer's (0, 8, 0, 3) @ (3, 3) divided by zero choosing gemm_thin's row
    blocks): an empty result of numpy's shape, whatever kernel the rules name."""
    a = np.ones(a_shape, np.float32)
    b_t = np.arange(math.prod(b_shape), dtype=np.float32).reshape(b_shape[::-1])  # B read along k, as x @ W.T
    got = (tr.tensor(a) @ tr.tensor(b_t).swapaxes(-1, -2)).numpy()
    assert got.shape == (a @ b_t.T).shape and got.size == 0
