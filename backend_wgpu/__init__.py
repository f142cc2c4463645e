"""The wgpu backend: turns a scheduled ir.Graph into WGSL kernels and runs them.

device.py owns the adapter, device, buffers and the pipeline cache; wgsl.py is the
small WGSL builder; kernel.py the Kernel contract (ratchet's Kernel/KernelRenderable);
kernels/ the concrete kernels and their registry; program.py compiles a graph into
one-submission Programs.

Only device.py, program.py and profile.py import wgpu. The names below load them on first
use (PEP 562), so the passes can ask the kernels' declared facts (backend_wgpu.kernels)
without importing wgpu or creating a device.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Device": "backend_wgpu.device",
    "DeviceBuffer": "backend_wgpu.device",
    "get_device": "backend_wgpu.device",
    "list_adapters": "backend_wgpu.device",
    "Dispatch": "backend_wgpu.program",
    "Program": "backend_wgpu.program",
    "compile_program": "backend_wgpu.program",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'backend_wgpu' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
