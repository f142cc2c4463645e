"""Runtime integers (tr.dynamic, tracer/runtime_ints.py): positions and lengths read from the uniform.

Values are checked against numpy at every step; the number of programs compiled is read
from tracer.realize.stats, so a loop over positions must compile a handful, not one per step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tracer as tr
from ir.interpret import interpret
from tests.helpers import assert_close
from tests.strategies import runtime_int_programs
from tests.test_fuzz import _has_f16, check_program, host_value
from tracer.graph_builder import build_graph
from tracer.realize import stats
from tracer.runtime_ints import MIN_BUCKET


def compiled() -> int:
    return stats["programs_compiled"]


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    """softmax(q k^T / sqrt(E)) v in float64, kv heads repeated for grouped-query attention."""
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, 1).astype(np.float64), np.repeat(v, g, 1).astype(np.float64)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        lq, n = s.shape[-2:]
        s = np.where(np.arange(n)[None] <= np.arange(lq)[:, None] + n - lq, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


# --- index_write at runtime offsets ---------------------------------------------------------------


@pytest.mark.parametrize("form", ["dynamic", "plain int"])
def test_index_write_loop_compiles_once(form: str) -> None:
    rng = np.random.default_rng(0)
    want = np.zeros((2, 9, 3), np.float32)
    x = tr.zeros((2, 9, 3))
    tr.realize(x)
    before = compiled()
    for pos in range(9):
        row = rng.standard_normal((2, 1, 3)).astype(np.float32)
        want[:, pos : pos + 1] = row
        x.index_write(tr.tensor(row), (0, tr.dynamic(pos) if form == "dynamic" else pos, 0))
        np.testing.assert_array_equal(x.numpy(), want)
    assert compiled() - before <= 1  # 0 when an earlier test compiled the same structure


def test_index_write_runtime_offsets_on_two_axes() -> None:
    x0 = np.arange(48, dtype=np.float32).reshape(6, 8)
    x = tr.tensor(x0)
    src = np.full((2, 3), -1.0, np.float32)
    before = compiled()
    for r, c in [(0, 0), (4, 5), (2, 1)]:
        got = tr.tensor(x0).index_write(tr.tensor(src), (tr.dynamic(r), c)).numpy()
        want = x0.copy()
        want[r : r + 2, c : c + 3] = src
        np.testing.assert_array_equal(got, want)
    assert compiled() - before <= 1  # 0 when an earlier test compiled the same structure
    assert x.numpy().sum() == x0.sum()  # the tensor written from was copied, not changed


@pytest.mark.parametrize("pos", [-1, 9, 10])
def test_index_write_out_of_range_is_a_clear_error(pos: int) -> None:
    x = tr.zeros((9, 2))
    with pytest.raises(tr.IndexOutOfRangeError, match=r"index_write: offset of axis 0.*outside 0\.\.8"):
        x.index_write(tr.ones((1, 2)), (tr.dynamic(pos), 0))
    x.index_write(tr.ones((1, 2)), (tr.dynamic(3), 0))  # still works afterwards
    assert x.numpy()[3].tolist() == [1.0, 1.0] and x.numpy().sum() == 2.0


def test_index_write_into_a_view_at_a_runtime_offset_is_refused() -> None:
    x = tr.zeros((4, 6))
    with pytest.raises(tr.ShapeError, match="is a view"):
        x[1:].index_write(tr.ones((1, 6)), (tr.dynamic(1), 0))


# --- runtime starts and lengths in indexing ------------------------------------------------------------


def test_runtime_index_and_slice_start() -> None:
    a = np.arange(100, dtype=np.float32).reshape(10, 10)
    t = tr.tensor(a)
    tr.realize(t)
    before = compiled()
    for p in range(8):
        d = tr.dynamic(p)
        np.testing.assert_array_equal((t[d] * 2).numpy(), a[p] * 2)
        np.testing.assert_array_equal(t[d : d + 3].sum(0).numpy(), a[p : p + 3].sum(0))
        np.testing.assert_array_equal(t[:, d - 2 + 2 : d + 1][1:3].numpy(), a[:, p : p + 1][1:3])
    assert compiled() - before <= 4  # each expression's program, once (not one per position)


def test_runtime_length_slice_shape_and_values() -> None:
    a = np.arange(2 * 50 * 3, dtype=np.float32).reshape(2, 50, 3)
    t = tr.tensor(a)
    n = tr.dynamic(21)
    s = t[:, :n]
    assert s.shape == (2, n, 3) and s.shape[1] == 21
    assert s._lazy.shape == (2, 32, 3)  # stored at its bucket
    np.testing.assert_array_equal(s.numpy(), a[:, :21])
    assert t[:, : tr.dynamic(3)]._lazy.shape == (2, MIN_BUCKET, 3)
    assert t[:, 10 : tr.dynamic(49)]._lazy.shape == (2, 40, 3)  # never past the axis


def test_other_ops_refuse_a_runtime_length() -> None:
    t = tr.ones((4, 40))
    s = t[:, : tr.dynamic(7)]
    for bad in (lambda: s + 1, lambda: s.sum(), lambda: s.reshape(-1), lambda: s @ tr.ones((40, 2)), lambda: s[0]):
        with pytest.raises(tr.ShapeError, match="runtime length|dynamic"):
            bad()
    assert (t[:, :7] + 1).numpy().sum() == 4 * 7 * 2  # fixed slices still work


@pytest.mark.parametrize(
    "index,error",
    [
        (lambda d: (slice(None), slice(0, d + 41)), tr.IndexOutOfRangeError),  # longer than the axis
        (lambda d: (slice(None), slice(0, d - 6)), tr.IndexOutOfRangeError),  # negative length
        (lambda d: (d + 10,), tr.IndexOutOfRangeError),  # index past the axis
        (lambda d: (slice(None), slice(d, d + 39)), tr.IndexOutOfRangeError),  # start + length past it
        (lambda d: (slice(None), slice(d, 2 * d)), tr.ShapeError),  # runtime start and length
        (lambda d: (slice(None), slice(0, d, 2)), tr.ShapeError),  # a step
        (lambda d: (slice(None), slice(-3, d)), tr.ShapeError),  # negative bounds do not wrap
    ],
)
def test_bad_runtime_indices_are_clear_errors(index, error) -> None:
    t = tr.ones((4, 40))
    with pytest.raises(error, match="index|slice"):
        t[index(tr.dynamic(5))]


def test_two_variables_do_not_mix() -> None:
    with pytest.raises(tr.ShapeError, match="two different runtime integers"):
        tr.dynamic(1) + tr.dynamic(2)
    p = tr.dynamic(4)
    assert (p + 3) - p == 3 and int(2 * p - 1) == 7


# --- attention over a runtime length ---------------------------------------------------------------


@pytest.mark.parametrize("lq,causal", [(1, False), (4, True), (4, False)], ids=["decode", "flash causal", "flash"])
def test_attention_over_bucketed_lengths(lq: int, causal: bool) -> None:
    """One query row (attention_decode, split into key ranges) or many (flash_attention), every length."""
    rng = np.random.default_rng(1)
    h, hkv, s, e = 4, 2, 300, 8
    kc, vc = (rng.standard_normal((1, hkv, s, e)).astype(np.float32) for _ in range(2))
    k, v = tr.tensor(kc), tr.tensor(vc)
    tr.realize(k, v)
    before = compiled()
    kernels = set()
    for n in [lq, 5, 16, 17, 33, 64, 100, 129, 200, 257, 300]:
        q = rng.standard_normal((1, h, lq, e)).astype(np.float32)
        L = tr.dynamic(n)
        y = tr.nn.scaled_dot_product_attention(tr.tensor(q), k[:, :, :L], v[:, :, :L], is_causal=causal)
        kernels |= {d.kernel for d in tr.compile(y).dispatches}
        assert_close(y.numpy(), attention_ref(q, kc[:, :, :n], vc[:, :, :n], causal), rtol=1e-4, atol=1e-5)
    assert compiled() - before <= 6  # buckets 16, 32, ..., 256 and the whole axis
    assert kernels & {"attention_decode", "flash_attention"} == {"attention_decode" if lq == 1 else "flash_attention"}


def test_attention_length_zero_gives_zeros() -> None:
    k = tr.ones((1, 1, 20, 4))
    with pytest.raises(tr.ShapeError, match="different runtime lengths"):  # two variables: they may differ
        tr.nn.scaled_dot_product_attention(tr.ones((1, 1, 1, 4)), k[:, :, : tr.dynamic(0)], k[:, :, : tr.dynamic(0)])
    n = tr.dynamic(0)
    y = tr.nn.scaled_dot_product_attention(tr.ones((1, 1, 1, 4)), k[:, :, :n], k[:, :, :n])
    np.testing.assert_array_equal(y.numpy(), np.zeros((1, 1, 1, 4), np.float32))


def test_attention_refuses_a_mask_or_one_runtime_operand() -> None:
    k = tr.ones((1, 1, 20, 4))
    n = tr.dynamic(3)
    with pytest.raises(tr.ShapeError, match="mask"):
        tr.nn.scaled_dot_product_attention(tr.ones((1, 1, 1, 4)), k[:, :, :n], k[:, :, :n], mask=tr.ones((1, 3)))
    with pytest.raises(tr.ShapeError, match="runtime length"):
        tr.nn.scaled_dot_product_attention(tr.ones((1, 1, 1, 4)), k[:, :, :n], k[:, :, :3])


def test_interpreter_reads_the_runtime_values() -> None:
    a = np.arange(30, dtype=np.float32).reshape(10, 3)
    x = tr.tensor(a)
    y = x.copy().index_write(tr.tensor(-np.ones((1, 3), np.float32)), (tr.dynamic(7), 0))[tr.dynamic(7)] * 2
    built = build_graph([y._lazy])
    inputs = [host_value(lz) for lz in built.inputs]
    np.testing.assert_array_equal(interpret(built.graph, inputs)[0], [-2.0, -2.0, -2.0])
    np.testing.assert_array_equal(interpret(built.graph, inputs, [2, 5])[0], a[5] * 2)  # write row 2, read row 5
    with pytest.raises(tr.IndexOutOfRangeError):
        interpret(built.graph, inputs, [10, 2])


# --- @tr.jit --------------------------------------------------------------------------------------


def test_jit_replays_with_changing_positions() -> None:
    rng = np.random.default_rng(2)
    h, hkv, s, e = 2, 1, 70, 8
    kc0, vc0 = (rng.standard_normal((1, hkv, s, e)).astype(np.float32) for _ in range(2))
    kc, vc = tr.zeros((1, hkv, s, e)), tr.zeros((1, hkv, s, e))
    tr.realize(kc, vc)

    @tr.jit
    def step(q, k, v, kc, vc, pos):
        kc.index_write(k, (0, 0, pos, 0))
        vc.index_write(v, (0, 0, pos, 0))
        return tr.nn.scaled_dot_product_attention(q, kc[:, :, : pos + 1], vc[:, :, : pos + 1]) * 2

    before = compiled()
    for pos in [*range(s), 3, 40, 10]:
        q = rng.standard_normal((1, h, 1, e)).astype(np.float32)
        k, v = tr.tensor(kc0[:, :, pos : pos + 1]), tr.tensor(vc0[:, :, pos : pos + 1])
        got = step(tr.tensor(q), k, v, kc, vc, tr.dynamic(pos)).numpy()
        assert_close(got, 2 * attention_ref(q, kc0[:, :, : pos + 1], vc0[:, :, : pos + 1]), rtol=1e-4, atol=1e-5)
    assert step.trace_count == 4  # buckets 16, 32, 64 and 70; going back to one replays it
    assert compiled() - before <= 4
    assert step.replay_count == s + 3 - 4
    with pytest.raises(tr.IndexOutOfRangeError, match="outside 0..69"):
        step(tr.tensor(q), k, v, kc, vc, tr.dynamic(s))
    with pytest.raises(tr.IndexOutOfRangeError, match="-1 is outside"):
        step(tr.tensor(q), k, v, kc, vc, tr.dynamic(-1))
    np.testing.assert_array_equal(kc.numpy(), kc0)  # the refused calls wrote nothing


def test_jit_refuses_reading_a_runtime_argument_as_an_int() -> None:
    @tr.jit
    def f(x, n):
        return x * int(n)

    with pytest.raises(tr.JitError, match="read as a python int"):
        f(tr.ones(3), tr.dynamic(2))


# --- the natural decode loop -----------------------------------------------------------------------


def test_llama_lazy_decode_loop_compiles_few_programs_and_matches_jit() -> None:
    from benchmarks.e2e.decoder import config
    from examples import llama as L

    cfg = config("tiny")
    model = L.Llama(cfg, L.check_weights(L.random_weights(cfg, seed=0), cfg, "random"), cfg.max_positions)
    toks = [3, 17, 5, 9, 11, 2, 7, 8, 1, 4, 6, 12, 13, 14, 15, 16, 18, 19, 20, 21]
    cache = model.empty_cache().tensors()
    jitted = []
    for pos, tok in enumerate(toks):
        out = model.step_jit(tr.tensor(np.array([[tok]], np.int32)), tr.tensor(np.array([pos], np.int32)), *cache)
        cache = out[2:]
        jitted.append(out[0].numpy())
    kv = model.empty_cache()
    before = compiled()
    for pos, tok in enumerate(toks):
        logits = model.step_lazy(tr.tensor(np.array([[tok]], np.int32)), pos, kv)[0].numpy()
        assert_close(logits, jitted[pos], rtol=1e-4, atol=1e-5)
    assert compiled() - before <= 3  # one program per bucket of the attended length (16, 24 here)
    # the same loop under @tr.jit with the caches written in place: one trace per bucket, the same logits
    into = model.empty_cache().tensors()
    for pos, tok in enumerate(toks):
        logits, next_id = model.step_into_jit(tr.tensor(np.array([[tok]], np.int32)), tr.dynamic(pos), *into)
        assert_close(logits.numpy(), jitted[pos], rtol=1e-4, atol=1e-5)
        assert int(next_id.numpy()[0]) == int(np.argmax(jitted[pos]))
    assert model.step_into_jit.trace_count == 2 and model.step_into_jit.replay_count == len(toks) - 2
    for got, want in zip(into, cache, strict=True):  # the caches hold what the where-form step wrote
        assert_close(got.numpy()[:, :, : len(toks)], want.numpy()[:, :, : len(toks)], rtol=1e-5, atol=1e-6)


def test_llama_step_into_refuses_sliding_windows() -> None:
    """step_into cannot place a window's start without reading the position in python: a clear error
    (generate.py runs such models through the where-form step)."""
    import dataclasses

    from benchmarks.e2e.decoder import config
    from examples import llama as L

    cfg = dataclasses.replace(config("tiny"), windows=(8, None))
    model = L.Llama(cfg, L.check_weights(L.random_weights(cfg, seed=0), cfg, "random"), cfg.max_positions)
    with pytest.raises(ValueError, match="sliding-window layers; use step"):
        model.step_into(tr.tensor(np.array([[1]], np.int32)), tr.dynamic(0), *model.empty_cache().tensors())


# --- the fuzzer ------------------------------------------------------------------------------------


@pytest.mark.gpu
@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(runtime_int_programs(f16=_has_f16()))
def test_random_runtime_int_programs(program) -> None:
    """tests/strategies.py's runtime-integer steps through the fuzzer's oracles (numpy, ir.interpret on the
    traced graph and after every pass, the GPU)."""
    check_program(program)


# --- inspection ------------------------------------------------------------------------------------


def test_dumps_show_the_traced_values_of_runtime_fields() -> None:
    import json

    from tracer.inspect import dump

    x = tr.zeros((4, 8))
    tr.realize(x)
    x.index_write(tr.ones((1, 8)), (tr.dynamic(2), 0))
    with tr.record() as r:
        tr.realize(x)
    doc = json.loads(json.dumps(dump.dump_document(r.programs)))
    metas = [n["dispatch"]["metadata"] for p in doc["programs"] for n in p["nodes"] if n.get("dispatch")]
    assert any(m.get("lo0") == 2 and m.get("hi0") == 3 for m in metas), metas
    assert "index_write" in str(tr.explain(x.index_write(tr.ones((1, 8)), (tr.dynamic(3), 0))))


def test_jit_values_read_at_a_runtime_argument_are_not_frozen() -> None:
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    t = tr.tensor(table)
    kept: dict[str, tr.Tensor] = {}

    @tr.jit
    def f(x, p):
        row = t[p]
        kept["row"] = row  # still visible after the trace: not computed once as a constant
        return x + row

    x = np.ones(4, np.float32)
    for p in (2, 7, 0):
        np.testing.assert_array_equal(f(tr.tensor(x), tr.dynamic(p)).numpy(), table[p] + 1)
    assert f.trace_count == 1

    @tr.jit
    def g(p):
        return t[p].numpy()

    with pytest.raises(tr.JitError):
        g(tr.dynamic(1))
