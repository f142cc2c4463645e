"""The wgpu backend: turns a scheduled ir.Graph into WGSL kernels and runs them.

device.py owns the adapter, device, buffers and the pipeline cache; wgsl.py is the
small WGSL builder; kernel.py the Kernel contract (ratchet's Kernel/KernelRenderable);
kernels/ the concrete kernels; program.py compiles a graph into one-submission Programs.
"""

from backend_wgpu.device import Device, DeviceBuffer, get_device, list_adapters
from backend_wgpu.program import Dispatch, Program, compile_program

__all__ = ["Device", "DeviceBuffer", "Dispatch", "Program", "compile_program", "get_device", "list_adapters"]
