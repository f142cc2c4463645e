"""wgjit's user API: lazy tensors whose ops are traced into an IR graph and run on WebGPU.

import tracer as tr
x = tr.randn(256, 512, seed=0)
y = (x @ x.T).softmax(axis=-1)   # nothing has run yet
y.numpy()                        # compile, run in one submission, read back
"""

from ir.dtypes import DType, bool_, float16, float32, int32, q4_0, q8_0, uint32
from ir.errors import (
    DeviceError,
    DTypeError,
    FormatError,
    IndexOutOfRangeError,
    JitError,
    KernelCompileError,
    ShapeError,
    WgjitError,
)
from tracer import nn
from tracer.factories import (
    arange,
    full,
    full_like,
    ones,
    ones_like,
    rand,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from tracer.gguf import gguf_metadata, load_gguf, quantize
from tracer.jit import jit
from tracer.nn import clamp, gather, index_select, masked_fill, pow
from tracer.realize import reset_device
from tracer.tensor import Tensor, compile, concat, matmul, maximum, minimum, realize, stack, where
from tracer.weights import load_safetensors

bool = bool_  # noqa: A001  tr.bool, as numpy spells it


def _unary(name: str):  # noqa: ANN202
    def fn(x: Tensor, *args, **kwargs) -> Tensor:  # noqa: ANN002, ANN003
        return getattr(x, name)(*args, **kwargs)

    fn.__name__ = name
    fn.__doc__ = f"tr.{name}(x) is x.{name}()"
    return fn


abs = _unary("abs")  # noqa: A001
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
reciprocal = _unary("reciprocal")
square = _unary("square")
sin = _unary("sin")
cos = _unary("cos")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
gelu = _unary("gelu")
silu = _unary("silu")
erf = _unary("erf")
floor = _unary("floor")
ceil = _unary("ceil")
sum = _unary("sum")  # noqa: A001
mean = _unary("mean")
max = _unary("max")  # noqa: A001
min = _unary("min")  # noqa: A001
argmax = _unary("argmax")
argmin = _unary("argmin")
softmax = _unary("softmax")
log_softmax = _unary("log_softmax")
reshape = _unary("reshape")
permute = _unary("permute")
transpose = _unary("transpose")
squeeze = _unary("squeeze")
unsqueeze = _unary("unsqueeze")
flatten = _unary("flatten")
expand = _unary("expand")
broadcast_to = _unary("broadcast_to")


def astype(x: Tensor, dtype: DType) -> Tensor:
    return x.astype(dtype)


# inspection (tracer.inspect), imported on first use to keep `import tracer` light
def trace(fn, *example_inputs):  # noqa: ANN001, ANN002, ANN201
    """The ir.Graph that fn builds on these example inputs; nothing runs (tracer.inspect.trace)."""
    from tracer.inspect import trace as _trace

    return _trace(fn, *example_inputs)


def explain(*tensors: Tensor, profile: bool = False, repeats: int = 3):  # noqa: ANN201
    """The dispatches that would compute these tensors, as a table (tracer.inspect.explain)."""
    from tracer.inspect import explain as _explain

    return _explain(*tensors, profile=profile, repeats=repeats)


def record():  # noqa: ANN201
    """`with tr.record() as r:` records every program compiled inside (tracer.inspect.Recorder)."""
    from tracer.inspect import record as _record

    return _record()


__all__ = [
    "DType", "DTypeError", "DeviceError", "IndexOutOfRangeError", "JitError", "KernelCompileError", "ShapeError",
    "Tensor", "WgjitError", "abs", "arange", "argmax", "argmin", "astype", "bool", "bool_",
    "broadcast_to", "ceil", "compile", "concat", "cos", "exp", "expand", "explain", "flatten", "float16",
    "float32", "floor", "full", "full_like", "gelu", "int32", "jit", "log", "log_softmax", "matmul", "max",
    "maximum", "mean", "min", "minimum", "ones", "ones_like", "permute", "rand", "randn", "realize",
    "reciprocal", "record", "relu", "reset_device", "reshape", "rsqrt", "sigmoid", "silu", "sin", "softmax", "sqrt", "square",
    "squeeze", "stack", "sum", "tanh", "tensor", "trace", "transpose", "uint32", "unsqueeze", "where", "zeros",
    "zeros_like",
    # transformer inference (tracer/nn.py, tracer/weights.py)
    "clamp", "erf", "gather", "index_select", "load_safetensors", "masked_fill", "nn", "pow",
    # quantized weights and GGUF files (tracer/gguf.py, tracer/quantized.py)
    "FormatError", "gguf_metadata", "load_gguf", "q4_0", "q8_0", "quantize",
]  # fmt: skip
