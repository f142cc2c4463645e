"""tr.load_gguf and tr.gguf_metadata on GGUF files written by the gguf package, and bad files.

Files are written in the test with GGUFWriter (tests/gguf_files.py); expected values come
from gguf.quants, the package llama.cpp's Python tools use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer as tr

gguf = pytest.importorskip("gguf", reason="GGUF files need the gguf package (pip install 'wgjit[gguf]')")

from tests.gguf_files import encode, write_gguf  # noqa: E402

pytestmark = pytest.mark.gpu


def k_quant_blocks(kind: str, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Random Q4_K / Q6_K blocks (256 values each) whose f16 scales are small finite numbers."""
    qtype = gguf.GGMLQuantizationType[kind]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, size), dtype=np.uint8)
    scale = np.array([0.01], np.float16).view(np.uint8)
    positions = (0, 2) if kind == "Q4_K" else (size - 2,)  # Q4_K: d, dmin first; Q6_K: d last
    for p in positions:
        raw[:, p : p + 2] = scale
    return raw


@pytest.fixture
def mixed_file(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    values = {
        "f32": rng.standard_normal((3, 64)).astype(np.float32),
        "f16": rng.standard_normal((2, 8)).astype(np.float32),
        "bf16": rng.standard_normal((4, 16)).astype(np.float32),
        "q8": rng.standard_normal((5, 64)).astype(np.float32),
        "q4": rng.standard_normal((6, 96)).astype(np.float32),
        "vec": rng.standard_normal(7).astype(np.float32),
        "ids": np.arange(4, dtype=np.int32) - 2,
    }
    tensors = {
        "f32": encode(values["f32"], "F32"),
        "f16": encode(values["f16"], "F16"),
        "bf16": encode(values["bf16"], "BF16"),
        "q8": encode(values["q8"], "Q8_0"),
        "q4": encode(values["q4"], "Q4_0"),
        "vec": encode(values["vec"], "F32"),
        "ids": encode(values["ids"], "I32"),
        "q4k": (k_quant_blocks("Q4_K", 2, rng), gguf.GGMLQuantizationType.Q4_K),
        "q6k": (k_quant_blocks("Q6_K", 3, rng), gguf.GGMLQuantizationType.Q6_K),
    }
    meta = {"general.architecture": "llama", "general.name": "mixed", "test.count": 7, "test.scale": 0.5,
            "test.list": [1, 2, 3], "test.words": ["a", "bc"]}  # fmt: skip
    return write_gguf(tmp_path / "mixed.gguf", tensors, meta), tensors


def dequantized(data: np.ndarray, qtype) -> np.ndarray:  # noqa: ANN001
    return gguf.quants.dequantize(data, qtype)


def test_every_type_loads_with_numpy_order(mixed_file: tuple[Path, dict], device) -> None:
    path, tensors = mixed_file
    got = tr.load_gguf(path)
    assert list(got) == list(tensors)  # the file's order
    for name, (data, qtype) in tensors.items():
        t = got[name]
        want = data if qtype is None else dequantized(data, qtype)
        assert t.shape == want.shape, name  # (out, in): GGUF's reversed dims turned back
        if name in ("q8", "q4", "q4k", "q6k"):  # Q4_K and Q6_K stay quantized too
            assert t.dtype is {"q8": tr.q8_0, "q4": tr.q4_0, "q4k": tr.q4_k, "q6k": tr.q6_k}[name]
            np.testing.assert_array_equal(t.astype(tr.float32).numpy(), want)
        elif name == "f16":
            assert t.dtype is (tr.float16 if device.caps.shader_f16 else tr.float32)
            np.testing.assert_array_equal(t.numpy().astype(np.float32), data.astype(np.float32))
        elif name == "ids":
            assert t.dtype is tr.int32
            np.testing.assert_array_equal(t.numpy(), data)
        else:
            assert t.dtype is tr.float32, name
            np.testing.assert_array_equal(t.numpy(), want.astype(np.float32))


def test_dequantize_on_load(mixed_file: tuple[Path, dict]) -> None:
    path, tensors = mixed_file
    got = tr.load_gguf(path, dequantize=True)
    data, qtype = tensors["q8"]
    assert got["q8"].dtype is tr.float32
    np.testing.assert_array_equal(got["q8"].numpy(), dequantized(data, qtype))


def test_metadata(mixed_file: tuple[Path, dict]) -> None:
    meta = tr.gguf_metadata(mixed_file[0])
    assert meta["general.architecture"] == "llama" and meta["general.name"] == "mixed"
    assert meta["test.count"] == 7 and meta["test.scale"] == 0.5
    assert meta["test.list"] == [1, 2, 3] and meta["test.words"] == ["a", "bc"]


def test_loaded_quantized_weight_in_linear(mixed_file: tuple[Path, dict], rng: np.random.Generator) -> None:
    path, tensors = mixed_file
    w = tr.load_gguf(path)["q4"]
    x = rng.standard_normal((2, 96)).astype(np.float32)
    want = x @ dequantized(*tensors["q4"]).T
    np.testing.assert_allclose(tr.nn.linear(tr.tensor(x), w).numpy(), want, rtol=1e-4, atol=1e-4)


# --- bad files: a FormatError naming the file and the tensor ----------------------------------------


def _patch(path: Path, tensor: str, part: int, value: int) -> None:
    """Overwrite one field of a tensor's entry in the file (part 3: dims, 4: type), in place."""
    reader = gguf.GGUFReader(path, "r+")
    entry = next(t for t in reader.tensors if t.name == tensor)
    entry.field.parts[part][0] = value
    reader.data.flush()
    del reader


def test_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGML" + bytes(64))
    with pytest.raises(tr.FormatError, match=r"not a GGUF file: it starts with b'GGML'"):
        tr.load_gguf(path)


def test_truncated_data_names_the_tensor(mixed_file: tuple[Path, dict]) -> None:
    path, _ = mixed_file
    data = path.read_bytes()
    path.write_bytes(data[:-100])  # the last tensor (q6k) loses its end
    with pytest.raises(tr.FormatError, match=r"tensor 'q6k' .* reaches past the end of the file .* truncated"):
        tr.load_gguf(path)


def test_truncated_header(mixed_file: tuple[Path, dict]) -> None:
    path, _ = mixed_file
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(tr.FormatError, match="cannot read the header"):
        tr.load_gguf(path)


def test_unknown_tensor_type_names_the_tensor(mixed_file: tuple[Path, dict]) -> None:
    path, _ = mixed_file
    _patch(path, "q8", 4, 999)
    with pytest.raises(tr.FormatError, match=r"tensor 'q8' .* has tensor type 999"):
        tr.load_gguf(path)


def test_rows_not_whole_blocks_names_the_tensor(mixed_file: tuple[Path, dict]) -> None:
    path, _ = mixed_file
    _patch(path, "q4", 3, 80)  # ne0 = 80: two and a half Q4_0 blocks per row
    with pytest.raises(tr.FormatError, match=r"tensor 'q4' .* rows of 80 values, not whole Q4_0 blocks of 32"):
        tr.load_gguf(path)


def test_type_without_a_dequantizer_names_the_tensor(tmp_path: Path) -> None:
    raw = np.zeros((2, 40), np.uint8)  # Q8_1: 40-byte blocks, an activation format with no dequantizer
    path = write_gguf(tmp_path / "q81.gguf", {"act": (raw, gguf.GGMLQuantizationType.Q8_1)})
    with pytest.raises(tr.FormatError, match=r"tensor 'act' .* is Q8_1, which the installed gguf package cannot"):
        tr.load_gguf(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        tr.load_gguf(tmp_path / "nowhere.gguf")
