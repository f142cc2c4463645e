"""The fast kernel variants (issue 5) against numpy, on sizes that do not divide their tiles.

Each test asserts which kernel and variant select_kernels chose (through the compiled
program's dispatches), so a change of rule that silently routes a case elsewhere fails.
Both reduction paths (subgroups and workgroup-memory trees) run: the tests compile with
the device's caps, and again with subgroups switched off.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import Program, get_device
from passes import run_pipeline
from passes import select_kernels as sk
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(1234)


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def the_dispatch(y: tr.Tensor, op: str) -> object:
    found = [d for d in tr.compile(y).dispatches if d.op == op]
    assert len(found) == 1, tr.compile(y).summary()
    return found[0]


def run_with_caps(y: tr.Tensor, **caps_changes: object) -> tuple[np.ndarray, Program]:
    """Compile y with modified device caps (e.g. subgroups=False) and run it once."""
    dev = get_device()
    built = build_graph([y._lazy])
    caps = dataclasses.replace(dev.caps, **caps_changes)
    program = Program(run_pipeline(built.graph, caps).graph, dev)
    buffers = []
    for lz in built.inputs:
        if lz.buffer is None:
            lz.buffer = dev.upload(lz.host)
            lz.host = None
        buffers.append(lz.buffer)
    out = program.run(buffers)[0]
    return np.frombuffer(dev.read(out), dtype=y.dtype.np).reshape(y.shape), program


def close(got: np.ndarray, want: np.ndarray, tol: float = 1e-5) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * scale)


# --- gemm_blocked ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "m,k,n,ta,tb,variant",
    [
        (65, 36, 68, False, False, "a_k4.b_n4.o4"),  # edges in m; vec4 everywhere
        (67, 33, 70, False, False, "a_s.b_s.o1"),  # k and n odd: scalar loads and stores
        (3, 4, 5, False, False, "a_k4.b_s.o1"),  # tiny: one tile, mostly padding
        (64, 36, 68, True, False, "a_m4.b_n4.o4"),  # A transposed (contiguous along m)
        (65, 36, 68, False, True, "a_k4.b_k4.o4"),  # x @ W.T: B contiguous along k
        (67, 35, 37, True, True, "a_s.b_s.o1"),  # (more rows than gemm_thin takes)
        (130, 260, 129, False, False, "a_k4.b_s.o1"),  # several k steps, n not a multiple of 4
    ],
)
def test_gemm_blocked_variants(m: int, k: int, n: int, ta: bool, tb: bool, variant: str) -> None:
    a = randn(k, m) if ta else randn(m, k)
    b = randn(n, k) if tb else randn(k, n)
    A, B = tr.tensor(a), tr.tensor(b)
    A, a = (A.T, a.T) if ta else (A, a)
    B, b = (B.T, b.T) if tb else (B, b)
    y = A @ B
    d = the_dispatch(y, "matmul")
    assert d.kernel == "gemm_blocked" and d.variant.startswith(variant + ":64x64x16"), d.variant
    close(y.numpy(), a.astype(np.float64) @ b)


@pytest.mark.parametrize("config,smem", [("b128k16", 32768), ("b128", 16384)])
def test_gemm_blocked_large_tiles(monkeypatch: pytest.MonkeyPatch, config: str, smem: int) -> None:
    """128x128 tiles (8x8 per thread), forced by lowering the size thresholds; odd edges.

    With 16 KiB of workgroup memory (WebGPU's default limit) the k=16 tiles do not fit and
    the k=8 ones are chosen.
    """
    monkeypatch.setattr(sk, "BIG_GEMM_TILES", 1)
    monkeypatch.setattr(sk, "BIG_GEMM_MIN_K", 1)
    if smem > get_device().caps.max_workgroup_storage:
        pytest.skip(f"the adapter has less than {smem} bytes of workgroup memory")
    a, b = randn(250, 44), randn(44, 254)  # 2x2 tiles, neither edge full
    got, program = run_with_caps(tr.tensor(a) @ tr.tensor(b), max_workgroup_storage=smem)
    d = program.dispatches[-1]
    tile = "128x128x16" if config == "b128k16" else "128x128x8"
    assert d.kernel == "gemm_blocked" and f":{tile}:" in d.variant, d.variant
    assert d.workgroup_count[0] == 2 * 2
    close(got, a.astype(np.float64) @ b)


def test_gemm_blocked_batched_broadcast_f16() -> None:
    a = randn(2, 3, 20, 24, dtype="float16")
    b = randn(24, 36, dtype="float16")  # broadcast over both batch dims
    y = tr.tensor(a) @ tr.tensor(b)
    d = the_dispatch(y, "matmul")
    assert d.kernel == "gemm_blocked" and d.variant.startswith("a_k4.b_n4.o4")
    close(y.numpy(), a.astype(np.float64) @ b.astype(np.float64), tol=3e-3)


def test_gemm_blocked_many_k_tiles_matches_numpy() -> None:
    """k spans many double-buffered steps (the ping-pong between the two stages)."""
    a, b = randn(40, 1000), randn(1000, 24)
    y = tr.tensor(a) @ tr.tensor(b)
    assert the_dispatch(y, "matmul").kernel == "gemm_blocked"
    close(y.numpy(), a.astype(np.float64) @ b, tol=1e-5)


# --- gemm_tiled: only below WebGPU's default workgroup memory, so forced by the caps -------------
@pytest.mark.parametrize(
    "a_shape,b_shape,tb",
    [
        ((70, 33), (33, 67), False),  # edges in m, n and k
        ((2, 3, 20, 17), (17, 36), False),  # batch dims, B broadcast over them
        ((65, 40), (66, 40), True),  # x @ W.T: B read through its strides
    ],
)
def test_gemm_tiled_when_no_blocked_tile_fits(a_shape: tuple, b_shape: tuple, tb: bool) -> None:
    a, b = randn(*a_shape), randn(*b_shape)
    B, b = (tr.tensor(b).T, b.T) if tb else (tr.tensor(b), b)
    got, program = run_with_caps(tr.tensor(a) @ B, max_workgroup_storage=8192)
    d = program.dispatches[-1]
    assert (d.kernel, d.variant) == ("gemm", "tiled")
    close(got, a.astype(np.float64) @ b)


def test_gemm_tiled_with_a_fused_epilogue() -> None:
    a, b, bias = randn(40, 24), randn(24, 30), randn(30)
    y = (tr.tensor(a) @ tr.tensor(b) + tr.tensor(bias)).relu()
    got, program = run_with_caps(y, max_workgroup_storage=8192)
    (d,) = program.dispatches
    assert (d.kernel, d.variant.split(":")[0], d.op) == ("gemm", "tiled", "fused")
    close(got, np.maximum(a.astype(np.float64) @ b + bias, 0))


# --- gemv_split -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "k,n,dtype,variant,element",
    [
        (1000, 1004, "float32", "n_contig", 4),
        (33, 130, "float32", "n_contig", 2),  # n = 2 mod 4
        (77, 1001, "float32", "n_contig", 1),  # n odd: scalar columns
        (5, 7, "float32", "n_contig", 1),
        (300, 520, "float16", "n_contig_h8", 4),  # packed halves, 8 per load
        (301, 36, "float16", "n_contig", 4),  # f16, n not a multiple of 8: vec4<f16>
    ],
)
def test_gemv_split(k: int, n: int, dtype: str, variant: str, element: int) -> None:
    x, w = randn(1, k, dtype=dtype), randn(k, n, dtype=dtype)
    y = tr.tensor(x) @ tr.tensor(w)
    d = the_dispatch(y, "matmul")
    assert (d.kernel, d.variant.split(":")[0], d.element) == ("gemv_split", variant, element)
    close(y.numpy(), x.astype(np.float64) @ w.astype(np.float64), tol=1e-5 if dtype == "float32" else 3e-3)


def test_gemv_split_batched_and_sized_by_rule() -> None:
    x, w = randn(3, 1, 100), randn(3, 100, 64)
    y = tr.tensor(x) @ tr.tensor(w)
    d = the_dispatch(y, "matmul")
    assert d.kernel == "gemv_split"
    close(y.numpy(), x.astype(np.float64) @ w)
    # the sizing rule (tuned on the H200): 256-byte row segments while there are enough workgroups
    caps = dataclasses.replace(get_device().caps, max_invocations=1024)
    assert sk.gemv_split_choice(11008, 4096, caps).workgroup == (16, 64, 1)
    assert sk.gemv_split_choice(4096, 4096, caps).workgroup == (8, 128, 1)
    assert sk.gemv_split_choice(4096, 4096, caps, h8=True, itemsize=2).workgroup == (4, 256, 1)
    assert sk.gemv_split_choice(11008, 4096, caps, h8=True, itemsize=2).workgroup == (16, 64, 1)
    assert sk.gemv_split_choice(7, 5, caps).workgroup[0] * 4 == 32  # one sector per row at least


# --- row_reduce ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(5, 4096), (3, 1002), (7, 333), (2, 20000)])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("subgroups", [True, False])
def test_row_reduce(shape: tuple[int, int], op: str, subgroups: bool) -> None:
    x = randn(*shape)
    y = getattr(tr.tensor(x), op)(axis=-1)
    got, program = run_with_caps(y, subgroups=subgroups and get_device().caps.subgroups)
    d = program.dispatches[-1]
    assert d.kernel == "row_reduce" and d.variant.startswith(f"{op}_rows")
    assert d.element == {4096: 4, 1002: 2, 333: 1, 20000: 4}[shape[1]]
    close(got, getattr(x.astype(np.float64), op)(axis=-1), tol=1e-5)


@pytest.mark.parametrize("subgroups", [True, False])
def test_row_reduce_nan_and_inf_like_numpy(subgroups: bool) -> None:
    x = randn(4, 640)
    x[1, 77] = np.nan
    x[2, :] = -np.inf
    x[3, 5] = np.inf
    for op in ("max", "min", "sum"):
        got, program = run_with_caps(
            getattr(tr.tensor(x), op)(axis=-1), subgroups=subgroups and get_device().caps.subgroups
        )
        assert program.dispatches[-1].kernel == "row_reduce"
        np.testing.assert_array_equal(np.isnan(got), np.isnan(getattr(x, op)(-1)), err_msg=op)
        ok = ~np.isnan(got)
        np.testing.assert_allclose(got[ok], getattr(x, op)(-1)[ok], rtol=1e-5)


def test_strided_or_integer_rows_keep_the_general_reduce() -> None:
    x = randn(64, 300)
    assert the_dispatch(tr.tensor(x).T.sum(axis=-1), "sum").kernel == "reduce"  # a transposed view
    xi = RNG.integers(-5, 5, (8, 300)).astype(np.int32)
    assert the_dispatch(tr.tensor(xi).sum(axis=-1), "sum").kernel == "reduce"


# --- softmax_regs -------------------------------------------------------------------------------------
def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("shape", [(3, 4096), (5, 1000), (4, 130), (6, 7), (2, 16384)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("subgroups", [True, False])
def test_softmax_regs(shape: tuple[int, int], op: str, subgroups: bool) -> None:
    x = randn(*shape) * 3
    y = getattr(tr.tensor(x), op)(axis=-1)
    got, program = run_with_caps(y, subgroups=subgroups and get_device().caps.subgroups)
    d = program.dispatches[-1]
    assert d.kernel == "softmax_regs" and d.variant.startswith(op + ":")
    ref = _softmax(x.astype(np.float64))
    close(got, ref if op == "softmax" else np.log(ref), tol=1e-5)


def test_softmax_regs_special_rows() -> None:
    x = randn(4, 300)
    x[1, 3] = -np.inf  # one masked entry: exactly 0
    x[2, :] = -np.inf  # fully masked: NaN, as numpy
    x[3, 9] = np.nan
    y = tr.tensor(x).softmax(axis=-1)
    assert the_dispatch(y, "softmax").kernel == "softmax_regs"
    got = y.numpy()
    with np.errstate(invalid="ignore"):
        ref = _softmax(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=1e-5, atol=1e-7)
    assert got[1, 3] == 0.0


def test_long_rows_fall_back_to_the_streaming_softmax() -> None:
    x = randn(2, 40000)  # more than 8 vec4 per thread of a 1024-thread workgroup
    y = tr.tensor(x).softmax(axis=-1)
    assert the_dispatch(y, "softmax").kernel == "softmax"
    close(y.numpy(), _softmax(x.astype(np.float64)))
