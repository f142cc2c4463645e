"""How does this adapter bound shader loops? A diagnosis aid, raw wgpu (no wgjit).

    python tests/probe_loop_limit.py

Mesa's llvmpipe (lavapipe) gives each invocation one budget of 65,535 loop iterations for
the whole shader: every iteration of every loop counts, nested inner loops (with their exit
test) and loops one after another alike, and once it is spent every loop exits at once, so
later loops (a workgroup tree) run no iteration at all. A loop of n iterations costs n + 1
(its exit test counts), so "nested 70,000 x 1" stops after 65,535 / 3. Unrolled work inside one iteration
is free. wgjit's kernels therefore keep the sum of their loops' iterations per thread below
the budget (backend_wgpu/kernels/blocks.py: LOOP_BUDGET). The H200's driver has no such
limit: every count below is exact there.
"""

from __future__ import annotations

import numpy as np
import wgpu

LOOP = "for (var i = 0u; i < p.n; i++) { c += 1u; }"
NESTED = "for (var i = 0u; i < p.n; i++) { for (var j = 0u; j < p.m; j++) { c += 1u; } }"
PROBES = [  # (what, loop code, n, m, what an unbounded loop counts)
    ("one loop of 65,535", LOOP, 65535, 0, 65535),
    ("one loop of 70,000", LOOP, 70000, 0, 70000),
    ("nested 300 x 300", NESTED, 300, 300, 90000),
    ("nested 2 x 70,000", NESTED, 2, 70000, 140000),
    ("nested 70,000 x 1", NESTED, 70000, 1, 70000),
    ("two loops of 40,000", LOOP + " for (var i = 0u; i < p.m; i++) { c += 1u; }", 40000, 40000, 80000),
    ("loop { break } 70,000", "var i = 0u; loop { if (i >= p.n) { break; } c += 1u; i++; }", 70000, 0, 70000),
    ("70,000 x 4 unrolled", "for (var i = 0u; i < p.n; i++) { c += 1u; c += 1u; c += 1u; c += 1u; }", 70000, 0, 280000),
]


def run(device: wgpu.GPUDevice, body: str, n: int, m: int) -> int:
    code = f"""
struct P {{ n: u32, m: u32 }};
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(1)
fn main() {{
  var c = 0u;
  {body}
  out[0] = c;
}}"""
    module = device.create_shader_module(code=code)
    pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    out = device.create_buffer(size=4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    params = np.array([n, m, 0, 0], np.uint32).tobytes()
    uniform = device.create_buffer_with_data(data=params, usage=wgpu.BufferUsage.UNIFORM)
    entries = [{"binding": 0, "resource": {"buffer": out}}, {"binding": 1, "resource": {"buffer": uniform}}]
    group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
    encoder = device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(1)
    compute.end()
    device.queue.submit([encoder.finish()])
    return int(np.frombuffer(device.queue.read_buffer(out), np.uint32)[0])


def main() -> None:
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    print(f"{adapter.info['device']} ({adapter.info['backend_type']})")
    device = adapter.request_device_sync()
    for what, body, n, m, exact in PROBES:
        got = run(device, body, n, m)
        print(f"  {what:<24} counted {got:>7}  (exact: {exact}){'' if got == exact else '  <- cut short'}")


if __name__ == "__main__":
    main()
