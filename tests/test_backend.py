"""The wgpu backend: every kernel variant compiles, caches work, limits give clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from backend_wgpu.kernel import Workload
from tests.helpers import assert_close

FLOAT_UNARY = [
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "gelu",
    "silu",
    "floor",
    "ceil",
]


def _variant_programs(dtype: tr.DType) -> list[tr.Tensor]:
    """Tensors whose programs cover every kernel and variant for one float dtype."""
    out = []
    for n in (5, 6, 8):  # KernelElement 1, 2, 4
        x = tr.ones((3, n), dtype)
        out += [getattr(x, f)() for f in FLOAT_UNARY]
        out += [-x, x.abs(), x.relu(), x.square(), x.gelu(approximate="tanh")]
        out += [x + x, x - 1, x * x, x / 2, x // 2, x % 2, x**x, tr.maximum(x, 0), tr.minimum(x, 0)]
        out += [x < 1, x <= 1, x > 1, x >= 1, x == 1, x != 1, tr.where(x > 0, x, -x), x.astype(tr.int32)]
        out += [x.T + 1, x[:, ::2] * 2, x.sum(axis=-1), x.max(axis=0), x.argmax(axis=-1), x.softmax(), x.log_softmax()]
        out += [tr.ones((3, n * 100), dtype).sum(axis=-1), tr.ones((3, n * 100), dtype).argmin(axis=-1)]
    out += [tr.ones((9, 7), dtype) @ tr.ones((7, 5), dtype), tr.ones((1, 8), dtype) @ tr.ones((8, 8), dtype)]
    out += [tr.ones((1, 8), dtype) @ tr.ones((8, 8), dtype).T, tr.concat([tr.ones((2, 2), dtype)] * 3, axis=1)]
    return out


def _int_programs() -> list[tr.Tensor]:
    out = []
    for dt in (tr.int32, tr.uint32):
        x = tr.ones((4, 6), dt)
        out += [
            x + x,
            x - 1,
            x * 3,
            x // 2,
            x % 3,
            x**2,
            tr.maximum(x, 2),
            x.sum(axis=1),
            x.max(axis=0),
            x.astype(tr.float32),
        ]
        out += [x > 1, x.argmax(axis=-1), tr.concat([x, x], 0)]
    b = tr.ones((4, 6), tr.int32) > 0
    out += [b & b, b | b, ~b, b.astype(tr.float32), b.sum(), b.max(axis=0), tr.where(b, 1, 2)]
    out += [tr.arange(10), tr.arange(0.5, 3.0, 0.25), tr.tensor(np.ones(4, np.int32)).abs(), -tr.ones(3, tr.int32)]
    return out


@pytest.mark.parametrize("dtype", [tr.float32, tr.float16], ids=["f32", "f16"])
def test_every_float_kernel_variant_compiles(dtype: tr.DType, device) -> None:
    if dtype is tr.float16 and not device.caps.shader_f16:
        pytest.skip("adapter has no shader-f16")
    keys = set()
    for t in _variant_programs(dtype):
        keys.update(d.key for d in tr.compile(t).dispatches)  # compiles the pipelines
    assert len(keys) > 60


def test_every_int_and_bool_kernel_variant_compiles_and_runs() -> None:
    for t in _int_programs():
        t.numpy()


def test_same_structure_compiles_nothing_new(device) -> None:
    def step(v: float) -> tr.Tensor:
        x = tr.tensor(np.full((5, 7), v, np.float32))
        return (x * 3 + 1).softmax(axis=0)

    step(1.0).numpy()
    from tracer.realize import stats

    pipelines, programs = device.stats["pipelines_compiled"], stats["programs_compiled"]
    for v in (2.0, 3.0, 4.0):
        assert_close(step(v).numpy(), np.full((5, 7), 0.2, np.float32))
    assert device.stats["pipelines_compiled"] == pipelines
    assert stats["programs_compiled"] == programs


def test_workload_folds_counts_over_the_limit() -> None:
    assert Workload.for_workgroups(10, (64, 1, 1)).count == (10, 1, 1)
    w = Workload.for_workgroups(70000, (64, 1, 1))
    assert w.count[1] == 2 and w.count[0] * w.count[1] >= 70000 and max(w.count) <= 65535
    big = Workload.for_workgroups(65535 * 65535 + 5, (64, 1, 1))
    assert big.count[2] == 2 and big.count[0] * big.count[1] * big.count[2] >= 65535 * 65535 + 5


def test_folded_dispatch_runs_correctly() -> None:
    rows = 70000  # one workgroup per row: more workgroups than one dimension allows
    x = np.tile(np.array([[0.0, 1.0]], np.float32), (rows, 1))
    x[-1] = [3.0, 0.0]
    y = tr.tensor(x).softmax()
    d = tr.compile(y).dispatches[0]
    assert d.workgroup_count[1] > 1
    got = y.numpy()
    assert_close(got[0], np.exp([0, 1]) / np.exp([0, 1]).sum())
    assert_close(got[-1], np.exp([3, 0]) / np.exp([3, 0]).sum())


def test_tensor_over_the_binding_limit_fails_at_the_op(device) -> None:
    n = device.caps.max_storage_binding // 4 + 1
    big = tr.zeros(n)  # a broadcast view of one number: no memory yet
    with pytest.raises(tr.DeviceError, match="max storage binding size"):
        big + 1
    assert_close((tr.ones(3) + 1).numpy(), np.full(3, 2.0))  # the device still works


def test_kernel_compile_error_carries_key_and_wgsl(monkeypatch) -> None:
    from backend_wgpu.kernels.elementwise.elementwise import ElementwiseKernel

    real = ElementwiseKernel.render

    def broken(self, b) -> None:  # noqa: ANN001
        real(self, b)
        b.line("let broken = undefined_name;")

    monkeypatch.setattr(ElementwiseKernel, "render", broken)
    with pytest.raises(tr.KernelCompileError) as info:
        (tr.ones(7) * 7.25).numpy()
    assert info.value.key.startswith("elementwise[mul") and "undefined_name" in info.value.wgsl
    monkeypatch.undo()
    assert_close((tr.ones(7) * 7.25).numpy(), np.full(7, 7.25))


def test_adapter_choice_errors(monkeypatch) -> None:
    from backend_wgpu.device import _choose_adapter

    monkeypatch.setenv("WGJIT_ADAPTER", "no-such-adapter")
    with pytest.raises(tr.DeviceError, match="matches no adapter"):
        _choose_adapter()
    monkeypatch.setenv("WGJIT_ADAPTER", "99")
    with pytest.raises(tr.DeviceError, match="only"):
        _choose_adapter()


def test_one_submission_per_realization(device) -> None:
    x = tr.tensor(np.ones((16, 16), np.float32))
    y = ((x @ x).exp() + 1).sum(axis=0)
    submits = device.stats["submits"]
    y.numpy()
    assert device.stats["submits"] == submits + 1


def test_long_runs_are_submitted_in_chunks_with_the_same_values(device, monkeypatch) -> None:
    """A run of n dispatches goes out as ceil(n / SUBMIT_CHUNK) command buffers, in order."""
    import backend_wgpu.program as program_module

    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 8), dtype=np.float32) / 3
    w = tr.tensor(a)

    @tr.jit
    def chain(x: tr.Tensor) -> tr.Tensor:
        for _ in range(7):
            x = (x @ w).softmax(-1)
        return x

    def reference(x: np.ndarray) -> np.ndarray:
        for _ in range(7):
            z = x @ a
            z = np.exp(z - z.max(-1, keepdims=True))
            x = z / z.sum(-1, keepdims=True)
        return x

    x0 = rng.standard_normal((4, 8), dtype=np.float32)
    x = tr.tensor(x0)
    chain(x).numpy()  # traced and compiled
    before = device.stats["dispatches"]
    chain(x).numpy()
    dispatches = device.stats["dispatches"] - before
    assert dispatches >= 7
    monkeypatch.setattr(
        program_module, "SUBMIT_GROWTH", 1.0
    )  # equal chunks (tests/test_replay_fast_path.py grows them)
    monkeypatch.setattr(program_module, "PRERECORD", False)  # runs encoded as they come (tests/test_prerecord.py)
    for trace in chain.traces.values():
        trace.program.trim()  # drops a run recorded before
    for chunk in (1, 3, 0):
        monkeypatch.setattr(program_module, "SUBMIT_CHUNK", chunk)
        submits = device.stats["submits"]
        got = chain(x).numpy()
        expected = 1 if chunk == 0 else -(-dispatches // chunk)
        assert device.stats["submits"] == submits + expected
        assert_close(got, reference(x0), rtol=1e-4, atol=1e-5)


def test_no_adapter_gives_a_device_error_saying_how_to_get_one(monkeypatch) -> None:
    import wgpu

    from backend_wgpu.device import _choose_adapter

    monkeypatch.setattr(wgpu.gpu, "enumerate_adapters_sync", lambda: [])
    with pytest.raises(tr.DeviceError, match="mesa-vulkan-drivers"):
        _choose_adapter()


def test_least_subgroup_size_knows_nvidia_warps(monkeypatch: pytest.MonkeyPatch) -> None:
    """wgpu reports 4 lanes for every Vulkan adapter; NVIDIA's Vulkan subgroups are always 32 lanes."""
    from backend_wgpu.device import least_subgroup_size

    nvidia = {"vendor_id": 0x10DE, "backend_type": "Vulkan", "stackgroup_min_size": 4}
    assert least_subgroup_size(nvidia) == 32
    assert least_subgroup_size({**nvidia, "backend_type": "D3D12"}) == 4  # not known there: the report stands
    assert least_subgroup_size({"vendor_id": 0x1002, "backend_type": "Vulkan", "subgroup_min_size": 32}) == 32
    assert least_subgroup_size({"vendor_id": 65541, "backend_type": "Vulkan", "stackgroup_min_size": 4}) == 4
    assert least_subgroup_size({}) == 0
    monkeypatch.setenv("WGJIT_SUBGROUP_SIZE", "4")
    assert least_subgroup_size(nvidia) == 4  # an A/B of the paths that rely on 32 lanes
