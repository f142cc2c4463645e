"""The ordered pass pipeline and its runner: verify after each pass, name the one that broke."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ir.caps import DeviceCaps
from ir.errors import WgjitError
from ir.graph import Graph
from ir.verify import verify
from passes.attention_layout import attention_layout
from passes.dce import dce
from passes.dequantize_wide import dequantize_wide
from passes.fold_views import fold_views
from passes.fuse import fuse
from passes.fuse_attention import fuse_attention
from passes.fuse_gemv import fuse_gemv
from passes.inplace import inplace
from passes.plan_memory import plan_memory
from passes.schedule import schedule
from passes.select_kernels import select_kernels
from passes.split_attention import split_attention
from passes.split_k import split_k
from passes.split_sort import split_sort
from passes.vectorize import vectorize

Pass = Callable[[Graph, DeviceCaps], Graph]

# fuse_attention reads the views fold_views made; dequantize_wide (a quantized weight read by many rows
# becomes a float one) comes before split_k and select_kernels, which then see a float matmul; split_k cuts GEMMs whose k a thread could not
# walk within lavapipe's loop budget; split_sort cuts rows longer than one workgroup sorts into
# runs and merges; split_attention comes before select_kernels (which picks the
# kernels of both halves), attention_layout after it (flash attention stores heads inside rows where a copy
# would transpose it); fuse_gemv and fuse come after it (legality asks which kernel each
# reduction/matmul got) and before vectorize, inplace and plan_memory (which then see one node per kernel)
PIPELINE: list[Pass] = [
    dce, fold_views, fuse_attention, dequantize_wide, split_k, split_sort, split_attention, attention_layout,
    select_kernels,
    fuse_gemv, fuse, vectorize, inplace, plan_memory, schedule,
]  # fmt: skip


def default_pipeline(fusion: bool = True) -> list[Pass]:
    """PIPELINE, or PIPELINE without fuse_gemv and fuse (WGJIT_FUSION=0 keeps them as no-op stages)."""
    return list(PIPELINE) if fusion else [p for p in PIPELINE if p not in (fuse, fuse_gemv)]


class PassFailure(WgjitError, RuntimeError):
    """A pass raised or produced invalid IR (a wgjit bug); names the pass and keeps the graph."""

    def __init__(self, pass_name: str, graph: Graph, cause: Exception) -> None:
        super().__init__(f"pass {pass_name} failed: {cause}")
        self.pass_name = pass_name
        self.graph = graph


@dataclass
class PipelineRun:
    graph: Graph
    stages: list[tuple[str, Graph]] = field(default_factory=list)  # the graph after each pass
    seconds: dict[str, float] = field(default_factory=dict)


def run_pipeline(graph: Graph, caps: DeviceCaps, passes: list[Pass] | None = None, keep: bool = False) -> PipelineRun:
    verify(graph)
    run = PipelineRun(graph)
    if keep:
        run.stages.append(("traced", graph))
    for p in PIPELINE if passes is None else passes:
        t0 = time.perf_counter()
        try:
            graph = p(graph, caps)
            verify(graph)
        except WgjitError as e:
            if isinstance(e, PassFailure) or not _is_internal(e):
                raise
            raise PassFailure(p.__name__, graph, e) from e
        except Exception as e:  # a bug in a pass: say which one
            raise PassFailure(p.__name__, graph, e) from e
        run.seconds[p.__name__] = time.perf_counter() - t0
        if keep:
            run.stages.append((p.__name__, graph))
    run.graph = graph
    return run


def _is_internal(e: Exception) -> bool:
    from ir.verify import VerifyError

    return isinstance(e, VerifyError)
