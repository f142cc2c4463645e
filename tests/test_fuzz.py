"""Differential fuzzing of the whole compiler: random programs, three oracles.

For every program drawn by tests/strategies.py:
  (a) the GPU result against numpy, computed alongside by the generator;
  (b) the GPU result against ir.interpret on the traced graph;
  (c) ir.interpret on the graph before against after every pass of passes.PIPELINE.
Comparisons use the conditioning-aware tolerances explained in tests/strategies.py.

CI runs FUZZ_EXAMPLES programs (derandomized, so CI is reproducible); `pytest --fuzz-long`
or WGJIT_FUZZ_EXAMPLES=N runs more, with fresh random seeds each time.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tracer as tr
from ir.interpret import interpret
from passes import run_pipeline
from tests.strategies import Program, Ref, Step, compare, evaluate, programs
from tracer.graph_builder import build_graph
from tracer.lazy import Lazy

FUZZ_EXAMPLES = int(os.environ.get("WGJIT_FUZZ_EXAMPLES", "250"))
LONG = FUZZ_EXAMPLES > 1000


def _has_f16() -> bool:
    try:
        from backend_wgpu import get_device

        return get_device().caps.shader_f16
    except Exception:  # noqa: BLE001  no adapter: the gpu tests fail elsewhere with a clear error
        return False


def host_value(lz: Lazy) -> np.ndarray:
    """The numpy array behind a graph input (host data not yet uploaded, or a device buffer)."""
    if lz.host is not None:
        return lz.host.copy()
    from backend_wgpu import get_device

    raw = get_device().read(lz.buffer)
    storage = np.uint32 if lz.dtype is tr.bool else lz.dtype.np
    arr = np.frombuffer(raw, dtype=storage).reshape(lz.shape)
    return arr.astype(bool) if lz.dtype is tr.bool else arr.copy()


def trace(program: Program) -> tuple[dict[int, tr.Tensor], dict[int, int]]:
    """Run the program's tracer code; returns the tensors that stay alive and lazy id -> value index."""
    env: dict[str, Any] = {}
    names = {"tr": tr, "np": np, "IN": program.inputs, "nan": float("nan"), "inf": float("inf")}
    from tests.strategies import OPS, _arg_src

    lazy_index: dict[int, int] = {}
    for i, s in enumerate(program.steps):
        code = OPS[s.op].render([_arg_src(a) for a in s.args], s.kw)
        t = eval(code, names, env)  # noqa: S307  our own generated code
        assert isinstance(t, tr.Tensor), f"v{i} = {code} gave {type(t).__name__}"
        env[f"v{i}"] = t
        lazy_index[id(t._lazy)] = i
    alive = {i: env[f"v{i}"] for i in (*program.outputs, *program.keep)}
    env.clear()
    gc.collect()  # dropped intermediates must lose their handles now (they decide graph outputs)
    return alive, lazy_index


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    if want.dtype.kind == "f":  # summation order may follow the layout a pass chose
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_program(program: Program) -> None:
    from backend_wgpu import get_device

    ref = evaluate(program)
    alive, lazy_index = trace(program)
    outs = [alive[i] for i in program.outputs]
    for i, t in zip(program.outputs, outs):  # shapes and dtypes are known before anything runs
        want = ref.plain[i]
        assert t.shape == want.shape, f"v{i}: traced shape {t.shape}, numpy says {want.shape}"
        assert t.dtype.np == want.dtype, f"v{i}: traced dtype {t.dtype}, numpy says {want.dtype}"

    # (b, c): the graph realize would build, interpreted before and after every pass
    pending = list(dict.fromkeys(t._lazy for t in outs if not t._lazy.is_leaf))
    interpreted: dict[int, np.ndarray] = {}
    if pending:
        built = build_graph(pending)
        inputs = [host_value(lz) for lz in built.inputs]
        # None: the buffer behind a view the user holds (the graph outputs its base, not the view)
        index_of = [lazy_index.get(id(lz)) for lz in built.outputs]
        stages = run_pipeline(built.graph, get_device().caps, keep=True).stages
        before = None
        for name, g in stages:
            vals = interpret(g, inputs)
            for k, (vi, v) in enumerate(zip(index_of, vals)):
                if vi is None:  # no numpy twin: passes must still leave it alone
                    if before is not None:
                        _same(v, before[k], f"interpret after pass {name}, output {k}")
                    continue
                noisy = [n[vi] for n in ref.noisy]
                if before is None:
                    compare(v, ref.plain[vi], noisy, f"interpret(traced graph) v{vi}")
                    interpreted[vi] = v
                else:
                    compare(v, before[k], noisy, f"interpret after pass {name} v{vi}")
            before = vals

    # (a): realize in the program's chosen order, then read back
    if program.realize == "each":
        for t in reversed(outs):
            t.realize()
    elif program.realize == "keep_first" and program.keep:
        alive[program.keep[0]].realize()
    tr.realize(*outs)
    for i, t in zip(program.outputs, outs):
        got = t.numpy()
        noisy = [n[i] for n in ref.noisy]
        compare(got, ref.plain[i], noisy, f"GPU v{i}")
        if i in interpreted:
            compare(got, interpreted[i], noisy, f"GPU vs interpret v{i}")
    for k in program.keep:  # kept values were computed along the way; they must be right too
        compare(alive[k].numpy(), ref.plain[k], [n[k] for n in ref.noisy], f"GPU kept v{k}")


@pytest.mark.gpu
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=not LONG,
    database=None,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)
@given(programs(f16=_has_f16()))
def test_random_programs(program: Program) -> None:
    check_program(program)


# --- the harness itself must be able to fail ----------------------------------------------


def test_compare_catches_wrong_values() -> None:
    want = np.array([1.0, 2.0, np.nan, np.inf], np.float32)
    compare(want.copy(), want, [want.copy()], "same")
    with pytest.raises(AssertionError):
        compare(np.array([1.0, 2.1, np.nan, np.inf], np.float32), want, [want.copy()], "off")
    with pytest.raises(AssertionError):
        compare(np.array([1.0, 2.0, 0.0, np.inf], np.float32), want, [want.copy()], "lost nan")
    with pytest.raises(AssertionError):
        compare(np.array([1, 2], np.int32), np.array([1, 3], np.int32), [np.array([1, 3], np.int32)], "int")


def test_unstable_elements_are_not_compared() -> None:
    want = np.array([True, False])
    compare(np.array([False, False]), want, [np.array([False, False])], "flipped under noise")


def test_a_wrong_program_is_caught() -> None:
    # v1 = v0 + 1 claimed to be v0 * 2: the harness must see the difference
    program = Program([np.array([1.0, 2.0, 3.0], np.float32)], [Step("input", (), (("index", 0), ("realized", False))), Step("add", (Ref(0), 1))], (1,))
    ref = evaluate(program)
    got = (tr.tensor(program.inputs[0]) * 2).numpy()
    with pytest.raises(AssertionError):
        compare(got, ref.plain[1], [n[1] for n in ref.noisy], "wrong")
