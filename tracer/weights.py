"""Loading model weights from safetensors files into lazily uploaded tensors."""

from __future__ import annotations

import logging
import os

import numpy as np

from ir.errors import DTypeError
from tracer.factories import tensor
from tracer.tensor import Tensor

log = logging.getLogger("wgjit")

# safetensors dtypes we can hold as they are; BF16 is widened to float32 (WGSL has no bf16)
_DIRECT = {"F32", "F16", "I32", "U32", "BOOL", "I64", "I16", "I8", "U8", "U16", "F64"}


def _bf16_to_f32(raw: bytes, shape: list[int]) -> np.ndarray:
    """bfloat16 is the top half of a float32: shift the 16 bits up, exactly."""
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(shape)


def load_safetensors(path: str | os.PathLike) -> dict[str, Tensor]:
    """Every tensor of a .safetensors file by name, uploaded to the GPU when first used.

    float32 and float16 stay as they are; bfloat16 becomes float32 (logged once per file,
    on the "wgjit" logger); integers follow tr.tensor's rules (int64 becomes int32 when it
    fits); float64 becomes float32.
    """
    try:
        import safetensors
        from safetensors import safe_open
    except ImportError as e:
        raise ImportError("load_safetensors needs the safetensors package: pip install 'wgjit[examples]'") from e

    out: dict[str, Tensor] = {}
    bf16: list[str] = []
    with safe_open(os.fspath(path), framework="numpy") as f:
        order = list(f.keys())
        for name in order:
            kind = f.get_slice(name).get_dtype()
            if kind == "BF16":
                bf16.append(name)
            elif kind in _DIRECT:
                out[name] = tensor(f.get_tensor(name))
            else:
                raise DTypeError(
                    f"load_safetensors: tensor {name!r} in {path} has dtype {kind}, which wgjit cannot hold"
                )
    if bf16:
        # the numpy API cannot return bfloat16; the package's deserialize gives the raw bytes
        wanted = set(bf16)
        with open(path, "rb") as fh:
            raw = {name: spec for name, spec in safetensors.deserialize(fh.read()) if name in wanted}
        for name in bf16:
            out[name] = tensor(_bf16_to_f32(bytes(raw[name]["data"]), raw[name]["shape"]))
        log.info(
            "load_safetensors: %d bfloat16 tensors in %s were converted to float32 (%s...)", len(bf16), path, bf16[0]
        )
    return {name: out[name] for name in order}  # the file's order
