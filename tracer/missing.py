"""What wgjit lacks says so: `tr.<name>` and `x.<name>` for a name numpy has but wgjit does not
raise an AttributeError naming the alternative (numpy's function on the Tensor, which stays
lazy on the GPU where tracer/interop.py has it and otherwise computes on the host; the Array
API namespace; a mask where the result's shape would depend on the values).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracer import array_api
from tracer.interop import stays_lazy
from tracer.tensor import Tensor

# numpy functions whose result's shape depends on the values: a lazy tensor cannot have them
DATA_DEPENDENT = frozenset(
    {"unique", "unique_all", "unique_counts", "unique_inverse", "unique_values", "nonzero", "argwhere",
     "flatnonzero", "extract", "compress", "trim_zeros"}
)  # fmt: skip


def _alternative(name: str) -> str:
    """How to get `name` anyway, for a name numpy has."""
    thing = getattr(np, name)
    if isinstance(thing, type) and issubclass(thing, np.generic):
        return "wgjit stores float32, float16, int32, uint32 and bool (and the q8_0/q4_0 weight formats)"
    if not callable(thing):
        return f"np.{name} is numpy's"
    if name in DATA_DEPENDENT:
        return (
            f"its result's shape depends on the values, which a lazy tensor does not know before it runs; "
            f"np.{name}(x) computes it on the host (a numpy array), or keep the shape with a mask: "
            "tr.where(mask, x, 0), x[mask] = v"
        )
    where = "stays lazy on the GPU" if stays_lazy(name) else "computes it on the host from the values (a numpy array)"
    text = f"np.{name}(x) takes a Tensor and {where}"
    if hasattr(array_api, name):
        text += f"; the Array API namespace has it too: x.__array_namespace__().{name}"
    return text


def module_attribute(name: str) -> Any:
    """tracer's module __getattr__: a numpy name wgjit lacks raises an AttributeError saying what to use."""
    if not name.startswith("_") and hasattr(np, name):
        raise AttributeError(f"module 'tracer' has no attribute {name!r} (numpy's {name}); {_alternative(name)}")
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")


def _tensor_attribute(self: Tensor, name: str) -> Any:
    """Tensor.__getattr__ (only reached when no attribute has the name)."""
    if not name.startswith("_") and hasattr(np.ndarray, name):
        why = _alternative(name) if hasattr(np, name) else f"x.numpy().{name} works on the values read back"
        raise AttributeError(f"'Tensor' object has no attribute {name!r} (numpy's ndarray.{name}); {why}")
    raise AttributeError(f"'Tensor' object has no attribute {name!r}")


Tensor.__getattr__ = _tensor_attribute
