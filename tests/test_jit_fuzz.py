"""Random call sequences: a `@tr.jit` function returns what the plain function returns, call after call.

Two worlds start from the same data: in one every call goes through `@tr.jit` (traces,
replays, retraces), in the other the plain function runs eagerly. After each step the
results and every tensor the functions write into must agree. The steps reach what
issue 16 found: static floats 0.0/-0.0/NaN, pending and aliased arguments, index_write
into an argument and into a captured tensor, writes from outside, rebound python state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tracer as tr
from tests.helpers import assert_close

pytestmark = pytest.mark.gpu

N = 4  # rows of the caches


@dataclass
class World:
    """The functions and the state they read or write, built for jit or for eager runs."""

    jitted: bool
    cache: tr.Tensor = field(init=False)  # captured by `read_state` and written by `push_state`
    arg_cache: tr.Tensor = field(init=False)  # passed to `push_arg`
    pool: list[tr.Tensor] = field(init=False)
    fns: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(0)
        self.cache = tr.tensor(rng.standard_normal((N, 3)).astype(np.float32))
        self.arg_cache = tr.tensor(rng.standard_normal((N, 3)).astype(np.float32))
        self.pool = [tr.tensor(rng.standard_normal(3).astype(np.float32)) for _ in range(3)]
        world = self
        scale = 2.0  # a closure variable `scaled` reads; rebinding it (set_scale) must be seen

        def set_scale(value: float) -> None:
            nonlocal scale
            scale = value

        self.set_scale = set_scale

        def divide(x, s):
            return x / s

        def combine(a, b):
            return a * 2 - b

        def push_arg(cache, row, pos):
            cache.index_write(row.reshape(1, 3), (pos, 0))
            return cache.sum(axis=0)

        def push_state(row, pos):
            world.cache.index_write(row.reshape(1, 3) * 3, (pos, 0))
            return world.cache[pos]

        def read_state(x):
            return x + world.cache.max(axis=0)

        def scaled(x):
            return x * scale

        wrap = tr.jit if self.jitted else (lambda f: f)
        self.fns = {f.__name__: wrap(f) for f in (divide, combine, push_arg, push_state, read_state, scaled)}


STATIC = st.sampled_from([0.0, -0.0, 1.5, -2.0, float("nan"), float("inf")])
STEP = st.one_of(
    st.tuples(st.just("divide"), st.integers(0, 2), STATIC, st.booleans()),
    st.tuples(st.just("combine"), st.integers(0, 2), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("push_arg"), st.integers(0, 2), st.integers(0, N - 1), st.booleans()),
    st.tuples(st.just("push_state"), st.integers(0, 2), st.integers(0, N - 1), st.booleans()),
    st.tuples(st.just("read_state"), st.integers(0, 2), st.just(0), st.booleans()),
    st.tuples(st.just("scaled"), st.integers(0, 2), st.just(0), st.booleans()),
    st.tuples(st.just("write_outside"), st.integers(0, 2), st.integers(0, N - 1), st.just(False)),
    st.tuples(st.just("rebind_scale"), st.just(0), st.sampled_from([0.5, 2.0, -1.0]), st.just(False)),
)


def run_step(w: World, step: tuple) -> Any:
    name, i, j, pending = step
    x = w.pool[i] + 0.0 if pending else w.pool[i]  # a pending argument, or a realized one
    if name == "divide":
        return w.fns["divide"](x, j)
    if name == "combine":
        return w.fns["combine"](x, w.pool[j])  # j == i: aliased arguments
    if name == "push_arg":
        return w.fns["push_arg"](w.arg_cache, x, j)
    if name == "push_state":
        return w.fns["push_state"](x, j)
    if name == "write_outside":
        w.cache.index_write(w.pool[i].reshape(1, 3) - 1.0, (j, 0))
        return None
    if name == "rebind_scale":
        w.set_scale(j)
        return None
    return w.fns[name](x)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=1, max_size=10))
@example([("divide", 0, 0.0, False), ("divide", 0, 0.0, False), ("divide", 0, -0.0, False)])
@example([("scaled", 0, 0, False), ("rebind_scale", 0, 0.5, False), ("scaled", 0, 0, False)])
@example(
    [("push_arg", 1, 2, True), ("push_arg", 0, 2, True), ("write_outside", 0, 1, False), ("read_state", 2, 0, True)]
)
def test_jit_matches_eager_over_call_sequences(steps: list[tuple]) -> None:
    jit_world, eager_world = World(jitted=True), World(jitted=False)
    for step in steps:
        got, want = run_step(jit_world, step), run_step(eager_world, step)
        if want is not None:
            assert_close(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
        assert_close(jit_world.cache.numpy(), eager_world.cache.numpy())
        assert_close(jit_world.arg_cache.numpy(), eager_world.arg_cache.numpy())
