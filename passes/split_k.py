"""Split long matrix products along k: A @ B is the sum over chunks c of A[..., c] @ B[c, ...].

A GEMM walks k in one loop of k / tile_k iterations per thread, and lavapipe ends every shader
after 65,535 loop iterations (backend_wgpu/kernel.py: LOOP_BUDGET): `x.T @ x` over 2^20 rows
came back short. A matmul with M > 1 (GEMVs bound their own loops by unrolling) whose k exceeds
MAX_K becomes a batched matmul over C chunks of k (zero-copy views of A and B), a sum over the
chunks, and, when C does not divide k, a matmul of the remaining columns, added. The partial
products are stored in the matmul's dtype; a few chunks are summed by adds of their views
(fusable), more by a SUM over the chunk axis. It runs after fold_views (it builds VIEWs of buffer
owners) and before select_kernels, which then sees ordinary matmuls and sums.

Thin GEMMs (few output tiles, long k: prompt prefill) are split the same way so that more
workgroups share the work; how many chunks is a kernel choice, so select_kernels.gemm_split
says (the tuning cache where `wgjit tune` measured one, else its built-in rule).
"""

from __future__ import annotations

from dataclasses import replace

from backend_wgpu.kernels.blocks import LOOP_STEPS
from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View
from passes.fold_views import view_of_operand
from passes.select_kernels import gemm_split

# up to this many chunks are summed by elementwise adds of their views (the sum then fuses with what
# follows), past it by SUM. float16 only for 2 chunks: one f16 add rounds once, as SUM's f32 sum does when
# rounded to f16 (more adds would round at every step, where SUM rounds once)
ADDED_CHUNKS = 4

# the k one GEMM walks at most: LOOP_STEPS tiles of the shallowest tile_k (8, gemm_blocked's b128)
MAX_K = 8 * LOOP_STEPS


def split_k(graph: Graph, caps: DeviceCaps) -> Graph:
    chunks = {n.id: _chunks(graph, n, caps) for n in graph if n.op is Op.MATMUL}
    if all(c == 1 for c in chunks.values()):
        return graph
    nodes: list[Node] = []
    next_id = graph.next_id()
    for node in graph:
        if chunks.get(node.id, 1) > 1:
            split = _split(graph, node, next_id, chunks[node.id])
            next_id = max(n.id for n in split) + 1
            nodes.extend(split)
        else:
            nodes.append(node)
    return graph.with_nodes(nodes)


def _chunks(graph: Graph, node: Node, caps: DeviceCaps) -> int:
    """Chunks of k for one matmul: enough for the loop budget, and what the GEMM rules ask for."""
    k = graph[node.srcs[0]].shape[-1]
    budget = -(-k // MAX_K) if node.shape[-2] > 1 else 1
    return max(budget, gemm_split(graph, node, caps))


def _split(graph: Graph, node: Node, next_id: int, chunks: int) -> list[Node]:
    """The nodes that compute `node` in `chunks` chunks of k; the last one keeps its id."""
    (a, av), (b, bv) = view_of_operand(graph, node.srcs[0]), view_of_operand(graph, node.srcs[1])
    k = av.shape[-1]
    depth = k // chunks  # k = chunks * depth + rest, rest < chunks
    rest = k - chunks * depth
    batch, (m, n) = node.shape[:-2], node.shape[-2:]
    nb = len(batch)
    ids = iter(range(next_id, next_id + 2 * ADDED_CHUNKS + 8))
    out: list[Node] = []

    def view(owner: Node, v: View) -> int:
        out.append(Node(next(ids), Op.VIEW, (owner.id,), v.shape, owner.dtype, v))
        return out[-1].id

    # A (..., m, k) -> (..., chunks, m, depth); B (..., k, n) -> (..., chunks, depth, n): strides only
    a_main = av.slice(_range(av, -1, 0, chunks * depth))
    a_chunks = View(
        batch + (m, chunks, depth), a_main.strides[:-1] + (depth * av.strides[-1], av.strides[-1]), a_main.offset
    )
    a_chunks = a_chunks.permute(tuple(range(nb)) + (nb + 1, nb, nb + 2))
    b_main = bv.slice(_range(bv, -2, 0, chunks * depth))
    b_chunks = View(
        batch + (chunks, depth, n), b_main.strides[:-2] + (depth * bv.strides[-2],) + b_main.strides[-2:], b_main.offset
    )
    partial = Node(next(ids), Op.MATMUL, (view(a, a_chunks), view(b, b_chunks)), batch + (chunks, m, n), node.dtype)
    out.append(partial)
    total_id = node.id if rest == 0 else next(ids)
    if chunks <= ADDED_CHUNKS and (chunks == 2 or node.dtype is not DType.float16):
        # chunk c is a contiguous run of the partial products: elementwise adds of those views
        # fuse with what reads the total (bias, residual, a layer norm's prologue)
        whole = View.contiguous(partial.shape)
        run = View(batch + (m, n), whole.strides[:nb] + whole.strides[nb + 1 :], 0)
        total = view(partial, run)
        for c in range(1, chunks):
            chunk = view(partial, View(run.shape, run.strides, c * whole.strides[nb]))
            out.append(Node(total_id if c == chunks - 1 else next(ids), Op.ADD, (total, chunk), node.shape, node.dtype))
            total = out[-1].id
        out[-1] = replace(out[-1], label=node.label)
    else:
        by_chunk = View.contiguous(partial.shape).permute(tuple(range(nb)) + (nb + 1, nb + 2, nb))
        out.append(Node(total_id, Op.SUM, (view(partial, by_chunk),), node.shape, node.dtype, 1, label=node.label))
    if rest:
        a_rest, b_rest = av.slice(_range(av, -1, chunks * depth, k)), bv.slice(_range(bv, -2, chunks * depth, k))
        tail = Node(next(ids), Op.MATMUL, (view(a, a_rest), view(b, b_rest)), node.shape, node.dtype)
        out.append(tail)
        out.append(Node(node.id, Op.ADD, (total_id, tail.id), node.shape, node.dtype, label=node.label))
    return out


def _range(v: View, axis: int, start: int, stop: int) -> tuple[tuple[int, int, int], ...]:
    """A slice spec that keeps every axis whole except `axis`, cut to start:stop."""
    axis %= len(v.shape)
    return tuple((start, stop, 1) if i == axis else (0, d, 1) for i, d in enumerate(v.shape))
