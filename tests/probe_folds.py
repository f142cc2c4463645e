"""Which IEEE-breaking rewrites does this adapter's shader compiler make? A diagnosis aid.

    python tests/probe_folds.py

WGSL lets a compiler assume that no NaN or infinity occurs, and drivers use that freedom
differently (lavapipe folds x - x to 0, NVIDIA folds x / x to 1). Each probe below is one
line of WGSL on values from a buffer, printed next to numpy's answer; the unprotected forms
show what the driver does, the `wg_` forms what wgjit's kernels compute. Run it on a new
adapter before trusting NUMERICS.md there; the fuzzer (tests/fuzz_run.py) finds the rest.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import wgpu

from backend_wgpu.kernels import expr
from ir.dtypes import DType
from ir.ops import Op

F32 = DType.float32


def _wg(op: Op, *args: str) -> str:
    """wgjit's WGSL for `op` on f32 operands."""
    return expr.expression(op, list(args), "f32", F32)


# (name, WGSL expression of x (f32) -> f32, numpy reference of x)
PROBES: list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = [
    ("x / x", "x / x", lambda x: x / x),
    ("wgjit x / x", _wg(Op.DIV, "x", "x"), lambda x: x / x),
    ("x % x (fma form)", "fma(-x, trunc(x / x), x)", lambda x: np.fmod(x, x)),
    ("wgjit x % x", _wg(Op.MOD, "x", "x"), lambda x: np.mod(x, x)),
    ("x >= x", "select(0.0, 1.0, x >= x)", lambda x: (x >= x).astype(np.float32)),
    ("wgjit x >= x", f"select(0.0, 1.0, {_wg(Op.GE, 'x', 'x')})", lambda x: (x >= x).astype(np.float32)),
    ("x == x", "select(0.0, 1.0, x == x)", lambda x: (x == x).astype(np.float32)),
    ("f32(f16(x))", "f32(f16(x))", lambda x: x.astype(np.float16).astype(np.float32)),
    (
        "unpack(pack(x))",
        "unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x",
        lambda x: x.astype(np.float16).astype(np.float32),
    ),
    ("log(f16(exp(x)))", "log(f32(f16(exp(x))))", lambda x: np.log(np.exp(x).astype(np.float16).astype(np.float32))),
    ("log(exp(x))", "log(exp(x))", lambda x: np.log(np.exp(x))),
    ("wgjit log(exp(x))", _wg(Op.LOG, _wg(Op.EXP, "x")), lambda x: np.log(np.exp(x))),
    ("sin(x)", "sin(x)", np.sin),
]
VALUES = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 0.60665, -17.88, 100.0, 1e-30, 7e4], np.float32)


def main() -> None:
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    device = adapter.request_device_sync(required_features=["shader-f16"])
    print(f"adapter: {adapter.info['device']} ({adapter.info['backend_type']})")
    helpers = "\n".join({k: v for op in (Op.DIV, Op.MOD) for k, v in expr.helpers(op, "f32", F32).items()}.values())
    for name, code, ref in PROBES:
        shader = f"""enable f16;
@group(0) @binding(0) var<storage, read> xs: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
{helpers}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
  if (gid.x >= arrayLength(&xs)) {{ return; }}
  let x = xs[gid.x];
  out[gid.x] = {code};
}}"""
        got = _run(device, shader, VALUES)
        with np.errstate(all="ignore"):
            want = np.asarray(ref(VALUES), np.float32)
        same = np.array_equal(got, want, equal_nan=True) or np.allclose(got, want, rtol=1e-6, atol=0, equal_nan=True)
        print(f"{'ok  ' if same else 'DIFF'} {name:<20} got  {got}\n     {'':<20} want {want}")


def _run(device: wgpu.GPUDevice, shader: str, xs: np.ndarray) -> np.ndarray:
    module = device.create_shader_module(code=shader)
    pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    src = device.create_buffer_with_data(data=xs.tobytes(), usage=wgpu.BufferUsage.STORAGE)
    dst = device.create_buffer(size=xs.nbytes, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    group = device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[{"binding": 0, "resource": {"buffer": src}}, {"binding": 1, "resource": {"buffer": dst}}],
    )
    encoder = device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, group)
    cpass.dispatch_workgroups(1)
    cpass.end()
    device.queue.submit([encoder.finish()])
    return np.frombuffer(device.queue.read_buffer(dst), np.float32).copy()


if __name__ == "__main__":
    main()
