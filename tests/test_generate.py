"""examples/generate.py against a numpy reference of the Llama/Mistral/Qwen2 architecture.

Each test writes a tiny random checkpoint (config.json + safetensors) to tmp_path, runs
generation through the command line's --json path or the Python API, and checks the
prompt logits and the greedy ids against `np_logits` below: the architecture written
here in float64 numpy from the Hugging Face definitions, independent of examples/llama.py
(it recomputes the whole sequence for every token, so no KV cache is involved). Where
torch and transformers are installed, the same checkpoints also go through transformers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

pytest.importorskip("safetensors", reason="generate.py reads safetensors checkpoints (pip install 'wgjit[examples]')")

from examples import generate as G  # noqa: E402
from examples import llama as L  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# --- the reference ------------------------------------------------------------------------------


def _inv_freq(cfg: dict, head_dim: int) -> np.ndarray:
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim)
    s = cfg.get("rope_scaling") or {}
    kind = s.get("rope_type", s.get("type"))
    if kind == "linear":
        inv = inv / s["factor"]
    elif kind == "llama3":  # Llama 3.1: wavelengths past low_freq_wavelen slowed by factor, a ramp between
        old, lo, hi, f = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"], s["factor"]
        out = []
        for freq in inv:
            wavelen = 2 * math.pi / freq
            if wavelen < old / hi:
                out.append(freq)
            elif wavelen > old / lo:
                out.append(freq / f)
            else:
                ramp = (old / wavelen - lo) / (hi - lo)
                out.append((1 - ramp) * freq / f + ramp * freq)
        inv = np.array(out)
    return inv


def np_logits(w: dict[str, np.ndarray], cfg: dict, ids: list[int]) -> np.ndarray:
    """The causal LM's logits (T, vocab) for the whole sequence, in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    t = len(ids)
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
    eps = cfg["rms_norm_eps"]
    qwen = cfg["architectures"][0] == "Qwen2ForCausalLM"
    window = cfg.get("sliding_window")
    if qwen and not cfg.get("use_sliding_window"):
        window = None

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w[name]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    angle = np.arange(t)[:, None] * _inv_freq(cfg, hd)[None, :]
    cos, sin = np.cos(angle), np.sin(angle)

    def rotate(x: np.ndarray) -> np.ndarray:  # (n, t, hd): pairs (i, i + hd/2)
        a, b = x[..., : hd // 2], x[..., hd // 2 :]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = norm(x, p + "input_layernorm.weight")
        q = rotate(dense(h, p + "self_attn.q_proj").reshape(t, heads, hd).transpose(1, 0, 2))
        k = rotate(dense(h, p + "self_attn.k_proj").reshape(t, kv, hd).transpose(1, 0, 2))
        v = dense(h, p + "self_attn.v_proj").reshape(t, kv, hd).transpose(1, 0, 2)
        k, v = np.repeat(k, heads // kv, 0), np.repeat(v, heads // kv, 0)  # head h reads kv head h // group
        visible = j <= i
        if window is not None and (not qwen or layer >= cfg.get("max_window_layers", 0)):
            visible &= j > i - window
        s = np.where(visible, q @ k.transpose(0, 2, 1) / math.sqrt(hd), -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        x = x + dense(a.transpose(1, 0, 2).reshape(t, heads * hd), p + "self_attn.o_proj")
        h = norm(x, p + "post_attention_layernorm.weight")
        g = dense(h, p + "mlp.gate_proj")
        x = x + dense(g / (1 + np.exp(-g)) * dense(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = norm(x, "model.norm.weight")
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def np_greedy(w: dict[str, np.ndarray], cfg: dict, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(np_logits(w, cfg, ids)[-1])))
    return ids[len(prompt) :]


# --- checkpoints ----------------------------------------------------------------------------------


def tiny_config(arch: str, tied: bool, **kw: object) -> L.LlamaConfig:
    base = dict(vocab=96, dim=32, layers=2, heads=4, kv_heads=2, head_dim=8, ff=48, eps=1e-5, rope_theta=500.0)
    base.update(kw)
    qwen = arch == "Qwen2ForCausalLM"
    return L.LlamaConfig(arch, tie_embeddings=tied, qkv_bias=qwen, max_positions=128, **base)


def make_checkpoint(folder: Path, cfg: L.LlamaConfig, seed: int = 0, shards: int = 1) -> tuple[dict, dict]:
    w = L.random_weights(cfg, seed, scale=0.2)
    L.write_checkpoint(folder, cfg, w, shards)
    return w, json.loads((folder / "config.json").read_text())


ARCHS = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"]
PROMPT = [3, 17, 45, 8, 91, 0]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_cli_json_matches_numpy(tmp_path: Path, arch: str, tied: bool) -> None:
    """The --json path: prompt logits at every position and the greedy ids (jit decode step)."""
    w, cfg = make_checkpoint(tmp_path / "ckpt", tiny_config(arch, tied))
    out = tmp_path / "out.json"
    ids = ",".join(map(str, PROMPT))
    rc = G.main(["--model", str(tmp_path / "ckpt"), "--prompt-ids", ids, "--max-new-tokens", "5",
                 "--temperature", "0", "--json", str(out)])  # fmt: skip
    assert rc == 0
    got = json.loads(out.read_text())
    want = np_logits(w, cfg, PROMPT)
    logits = np.array(got["prompt_logits"], np.float64)
    assert logits.shape == (len(PROMPT), 96)
    np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4)
    assert got["ids"] == np_greedy(w, cfg, PROMPT, 5)


@pytest.mark.parametrize("arch", ARCHS)
def test_api_lazy_and_jit_decode_agree_with_numpy(tmp_path: Path, arch: str) -> None:
    """The Python API in both decode forms; head_dim 16 where hidden / heads is 8; four query heads per kv head."""
    cfg = tiny_config(arch, tied=False, heads=4, kv_heads=1, head_dim=16)  # 4 query heads share one kv head
    w, hf = make_checkpoint(tmp_path, cfg, seed=1)
    want = np_greedy(w, hf, PROMPT[:3], 6)
    for mode in G.MODES:
        gen = G.Generator.load(tmp_path, mode=mode)
        res = gen.generate(PROMPT[:3], 6, want_prompt_logits=True)
        assert res.ids == want, mode
        np.testing.assert_allclose(res.prompt_logits, np_logits(w, hf, PROMPT[:3]), rtol=1e-4, atol=1e-4)


def test_sliding_window_sharded_and_rope_scaling(tmp_path: Path) -> None:
    """Mistral with a window shorter than the sequence (prefill and both decode forms), Llama 3.1
    rope scaling, a checkpoint in three shards with its index."""
    cases = [
        tiny_config("MistralForCausalLM", False, windows=(3, 3)),
        tiny_config("Qwen2ForCausalLM", True, windows=(None, 4)),  # max_window_layers = 1
        tiny_config(
            "LlamaForCausalLM",
            False,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),  # fmt: skip
    ]
    for n, cfg in enumerate(cases):
        folder = tmp_path / str(n)
        w, hf = make_checkpoint(folder, cfg, seed=n, shards=3)
        assert (folder / "model.safetensors.index.json").is_file()
        want = np_greedy(w, hf, PROMPT, 4)
        for mode in G.MODES:
            res = G.Generator.load(folder, mode=mode).generate(PROMPT, 4, want_prompt_logits=True)
            np.testing.assert_allclose(res.prompt_logits, np_logits(w, hf, PROMPT), rtol=1e-4, atol=1e-4)
            assert res.ids == want, (cfg.architecture, mode)


def test_sampling_is_seeded_and_follows_top_k(tmp_path: Path) -> None:
    cfg = tiny_config("LlamaForCausalLM", True)
    make_checkpoint(tmp_path, cfg)
    gen = G.Generator.load(tmp_path)
    s = G.Sampling(temperature=1.5, top_k=3, seed=7)
    a = gen.generate(PROMPT, 6, s).ids
    assert a == gen.generate(PROMPT, 6, s).ids  # the same seed, the same ids
    # every sampled id is among the top 3 of its position's logits (numpy on the model's own logits)
    lazy = G.Generator.load(tmp_path, mode="lazy")
    assert lazy.generate(PROMPT, 6, s).ids == a
    w = L.random_weights(cfg, 0, scale=0.2)
    hf = json.loads((tmp_path / "config.json").read_text())
    seq = list(PROMPT)
    for tok in a:
        top3 = np.argsort(-np_logits(w, hf, seq)[-1])[:3]
        assert tok in top3
        seq.append(tok)


def test_sample_on_the_host() -> None:
    """sample(): greedy is argmax; top_k=1 is greedy at any temperature; top_p keeps the nucleus."""
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 3.0, 1.0, 2.9, -5.0], np.float32)
    assert G.sample(logits, G.Sampling(), rng) == 1
    assert {G.sample(logits, G.Sampling(temperature=2.0, top_k=1), rng) for _ in range(20)} == {1}
    # p(1) and p(3) are about 0.47 and 0.43 at temperature 1: top_p 0.8 keeps exactly those two
    drawn = {G.sample(logits, G.Sampling(temperature=1.0, top_p=0.8), rng) for _ in range(200)}
    assert drawn == {1, 3}
    counts = np.bincount([G.sample(logits, G.Sampling(temperature=1.0, seed=0), rng) for _ in range(4000)], minlength=5)
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(counts / 4000, p, atol=0.03)
    with pytest.raises(ValueError, match="top_p"):
        G.Sampling(top_p=0.0)


def test_eos_stops_generation(tmp_path: Path) -> None:
    cfg = tiny_config("LlamaForCausalLM", False)
    w, hf = make_checkpoint(tmp_path, cfg)
    want = np_greedy(w, hf, PROMPT, 6)
    stop = want[2]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [stop]}))
    res = G.Generator.load(tmp_path).generate(PROMPT, 6)
    assert res.ids == want[: want.index(stop) + 1] and res.stopped_at_eos


# --- bad checkpoints -----------------------------------------------------------------------------


def _bad(tmp_path: Path, edit_config: dict | None = None, drop: str | None = None, reshape: str | None = None) -> str:
    cfg = tiny_config("LlamaForCausalLM", False)
    w = L.random_weights(cfg, 0)
    if drop:
        del w[drop]
    if reshape:
        w[reshape] = w[reshape][:-1]
    L.write_checkpoint(tmp_path, cfg, w)
    if edit_config:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | edit_config))
    with pytest.raises(L.CheckpointError) as err:
        G.Generator.load(tmp_path)
    return str(err.value)


def test_clear_errors_for_bad_checkpoints(tmp_path: Path) -> None:
    msg = _bad(tmp_path / "a", {"architectures": ["GPT2LMHeadModel"]})
    assert "GPT2LMHeadModel" in msg and "LlamaForCausalLM" in msg
    msg = _bad(tmp_path / "b", drop="model.layers.1.mlp.up_proj.weight")
    assert "model.layers.1.mlp.up_proj.weight" in msg and "missing" in msg
    msg = _bad(tmp_path / "c", reshape="model.layers.0.self_attn.k_proj.weight")
    assert "model.layers.0.self_attn.k_proj.weight" in msg and "(15, 32)" in msg and "(16, 32)" in msg
    msg = _bad(tmp_path / "d", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    assert "yarn" in msg and "not supported" in msg
    msg = _bad(tmp_path / "e", {"num_key_value_heads": 3})
    assert "3 key/value heads" in msg
    with pytest.raises(L.CheckpointError, match="no config.json"):
        G.Generator.load(tmp_path / "nowhere")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "config.json").write_text(json.dumps(tiny_config("LlamaForCausalLM", False).to_hf()))
    with pytest.raises(L.CheckpointError, match="neither model.safetensors"):
        G.Generator.load(tmp_path / "f")
    # the command line turns them into one line on stderr and exit status 2
    assert G.main(["--model", str(tmp_path / "a"), "--prompt-ids", "1,2"]) == 2


def test_bad_generate_arguments(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, tiny_config("LlamaForCausalLM", False))
    gen = G.Generator.load(tmp_path)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        gen.generate([1, 96], 2)
    with pytest.raises(ValueError, match="exceed the model's 128 positions"):
        gen.generate([1, 2], 127)
    with pytest.raises(ValueError, match="no tokens"):
        gen.generate([], 2)


def test_script_runs_as_a_command(tmp_path: Path) -> None:
    """python examples/generate.py in a fresh process: ids on stdout, the speed line on stderr."""
    cfg = tiny_config("Qwen2ForCausalLM", True)
    w, hf = make_checkpoint(tmp_path, cfg)
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "generate.py"), "--model", str(tmp_path),
                          "--prompt-ids", "5,6,7", "--max-new-tokens", "3"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [int(x) for x in run.stdout.split()] == np_greedy(w, hf, [5, 6, 7], 3)
    assert "prefill 3 tokens" in run.stderr


# --- transformers, where installed -------------------------------------------------------------


@pytest.mark.parametrize(
    "arch,windows",
    [(a, (None, None)) for a in ARCHS] + [("MistralForCausalLM", (3, 3)), ("Qwen2ForCausalLM", (None, 4))],
)
def test_against_transformers(tmp_path: Path, arch: str, windows: tuple) -> None:
    """Prompt logits and greedy ids from transformers' own classes (sliding windows included)."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the transformers check is skipped")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = tiny_config(arch, arch != "MistralForCausalLM", windows=windows)
    make_checkpoint(tmp_path, cfg, seed=3)
    model = getattr(transformers, arch).from_pretrained(str(tmp_path), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model(torch.tensor([PROMPT])).logits[0].numpy()
        ids = model.generate(torch.tensor([PROMPT]), max_new_tokens=5, do_sample=False, min_new_tokens=5)
    res = G.Generator.load(tmp_path).generate(PROMPT, 5, want_prompt_logits=True, stop_at_eos=False)
    np.testing.assert_allclose(res.prompt_logits, theirs, rtol=1e-4, atol=1e-4)
    assert res.ids == ids[0, len(PROMPT) :].tolist()


def test_float16_weights(tmp_path: Path, device) -> None:  # noqa: ANN001
    """--dtype float16: weights, activations and cache in f16 (f32 statistics); logits near the f64 reference."""
    if not device.caps.shader_f16:
        pytest.skip("the adapter has no shader-f16")
    cfg = tiny_config("Qwen2ForCausalLM", False)
    w, hf = make_checkpoint(tmp_path, cfg)
    want = np_logits(w, hf, PROMPT)
    for mode in G.MODES:
        res = G.Generator.load(tmp_path, dtype=G.tr.float16, mode=mode).generate(PROMPT, 3, want_prompt_logits=True)
        assert res.prompt_logits.dtype == np.float32
        np.testing.assert_allclose(res.prompt_logits, want, atol=0.05 * np.abs(want).max())
        assert res.ids == np_greedy(w, hf, PROMPT, 3)


def test_prompt_text_streams_through_the_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """With tokenizer.json, --prompt is tokenized and the new text is printed as it comes."""
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
    cfg = tiny_config("MistralForCausalLM", True)
    w, hf = make_checkpoint(tmp_path, cfg)
    vocab = {f"w{i}": i for i in range(cfg.vocab)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(tmp_path / "tokenizer.json"))
    assert G.main(["--model", str(tmp_path), "--prompt", "w3 w17 w45", "--max-new-tokens", "4"]) == 0
    out, err = capsys.readouterr()
    want = np_greedy(w, hf, [3, 17, 45], 4)
    assert out.strip() == "w3 w17 w45" + "".join(f" w{i}" for i in want)
    assert "decoded 4 tokens" in err and "tok/s" in err
