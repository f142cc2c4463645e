"""examples/generate.py with llama.cpp GGUF files and --quantize, against the float64 numpy reference.

Tiny random Llama checkpoints are written twice: as a Hugging Face folder and as the GGUF
file llama.cpp's converter would make of it (tests/gguf_files.py: its names, metadata and
q/k rows permuted for its rope). Both must give the same logits as `np_logits` (from
tests/test_generate.py) of the weights the file holds: the float weights, or for Q8_0 /
Q4_0 their dequantized values from gguf.quants. The permutation itself is checked against
llama.cpp's rope definition, and where transformers is installed its GGUF reader checks
the whole file independently.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF files need the gguf package (pip install 'wgjit[gguf]')")
pytest.importorskip("safetensors", reason="generate.py reads safetensors checkpoints (pip install 'wgjit[examples]')")

from examples import generate as G  # noqa: E402
from examples import llama as L  # noqa: E402
from tests.gguf_files import (  # noqa: E402
    encode,
    llama_meta,
    llama_tensors,
    permute_for_ggml_rope,
    write_gguf,
    write_llama_gguf,
)
from tests.test_generate import PROMPT, np_greedy, np_logits, tiny_config  # noqa: E402

pytestmark = pytest.mark.gpu


def config(tied: bool = False, **kw: object) -> L.LlamaConfig:
    return tiny_config("LlamaForCausalLM", tied, **({"ff": 64} | kw))  # rows of 64: whole blocks of 32


def dequantized(w: dict[str, np.ndarray], kind: str) -> dict[str, np.ndarray]:
    """What a file holding `w` with its matrices in GGML type `kind` holds, as float32."""
    if kind == "F32":
        return w
    qtype = gguf.GGMLQuantizationType[kind]
    return {
        n: gguf.quants.dequantize(gguf.quants.quantize(v, qtype), qtype).reshape(v.shape) if v.ndim == 2 else v
        for n, v in w.items()
    }


def prompt_logits(path: Path, **load: object) -> G.Result:
    return G.Generator.load(path, **load).generate(PROMPT, 4, want_prompt_logits=True, stop_at_eos=False)


# --- the permutation, against llama.cpp's rope --------------------------------------------------


def test_permutation_matches_ggml_rope(rng: np.random.Generator) -> None:
    """Rotating adjacent pairs (llama.cpp) of the permuted weights' output is rotating i with i + d/2
    (Hugging Face) of the original's, element 2i and 2i + 1 holding i and i + d/2."""
    heads, hd, t = 3, 8, 5
    w = rng.standard_normal((heads * hd, 16))
    x = rng.standard_normal((t, 16))
    theta = np.arange(t)[:, None] * 10000.0 ** (-np.arange(0, hd, 2) / hd)[None, :]
    cos, sin = np.cos(theta)[:, None], np.sin(theta)[:, None]
    hf = (x @ w.T).reshape(t, heads, hd)
    a, b = hf[..., : hd // 2], hf[..., hd // 2 :]
    hf_rot = np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)
    gg = (x @ permute_for_ggml_rope(w, heads).T).reshape(t, heads, hd)
    even, odd = gg[..., 0::2], gg[..., 1::2]
    gg_rot = np.stack([even * cos - odd * sin, even * sin + odd * cos], -1).reshape(t, heads, hd)
    np.testing.assert_allclose(gg_rot[..., 0::2], hf_rot[..., : hd // 2], atol=1e-12)
    np.testing.assert_allclose(gg_rot[..., 1::2], hf_rot[..., hd // 2 :], atol=1e-12)
    # and examples/llama.py's row order undoes the permutation
    np.testing.assert_array_equal(permute_for_ggml_rope(w, heads)[L.rope_rows(heads, hd)], w)


# --- logits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["F32", "F16", "Q8_0", "Q4_0"])
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_gguf_logits_match_the_hf_folder(tmp_path: Path, kind: str, tied: bool) -> None:
    cfg = config(tied)
    w = L.random_weights(cfg, seed=2, scale=0.2)
    held = dequantized(w, "F32" if kind == "F16" else kind)
    if kind == "F16":
        held = {n: v.astype(np.float16).astype(np.float32) if v.ndim == 2 else v for n, v in held.items()}
    path = write_llama_gguf(tmp_path / "m.gguf", cfg, w, kind)
    L.write_checkpoint(tmp_path / "hf", cfg, held)  # the same values as a Hugging Face folder
    gguf_run, hf_run = prompt_logits(path), prompt_logits(tmp_path / "hf")
    hf = cfg.to_hf()
    np.testing.assert_allclose(gguf_run.prompt_logits, hf_run.prompt_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gguf_run.prompt_logits, np_logits(held, hf, PROMPT), rtol=1e-4, atol=1e-4)
    assert gguf_run.ids == np_greedy(held, hf, PROMPT, 4)
    if kind.startswith("Q"):  # and near the float model, within the format's error
        scale = np.abs(np_logits(w, hf, PROMPT)).max()
        err = np.abs(gguf_run.prompt_logits - np_logits(w, hf, PROMPT)).max()
        assert err < (0.05 if kind == "Q8_0" else 0.5) * scale


def test_gguf_keeps_quantized_weights_on_the_gpu(tmp_path: Path) -> None:
    cfg = config()
    path = write_llama_gguf(tmp_path / "m.gguf", cfg, L.random_weights(cfg, 0, 0.2), "Q4_0")
    gen = G.Generator.load(path)
    dtypes = {n: t.dtype for n, t in gen.weights.items()}
    assert dtypes["model.layers.0.self_attn.q_proj.weight"] is G.tr.q4_0
    assert dtypes["model.embed_tokens.weight"] is G.tr.q4_0
    assert dtypes["model.norm.weight"] is G.tr.float32
    model = gen.model(64)
    ids = G.tr.tensor(np.array([[3]], np.int32))
    pos = G.tr.tensor(np.array([0], np.int32))
    kernels = [d.kernel for d in G.tr.compile(model.step(ids, pos, *model.empty_cache().tensors())[0]).dispatches]
    # per layer: q, k, v (norm folded) and gate, up read as blocks by gemv_multi; o and down by qgemv;
    # the final norm and the head: gemv_multi
    assert kernels.count("qgemv") == 2 * cfg.layers and kernels.count("gemv_multi") == 2 * cfg.layers + 1
    assert kernels.count("qgather") == 1 and "dequant" not in kernels and "gemv" not in kernels


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_quantize_on_load(tmp_path: Path, fmt: str) -> None:
    """--quantize: the folder's matrices quantized by tr.quantize (llama.cpp's rounding) as they load."""
    cfg = config()
    w, hf = L.random_weights(cfg, seed=4, scale=0.2), cfg.to_hf()
    L.write_checkpoint(tmp_path, cfg, w)
    held = dequantized(w, fmt.upper())
    for mode in G.MODES:
        res = prompt_logits(tmp_path, quantize=fmt, mode=mode)
        np.testing.assert_allclose(res.prompt_logits, np_logits(held, hf, PROMPT), rtol=1e-4, atol=1e-4)
        assert res.ids == np_greedy(held, hf, PROMPT, 4), mode
    out = tmp_path / "out.json"
    rc = G.main(["--model", str(tmp_path), "--quantize", fmt, "--prompt-ids", "3,17,45", "--max-new-tokens", "2",
                 "--json", str(out)])  # fmt: skip
    assert rc == 0 and json.loads(out.read_text())["ids"] == np_greedy(held, hf, [3, 17, 45], 2)


def test_cli_with_a_gguf_file(tmp_path: Path) -> None:
    cfg = config()
    w = L.random_weights(cfg, seed=5, scale=0.2)
    path = write_llama_gguf(tmp_path / "m.gguf", cfg, w, "Q8_0")
    held = dequantized(w, "Q8_0")
    out = tmp_path / "out.json"
    assert G.main(["--model", str(path), "--prompt-ids", "3,17,45", "--max-new-tokens", "3", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    np.testing.assert_allclose(got["prompt_logits"], np_logits(held, cfg.to_hf(), [3, 17, 45]), rtol=1e-4, atol=1e-4)
    assert got["ids"] == np_greedy(held, cfg.to_hf(), [3, 17, 45], 3)
    # --prompt without a tokenizer in the file: a clear message
    assert G.main(["--model", str(path), "--prompt", "hello"]) == 2


def test_against_transformers_gguf_reader(tmp_path: Path) -> None:
    """transformers reads the same GGUF file with its own code (names, metadata, the q/k permutation)."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the transformers check is skipped")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = config(heads=4, kv_heads=2, head_dim=8)
    path = write_llama_gguf(tmp_path / "m.gguf", cfg, L.random_weights(cfg, seed=6, scale=0.2), "F32")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf").eval()
    except Exception as e:  # noqa: BLE001  (its GGUF support varies by version)
        pytest.skip(f"transformers could not read the GGUF file: {e}")
    with torch.no_grad():
        theirs = model(torch.tensor([PROMPT])).logits[0].float().numpy()
    np.testing.assert_allclose(prompt_logits(path).prompt_logits, theirs, rtol=1e-4, atol=1e-4)


# --- tokenizers from the file's metadata ------------------------------------------------------------


def test_sentencepiece_tokenizer_from_metadata() -> None:
    pytest.importorskip("tokenizers")
    pieces = ["<unk>", "<s>", "</s>", "\u2581", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "\u2581he", "llo",
              "\u2581hello", "\u2581w", "or", "ld", "\u2581wor", "\u2581world", "<0x21>"]  # fmt: skip
    scores = [0.0, 0.0, 0.0] + [-100.0] * 8 + [-1.0 - i for i in range(10)] + [0.0]
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": pieces, "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": [2, 3, 3] + [1] * 18 + [6], "tokenizer.ggml.bos_token_id": 1}  # fmt: skip
    tok = G.gguf_tokenizer(meta)
    ids = tok.encode("hello world!").ids
    assert ids == [1, pieces.index("\u2581hello"), pieces.index("\u2581world"), pieces.index("<0x21>")]
    assert tok.decode(ids) == "hello world!"


def test_bpe_tokenizer_from_metadata() -> None:
    pytest.importorskip("tokenizers")
    tokens = ["h", "e", "l", "o", "\u0120", "w", "r", "d", "he", "ll", "hell", "hello", "\u0120w", "or", "\u0120wor",
              "ld", "\u0120world", "<|begin|>"]  # fmt: skip
    merges = ["h e", "l l", "he ll", "hell o", "\u0120 w", "o r", "\u0120w or", "l d", "\u0120wor ld"]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.token_type": [1] * 17 + [3], "tokenizer.ggml.bos_token_id": 17,
            "tokenizer.ggml.add_bos_token": True}  # fmt: skip
    tok = G.gguf_tokenizer(meta)
    ids = tok.encode("hello world").ids
    assert ids == [17, tokens.index("hello"), tokens.index("\u0120world")]
    assert tok.decode(ids) == "hello world"
    assert G.gguf_tokenizer({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]}) is None


def test_tokenizer_option_and_gguf_tokenizer_in_generate(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    cfg = config()
    digits = [str(i) for i in range(10)]
    pieces = ["<unk>", "<s>", "</s>", "\u2581", "w", *digits, "\u2581w"] + [f"\u2581w{d}" for d in digits]
    pieces += [f"<extra{i}>" for i in range(cfg.vocab - len(pieces))]
    scores = [0.0] * 15 + [-1.0] + [-2.0 - i for i in range(10)] + [0.0] * (cfg.vocab - 26)
    tok = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": pieces, "tokenizer.ggml.scores": scores,
           "tokenizer.ggml.bos_token_id": 1}  # fmt: skip
    path = write_llama_gguf(tmp_path / "m.gguf", cfg, L.random_weights(cfg, 0, 0.2), "Q8_0", tok)
    gen = G.Generator.load(path)
    want = [1, pieces.index("\u2581w5"), pieces.index("\u2581w7")]
    assert gen.tokenizer.encode("w5 w7").ids == want
    # --tokenizer: a tokenizer.json instead of the file's own
    gen.tokenizer.save(str(tmp_path / "tokenizer.json"))
    other = G.Generator.load(path, tokenizer=tmp_path / "tokenizer.json")
    assert other.tokenizer is not gen.tokenizer and other.tokenizer.encode("w5 w7").ids == want
    out = tmp_path / "out.json"
    assert G.main(["--model", str(path), "--prompt", "w5 w7", "--max-new-tokens", "2", "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())["prompt_logits"]) == 3


# --- bad files --------------------------------------------------------------------------------


def test_clear_errors_for_bad_gguf_checkpoints(tmp_path: Path) -> None:
    cfg = config()
    w = L.random_weights(cfg, 0, 0.2)

    def variant(name: str, meta_edit: dict | None = None, drop: str | None = None, cut: str | None = None) -> str:
        tensors = llama_tensors(cfg, w)
        if drop:
            del tensors[drop]
        if cut:
            tensors[cut] = (tensors[cut][0][:-1], None)
        path = write_gguf(tmp_path / name, tensors, llama_meta(cfg) | (meta_edit or {}))
        with pytest.raises(L.CheckpointError) as err:
            G.Generator.load(path)
        return str(err.value)

    assert "general.architecture is 'gpt2'" in variant("a.gguf", {"general.architecture": "gpt2"})
    msg = variant("b.gguf", drop="blk.1.ffn_up.weight")
    assert "model.layers.1.mlp.up_proj.weight" in msg and "missing" in msg
    msg = variant("c.gguf", cut="blk.0.attn_v.weight")
    assert "model.layers.0.self_attn.v_proj.weight" in msg and "(15, 32)" in msg and "(16, 32)" in msg
    msg = variant("d.gguf", cut="blk.0.attn_k.weight")  # checked before its rows are rearranged
    assert "blk.0.attn_k.weight" in msg and "(15, 32)" in msg
    tensors = {"token_embd.weight": encode(w["model.embed_tokens.weight"], "F32")}
    bad = write_gguf(tmp_path / "f.gguf", tensors, {"general.architecture": "llama"})
    with pytest.raises(L.CheckpointError, match="metadata llama.attention.head_count is missing"):
        G.Generator.load(bad)
    good = write_llama_gguf(tmp_path / "ok.gguf", cfg, w)
    (tmp_path / "g.gguf").write_bytes(good.read_bytes()[:-50])
    with pytest.raises(L.CheckpointError, match="truncated"):
        G.Generator.load(tmp_path / "g.gguf")
    with pytest.raises(L.CheckpointError, match="--quantize 'q2'"):
        G.Generator.load(good, quantize="q2")
    assert G.main(["--model", str(tmp_path / "g.gguf"), "--prompt-ids", "1,2"]) == 2


# --- Q4_K: llama.cpp's most common matrices, kept as q4_k blocks --------------------------------


def q4_k_config() -> L.LlamaConfig:
    return config(dim=256, ff=512, head_dim=64)  # every matrix row whole super-blocks of 256


def test_q4_k_file_stays_quantized_and_matches_numpy(tmp_path: Path) -> None:
    """Every matrix of a Q4_K file stays q4_k on the GPU, read by qgather, gemv_multi and qgemv (decode), qgemm_thin (prefill),
    and the logits are numpy's of the values gguf reads from the file; --quantize q4_k of the same
    weights as a folder gives the same blocks, so the same logits."""
    cfg, mode = q4_k_config(), G.MODES[0]
    w, hf = L.random_weights(cfg, seed=5, scale=0.2), cfg.to_hf()
    held = {n: gguf.quants.dequantize(*encode(v, "Q4_K")).reshape(v.shape) if v.ndim == 2 else v for n, v in w.items()}
    path = write_llama_gguf(tmp_path / "m.gguf", cfg, w, "Q4_K")
    gen = G.Generator.load(path)
    dtypes = {n: t.dtype for n, t in gen.weights.items()}
    assert dtypes["model.layers.0.self_attn.q_proj.weight"] is G.tr.q4_k
    assert dtypes["model.layers.1.mlp.down_proj.weight"] is G.tr.q4_k
    assert dtypes["model.embed_tokens.weight"] is G.tr.q4_k and dtypes["lm_head.weight"] is G.tr.q4_k
    assert dtypes["model.norm.weight"] is G.tr.float32
    res = gen.generate(PROMPT, 4, want_prompt_logits=True, stop_at_eos=False)
    want = np_logits(held, hf, PROMPT)
    np.testing.assert_allclose(res.prompt_logits, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert res.ids == np_greedy(held, hf, PROMPT, 4)
    # as for Q4_0: per layer q, k, v (norm folded) and gate, up read as blocks by gemv_multi; o and down by
    # qgemv; the final norm and the head: gemv_multi
    assert_quantized_step(gen, cfg)
    L.write_checkpoint(tmp_path / "hf", cfg, w)
    folder = prompt_logits(tmp_path / "hf", quantize="q4_k", mode=mode)
    np.testing.assert_allclose(folder.prompt_logits, res.prompt_logits, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_quantize_q4_k_needs_rows_of_256(tmp_path: Path) -> None:
    cfg = config()  # rows of 32 and 64
    L.write_checkpoint(tmp_path, cfg, L.random_weights(cfg, 0, 0.2))
    with pytest.raises(L.CheckpointError, match=r"--quantize q4_k: tensor .* has rows of 32, not whole blocks of 256"):
        G.Generator.load(tmp_path, quantize="q4_k")


# --- Q4_K_M: Q4_K matrices with a Q6_K head, attn_v and some ffn_down, all kept as blocks ---------------


def q4_k_m_file(
    path: Path, cfg: L.LlamaConfig, w: dict[str, np.ndarray], six: list[str] | None = None
) -> tuple[Path, dict[str, np.ndarray]]:
    """A file laid out like llama.cpp's Q4_K_M mix: Q4_K matrices, but Q6_K for `six` (by default the output
    head (the token embedding when tied), every attn_v and layer 0's ffn_down); and the values gguf reads
    from it by HF name."""
    tensors = llama_tensors(cfg, w, "Q4_K")
    if six is None:
        six = [f"model.layers.{i}.self_attn.v_proj.weight" for i in range(cfg.layers)]
        six += ["model.layers.0.mlp.down_proj.weight"]
        six += ["model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"]
    for name in six:
        gname = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight"}.get(name)
        if gname is None:
            _, _, layer, rest = name.split(".", 3)
            gname = f"blk.{layer}.{'attn_v' if 'v_proj' in rest else 'ffn_down'}.weight"
        assert gname in tensors
        tensors[gname] = encode(w[name], "Q6_K")
    held = {
        n: gguf.quants.dequantize(*encode(v, "Q6_K" if n in six else "Q4_K")).reshape(v.shape) if v.ndim == 2 else v
        for n, v in w.items()
    }
    return write_gguf(path, tensors, llama_meta(cfg)), held


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_q4_k_m_file_keeps_q6_k_and_matches_numpy(tmp_path: Path, tied: bool) -> None:
    """The Q6_K tensors of a Q4_K_M-like file stay q6_k (a tied q6_k embedding is read by qgather and as the
    head by gemv_multi), no weight becomes float32, and the logits and greedy ids are numpy's on gguf's values."""
    cfg = config(tied, dim=256, ff=512, head_dim=64)
    w, hf = L.random_weights(cfg, seed=7, scale=0.2), cfg.to_hf()
    path, held = q4_k_m_file(tmp_path / "m.gguf", cfg, w)
    gen = G.Generator.load(path)
    dtypes = {n: t.dtype for n, t in gen.weights.items()}
    assert dtypes["model.layers.0.self_attn.q_proj.weight"] is G.tr.q4_k
    assert dtypes["model.layers.1.mlp.down_proj.weight"] is G.tr.q4_k
    assert dtypes["model.layers.0.mlp.down_proj.weight"] is G.tr.q6_k
    assert dtypes["model.layers.1.self_attn.v_proj.weight"] is G.tr.q6_k
    head = "model.embed_tokens.weight" if tied else "lm_head.weight"
    assert dtypes[head] is G.tr.q6_k and ("lm_head.weight" in dtypes) != tied
    assert all(t.is_quantized for n, t in dtypes.items() if n.endswith("proj.weight"))
    res = gen.generate(PROMPT, 4, want_prompt_logits=True, stop_at_eos=False)
    want = np_logits(held, hf, PROMPT)
    np.testing.assert_allclose(res.prompt_logits, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert res.ids == np_greedy(held, hf, PROMPT, 4)
    # as for Q4_K files: per layer q, k (q4_k) and v (q6_k) with the norm folded, and gate, up, read as blocks by
    # gemv_multi; o and down (q6_k in layer 0) by qgemv; the final norm and the q6_k head: gemv_multi
    assert_quantized_step(gen, cfg)


def assert_quantized_step(gen: G.Generator, cfg: L.LlamaConfig) -> None:
    """A decode step of quantized weights: per layer q/k/v and gate/up as gemv_multi groups (norm folded), o and
    down by qgemv, the final norm and the head one more group, the embedding by qgather; nothing dequantized."""
    model = gen.model(64)
    ids = G.tr.tensor(np.array([[3]], np.int32))
    pos = G.tr.tensor(np.array([0], np.int32))
    kernels = [d.kernel for d in G.tr.compile(model.step(ids, pos, *model.empty_cache().tensors())[0]).dispatches]
    assert kernels.count("qgemv") == 2 * cfg.layers and kernels.count("gemv_multi") == 2 * cfg.layers + 1, kernels
    assert kernels.count("qgather") == 1 and "dequant" not in kernels and "gemv" not in kernels


def test_quantize_q6_k_folder_matches_its_gguf(tmp_path: Path) -> None:
    """--quantize q6_k of a folder makes the blocks a Q6_K file of the same weights holds: the same logits."""
    cfg = config(dim=256, ff=512, head_dim=64)
    w = L.random_weights(cfg, seed=3, scale=0.2)
    gen = G.Generator.load(write_llama_gguf(tmp_path / "m.gguf", cfg, w, "Q6_K"))
    assert {t.dtype for n, t in gen.weights.items() if n.endswith("proj.weight")} == {G.tr.q6_k}
    res = gen.generate(PROMPT, 4, want_prompt_logits=True, stop_at_eos=False)
    L.write_checkpoint(tmp_path / "hf", cfg, w)
    folder = prompt_logits(tmp_path / "hf", quantize="q6_k")
    scale = np.abs(res.prompt_logits).max()
    np.testing.assert_allclose(folder.prompt_logits, res.prompt_logits, rtol=1e-5, atol=1e-5 * scale)
    assert folder.ids == res.ids


def test_quantize_q6_k_needs_rows_of_256(tmp_path: Path) -> None:
    cfg = config()  # rows of 32 and 64
    L.write_checkpoint(tmp_path, cfg, L.random_weights(cfg, 0, 0.2))
    with pytest.raises(L.CheckpointError, match=r"--quantize q6_k: tensor .* has rows of 32, not whole blocks of 256"):
        G.Generator.load(tmp_path, quantize="q6_k")


def test_quantize_q4_k_m_folder_matches_the_mixed_gguf(tmp_path: Path) -> None:
    """--quantize q4_k_m: q6_k where llama.cpp's Q4_K_M mix puts Q6_K (for 4 layers: the head, and v and down of
    layer 3, the last eighth, and layer 2, every third from the first eighth's end), q4_k elsewhere; the same logits and ids as a GGUF file of
    that mix, and as numpy on gguf's values."""
    cfg = config(dim=256, ff=512, head_dim=64, layers=4)
    w, hf = L.random_weights(cfg, seed=11, scale=0.2), cfg.to_hf()
    six = [n for n in L.quantized_names(cfg) if L.format_of("q4_k_m", n, cfg) is G.tr.q6_k]
    assert sorted(six) == sorted(
        ["lm_head.weight"]
        + [f"model.layers.{i}.{m}.weight" for i in (2, 3) for m in ("self_attn.v_proj", "mlp.down_proj")]
    )
    eight = config(layers=8)  # the first and last eighths (layers 0 and 7), every third between (3, 6)
    mixed = {
        int(n.split(".")[2])
        for n in L.quantized_names(eight)
        if L.format_of("q4_k_m", n, eight) is G.tr.q6_k and "layers" in n
    }
    assert mixed == {0, 3, 6, 7}
    path, held = q4_k_m_file(tmp_path / "m.gguf", cfg, w, six)
    L.write_checkpoint(tmp_path / "hf", cfg, w)
    folder = G.Generator.load(tmp_path / "hf", quantize="q4_k_m")
    gguf_gen = G.Generator.load(path)
    for name, t in gguf_gen.weights.items():
        assert folder.weights[name].dtype is t.dtype, name
    res = gguf_gen.generate(PROMPT, 4, want_prompt_logits=True, stop_at_eos=False)
    mine = folder.generate(PROMPT, 4, want_prompt_logits=True, stop_at_eos=False)
    want = np_logits(held, hf, PROMPT)
    np.testing.assert_allclose(res.prompt_logits, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    np.testing.assert_allclose(mine.prompt_logits, res.prompt_logits, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert mine.ids == res.ids == np_greedy(held, hf, PROMPT, 4)
