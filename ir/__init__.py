"""The intermediate representation: nodes, graphs, op definitions, dtypes, errors.

Everything else depends on this package and it depends on nothing but numpy and
networkx. It also holds the numpy reference interpreter, the oracle of the tests.
"""

from ir.dtypes import DType, bool_, float16, float32, int32, uint32
from ir.errors import DeviceError, DTypeError, KernelCompileError, ShapeError, WgjitError
from ir.graph import Graph
from ir.node import KernelChoice, Node
from ir.ops import Op
from ir.view import View

__all__ = [
    "DType",
    "DTypeError",
    "DeviceError",
    "Graph",
    "KernelChoice",
    "KernelCompileError",
    "Node",
    "Op",
    "ShapeError",
    "View",
    "WgjitError",
    "bool_",
    "float16",
    "float32",
    "int32",
    "uint32",
]
