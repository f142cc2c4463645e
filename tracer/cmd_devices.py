"""`wgjit devices`: the adapters wgpu can see, and which one wgjit would use."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list WebGPU adapters with backend and features")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backend_wgpu.device import list_adapters

    adapters = list_adapters()
    if args.json:
        print(json.dumps(adapters, indent=2))
        return 0 if adapters else 1
    if not adapters:
        print("no WebGPU adapter found; on a machine without a GPU: sudo apt-get install mesa-vulkan-drivers")
        return 1
    for a in adapters:
        feats = ", ".join(f for f in a["features"] if f.startswith(("shader-f16", "subgroup", "timestamp")))
        print(f"[{a['index']}] {a['name']}  ({a['backend']}, {a['type']})")
        print(f"    max storage binding {a['max_storage_binding'] >> 20} MiB; {feats}")
    from backend_wgpu import get_device

    caps = get_device().caps
    print(f"wgjit uses: {caps.name} ({caps.backend}); set WGJIT_ADAPTER=<index or name> to choose")
    return 0
