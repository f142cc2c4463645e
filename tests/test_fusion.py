"""Fusion (passes/fuse.py): fewer dispatches, the same numbers as without it.

Every case builds the same computation twice, fused and with WGJIT_FUSION=0, and checks
the dispatch counts and the values against numpy, against the reference interpreter on
the unfused graph, and the interpreter on the fused graph against both.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tracer as tr
from backend_wgpu import get_device
from ir.caps import DeviceCaps
from ir.fusion import FusedArg
from ir.interpret import interpret
from ir.ops import Op
from passes import run_pipeline
from passes.pipeline import default_pipeline
from tests.helpers import assert_close

pytestmark = pytest.mark.gpu


def _compile(fusion: bool, monkeypatch: pytest.MonkeyPatch, build: Callable[[], tr.Tensor]) -> tuple[tr.Tensor, int]:
    monkeypatch.setenv("WGJIT_FUSION", "1" if fusion else "0")
    y = build()
    return y, len(tr.compile(y).dispatches)


def both(monkeypatch: pytest.MonkeyPatch, build: Callable[[], tr.Tensor]) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(fused values, unfused values, fused dispatches, unfused dispatches) of `build()`."""
    yf, nf = _compile(True, monkeypatch, build)
    got_f = yf.numpy()
    yu, nu = _compile(False, monkeypatch, build)
    got_u = yu.numpy()
    monkeypatch.delenv("WGJIT_FUSION")
    return got_f, got_u, nf, nu


def check_interpreter(build: Callable[[], tr.Tensor]) -> np.ndarray:
    """The interpreter agrees on the traced, the unfused and the fused graph; returns its value."""
    graph = build().graph()
    # the graph's inputs are the given tensors plus cached scalar constants; read them all back
    built_inputs = _graph_inputs(build)
    caps = get_device().caps
    traced = interpret(graph, built_inputs)[0]
    unfused = run_pipeline(graph, caps, passes=default_pipeline(fusion=False)).graph
    fused = run_pipeline(graph, caps, passes=default_pipeline(fusion=True)).graph
    assert any(n.op is Op.FUSED for n in fused), "expected at least one fused group"
    assert_close(interpret(unfused, built_inputs)[0], traced)
    assert_close(interpret(fused, built_inputs)[0], traced)
    return traced


def _graph_inputs(build: Callable[[], tr.Tensor]) -> list[np.ndarray]:
    from tracer.graph_builder import build_graph

    y = build()
    built = build_graph([y._lazy])
    return [tr.Tensor(lz).numpy() for lz in built.inputs]


# --- dispatch counts and values ---------------------------------------------------------


@pytest.mark.parametrize("n", [6, 5, 8])  # contiguous dim 0 mod 4, odd, 0 mod 4 with 2 mod 4 rows
def test_chain_of_six_is_one_kernel(monkeypatch, n):
    x = tr.randn(3, n, seed=1)
    b = tr.randn(n, seed=2)

    def build() -> tr.Tensor:
        return (((x + b) * 0.5).tanh() - x).abs().sqrt()

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert (nf, nu) == (1, 6)
    xn, bn = x.numpy(), b.numpy()
    want = np.sqrt(np.abs(np.tanh((xn + bn) * 0.5) - xn))
    assert_close(got_f, want)
    assert_close(got_u, want)
    assert_close(check_interpreter(build), want)


def test_matmul_bias_gelu_residual_is_one_kernel(monkeypatch):
    x = tr.randn(5, 12, seed=3)
    w = tr.randn(12, 7, seed=4)
    bias = tr.randn(7, seed=5)
    r = tr.randn(5, 7, seed=6)

    def build() -> tr.Tensor:
        return (x @ w + bias).gelu() + r

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert (nf, nu) == (1, 4)
    h = x.numpy() @ w.numpy() + bias.numpy()
    want = 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2))) + r.numpy()
    assert_close(got_f, want, rtol=1e-5, atol=1e-5)
    assert_close(got_u, want, rtol=1e-5, atol=1e-5)
    check_interpreter(build)


def test_gemv_epilogue(monkeypatch):
    x = tr.randn(1, 16, seed=7)
    w = tr.randn(16, 8, seed=8)
    bias = tr.randn(8, seed=9)

    def build() -> tr.Tensor:
        return (x @ w + bias).relu()

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert (nf, nu) == (1, 3)
    want = np.maximum(x.numpy() @ w.numpy() + bias.numpy(), 0)
    assert_close(got_f, want)
    assert_close(got_u, want)


def test_scale_and_mask_before_softmax_is_one_kernel(monkeypatch):
    s = tr.randn(2, 4, 8, seed=10)
    mask = tr.tensor(np.where(np.arange(8) < 6, 0.0, -1e9).astype(np.float32))

    def build() -> tr.Tensor:
        return (s * 0.125 + mask).softmax(-1)

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert (nf, nu) == (1, 3)
    z = s.numpy() * 0.125 + mask.numpy()
    want = np.exp(z - z.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    assert_close(got_f, want)
    assert_close(got_u, want)
    check_interpreter(build)


@pytest.mark.parametrize("n", [64, 130, 300])  # serial and workgroup-per-row reductions
def test_reduction_prologue_and_epilogue(monkeypatch, n):
    x = tr.randn(6, n, seed=11)

    def build() -> tr.Tensor:  # rsqrt(mean(x^2) + eps): RMS norm's scale
        return ((x * x).mean(-1, keepdims=True) + 1e-5).rsqrt()

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert nf == 1 and nu == 5
    xn = x.numpy()
    want = 1 / np.sqrt((xn * xn).mean(-1, keepdims=True) + 1e-5)
    assert_close(got_f, want, rtol=2e-5)
    assert_close(got_u, want, rtol=2e-5)
    check_interpreter(build)


def test_cast_feeding_a_reduction(monkeypatch):
    x = tr.tensor(np.arange(24, dtype=np.int32).reshape(4, 6) - 7)

    def build() -> tr.Tensor:
        return (x > 0).sum(-1)

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert (nf, nu) == (1, 3)  # compare, cast to int32, sum
    want = (x.numpy() > 0).sum(-1)
    assert_close(got_f, want)
    assert_close(got_u, want)


@pytest.mark.f16  # uses float16 among other dtypes
def test_mixed_dtypes_where_and_compare(monkeypatch):
    a = tr.randn(4, 6, seed=12)
    b = tr.tensor(np.arange(24, dtype=np.int32).reshape(4, 6) % 5)

    def build() -> tr.Tensor:
        return tr.where((a > 0) & (b < 3), a.astype(tr.float16) * 2, b.astype(tr.float16)).astype(tr.float32) + 1

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert nf == 1 and nu > 5
    an, bn = a.numpy(), b.numpy()
    want = (
        np.where((an > 0) & (bn < 3), an.astype(np.float16) * np.float16(2), bn.astype(np.float16)).astype(np.float32)
        + 1
    )
    assert_close(got_f, want, rtol=2e-3, atol=2e-3)
    assert_close(got_u, got_f)


def test_reshape_between_members_fuses(monkeypatch):
    x = tr.randn(4, 6, seed=13)
    y = tr.randn(2, 12, seed=14)

    def build() -> tr.Tensor:
        return (x.exp() * 2).reshape(2, 12) + y

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert (nf, nu) == (1, 3)
    assert_close(got_f, (np.exp(x.numpy()) * 2).reshape(2, 12) + y.numpy())
    assert_close(got_u, got_f)


# --- the store rule ---------------------------------------------------------------------


def test_value_read_by_two_kernels_is_stored_once(monkeypatch):
    x = tr.randn(4, 8, seed=15)

    def build() -> tr.Tensor:
        h = (x * 3).exp()  # read by the sum (a reduction) and by the final multiply: stored
        return h * h.sum(-1, keepdims=True)

    got_f, got_u, nf, nu = both(monkeypatch, build)
    assert (nf, nu) == (3, 4)
    h = np.exp(x.numpy() * 3)
    assert_close(got_f, h * h.sum(-1, keepdims=True), rtol=1e-5)
    graph = run_pipeline(build().graph(), get_device().caps).graph
    fused = [n for n in graph if n.op is Op.FUSED]
    # (x * 3).exp() is one group (the stored value); the sum and the final mul are not merged with it
    assert [[t.op for t in n.arg.terms] for n in fused] == [[Op.MUL, Op.EXP]]


@pytest.mark.parametrize("n", [8, 6, 7])  # vec4, vec2 and scalar reads
def test_a_bias_is_read_by_its_column(monkeypatch, n):
    """A vector broadcast over the rows (a bias) is a `row` leaf: addressed by its last coordinate only,
    in an elementwise group and a reduction's prologue alike (scalars broadcast stay `strided`)."""
    x = tr.randn(2, 3, n, seed=31)
    w = tr.randn(5, n, seed=32)
    bias = tr.randn(n, seed=33)

    def build() -> tr.Tensor:
        return ((x * 2.0 + bias).exp().sum(-1, keepdims=True) * 1e-3 + x + bias) @ w.T

    program = tr.compile(build())
    fused = [d.variant for d in program.dispatches if d.group]
    assert len(fused) == 2 and all("row@" in v for v in fused), program.summary()
    got_f, got_u, _, _ = both(monkeypatch, build)
    xn, bn = x.numpy(), bias.numpy()
    want = (np.exp(xn * 2 + bn).sum(-1, keepdims=True) * 1e-3 + xn + bn) @ w.numpy().T
    assert_close(got_f, want, rtol=1e-5, atol=1e-5)
    assert_close(got_u, want, rtol=1e-5, atol=1e-5)
    check_interpreter(build)


def test_broadcast_read_is_not_fused():
    x = tr.randn(4, 1, seed=16)
    z = tr.randn(4, 8, seed=17)
    y = (x * 2).exp() + z  # exp(x*2) is read through a broadcast: stored, then added
    assert len(tr.compile(y).dispatches) == 2
    assert_close(y.numpy(), np.exp(x.numpy() * 2) + z.numpy(), rtol=1e-5)


def test_graph_outputs_end_groups():
    x = tr.randn(8, seed=18)
    h = x.exp()
    y = h + 1
    tr.realize(h, y)
    assert_close(h.numpy(), np.exp(x.numpy()))
    assert_close(y.numpy(), np.exp(x.numpy()) + 1)


def test_groups_respect_the_binding_limit():
    caps = DeviceCaps(max_storage_buffers_per_stage=4)
    xs = [tr.randn(3, 5, seed=20 + i) for i in range(9)]
    y = xs[0]
    for x in xs[1:]:
        y = y * 0.5 + x
    graph = y.graph()
    planned = run_pipeline(graph, caps).graph
    for node in planned:
        if node.kernel is not None:
            assert len(set(node.srcs)) + 1 <= caps.max_storage_buffers_per_stage
    inputs = _graph_inputs(lambda: y)
    assert_close(interpret(planned, inputs)[0], interpret(graph, inputs)[0])
    # and on the device (whose limit is larger): everything in one kernel
    want = xs[0].numpy()
    for x in xs[1:]:
        want = want * 0.5 + x.numpy()
    assert_close(y.numpy(), want, rtol=1e-5)


# --- what tools see ---------------------------------------------------------------------


def test_fused_kernel_names_its_nodes():
    x = tr.randn(4, 8, seed=21)
    b = tr.randn(8, seed=22)
    y = ((x + b).exp() * 2).relu()
    program = tr.compile(y)
    (node,) = [n for n in program.graph if n.op is Op.FUSED]
    arg: FusedArg = node.arg
    assert [t.op for t in arg.terms] == [Op.ADD, Op.EXP, Op.MUL, Op.RELU]
    assert node.kernel.param("group") == arg.holds
    assert program.dispatches[0].group == arg.holds
    (code,) = program.sources.values()
    for t in arg.terms:
        assert f"// %{t.id} {t.op.value}" in code
    assert "fused(" in str(program.graph)


# --- random elementwise DAGs ------------------------------------------------------------

UNARY = ["neg", "abs", "tanh", "sin", "cos", "sigmoid", "relu", "square"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "where"]


def _apply(op: str, args: list, lib) -> object:  # noqa: ANN001
    a = args[0]
    if op in UNARY:
        if lib is np:
            return {
                "neg": np.negative, "abs": np.abs, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
                "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "relu": lambda v: np.maximum(v, 0), "square": np.square,
            }[op](a)  # fmt: skip
        return -a if op == "neg" else getattr(a, op)()
    b = args[1]
    if op == "where":
        return lib.where(a > b, a, b * 0.5)
    fn = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q}
    if op in fn:
        return fn[op](a, b)
    return getattr(lib, op)(a, b)


@st.composite
def dags(
    draw: st.DrawFn,
) -> tuple[tuple[int, ...], list[tuple[int, ...]], list[tuple[str, tuple[int, ...]]], list[int]]:
    shape = draw(st.sampled_from([(3, 4), (2, 5), (6,), (2, 3, 2)]))
    # inputs: the full shape, or broadcastable ones (a row, a column)
    choices = [shape, shape[-1:], shape[:-1] + (1,)] if len(shape) > 1 else [shape, (1,)]
    in_shapes = [shape] + draw(st.lists(st.sampled_from(choices), min_size=0, max_size=2))
    steps = []
    for k in range(draw(st.integers(2, 9))):
        pool = len(in_shapes) + k
        op = draw(st.sampled_from(UNARY + BINARY))
        arity = 1 if op in UNARY else 2
        steps.append((op, tuple(draw(st.integers(0, pool - 1)) for _ in range(arity))))
    n = len(in_shapes) + len(steps)
    extra = draw(st.lists(st.integers(len(in_shapes), n - 2), max_size=2)) if len(steps) > 1 else []
    return shape, in_shapes, steps, sorted(set(extra)) + [n - 1]


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(dags(), st.integers(0, 2**31 - 1))
def test_random_elementwise_dags_fused_vs_unfused(monkeypatch, dag, seed):
    shape, in_shapes, steps, outs = dag
    rng = np.random.default_rng(seed)
    host = [rng.uniform(-1.5, 1.5, s).astype(np.float32) for s in in_shapes]
    inputs = [tr.tensor(h) for h in host]

    def build(lib) -> list:  # noqa: ANN001
        vals = list(inputs if lib is tr else host)
        for op, args in steps:
            vals.append(_apply(op, [vals[a] for a in args], lib))
        return [vals[o] for o in outs]

    want = [np.broadcast_to(v, np.broadcast_shapes(*[np.shape(v)])) for v in build(np)]
    results = {}
    for fusion in (True, False):
        monkeypatch.setenv("WGJIT_FUSION", "1" if fusion else "0")
        ys = [y if isinstance(y, tr.Tensor) else tr.tensor(y) for y in build(tr)]
        tr.realize(*ys)
        results[fusion] = [y.numpy() for y in ys]
    for f, u, w in zip(results[True], results[False], want, strict=True):
        assert_close(f, np.asarray(w, dtype=np.float32), rtol=1e-5, atol=1e-5)
        assert_close(f, u, rtol=1e-6, atol=1e-6)
    # the interpreter on the fused graph agrees with the interpreter on the traced graph
    monkeypatch.setenv("WGJIT_FUSION", "1")
    ys = [y for y in build(tr) if isinstance(y, tr.Tensor) and not y.is_realized]
    if ys:
        from tracer.graph_builder import build_graph

        built = build_graph([y._lazy for y in ys])
        arrays = [tr.Tensor(lz).numpy() for lz in built.inputs]
        fused = run_pipeline(built.graph, get_device().caps).graph
        for a, b in zip(interpret(fused, arrays), interpret(built.graph, arrays), strict=True):
            assert_close(a, b, rtol=1e-6, atol=1e-6)


CORE_STEPS = (
    ["matmul", "softmax", "log_softmax", "sum", "max", "mean", "argmax_eq", "layer_norm", "rms_norm"]
    + UNARY
    + ["add_row", "mul_col", "sub_x"]
)


def _core_step(op: str, h, x, row, col, w, lib):  # noqa: ANN001, ANN202
    """One step on an (R, C) value; every result is (R, C) again (reductions keep dims, then broadcast)."""
    if op == "matmul":
        return h @ w
    if op in ("softmax", "log_softmax"):
        if lib is np:
            z = h - h.max(-1, keepdims=True)
            s = np.log(np.exp(z).sum(-1, keepdims=True))
            return np.exp(z - s) if op == "softmax" else z - s
        return getattr(h, op)(-1)
    if op in ("sum", "max", "mean"):
        return getattr(h, op)(-1, keepdims=True) * 0.25 + h
    if op in ("layer_norm", "rms_norm"):  # weighted by `row`; norm_regs reads the weight itself
        if lib is not np:
            return tr.nn.layer_norm(h, row, eps=1e-5) if op == "layer_norm" else tr.nn.rms_norm(h, row, eps=1e-5)
        h64 = h.astype(np.float64)
        if op == "layer_norm":
            dev = h64 - h64.mean(-1, keepdims=True)
            # a row (nearly) constant has no well-defined normalized value: float32 rounding decides it
            assume(bool(np.all(np.sqrt((dev * dev).mean(-1)) > 1e-3 * np.maximum(1.0, np.abs(h64).max(-1)))))
            return (dev / np.sqrt((dev * dev).mean(-1, keepdims=True) + 1e-5) * row).astype(np.float32)
        assume(bool(np.all(np.sqrt((h64 * h64).mean(-1)) > 1e-3)))
        return (h64 / np.sqrt((h64 * h64).mean(-1, keepdims=True) + 1e-5) * row).astype(np.float32)
    if op == "argmax_eq":  # an int reduction feeding a compare and a cast
        if lib is np:  # a row whose top two are equal up to rounding has no well-defined argmax
            top = np.sort(h, axis=-1)[:, -2:]
            assume(bool(np.all(top[:, 1] - top[:, 0] > 1e-5 * np.maximum(1.0, np.abs(top[:, 1])))))
        idx = h.argmax(-1, keepdims=True)
        return (idx == 1).astype(np.float32 if lib is np else tr.float32) + h
    if op == "add_row":
        return h + row
    if op == "mul_col":
        return h * col
    if op == "sub_x":
        return h - x
    return _apply(op, [h], lib)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.sampled_from(CORE_STEPS), min_size=2, max_size=7),
    st.sampled_from([(3, 4), (5, 6), (2, 8)]),
    st.integers(0, 2**31 - 1),
)
def test_random_chains_around_cores_fused_vs_unfused(monkeypatch, steps, shape, seed):
    r, c = shape
    rng = np.random.default_rng(seed)
    host = [rng.uniform(-1, 1, s).astype(np.float32) for s in [(r, c), (c,), (r, 1), (c, c)]]

    def build(lib):  # noqa: ANN001, ANN202
        x, row, col, w = host if lib is np else [tr.tensor(a) for a in host]
        h = x
        for op in steps:
            h = _core_step(op, h, x, row, col, w, lib)
        return h

    want = build(np)
    got = {}
    for fusion in (True, False):
        monkeypatch.setenv("WGJIT_FUSION", "1" if fusion else "0")
        got[fusion] = build(tr).numpy()
    assert_close(got[True], want.astype(np.float32), rtol=1e-4, atol=1e-4)
    assert_close(got[True], got[False], rtol=1e-5, atol=1e-5)


def test_dot_draws_a_fused_group_as_a_cluster_of_its_nodes():
    from ir.dot import to_dot

    x = tr.randn(4, 8, seed=23)
    y = ((x * 2).exp() + 1).sum(-1)
    graph = tr.compile(y).graph
    (node,) = [n for n in graph if n.op is Op.FUSED]
    text = to_dot(graph)
    block = text.split("subgraph cluster_0 {")[1].split("}")[0]
    assert f"fused %{node.id}: {len(node.arg.terms)} nodes, one reduce kernel" in block
    drawn = [int(i) for i in __import__("re").findall(r"^\s*n(\d+) \[", block, __import__("re").M)]
    assert drawn == list(node.arg.holds)
    for t in node.arg.terms:
        for s in t.srcs:
            assert f"n{s} -> n{t.id}" in text


# --- every kernel that renders fused code, by name ----------------------------------------


def _gelu(h: np.ndarray) -> np.ndarray:
    return 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))


CORE_CASES = {
    # name: (build from host arrays, numpy reference, kernel expected to hold the group, tolerance)
    "gemm_blocked_o4": (
        lambda a: (a[0] @ a[1] + a[2]).gelu(),
        lambda a: _gelu(a[0] @ a[1] + a[2]),
        "gemm_blocked",
        1e-5,
    ),
    "gemm_blocked_o1": (
        lambda a: (a[0] @ a[3] - 1.0).relu(),
        lambda a: np.maximum(a[0] @ a[3] - 1, 0),
        "gemm_blocked",
        1e-5,
    ),
    "gemm_blocked_reshaped": (  # tr.nn.linear of a batch: the epilogue reads the bias after a reshape
        lambda a: tr.nn.linear(a[0].reshape(5, 1, 12), a[1].T, a[2]).gelu(),
        lambda a: _gelu(a[0] @ a[1] + a[2]).reshape(5, 1, 16),
        "gemm_blocked",
        1e-5,
    ),
    "gemv_split": (lambda a: (a[4] @ a[1] + a[2]).tanh(), lambda a: np.tanh(a[4] @ a[1] + a[2]), "gemv_split", 1e-5),
    "gemv_split_h8": (
        lambda a: ((a[4].astype(tr.float16) @ a[5].astype(tr.float16)) * 0.5).astype(tr.float32),
        lambda a: (a[4].astype(np.float16).astype(np.float32) @ a[5].astype(np.float16).astype(np.float32)) * 0.5,
        "gemv_split",
        2e-2,
    ),
    "softmax_regs": (
        lambda a: (a[6] * 0.5 - 1.0).softmax(-1) * 3.0,
        lambda a: (
            3
            * np.exp(a[6] * 0.5 - (a[6] * 0.5).max(-1, keepdims=True))
            / np.exp(a[6] * 0.5 - (a[6] * 0.5).max(-1, keepdims=True)).sum(-1, keepdims=True)
        ),
        "softmax_regs",
        1e-5,
    ),
    "norm_regs": (
        lambda a: tr.nn.layer_norm(a[6] * 0.5 - 1.0) * 3.0 + 1.0,
        lambda a: (
            3
            * ((a[6] * 0.5 - 1) - (a[6] * 0.5 - 1).mean(-1, keepdims=True))
            / np.sqrt((a[6] * 0.5 - 1).var(-1, keepdims=True) + 1e-5)
            + 1
        ),
        "norm_regs",
        2e-5,
    ),
    "row_reduce": (
        lambda a: ((a[6] * a[6]).mean(-1) + 1e-5).rsqrt(),
        lambda a: 1 / np.sqrt((a[6] * a[6]).mean(-1) + 1e-5),
        "row_reduce",
        2e-5,
    ),
}


@pytest.mark.parametrize("case", sorted(CORE_CASES))
def test_each_fusing_kernel(case):
    build, ref, kernel, tol = CORE_CASES[case]
    rng = np.random.default_rng(7)
    shapes = [(5, 12), (12, 16), (16,), (12, 7), (1, 12), (12, 64), (6, 300)]
    host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    y = build([tr.tensor(h) for h in host])
    program = tr.compile(y)
    fused = [d for d in program.dispatches if d.group]
    assert [d.kernel for d in fused] == [kernel], [(d.kernel, d.variant) for d in program.dispatches]
    assert_close(y.numpy(), ref(host).astype(np.float32), rtol=tol, atol=tol)


def test_identical_fused_groups_share_one_pipeline():
    """WGSL names a group's values by position, not node id: 200 copies are one pipeline (issue 16.7)."""
    dev = get_device()
    xs = np.linspace(-1, 1, 24, dtype=np.float32)
    x = tr.tensor(xs)
    ys = [(x * float(i) + float(i)).cos().tanh() for i in range(200)]
    before = dev.stats["pipelines_compiled"]
    program = tr.compile(*ys)
    assert [d.op for d in program.dispatches] == ["fused"] * 200
    assert len({d.key for d in program.dispatches}) == 1
    assert dev.stats["pipelines_compiled"] - before <= 1  # was one per copy: the ids made 200 texts
    for i in (0, 7, 199):
        assert_close(ys[i].numpy(), np.tanh(np.cos(xs * i + i)), rtol=1e-5, atol=1e-6)


def test_a_long_chain_is_cut_into_groups_the_driver_compiles_quickly():
    """At most MAX_GROUP_TERMS computing nodes per fused kernel (compile time grows faster, issue 16.6)."""
    from passes.fuse import MAX_GROUP_TERMS

    xs = np.linspace(-1, 1, 16, dtype=np.float32)
    y, want = tr.tensor(xs), xs.astype(np.float64)
    for i in range(2 * MAX_GROUP_TERMS + 10):
        y, want = (-y, -want) if i % 3 else (y.abs(), np.abs(want))  # cheap to compile, no constant leaves
    graph = run_pipeline(y.graph(), DeviceCaps()).graph
    sizes = [sum(t.op is not Op.VIEW for t in n.arg.terms) for n in graph if n.op is Op.FUSED]
    assert sizes == [10, MAX_GROUP_TERMS, MAX_GROUP_TERMS]  # cut from the root back
    assert_close(y.numpy(), want.astype(np.float32), rtol=1e-5, atol=1e-5)
