"""Every gemm_blocked configuration (passes.select_kernels.GEMM_CONFIGS) and k split against numpy.

Each configuration is forced through a tuning table (the path `wgjit tune` winners take), on
shapes that fill the tiles exactly (the `.x` variant: no edge checks) and shapes that do not
(1, odd, past a tile), batched with broadcasting, B transposed or strided, and float16.
Each test also asserts the dispatch ran the configuration it forced.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from gemm_tuning import run_tuned

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.autotune import tunable_problems
from passes import select_kernels as sk
from passes.dce import dce
from passes.fold_views import fold_views
from passes.select_kernels import GEMM_CONFIGS
from passes.split_k import ADDED_CHUNKS
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(77)


@pytest.fixture(autouse=True)
def blocked_gemm_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every product here is gemm_blocked's, also those of few rows that gemm_thin takes by default
    (tests/test_gemm_thin.py has those)."""
    monkeypatch.setattr(sk, "THIN_GEMM_ALWAYS_M", 0)
    monkeypatch.setattr(sk, "THIN_GEMM_MAX_M", 0)


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def close(got: np.ndarray, want: np.ndarray, tol: float = 1e-5) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * scale)


def fitting_configs() -> list[str]:
    caps = get_device().caps
    return [name for name, c in GEMM_CONFIGS.items() if c.fits(caps)]


def gemm_dispatch(program: object) -> object:
    found = [d for d in program.dispatches if d.kernel == "gemm_blocked"]
    assert found, program.summary()
    return found[0]


def tile_text(config: str) -> str:
    c = GEMM_CONFIGS[config]
    return f":{c.tile_m}x{c.tile_n}x{c.tile_k}:"


# (A shape, B shape, B transposed): odd and edge shapes, and ones the 128-tiles fill exactly
SHAPES = [
    ((37, 29), (29, 45), False),  # odd everywhere, one partial tile
    ((2, 5), (5, 1), False),  # n = 1
    ((130, 1), (1, 67), False),  # k = 1, past a 128 tile
    ((128, 32), (32, 128), False),  # exact for every config (.x)
    ((2, 3, 33, 20), (20, 41), False),  # batched, B broadcast over both batch dims
    ((3, 64, 48), (3, 64, 48), True),  # batched q @ k.T: B read along k
    ((128, 48), (192, 48), True),  # x @ W.T exact for the 96-wide tiles (and 64-, 32-wide ones)
]


F32_CONFIGS = [name for name, c in GEMM_CONFIGS.items() if not c.half_products]
HALF_CONFIGS = [name for name, c in GEMM_CONFIGS.items() if c.half_products]


@pytest.mark.parametrize("config", F32_CONFIGS)
@pytest.mark.parametrize("sa,sb,trans", SHAPES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_config_against_numpy(config: str, sa: tuple, sb: tuple, trans: bool) -> None:
    if config not in fitting_configs():
        pytest.skip(f"{config} needs more workgroup memory or threads than this adapter has")
    a, b = randn(*sa), randn(*sb)
    tb = tr.tensor(b)
    y = tr.tensor(a) @ (tb.transpose(-1, -2) if trans else tb)
    got, program = run_tuned(y, config)
    d = gemm_dispatch(program)
    c = GEMM_CONFIGS[config]
    m, k, n = sa[-2], sa[-1], (sb[-2] if trans else sb[-1])
    if c.unchecked and (m % c.tile_m or n % c.tile_n or k % c.tile_k):
        assert ":u" not in d.variant  # unchecked only where the tiles cover the problem: the rule runs it
    else:
        assert tile_text(config) in d.variant, d.variant
        assert (":u" in d.variant) == c.unchecked
    bb = np.swapaxes(b, -1, -2) if trans else b
    close(got, a.astype(np.float64) @ bb)


def test_unchecked_modules_are_compiled_for_exact_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unchecked configuration over exact tiles compiles without index clamps and gives numpy's answer;
    WGJIT_TRUSTED_SHADERS=0 compiles the same WGSL with them."""
    dev = get_device()
    a, b = randn(3, 128, 48), randn(48, 64)  # batched; exact for 64x64x16
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), "b64cu")
    assert ":u" in gemm_dispatch(program).variant and ".x:" in gemm_dispatch(program).variant
    (source,) = program.sources.values()
    without_comments = re.sub(r"//[^\n]*", "", source)  # the pipeline cache's key (Device.pipeline)
    assert "unchecked:" + without_comments in dev.pipelines and dev.stats["unchecked_modules"] >= 1
    close(got, a.astype(np.float64) @ b)
    monkeypatch.setenv("WGJIT_TRUSTED_SHADERS", "0")
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), "b64cu")
    assert without_comments in dev.pipelines
    close(got, a.astype(np.float64) @ b)


def test_exact_variant_only_when_tiles_fit() -> None:
    """128x128 output, k = 32: exact (.x) for 64x64x16; 100 rows: edge checks kept."""
    a, b = randn(128, 32), randn(32, 128)
    _, program = run_tuned(tr.tensor(a) @ tr.tensor(b), "b64")
    assert ".x:" in gemm_dispatch(program).variant
    a2 = randn(100, 32)
    got, program = run_tuned(tr.tensor(a2) @ tr.tensor(b), "b64")
    assert ".x:" not in gemm_dispatch(program).variant
    close(got, a2.astype(np.float64) @ b)


@pytest.mark.parametrize("config", ["b64", "b64x128k8u"])
def test_exact_tiles_load_the_epilogue_inputs_before_storing(config: str) -> None:
    """x @ w + bias + residual on exact tiles: every stored value (every load of the bias and the
    residual) comes before the first store in the WGSL (interleaved, each store waited for its loads
    on the H200: benchmarks/runs/2026-12-01-M/epilogue.txt), and the answer is numpy's. With edge
    checks (100 rows) the stores stay guarded one by one, and the answer is numpy's too."""
    for rows, exact in ((128, True), (100, False)):
        a, w, bias, r = randn(rows, 32), randn(32, 128), randn(128), randn(rows, 128)
        got, program = run_tuned(tr.tensor(a) @ tr.tensor(w) + tr.tensor(bias) + tr.tensor(r), config)
        d = gemm_dispatch(program)
        assert (".x:" in d.variant) == exact and "add" in d.variant, d.variant
        body = program.sources[d.key].split("let out_base", 1)[1]
        if exact:
            values_first = "let e" in body and body.rindex("let e") < body.index("out[")
            assert values_first, "a store comes before the last epilogue value"
        close(got, a.astype(np.float64) @ w + bias + r)


@pytest.mark.parametrize("config", ["b64", "b64t8s2"])
@pytest.mark.parametrize("n", [90, 92])  # scalar stores (o1) and vec4 stores (o4)
def test_edge_tiles_load_the_epilogue_inputs_before_storing(config: str, n: int) -> None:
    """x @ w + bias + residual, 70x50 @ 50xn, which no tile covers: every epilogue value (every load of
    the bias and the residual, all made in wg_epilogue_at) comes before the first store in the WGSL, each
    under its store's edge check (no load out of range), and the answer is numpy's."""
    a, w, bias, r = randn(70, 50), randn(50, n), randn(n), randn(70, n)
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(w) + tr.tensor(bias) + tr.tensor(r), config)
    d = gemm_dispatch(program)
    assert ".x:" not in d.variant and tile_text(config) in d.variant and "add" in d.variant, d.variant
    assert (".o4" if n % 4 == 0 else ".o1") in d.variant, d.variant
    lines = program.sources[d.key].split("let out_base", 1)[1].splitlines()
    assert not any(re.search(r"\bin\d+\[", line) for line in lines), "an input read outside wg_epilogue"
    loads = [i for i, line in enumerate(lines) if re.search(r"wg_epilogue(_at)?\(", line)]
    stores = [i for i, line in enumerate(lines) if "out[" in line]
    assert loads and stores and max(loads) < min(stores), "a store comes before the last epilogue value"
    assert all(lines[i].strip().startswith("if (ok") for i in loads + stores), "a load or store is unguarded"
    # the bias is where the sums start (`bi`): the epilogue reads only the residual
    assert ":bi:" in d.variant, d.variant
    epilogue = program.sources[d.key].split("fn wg_epilogue_at(", 1)[1].split("\n}", 1)[0]
    assert epilogue.count("params.off") == 1, epilogue
    close(got, a.astype(np.float64) @ w + bias + r)


@pytest.mark.parametrize("config", ["b64", "b64t8s2"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_bias_is_where_the_sums_start(config: str, dtype: str) -> None:
    """x @ w + bias in float32: each accumulator starts at its column's bias (plane 0's only, where
    planes split k), so nothing is left for an epilogue; batched, edge tiles; float16 keeps the add."""
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip("no shader-f16")
    x, w, bias = randn(2, 33, 20, dtype=dtype), randn(20, 44, dtype=dtype), randn(44, dtype=dtype)
    got, program = run_tuned(tr.tensor(x) @ tr.tensor(w) + tr.tensor(bias), config)
    d = gemm_dispatch(program)
    assert len(program.dispatches) == 1 and (":bi:" in d.variant) == (dtype == "float32"), d.variant
    assert dtype == "float16" or "wg_epilogue" not in program.sources[d.key]
    want = x.astype(np.float64) @ w.astype(np.float64) + bias
    close(got, want, tol=1e-5 if dtype == "float32" else 3e-3)


@pytest.mark.parametrize("config", ["b64", "b64t8s2"])
def test_a_bias_after_an_activation_is_read_by_its_column(config: str) -> None:
    """relu(x @ w) + bias: the bias comes after the product's first step, so the epilogue reads it,
    from the thread's own column (no division of the element's index), on edge tiles and exact ones."""
    for m, n in ((70, 92), (64, 128)):
        a, w, bias = randn(m, 48), randn(48, n), randn(n)
        got, program = run_tuned((tr.tensor(a) @ tr.tensor(w)).relu() + tr.tensor(bias), config)
        d = gemm_dispatch(program)
        assert ":bi:" not in d.variant and "row@" in d.variant, d.variant
        epilogue = program.sources[d.key].split("fn wg_epilogue_at(", 1)[1].split("\n}", 1)[0]
        assert "params.st" in epilogue and "params.sh" not in epilogue, epilogue
        close(got, np.maximum(a.astype(np.float64) @ w, 0) + bias)


def gelu(h: np.ndarray) -> np.ndarray:
    return 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))


# name: (traced, numpy reference), each of (x @ w, bias, residual)
EPILOGUES = {
    "bias_residual": (lambda y, bias, r: y + bias + r, lambda y, bias, r: y + bias + r),
    "bias_gelu": (lambda y, bias, r: (y + bias).gelu(), lambda y, bias, r: gelu(y + bias)),
    "bias_gelu_residual": (lambda y, bias, r: (y + bias).gelu() + r, lambda y, bias, r: gelu(y + bias) + r),
}


@pytest.mark.parametrize("config", ["b64", "b64t8s2"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("sa,sb", [((70, 50), (50, 90)), ((37, 29), (29, 44)), ((2, 33, 20), (20, 41))])
def test_edge_tile_epilogues_against_numpy(config: str, dtype: str, epilogue: str, sa: tuple, sb: tuple) -> None:
    """Bias, residual and gelu epilogues on shapes no tile covers (scalar and vec4 stores, batched), one
    kernel, against numpy in float64 (f16: the same f16 inputs, a few f16 steps of the largest value)."""
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip("no shader-f16")
    traced, reference = EPILOGUES[epilogue]
    n = sb[-1]
    x, w, bias, r = (
        randn(*sa, dtype=dtype),
        randn(*sb, dtype=dtype),
        randn(n, dtype=dtype),
        randn(*sa[:-1], n, dtype=dtype),
    )
    got, program = run_tuned(traced(tr.tensor(x) @ tr.tensor(w), tr.tensor(bias), tr.tensor(r)), config)
    d = gemm_dispatch(program)
    assert len(program.dispatches) == 1 and ".x:" not in d.variant and tile_text(config) in d.variant, program.summary()
    x64, w64, bias64, r64 = (v.astype(np.float64) for v in (x, w, bias, r))
    close(got, reference(x64 @ w64, bias64, r64), tol=1e-5 if dtype == "float32" else 3e-3)


@pytest.mark.parametrize("config", ["b64", "b64t8", "b128x64", "b64l"])
def test_strided_operands(config: str) -> None:
    """A read along m (A.T), B with a column stride of 2 (scalar loads) and an offset."""
    a, b = randn(40, 72), randn(52, 2 * 45)
    y = tr.tensor(a).T @ tr.tensor(b)[1:41, ::2]
    got, program = run_tuned(y, config)
    assert "a_m4" in gemm_dispatch(program).variant and "b_s" in gemm_dispatch(program).variant
    close(got, a.T.astype(np.float64) @ b[1:41, ::2])


@pytest.mark.parametrize("config", ["b64", "b128k16l", "b64t8", "b32x64", "b64c", *HALF_CONFIGS])
@pytest.mark.parametrize("sa,sb", [((64, 64), (64, 64)), ((33, 70), (70, 18)), ((2, 3, 256), (256, 40))])
def test_float16_inputs(config: str, sa: tuple, sb: tuple) -> None:
    """f16 operands: f32 accumulation, or (half_products) f16 sums within a k tile added up in f32."""
    if not get_device().caps.shader_f16:
        pytest.skip("no shader-f16")
    if config not in fitting_configs():
        pytest.skip(f"{config} does not fit this adapter")
    a, b = randn(*sa, dtype="float16"), randn(*sb, dtype="float16")
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), config)
    assert tile_text(config) in gemm_dispatch(program).variant
    want = a.astype(np.float64) @ b.astype(np.float64)
    close(got, want, tol=3e-3)
    if config in HALF_CONFIGS:  # f16 sums round more, but never past a few f16 steps of the largest value
        assert ":h16" in gemm_dispatch(program).variant


def test_half_products_only_for_f16_operands() -> None:
    """A float32 product never runs f16 products, even when a table names them; f16 ones only when asked."""
    a, b = randn(64, 64), randn(64, 64)
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), "b64h")
    assert ":h16" not in gemm_dispatch(program).variant and ":64x64x16:" in gemm_dispatch(program).variant
    close(got, a.astype(np.float64) @ b)
    h = tr.tensor(a.astype("float16")) @ tr.tensor(b.astype("float16"))
    caps = get_device().caps
    (p,) = tunable_problems([fold_views(dce(build_graph([h._lazy]).graph, caps), caps)]).values()
    assert not set(HALF_CONFIGS) & set(sk.gemm_candidates(p, caps, f16_products=False))
    if caps.shader_f16:
        assert set(HALF_CONFIGS) <= set(sk.gemm_candidates(p, caps, f16_products=True))


@pytest.mark.parametrize("split", [2, 4, 8])
def test_split_k_configs(split: int) -> None:
    """A thin product cut into `split` chunks of k (a batched GEMM and their sum), k not a multiple of the split."""
    a, b = randn(20, 2051), randn(2051, 24)
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), f"split{split}")
    gemm = gemm_dispatch(program)
    assert gemm.workgroup_count[0] >= split  # one tile per chunk at least
    # up to ADDED_CHUNKS chunks are summed by adds of their views (one fused kernel), more by a SUM
    # up to ADDED_CHUNKS chunks are summed by adds of their views, fused here into the epilogue of the
    # product of k's last 3 columns; more by a SUM
    sums = [d for d in program.dispatches if d.op == "sum"]
    assert len(sums) == (split > ADDED_CHUNKS) and len(program.dispatches) == 2 + len(sums), program.summary()
    assert split > ADDED_CHUNKS or "add" * (split - 1) in program.dispatches[-1].variant.replace(".", ""), (
        program.summary()
    )
    close(got, a.astype(np.float64) @ b, tol=1e-4)


def problem(m: int, n: int, k: int, dtype: str = "float32") -> object:
    """The GemmProblem of an (m, k) @ (k, n) product of inputs, for the rules alone."""
    from ir.dtypes import DType
    from ir.graph import Graph
    from ir.node import Node
    from ir.ops import InputArg, Op
    from passes.select_kernels import gemm_problem

    dt = DType(dtype)
    nodes = [
        Node(0, Op.INPUT, (), (m, k), dt, InputArg(0)),
        Node(1, Op.INPUT, (), (k, n), dt, InputArg(1)),
        Node(2, Op.MATMUL, (0, 1), (m, n), dt),
    ]
    g = Graph({x.id: x for x in nodes}, (2,))
    return gemm_problem(g, g[2])


def test_builtin_thin_split_rule() -> None:
    """A prefill-shaped product (128 rows, long k) is split by the built-in rule; a square one is not."""
    from passes.select_kernels import builtin_gemm_split

    assert builtin_gemm_split(problem(128, 2048, 2048)) == 8  # 64 tiles: split until 512 workgroups
    assert builtin_gemm_split(problem(512, 512, 2048)) == 8  # the ~1B prefill's k and v projections
    assert builtin_gemm_split(problem(256, 512, 1024)) == 4  # a chunk keeps THIN_MIN_DEPTH (256) of k
    assert builtin_gemm_split(problem(128, 8192, 2048)) == 1  # 256 tiles already
    assert builtin_gemm_split(problem(64, 64, 64)) == 1  # too small to pay for a sum
    # deep products whose 64x128 tiles fill one wave: cut in four (the ~1B prefill's down projection)
    assert builtin_gemm_split(problem(512, 2048, 8192)) == 4
    assert builtin_gemm_split(problem(512, 8192, 2048)) == 1  # k under LONG_K
    assert builtin_gemm_split(problem(4096, 4096, 4096)) == 1  # many tiles
    # a wave and a half of 64x128 tiles over a k of 1024 or more: cut in two (MiniLM's down projection)
    assert builtin_gemm_split(problem(4096, 384, 1536)) == 2
    assert builtin_gemm_split(problem(1024, 1024, 1024)) == 2  # one wave of 128 tiles
    assert builtin_gemm_split(problem(1024, 1024, 512)) == 1  # k under MID_K
    assert builtin_gemm_split(problem(512, 2048, 2048)) == 2  # the ~1B prefill's o projection
    assert builtin_gemm_split(problem(4096, 384, 384)) == 1  # k too short
    assert builtin_gemm_split(problem(128, 8192, 2048)) == 1  # fewer rows than MID_ROWS
    assert builtin_gemm_split(problem(4096, 1536, 1536)) == 1  # 192+ tiles of 64x128: 768


@pytest.mark.parametrize(
    "m,n,k,want",
    [
        (4096, 4096, 4096, "b64x128k8u"),  # large and exact
        (2048, 2048, 2048, "b64x128k8u"),  # 256 128x128 tiles
        (1024, 1024, 1024, "b64x128k8u"),  # fewer (64): the wide rule's short-k tiles
        (4096, 1536, 384, "b64x128k8u"),  # wide, short k (MiniLM's up projection)
        (4096, 1152, 384, "b64x128k8u"),  # MiniLM's q, k and v as one
        (512, 2048, 2048, "b64x128k8u"),  # 512-token prefill: few 128x128 tiles, k up to 2048
        (512, 2048, 8192, "b64x128u"),  # ... longer k
        (512, 8192, 2048, "b128k16"),  # 256 128x128 tiles: the fastest there
        (4096, 384, 1536, "b128x96k8u"),  # narrow, exact 96-wide (MiniLM's down projection)
        (4096, 384, 384, "b128x96k8u"),  # MiniLM's output projection
        (4096, 320, 384, "b64"),  # narrow, not a multiple of 96: the older rule
        (256, 2048, 2048, "b64"),  # fewer rows than WIDE_GEMM_MIN_M
        (512, 2040, 2048, "b64"),  # not exact
    ],
)
def test_builtin_rule_by_shape(m: int, n: int, k: int, want: str) -> None:
    """The built-in f32 rule on the shapes H200 run H measured (passes.select_kernels._wide_exact_gemm)."""
    from passes.select_kernels import builtin_gemm_config

    caps = dataclasses.replace(get_device().caps, max_workgroup_storage=49152, max_invocations=1024)
    assert builtin_gemm_config(problem(m, n, k), caps) == want


@pytest.mark.parametrize("k,want", [(64, "b64x128k8u"), (2112, "b64x128u")])
def test_wide_rule_products_against_numpy(k: int, want: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wide rule's two configurations run (thresholds lowered to a small exact shape) and are right."""
    monkeypatch.setattr(sk, "WIDE_GEMM_MIN_M", 128)
    monkeypatch.setattr(sk, "WIDE_GEMM_MIN_N", 256)
    monkeypatch.setattr(sk, "BIG_EXACT_GEMM", 1 << 20)  # not the large-and-exact rule
    a, b = randn(128, k), randn(k, 256)
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), None)
    d = gemm_dispatch(program)
    assert tile_text(want) in d.variant and ":u" in d.variant, d.variant
    close(got, a.astype(np.float64) @ b.astype(np.float64), tol=1e-5)


@pytest.mark.parametrize(
    "m,n,k,dtype,want",
    [
        (128, 256, 128, "float32", "b64x128k8u"),  # large (the threshold lowered here) and exact: b64x128k8u
        (128, 192, 128, "float32", None),  # n not a multiple of 128: the older rule
        (128, 256, 128, "float16", None),  # f16 operands: not measured, the older rule
        (64, 256, 128, "float32", None),  # below the threshold
    ],
)
def test_builtin_rule_for_large_exact_f32(
    m: int, n: int, k: int, dtype: str, want: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip("no shader-f16")
    monkeypatch.setattr(sk, "BIG_EXACT_GEMM", 128)
    monkeypatch.setattr(sk, "BIG_EXACT_MIN_TILES", 1)
    a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), None)
    d = gemm_dispatch(program)
    assert (tile_text("b64x128k8u") in d.variant and ":u" in d.variant) == (want is not None), d.variant
    close(got, a.astype(np.float64) @ b.astype(np.float64), tol=1e-5 if dtype == "float32" else 4e-3)
    monkeypatch.setenv("WGJIT_TRUSTED_SHADERS", "0")  # compiled with clamps it lost: the older rule
    _, program = run_tuned(tr.tensor(a) @ tr.tensor(b), None)
    assert tile_text("b64x128k8u") not in gemm_dispatch(program).variant


def test_mid_split_rule_with_an_epilogue_against_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mid-size split (thresholds lowered to a small shape): x @ W.T + bias + residual cut in two along k
    is a batched GEMM and one fused kernel: the chunks' sum (an add of their views) and the epilogue, right to
    the rounding."""
    monkeypatch.setattr(sk, "THIN_TILES", 4)
    monkeypatch.setattr(sk, "THIN_MIN_FLOPS", 1)
    monkeypatch.setattr(sk, "MID_ROWS", 64)
    monkeypatch.setattr(sk, "MID_K", 256)
    x, w, bias, res = randn(256, 512), randn(96, 512), randn(96), randn(256, 96)
    got, program = run_tuned(tr.nn.linear(tr.tensor(x), tr.tensor(w)) + tr.tensor(bias) + tr.tensor(res), None)
    (total,) = [d for d in program.dispatches if d.kernel != "gemm_blocked"]  # the two chunks' sum and the epilogue
    assert len(program.dispatches) == 2 and total.kernel == "elementwise", program.summary()
    assert "add.add.add" in total.variant, program.summary()
    want = x.astype(np.float64) @ w.T.astype(np.float64) + bias + res
    close(got, want, tol=1e-4)


def test_long_k_split_rule_products_against_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deep-product rule (thresholds lowered to a small shape): a product of many 64x64 tiles but
    one wave of 64x128 ones, cut in four along k, is a batched GEMM and the adds of its four chunks, right to
    the rounding."""
    monkeypatch.setattr(sk, "LONG_K", 512)
    monkeypatch.setattr(sk, "ONE_WAVE_TILES", 16)
    monkeypatch.setattr(sk, "THIN_TILES", 8)
    monkeypatch.setattr(sk, "THIN_MIN_FLOPS", 1)
    a, b = randn(128, 1024), randn(1024, 512)  # 2 x 8 tiles of 64x128, 16 of 64x64
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), None)
    (total,) = [d for d in program.dispatches if d.kernel != "gemm_blocked"]
    assert total.kernel == "elementwise" and "add.add.add" in total.variant, program.summary()
    close(got, a.astype(np.float64) @ b.astype(np.float64), tol=1e-4)
