"""`wgjit bench --suite e2e` in its small configuration (the lavapipe smoke run), checked field by field.

No timing is asserted. What is checked: every record carries the fields the e2e table and
RESULTS.md rely on; the jit contenders compile nothing while timed; and the values the
suite computed agree with numpy: the decoder's greedy ids and prefill logits against the
reference in test_generate.py (same seeded random weights), MiniLM's hidden states
against a numpy BERT written here over the same tiny random checkpoint.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tracer import cli

pytestmark = [pytest.mark.gpu, pytest.mark.model]

pytest.importorskip("safetensors", reason="the e2e suite loads safetensors checkpoints")
pytest.importorskip("tokenizers", reason="the e2e suite tokenizes with the tokenizers package")

VARIANT_FIELDS = {"ms", "timer", "wall_ms", "gpu_ms", "spread_pct", "runs", "block", "block_medians", "compiles",
                  "dispatches"}  # fmt: skip


@pytest.fixture(scope="module")
def e2e_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("e2e")
    path, md = out / "e2e.json", out / "e2e.md"
    rc = cli.main(["bench", "--suite", "e2e", "--sizes", "small", "--json", str(path), "--md", str(md), "--quiet"])
    assert rc == 0, "an e2e case failed its check"
    return json.loads(path.read_text()), md.read_text()


def test_records_have_every_field(e2e_run: tuple[dict, str]) -> None:
    result, md = e2e_run
    recs = result["records"]
    assert [(r["case"], r["shape"]) for r in recs] == [
        ("minilm_forward", "2x8 tokens"), ("minilm_forward", "1x4 tokens"), ("minilm_encode", "6 sentences"),
        ("decoder_prefill", "tiny: 6 tokens"), ("decoder_prefill", "tiny: 12 tokens"),
        ("decoder_token", "tiny: per token"), ("decoder_token", "tiny: per token, a token ahead"),
    ]  # fmt: skip
    timestamps = result["device"]["timestamps"]
    for r in recs:
        assert r["suite"] == "e2e" and r["verified"] is True, (r["case"], r["check"])
        ahead = r["shape"].endswith("a token ahead")
        assert set(r["variants"]) == ({"jit"} if ahead else {"jit", "lazy"}) and r["ours"] == r["variants"]["jit"]
        for v in r["variants"].values():
            assert VARIANT_FIELDS <= set(v), VARIANT_FIELDS - set(v)
            assert v["wall_ms"] > 0 and v["runs"] == v["block"] * r["warmup"]["timed_rounds"]
            assert len(v["block_medians"]) == r["warmup"]["rounds"] + r["warmup"]["timed_rounds"]
        if r["case"] != "minilm_encode" and timestamps:
            jit = r["variants"]["jit"]
            assert jit["gpu_ms"] > 0 and jit["dispatches"] > 0
            assert jit["host_us_per_dispatch"] == pytest.approx(
                (jit["wall_ms"] - jit["gpu_ms"]) * 1e3 / jit["dispatches"]
            )
        assert r["warmup"]["rounds"] >= 1 and r["warmup"]["timed_rounds"] >= 1
        assert r["comparators"] == {} and r["ratios"] == {}  # no CUDA here: torch is not a comparator
    assert "| decoder_token | tiny: per token | lazy |" in md


def test_jit_contenders_replay_without_compiling(e2e_run: tuple[dict, str]) -> None:
    result, _ = e2e_run
    for r in result["records"]:
        if r["case"] in ("minilm_forward", "decoder_token", "decoder_prefill"):
            assert r["variants"]["jit"]["compiles"] == 0, r["case"]


def test_decoder_values_against_numpy(e2e_run: tuple[dict, str]) -> None:
    from benchmarks.e2e.decoder import config
    from examples.llama import random_weights
    from tests.test_generate import np_greedy, np_logits

    result, _ = e2e_run
    rec = [r for r in result["records"] if r["case"] == "decoder_token"][0]
    check = rec["check"]
    cfg = config("tiny")
    w, hf = random_weights(cfg, seed=0), cfg.to_hf()
    prompt = check["prompt"]
    assert check["ids_jit"] == check["ids_lazy"] == np_greedy(w, hf, prompt, len(check["ids_jit"]))
    np.testing.assert_allclose(check["prefill_logits_head"], np_logits(w, hf, prompt)[-1, :8], rtol=1e-4, atol=1e-5)


def _np_bert(w: dict[str, np.ndarray], cfg: dict, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """BERT's last hidden state in float64 (erf GELU, post-norm), any width."""
    w = {k: v.astype(np.float64) for k, v in w.items() if v.dtype.kind == "f"}
    n, t = ids.shape
    d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    erf = np.vectorize(math.erf)

    def ln(x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + cfg["layer_norm_eps"]) * w[
            name + ".weight"
        ] + w[name + ".bias"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def split(x: np.ndarray) -> np.ndarray:
        return x.reshape(n, t, heads, d // heads).transpose(0, 2, 1, 3)

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:t]
    x = ln(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -np.inf)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (split(dense(x, p + f"attention.self.{m}")) for m in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads) + bias
        s = np.exp(s - s.max(-1, keepdims=True))
        a = ((s / s.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(n, t, d)
        x = ln(dense(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense")
        x = ln(dense(h * 0.5 * (1 + erf(h / math.sqrt(2))), p + "output.dense") + x, p + "output.LayerNorm")
    return x


def test_minilm_values_against_numpy(e2e_run: tuple[dict, str], tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    from benchmarks.e2e.minilm import _batch, sentences, tiny_model
    from examples import minilm

    result, _ = e2e_run
    folder = tiny_model(minilm.model_dir(), tmp_path / "tiny")  # the same seeded weights the suite made
    w = load_file(str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    for r in result["records"]:
        if r["case"] == "minilm_forward":
            n, t = (int(v) for v in r["shape"].split()[0].split("x"))
            ids, _, mask = _batch(n, t)
            assert r["check"]["ids"] == ids[:1, :4].tolist()
            want = _np_bert(w, cfg, ids, mask)[0, :2, :4]
            np.testing.assert_allclose(r["check"]["sample"], want, rtol=1e-4, atol=1e-5)
        if r["case"] == "minilm_encode":
            assert r["check"]["errors"]["lazy"] < 1e-5  # the jit encode and the lazy loop agree
            texts = sentences(int(r["shape"].split()[0]))
            assert r["check"]["sentences"] == texts[:2]
            ids, _, mask = minilm.MiniLM(folder).tokenize(texts)  # the tokenizer only: no GPU work
            hidden = _np_bert(w, cfg, ids, mask)
            mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            unit = mean / np.linalg.norm(mean, axis=-1, keepdims=True)
            np.testing.assert_allclose(r["check"]["sample"], unit[:2, :4], rtol=1e-4, atol=1e-5)


def test_settle_rule() -> None:
    from benchmarks.e2e.blocks import Contender, _settled

    a, b = Contender("a", lambda: None), Contender("b", lambda: None)
    a.block_medians, b.block_medians = [10.0, 5.0], [3.0, 3.0]
    assert not _settled([a, b], 0.05)  # a still moves by half
    a.block_medians.append(5.1)
    b.block_medians.append(2.95)
    assert _settled([a, b], 0.05)
    assert not _settled([Contender("c", lambda: None)], 0.05)  # one block proves nothing


def test_torch_comparator_against_numpy() -> None:
    """benchmarks/e2e/torch_llama.py on the CPU: prefill, eager steps and the static (graph-ready) step."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from benchmarks.e2e.torch_llama import TorchLlama
    from examples.llama import random_weights
    from tests.test_generate import PROMPT, np_logits, tiny_config

    cfg = tiny_config("Qwen2ForCausalLM", False)
    w, hf = random_weights(cfg, 0, scale=0.2), cfg.to_hf()
    model = TorchLlama(torch, cfg, w, 16, device="cpu")
    eager, static = model.cache(), model.cache()
    seq = list(PROMPT)
    got = model.prefill(torch.tensor([seq]), eager)
    model.prefill(torch.tensor([seq]), static)
    np.testing.assert_allclose(got[0].numpy(), np_logits(w, hf, seq)[-1], rtol=1e-4, atol=1e-5)
    for pos in range(len(seq), len(seq) + 4):
        seq.append(int(got.argmax()))
        want = np_logits(w, hf, seq)[-1]
        got = model.step(torch.tensor([[seq[-1]]]), pos, eager)
        same = model.step_static(torch.tensor([[seq[-1]]]), torch.tensor([pos]), static)
        np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(same[0].numpy(), want, rtol=1e-4, atol=1e-5)


def test_suite_with_a_cpu_torch_comparator() -> None:
    """The comparator code paths (torch eager decoding, BertModel, ratios, the table) on CPU torch.

    The H200 run uses CUDA (and adds the CUDA-graph contender); here torch runs on the CPU, only
    to check that both sides compute the same thing and the records and table carry it.
    """
    torch = pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("transformers", reason="transformers is not installed")
    from benchmarks import harness
    from benchmarks.e2e import e2e_suite, table

    ctx = harness.make_context(harness.Settings(use_torch=False, log=lambda _m: None))
    device = harness.device_info(ctx)  # before torch joins: it names a CUDA device
    ctx.torch = torch
    records = e2e_suite(ctx, {"full": False})
    assert len(records) == 7  # two prefills (the prompt and a longer one), two decode loops
    for r in records:
        assert r["verified"] is True, (r["case"], r["check"])
        assert set(r["comparators"]) == {"torch"}, r["case"]  # no CUDA graph without CUDA
        assert r["ratios"]["torch"] > 0 and all(v["torch"] > 0 for v in r["variant_ratios"].values())
        assert r["check"]["errors"]["torch"] < 1e-4, r["case"]
    token = [r for r in records if r["case"] == "decoder_token"][0]
    assert token["check"]["ids_torch"] == token["check"]["ids_jit"]
    text = table.terminal({"device": device, "records": records})
    assert text.count("decoder_token") == 3 and "x " in text


def test_decoding_a_token_ahead_reads_the_same_ids() -> None:
    """JitDecode(ahead=True) (step t+1 submitted before id t is read) and the torch loops run a token
    ahead (CPU torch here) read the ids numpy's greedy decoding makes, as the step-then-read loops do."""
    import tracer as tr
    from benchmarks.e2e.decoder import JitDecode, TorchDecode, config
    from examples import llama as L
    from tests.test_generate import np_greedy

    cfg = config("tiny")
    w, hf = L.random_weights(cfg, seed=0), cfg.to_hf()
    model = L.Llama(cfg, L.check_weights(w, cfg, "tiny", tr.float32), cfg.max_positions, tr.float32)
    prompt = [5, 1, 9, 30]
    want = np_greedy(w, hf, prompt, 7)[1:]  # the loops' first call reads the id after the prefill's
    sync, ahead = JitDecode(model, prompt), JitDecode(model, prompt, ahead=True)
    assert [sync() for _ in want] == want
    assert [ahead() for _ in want] == np_greedy(w, hf, prompt, 6)  # a call reads the id its step was fed
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from benchmarks.e2e.torch_llama import TorchLlama

    theirs = TorchLlama(torch, cfg, w, cfg.max_positions, device="cpu")
    eager = TorchDecode(theirs, prompt, graph=False, ahead=True)
    assert [eager() for _ in want] == np_greedy(w, hf, prompt, 6)


def test_gpu_time_first_compiles_a_bucket_no_step_reached() -> None:
    """JitDecode.gpu_time where no step has compiled the next position's bucket of the attended length
    (here: right after the prefill; on the H200 a suite's timed rounds ended at such a position) runs
    that step first, then times its program; the loop then goes on with numpy's greedy ids."""
    from types import SimpleNamespace

    import tracer as tr
    from backend_wgpu import get_device
    from benchmarks.e2e.decoder import JitDecode, config
    from benchmarks.timing import ProgramTimer
    from examples import llama as L
    from tests.test_generate import np_greedy

    cfg = config("tiny")
    w, hf = L.random_weights(cfg, seed=0), cfg.to_hf()
    model = L.Llama(cfg, L.check_weights(w, cfg, "tiny", tr.float32), cfg.max_positions, tr.float32)
    prompt = [5, 1, 9, 30]
    want = np_greedy(w, hf, prompt, 5)[1:]
    sync = JitDecode(model, prompt)
    assert not model.step_into_jit.traces  # nothing compiled the step yet
    ms, dispatches = sync.gpu_time(SimpleNamespace(timer=ProgramTimer(get_device())))
    assert dispatches > 0 and (ms is None or ms > 0)
    assert [sync() for _ in want[1:]] == want[1:]  # gpu_time took the first step
