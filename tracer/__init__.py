"""wgjit's user API: lazy tensors whose ops are traced into an IR graph and run on WebGPU.

import tracer as tr
x = tr.randn(256, 512, seed=0)
y = (x @ x.T).softmax(axis=-1)   # nothing has run yet
y.numpy()                        # compile, run in one submission, read back
"""

from ir.dtypes import DType, bool_, float16, float32, int32, q4_0, q4_k, q6_k, q8_0, uint32
from ir.errors import (
    DeviceError,
    DTypeError,
    FormatError,
    IndexOutOfRangeError,
    JitError,
    KernelCompileError,
    SettingError,
    ShapeError,
    WgjitError,
)
from ir.ops import Op as _Op
from tracer import nn
from tracer.factories import (
    arange,
    eye,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    rand,
    randn,
    tensor,
    tril,
    triu,
    zeros,
    zeros_like,
)
from tracer.gguf import gguf_metadata, load_gguf, quantize
from tracer.jit import jit
from tracer.linalg import dot, einsum, outer, tensordot, vdot
from tracer.nn import clamp, gather, index_select, masked_fill, pow
from tracer.numeric import allclose, clip, isclose, nan_to_num
from tracer.realize import reset_device
from tracer.reductions import all, any, cumprod, cumsum, logsumexp, median, percentile, prod, quantile, std, var
from tracer.runtime_ints import RuntimeInt, dynamic
from tracer.sampling import sample
from tracer.shaping import (
    array_split,
    chunk,
    concatenate,
    flip,
    moveaxis,
    repeat,
    roll,
    split,
    swapaxes,
    tile,
    transpose,
)
from tracer.sorting import argsort, sort, topk
from tracer.tensor import (
    Tensor,
    compile,
    concat,
    copy_to_host_async,
    hypot,
    logaddexp,
    matmul,
    maximum,
    minimum,
    realize,
    stack,
    where,
)
from tracer.weights import load_safetensors

# these add Tensor methods when imported (x[i] = v, x[array], numpy's protocols, the Array API)
from tracer import advanced, array_api, interop, mutation  # noqa: E402, F401, I001  isort: skip
from tracer import missing  # noqa: E402, I001  isort: skip

bool = bool_  # noqa: A001  tr.bool, as numpy spells it
__getattr__ = missing.module_attribute  # a numpy name wgjit lacks says what to use instead


def _unary(name: str):  # noqa: ANN202
    def fn(x: Tensor, *args, **kwargs) -> Tensor:  # noqa: ANN002, ANN003
        return getattr(x, name)(*args, **kwargs)

    fn.__name__ = name
    fn.__doc__ = f"tr.{name}(x) is x.{name}()"
    return fn


# tr.exp(x), tr.silu(x), ...: one function per plain unary op of the op table (ir/optable)
_TABLE_UNARY = [op.value for op in _Op if op.opdef.method]
globals().update({name: _unary(name) for name in _TABLE_UNARY})
gelu = _unary("gelu")
floor = _unary("floor")
ceil = _unary("ceil")
trunc = _unary("trunc")
round = _unary("round")  # noqa: A001
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


def timeline(gpu=None):  # noqa: ANN001, ANN201  (tr.bool is a dtype here)
    """`with tr.timeline() as tl:` stamps every program run inside, host and GPU (backend_wgpu.timeline).

    After the block, `tl.print()` gives the medians per call (wall, host before the first
    submit, read-back wait, GPU busy, span and idle gaps), `tl.to_dict()` the same and every call.
    `gpu=False` records host times only.
    """
    from backend_wgpu.timeline import timeline as _timeline

    return _timeline(gpu)


__all__ = [
    "DType", "DTypeError", "DeviceError", "IndexOutOfRangeError", "JitError", "KernelCompileError", "SettingError", "ShapeError",
    "Tensor", "WgjitError", "arange", "argmax", "argmin", "astype", "bool", "bool_",
    "broadcast_to", "ceil", "round", "trunc", "compile", "concat", "copy_to_host_async", "expand", "explain", "flatten", "float16",
    "float32", "floor", "full", "full_like", "gelu", "int32", "jit", "log_softmax", "matmul", "max",
    "hypot", "logaddexp", "maximum", "mean", "min", "minimum", "ones", "ones_like", "permute", "rand", "randn", "realize",
    "record", "reset_device", "timeline", "reshape", "sample", "softmax",
    "squeeze", "stack", "sum", "tensor", "trace", "transpose", "uint32", "unsqueeze", "where", "zeros",
    "zeros_like",
    # transformer inference (tracer/nn.py, tracer/weights.py)
    "clamp", "erf", "gather",
    # numpy's everyday API (tracer/reductions.py, numeric.py)
    "all", "any", "argsort", "clip", "cumprod", "cumsum", "logsumexp", "nan_to_num", "prod", "sort", "allclose", "isclose", "median", "percentile", "quantile", "std", "topk", "var",
    "array_split", "chunk", "concatenate", "eye", "flip", "linspace", "moveaxis", "repeat", "roll", "split",
    "swapaxes", "tile", "tril", "triu", "dot", "einsum", "outer", "tensordot", "vdot", "index_select", "load_safetensors", "masked_fill", "nn", "pow",
    # quantized weights and GGUF files (tracer/gguf.py, tracer/quantized.py)
    "FormatError", "gguf_metadata", "load_gguf", "q4_0", "q4_k", "q6_k", "q8_0", "quantize",
    # runtime positions and lengths (tracer/runtime_ints.py)
    "RuntimeInt", "dynamic",
]  # fmt: skip
__all__ += _TABLE_UNARY  # abs, exp, log, sqrt, sin, tanh, silu, erf, ... (the op table's plain unary ops)
