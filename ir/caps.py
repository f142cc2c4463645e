"""What the device can do, as plain data: passes read it, the backend fills it in."""

from __future__ import annotations

from dataclasses import dataclass, field

from ir.tuning import TuningTable


@dataclass(frozen=True)
class DeviceCaps:
    name: str = "reference"
    backend: str = "none"
    shader_f16: bool = True
    subgroups: bool = False
    subgroup_size: int = 0
    timestamps: bool = False
    max_storage_binding: int = 128 << 20
    max_storage_buffers_per_stage: int = 8
    max_workgroup_storage: int = 16384
    max_invocations: int = 256
    uniform_align: int = 256
    storage_align: int = 256  # min storage buffer offset alignment (binding ranges of one buffer)
    max_workgroups_per_dim: int = 65535
    driver: str = ""  # the adapter's driver description (keys the tuning cache with name and backend)
    # configurations `wgjit tune` measured on this adapter (backend_wgpu/autotune.py); empty: built-in rules
    tuning: TuningTable = field(default_factory=TuningTable)

    def key(self) -> tuple:
        return (
            self.name,
            self.backend,
            self.shader_f16,
            self.subgroup_size,
            self.max_storage_binding,
            self.tuning.digest(),
        )
