"""tr.sample (kernels/sample/sample.py) against the numpy definition in ir/optable/sampling.py.

Exact ids for greedy, top-k and top-p (the same counter-based stream on both sides; where u
falls within float32 rounding of a boundary the case is set aside, and such cases must stay
rare), ties at the thresholds, a chi-square test of the draws' distribution, replays under
`@tr.jit`, and the clear errors of bad arguments.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from ir.optable.sampling import draw, kept_weights, mix, uniform

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(11)


def reference(x: np.ndarray, temperature: float, top_k: int, top_p: float, seed: int, step: int) -> np.ndarray:
    rows = x.reshape(-1, x.shape[-1])
    if temperature == 0:
        return rows.argmax(-1).reshape(x.shape[:-1])
    ids = [draw(kept_weights(r, temperature, top_k, top_p), uniform(seed, step, i)) for i, r in enumerate(rows)]
    return np.array(ids).reshape(x.shape[:-1])


def margins(x: np.ndarray, temperature: float, top_k: int, top_p: float, seed: int, step: int) -> np.ndarray:
    """Per row: the distance, as a share of the kept total, between u and the nearest boundary of the
    running sum (for top-p also between top_p and a boundary of the head's share)."""
    rows = x.reshape(-1, x.shape[-1])
    out = np.ones(len(rows))
    for i, r in enumerate(rows):
        w = kept_weights(r, temperature, top_k, top_p)
        run = np.cumsum(w) / w.sum()
        out[i] = np.min(np.abs(run - uniform(seed, step, i)))
        if top_p < 1:
            full = kept_weights(r, temperature, top_k, 1.0)
            share = np.cumsum(np.sort(full)[::-1]) / full.sum()
            out[i] = min(out[i], np.min(np.abs(share - top_p)))
    return out


CASES = [
    dict(temperature=0.0),
    dict(temperature=1.0),
    dict(temperature=0.6, top_k=1),
    dict(temperature=1.3, top_k=40),
    dict(temperature=0.9, top_p=0.7),
    dict(temperature=0.8, top_k=100, top_p=0.95),
    dict(temperature=2.0, top_k=3, top_p=0.5),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("vocab", [1, 7, 1000, 32000])
def test_ids_match_the_definition(case, vocab):
    """Every id equal, except where u (or top_p) is within float32 rounding of a boundary; those stay rare."""
    kind = (case.get("temperature"), case.get("top_k", 0), case.get("top_p", 1.0))
    near = 0
    for trial in range(6):
        x = (RNG.standard_normal((3, vocab)) * 2).astype(np.float32)
        seed, step = int(RNG.integers(0, 2**32)), trial
        got = tr.sample(tr.tensor(x), seed=seed, step=step, **case)
        assert got.shape == (3,) and got.dtype is tr.int32
        want = reference(x, *kind, seed, step)
        differ = got.numpy() != want
        if kind[0] != 0 and differ.any():
            assert (margins(x, *kind, seed, step)[differ] < 2e-5).all(), (got.numpy(), want)
            near += int(differ.sum())
        elif kind[0] == 0:
            np.testing.assert_array_equal(got.numpy(), want)
    assert near <= 2  # of 18 draws


def test_ties_at_the_thresholds_keep_lower_ids():
    x = np.zeros((4, 64), np.float32)
    x[:, 10:20] = 3.0  # ten equal largest logits
    for seed in range(20):
        got = tr.sample(tr.tensor(x), temperature=1.0, top_k=4, seed=seed).numpy()
        assert set(got) <= {10, 11, 12, 13}
        np.testing.assert_array_equal(got, reference(x, 1.0, 4, 1.0, seed, 0))
        got = tr.sample(tr.tensor(x), temperature=1.0, top_p=0.25, seed=seed, step=1).numpy()
        np.testing.assert_array_equal(got, reference(x, 1.0, 0, 0.25, seed, 1))
    assert (tr.sample(tr.tensor(x), temperature=0).numpy() == 10).all()  # greedy: the first largest


def test_float16_and_strided_logits():
    x = RNG.standard_normal((5, 300)).astype(np.float16)
    got = tr.sample(tr.tensor(x)[1:, ::2], temperature=0.8, top_k=20, seed=5, step=2).numpy()
    np.testing.assert_array_equal(got, reference(x[1:, ::2].astype(np.float32), 0.8, 20, 1.0, 5, 2))


def test_the_draws_follow_the_distribution():
    """4,000 rows of one row of logits: each row has its own u; chi-square over 8 ids."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2], np.float32)
    n = 4000
    x = np.tile(logits, (n, 1))
    for temperature, top_k in ((0.7, 0), (1.5, 5)):
        ids = tr.sample(tr.tensor(x), temperature=temperature, top_k=top_k, seed=123, step=9).numpy()
        p = kept_weights(logits, temperature, top_k, 1.0)
        p /= p.sum()
        counts = np.bincount(ids, minlength=8)
        assert counts[p == 0].sum() == 0
        expected = n * p[p > 0]
        chi2 = float((((counts[p > 0] - expected) ** 2) / expected).sum())
        assert chi2 < 30.0, (chi2, counts, expected)  # 7 degrees of freedom: p-value < 1e-4 past 30


def test_same_seed_and_step_same_ids_and_steps_differ():
    x = RNG.standard_normal((64, 500)).astype(np.float32)
    a = tr.sample(tr.tensor(x), seed=7, step=3).numpy()
    b = tr.sample(tr.tensor(x), seed=7, step=3).numpy()
    c = tr.sample(tr.tensor(x), seed=7, step=4).numpy()
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


def test_under_jit_the_step_is_an_argument():
    x = RNG.standard_normal((2, 200)).astype(np.float32)

    @tr.jit
    def pick(logits: tr.Tensor, step: tr.Tensor) -> tr.Tensor:
        return tr.sample(logits, temperature=1.0, top_p=0.9, seed=42, step=step)

    logits = tr.tensor(x)
    for step in range(5):
        got = pick(logits, tr.tensor(np.array([step], np.uint32))).numpy()
        np.testing.assert_array_equal(got, reference(x, 1.0, 0, 0.9, 42, step))


def test_the_generator_is_the_documented_hash():
    """mix is pcg_hash of Jarzynski and Olano (2020), here again in numpy uint32 arithmetic; u takes 24 bits."""

    def pcg_hash(v: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            state = v * np.uint32(747796405) + np.uint32(2891336453)
            word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
        return (word >> np.uint32(22)) ^ word

    words = RNG.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    assert [mix(int(w)) for w in words] == pcg_hash(words).tolist()
    with np.errstate(over="ignore"):
        h = pcg_hash(pcg_hash(pcg_hash(np.uint32(5)) + np.uint32(6)) + np.uint32(7))
    assert uniform(5, 6, 7) == float(h >> np.uint32(8)) / 2**24


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(temperature=-1.0), ValueError, "temperature must be a finite number >= 0"),
        (dict(temperature=float("nan")), ValueError, "temperature"),
        (dict(top_k=-2), ValueError, "top_k must be an int >= 0"),
        (dict(top_p=0.0), ValueError, r"top_p must be in \(0, 1\]"),
        (dict(seed=-1), ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
        (dict(step=2**32), ValueError, "step must be an int"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        tr.sample(tr.zeros((2, 5)), **kwargs)


def test_bad_tensors_are_clear_errors():
    with pytest.raises(tr.DTypeError, match="sample: step must be one int32 or uint32 element, got float32"):
        tr.sample(tr.zeros((2, 5)), step=tr.zeros(1))
    with pytest.raises(
        tr.ShapeError, match=r"sample: logits must have a last axis of at least one id, got shape \(3, 0\)"
    ):
        tr.sample(tr.zeros((3, 0)))
    with pytest.raises(tr.ShapeError, match=r"got shape \(\)"):
        tr.sample(tr.tensor(np.float32(1.0)))


def test_one_dispatch_reads_back_one_id():
    y = tr.sample(tr.tensor(RNG.standard_normal((1, 32000)).astype(np.float32)), top_k=50, seed=1)
    (d,) = tr.compile(y).dispatches
    assert (d.kernel, d.variant) == ("sample", "draw.k")
    assert y.shape == (1,) and y.dtype is tr.int32  # 4 bytes to read back
