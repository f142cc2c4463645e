"""Graph -> Graph passes and the ordered pipeline that runs them.

Each pass is one function in its own module, named after what it does. None of them
imports wgpu: kernel choices are data (ir.KernelChoice) that the backend turns into WGSL.
"""

from passes.pipeline import PIPELINE, PassFailure, run_pipeline

__all__ = ["PIPELINE", "PassFailure", "run_pipeline"]
