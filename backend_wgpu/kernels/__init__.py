"""The concrete kernels, registered by the name a KernelChoice carries."""

from backend_wgpu.kernel import Kernel
from backend_wgpu.kernels.arange import ArangeKernel
from backend_wgpu.kernels.concat import ConcatKernel
from backend_wgpu.kernels.conv1d import Conv1dKernel
from backend_wgpu.kernels.elementwise import ElementwiseKernel
from backend_wgpu.kernels.gather import GatherKernel
from backend_wgpu.kernels.gemm_blocked import BlockedGemmKernel
from backend_wgpu.kernels.gemv_split import SplitGemvKernel
from backend_wgpu.kernels.index_write import IndexWriteKernel
from backend_wgpu.kernels.matmul import GemmKernel, GemvKernel
from backend_wgpu.kernels.norm import NormKernel
from backend_wgpu.kernels.reduce import ReduceKernel
from backend_wgpu.kernels.rows_fast import RowReduceKernel, SoftmaxRegsKernel
from backend_wgpu.kernels.softmax import SoftmaxKernel

KERNELS: dict[str, type[Kernel]] = {
    k.name: k
    for k in (ElementwiseKernel, ReduceKernel, SoftmaxKernel, GemmKernel, GemvKernel, ConcatKernel, ArangeKernel)
}
# the faster variants (issue 5), registered apart so each branch's edit stays one line
KERNELS.update({k.name: k for k in (BlockedGemmKernel, SplitGemvKernel, RowReduceKernel, SoftmaxRegsKernel)})
# transformer inference kernels (tracer/nn.py)
KERNELS.update({k.name: k for k in (NormKernel, GatherKernel, Conv1dKernel, IndexWriteKernel)})

__all__ = ["KERNELS"]
