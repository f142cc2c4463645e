"""The passes on graphs, without the GPU: golden text, the in-place rule, memory reuse."""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.interpret import interpret
from ir.node import Node
from ir.ops import InputArg, Op
from ir.verify import VerifyError, verify
from passes import PIPELINE, PassFailure, run_pipeline
from passes.pipeline import default_pipeline
from passes.plan_memory import peak_bytes

CAPS = DeviceCaps()
UNFUSED = default_pipeline(fusion=False)  # the in-place and memory rules, one node per kernel

TRACED = """\
%0 = input() {#0} : float32[4x8]
%1 = input() {#1} : float32[8x6]
%2 = matmul(%0, %1) : float32[4x6]
%3 = permute(%2) {(1, 0)} : float32[6x4]
%4 = input() {#2} : float32[scalar]
%5 = expand(%4) {(6, 4)} : float32[6x4]
%6 = mul(%3, %5) : float32[6x4]
%7 = input() {#3} : float32[scalar]
%8 = expand(%7) {(6, 4)} : float32[6x4]
%9 = add(%6, %8) : float32[6x4]
%10 = relu(%9) : float32[6x4]
%11 = permute(%10) {(1, 0)} : float32[4x6]
%12 = sum(%11) {1} : float32[4]
return %12"""

SCHEDULED = """\
%0 = input() {#0} : float32[4x8] @slot0
%1 = input() {#1} : float32[8x6] @slot1
%2 = matmul(%0, %1) : float32[4x6]  -> gemm_blocked[a_k4.b_s.o1] x1 @slot5
%3 = view(%2) {strides=(1, 6) offset=0} : float32[6x4] @slot5
%4 = input() {#2} : float32[scalar] @slot2
%5 = view(%4) {strides=(0, 0) offset=0} : float32[6x4] @slot2
%6 = mul(%3, %5) : float32[6x4]  -> elementwise[mul] x1 @slot6
%7 = input() {#3} : float32[scalar] @slot3
%8 = view(%7) {strides=(0, 0) offset=0} : float32[6x4] @slot3
%9 = add(%6, %8) : float32[6x4]  -> elementwise[add] x4 inplace(%6) @slot6
%10 = relu(%9) : float32[6x4]  -> elementwise[relu] x4 inplace(%9) @slot6
%11 = view(%10) {strides=(1, 4) offset=0} : float32[4x6] @slot6
%12 = sum(%11) {1} : float32[4]  -> reduce[sum_serial] x1 @slot4
return %12"""

FUSED = """\
%0 = input() {#0} : float32[4x8] @slot0
%1 = input() {#1} : float32[8x6] @slot1
%2 = matmul(%0, %1) : float32[4x6]  -> gemm_blocked[a_k4.b_s.o1] x1 @slot5
%3 = view(%2) {strides=(1, 6) offset=0} : float32[6x4] @slot5
%4 = input() {#2} : float32[scalar] @slot2
%5 = view(%4) {strides=(0, 0) offset=0} : float32[6x4] @slot2
%7 = input() {#3} : float32[scalar] @slot3
%8 = view(%7) {strides=(0, 0) offset=0} : float32[6x4] @slot3
%10 = fused(%3, %5, %8) {%6=mul(%3, %5); %9=add(%6, %8); %10=relu(%9)} : float32[6x4]  -> elementwise[fused] x1 @slot6
%11 = view(%10) {strides=(1, 4) offset=0} : float32[4x6] @slot6
%12 = sum(%11) {1} : float32[4]  -> reduce[sum_serial] x1 @slot4
return %12"""


def _example() -> tuple[Graph, list[np.ndarray]]:
    xs = [
        np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8),
        np.linspace(-2, 1, 48, dtype=np.float32).reshape(8, 6),
    ]
    x, w = tr.tensor(xs[0]), tr.tensor(xs[1])
    y = ((x @ w).T * 2 + 1).relu().sum(axis=0)
    return y.graph(), xs + [np.float32(2), np.float32(1)]


def test_golden_traced_and_scheduled_text() -> None:
    graph, _ = _example()
    assert str(graph) == TRACED
    assert str(run_pipeline(graph, CAPS, passes=UNFUSED).graph) == SCHEDULED
    # fused: mul, add and relu are one kernel (the transposed reads stay views of memory)
    assert str(run_pipeline(graph, CAPS, passes=PIPELINE).graph) == FUSED


def test_every_pass_preserves_meaning() -> None:
    graph, inputs = _example()
    want = interpret(graph, inputs)[0]
    run = run_pipeline(graph, CAPS, keep=True)
    assert [name for name, _ in run.stages] == ["traced"] + [p.__name__ for p in PIPELINE]
    for name, g in run.stages:
        np.testing.assert_allclose(interpret(g, inputs)[0], want, rtol=1e-6, err_msg=name)
    x, w = inputs[0], inputs[1]
    np.testing.assert_allclose(want, np.maximum((x @ w).T * 2 + 1, 0).sum(0), rtol=1e-5)


def test_dce_drops_unused_nodes() -> None:
    a = tr.tensor(np.ones(3, np.float32))
    y = a + 1
    g = y.graph()
    nodes = dict(g.nodes)
    nodes[99] = Node(99, Op.EXP, (0,), (3,), tr.float32)  # nobody reads it
    pruned = PIPELINE[0](Graph(nodes, g.outputs), CAPS)
    assert 99 not in pruned.nodes and len(pruned) == len(g)


def _chain_graph(donatable: bool, length: int = 6) -> Graph:
    nodes = [Node(0, Op.INPUT, (), (16,), tr.float32, InputArg(0, donatable))]
    for i in range(1, length + 1):
        nodes.append(Node(i, Op.EXP if i % 2 else Op.NEG, (i - 1,), (16,), tr.float32))
    return Graph({n.id: n for n in nodes}, (length,))


def test_inplace_chain_shares_one_buffer() -> None:
    g = run_pipeline(_chain_graph(donatable=False), CAPS, passes=UNFUSED).graph
    flags = [n.inplace for n in g if n.op is not Op.INPUT]
    assert flags == [None, 0, 0, 0, 0, 0]  # the first op must not overwrite the held input
    slots = {n.slot for n in g if n.op is not Op.INPUT}
    assert len(slots) == 1


def test_inplace_into_a_dead_input() -> None:
    g = run_pipeline(_chain_graph(donatable=True), CAPS, passes=UNFUSED).graph
    assert all(n.inplace == 0 for n in g if n.op is not Op.INPUT)
    assert {n.slot for n in g} == {0} and g.schedule.slots[0].kind == "input"


def test_inplace_never_overwrites_a_value_read_later() -> None:
    nodes = [
        Node(0, Op.INPUT, (), (8,), tr.float32, InputArg(0, True)),
        Node(1, Op.EXP, (0,), (8,), tr.float32),
        Node(2, Op.NEG, (1,), (8,), tr.float32),  # 1 is read again by 3: no in-place here
        Node(3, Op.ADD, (1, 2), (8,), tr.float32),
    ]
    g = run_pipeline(Graph({n.id: n for n in nodes}, (3,)), CAPS, passes=UNFUSED).graph
    assert g[2].inplace is None
    assert g[3].inplace is not None  # last reader of 1 (or 2) may reuse it


def test_inplace_rule_end_to_end_with_a_held_handle() -> None:
    x = tr.tensor(np.arange(5, dtype=np.float32))
    a = x * 2
    b = a.exp()
    np.testing.assert_allclose(b.numpy(), np.exp(np.arange(5) * 2), rtol=1e-5)
    np.testing.assert_allclose(a.numpy(), np.arange(5) * 2)  # a was not overwritten by exp
    np.testing.assert_allclose(x.numpy(), np.arange(5))  # nor x by the multiply


def test_inplace_into_dead_inputs_end_to_end() -> None:
    def compute() -> tr.Tensor:
        t = tr.tensor(np.arange(6, dtype=np.float32))
        t.realize()
        return (t + 1).exp()  # t dies here: add may write over its buffer

    y = compute()
    program = tr.compile(y)
    assert program.dispatches[0].inplace
    np.testing.assert_allclose(y.numpy(), np.exp(np.arange(6) + 1), rtol=1e-5)


def test_an_output_reshaped_in_place_is_not_copied_onto_itself(rng: np.random.Generator) -> None:
    """A decoder's logits: a product (1, 1, V) returned as (1, V) beside its argmax. fold_views copies an
    output that is a view, the copy runs in place over the dead product, so schedule dispatches nothing
    for it; a copy that moves bytes (the product still seen as it is) stays."""
    h, w = rng.standard_normal((1, 1, 64)).astype(np.float32), rng.standard_normal((96, 64)).astype(np.float32)
    want = (h @ w.T).reshape(1, 96)

    def step(keep: bool) -> tuple[tr.Tensor, ...]:
        logits = tr.tensor(h) @ tr.tensor(w).T
        flat = logits.reshape(1, 96)
        return (flat, tr.argmax(flat, axis=-1)) + ((logits,) if keep else ())

    flat, best = step(keep=False)
    program = tr.compile(flat, best)
    assert [d.op for d in program.dispatches] == ["matmul", "argmax"], program.summary()
    assert any(n.op is Op.COPY and n.inplace is not None for n in program.graph.nodes.values())
    np.testing.assert_allclose(flat.numpy(), want, rtol=1e-5, atol=1e-5)
    assert best.numpy().tolist() == [int(want.argmax())]
    flat, best, logits = step(keep=True)  # the product is an output too: its own buffer, a real copy
    program = tr.compile(flat, best, logits)
    assert [d.op for d in program.dispatches] == ["matmul", "argmax", "copy"], program.summary()
    np.testing.assert_allclose(flat.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits.numpy(), want.reshape(1, 1, 96), rtol=1e-5, atol=1e-5)


def test_memory_reuse_on_a_chain() -> None:
    w = tr.tensor(np.eye(32, dtype=np.float32) * 0.5)
    y = tr.tensor(np.ones((32, 32), np.float32))
    for _ in range(8):
        y = y @ w  # matmul cannot run in place: 7 temporaries, by live interval 2 buffers
    g = run_pipeline(y.graph(), CAPS).graph
    kinds = [s.kind for s in g.schedule.slots]
    # the output's buffer holds every other temporary before the output is written
    assert kinds.count("temp") == 1 and kinds.count("output") == 1
    assert peak_bytes(g) == 2 * 32 * 32 * 4
    np.testing.assert_allclose(y.numpy(), np.full((32, 32), 0.5**8))


def test_verify_names_the_broken_invariant_and_the_failing_pass() -> None:
    bad = Graph({0: Node(0, Op.EXP, (5,), (2,), tr.float32)}, (0,))
    with pytest.raises(VerifyError, match="reads %5"):
        verify(bad)

    def broken_pass(graph: Graph, caps: DeviceCaps) -> Graph:
        n = graph[graph.outputs[0]]
        return graph.replace(Node(n.id, n.op, (123,), n.shape, n.dtype, n.arg))

    graph, _ = _example()
    with pytest.raises(PassFailure, match="pass broken_pass failed"):
        run_pipeline(graph, CAPS, passes=[broken_pass])


def test_split_k_cuts_long_matmuls_into_chunks_that_mean_the_same() -> None:
    """k past split_k.MAX_K: a batched matmul over chunks of k, their sum, and the rest added (issue 16.1)."""
    from passes.split_k import MAX_K

    rng = np.random.default_rng(11)
    k = 2 * MAX_K + 3
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    b = rng.standard_normal((k, 4)).astype(np.float32)
    graph = (tr.tensor(a) @ tr.tensor(b)).graph()
    run = run_pipeline(graph, CAPS, keep=True)
    split = dict(run.stages)["split_k"]
    matmuls = [n for n in split if n.op is Op.MATMUL]
    assert sorted(n.shape for n in matmuls) == [(2, 3, 3, 4), (2, 3, 4)]  # 3 chunks of k // 3, then the rest
    assert [n.op for n in split if n.id == graph.outputs[0]] == [Op.ADD]
    want = a.astype(np.float64) @ b
    for name, g in run.stages:
        np.testing.assert_allclose(interpret(g, [a, b])[0], want, rtol=1e-4, atol=1e-3, err_msg=name)
