"""A catalogue of wrong uses: each raises the documented error at the call that caused it,
with a message naming the op, the shapes and what to do, and leaves everything else working.

Every case runs between two live tensors (a realized one and a pending one made before the
wrong call) and then checks that both still compute, as does a fresh graph. The errors are
the ir/errors.py hierarchy (re-exported by `tracer`): ShapeError (also a ValueError),
DTypeError (a TypeError), IndexOutOfRangeError (a ShapeError and an IndexError),
DeviceError, JitError, all WgjitError.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import wgpu

import tracer as tr
from backend_wgpu import get_device

pytestmark = pytest.mark.gpu


@dataclass(frozen=True)
class Case:
    name: str
    call: Callable[[], Any]  # the wrong use; must raise before anything runs
    error: type[Exception]
    words: tuple[str, ...]  # what the message must say: the op, the shapes, a hint of what to do


def _over_binding_limit() -> int:
    """Elements of a float32 tensor one element over the device's max storage binding."""
    return get_device().caps.max_storage_binding // 4 + 1


def ones(*shape: int, dtype: Any = tr.float32) -> tr.Tensor:
    return tr.ones(shape, dtype)


CASES = [
    # broadcasting and axes
    Case(
        "broadcast",
        lambda: ones(2, 3) + ones(4),
        tr.ShapeError,
        ("add", "(2, 3)", "(4,)", "broadcast", "reshape or unsqueeze"),
    ),
    Case(
        "where-broadcast",
        lambda: tr.where(ones(3, dtype=tr.bool), ones(2), 0.0),
        tr.ShapeError,
        ("where", "(3,)", "(2,)", "must match or be 1"),
    ),
    Case(
        "axis-out-of-range",
        lambda: ones(2, 3).sum(axis=2),
        tr.ShapeError,
        ("sum", "axis 2", "(2, 3)", "valid axes are -2..1"),
    ),
    Case(
        "negative-axis-out-of-range",
        lambda: ones(2, 3).softmax(axis=-3),
        tr.ShapeError,
        ("softmax", "-3", "(2, 3)", "valid axes"),
    ),
    Case("repeated-axis", lambda: ones(2, 3).max(axis=(0, 0)), tr.ShapeError, ("max", "repeated", "(2, 3)", "once")),
    Case("float-axis", lambda: ones(2, 3).sum(axis=1.5), tr.ShapeError, ("sum", "1.5", "(2, 3)", "int")),
    Case(
        "argmax-tuple-axis",
        lambda: ones(2, 3).argmax(axis=(0, 1)),
        tr.ShapeError,
        ("argmax", "(0, 1)", "(2, 3)", "int"),
    ),
    Case(
        "transpose-axis",
        lambda: ones(2, 3).transpose(0, 2),
        tr.ShapeError,
        ("transpose", "axis 2", "(2, 3)", "valid axes"),
    ),
    Case(
        "unsqueeze-axis",
        lambda: ones(2, 3).unsqueeze(4),
        tr.ShapeError,
        ("unsqueeze", "axis 4", "(2, 3)", "valid axes"),
    ),
    Case("flatten-order", lambda: ones(2, 3, 4).flatten(2, 0), tr.ShapeError, ("flatten", "(2, 3, 4)", "swap")),
    # movement
    Case(
        "reshape-size", lambda: ones(2, 3).reshape(4, 2), tr.ShapeError, ("reshape", "(2, 3)", "(4, 2)", "must stay 6")
    ),
    Case(
        "reshape-two-minus-one",
        lambda: ones(2, 3).reshape(-1, -1),
        tr.ShapeError,
        ("reshape", "(-1, -1)", "(2, 3)", "one -1"),
    ),
    Case(
        "reshape-negative", lambda: ones(2, 3).reshape(-2, -3), tr.ShapeError, ("reshape", "(-2, -3)", "(2, 3)", ">= 0")
    ),
    Case(
        "reshape-no-fit",
        lambda: ones(2, 3).reshape(4, -1),
        tr.ShapeError,
        ("reshape", "(2, 3)", "(4, -1)", "must be 6"),
    ),
    Case("reshape-float", lambda: ones(2, 3).reshape(2.0, 3), tr.ShapeError, ("2.0", "ints")),
    Case(
        "permute",
        lambda: ones(2, 3).permute(0, 0),
        tr.ShapeError,
        ("permute", "(0, 0)", "(2, 3)", "each of the 2 axes"),
    ),
    Case("expand", lambda: ones(2, 3).expand(4, 3), tr.ShapeError, ("expand", "(2, 3)", "(4, 3)", "only size-1 dims")),
    Case("expand-fewer-dims", lambda: ones(2, 3).expand(3), tr.ShapeError, ("expand", "(2, 3)", "(3,)", "never drops")),
    Case("squeeze", lambda: ones(2, 3).squeeze(0), tr.ShapeError, ("squeeze", "(2, 3)", "size-1")),
    # matmul
    Case(
        "matmul-inner",
        lambda: ones(2, 3) @ ones(4, 5),
        tr.ShapeError,
        ("matmul", "(2, 3)", "(4, 5)", "inner dimensions 3 and 4", "transpose"),
    ),
    Case(
        "matmul-batch",
        lambda: ones(2, 3, 4) @ ones(5, 4, 2),
        tr.ShapeError,
        ("matmul", "(2, 3, 4)", "(5, 4, 2)", "batch dims", "must match or be 1"),
    ),
    Case(
        "matmul-vector-inner", lambda: ones(3) @ ones(4), tr.ShapeError, ("matmul", "(3,)", "(4,)", "inner dimensions")
    ),
    Case("matmul-0d", lambda: ones() @ ones(3), tr.ShapeError, ("matmul", "()", "(3,)", "at least 1 dimension")),
    Case(
        "matmul-int",
        lambda: ones(2, 3, dtype=tr.int32) @ ones(3, 2, dtype=tr.int32),
        tr.DTypeError,
        ("matmul", "int32", "astype"),
    ),
    # joins
    Case(
        "concat-shapes",
        lambda: tr.concat([ones(2, 3), ones(2, 4)], axis=0),
        tr.ShapeError,
        ("concat", "(2, 3)", "(2, 4)", "must match"),
    ),
    Case(
        "concat-ndim",
        lambda: tr.concat([ones(2, 3), ones(2, 3, 1)], axis=0),
        tr.ShapeError,
        ("concat", "(2, 3)", "(2, 3, 1)"),
    ),
    Case(
        "concat-axis",
        lambda: tr.concat([ones(2, 3), ones(2, 3)], axis=2),
        tr.ShapeError,
        ("concat", "axis 2", "(2, 3)", "valid axes"),
    ),
    Case("concat-empty", lambda: tr.concat([]), tr.ShapeError, ("concat", "at least one", "empty")),
    Case("concat-0d", lambda: tr.concat([ones(), ones()]), tr.ShapeError, ("concat", "()", "tr.stack")),
    Case(
        "stack-shapes",
        lambda: tr.stack([ones(2, 3), ones(3, 2)]),
        tr.ShapeError,
        ("stack", "(2, 3)", "(3, 2)", "tr.concat"),
    ),
    # indexing
    Case("index-range", lambda: ones(3)[5], tr.IndexOutOfRangeError, ("index", "5", "(3,)", "valid indices are -3..2")),
    Case(
        "index-negative-range", lambda: ones(3, 4)[:, -5], tr.IndexOutOfRangeError, ("index", "-5", "(3, 4)", "-4..3")
    ),
    Case("index-too-many", lambda: ones(3)[0, 0], tr.IndexOutOfRangeError, ("index", "too many", "(3,)", "at most 1")),
    Case("index-float", lambda: ones(3)[1.5], tr.DTypeError, ("index", "1.5", "(3,)", "use ints, slices")),
    Case("index-bool", lambda: ones(3)[True], tr.DTypeError, ("index", "True", "(3,)", "use ints")),
    Case("index-two-ellipsis", lambda: ones(3)[..., ...], tr.ShapeError, ("index", "Ellipsis", "(3,)", "at most once")),
    Case("index-float-tensor", lambda: ones(3)[tr.tensor([0.0])], tr.DTypeError, ("index", "float32", "(1,)")),
    Case("index-out-of-range-array", lambda: ones(3)[[0, 3]], tr.IndexOutOfRangeError, ("index", "3", "(3,)")),
    Case("index-slice-step-0", lambda: ones(3)[::0], tr.ShapeError, ("index", "(3,)", "zero")),
    # dtypes and data
    Case(
        "complex-data",
        lambda: tr.tensor(np.ones(3, np.complex64)),
        tr.DTypeError,
        ("tensor", "complex64", "not supported"),
    ),
    Case(
        "float64-out-of-range",
        lambda: tr.tensor(np.array([1.0, 1e300])),
        tr.DTypeError,
        ("tensor", "1e+300", "float32 range"),
    ),
    Case("int64-out-of-range", lambda: tr.tensor(np.array([2**40])), tr.DTypeError, ("tensor", "int64", "int32")),
    Case(
        "python-int-out-of-range", lambda: ones(3, dtype=tr.int32) + 2**40, tr.DTypeError, ("add", str(2**40), "int32")
    ),
    Case("string-data", lambda: tr.tensor(["a", "b"]), tr.DTypeError, ("tensor", "string")),
    Case("ragged-data", lambda: tr.tensor([[1, 2], [3]]), tr.DTypeError, ("tensor", "ragged")),
    Case("float64-dtype", lambda: ones(3).astype("float64"), tr.DTypeError, ("float64", "use float32")),
    Case("complex-dtype", lambda: tr.full((2,), 1.0, np.complex64), tr.DTypeError, ("complex64", "use float32")),
    Case(
        "int32-with-uint32",
        lambda: ones(3, dtype=tr.int32) + ones(3, dtype=tr.uint32),
        tr.DTypeError,
        ("add", "int32", "uint32", "astype"),
    ),
    Case(
        "bool-arithmetic",
        lambda: ones(3, dtype=tr.bool) + ones(3, dtype=tr.bool),
        tr.DTypeError,
        ("add", "bool", "astype"),
    ),
    Case("invert-float", lambda: ~ones(3), tr.DTypeError, ("~", "float32", "bool")),
    Case("logical-and-float", lambda: ones(3) & ones(3), tr.DTypeError, ("and", "float32", "bool")),
    Case(
        "int-negative-power",
        lambda: ones(3, dtype=tr.int32) ** -1,
        tr.DTypeError,
        ("pow", "int32", "(3,)", "negative", "astype"),
    ),
    Case("tensor-plus-string", lambda: ones(3) + "a", tr.DTypeError, ("add", "str")),
    Case("tensor-plus-none", lambda: ones(3) + None, tr.DTypeError, ("add", "NoneType")),
    # factories and values
    Case("negative-dims", lambda: tr.zeros((-1, 2)), tr.ShapeError, ("negative", "(-1, 2)")),
    Case("float-dims", lambda: tr.zeros((2.5, 2)), tr.ShapeError, ("(2.5, 2)", "ints")),
    Case("arange-step-0", lambda: tr.arange(0, 5, 0), tr.ShapeError, ("arange", "step")),
    Case("max-of-empty", lambda: tr.zeros((2, 0)).max(axis=1), tr.ShapeError, ("max", "(2, 0)", "non-empty")),
    Case("argmax-of-empty", lambda: tr.zeros((0,)).argmax(), tr.ShapeError, ("argmax", "(0,)", "non-empty")),
    Case("item-of-many", lambda: ones(3).item(), tr.ShapeError, ("item", "(3,)", "numpy()")),
    Case("int-of-many", lambda: int(ones(3)), tr.ShapeError, ("item", "(3,)")),
    # values that do not fit their dtype are refused, never wrapped (issue 16 item 5; NUMERICS.md)
    Case("full-int32-overflow", lambda: tr.full((3,), 2**31), tr.DTypeError, ("full", "2147483648", "int32")),
    Case("full-far-overflow", lambda: tr.full((3,), 2**40), tr.DTypeError, ("full", "1099511627776", "int32")),
    Case("negative-into-uint32", lambda: tr.tensor([-1], dtype=tr.uint32), tr.DTypeError, ("tensor", "-1", "uint32")),
    Case(
        "arange-past-int32", lambda: tr.arange(2**31 - 2, 2**31 + 2), tr.DTypeError, ("arange", "2147483649", "int32")
    ),
    Case(
        "nan-into-int32",
        lambda: tr.tensor(np.array([3e9, np.nan]), dtype=tr.int32),
        tr.DTypeError,
        ("tensor", "nan", "int32", "astype(tr.int32) saturates"),
    ),
    Case(
        "float-beyond-int32",
        lambda: tr.tensor(np.array([3e9]), dtype=tr.int32),
        tr.DTypeError,
        ("tensor", "3000000000", "int32", "astype"),
    ),
    Case(
        "float-beyond-float16",
        lambda: tr.tensor(np.array([1e5], np.float32), dtype=tr.float16),
        tr.DTypeError,
        ("tensor", "100000", "float16 range"),
    ),
    # unclear errors made clear (issue 16 item 9)
    Case(
        "over-2**32-elements",
        lambda: tr.ones((65536, 65537)).sum(),
        tr.ShapeError,
        ("ones", "(65536, 65537)", "4295032832", "2**32 - 1"),
    ),
    Case("sum-0d-axis-1", lambda: tr.tensor(3.0).sum(axis=1), tr.ShapeError, ("sum", "axis 1", "shape ()", "0 or -1")),
    Case(
        "gather-0d",
        lambda: tr.gather(tr.tensor(3.0), tr.tensor(np.int32(0)), 0),
        tr.ShapeError,
        ("gather", "shape ()", "at least one dimension"),
    ),
    Case("arange-nan", lambda: tr.arange(float("nan")), tr.ShapeError, ("arange", "stop is nan", "finite")),
    Case("arange-inf", lambda: tr.arange(float("inf")), tr.ShapeError, ("arange", "stop is inf", "finite")),
    Case("arange-str", lambda: tr.arange("3"), tr.DTypeError, ("arange", "stop", "'3'")),
    Case(
        "layer-norm-eps-str",
        lambda: tr.nn.layer_norm(ones(2, 3), eps="1e-5"),
        tr.DTypeError,
        ("layer_norm", "eps", "'1e-5'", "(2, 3)"),
    ),
    # mutation (tracer/mutation.py)
    Case("iadd-same-kind", lambda: ones(3, dtype=tr.int32).__iadd__(1.5), tr.DTypeError, ("+=", "int32", "same_kind")),
    Case("iadd-grows", lambda: ones(3).__iadd__(ones(2, 3)), tr.ShapeError, ("+=", "(2, 3)", "(3,)")),
    Case(
        "setitem-value-overflow",
        lambda: ones(3, dtype=tr.int32).__setitem__(0, 2**40),
        tr.DTypeError,
        ("setitem", "int32"),
    ),
    Case(
        "setitem-broadcast",
        lambda: ones(3, 4).__setitem__(0, np.ones(3)),
        tr.ShapeError,
        ("setitem", "(3,)", "(4,)", "(3, 4)"),
    ),
    Case(
        "setitem-broadcast-view",
        lambda: ones(3).expand(2, 3).__setitem__(0, 1.0),
        tr.ShapeError,
        ("setitem", "broadcast", "(2, 3)", "copy()"),
    ),
    Case(
        "setitem-mask-shape",
        lambda: ones(3, 4).__setitem__(np.ones(2, bool), 0.0),
        tr.IndexOutOfRangeError,
        ("setitem", "mask", "(2,)", "(3, 4)"),
    ),
    Case("index-bool-scalar", lambda: ones(3)[True], tr.DTypeError, ("index", "True")),
    Case(
        "index-mask-shape", lambda: ones(3, 4)[np.ones(4, bool)], tr.IndexOutOfRangeError, ("index", "(4,)", "(3, 4)")
    ),
    Case("xor-floats", lambda: ones(3) ^ ones(3), tr.DTypeError, ("xor", "float32", "(3,)")),
    # device limits: raised where the tensor is made, before anything is allocated
    Case(
        "over-binding-limit",  # one float32 more than this device binds (128 MiB on lavapipe, 2 GiB on an H200)
        lambda: tr.zeros(_over_binding_limit()) + 1,
        tr.DeviceError,
        ("add", "a tensor of shape (", "float32", "max storage binding", "smaller tensors"),
    ),
]


@pytest.fixture(scope="module")
def realized() -> tuple[tr.Tensor, np.ndarray]:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    return tr.tensor(data).realize(), data


def assert_still_works(realized: tuple[tr.Tensor, np.ndarray], pending: tr.Tensor) -> None:
    """The device, the tensors made before the error and new graphs all still compute."""
    a, data = realized
    np.testing.assert_array_equal(a.numpy(), data)
    np.testing.assert_allclose(pending.numpy(), (data * 2 + 1).sum(axis=1))
    fresh = (tr.tensor(data) @ tr.tensor(data.T)).softmax(-1).numpy()
    e = np.exp(data @ data.T - (data @ data.T).max(-1, keepdims=True))
    np.testing.assert_allclose(fresh, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, realized: tuple[tr.Tensor, np.ndarray]) -> None:
    a, _ = realized
    pending = (a * 2 + 1).sum(axis=1)  # traced before the wrong call, computed after it
    buffers = wgpu.diagnostics.object_counts.get_dict()["Buffer"]["count"]
    with pytest.raises(case.error) as info:
        case.call()
    assert isinstance(info.value, tr.WgjitError), f"{type(info.value).__name__} is outside wgjit's error hierarchy"
    message = str(info.value)
    for word in case.words:
        assert word in message, f"the message should mention {word!r}: {message}"
    # raised at the call, before anything ran: no GPU buffer was made for the wrong use
    assert wgpu.diagnostics.object_counts.get_dict()["Buffer"]["count"] <= buffers
    assert_still_works(realized, pending)


def test_catalogue_is_complete() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


def test_error_types_are_also_the_builtin_ones() -> None:
    """numpy-style code that catches ValueError/TypeError/IndexError keeps working."""
    assert issubclass(tr.ShapeError, ValueError)
    assert issubclass(tr.DTypeError, TypeError)
    assert issubclass(tr.IndexOutOfRangeError, IndexError) and issubclass(tr.IndexOutOfRangeError, tr.ShapeError)
    assert issubclass(tr.DeviceError, RuntimeError) and issubclass(tr.JitError, RuntimeError)


# --- wrong uses that need a particular setting ------------------------------------------------


def test_float16_without_shader_f16(monkeypatch: pytest.MonkeyPatch, realized: tuple[tr.Tensor, np.ndarray]) -> None:
    dev = get_device()
    monkeypatch.setattr(dev, "caps", dataclasses.replace(dev.caps, shader_f16=False))
    a, _ = realized
    pending = (a * 2 + 1).sum(axis=1)
    for make in (
        lambda: a.astype(tr.float16),
        lambda: tr.tensor(np.ones(4, np.float16)),
        lambda: tr.ones((2, 2), tr.float16),
        lambda: tr.randn(3, seed=0, dtype=tr.float16),
    ):
        with pytest.raises(tr.DTypeError, match="float16.*shader-f16.*use float32"):
            make()
    with pytest.raises(tr.DTypeError, match=r"cast: a float16 tensor of shape \(3, 4\)"):
        a.astype(tr.float16)
    monkeypatch.undo()
    assert_still_works(realized, pending)


def test_jit_host_read_of_an_argument_is_refused(realized: tuple[tr.Tensor, np.ndarray]) -> None:
    @tr.jit
    def total(x: tr.Tensor) -> float:
        return float((x * 2).sum())  # a host read: no replay could repeat it

    a, data = realized
    pending = (a * 2 + 1).sum(axis=1)
    with pytest.raises(tr.JitError, match=r"jit total: .*reads a tensor computed from its arguments.*on the host"):
        total(a)
    with pytest.raises(tr.JitError, match=r"jit total: "):  # every call: nothing stale is ever returned
        total(a)
    assert_still_works(realized, pending)


def test_jit_rebound_global_is_seen(realized: tuple[tr.Tensor, np.ndarray]) -> None:
    state = {"w": tr.tensor(np.ones((4, 2), np.float32))}

    @tr.jit
    def project(x: tr.Tensor) -> tr.Tensor:
        return x @ state["w"]

    a, data = realized
    np.testing.assert_allclose(project(a).numpy(), data @ np.ones((4, 2)))
    state["w"] = tr.tensor(np.full((4, 2), 2, np.float32))  # the old weight is gone: the trace's guard fails
    np.testing.assert_allclose(project(a).numpy(), data @ np.full((4, 2), 2))
    assert project.trace_count == 2


def test_jit_pure_function_replays_without_error(realized: tuple[tr.Tensor, np.ndarray]) -> None:
    """The check must not fire for a function that only creates the same constants again."""

    @tr.jit
    def f(x: tr.Tensor) -> tr.Tensor:
        table = tr.tensor(np.arange(4, dtype=np.float32))  # new host data each call, same values
        return (x + table) * 0.5

    a, data = realized
    for _ in range(3):
        np.testing.assert_allclose(f(a).numpy(), (data + np.arange(4)) * 0.5)
    assert f.trace_count == 1


def test_a_bad_number_in_a_knob_names_the_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    """WGJIT_* knobs that hold numbers: unset or empty gives the default, a number is read, anything else
    raises SettingError naming the variable and its value (at import, for the module-level ones)."""
    import subprocess
    import sys

    from ir.settings import env_float, env_int

    monkeypatch.delenv("WGJIT_TEST_KNOB", raising=False)
    assert env_int("WGJIT_TEST_KNOB", 7) == 7 and env_float("WGJIT_TEST_KNOB", 0.5) == 0.5
    monkeypatch.setenv("WGJIT_TEST_KNOB", " 12 ")
    assert env_int("WGJIT_TEST_KNOB", 7) == 12 and env_float("WGJIT_TEST_KNOB", 0.5) == 12.0
    monkeypatch.setenv("WGJIT_TEST_KNOB", "")
    assert env_int("WGJIT_TEST_KNOB", 7) == 7
    monkeypatch.setenv("WGJIT_TEST_KNOB", "lots")
    with pytest.raises(tr.SettingError, match=r"WGJIT_TEST_KNOB='lots': expected an integer"):
        env_int("WGJIT_TEST_KNOB", 7)
    with pytest.raises(ValueError, match=r"WGJIT_TEST_KNOB='lots': expected a number"):
        env_float("WGJIT_TEST_KNOB", 0.5)
    env = {**os.environ, "WGJIT_SUBMIT_CHUNK": "sixteen"}
    run = subprocess.run([sys.executable, "-c", "import tracer"], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "WGJIT_SUBMIT_CHUNK='sixteen': expected an integer" in run.stderr
