"""Large read-backs lent without a copy (backend_wgpu.device.LentRead): values, lifetimes, reuse, budget."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import backend_wgpu.device as device_module
import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.device import LEND_MIN_BYTES, LentRead, staging_class

ROWS = LEND_MIN_BYTES // 4 // 256 * 2  # (ROWS, 256) float32: 2 MiB, past the lending threshold


@pytest.fixture
def big(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((ROWS, 256)).astype(np.float32)


def lent(a: np.ndarray) -> bool:
    return isinstance(a.base, LentRead)


@pytest.fixture(autouse=True)
def _lending_on(monkeypatch: pytest.MonkeyPatch) -> None:
    if device_module._DEVICE_POLL is None:
        pytest.skip("lending needs wgpu-native's mapped-range calls")
    monkeypatch.setattr(device_module, "LEND_READ_BYTES", 256 << 20)


def test_a_large_read_is_lent_with_the_right_values(big: np.ndarray) -> None:
    x = tr.tensor(big)
    a = (x * 2 + 1).numpy()
    assert lent(a) and a.shape == big.shape and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    np.testing.assert_allclose(a, big * 2 + 1, rtol=1e-6, atol=1e-6)
    small = (x[:4] + 1).numpy()  # under the threshold: a plain copy
    assert not lent(small) and small.flags.owndata
    np.testing.assert_allclose(small, big[:4] + 1, rtol=1e-6)


def test_a_view_keeps_the_staging_buffer_and_its_death_returns_it(big: np.ndarray) -> None:
    dev = get_device()
    x = tr.tensor(big)
    a = (x - 3).numpy()
    staging = a.base.staging
    view = a[5:9, ::3].T
    del a
    gc.collect()
    assert staging not in dev._returned  # the view still reads it
    np.testing.assert_allclose(view, (big - 3)[5:9, ::3].T, rtol=1e-6)
    del view
    gc.collect()
    b = (x + 5).numpy()  # the next read takes the returned buffer back, unmapped, and reuses it
    assert not dev._returned and b.base.staging is staging
    np.testing.assert_allclose(b, big + 5, rtol=1e-6)


def test_arrays_kept_alive_never_share_a_buffer(big: np.ndarray) -> None:
    x = tr.tensor(big)
    kept = [(x + float(i)).numpy() for i in range(6)]
    assert len({id(a.base.staging) for a in kept}) == 6
    for i, a in enumerate(kept):
        np.testing.assert_allclose(a, big + float(i), rtol=1e-6)


def test_writing_a_lent_array_leaves_the_tensor_alone(big: np.ndarray) -> None:
    y = tr.tensor(big) * 4
    a = y.numpy()
    a[:] = -1.0
    b = y.numpy()
    assert lent(b) and b.base.staging is not a.base.staging
    np.testing.assert_allclose(b, big * 4, rtol=1e-6)
    del a
    gc.collect()
    np.testing.assert_allclose(y.numpy(), big * 4, rtol=1e-6)


def test_past_the_budget_reads_are_copied(big: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_module, "LEND_READ_BYTES", 2 * staging_class(big.nbytes))
    x = tr.tensor(big)
    arrays = [(x * float(i)).numpy() for i in range(4)]
    assert [lent(a) for a in arrays] == [True, True, False, False]
    for i, a in enumerate(arrays):
        np.testing.assert_allclose(a, big * float(i), rtol=1e-6)
    del arrays
    gc.collect()
    assert lent((x + 1).numpy())  # the budget is back once the lent arrays die


def test_lending_off_copies_every_read(big: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_module, "LEND_READ_BYTES", 0)
    a = (tr.tensor(big) + 2).numpy()
    assert not lent(a) and a.flags.owndata
    np.testing.assert_allclose(a, big + 2, rtol=1e-6)


def test_started_reads_bools_and_ints_are_lent_or_converted(big: np.ndarray) -> None:
    x = tr.tensor(big)
    y = x * 3
    y.copy_to_host_async()
    a = y.numpy()
    assert lent(a)
    np.testing.assert_allclose(a, big * 3, rtol=1e-6)
    mask = (x > 0).numpy()  # bool is u32 on the GPU: converted, so the array owns its data
    assert mask.dtype == np.bool_ and mask.flags.owndata
    np.testing.assert_array_equal(mask, big > 0)
    ints = (x * 100).astype(tr.int32).numpy()
    assert lent(ints) and ints.dtype == np.int32
    np.testing.assert_array_equal(ints, (big * 100).astype(np.int32))


def test_a_jit_output_is_lent_and_the_loop_reuses_buffers(big: np.ndarray) -> None:
    @tr.jit
    def f(a: tr.Tensor) -> tr.Tensor:
        return a * 2 - 1

    dev = get_device()
    x = tr.tensor(big)
    seen = set()
    for _ in range(5):
        out = f(x).numpy()  # the previous result dies at this assignment
        seen.add(id(out.base.staging))
        np.testing.assert_allclose(out, big * 2 - 1, rtol=1e-6)
    assert len(seen) <= 2 and dev._lent_bytes <= 2 * staging_class(big.nbytes)


def test_reset_device_with_a_lent_array_alive(big: np.ndarray) -> None:
    a = (tr.tensor(big) + 1).numpy()
    tr.reset_device()
    np.testing.assert_allclose(a, big + 1, rtol=1e-6)  # still readable: its buffer lives with it
    del a
    gc.collect()
    np.testing.assert_allclose((tr.tensor(big) - 1).numpy(), big - 1, rtol=1e-6)


@pytest.mark.parametrize(
    ("size", "cls"),
    [
        (1, 4096),
        (4096, 4096),
        (5000, 8192),
        (1 << 20, 1 << 20),
        ((1 << 20) + 1, 5 << 18),
        (6_291_456, 6 << 20),
        (6_291_457, 7 << 20),
    ],
)
def test_staging_sizes(size: int, cls: int) -> None:
    assert staging_class(size) == cls and staging_class(cls) == cls
