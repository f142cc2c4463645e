"""Matmul with numpy semantics, on every kernel the selector can choose."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer as tr
from tests.helpers import assert_close, kernels_of

CASES = [
    ((5,), (5,)),
    ((5,), (5, 3)),
    ((4, 5), (5,)),
    ((4, 5), (5, 3)),
    ((2, 4, 5), (5, 3)),
    ((4, 5), (2, 5, 3)),
    ((2, 1, 4, 5), (3, 5, 6)),
    ((65, 70), (70, 67)),
    ((1, 130), (130, 67)),
]


@pytest.mark.parametrize("sa,sb", CASES, ids=str)
def test_matmul_shapes(sa, sb, rng: np.random.Generator) -> None:
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    y = tr.tensor(a) @ tr.tensor(b)
    want = a @ b
    assert y.shape == want.shape
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "make_b,kernel,variant,width",
    [
        (lambda b: b, "gemv_split", "n_contig:u8", 4),
        (lambda b: b[:, :63], "gemv_split", "n_contig:u8", 1),
        (lambda b: b.T.contiguous().T, "gemv", "k_contig", 4),
    ],
    ids=["n_contig_vec4", "n_contig_scalar", "k_contig_vec4"],
)
def test_gemv_variants(make_b, kernel: str, variant: str, width: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal((1, 96)).astype(np.float32)
    b = rng.standard_normal((96, 64)).astype(np.float32)
    tb = make_b(tr.tensor(b))
    y = tr.tensor(a) @ tb
    assert kernels_of(y)[-1] == (kernel, variant, width)
    assert_close(y.numpy(), a @ tb.numpy(), rtol=1e-4, atol=1e-4)


def test_gemm_on_transposed_and_sliced_views(rng: np.random.Generator) -> None:
    a = rng.standard_normal((70, 33)).astype(np.float32)  # more rows than gemm_thin takes
    b = rng.standard_normal((29, 33)).astype(np.float32)
    ta, tb = tr.tensor(a), tr.tensor(b)
    y = ta @ tb.T
    assert kernels_of(y) == [("gemm_blocked", "a_s.b_s.o1:64x64x16:g8", 1)]  # reads B through its strides: no copy
    assert_close(y.numpy(), a @ b.T, rtol=1e-4, atol=1e-4)
    assert_close((ta[::2, 1:] @ tb[1:, 1:].T).numpy(), a[::2, 1:] @ b[1:, 1:].T, rtol=1e-4, atol=1e-4)


def test_matmul_errors() -> None:
    with pytest.raises(tr.ShapeError, match=r"matmul: \(3, 4\) @ \(5, 6\): inner dimensions 4 and 5 differ"):
        tr.ones((3, 4)) @ tr.ones((5, 6))
    with pytest.raises(tr.ShapeError, match="at least 1 dimension"):
        tr.tensor(2.0) @ tr.ones(3)
    with pytest.raises(tr.ShapeError, match="do not broadcast"):
        tr.ones((2, 3, 4)) @ tr.ones((3, 4, 5))
    with pytest.raises(tr.DTypeError, match="only float matmul"):
        tr.ones((2, 2), tr.int32) @ tr.ones((2, 2), tr.int32)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.integers(1, 3))
def test_matmul_hypothesis(m: int, k: int, n: int, batch: int) -> None:
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    assert_close((tr.tensor(a) @ tr.tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_one_row_products_over_an_empty_k_are_zero() -> None:
    """The H200 fuzz survey of session 4: the GEMV rule took log2 of zero steps when k was 0."""
    x = np.zeros((1, 0), np.float32)
    w = np.zeros((5, 0), np.float32)
    for y in (tr.tensor(x) @ tr.tensor(w).T, tr.tensor(x) @ tr.tensor(w.T.copy())):
        np.testing.assert_array_equal(y.numpy(), np.zeros((1, 5), np.float32))
