"""Small helpers shared by tests: tolerances and comparison against numpy."""

from __future__ import annotations

import numpy as np

import tracer as tr

# Tolerances per dtype: float32 kernels differ from numpy by rounding order (sums, matmul)
# and by transcendental implementations; float16 by its 11-bit mantissa.
TOL = {
    "float32": dict(rtol=1e-5, atol=1e-5),
    "float16": dict(rtol=2e-3, atol=2e-3),
}


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True
        )


def kernels_of(*tensors: tr.Tensor) -> list[tuple[str, str, int]]:
    """(kernel, variant, KernelElement) of every dispatch that would compute these tensors."""
    return [(d.kernel, d.variant, d.element) for d in tr.compile(*tensors).dispatches]


def kernel_kinds(*tensors: tr.Tensor) -> list[tuple[str, str, int]]:
    """kernels_of with each variant cut at its first ':' (what it computes, not its knobs)."""
    return [(k, v.split(":")[0], w) for k, v, w in kernels_of(*tensors)]
