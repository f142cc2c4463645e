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
    if lz.dtype.is_quantized:  # its blocks, as the interpreter takes them (ir/quant.py)
        return np.frombuffer(raw, dtype=np.uint32).copy()
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
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    )
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
    program = Program(
        [np.array([1.0, 2.0, 3.0], np.float32)],
        [Step("input", (), (("index", 0), ("realized", False))), Step("add", (Ref(0), 1))],
        (1,),
    )
    ref = evaluate(program)
    got = (tr.tensor(program.inputs[0]) * 2).numpy()
    with pytest.raises(AssertionError):
        compare(got, ref.plain[1], [n[1] for n in ref.noisy], "wrong")


# --- what the fuzzer found: one regression test per bug (minimal programs) ------------------------

F32 = np.float32


def _graph_stages_agree(t: tr.Tensor) -> None:
    """(b) and (c) for one tensor: interpret before and after every pass, and the GPU, agree."""
    from backend_wgpu import get_device

    built = build_graph([t._lazy])
    inputs = [host_value(lz) for lz in built.inputs]
    stages = run_pipeline(built.graph, get_device().caps, keep=True).stages
    first = interpret(stages[0][1], inputs)[0]
    for name, g in stages[1:]:
        _same(interpret(g, inputs)[0], first, f"after {name}")
    _same(t.numpy(), first, "GPU")


REGRESSIONS: dict[str, tuple[Any, Any]] = {
    # tr.tensor of 0-d data gave shape (1,) (np.ascontiguousarray makes 0-d arrays 1-d)
    "0-d data stays 0-d": (lambda: tr.tensor(np.float32(2.5)).numpy(), lambda: np.float32(2.5)),
    # WGSL has no ordering of bools: <, <=, maximum, minimum on bool tensors did not compile
    "bool ordering": (
        lambda: [
            f(tr.tensor([False, True, True]), tr.tensor([True, True, False])).numpy()
            for f in (tr.maximum, tr.minimum, lambda a, b: a <= b, lambda a, b: a > b)
        ],
        lambda: [
            f(np.array([False, True, True]), np.array([True, True, False]))
            for f in (np.maximum, np.minimum, np.less_equal, np.greater)
        ],
    ),
    # `!=` compiled to an ordered compare: NaN != 1 gave False
    "NaN != x": (lambda: (tr.tensor([np.nan, 1.0]) != 1.0).numpy(), lambda: np.array([True, False])),
    # x % inf gave NaN (inf * trunc(x / inf) = inf * 0)
    "x % inf": (lambda: (tr.tensor(F32([3.0, -3.0])) % float("inf")).numpy(), lambda: F32([3.0, -3.0]) % np.inf),
    # softmax(axis=-1) of a 0-d tensor was refused; transpose(0, 0) of one raised IndexError
    "0-d axis -1": (
        lambda: (tr.tensor(F32(3)).softmax(-1).numpy(), tr.tensor(F32(3)).transpose(0, -1).numpy()),
        lambda: (F32(1), F32(3)),
    ),
    # a vec4 binding of an empty tensor (matmul with k = 0) failed validation (4-byte buffer)
    "matmul k=0": (lambda: (tr.zeros((1, 1, 0)) @ tr.zeros((1, 0, 4))).numpy(), lambda: np.zeros((1, 1, 4), F32)),
    # an empty matmul output made the GEMM tile choice divide by zero
    "matmul m=0": (lambda: (tr.zeros((0, 3)) @ tr.ones((3, 70))).numpy(), lambda: np.zeros((0, 70), F32)),
    # pow: 0 ** 0 gave 0, NaN ** 0 NaN, 0 ** -0.5 gave 0, (-inf) ** -0.5 NaN
    "pow specials": (
        lambda: (tr.tensor(F32([0, np.nan, 0, -np.inf, 1])) ** tr.tensor(F32([0, 0, -0.5, -0.5, np.nan]))).numpy(),
        lambda: F32([1, 1, np.inf, 0, 1]),
    ),
    # float //: -1e-30 // 1e30 gave -0 (numpy -1), inf // 0.25 gave inf (numpy NaN), 0.001 // -inf gave -0 (numpy -1)
    "float floordiv": (
        lambda: (tr.tensor(F32([-1e-30, np.inf, 0.001, 7])) // tr.tensor(F32([1e30, 0.25, -np.inf, 0]))).numpy(),
        lambda: F32([-1, np.nan, -1, np.inf]),
    ),
    # NaN -> int gave INT_MIN; float16 inf -> int gave 65504
    "cast NaN and f16 inf": (
        lambda: (
            tr.tensor(F32([np.nan])).astype(tr.int32).numpy(),
            tr.tensor(np.float16([np.inf])).astype(tr.int32).numpy(),
        ),
        lambda: (np.int32([0]), np.int32([2**31 - 128])),
    ),
    # x - x, x + -x and exp(x) - exp(x) were folded to 0 by the driver, also for inf and NaN
    "x - x of inf": (
        lambda: [
            f(tr.tensor(F32([np.inf, np.nan, 2]))).numpy()
            for f in (lambda x: x - x, lambda x: x + -x, lambda x: x.exp() - x.exp())
        ],
        lambda: [F32([np.nan, np.nan, 0])] * 3,
    ),
    # sqrt(a) * sqrt(a) (one node squared, or two equal nodes merged) was folded to a: 4, not NaN, for a = -4
    "sqrt(a) squared": (
        lambda: [
            f(tr.tensor(F32([-4.0, 4.0]))).numpy() for f in (lambda x: x.sqrt().square(), lambda x: x.sqrt() * x.sqrt())
        ],
        lambda: [F32([np.nan, 4.0])] * 2,
    ),
    # a fused exp(log(x)) was rewritten to x: exp(log(-2)) gave -2, not NaN (found by the 10,000-program run)
    "exp(log(x))": (
        lambda: [
            f(tr.tensor(F32([-2.0, 2.0, 100.0]))).numpy() for f in (lambda x: x.log().exp(), lambda x: x.exp().log())
        ],
        lambda: [F32([np.nan, 2.0, 100.0]), F32([-2.0, 2.0, np.inf])],
    ),
    # the driver's range analysis decided rsqrt(x) >= 0 and dropped relu: relu(rsqrt(-0.0)) was -inf
    "relu of rsqrt(-0)": (lambda: tr.tensor(F32([-0.0, 4])).rsqrt().relu().numpy(), lambda: F32([0, 0.5])),
    # float16 gelu in native f16 lost every digit in the tails (0 instead of -7e-5)
    "f16 gelu tail": (
        lambda: tr.tensor(np.float16([-4.0])).gelu(approximate="tanh").numpy(),
        lambda: (
            (0.5 * -4.0 * (1 + np.tanh(np.sqrt(2 / np.pi) * (-4.0 + 0.044715 * -64.0)))).astype(np.float16).reshape(1)
        ),
    ),
    # tanh(NaN) gave 0
    "tanh NaN": (lambda: tr.tensor(F32([np.nan])).tanh().numpy(), lambda: F32([np.nan])),
    # np.where(c, 1, 2) with two python scalars was refused
    "where of two scalars": (lambda: tr.where(tr.tensor([True, False]), 1, 2.5).numpy(), lambda: F32([1, 2.5])),
    # concat(x, y, y) reused a pipeline compiled for another axis (the axis was not in the kernel key)
    "concat axis in key": (
        lambda: (
            tr.concat([tr.ones((2, 1)), tr.zeros((2, 1))], axis=0).numpy(),
            tr.concat([tr.ones((2, 1)), tr.zeros((2, 1))], axis=1).numpy(),
        ),
        lambda: (
            np.concatenate([np.ones((2, 1)), np.zeros((2, 1))], 0).astype(F32),
            np.concatenate([np.ones((2, 1)), np.zeros((2, 1))], 1).astype(F32),
        ),
    ),
    # x + x in place binds one buffer; the kernel key did not say so and aliased x + y's pipeline
    "in-place x + x": (
        lambda: (
            ((tr.ones(8) * 3) + (tr.ones(8) * 3).contiguous()).numpy().tolist()
            + ((lambda t: t + t)(tr.ones(8) * 3)).numpy().tolist()
        ),
        lambda: [6.0] * 16,
    ),
    # x @ ones((k, 1)): a GEMV with n = 1 over a broadcast B (k stride 0) found no vector width
    "gemv of a broadcast column": (
        lambda: (tr.tensor(F32([[1, 2, 3]])) @ tr.ones((3, 1))).numpy(),
        lambda: F32([[6]]),
    ),
    # 0 // -2.5 gave +0.0 (numpy -0.0): lavapipe folded the q * 0.0 that carried the sign, so
    # 1 // (0 // x) was inf, not -inf (found by the 10,000-program run of session 2)
    "0 // negative is -0": (
        lambda: (1 // (0 // tr.tensor(F32([-2.5, 3.0, -0.5])))).numpy(),
        lambda: F32([-np.inf, np.inf, -np.inf]),
    ),
    # --- found by the first fuzzing runs on the NVIDIA H200 (NUMERICS.md, "Drivers") ---
    # x / x, x // x folded to 1 and x % x to 0, x >= x to true, also for 0, inf and NaN
    "x / x of 0, inf, NaN": (
        lambda: [
            f(tr.tensor(F32([0.0, np.inf, np.nan, 2.0]))).numpy()
            for f in (lambda x: x / x, lambda x: x // x, lambda x: x % x, lambda x: x >= x, lambda x: x != x)
        ],
        lambda: [
            F32([np.nan, np.nan, np.nan, 1]),
            F32([np.nan, np.nan, np.nan, 1]),
            F32([np.nan, np.nan, np.nan, 0]),
            np.array([True, True, False, True]),
            np.array([False, False, True, False]),
        ],
    ),
    # a divisor above 2**126 gave 0 (x * (1 / y) with 1 / y flushed): 3e38 / 3e38 was 0
    "huge divisor": (
        lambda: (tr.tensor(F32([3e38, 1e30])) / tr.tensor(F32([3e38, 3e38]))).numpy(),  # normal quotients
        lambda: F32([1, 1e30 / 3e38]),
    ),
    # f16 x / y, x // y, x % y and sqrt were not correctly rounded: (x + 0) // x gave 0
    "f16 division": (
        lambda: [
            f(tr.tensor(np.float16([3.0, 7.0, -5.0, 0.1]))).numpy()
            for f in (lambda x: (x + 0) // x, lambda x: x % (x * 0.5 + 1), lambda x: abs(x).sqrt())
        ],
        lambda: [
            np.float16([1, 1, 1, 1]),
            (lambda x: x % (x * np.float16(0.5) + np.float16(1)))(np.float16([3.0, 7.0, -5.0, 0.1])),
            np.sqrt(np.abs(np.float16([3.0, 7.0, -5.0, 0.1]))),
        ],
    ),
    # a float16 value kept in registers was not rounded to float16: exp(-17.88) stayed 1.7e-8 (float16
    # says 0) so log gave -17.88, not -inf; exp(12) stayed finite; a GEMV result fed pow unrounded
    "f16 rounding in a fused chain": (
        lambda: [
            tr.tensor(np.float16([-17.88, 1.0])).exp().log().numpy(),
            (tr.tensor(np.float16([12.0, 1.0])).exp() * 0).numpy(),
            (
                (tr.tensor(np.float16([[0.0964, 0.01148, 0.4988]])) @ tr.ones((3, 1), dtype=tr.float16))
                ** F32(1.120348)
            ).numpy(),
        ],
        lambda: [
            np.log(np.exp(np.float16([-17.88, 1.0]))),
            np.exp(np.float16([12.0, 1.0])) * np.float16(0),
            (np.float16([[0.0964, 0.01148, 0.4988]]) @ np.ones((3, 1), np.float16)) ** F32(1.120348),
        ],
    ),
}


@pytest.mark.gpu
def test_f16_rounding_of_register_values_is_exact() -> None:
    # expr.f16_rounded on the bits against numpy's float32 -> float16 cast: normals, ties, the
    # subnormal range, the overflow edge (65504 / 65520), inf and NaN
    rng = np.random.default_rng(0)
    edges = F32([65504, 65519.99, 65520, -65520, 1e5, 2**-14, 2**-24, 2**-25, 3 * 2**-26, 2**-26, 0, -0.0])
    x = np.concatenate(
        [
            edges,
            F32([np.inf, -np.inf, np.nan]),
            (rng.standard_normal(2000) * 10.0 ** rng.integers(-9, 5, 2000)).astype(F32),
        ]
    )
    # (x * 1) keeps the cast in a fused kernel: the float16 value lives in registers before the f32 cast back
    got = (tr.tensor(x) * 1).astype(tr.float16).astype(tr.float32).numpy()
    want = x.astype(np.float16).astype(F32)
    assert np.array_equal(got, want, equal_nan=True), x[~((got == want) | (np.isnan(got) & np.isnan(want)))][:10]


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_fuzz_regression(name: str) -> None:
    got_fn, want_fn = REGRESSIONS[name]
    with np.errstate(all="ignore"):
        got, want = got_fn(), want_fn()
    for g, w in zip(got, want, strict=True) if isinstance(want, list | tuple) else [(got, want)]:
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(
                g.astype(np.float64), w.astype(np.float64), rtol=2e-3 if w.dtype == np.float16 else 1e-6, equal_nan=True
            )
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.gpu
def test_fuzz_regression_interpreter_slices_and_empty_rows() -> None:
    # the interpreter read x[-2:-2:-1] of a 1-element axis as one element (a normalized stop of -1
    # is "before index 0", a python slice reads it as "the last"); softmax of empty rows crashed it;
    # gelu of a 0-d value crashed it
    x = tr.tensor(np.array([True]))
    _graph_stages_agree(x[-2:-2:-1].astype(tr.int32) + 1)
    _graph_stages_agree(tr.zeros((3, 0)).softmax(-1) + 1)
    _graph_stages_agree(tr.tensor(F32(0.5)).gelu() * 2)


@pytest.mark.gpu
def test_fuzz_regression_transformer_ops() -> None:
    # conv1d skipped padded taps, so an infinite weight over padding gave a number, not NaN
    x = tr.tensor(np.float32([[[1.0, 2.0]]]))
    w = tr.tensor(np.float32([[[np.inf, 1.0, 1.0]]]))
    got = tr.nn.conv1d(x, w, padding=1).numpy()
    assert np.isnan(got[0, 0, 0]) and got[0, 0, 1] == np.inf
    # linear of rows with zero features: x.reshape(-1, 0) is ambiguous and raised
    y = tr.nn.linear(tr.zeros((3, 0)), tr.zeros((2, 0)), tr.tensor(np.float32([1, 2]))).numpy()
    np.testing.assert_array_equal(y, np.float32([[1, 2]] * 3))


def test_harness_masks_values_within_their_error_of_zero() -> None:
    # the long run's false alarms: gelu(-9) is -1e-18 in numpy but 0 on the GPU (1 + erf cancels in
    # float32), and an int32 tensor % 0.001 rounds its quotient on the GPU (x / 0.001 near an integer)
    for program in (
        Program(
            [np.array([-4, -9, 0, 3], np.int32)],
            [
                Step("input", (), (("index", 0), ("realized", True))),
                Step("gelu", (Ref(0),)),
                Step("where", (Ref(1), 0, 0.5)),
            ],
            (2,),
        ),
        Program(
            [np.array([5, -5, -2, -9], np.int32)],
            [Step("input", (), (("index", 0), ("realized", True))), Step("mod", (Ref(0), 0.001))],
            (1,),
        ),
    ):
        check_program(program)
