"""WGSL building blocks the kernels share, each written once.

  lanes, fold_lanes  - the lanes of a KernelElement value, and one scalar from them
  infinity           - +inf as a WGSL value (an infinite constant is a compile error)
  tree_fold          - halve the active threads each round, a barrier after each: the
                       workgroup tree over workgroup memory, for any combine step
  workgroup_reduce   - every thread gets the workgroup's sum / max / min of a scalar:
                       subgroup operations where the adapter has them, else tree_fold
  strided_loop       - a thread's walk over a row (start, start + stride, ...), `unroll`
                       visits per iteration, so that it stays within kernel.LOOP_BUDGET
One thread per element (the dispatch, the `numel` bound) is backend_wgpu.kernel.PerElementKernel;
vector types are backend_wgpu.wgsl.vtype / f32v.
"""

from __future__ import annotations

from collections.abc import Callable

from backend_wgpu.wgsl import WgslBuilder

# what one strided loop over a row may take: up to three such loops, their tails and a tree fit
LOOP_STEPS = 16384
MAX_UNROLL = 64


def unroll_for(length: int, threads: int) -> int:
    """The smallest power of two `u` with ceil(length / (threads * u)) <= LOOP_STEPS (at most MAX_UNROLL)."""
    steps = -(-max(length, 1) // max(threads, 1))
    u = 1
    while u < MAX_UNROLL and -(-steps // u) > LOOP_STEPS:
        u *= 2
    return u


def strided_loop_cost(length: int, stride: int, unroll: int) -> int:
    """Loop iterations (with exit tests) `strided_loop` spends on `length` visits, `stride` apart, for thread 0."""
    visits = -(-max(length, 0) // stride)
    if unroll == 1:
        return visits + 1
    return visits // unroll + 1 + unroll  # the main loop, then at most unroll - 1 visits of the tail


def strided_loop(
    b: WgslBuilder,
    var: str,
    start: str,
    end: str,
    stride: str,
    unroll: int,
    body: Callable[[str, int, str], None],
    indent: str = "",
) -> None:
    """Visit `var` = start, start + stride, ... below `end` (u32 WGSL expressions), in increasing order.

    `body(index, copy, indent)` emits one visit of element `index` (copy numbers the visits of
    one iteration). With unroll 1 this is the plain loop; otherwise a main loop makes `unroll`
    visits per iteration while all are in range, each in its own scope, then a tail loop makes
    the rest: (length / stride) / unroll + unroll iterations instead of length / stride.
    """
    if unroll == 1:
        b.line(f"{indent}for (var {var} = {start}; {var} < {end}; {var} += {stride}) {{")
        body(var, 0, indent + "  ")
        b.line(f"{indent}}}")
        return
    b.line(f"{indent}{{")
    b.line(f"{indent}  var {var} = {start};")
    b.line(f"{indent}  for (; {var} + ({unroll - 1}u * {stride}) < {end}; {var} += {unroll}u * {stride}) {{")
    for u in range(unroll):
        b.line(f"{indent}    {{")
        body(f"({var} + {u}u * {stride})" if u else var, u, indent + "      ")
        b.line(f"{indent}    }}")
    b.line(f"{indent}  }}")
    b.line(f"{indent}  for (; {var} < {end}; {var} += {stride}) {{")
    body(var, unroll, indent + "    ")
    b.line(f"{indent}  }}")
    b.line(f"{indent}}}")


def tree_cost(threads: int) -> int:
    """Loop iterations tree_fold spends (its rounds and exit test)."""
    return max(threads, 1).bit_length() + 1


def workgroup_reduce_cost(threads: int, subgroups: bool) -> int:
    """Loop iterations workgroup_reduce spends: the tree, or one visit per subgroup (4 lanes at least)."""
    return threads // 4 + 1 if subgroups else tree_cost(threads)


# how two partial results combine, as WGSL; a kernel may pass its own helper function's name
COMBINE = {"add": "{a} + {b}", "max": "max({a}, {b})", "min": "min({a}, {b})"}
SUBGROUP_OP = {"add": "subgroupAdd", "max": "subgroupMax", "min": "subgroupMin"}


def lanes(x: str, width: int) -> list[str]:
    """The lanes of a `width`-lane value: [x] for a scalar, [x.x, x.y, ...] for a vector."""
    return [x] if width == 1 else [f"{x}.{c}" for c in "xyzw"[:width]]


def fold_lanes(kind: str, x: str, width: int) -> str:
    """One scalar from the lanes of x, left to right: x.x + x.y + ..., or max(max(x.x, x.y), ...)."""
    parts = lanes(x, width)
    if kind == "add":
        return " + ".join(parts)
    out = parts[0]
    for lane in parts[1:]:
        out = f"{kind}({out}, {lane})"
    return out


def infinity(b: WgslBuilder) -> str:
    """Declare `inf` (+inf as f32) and return its name."""
    b.line("var inf_bits = 0x7f800000u;  // a var: an infinite constant is a WGSL compile error")
    b.line("let inf = bitcast<f32>(inf_bits);")
    return "inf"


def tree_fold(b: WgslBuilder, threads: int, step: Callable[[str], str], lane: str = "lidx", indent: str = "") -> None:
    """The workgroup tree: rounds of `threads`/2, /4, ... 1 threads (lane < half) each run `step(half)`.

    `step` is WGSL that folds the partial at `lane + half` into the one at `lane`. A barrier
    ends every round, so every thread of the workgroup must reach this point.
    """
    b.line(f"{indent}for (var half = {threads // 2}u; half > 0u; half = half >> 1u) {{")
    b.line(f"{indent}  if ({lane} < half) {{ {step('half')} }}")
    b.line(f"{indent}  workgroupBarrier();")
    b.line(f"{indent}}}")


def workgroup_reduce(
    b: WgslBuilder, var: str, kind: str, wg: int, subgroups: bool, value_type: str = "f32", combine: str = ""
) -> None:
    """Combine the scalar `var` over the workgroup; afterwards every thread holds the result in `var`.

    kind: "add", "max" or "min"; or pass `combine`, the name of a WGSL fn(a, b) (tree only).
    Needs every thread of the workgroup to reach this point. The tree adds in the same order
    on every adapter; subgroup operations combine in the hardware's order.
    """
    fn = f"{combine}({{a}}, {{b}})" if combine else COMBINE[kind]
    arr = f"red_{var}"
    b.workgroup_var(f"{arr}: array<{value_type}, {wg}>")
    if subgroups:
        assert not combine, "subgroup reductions know add, max and min only"
        b.builtin("@builtin(subgroup_invocation_id) sg_lane: u32")
        b.builtin("@builtin(subgroup_size) sg_size: u32")
        b.line(f"{var} = {SUBGROUP_OP[kind]}({var});")
        b.line(f"if (sg_lane == 0u) {{ {arr}[lidx / sg_size] = {var}; }}")
        b.line("workgroupBarrier();")
        b.line(f"{var} = {arr}[0];")
        b.line(
            f"for (var i = 1u; i < ({wg}u + sg_size - 1u) / sg_size; i++) {{ {var} = {fn.format(a=var, b=f'{arr}[i]')}; }}"
        )
        return
    b.line(f"{arr}[lidx] = {var};")
    b.line("workgroupBarrier();")
    tree_fold(b, wg, lambda h: f"{arr}[lidx] = {fn.format(a=f'{arr}[lidx]', b=f'{arr}[lidx + {h}]')};")
    b.line(f"{var} = {arr}[0];")
