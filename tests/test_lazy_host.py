"""The lazy loop's host path made cheaper (issue 12): the fast paths keep numpy's values and the clear errors,
and the structure computed from the Lazies (the program cache's key) is the traced graph's.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from backend_wgpu.kernels.attention.flash import max_fused_keys
from ir.dtypes import DType
from ir.errors import DTypeError, ShapeError
from ir.ops import Op
from tests.helpers import assert_close
from tracer.graph_builder import graph_of, walk
from tracer.limits import float16_supported
from tracer.tensor import unary


def _structure(*tensors: tr.Tensor) -> tuple:
    """walk()'s structure of these pending tensors, checked against the Graph it builds."""
    w = walk([t._lazy for t in tensors])
    assert w.structure == graph_of(w).structure()
    return w.structure


# --- the structure walk computes is Graph.structure(), and tells programs apart ------------------------


def test_walk_structure_is_the_graph_structure(rng: np.random.Generator) -> None:
    a = rng.standard_normal((3, 4), dtype=np.float32)
    x, y = tr.tensor(a), tr.tensor(a).realize()
    kept = x * 2.0  # a live intermediate: an extra output
    out = (kept + y).reshape(4, 3).T.sum(axis=0) + tr.arange(0.0, 4.0, 1.0)
    s = _structure(out)
    assert len(s[1]) == 2  # the target and the visible intermediate
    assert_close(out.numpy(), (a * 2 + a).reshape(4, 3).T.sum(axis=0) + np.arange(4, dtype=np.float32))
    assert_close(kept.numpy(), a * 2)


def test_walk_structure_with_runtime_ints() -> None:
    cache = tr.zeros((1, 8, 4))
    cache.realize()
    values = []
    for pos in (2, 5):
        cache.index_write(tr.ones((1, 1, 4)) * float(pos), (0, tr.dynamic(pos), 0))
        view = cache[:, : tr.dynamic(pos) + 1].padded
        values.append(_structure(view * 1.0, cache))
        tr.realize(cache)
    assert values[0] == values[1]  # positions are runtime values: one structure
    want = np.zeros((1, 8, 4), np.float32)
    want[0, 2], want[0, 5] = 2.0, 5.0
    assert_close(cache.numpy(), want)


def _key_of(make: object) -> tuple:
    return _structure(make())  # type: ignore[operator]


def test_different_programs_never_share_a_structure(rng: np.random.Generator) -> None:
    a = tr.tensor(rng.standard_normal((2, 6), dtype=np.float32)).realize()
    b = tr.tensor(rng.standard_normal((2, 6), dtype=np.float32)).realize()
    programs = {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "sub": lambda: a - b,
        "same operand": lambda: a - a,  # (b - a is a - b on other buffers: one program)
        "reshape 3x4": lambda: (a + b).reshape(3, 4),
        "reshape 4x3": lambda: (a + b).reshape(4, 3),
        "permute": lambda: (a + b).T,
        "slice": lambda: (a + b)[:, 1:3],
        "slice other": lambda: (a + b)[:, 2:4],
        "broadcast": lambda: a + b[:1],
        "scalar 2": lambda: a * 2.0,
        "arange 0": lambda: tr.arange(0, 3, 1).astype(tr.float32) + a[0, :3],
        "arange 0.0": lambda: tr.arange(0.0, 3.0, 1.0) + a[0, :3],
        "f16": lambda: (a + b).astype(tr.float16).astype(tr.float32) if float16_supported() else a / b,
        "int": lambda: (a + b).astype(tr.int32),
    }
    keys = {name: _key_of(make) for name, make in programs.items()}
    names = list(keys)
    for i, n1 in enumerate(names):
        for n2 in names[i + 1 :]:
            assert keys[n1] != keys[n2], f"{n1} and {n2} share a structure"
    assert _key_of(programs["add"]) == keys["add"]  # the same program again: the same structure


def test_donatable_input_is_part_of_the_structure(rng: np.random.Generator) -> None:
    data = rng.standard_normal((4, 4), dtype=np.float32)
    held = tr.tensor(data).realize()
    free_key = _structure(tr.Tensor(tr.tensor(data).realize()._lazy) * 3.0)
    held_key = _structure(held * 3.0)
    assert free_key[0][0][:3] == ("input", 0, True)  # nothing else sees it: an in-place kernel may take it
    assert held_key[0][0][:3] == ("input", 0, False)
    assert free_key != held_key
    assert_close((held * 3.0).numpy(), data * 3)


# --- fast paths: numpy's values, and the slow path's errors ------------------------------------------


@pytest.mark.parametrize(
    ("sa", "sb"), [((3, 1), (1, 4)), ((2, 3, 4), (2, 1, 4)), ((1, 5), (5,)), ((4,), ()), ((2, 1, 3), (2, 3))]
)
def test_binary_broadcasts_as_numpy(rng: np.random.Generator, sa: tuple, sb: tuple) -> None:
    a, b = rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32)
    assert_close((tr.tensor(a) + tr.tensor(b)).numpy(), a + b)
    assert_close((tr.tensor(b) * tr.tensor(a)).numpy(), b * a)


@pytest.mark.parametrize(("sa", "sb"), [((3, 2), (3, 4)), ((2, 3), (3, 2)), ((2, 3, 4), (3, 3, 4))])
def test_binary_mismatch_names_the_shapes(sa: tuple, sb: tuple) -> None:
    with pytest.raises(ShapeError, match=r"add: shapes .* do not broadcast"):
        tr.ones(sa) + tr.ones(sb)


def test_binary_dtype_rules_and_errors(rng: np.random.Generator) -> None:
    ints = rng.integers(-5, 5, (3, 4)).astype(np.int32)
    floats = rng.standard_normal((3, 4), dtype=np.float32)
    assert_close((tr.tensor(ints) + tr.tensor(floats)).numpy(), ints + floats)
    assert_close((tr.tensor(ints) + 2).numpy(), ints + 2)
    assert_close(tr.tensor(ints).exp().numpy(), np.exp(ints.astype(np.float32)), rtol=1e-5)
    got = (tr.tensor(ints) < tr.tensor(floats)).numpy()
    assert got.dtype == np.bool_ and (got == (ints < floats)).all()
    with pytest.raises(DTypeError, match=r"and: takes bool tensors, got float32 \(3, 4\) and float32 \(3, 4\)"):
        tr.tensor(floats) & tr.tensor(floats)
    with pytest.raises(DTypeError, match=r"not: takes bool tensors, got int32 \(3, 4\)"):
        unary(Op.NOT, tr.tensor(ints))
    with pytest.raises(DTypeError, match="int32 with uint32"):
        tr.tensor(ints) + tr.tensor(ints.astype(np.uint32))


def test_movement_fast_paths_and_their_errors(rng: np.random.Generator) -> None:
    a = rng.standard_normal((2, 3, 4), dtype=np.float32)
    x = tr.tensor(a)
    assert_close(x.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    assert_close(x.permute(-1, 0, -2).numpy(), a.transpose(2, 0, 1))  # negative axes: the full rule
    assert_close(x.permute(np.int64(1), 0, 2).numpy(), a.transpose(1, 0, 2))
    assert_close(x.reshape(6, 4).numpy(), a.reshape(6, 4))
    assert_close(x.reshape(np.int64(4), -1).numpy(), a.reshape(4, -1))
    assert_close(x.reshape([3, 8]).numpy(), a.reshape(3, 8))
    assert_close(x.expand(2, 2, 3, 4).numpy(), np.broadcast_to(a, (2, 2, 3, 4)))
    with pytest.raises(ShapeError, match="not a permutation"):
        x.permute(0, 0, 1)
    with pytest.raises(ShapeError, match="out of range"):
        x.permute(0, 1, 3)
    with pytest.raises(ShapeError, match="shape entries must be ints"):
        x.permute(0.0, 1, 2)
    with pytest.raises(ShapeError, match="product of sizes must stay 24"):
        x.reshape(5, 5)
    with pytest.raises(ShapeError, match="shape entries must be ints"):
        x.reshape(2.0, 12)
    with pytest.raises(ShapeError, match="negative size"):
        x.reshape(-2, -12)


def test_views_of_a_root_write_through(rng: np.random.Generator) -> None:
    a = rng.standard_normal((4, 6), dtype=np.float32)
    want = a.copy()
    x = tr.tensor(a)
    flat, cols = x.reshape(24), x.T
    flat[3] = 9.0
    want.reshape(24)[3] = 9.0
    cols[1] = -1.0
    want.T[1] = -1.0
    assert flat.base is x and cols.base is x
    assert_close(x.numpy(), want)
    assert_close(flat.numpy(), want.reshape(24))
    assert_close(x.reshape(2, 12)[1].numpy(), want.reshape(2, 12)[1])
    copy = x.T.reshape(24)  # strides cannot express it: a copy, as numpy's
    assert copy.base is None
    x[0, 0] = 5.0
    assert copy.numpy()[0] == want[0, 0]
    with pytest.raises(ValueError, match="read-only"):
        x.expand(2, 4, 6)[0, 0, 0] = 1.0


def test_quantized_movement_keeps_its_rules() -> None:
    w = tr.quantize(np.ones((4, 32), np.float32), tr.q8_0)
    assert w.T.shape == (32, 4)
    with pytest.raises(DTypeError):
        w.reshape(2, 64) + 1.0


def test_max_fused_keys_cached_is_the_search() -> None:
    for dk in (8, 64, 128, 256):
        assert max_fused_keys(dk) == max_fused_keys.__wrapped__(dk)


def test_dtype_facts() -> None:
    for d in DType:
        assert d.family == ("float" if d.is_float else "int" if d.is_int else "bool")
        assert hash(d) == hash(d.value)


@pytest.mark.parametrize("lead", [(), (5,), (2, 3), (1, 1)])
def test_linear_steps_are_not_views(rng: np.random.Generator, lead: tuple) -> None:
    x = rng.standard_normal(lead + (8,), dtype=np.float32)
    w = rng.standard_normal((6, 8), dtype=np.float32)
    b = rng.standard_normal(6, dtype=np.float32)
    tx, tw = tr.tensor(x), tr.tensor(w)
    y = tr.nn.linear(tx, tw, tr.tensor(b))
    assert_close(y.numpy(), x @ w.T + b, rtol=1e-4, atol=1e-4)
    assert y.base is None
    y[...] = 0.0  # the result owns its values: writing it changes neither x nor the weight
    assert_close(tx.numpy(), x)
    assert_close(tw.numpy(), w)
    assert_close(tr.nn.linear(tx, tw).numpy(), x @ w.T, rtol=1e-4, atol=1e-4)


def test_linear_of_a_quantized_weight_and_bad_shapes(rng: np.random.Generator) -> None:
    w = rng.standard_normal((4, 32), dtype=np.float32)
    x = rng.standard_normal((3, 32), dtype=np.float32)
    q = tr.quantize(w, tr.q8_0)
    want = x @ q.astype(tr.float32).numpy().T
    assert_close(tr.nn.linear(tr.tensor(x), q).numpy(), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ShapeError, match=r"linear: x shape \(3, 31\) does not fit weight shape \(4, 32\)"):
        tr.nn.linear(tr.tensor(x[:, :31]), q)
    with pytest.raises(ShapeError, match="bias shape"):
        tr.nn.linear(tr.tensor(x), tr.tensor(w), tr.ones(5))


def test_rope_tables_broadcast(rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 2, 3, 8), dtype=np.float32)
    ang = rng.standard_normal((3, 4), dtype=np.float32)
    cos, sin = np.cos(ang), np.sin(ang)
    a, b = x[..., :4], x[..., 4:]
    want = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    assert_close(tr.nn.rope(tr.tensor(x), tr.tensor(cos), tr.tensor(sin)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_attention_operands_broadcast_as_before(rng: np.random.Generator) -> None:
    """q (2, 4, 3, 8) over grouped k, v (1, 2, 5, 8) broadcast along the batch, with a float mask (3, 5)."""
    q = rng.standard_normal((2, 4, 3, 8), dtype=np.float32)
    k = rng.standard_normal((1, 2, 5, 8), dtype=np.float32)
    v = rng.standard_normal((1, 2, 5, 8), dtype=np.float32)
    mask = rng.standard_normal((3, 5), dtype=np.float32)
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)  # kv head h // 2 for query head h
    s = q @ kk.swapaxes(-1, -2) / np.sqrt(8) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ vv
    got = tr.nn.scaled_dot_product_attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), mask=tr.tensor(mask))
    assert_close(got.numpy(), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match="mask shape"):
        tr.nn.scaled_dot_product_attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), mask=tr.ones((4, 5)))


def test_map_syms_reaches_every_sym() -> None:
    from ir.ops import AttentionArg
    from ir.symbolic import Sym, map_syms, syms_in

    a, b = Sym("v", 1, 0, 0, 9, "a"), Sym("v", 2, 1, 1, 19, "b")
    value = ((0, (a, 3), [b, 1.5, None, "x", True]), AttentionArg(0.5, False, "none", 1, length=a + 1), DType.float32)
    assert syms_in(value) == [a, b, a + 1]
    numbered = map_syms(value, lambda s: Sym(0, s.scale, s.const, s.lo, s.hi, s.what))
    assert numbered[0] == (0, (Sym(0, 1, 0, 0, 9), 3), [Sym(0, 2, 1, 1, 19), 1.5, None, "x", True])
    assert numbered[1].length == Sym(0, 1, 1, 1, 10) and numbered[1].scale == 0.5
    assert numbered[2] is DType.float32
    plain = ((1, 2), [3, "y"], AttentionArg(0.5, True, "none", 2))
    assert map_syms(plain, lambda s: 0) is plain  # nothing to replace: the same object
    assert map_syms(a, lambda s: s.scale * 4 + s.const) == 4


@pytest.mark.parametrize("value", [2.0, -0.0, 1e30, 3.4028234663852886e38, float("inf"), float("nan"), 10**30, 7])
def test_scalar_operands_enter_as_numpy(value: float) -> None:
    x = np.array([1.0, -2.0, 0.5], np.float32)
    with np.errstate(all="ignore"):
        want = x * np.float32(value)
    assert_close((tr.tensor(x) * value).numpy(), want)


def test_scalar_operands_out_of_range_are_refused() -> None:
    with pytest.raises(DTypeError, match="out of float32 range"):
        tr.ones(3) * 1e39
    with pytest.raises(DTypeError, match="out of float32 range"):
        tr.ones(3) + 10**39
    if float16_supported():
        assert_close((tr.ones(2, dtype=tr.float16) * 65504.0).numpy(), np.full(2, 65504, np.float16))
        with pytest.raises(DTypeError, match="out of float16 range"):
            tr.ones(2, dtype=tr.float16) * 70000.0


@pytest.mark.parametrize(("sa", "sb"), [((5,), (2, 1, 1)), ((), (2, 3)), ((3, 1, 4), (2, 1))])
def test_broadcast_of_different_ranks(rng: np.random.Generator, sa: tuple, sb: tuple) -> None:
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    assert_close((tr.tensor(a) - tr.tensor(b)).numpy(), a - b)
    with pytest.raises(ShapeError, match=r"sub: shapes \(3,\), \(2, 4\) do not broadcast \(axis -1: sizes \[3, 4\]\)"):
        tr.ones(3) - tr.ones((2, 4))


def test_matmul_of_two_matrices(rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((3, 5), dtype=np.float32), rng.standard_normal((5, 2), dtype=np.float32)
    assert_close((tr.tensor(a) @ tr.tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-5)
    assert_close((tr.tensor(a) @ b).numpy(), a @ b, rtol=1e-4, atol=1e-5)  # an array operand
    with pytest.raises(ShapeError, match=r"matmul: \(3, 5\) @ \(3, 5\): inner dimensions 5 and 3 differ"):
        tr.tensor(a) @ tr.tensor(a)
    with pytest.raises(DTypeError, match="only float matmul"):
        tr.ones((2, 2), dtype=tr.int32) @ tr.ones((2, 2), dtype=tr.int32)
    if float16_supported():
        got = (tr.tensor(a).astype(tr.float16) @ tr.tensor(b)).numpy()
        assert got.dtype == np.float32
        assert_close(got, a.astype(np.float16).astype(np.float32) @ b, rtol=2e-3, atol=2e-3)
