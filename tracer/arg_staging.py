"""One reused GPU buffer for the host-data arguments of a jit replay.

A loop that calls a jitted function with fresh host data (`f(tr.tensor(ids), tr.tensor(mask))`,
a token id and a position per decoded token) would upload each argument into a new GPU buffer,
and every dispatch that reads one would need a new bind group: on a fast GPU that host work
costs more than the kernels. Instead, a replay writes such arguments into one buffer the trace
keeps, each at a fixed offset (aligned as storage bindings must be), with one queue write; the program's bind groups
for those inputs are then the same on every call and come from its plan cache.

The argument Tensors themselves are untouched: they keep their host data and upload it only if
something else reads them later, so nothing aliases the reused buffer. Overwriting it on the
next call is safe: queue writes are ordered after the work submitted before them.
"""

from __future__ import annotations

import numpy as np

from backend_wgpu.device import Device, DeviceBuffer

_STORED = {np.dtype(np.bool_): np.dtype(np.uint32)}  # host dtype -> buffer dtype where they differ
STAGED_ARGUMENT_BYTES = 1 << 20  # larger host arguments get their own buffer, as an upload would


class ArgumentStaging:
    """The reused buffer of one trace, laid out for the sizes of the arguments it last held."""

    def __init__(self) -> None:
        self._layout: tuple[int, ...] = ()  # bytes per staged argument
        self._offsets: list[int] = []
        self._buffer: DeviceBuffer | None = None
        self._views: list[DeviceBuffer] = []  # a view of the buffer per argument (the same objects every call)
        self._blob = np.zeros(0, np.uint8)

    @staticmethod
    def wanted(array: np.ndarray) -> bool:
        return array.nbytes <= STAGED_ARGUMENT_BYTES

    def write(self, device: Device, arrays: list[np.ndarray]) -> list[DeviceBuffer]:
        """Write `arrays` into the buffer (one queue write); a DeviceBuffer view of each, in order."""
        stored = [_STORED.get(a.dtype, a.dtype) for a in arrays]  # bool as u32, as a buffer holds it
        layout = tuple(a.size * t.itemsize for a, t in zip(arrays, stored, strict=True))
        if layout != self._layout or self._buffer is None or self._buffer.device is not device:
            self._allocate(device, layout)
        blob = self._blob
        for offset, n, a, t in zip(self._offsets, layout, arrays, stored, strict=True):
            blob[offset : offset + n].view(t)[:] = a.reshape(-1)  # straight into the blob: one host copy
        assert self._buffer is not None
        device.write(self._buffer, blob)
        return list(self._views)

    def _allocate(self, device: Device, layout: tuple[int, ...]) -> None:
        align = device.caps.storage_align  # where a storage binding may start
        offsets, end = [], 0
        for n in layout:
            offsets.append(end)
            end += -(-max(n, 4) // align) * align
        self._layout, self._offsets = layout, offsets
        self._buffer = device.alloc(end)
        self._blob = np.zeros(end, np.uint8)
        raw = self._buffer.buffer
        self._views = [
            DeviceBuffer(raw, n, device, o, max(4, (n + 3) & ~3)) for o, n in zip(offsets, layout, strict=True)
        ]
