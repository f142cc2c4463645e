"""Every op of the op table (ir/optable) is covered everywhere it must be.

For each elementwise op: a reference the interpreter evaluates, WGSL for every dtype family it
computes on (run on the GPU against the interpreter, for every dtype of those families), a line
in the fuzzer's op table (tests/strategies.py), and a public spelling that builds exactly this
op with the dtype its record's rule says. Every other op has a reference too.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from ir.interpret import interpret
from ir.ops import ELEMENTWISE, Op
from ir.optable.record import FAMILIES
from tests.helpers import assert_close
from tests.strategies import OPS as FUZZ_OPS
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu

ELEMENTWISE_OPS = sorted(ELEMENTWISE, key=lambda op: op.value)
DTYPES = {"float": (tr.float32, tr.float16), "int": (tr.int32, tr.uint32), "bool": (tr.bool,)}
# the dtypes ops compute in (quantized weight formats are read by three ops only: tests/test_quant.py)
PLAIN = [d for d in tr.DType if not d.is_quantized]
FUZZ_NAME = {Op.DIV: "truediv", Op.COPY: "contiguous"}  # the fuzzer names ops as users write them

# operands for each dtype: moderate values, zeros, signs, divisors of every sign (0 too for ints)
VALUES = {
    "float": (
        [-2.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 3.5],
        [1.5, -2.0, 0.5, 3.0, -0.75, 2.0, 1.0, -1.5, 0.5],
        [0.5, 1.0, -3.0, 2.0, 0.0, -1.0, 4.0, 0.75, -2.0],
    ),
    "int32": ([-3, -2, -1, 0, 1, 2, 3, 4, 7], [2, -3, 1, 3, -1, 2, 0, 3, 2], [5, 0, -4, 1, 2, -1, 6, 3, -2]),
    "uint32": ([0, 1, 2, 3, 4, 5, 6, 7, 9], [2, 3, 1, 3, 1, 2, 0, 3, 2], [5, 0, 4, 1, 2, 1, 6, 3, 2]),
    "bool": ([True, False, True, False, True, True, False, False, True],) * 2
    + ([False, False, True, True, False, True, True, False, False],),
}


def operands(dtype: tr.DType) -> list[np.ndarray]:
    values = VALUES["float" if dtype.is_float else dtype.value]
    return [np.array(v, dtype=dtype.np) for v in values]


def public(op: Op, *xs: tr.Tensor) -> tr.Tensor:
    """The op as a user writes it (its record's `public` spelling over x, y, z)."""
    names = dict(zip("xyz", xs)) | {"tr": tr}
    return eval(op.opdef.public, names)  # the spellings come from the op table


def gpu_and_interpreter(y: tr.Tensor) -> tuple[np.ndarray, np.ndarray]:
    built = build_graph([y._lazy])
    inputs = [tr.Tensor(lz).numpy() for lz in built.inputs]
    return y.numpy(), interpret(built.graph, inputs)[0]


def needs(dtype: tr.DType) -> None:
    if dtype is tr.float16 and not get_device().caps.shader_f16:
        pytest.skip(f"the adapter ({get_device().caps.name}) lacks shader-f16")


def test_every_op_has_a_reference() -> None:
    # INPUT is read by ir.interpret itself, FUSED evaluated through the nodes it holds
    missing = [op.value for op in Op if op not in (Op.INPUT, Op.FUSED) and not (op.opdef.numpy or op.opdef.evaluate)]
    assert not missing, f"ops without a reference (OpDef.numpy or OpDef.evaluate): {missing}"


@pytest.mark.parametrize("op", ELEMENTWISE_OPS, ids=lambda op: op.value)
def test_elementwise_op_has_wgsl_for_each_family_it_takes(op: Op) -> None:
    if op is Op.CAST:  # rendered by backend_wgpu/kernels/fused.py (it needs both dtypes); run below
        return
    missing = [f for f in FAMILIES if f in op.opdef.dtypes.families and op.opdef.wgsl(f) is None]
    assert not missing, f"{op.value}: no WGSL for {missing} operands (OpDef.wgsl_{missing[0]})"
    extra = [f for f in FAMILIES if f not in op.opdef.dtypes.families and op.opdef.wgsl(f) is not None]
    assert not extra, f"{op.value}: WGSL for {extra} operands, which its dtype rule never gives it"


@pytest.mark.parametrize("op", ELEMENTWISE_OPS, ids=lambda op: op.value)
def test_elementwise_op_is_in_the_fuzzer(op: Op) -> None:
    name = FUZZ_NAME.get(op, op.value)
    assert name in FUZZ_OPS, f"{op.value}: add an OpSpec({name!r}, ...) line to OPS in tests/strategies.py"


def test_method_ops_are_tensor_methods_and_tr_functions() -> None:
    x = tr.tensor(np.array([0.5, 2.0], np.float32))
    for op in (op for op in ELEMENTWISE_OPS if op.opdef.method):
        assert op.value in tr.__all__, op.value
        assert getattr(x, op.value)()._lazy.op is op, f"x.{op.value}()"
        assert getattr(tr, op.value)(x)._lazy.op is op, f"tr.{op.value}(x)"


@pytest.mark.parametrize("dtype", PLAIN, ids=lambda d: d.value)
@pytest.mark.parametrize("op", [op for op in ELEMENTWISE_OPS if op is not Op.CAST], ids=lambda op: op.value)
def test_public_spelling_builds_the_op_in_its_rule_dtype(op: Op, dtype: tr.DType) -> None:
    rule = op.opdef.dtypes
    xs = [tr.tensor(a) for a in operands(dtype)][: op.opdef.arity]
    if dtype.family not in rule.families and not rule.float_only:
        try:
            y = public(op, *xs)
        except tr.DTypeError as e:
            assert dtype.value in str(e), f"{op.opdef.public} on {dtype.value}: the error does not name the dtype"
            return
        # floor of an int: x's value, as a new tensor (numpy's floor returns a new array)
        assert y._lazy is xs[0]._lazy, f"{op.opdef.public} on {dtype.value}: neither refused nor x's value"
        return
    y = public(op, *xs)
    assert y._lazy.op is op, f"{op.opdef.public} built {y._lazy.op.value}, not {op.value}"
    computed = dtype if dtype.family in rule.families else tr.float32
    assert y.dtype is rule.result_dtype(computed)


ELEMENTWISE_CASES = [
    (op, dtype)
    for op in ELEMENTWISE_OPS
    if op is not Op.CAST
    for family in FAMILIES
    if family in op.opdef.dtypes.families
    for dtype in DTYPES[family]
]


@pytest.mark.parametrize(("op", "dtype"), ELEMENTWISE_CASES, ids=lambda v: getattr(v, "value", None))
def test_elementwise_op_runs_on_the_gpu_as_the_interpreter_says(op: Op, dtype: tr.DType) -> None:
    needs(dtype)
    y = public(op, *[tr.tensor(a) for a in operands(dtype)][: op.opdef.arity])
    assert y._lazy.op is op
    got, want = gpu_and_interpreter(y)
    assert got.dtype == want.dtype
    tol = {tr.float32: 1e-5, tr.float16: 2e-3}.get(y.dtype, 0)
    with np.errstate(invalid="ignore"):
        assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize(("src", "dst"), [(a, b) for a in PLAIN for b in PLAIN if a is not b], ids=lambda d: d.value)
def test_cast_runs_on_the_gpu_as_the_interpreter_says(src: tr.DType, dst: tr.DType) -> None:
    needs(src)
    needs(dst)
    y = tr.tensor(operands(src)[0]).astype(dst)
    assert y._lazy.op is Op.CAST
    got, want = gpu_and_interpreter(y)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
