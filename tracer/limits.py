"""Device limits a traced tensor must respect, checked at the call that makes the tensor.

Tracing does not touch the GPU for ordinary tensors: a binding under WebGPU's default
limit (128 MiB, which every adapter offers) and a non-float16 dtype need no device. Only
past that, or for float16, the device is asked (and created if it was not yet).
"""

from __future__ import annotations

from backend_wgpu import get_device
from ir.dtypes import DType
from ir.errors import DeviceError, DTypeError
from ir.graph import Graph

LARGEST_SAFE_BINDING = 128 << 20  # WebGPU's default max storage binding: every adapter has it


def check_binding_size(op: str, shape: tuple[int, ...], dtype: DType, nbytes: int) -> None:
    """Raise when one tensor needs more bytes than this device can bind at once."""
    if nbytes <= LARGEST_SAFE_BINDING:
        return
    limit = get_device().caps.max_storage_binding
    if nbytes > limit:
        raise DeviceError(
            f"{op}: a tensor of shape {tuple(shape)} {dtype.value} needs {nbytes} bytes, over this device's "
            f"max storage binding size of {limit} bytes; split the work into smaller tensors"
        )


def check_float16(op: str, shape: tuple[int, ...]) -> None:
    """Raise at the call that makes a float16 tensor when the adapter cannot run float16."""
    caps = get_device().caps
    if not caps.shader_f16:
        raise DTypeError(
            f"{op}: a float16 tensor of shape {tuple(shape)} needs the adapter feature shader-f16, which "
            f"{caps.name} lacks; use float32 (or another adapter: WGJIT_ADAPTER, `wgjit devices`)"
        )


def check_graph_features(graph: Graph) -> None:
    """The last line of defence before compiling: every dtype in the graph runs on this adapter."""
    caps = get_device().caps
    if not caps.shader_f16 and any(n.dtype is DType.float16 for n in graph):
        raise DTypeError(f"float16 needs the adapter feature shader-f16, which {caps.name} lacks; use float32")


def max_storage_buffers() -> int:
    """Storage buffers one kernel may bind on this device (WebGPU guarantees 8)."""
    return get_device().caps.max_storage_buffers_per_stage


def float16_supported() -> bool:
    """Whether this adapter runs float16 (the feature shader-f16); asks the device."""
    return get_device().caps.shader_f16
