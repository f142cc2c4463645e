"""The concrete kernels and their registry: the class behind each KernelChoice name.

The passes and `explain` ask a kernel class what it allows (backend_wgpu/kernel.py lists
the facts) through `kernel_class`; nothing here imports wgpu.
"""

from backend_wgpu.kernel import Kernel
from backend_wgpu.kernels.attention.decode import DecodeAttentionKernel
from backend_wgpu.kernels.attention.decode_combine import AttentionCombineKernel
from backend_wgpu.kernels.attention.flash import FlashAttentionKernel
from backend_wgpu.kernels.conv.conv1d import Conv1dKernel
from backend_wgpu.kernels.elementwise.elementwise import ElementwiseKernel
from backend_wgpu.kernels.matmul.gemm_blocked import BlockedGemmKernel
from backend_wgpu.kernels.matmul.gemm_thin import ThinGemmKernel
from backend_wgpu.kernels.matmul.gemm_tiled import GemmKernel
from backend_wgpu.kernels.matmul.gemv import GemvKernel
from backend_wgpu.kernels.matmul.gemv_multi import GemvMultiKernel
from backend_wgpu.kernels.matmul.gemv_split import SplitGemvKernel
from backend_wgpu.kernels.movement.arange import ArangeKernel
from backend_wgpu.kernels.movement.concat import ConcatKernel
from backend_wgpu.kernels.movement.gather import GatherKernel
from backend_wgpu.kernels.movement.index_write import IndexWriteKernel
from backend_wgpu.kernels.norm.norm import NormKernel
from backend_wgpu.kernels.norm.norm_regs import NormRegsKernel
from backend_wgpu.kernels.quant.dequant import DequantKernel
from backend_wgpu.kernels.quant.qgather import QuantGatherKernel
from backend_wgpu.kernels.quant.qgemm import QuantGemmKernel
from backend_wgpu.kernels.quant.qgemm_thin import QuantThinKernel
from backend_wgpu.kernels.quant.qgemv import QuantGemvKernel
from backend_wgpu.kernels.reduce.reduce import ReduceKernel
from backend_wgpu.kernels.reduce.row_reduce import RowReduceKernel
from backend_wgpu.kernels.rope.rope import RopeKernel
from backend_wgpu.kernels.sample.sample import SampleKernel
from backend_wgpu.kernels.scan.scan import ScanKernel
from backend_wgpu.kernels.softmax.softmax import SoftmaxKernel
from backend_wgpu.kernels.softmax.softmax_regs import SoftmaxRegsKernel
from backend_wgpu.kernels.sort.bitonic import BitonicSortKernel
from backend_wgpu.kernels.sort.merge import SortMergeKernel

KERNELS: dict[str, type[Kernel]] = {
    k.name: k
    for k in (
        ElementwiseKernel,
        ReduceKernel,
        RowReduceKernel,
        SoftmaxKernel,
        SoftmaxRegsKernel,
        NormKernel,
        NormRegsKernel,
        GemmKernel,
        BlockedGemmKernel,
        GemvKernel,
        SplitGemvKernel,
        ThinGemmKernel,
        ConcatKernel,
        ArangeKernel,
        GatherKernel,
        IndexWriteKernel,
        Conv1dKernel,
        ScanKernel,
        BitonicSortKernel,
        SortMergeKernel,
        FlashAttentionKernel,
        DecodeAttentionKernel,
        AttentionCombineKernel,
        RopeKernel,
        GemvMultiKernel,
        SampleKernel,
        QuantGemvKernel,
        QuantGemmKernel,
        QuantThinKernel,
        DequantKernel,
        QuantGatherKernel,
    )
}


def kernel_class(name: str) -> type[Kernel]:
    """The kernel a KernelChoice names (passes.select_kernels only names registered kernels)."""
    try:
        return KERNELS[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r}; registered: {', '.join(sorted(KERNELS))}") from None


__all__ = ["KERNELS", "kernel_class"] + [k.__name__ for k in KERNELS.values()]
