"""@tr.jit and program replay: trace once per signature, replay cheaply, never alias held outputs."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from tests.helpers import assert_close
from tracer.realize import stats as realize_stats

pytestmark = pytest.mark.gpu


def _mlp_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    h = (x @ w + b) * scale
    return np.maximum(h, 0)


def make_layer():  # noqa: ANN201
    w = tr.randn(8, 6, seed=1)
    b = tr.randn(6, seed=2)

    @tr.jit
    def layer(x, scale=0.5):
        return ((x @ w + b) * scale).relu()

    return layer, w.numpy(), b.numpy()


def test_traces_once_per_signature_and_replays():
    layer, w, b = make_layer()
    for seed in range(4):
        x = tr.randn(3, 8, seed=10 + seed)
        assert_close(layer(x).numpy(), _mlp_ref(x.numpy(), w, b, 0.5))
    assert (layer.trace_count, layer.replay_count) == (1, 3)
    x = tr.randn(5, 8, seed=20)  # a new shape retraces
    assert_close(layer(x).numpy(), _mlp_ref(x.numpy(), w, b, 0.5))
    assert layer.trace_count == 2
    layer(x, scale=0.5)  # the default, spelled out: the same signature
    layer(x, 0.5)
    assert layer.trace_count == 2
    assert_close(layer(x, scale=2.0).numpy(), _mlp_ref(x.numpy(), w, b, 2.0))  # a new static value retraces
    assert layer.trace_count == 3
    x3 = tr.randn(3, 8, seed=21)  # the first signature is still cached
    assert_close(layer(x3).numpy(), _mlp_ref(x3.numpy(), w, b, 0.5))
    assert layer.trace_count == 3


@pytest.mark.f16  # uses float16 among other dtypes
def test_retrace_reason_on_stderr(monkeypatch, capsys):
    monkeypatch.setenv("WGJIT_DEBUG", "1")
    layer, _, _ = make_layer()
    layer(tr.randn(3, 8, seed=0))
    assert "tracing (first call)" in capsys.readouterr().err
    layer(tr.randn(4, 8, seed=0))
    err = capsys.readouterr().err
    assert "retracing: x: tensor (3, 8) float32 -> tensor (4, 8) float32" in err
    layer(tr.randn(4, 8, seed=1).astype(tr.float16).astype(tr.float32), scale=1.5)
    assert "scale: 0.5 -> 1.5" in capsys.readouterr().err


def test_replay_reuses_everything_but_inputs_and_outputs():
    layer, w, b = make_layer()
    x = tr.randn(3, 8, seed=3)
    layer(x).numpy()
    layer(x).numpy()  # warm: bind groups for these buffers exist now
    stats = get_device().stats
    before = dict(stats)
    compiled = realize_stats["programs_compiled"]
    for _ in range(5):
        y = layer(x)
        del y  # the caller lets go: the next call writes the same output buffer
    after = dict(stats)
    assert realize_stats["programs_compiled"] == compiled
    assert after.get("pipelines_compiled", 0) == before.get("pipelines_compiled", 0)
    assert after.get("bind_groups_created", 0) == before.get("bind_groups_created", 0)
    assert after.get("buffers_allocated", 0) == before.get("buffers_allocated", 0)
    assert after["outputs_reused"] - before.get("outputs_reused", 0) == 5
    assert layer.trace_count == 1
    assert_close(layer(x).numpy(), _mlp_ref(x.numpy(), w, b, 0.5))


def test_fresh_host_arguments_reuse_one_staging_buffer_and_the_bind_groups():
    """A loop feeding new host data (token ids, a position) allocates nothing and binds nothing new."""
    layer, w, b = make_layer()
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((3, 8), dtype=np.float32) for _ in range(8)]
    scale = np.float32(0.5)
    for xn in xs[:2]:  # traced, then a first replay lays out the staging buffer
        layer(tr.tensor(xn)).numpy()
    stats = get_device().stats
    before = dict(stats)
    held = []
    for xn in xs[2:]:
        x = tr.tensor(xn)
        y = layer(x)
        assert_close(y.numpy(), _mlp_ref(xn, w, b, scale))
        held.append((x, xn))
        del y
    after = dict(stats)
    assert after.get("bind_groups_created", 0) == before.get("bind_groups_created", 0)
    assert after.get("buffers_allocated", 0) == before.get("buffers_allocated", 0)
    assert after.get("uploads", 0) == before.get("uploads", 0)
    for x, xn in held:  # the arguments keep their own values (uploaded now, apart from the staging buffer)
        assert_close(x.numpy(), xn)
        assert_close(layer(x).numpy(), _mlp_ref(xn, w, b, scale))


def test_staged_arguments_of_several_sizes_and_dtypes():
    @tr.jit
    def f(ids, mask, x):
        return tr.where(mask, x[ids], -x[ids])

    rng = np.random.default_rng(6)
    table = rng.standard_normal((50, 4), dtype=np.float32)
    for n in (5, 5, 5, 9, 9, 5):  # two signatures, each with its own layout
        ids = rng.integers(0, 50, n).astype(np.int32)
        mask = rng.random((n, 1)) < 0.5
        got = f(tr.tensor(ids), tr.tensor(mask), tr.tensor(table)).numpy()
        assert_close(got, np.where(mask, table[ids], -table[ids]))


def test_outputs_never_alias_held_outputs():
    layer, w, b = make_layer()
    xs = [tr.randn(3, 8, seed=30 + i) for i in range(4)]
    held = [layer(x) for x in xs]  # all held: four distinct buffers
    raws = [y._lazy.buffer.buffer for y in held]
    assert len({id(r) for r in raws}) == 4
    for x, y in zip(xs, held, strict=True):
        assert_close(y.numpy(), _mlp_ref(x.numpy(), w, b, 0.5))
    # dropping one lets the next call reuse exactly that buffer, and only that one
    dropped = raws[1]
    del held[1]
    gc.collect()
    y_new = layer(xs[0])
    assert y_new._lazy.buffer.buffer is not raws[0] and y_new._lazy.buffer.buffer is not raws[2]
    for x, y in zip([xs[0], xs[2], xs[3]], [held[0], held[1], held[2]], strict=True):
        assert_close(y.numpy(), _mlp_ref(x.numpy(), w, b, 0.5))
    del dropped


def test_output_reused_only_after_release():
    layer, _, _ = make_layer()
    x = tr.randn(7, 8, seed=40)  # a shape no other test uses: this program's spare outputs are ours
    y1 = layer(x)
    first = y1._lazy.buffer.buffer
    y2 = layer(x)
    assert y2._lazy.buffer.buffer is not first  # y1 is held
    del y1
    gc.collect()
    y3 = layer(x)
    assert y3._lazy.buffer.buffer is first  # nothing held the first output any more
    z = y3 * 2  # a pending consumer holds y3's value: still not reusable
    del y3
    gc.collect()
    y4 = layer(x)
    assert y4._lazy.buffer.buffer is not first
    assert_close(z.numpy(), y4.numpy() * 2)


def test_inputs_are_never_overwritten():
    @tr.jit
    def f(x):
        return ((x + 1).exp() * 2).sqrt()

    xn = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    x = tr.tensor(xn)
    for _ in range(3):
        assert_close(f(x).numpy(), np.sqrt(np.exp(xn + 1) * 2), rtol=1e-5)
    assert_close(x.numpy(), xn)


def test_aliasing_is_part_of_the_signature():
    @tr.jit
    def f(a, b):
        return a * 2 + b

    x, y = tr.randn(4, seed=1), tr.randn(4, seed=2)
    assert_close(f(x, x).numpy(), x.numpy() * 3, rtol=1e-6)
    assert_close(f(x, y).numpy(), x.numpy() * 2 + y.numpy(), rtol=1e-6)
    assert f.trace_count == 2
    assert_close(f(y, y).numpy(), y.numpy() * 3, rtol=1e-6)
    assert f.trace_count == 2


def test_structures_arrays_pending_arguments_and_passthrough():
    @tr.jit
    def f(inputs, n):
        x, extra = inputs["x"], inputs["extra"]
        return {"sum": (x * n).sum(-1), "same": extra, "n": n, "pair": (x - 1, x + 1)}

    for seed in range(2):
        xn = np.random.default_rng(seed).standard_normal((3, 5)).astype(np.float32)
        extra = tr.randn(2, seed=seed)
        pending = tr.tensor(xn) + 0  # a pending argument is computed first
        out = f({"x": pending, "extra": extra}, 3)
        assert out["same"] is extra and out["n"] == 3
        assert_close(out["sum"].numpy(), (xn * 3).sum(-1), rtol=1e-5)
        assert_close(out["pair"][0].numpy(), xn - 1)
        assert_close(out["pair"][1].numpy(), xn + 1)
        out2 = f({"x": xn, "extra": extra}, 3)  # a numpy array is uploaded, same signature
        assert_close(out2["sum"].numpy(), (xn * 3).sum(-1), rtol=1e-5)
    assert f.trace_count == 1


def test_captured_pending_values_are_computed_once():
    w = tr.randn(6, 6, seed=5)
    w2 = w * 2  # pending when traced: independent of the arguments, so computed before the trace

    @tr.jit
    def f(x):
        return x @ w2

    x = tr.randn(2, 6, seed=6)
    assert_close(f(x).numpy(), x.numpy() @ (w.numpy() * 2), rtol=1e-5)
    assert w2.is_realized
    program = f.traces[next(iter(f.traces))].program
    assert [d.op for d in program.dispatches] == ["matmul"]
    x2 = tr.randn(2, 6, seed=7)
    assert_close(f(x2).numpy(), x2.numpy() @ (w.numpy() * 2), rtol=1e-5)


def test_realize_reuses_programs_and_never_aliases_held_outputs():
    x = tr.randn(16, seed=8)
    compiled = realize_stats["programs_compiled"]
    a = (x * 2).exp()
    a.realize()
    b = (x * 2).exp()  # structurally identical: the same program, a held, so a new buffer
    b.realize()
    assert realize_stats["programs_compiled"] == compiled + 1
    assert a._lazy.buffer.buffer is not b._lazy.buffer.buffer
    assert_close(a.numpy(), np.exp(x.numpy() * 2), rtol=1e-6)
    assert_close(b.numpy(), a.numpy())


# --- what a replay guarantees (issue 16 item 2) ------------------------------------------------


def test_host_read_of_an_argument_raises_instead_of_replaying_a_stale_value():
    @tr.jit
    def f(x):
        return float((x * 2).sum())

    a = tr.tensor(np.array([1.0, 2.0], np.float32))
    b = tr.tensor(np.array([3.0, 4.0], np.float32))
    for arg in (a, a, b):  # f(a); f(a); f(b) once replayed f(a)'s value
        with pytest.raises(tr.JitError, match=r"jit f: the function reads a tensor computed from its arguments"):
            f(arg)

    @tr.jit
    def g(x):
        if x.min() > 0:  # control flow on a value (bool() of a tensor): refused too
            return x
        return -x

    with pytest.raises(tr.JitError, match="jit g: "):
        g(a)


def test_host_read_of_a_captured_value_is_a_constant_of_the_trace():
    w = tr.tensor(np.array([1.0, 2.0, 3.0], np.float32))

    @tr.jit
    def f(x):
        return x * float(w.sum())  # does not depend on x: read once, when traced

    for seed in range(3):
        x = tr.randn(3, seed=seed)
        assert_close(f(x).numpy(), x.numpy() * 6.0)
    assert f.trace_count == 1


def test_float_static_arguments_are_keyed_by_their_bits():
    o = tr.tensor(np.ones(3, np.float32))

    @tr.jit
    def g(x, s):
        return x / s

    assert np.all(g(o, 0.0).numpy() == np.inf)
    assert np.all(g(o, 0.0).numpy() == np.inf)
    assert np.all(g(o, -0.0).numpy() == -np.inf)  # once +inf: 0.0 and -0.0 shared a signature
    assert g.trace_count == 2

    @tr.jit
    def h(x, s):
        return x / s

    assert np.all(h(o, -0.0).numpy() == -np.inf)
    assert np.all(h(o, 0.0).numpy() == np.inf)  # once a JitError on every later call
    assert np.all(h(o, s=-0.0).numpy() == -np.inf)  # the keyword path keys floats the same way
    assert h.trace_count == 2
    assert np.all(h(o, s=np.float64(0.0)).numpy() == np.inf)  # another type: its own signature, keyed by bits
    assert np.all(h(o, s=np.float64(-0.0)).numpy() == -np.inf)
    assert h.trace_count == 4
    assert np.all(np.isnan(h(o, float("nan")).numpy()))
    assert np.all(np.isnan(h(o, float("nan")).numpy()))  # a new NaN object is the same signature
    assert h.trace_count == 5


def test_pending_arguments_are_computed_then_replayed():
    @tr.jit
    def f(x):
        return (x * 2).exp()

    a = tr.tensor(np.linspace(-1, 1, 6, dtype=np.float32))
    for i in range(4):  # f(a + 1); f(a + 1) once raised a spurious JitError
        arg = a + float(i)
        assert_close(f(arg).numpy(), np.exp((a.numpy() + i) * 2), rtol=1e-5)
        assert_close(arg.numpy(), a.numpy() + i)
    assert (f.trace_count, f.replay_count) == (1, 3)


def test_nested_and_recursive_jitted_functions_trace_into_the_caller():
    @tr.jit
    def inner(x):
        return x * 2 + 1

    @tr.jit
    def outer(x):
        return inner(x).exp() + inner(x * 3)

    @tr.jit
    def power(x, n):
        return x if n == 1 else power(x, n - 1) * x

    for seed in range(3):
        x = tr.randn(5, seed=seed)
        xn = x.numpy()
        assert_close(outer(x).numpy(), np.exp(xn * 2 + 1) + (xn * 3 * 2 + 1), rtol=1e-5)
        assert_close(power(x, 3).numpy(), xn**3, rtol=1e-5)
        assert_close(inner(x).numpy(), xn * 2 + 1)
    assert (outer.trace_count, outer.replay_count) == (1, 2)
    assert (power.trace_count, power.replay_count) == (1, 2)
    assert inner.trace_count == 1  # only its own calls; inside outer it was inlined


def test_side_effects_run_once_per_trace():
    calls = []

    @tr.jit
    def f(x):
        calls.append(1)
        return x + 1

    x = tr.randn(4, seed=0)
    for _ in range(5):
        assert_close(f(x).numpy(), x.numpy() + 1)
    assert len(calls) == 1 and f.trace_count == 1


SCALE = 2.0


def test_rebound_globals_and_closure_variables_retrace(monkeypatch, capsys):
    global SCALE
    monkeypatch.setenv("WGJIT_DEBUG", "1")
    offset = 1.0

    @tr.jit
    def f(x):
        return x * SCALE + offset

    x = tr.randn(4, seed=1)
    xn = x.numpy()
    assert_close(f(x).numpy(), xn * 2 + 1)
    assert_close(f(x).numpy(), xn * 2 + 1)
    SCALE = 3.0
    try:
        assert_close(f(x).numpy(), xn * 3 + 1)
        assert "the global 'SCALE' names another object" in capsys.readouterr().err
        offset = 5.0
        assert_close(f(x).numpy(), xn * 3 + 5)
        assert "the closure variable 'offset'" in capsys.readouterr().err
        assert_close(f(x).numpy(), xn * 3 + 5)
        assert f.trace_count == 3
    finally:
        SCALE = 2.0


def test_captured_tensors_are_read_at_each_call():
    cache = tr.tensor(np.zeros((4, 3), np.float32))

    @tr.jit
    def f(x):
        return x + cache.sum(axis=0)

    x = tr.randn(3, seed=2)
    assert_close(f(x).numpy(), x.numpy())
    cache.index_write(tr.tensor(np.ones((1, 3), np.float32)), (1, 0))  # written outside: still pending
    assert_close(f(x).numpy(), x.numpy() + 1)
    cache.index_write(tr.tensor(np.full((1, 3), 2, np.float32)), (3, 0))
    cache.realize()
    assert_close(f(x).numpy(), x.numpy() + 3)
    assert f.trace_count == 1


def test_index_write_inside_a_jitted_function_repeats_on_every_replay():
    """The KV-cache append under @tr.jit: into an argument and into a captured tensor."""
    state = tr.tensor(np.zeros((4, 3), np.float32))

    @tr.jit
    def push(cache, row, pos):
        cache.index_write(row, (pos, 0))
        state.index_write(row * 2, (pos, 0))
        return cache.sum(axis=0)

    cache = tr.tensor(np.zeros((4, 3), np.float32))
    want, want_state = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)
    for step in range(10):
        row = np.random.default_rng(step).standard_normal((1, 3)).astype(np.float32)
        pos = step % 4
        want[pos], want_state[pos] = row[0], row[0] * 2
        total = push(cache, tr.tensor(row), pos)
        assert_close(total.numpy(), want.sum(axis=0), rtol=1e-5, atol=1e-6)
        assert_close(cache.numpy(), want)
        assert_close(state.numpy(), want_state)
    assert (push.trace_count, push.replay_count) == (4, 6)


def test_realize_inside_a_jitted_function_is_left_to_the_program():
    @tr.jit
    def f(x):
        y = (x * 2).realize()  # would be computed once and captured if it ran at trace time
        return y + 1

    for seed in range(3):
        x = tr.randn(4, seed=seed)
        assert_close(f(x).numpy(), x.numpy() * 2 + 1)
    assert f.trace_count == 1
