"""Random well-typed wgjit programs, each built alongside its numpy meaning (differential fuzzing).

A program is a list of steps. Each step applies one entry of the op table `OPS` to earlier
values (or creates an input), and is recorded three ways: as data (for hypothesis to shrink),
as the tracer expression that computes it (`OpSpec.code`: `Program.source()` prints a script
that reproduces a failure), and as a numpy function (`OpSpec.ref`) that is the reference.
The generator evaluates the numpy side while it draws, so every step knows the shapes,
dtypes and values it works on; a step numpy refuses is not recorded.

Adding an op is one line in `OPS`: `OpSpec(name, draw, code, ref, exact, eps)`.

Tolerances: conditioning, not guesswork
---------------------------------------
Random programs chain ops, and a rounding difference of one ulp can be amplified without
bound (cancellation, then floor, then a comparison...). So the reference is evaluated once
plainly and `NOISY_RUNS` more times with every *inexact* step perturbed by its own error
bound (`OpSpec.eps`, relative, times the magnitude of the result plus `OpSpec.mag`, the
magnitude of what it accumulated). Where the noisy runs agree with the plain one, a value is
well conditioned and the GPU must match within `MARGIN` times their spread plus a small
floor (`TOL_FLOOR`); int/bool elements must match exactly; elements whose noisy runs
disagree (a comparison right at its threshold, NaN in some runs only) are not compared.

A step is exact (never perturbed) when the GPU cannot round differently: movement ops,
comparisons, casts, max/min, where, int arithmetic ("always"); +, -, * when the float64
result is representable ("representable"); sums and matmuls whose every partial sum is
representable, checked from the inputs' granularity ("accumulate"). Inputs are mostly
multiples of 1/8 so that much of a program stays exact and its discrete ops get tested.

Per-op error bounds (relative, float32; float16 results use at least `F16_EPS`, plus
`F16_ABS_ERROR` absolute for values near zero, where float16 steps are 2**-24):
  +, -, *, square, casts to f16 .......... 1e-6 (correctly rounded; slack for fma contraction)
  exp, log, sqrt, sigmoid ................ 1e-5 (WGSL builtins are not correctly rounded)
  expm1, log1p, hypot, logaddexp ......... 1e-5 (expm1 like exp: plus `mag` growing with |x|)
  round(x, d != 0) ....................... 1e-6 (x * 10**d is exact as numpy's; the division is not)
  sin, cos ............................... 1e-5 times max(|x|, 0.1), absolute (WGSL bounds them absolutely)
  tanh, gelu, silu, rsqrt, reciprocal, / . 1e-5, plus `mag` where an approximation is absolute
  pow .................................... 1e-5 times (1 + |y log2 x|): exp2(y * log2 x) scales it
  sum, mean, matmul ...................... 1e-6 times the sum of |terms| (order of summation)
  prod ................................... 1e-7 times n |result| (n roundings, in any order)
  softmax, log_softmax ................... 1e-5 times (1 + |x - max|); log_softmax also 5e-7 absolute
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

F32, F16, I32, BOOL, F64, I64 = (np.dtype(t) for t in ("float32", "float16", "int32", "bool", "float64", "int64"))
FLOATS = (F32, F16)
NUMERIC = (F32, F16, I32)

NOISY_RUNS = 4
MARGIN = 4.0
F16_EPS = 2e-3
F16_ABS_ERROR = 2.0**-23  # two float16 subnormal steps: the absolute error a float16 chain may carry
TOL_FLOOR = {F32: (1e-6, 1e-6), F16: (2e-3, 2e-3)}  # (atol, rtol) under any spread

MAX_SIZE = 260  # elements per value: lavapipe is slow and small shapes find the same bugs
SMALL_DIMS = (0, 1, 1, 2, 3, 4, 5, 7, 8)  # empties, broadcastable 1s, odd, 2 mod 4, 0 mod 4
BIG_DIMS = (17, 65, 130, 257)  # rows past 64 (reduce rows kernels), gemm past one 64-wide tile


# --- the program model -----------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """An operand that is an earlier value of the program."""

    index: int


Arg = Ref | bool | int | float


@dataclass(frozen=True)
class Step:
    op: str
    args: tuple[Arg, ...]
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def kw(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass
class Program:
    inputs: list[np.ndarray]
    steps: list[Step]
    outputs: tuple[int, ...]  # value indices the test reads back
    keep: tuple[int, ...] = ()  # more values whose tensors stay alive (graph outputs, no donation)
    realize: str = "together"  # "together" | "each" | "keep_first"

    def source(self) -> str:
        """A python script that replays this program with wgjit (for bug reports)."""
        lines = ["import numpy as np", "import tracer as tr", "nan, inf = float('nan'), float('inf')", "IN = ["]
        for a in self.inputs:
            lines.append(f"    np.array({a.tolist()!r}, dtype=np.{a.dtype.name}).reshape({a.shape}),")
        lines.append("]")
        for i, s in enumerate(self.steps):
            lines.append(f"v{i} = {OPS[s.op].render([_arg_src(a) for a in s.args], s.kw)}")
        outs, keep = [f"v{o}" for o in self.outputs], [f"v{k}" for k in self.keep]
        lines.append(f"# outputs {outs}, keep {keep}, realize={self.realize}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return "Program:\n" + self.source()


def _arg_src(a: Arg) -> str:
    if isinstance(a, Ref):
        return f"v{a.index}"
    if isinstance(a, float) and not math.isfinite(a):
        return f"float('{a}')"
    return repr(a)


@dataclass(frozen=True)
class Result:
    """What a reference function computed: the value, whether the GPU must get it bit-exactly,
    and (for inexact steps) the magnitude an absolute error scales with."""

    value: np.ndarray
    exact: bool = False
    mag: np.ndarray | None = None


@dataclass(frozen=True)
class OpSpec:
    """One row of the op table.

    draw(b)  picks operands and parameters with the Builder, or returns None when this op
             does not apply to the values at hand;
    code     the tracer expression: a format string over {0}, {1}... (operand sources) and
             {name} (parameters), or a function (srcs, params) -> str;
    ref      numpy's meaning: ref(*operands, **params) -> ndarray | Result;
    exact    "always", "representable", "accumulate" (decided inside ref) or "never";
    eps      the op's own relative error bound on float32 results;
    noise    where the noisy runs put that error: on the result ("output") or, for ops that
             round before a discontinuity (x // y, x % y on floats), on the operands ("input").
    """

    name: str
    draw: Callable[[Builder], Call | None]
    code: str | Callable[[list[str], dict[str, Any]], str]
    ref: Callable[..., np.ndarray | Result]
    exact: str = "never"
    eps: float = 1e-5
    noise: str = "output"  # "input": perturb the operands instead (a rounding before a jump: floor(x / y))

    def render(self, srcs: list[str], params: dict[str, Any]) -> str:
        if callable(self.code):
            return self.code(srcs, params)
        return self.code.format(*srcs, **params)


@dataclass(frozen=True)
class Call:
    args: tuple[Arg, ...]
    params: tuple[tuple[str, Any], ...] = ()


# --- dtype rules (written from numpy's, independently of ir.dtypes) ---------------------


def result_type(*xs: Any) -> np.dtype:
    """numpy's result type narrowed to what wgjit stores: float64 -> float32, int64 -> int32.

    One documented difference: a float16 array with int/bool arrays stays float16 (numpy
    says float64; wgjit, like torch and jax, keeps the float type).
    """
    arrays = [x for x in xs if isinstance(x, np.ndarray)]
    if any(a.dtype == F16 for a in arrays) and not any(a.dtype == F32 for a in arrays):
        return F16
    rt = np.result_type(*xs)
    return {F64: F32, I64: I32}.get(rt, rt)


def to_float(dt: np.dtype) -> np.dtype:
    return dt if dt in FLOATS else F32


def _arr(x: Any, dt: np.dtype) -> np.ndarray:
    return np.asarray(x).astype(dt)


def _up(a: np.ndarray) -> np.ndarray:
    """float16 math happens in float32 (rounded once at the end), as wgjit documents."""
    return a.astype(F32) if a.dtype == F16 else a


# --- exactness -----------------------------------------------------------------------


def representable(exact64: np.ndarray, got: np.ndarray) -> bool:
    """The float64 result is exactly the stored one: no rounding happened anywhere."""
    with np.errstate(all="ignore"):
        return bool(np.array_equal(np.asarray(exact64, F64), got.astype(F64), equal_nan=True))


def granularity(x: np.ndarray) -> float:
    """The largest power of two that divides every finite element (inf when all are 0)."""
    x = np.asarray(x, F64).ravel()
    x = x[np.isfinite(x) & (x != 0)]
    if x.size == 0:
        return math.inf
    m, e = np.frexp(x)
    mant = np.abs(m * 2.0**53).astype(np.int64)
    low = mant & -mant  # lowest set bit
    return float(np.min(np.ldexp(low.astype(F64), e - 53)))


def sums_exact(abs_total: np.ndarray, grain: float, *operands: np.ndarray) -> bool:
    """Every partial sum of terms that are multiples of `grain`, bounded by `abs_total`, fits
    float32's 24-bit significand: the sum is exact in any order (what a GPU reduction picks)."""
    if any(not np.all(np.isfinite(np.asarray(o, F64))) for o in operands):
        return False
    if grain == math.inf or abs_total.size == 0:
        return True
    return float(np.max(abs_total)) / grain < 2.0**24


# --- the builder the draw functions use -------------------------------------------------


class Builder:
    """Draws operands and parameters; evaluates the numpy reference as steps are added."""

    def __init__(self, draw: Callable[[st.SearchStrategy], Any], seed: int, f16: bool, style: str) -> None:
        self.draw = draw
        self.rng = np.random.default_rng(seed)
        self.f16 = f16
        # input values: "dyadic" (mostly exact), "normal", "special" (NaN/inf/0 sprinkled), "large" (far from 0)
        self.style = style
        self.inputs: list[np.ndarray] = []
        self.steps: list[Step] = []
        self.values: list[np.ndarray] = []

    # values --------------------------------------------------------------------------------
    def value(self, a: Arg) -> Any:
        return self.values[a.index] if isinstance(a, Ref) else a

    def pick(self, pred: Callable[[np.ndarray], bool] = lambda v: True) -> Ref | None:
        """An earlier value that satisfies pred, recent ones more likely."""
        cands = [i for i, v in enumerate(self.values) if pred(v)]
        if not cands:
            return None
        if len(cands) > 1 and self.draw(st.booleans()):
            cands = cands[-3:]
        return Ref(self.draw(st.sampled_from(cands)))

    def pick_or_fresh(
        self, pred: Callable[[np.ndarray], bool], shape: tuple[int, ...], dtypes: Sequence[np.dtype]
    ) -> Ref:
        if self.draw(st.integers(0, 2)) == 0:
            r = self.pick(pred)
            if r is not None:
                return r
        return self.fresh(shape, self.dtype(dtypes))

    def dtype(self, dtypes: Sequence[np.dtype] = (F32, I32, BOOL, F16)) -> np.dtype:
        allowed = [d for d in dtypes if d != F16 or self.f16]
        return self.draw(st.sampled_from(allowed))

    def shape(self, ndim: int | None = None) -> tuple[int, ...]:
        if ndim is None:
            ndim = self.draw(st.integers(0, 4))
        dims = [
            self.draw(st.sampled_from(BIG_DIMS if self.draw(st.integers(0, 7)) == 0 else SMALL_DIMS))
            for _ in range(ndim)
        ]
        while math.prod(dims) > MAX_SIZE:
            dims[dims.index(max(dims))] = self.draw(st.sampled_from(SMALL_DIMS))
        return tuple(dims)

    def scalar(self, dt: np.dtype) -> bool | int | float:
        """A python scalar operand (numpy's weak scalar) for a tensor of dtype dt."""
        kind = self.draw(st.sampled_from(["int", "float", "bool"] if dt != BOOL else ["int", "float"]))
        if kind == "bool":
            return self.draw(st.booleans())
        if kind == "int":
            return self.draw(st.integers(-5, 5))
        return self.draw(st.sampled_from([0.5, -1.5, 2.0, 0.25, 3.0, -0.125, 1e-3, 100.0, float("nan"), float("inf")]))

    def fresh_ids(self, shape: tuple[int, ...], high: int) -> Ref:
        """A new int32 input of indices in [0, high) (what gathers take)."""
        self.inputs.append(self.rng.integers(0, max(high, 1), shape).astype(I32))
        ref = self.add("input", (), (("index", len(self.inputs) - 1), ("realized", False)))
        assert ref is not None
        return ref

    def fresh(self, shape: tuple[int, ...], dt: np.dtype) -> Ref:
        """A new input tensor with random data."""
        a = self._data(shape, dt)
        self.inputs.append(a)
        realized = self.draw(st.integers(0, 3)) == 0
        ref = self.add("input", (), (("index", len(self.inputs) - 1), ("realized", realized)))
        assert ref is not None
        return ref

    def _data(self, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        r = self.rng
        if dt == BOOL:
            return r.random(shape) < 0.5
        if dt == I32:
            return r.integers(-9, 10, shape).astype(I32)
        if self.style == "normal":
            a = r.standard_normal(shape)
        elif self.style == "large":
            a = self._large(shape, dt)
        else:
            a = r.integers(-32, 33, shape) / 8.0  # multiples of 1/8: arithmetic stays exact
        if self.style == "special" and a.size:
            k = r.integers(0, a.size, max(1, a.size // 4))
            a.reshape(-1)[k] = r.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e-30], k.size)
        with np.errstate(over="ignore"):
            return np.asarray(a).astype(dt)  # a 0-d array, never a numpy scalar (the callers assign into it)

    def _large(self, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        """Values far from zero, close to each other: logits of 1e4 to 1e8 (log_softmax rounded them away,
        issue 16.3); float16 near its largest finite value (a float16 sum overflowed a mean, 16.4)."""
        r = self.rng
        if dt == F16:
            return r.uniform(-65000, 65000, shape)
        center = float(r.choice([1e4, 1e7, 1e8])) * float(r.choice([-1.0, 1.0]))
        return center + r.standard_normal(shape) * float(r.choice([1.0, 100.0, abs(center) * 1e-3]))

    # steps ---------------------------------------------------------------------------------
    def add(
        self, op: str, args: tuple[Arg, ...], params: tuple[tuple[str, Any], ...] = (), any_size: bool = False
    ) -> Ref | None:
        """Evaluate a step on the reference values; record it unless numpy refuses it (or it is too big)."""
        step = Step(op, args, params)
        try:
            res = run_step(step, [self.value(a) for a in args], self.inputs)
        except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
            return None
        if res.value.size > MAX_SIZE * 4 and op != "input" and not any_size:
            return None
        self.steps.append(step)
        self.values.append(res.value)
        return Ref(len(self.values) - 1)

    def apply(self, spec: OpSpec) -> Ref | None:
        call = spec.draw(self)
        if call is None:
            return None
        return self.add(spec.name, call.args, call.params)


def run_step(step: Step, args: list[Any], inputs: list[np.ndarray]) -> Result:
    """The reference meaning of one step on host values."""
    spec = OPS[step.op]
    with np.errstate(all="ignore"):
        out = spec.ref(*args, **step.kw) if step.op != "input" else inputs[step.kw["index"]].copy()
    res = out if isinstance(out, Result) else Result(np.asarray(out), spec.exact == "always")
    return Result(np.array(res.value, order="C"), res.exact, res.mag)  # ascontiguousarray would make 0-d 1-d


# --- evaluation with noise --------------------------------------------------------------


@dataclass
class Reference:
    """The plain reference values and the NOISY_RUNS perturbed ones, per value index."""

    plain: list[np.ndarray]
    noisy: list[list[np.ndarray]] = field(default_factory=list)


def evaluate(program: Program) -> Reference:
    plain: list[np.ndarray] = []
    exact: list[bool] = []
    mags: list[np.ndarray | None] = []
    for step in program.steps:
        res = run_step(step, [plain[a.index] if isinstance(a, Ref) else a for a in step.args], program.inputs)
        plain.append(res.value)
        exact.append(res.exact)
        mags.append(res.mag)
    ref = Reference(plain)
    for run in range(NOISY_RUNS):
        rng = np.random.default_rng(run)
        sign = (1.0, -1.0)[run] if run < 2 else None  # two runs push every error the same way
        vals: list[np.ndarray] = []
        for i, step in enumerate(program.steps):
            spec = OPS[step.op]
            args = [vals[a.index] if isinstance(a, Ref) else a for a in step.args]
            if not exact[i] and spec.noise == "input":
                dt = result_type(*args)  # an int operand of a float op is perturbed as the float it becomes
                args = [a.astype(dt) if isinstance(a, np.ndarray) and dt.kind == "f" else a for a in args]
                args = [
                    _perturb(a, spec.eps, None, rng, sign)
                    if isinstance(a, np.ndarray) and a.dtype in FLOATS and a.size
                    else a
                    for a in args
                ]
            res = run_step(step, args, program.inputs)
            v = res.value
            if not exact[i] and spec.noise == "output" and v.dtype in FLOATS and v.size:
                v = _perturb(v, spec.eps, res.mag, rng, sign)
            vals.append(v)
        ref.noisy.append(vals)
    return ref


def _perturb(
    v: np.ndarray, eps: float, mag: np.ndarray | None, rng: np.random.Generator, sign: float | None
) -> np.ndarray:
    if v.dtype == F16:
        eps = max(eps, F16_EPS)
    u1 = rng.uniform(-1, 1, v.shape) if sign is None else sign
    u2 = rng.uniform(-1, 1, v.shape) if sign is None else sign
    x = v.astype(F64)
    scale = np.abs(x) if mag is None else np.abs(x) + np.broadcast_to(np.abs(np.asarray(mag, F64)), v.shape)
    if v.dtype == F16:  # float16 intermediates round to multiples of 2**-24 near zero: an absolute error
        scale = np.maximum(scale, np.abs(x) + F16_ABS_ERROR / eps)
    with np.errstate(all="ignore"):
        noisy = x + eps * (u1 * np.abs(x) + u2 * (scale - np.abs(x)))
        noisy = np.where(np.isfinite(x), noisy, x)
        if sign is not None:
            # exactly zero is a possible GPU answer for a value within its own error of zero (1 + erf(-6.4)
            # cancels to 0 in float32) or below float32's normals (lavapipe flushes them): two runs give it
            zero = (np.abs(x) < np.finfo(np.float32).tiny) | (np.abs(x) <= eps * (scale - np.abs(x)))
            noisy = np.where(zero, 0.0, noisy)
        return noisy.astype(v.dtype)


def compare(got: np.ndarray, want: np.ndarray, noisy: list[np.ndarray], what: str) -> None:
    """Assert `got` matches `want` wherever the noisy runs say the value is well conditioned."""
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind in "biu":
        stable = np.logical_and.reduce([n == want for n in noisy]) if noisy else np.ones(want.shape, bool)
        bad = stable & (got != want)
        if np.any(bad):
            raise AssertionError(_report(what, got, want, bad))
        return
    w, g = want.astype(F64), got.astype(F64)
    ns = [n.astype(F64) for n in noisy]
    nan_w = np.isnan(w)
    inf_w = np.isinf(w)
    fin_w = np.isfinite(w)
    stable_nan = np.logical_and.reduce([np.isnan(n) for n in ns] + [nan_w])
    stable_inf = np.logical_and.reduce([n == w for n in ns] + [inf_w])
    stable_fin = np.logical_and.reduce([np.isfinite(n) for n in ns] + [fin_w])
    with np.errstate(all="ignore"):
        spread = np.zeros(w.shape)
        for n in ns:
            spread = np.maximum(spread, np.where(stable_fin, np.abs(n - w), 0.0))
        atol, rtol = TOL_FLOOR[want.dtype]
        tol = MARGIN * spread + atol + rtol * np.abs(w)
        bad = (stable_nan & ~np.isnan(g)) | (stable_inf & (g != w)) | (stable_fin & ~(np.abs(g - w) <= tol))
    if np.any(bad):
        raise AssertionError(_report(what, got, want, bad, tol))


def _report(what: str, got: np.ndarray, want: np.ndarray, bad: np.ndarray, tol: np.ndarray | None = None) -> str:
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    extra = f", tolerance {tol[idx]:.3g}" if tol is not None else ""
    return (
        f"{what}: {int(np.sum(bad))} of {bad.size} elements differ; first at {idx}: got {got[idx]!r}, "
        f"expected {want[idx]!r}{extra}\n got={got!r}\nwant={want!r}"
    )


# --- draw helpers -----------------------------------------------------------------------


def is_dtype(*dts: np.dtype) -> Callable[[np.ndarray], bool]:
    return lambda v: v.dtype in dts


def broadcast_partner(b: Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape`: a suffix of it with some dims set to 1, maybe
    with new leading dims (then the result is bigger than either)."""
    n = b.draw(st.integers(0, len(shape)))
    out = [d if b.draw(st.integers(0, 2)) else 1 for d in shape[len(shape) - n :]]
    if b.draw(st.integers(0, 4)) == 0 and math.prod(shape) * 3 <= MAX_SIZE:
        out = [b.draw(st.sampled_from([1, 2, 3]))] + out
    return tuple(out)


def broadcasts(shape: tuple[int, ...]) -> Callable[[np.ndarray], bool]:
    def ok(v: np.ndarray) -> bool:
        try:
            return math.prod(np.broadcast_shapes(v.shape, shape)) <= MAX_SIZE
        except ValueError:
            return False

    return ok


def operand(b: Builder, dtypes: Sequence[np.dtype]) -> Ref | None:
    """An earlier value of one of these dtypes, or a fresh input."""
    r = b.pick(is_dtype(*dtypes))
    if r is None or b.draw(st.integers(0, 5)) == 0:
        return b.fresh(b.shape(), b.dtype(dtypes))
    return r


def partner(b: Builder, x: Ref, dtypes: Sequence[np.dtype], scalars: bool = True) -> Arg:
    """A second operand for x: a python scalar, an earlier value or a fresh input that broadcasts."""
    xv = b.value(x)
    if scalars and b.draw(st.integers(0, 3)) == 0:
        return b.scalar(xv.dtype)
    shape = broadcast_partner(b, xv.shape)
    return b.pick_or_fresh(lambda v: v.dtype in dtypes and broadcasts(xv.shape)(v), shape, dtypes)


def axes_of(b: Builder, ndim: int, allow_none: bool = True, single: bool = False) -> int | tuple[int, ...] | None:
    choices = ["int"] if ndim else []
    if not single and ndim:
        choices.append("tuple")
    if allow_none or not choices:
        choices.append("none")
    kind = b.draw(st.sampled_from(choices))
    if kind == "none":
        return None
    if kind == "int":
        return b.draw(st.integers(-ndim, ndim - 1))
    axes = b.draw(st.lists(st.integers(0, ndim - 1), min_size=0, max_size=ndim, unique=True))
    return tuple(a - ndim if b.draw(st.booleans()) else a for a in axes)


# --- reference functions ----------------------------------------------------------------


def _elementwise(
    core: Callable[..., np.ndarray],
    exact: str,
    mag: Callable[..., np.ndarray] | None = None,
    float_out: bool = False,
    cmp: bool = False,
) -> Callable[..., Result]:
    """numpy's meaning of a binary elementwise op, with wgjit's dtype rules."""

    def ref(x: Any, y: Any) -> Result:
        dt = result_type(x, y)
        if float_out:
            dt = to_float(dt)
        a, c = _arr(x, dt), _arr(y, dt)
        if cmp:
            return Result(core(a, c), True)
        r = core(_up(a), _up(c)).astype(dt)
        if exact == "always" or dt.kind != "f":
            return Result(r, True)
        if exact == "quotient":  # floor(x / y): exact when the rounded quotient is the true one
            ok = representable(a.astype(F64) / c.astype(F64), (_up(a) / _up(c)).astype(F32))
        else:
            ok = exact == "representable" and representable(core(a.astype(F64), c.astype(F64)), r)
        return Result(r, ok or dt.kind != "f", None if mag is None else mag(np.abs(_up(a)), np.abs(_up(c))))

    return ref


def _unary(
    core: Callable[[np.ndarray], np.ndarray], floats: bool = True, mag: Callable[[np.ndarray], np.ndarray] | None = None
) -> Callable[..., Result]:
    def ref(x: np.ndarray) -> Result:
        dt = to_float(x.dtype) if floats else x.dtype
        a = x.astype(dt)
        r = core(_up(a)).astype(dt)
        return Result(r, dt.kind != "f", None if mag is None else mag(_up(a)))

    return ref


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[F64])(x.astype(F64))


def _round(x: np.ndarray, decimals: int) -> Result:
    """numpy's round: exact for ints and to 0 decimals; otherwise x * 10**d rounds before a division."""
    return Result(np.round(x, decimals), decimals == 0 or x.dtype.kind != "f")


def _cast(x: np.ndarray, dtype: str) -> Result:
    """wgjit's casts: float -> int truncates and saturates at the largest float32 inside the
    int range (2**31 - 128 for int32: what WGSL's conversion gives), NaN -> 0; to bool is != 0."""
    dt = np.dtype(dtype)
    if x.dtype.kind == "f" and dt.kind in "iu":
        info = np.iinfo(dt)
        hi = float(np.nextafter(np.float32(info.max), np.float32(0)))  # 2**31 itself is out of range
        a = np.nan_to_num(x.astype(F64), nan=0.0, posinf=hi, neginf=info.min)
        return Result(np.trunc(np.clip(a, info.min, hi)).astype(dt), True)
    r = x.astype(dt)
    if dt.kind == "f":
        return Result(r, representable(x.astype(F64), r))
    return Result(r, True)


def _sum(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> Result:
    dt = I32 if x.dtype == BOOL else x.dtype
    a = x.astype(dt)
    if dt.kind == "f":
        r = np.sum(_up(a), axis=axis, keepdims=keepdims, dtype=F32).astype(dt)
        total = np.sum(np.abs(a.astype(F64)), axis=axis, keepdims=keepdims)
        return Result(r, sums_exact(total, granularity(a), a), total)
    return Result(np.sum(a, axis=axis, keepdims=keepdims, dtype=I32), True)


def _prod(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> Result:
    """np.prod as wgjit computes it: bools as int32, ints wrapping in their type, floats in float32
    (float16 rounded once); a product of n terms is off by up to n roundings, in any order."""
    dt = I32 if x.dtype == BOOL else x.dtype
    a = x.astype(dt)
    if dt.kind != "f":
        return Result(np.prod(a, axis=axis, keepdims=keepdims, dtype=dt), True)
    r = np.prod(_up(a), axis=axis, keepdims=keepdims, dtype=F32)
    n = a.size // max(r.size, 1)
    with np.errstate(all="ignore"):
        return Result(r.astype(dt), False, np.abs(r.astype(F64)) * n)


def _mean(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> Result:
    dt = to_float(x.dtype)
    a = _up(x.astype(dt))
    r = np.mean(a, axis=axis, keepdims=keepdims, dtype=F32).astype(dt)
    return Result(r, False, np.mean(np.abs(a.astype(F64)), axis=axis, keepdims=keepdims))


def _extreme(fn: Callable[..., np.ndarray]) -> Callable[..., Result]:
    def ref(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> Result:
        return Result(fn(x, axis=axis, keepdims=keepdims), True)

    return ref


def _arg(fn: Callable[..., np.ndarray]) -> Callable[..., Result]:
    def ref(x: np.ndarray, axis: int | None = None, keepdims: bool = False) -> Result:
        return Result(fn(x, axis=axis, keepdims=keepdims).astype(I32), True)

    return ref


def _softmax(log: bool) -> Callable[..., Result]:
    def ref(x: np.ndarray, axis: int = -1) -> Result:
        dt = to_float(x.dtype)
        a = _up(x.astype(dt))
        m = np.max(a, axis=axis, keepdims=True) if a.size else a
        e = np.exp(a - m)
        s = np.sum(e, axis=axis, keepdims=True)
        r = (a - m) - np.log(s) if log else e / s
        with np.errstate(all="ignore"):
            # log_softmax: log(sum) of a sum near 1 carries an absolute error of a few ulp of 1
            mag = np.abs(r) * np.abs(a - m) + (np.abs(a - m) + 0.05 if log else 0)
        return Result(r.astype(dt), False, mag)

    return ref


def _refuse_overflowing_products(a: np.ndarray, c: np.ndarray) -> None:
    """The fuzzer's documented domain for products (NUMERICS.md "Drivers"): NVIDIA fuses a * b + acc,
    so a product past float32's range is not rounded to inf before the add, and a dot product
    holding it and an infinite term is that inf where numpy's inf - inf gives NaN."""
    if a.dtype.kind != "f" or not a.size or not c.size:
        return
    fa, fc = np.abs(a[np.isfinite(a)]).astype(F64), np.abs(c[np.isfinite(c)]).astype(F64)
    if fa.size and fc.size and float(fa.max()) * float(fc.max()) > float(np.finfo(F32).max):
        raise ValueError("documented: a finite product past float32's range is fused into the sum on NVIDIA")


def _matmul(x: np.ndarray, y: np.ndarray) -> Result:
    dt = result_type(x, y)
    a, c = x.astype(dt), y.astype(dt)
    _refuse_overflowing_products(a, c)
    r = np.matmul(_up(a), _up(c)).astype(dt) + dt.type(0)  # a sum starts at +0.0 (see _product)
    abs_prod = np.matmul(np.abs(a.astype(F64)), np.abs(c.astype(F64)))
    ok = sums_exact(abs_prod, granularity(a) * granularity(c), a, c)
    return Result(r, ok, abs_prod)


def _concat(*xs: np.ndarray, axis: int = 0) -> Result:
    dt = result_type(*xs)
    return Result(np.concatenate([x.astype(dt) for x in xs], axis=axis), True)


def _stack(*xs: np.ndarray, axis: int = 0) -> Result:
    dt = result_type(*xs)
    return Result(np.stack([x.astype(dt) for x in xs], axis=axis), True)


def _where(c: np.ndarray, x: Any, y: Any) -> Result:
    dt = result_type(x, y)
    return Result(np.where(c.astype(bool), _arr(x, dt), _arr(y, dt)).astype(dt), True)


def _pow_mag(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        r = np.power(a, c)
        return np.nan_to_num(r * np.abs(c * np.log2(np.maximum(a, 1e-30))), nan=0.0, posinf=0.0)


def _pow(x: Any, y: Any) -> Result:
    dt = result_type(x, y)
    a, c = _arr(x, dt), _arr(y, dt)
    if dt.kind != "f":
        if np.any(c < 0):
            raise ValueError("integer to a negative power")
        r = np.power(a.astype(F64), c.astype(F64))
        if np.any(np.abs(r) >= 2**24):
            raise ValueError("documented: int pow is exact only while |result| < 2**24")
        return Result(r.astype(dt), True)
    # full-shape exponents: numpy computes x ** 0.5 with a scalar 0.5 as sqrt(x), so (-inf) ** 0.5
    # gave NaN there and C's inf (NUMERICS.md) for an exponent array, depending on numpy's version
    shape = np.broadcast_shapes(a.shape, c.shape)
    a, c = np.array(np.broadcast_to(a, shape)), np.array(np.broadcast_to(c, shape))
    r = np.power(_up(a), _up(c)).astype(dt)
    return Result(r, representable(np.power(a.astype(F64), c.astype(F64)), r), _pow_mag(np.abs(_up(a)), _up(c)))


def _getitem(x: np.ndarray, index: tuple[Any, ...]) -> np.ndarray:
    return x[index]


def _index_src(index: tuple[Any, ...]) -> str:
    parts = []
    for it in index:
        if it is None:
            parts.append("None")
        elif it is Ellipsis:
            parts.append("...")
        elif isinstance(it, slice):
            s = ("" if it.start is None else str(it.start)) + ":" + ("" if it.stop is None else str(it.stop))
            parts.append(s if it.step is None else f"{s}:{it.step}")
        else:
            parts.append(str(it))
    return ", ".join(parts) if parts else "()"


# --- draw functions ---------------------------------------------------------------------


def d_unary(dtypes: Sequence[np.dtype]) -> Callable[[Builder], Call | None]:
    def draw(b: Builder) -> Call | None:
        return Call((operand(b, dtypes),))

    return draw


def d_binary(
    dtypes: Sequence[np.dtype],
    scalars: bool = True,
    no_bool_result: bool = True,
    guard: Callable[[Any, Any], bool] | None = None,
) -> Callable[[Builder], Call | None]:
    def draw(b: Builder) -> Call | None:
        x = operand(b, dtypes)
        y = partner(b, x, dtypes, scalars)
        if no_bool_result and result_type(b.value(x), b.value(y)) == BOOL:
            return None
        swap = b.draw(st.integers(0, 3)) == 0
        x, y = (y, x) if swap else (x, y)
        if guard is not None and not guard(b.value(x), b.value(y)):
            return None
        return Call((x, y))

    return draw


def small_quotient(x: Any, y: Any) -> bool:
    """Documented limit of float // and %: numpy's answer needs the exact remainder, which the
    GPU gets (with a fused fma) while |x / y| < 2**24; lavapipe's fma is not fused, so stay below."""
    try:
        if result_type(x, y).kind != "f":
            return True
        with np.errstate(all="ignore"):
            q = np.abs(np.asarray(x, F64) / np.asarray(y, F64))
    except ValueError:  # shapes that do not broadcast: Builder.add refuses the step anyway
        return True
    return not np.any(np.isfinite(q) & (q >= 2.0**22))


def d_pow(b: Builder) -> Call | None:
    x = operand(b, (F32, F16, I32))
    xv = b.value(x)
    if xv.dtype == I32:
        return Call((x, b.draw(st.integers(0, 3))))
    if b.draw(st.booleans()):
        return Call((x, b.draw(st.sampled_from([0.5, 2, 3, -1, 1.5, 0, -0.5]))))
    y = partner(b, x, (F32, F16), scalars=False)
    return Call((x, y))


def d_where(b: Builder) -> Call | None:
    c = operand(b, (BOOL, BOOL, I32, F32))
    cv = b.value(c)
    x = partner(b, c, (F32, I32, BOOL, F16))
    y = partner(b, c, (F32, I32, BOOL, F16))
    if not any(isinstance(a, Ref) for a in (x, y)) and b.draw(st.booleans()):
        return None
    del cv
    return Call((c, x, y))


def d_round(b: Builder) -> Call | None:
    x = operand(b, _NUM)
    return Call((x,), (("decimals", b.draw(st.sampled_from([0, 0, 1, 2, -1]))),))


def d_cast(b: Builder) -> Call | None:
    x = operand(b, (F32, F16, I32, BOOL))
    return Call((x,), (("dtype", b.dtype((F32, I32, BOOL, F16)).name),))


def d_reduce(dtypes: Sequence[np.dtype], nonempty: bool = False) -> Callable[[Builder], Call | None]:
    def draw(b: Builder) -> Call | None:
        x = operand(b, dtypes)
        v = b.value(x)
        axis = axes_of(b, v.ndim)
        if nonempty:
            axes = range(v.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
            if any(v.shape[a] == 0 for a in axes):
                return None
        return Call((x,), (("axis", axis), ("keepdims", b.draw(st.booleans()))))

    return draw


def d_argreduce(b: Builder) -> Call | None:
    x = operand(b, (F32, F16, I32, BOOL))
    v = b.value(x)
    axis = axes_of(b, v.ndim, single=True)
    if v.size == 0 or (axis is not None and v.shape[axis] == 0):
        return None
    return Call((x,), (("axis", axis), ("keepdims", b.draw(st.booleans()))))


def d_softmax(b: Builder) -> Call | None:
    x = operand(b, (F32, F16, I32))
    v = b.value(x)
    if v.ndim == 0:
        return Call((x,), (("axis", b.draw(st.sampled_from([0, -1]))),))
    return Call((x,), (("axis", b.draw(st.integers(-v.ndim, v.ndim - 1))),))


def d_matmul(b: Builder) -> Call | None:
    x = b.pick(lambda v: v.dtype in FLOATS and v.ndim >= 1)
    if x is None or b.draw(st.integers(0, 3)) == 0:
        shape = b.shape(b.draw(st.integers(1, 4)))
        x = b.fresh(shape, b.dtype(FLOATS))
    xv = b.value(x)
    k = xv.shape[-1]
    kind = b.draw(st.sampled_from(["vec", "mat", "batched"]))
    n = b.draw(st.sampled_from([1, 2, 3, 4, 5, 8]))
    if kind == "vec":
        shape: tuple[int, ...] = (k,)
    elif kind == "mat":
        shape = (k, n)
    else:
        batch = broadcast_partner(b, xv.shape[:-2]) if xv.ndim > 2 else (b.draw(st.sampled_from([1, 2, 3])),)
        shape = tuple(batch) + (k, n)
    if math.prod(shape) > MAX_SIZE:
        return None
    dt = b.value(x).dtype if b.draw(st.integers(0, 3)) else b.dtype(FLOATS)
    form = b.draw(st.integers(0, 5))
    if form <= 1 and len(shape) >= 2:
        # the transposed view of a fresh input: a strided B (gemv k_contig, gemm strides)
        t = b.fresh(shape[:-2] + (shape[-1], shape[-2]), dt)
        y = b.add("swapaxes", (t,), (("a0", -1), ("a1", -2)))
    elif form == 2:
        # a broadcast constant (every stride 0): x @ ones((k, 1)) once found no GEMV width
        y = b.add("full", (), (("shape", shape), ("value", b.scalar(F32))))
    else:
        y = b.pick_or_fresh(lambda v: v.shape == shape and v.dtype in FLOATS, shape, (dt,))
    if y is None:
        return None
    return Call((y, x) if kind == "vec" and xv.ndim == 1 and b.draw(st.booleans()) else (x, y))


def _float_objects(a: np.ndarray) -> np.ndarray:
    """`a` as an object array of its own numpy scalars (float32 arithmetic stays float32)."""
    out = np.empty(a.shape, dtype=object)
    out.reshape(-1)[:] = list(a.reshape(-1))
    return out


def _product(fn: Callable[..., np.ndarray], summed: bool = True) -> Callable[..., Result]:
    """A sum of products (dot, tensordot, einsum...) in wgjit's dtype: float16 operands in float32;
    exact when every partial sum is representable, else within the sum of |terms|. `summed`: the
    result is a sum, which starts at +0.0 (NUMERICS.md: a sum of zeros, some -0.0, is +0.0, as BLAS
    and np.vdot give; numpy's own loop for short vectors starts at the first product); `outer` is
    products alone, whose signs stay."""

    def ref(*xs: np.ndarray, **params: Any) -> Result:
        dt = result_type(*xs)
        ops = [x.astype(dt) for x in xs]
        if dt == BOOL:
            return Result(fn(*[o.astype(I32) for o in ops], **params) != 0, True)
        if dt.kind != "f":
            return Result(np.asarray(fn(*ops, **params)).astype(dt), True)
        ups = [_up(o) for o in ops]
        if not all(np.isfinite(u).all() for u in ups):
            # BLAS may skip a product with a zero factor (numpy's float32 tensordot gave 0 for
            # NaN * 0); object arrays of numpy float32s multiply every pair, in float32
            ups = [_float_objects(u) for u in ups]
        r = np.asarray(fn(*ups, **params)).astype(dt)
        if summed:
            r = r + dt.type(0)  # -0.0 + 0.0 is +0.0; every other value stays
        abs_terms = np.asarray(fn(*[np.abs(o.astype(F64)) for o in ops], **params))
        grain = math.prod(granularity(o) for o in ops)
        return Result(r, sums_exact(abs_terms, grain, *ops), abs_terms)

    return ref


def d_dot(b: Builder) -> Call | None:
    """np.dot's cases: a 0-d side, vector . vector, N-D . 1-D and N-D . M-D (a's last, b's second to last)."""
    x = operand(b, _NUM + (BOOL,))
    xv = b.value(x)
    if xv.ndim == 0:
        return Call((x, partner(b, x, _NUM, scalars=False)))
    k = xv.shape[-1]
    shape = b.draw(st.sampled_from([(k,), (k, 3), (2, k, 3)]))
    if math.prod(shape) > MAX_SIZE:
        return None
    return Call((x, b.pick_or_fresh(lambda v: v.shape == shape, shape, (xv.dtype,))))


def d_outer(b: Builder) -> Call | None:
    x = operand(b, _NUM + (BOOL,))
    y = operand(b, _NUM + (BOOL,))
    if b.value(x).size * b.value(y).size > MAX_SIZE:
        return None
    return Call((x, y))


def d_vdot(b: Builder) -> Call | None:
    x = operand(b, _NUM + (BOOL,))
    xv = b.value(x)
    shape = b.draw(st.sampled_from([xv.shape, (xv.size,)]))
    return Call((x, b.pick_or_fresh(lambda v: v.size == xv.size, shape, (xv.dtype,))))


def d_tensordot(b: Builder) -> Call | None:
    x = operand(b, _NUM)
    xv = b.value(x)
    n = b.draw(st.integers(0, min(2, xv.ndim)))
    shape = xv.shape[xv.ndim - n :] + tuple(b.draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    if math.prod(shape) > MAX_SIZE or math.prod(xv.shape[: xv.ndim - n] + shape[n:]) > MAX_SIZE:
        return None
    return Call((x, b.pick_or_fresh(lambda v: v.shape == shape, shape, (xv.dtype,))), (("axes", n),))


# einsum subscripts and the shapes of their operands, from sizes i, j, k (b a batch of 2)
EINSUMS = {
    "ij,jk->ik": lambda i, j, k: [(i, j), (j, k)],
    "bij,bjk->bik": lambda i, j, k: [(2, i, j), (2, j, k)],
    "i,i": lambda i, j, k: [(i,), (i,)],
    "ij->ji": lambda i, j, k: [(i, j)],
    "ii->i": lambda i, j, k: [(i, i)],
    "ij,j->i": lambda i, j, k: [(i, j), (j,)],
    "...j,kj": lambda i, j, k: [(2, i, j), (k, j)],
    "ijk->k": lambda i, j, k: [(i, j, k)],
    "ij,jk,kl->il": lambda i, j, k: [(i, j), (j, k), (k, 2)],
    "i,j->ij": lambda i, j, k: [(i,), (j,)],
}


def _einsum_pairwise(*ops: np.ndarray, spec: str) -> np.ndarray:
    """np.einsum contracting the operands pairwise, left to right, as tr.einsum does: with
    infinities the order decides between inf and NaN (a one-go contraction multiplies 0 * x * inf)."""
    if len(ops) <= 2:
        return np.einsum(spec, *ops)
    return np.einsum(spec, *ops, optimize=["einsum_path", *[(0, 1)] * (len(ops) - 1)])


def _einsum_ref(*xs: np.ndarray, spec: str) -> Result:
    """tr.einsum's reference: three or more operands are contracted pairwise, left to right, each
    product rounded to the result dtype as wgjit's intermediates are (a float16 intermediate may
    overflow to inf where a wider one would not); the tolerance is the whole contraction's."""
    ref = _product(_einsum_pairwise)
    whole = ref(*xs, spec=spec)
    if len(xs) <= 2 or "->" not in spec:
        return whole
    ins, out = spec.split("->")
    labels = ins.split(",")
    x, lx = xs[0], labels[0]
    for j in range(1, len(xs)):
        later = set(out).union(*labels[j + 1 :])
        keep = "".join(dict.fromkeys(c for c in lx + labels[j] if c in later))
        x, lx = ref(x, xs[j], spec=f"{lx},{labels[j]}->{keep}").value, keep
    return Result(np.einsum(f"{lx}->{out}", x), whole.exact, whole.mag)


def d_einsum(b: Builder) -> Call | None:
    spec = b.draw(st.sampled_from(sorted(EINSUMS)))
    sizes = [b.draw(st.sampled_from([0, 1, 2, 3, 5])) for _ in range(3)]
    dt = b.dtype(_NUM)
    args = tuple(b.fresh(shape, dt) for shape in EINSUMS[spec](*sizes))
    return Call(args, (("spec", spec),))


def d_concat(stack: bool) -> Callable[[Builder], Call | None]:
    def draw(b: Builder) -> Call | None:
        x = operand(b, (F32, I32, BOOL, F16))
        v = b.value(x)
        if v.ndim == 0 and not stack:
            return None
        nd = v.ndim + 1 if stack else v.ndim
        axis = b.draw(st.integers(-nd, nd - 1))
        count = b.draw(st.sampled_from([1, 2, 2, 3, 9]))
        args: list[Arg] = [x]
        for _ in range(count):
            shape = list(v.shape)
            if not stack:
                shape[axis] = b.draw(st.sampled_from([0, 1, 2, 3]))
            shape_t = tuple(shape)
            same = b.draw(st.integers(0, 3)) > 0
            dts = (v.dtype,) if same else (F32, I32, BOOL, F16)
            args.append(b.pick_or_fresh(lambda w, s=shape_t, d=dts: w.shape == s and w.dtype in d, shape_t, dts))
        if sum(math.prod(b.value(a).shape) for a in args) > MAX_SIZE * 2:
            return None
        return Call(tuple(args), (("axis", axis),))

    return draw


def d_reshape(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    v = b.value(x)
    n = v.size
    dims: list[int] = []
    rest = n
    for _ in range(b.draw(st.integers(0, 4))):
        divs = [d for d in range(1, min(rest, 8) + 1) if rest % d == 0] if rest else [0, 1, 2]
        d = b.draw(st.sampled_from(divs))
        dims.append(d)
        rest = rest // d if d else rest
    if n and math.prod(dims) != n:
        dims.append(n // math.prod(dims))
    if n == 0 and 0 not in dims:
        dims.append(0)
    if dims and n and b.draw(st.booleans()):
        dims[b.draw(st.integers(0, len(dims) - 1))] = -1
    return Call((x,), (("shape", tuple(dims)),))


def d_permute(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    return Call((x,), (("order", tuple(b.draw(st.permutations(range(nd))))),))


def d_swapaxes(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    if nd < 1:
        return None
    return Call((x,), (("a0", b.draw(st.integers(-nd, nd - 1))), ("a1", b.draw(st.integers(-nd, nd - 1)))))


def d_transpose(b: Builder) -> Call | None:
    """numpy's transpose: no axes, or all of them in some order (negative ones too); or two axes of a
    tensor of other than 2 dims, which wgjit swaps as torch does (numpy refuses: the ref swaps)."""
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    kind = b.draw(st.sampled_from(["none", "all", "two"]))
    if kind == "none":
        return Call((x,), (("axes", ()),))
    if kind == "two":
        if nd in (0, 2):
            return None
        return Call((x,), (("axes", (b.draw(st.integers(-nd, nd - 1)), b.draw(st.integers(-nd, nd - 1)))),))
    order = b.draw(st.permutations(range(nd)))
    if nd == 2 and tuple(order) == (0, 1):
        return None  # refused: numpy keeps the order, torch swaps
    return Call((x,), (("axes", tuple(a - nd if b.draw(st.booleans()) else a for a in order)),))


def _transpose(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if len(axes) == 2 and x.ndim != 2:
        return np.swapaxes(x, *axes)
    return np.transpose(x, axes or None)


def d_expand(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    v = b.value(x)
    new = [b.draw(st.sampled_from([1, 2, 3])) for _ in range(b.draw(st.integers(0, 2)))]
    for d in v.shape:
        new.append(b.draw(st.sampled_from([1, 2, 3, 4])) if d == 1 else (d if b.draw(st.booleans()) else -1))
    if math.prod(abs(d) if d != -1 else 1 for d in new) * max(v.size, 1) > MAX_SIZE * 2:
        return None
    return Call((x,), (("shape", tuple(new)),))


def d_squeeze(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    v = b.value(x)
    ones = [i for i, d in enumerate(v.shape) if d == 1]
    if not ones or b.draw(st.booleans()):
        return Call((x,), (("axis", None),))
    chosen = b.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
    return Call((x,), (("axis", chosen[0] if len(chosen) == 1 else tuple(chosen)),))


def d_unsqueeze(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    return Call((x,), (("axis", b.draw(st.integers(-nd - 1, nd))),))


def d_flatten(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    if nd == 0:
        return Call((x,), (("start", 0), ("end", -1)))
    s = b.draw(st.integers(0, nd - 1))
    e = b.draw(st.integers(s, nd - 1))
    return Call(
        (x,), (("start", s - nd if b.draw(st.booleans()) else s), ("end", e - nd if b.draw(st.booleans()) else e))
    )


def d_index(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    v = b.value(x)
    items: list[Any] = []
    for d in v.shape:
        kind = b.draw(st.sampled_from(["int", "slice", "slice", "full"] if d else ["slice", "full"]))
        if kind == "int":
            items.append(b.draw(st.integers(-d, d - 1)))
        elif kind == "full":
            items.append(slice(None))
        else:
            start = b.draw(st.one_of(st.none(), st.integers(-d - 2, d + 2)))
            stop = b.draw(st.one_of(st.none(), st.integers(-d - 2, d + 2)))
            step = b.draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            items.append(slice(start, stop, step))
    # drop trailing full slices, put in Nones and maybe one Ellipsis
    while items and items[-1] == slice(None) and b.draw(st.booleans()):
        items.pop()
    for _ in range(b.draw(st.integers(0, 2))):
        items.insert(b.draw(st.integers(0, len(items))), None)
    if items and b.draw(st.integers(0, 3)) == 0:
        lo = b.draw(st.integers(0, len(items)))
        hi = b.draw(st.integers(lo, len(items)))
        if all(it == slice(None) for it in items[lo:hi]):
            items[lo:hi] = [Ellipsis]
    return Call((x,), (("index", tuple(items)),))


def d_factory(kind: str) -> Callable[[Builder], Call | None]:
    def draw(b: Builder) -> Call | None:
        if kind == "arange":
            start = b.draw(st.integers(-5, 5))
            stop = start + b.draw(st.integers(0, 20))
            step = b.draw(st.sampled_from([1, 2, 3]))
            if b.draw(st.booleans()):
                return Call((), (("start", float(start) / 2), ("stop", float(stop) / 2), ("step", step / 2)))
            return Call((), (("start", start), ("stop", stop), ("step", step)))
        value = b.scalar(F32)
        return Call((), (("shape", b.shape()), ("value", value)))

    return draw


def d_eye(b: Builder) -> Call | None:
    n, m = b.draw(st.integers(0, 6)), b.draw(st.one_of(st.none(), st.integers(0, 6)))
    return Call((), (("n", n), ("m", m), ("k", b.draw(st.integers(-2, 2))), ("dtype", b.dtype().name)))


def d_linspace(b: Builder) -> Call | None:
    start, stop = b.draw(st.sampled_from([-2.0, 0.0, 0.5, 3.0])), b.draw(st.sampled_from([-1.0, 1.0, 2.5, 10.0]))
    return Call(
        (), (("start", start), ("stop", stop), ("num", b.draw(st.integers(0, 9))), ("end", b.draw(st.booleans())))
    )


def _linspace(start: float, stop: float, num: int, end: bool) -> Result:
    """float32 start + i * float32 step: within a few ulp of |start| + |stop| of numpy's float64 values."""
    r = np.linspace(start, stop, num, endpoint=end).astype(F32)
    return Result(r, False, np.full(r.shape, abs(start) + abs(stop)))


def d_tri(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    if b.value(x).ndim == 0:
        return None
    return Call((x,), (("k", b.draw(st.integers(-2, 2))),))


def d_moveaxis(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    if nd == 0:
        return None
    return Call((x,), (("src", b.draw(st.integers(-nd, nd - 1))), ("dst", b.draw(st.integers(-nd, nd - 1)))))


def d_flip(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    return Call((x,), (("axis", axes_of(b, b.value(x).ndim)),))


def d_roll(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    axis = None if nd == 0 or b.draw(st.booleans()) else b.draw(st.integers(-nd, nd - 1))
    return Call((x,), (("shift", b.draw(st.integers(-7, 7))), ("axis", axis)))


def d_tile(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    return Call((x,), (("reps", tuple(b.draw(st.lists(st.integers(0, 3), max_size=3)))),))


def d_repeat(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    v = b.value(x)
    axis = None if v.ndim == 0 or b.draw(st.booleans()) else b.draw(st.integers(-v.ndim, v.ndim - 1))
    n = v.size if axis is None else v.shape[axis]
    if b.draw(st.booleans()):
        return Call((x,), (("repeats", b.draw(st.integers(0, 3))), ("axis", axis)))
    return Call((x,), (("repeats", tuple(b.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))), ("axis", axis)))


def d_split(kind: str) -> Callable[[Builder], Call | None]:
    """One part of np.split / np.array_split / torch.chunk (the part's index is a parameter)."""

    def draw(b: Builder) -> Call | None:
        x = operand(b, (F32, I32, BOOL, F16))
        v = b.value(x)
        if v.ndim == 0:
            return None
        axis = b.draw(st.integers(-v.ndim, v.ndim - 1))
        n = v.shape[axis]
        if kind != "chunk" and b.draw(st.booleans()):
            cuts = tuple(sorted(b.draw(st.lists(st.integers(0, n), max_size=3))))
            return Call((x,), (("parts", cuts), ("axis", axis), ("part", b.draw(st.integers(0, len(cuts))))))
        parts = b.draw(st.integers(1, 4))
        if kind == "split" and n % parts:
            return None
        count = len(np.array_split(np.empty(n), parts)) if kind != "chunk" else len(range(0, n, max(1, -(-n // parts))))
        if count == 0:
            return None
        return Call((x,), (("parts", parts), ("axis", axis), ("part", b.draw(st.integers(0, count - 1)))))

    return draw


def _chunk(x: np.ndarray, parts: int, axis: int, part: int) -> np.ndarray:
    size = max(1, -(-x.shape[axis] // parts))
    return np.array_split(x, list(range(size, x.shape[axis], size)), axis)[part]


def d_like(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    value = b.scalar(b.value(x).dtype)
    if b.value(x).dtype == I32 and isinstance(value, float) and not math.isfinite(value):
        return None  # NaN and inf have no int32 value: refused (NUMERICS.md, "Values entering wgjit")
    return Call((x,), (("value", value),))


def _full(shape: tuple[int, ...], value: Any) -> np.ndarray:
    dt = BOOL if isinstance(value, bool) else I32 if isinstance(value, int) else F32
    return np.full(shape, value, dtype=dt)


def _full_like(x: np.ndarray, value: Any) -> np.ndarray:
    stored = entry_expected(value, x.dtype.name)  # NUMERICS.md "Values entering wgjit"
    if stored is None:
        raise OverflowError(f"full_like: {value!r} does not enter {x.dtype.name}; wgjit refuses it")
    return np.full(x.shape, stored, dtype=x.dtype)


def _arange(start: float, stop: float, step: float) -> np.ndarray:
    dt = I32 if all(isinstance(v, int) for v in (start, stop, step)) else F32
    n = max(0, math.ceil((stop - start) / step))
    return (start + step * np.arange(n, dtype=F64)).astype(dt)


# --- transformer ops (tracer/nn.py) ---------------------------------------------------------


def _opt(srcs: list[str], params: dict[str, Any], name: str, pos: int) -> str:
    """The source of an optional tensor operand: args[pos] when params[name], else None."""
    return srcs[pos] if params.get(name) else "None"


def d_clamp(b: Builder) -> Call | None:
    x = operand(b, _NUM)
    lo = b.draw(st.one_of(st.none(), st.sampled_from([-1.0, 0, 0.5, -2])))
    hi = b.draw(st.one_of(st.none(), st.sampled_from([1.0, 2, 0.25, -1])))
    if lo is None and hi is None:
        return None
    return Call((x,), (("lo", lo), ("hi", hi)))


def _clamp(x: np.ndarray, lo: Any, hi: Any) -> Result:
    maximum, minimum = _elementwise(np.maximum, "always"), _elementwise(np.minimum, "always")
    y = x if lo is None else maximum(x, lo).value
    return Result(y if hi is None else minimum(y, hi).value, True)


def d_var(b: Builder) -> Call | None:
    call = d_reduce(_ANY)(b)
    return None if call is None else Call(call.args, call.params + (("ddof", b.draw(st.sampled_from([0, 0, 1]))),))


def _var(root: bool) -> Callable[..., Result]:
    """np.var / np.std in float64. The centered values carry the rounding of the mean: an absolute
    error of var scaling with mean(x**2); through the square root, std's grows as its root."""

    def ref(x: np.ndarray, axis: Any = None, keepdims: bool = False, ddof: int = 0) -> Result:
        dt = to_float(x.dtype)
        a = _up(x.astype(dt)).astype(F64)
        with np.errstate(all="ignore"):
            r = np.var(a, axis=axis, ddof=ddof, keepdims=keepdims)
            # numpy (and wgjit) square in float32 (float16 data too): past its range the variance is inf
            r32 = np.var(a.astype(F32), axis=axis, ddof=ddof, keepdims=keepdims)
            r = np.where(np.isinf(r32) & np.isfinite(r), r32, r)
            mag = np.mean(a * a, axis=axis, keepdims=keepdims) if a.size else np.zeros_like(r)
            if root:
                r, mag = np.sqrt(r), np.sqrt(mag / (F16_EPS if dt == F16 else 1e-5))
        return Result(np.asarray(r).astype(dt), False, mag)

    return ref


def _logsumexp(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> Result:
    """scipy's logsumexp in float64: the largest element (where finite) taken out first."""
    dt = to_float(x.dtype)
    a = _up(x.astype(dt)).astype(F64)
    axes = tuple(range(a.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    shape = np.sum(a, axis=axes, keepdims=keepdims).shape
    if any(a.shape[i] == 0 for i in axes):
        return Result(np.full(shape, -np.inf, dt), True)
    m = np.max(a, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(all="ignore"):
        r = np.log(np.sum(np.exp(a - m), axis=axes, keepdims=keepdims)) + m.reshape(shape)
    return Result(r.astype(dt), False, np.abs(m).reshape(shape) + 1.0)


TRIG_MAX = 1e4  # NUMERICS.md: sin and cos are approximate past this on NVIDIA (WGSL bounds them on [-pi, pi] only)


def _trig(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """np.sin / np.cos inside the range where GPUs keep them accurate (the fuzzer's documented domain)."""

    def ref(a: np.ndarray) -> np.ndarray:
        finite = np.abs(a[np.isfinite(a)]) if a.size else a
        if finite.size and float(finite.max()) > TRIG_MAX:
            raise ValueError(f"documented: sin and cos are approximate past |x| = {TRIG_MAX:g}")
        return fn(a)

    return ref


def d_scan(b: Builder) -> Call | None:
    x = operand(b, _ANY)
    nd = b.value(x).ndim
    axis = None if nd == 0 or b.draw(st.booleans()) else b.draw(st.integers(-nd, nd - 1))
    return Call((x,), (("axis", axis),))


def _scan(fn: Callable[..., np.ndarray]) -> Callable[..., Result]:
    """np.cumsum / np.cumprod as wgjit runs them: bools as int32, floats accumulated in float32
    in numpy's order (rows this short are one thread's), float16 rounded once per output. Exact
    unless a partial result is a subnormal (the GPU may flush it to zero)."""

    def ref(x: np.ndarray, axis: int | None = None) -> Result:
        a = x.astype(I32) if x.dtype == BOOL else x
        if a.dtype.kind != "f":
            return Result(fn(a, axis=axis, dtype=a.dtype), True)
        r = fn(_up(a), axis=axis, dtype=F32)
        with np.errstate(invalid="ignore"):
            normal = np.all(~np.isfinite(r) | (r == 0) | (np.abs(r) >= np.finfo(F32).tiny))
        return Result(r.astype(a.dtype), bool(normal), np.abs(r))

    return ref


def d_sort(b: Builder) -> Call | None:
    """An operand, an axis (None flattens; a 0-d operand takes only None) and a direction."""
    x = operand(b, _ANY)
    nd = b.value(x).ndim
    axis = None if nd == 0 or b.draw(st.integers(0, 3)) == 0 else b.draw(st.integers(-nd, nd - 1))
    return Call((x,), (("axis", axis), ("descending", b.draw(st.booleans()))))


def d_topk(b: Builder) -> Call | None:
    x = b.pick(lambda v: v.dtype in _ANY and v.ndim >= 1)
    if x is None:
        return None
    v = b.value(x)
    axis = b.draw(st.integers(-v.ndim, v.ndim - 1))
    k = b.draw(st.integers(0, v.shape[axis]))
    return Call((x,), (("k", k), ("axis", axis), ("largest", b.draw(st.booleans()))))


def sort_order(x: np.ndarray, axis: int | None = -1, descending: bool = False) -> np.ndarray:
    """The stable argsort numpy's way: ascending NaN last; descending NaN first, then the largest;
    ties in index order (written from numpy's lexsort, apart from ir/optable/sorting.py's keys)."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    if not descending:
        return np.argsort(x, axis=axis, kind="stable").astype(I32)
    moved = np.moveaxis(x, axis, -1)
    nan = np.isnan(moved) if moved.dtype.kind == "f" else np.zeros(moved.shape, bool)
    neg = -np.where(nan, 0, moved).astype(np.float64 if moved.dtype.kind == "f" else np.int64)
    ids = np.broadcast_to(np.arange(moved.shape[-1]), moved.shape)
    return np.moveaxis(np.lexsort((ids, neg, ~nan), axis=-1), -1, axis).astype(I32)


def _argsort(x: np.ndarray, axis: int | None = -1, descending: bool = False) -> Result:
    return Result(sort_order(x, axis, descending), True)


def _sort(x: np.ndarray, axis: int | None = -1, descending: bool = False) -> Result:
    a = x.reshape(-1) if axis is None else x
    return Result(np.take_along_axis(a, sort_order(a, -1 if axis is None else axis, descending), axis=axis or 0), True)


def _topk(what: str) -> Callable[..., Result]:
    def ref(x: np.ndarray, k: int, axis: int, largest: bool) -> Result:
        ids = np.take(sort_order(x, axis, largest), np.arange(k), axis=axis)
        return Result(ids if what == "indices" else np.take_along_axis(x, ids, axis=axis), True)

    return ref


def d_nan_to_num(b: Builder) -> Call | None:
    return Call((operand(b, _ANY),), (("nan", b.draw(st.sampled_from([0.0, -1.0, 2.5]))),))


def d_masked_fill(b: Builder) -> Call | None:
    x = operand(b, _ANY)
    xv = b.value(x)
    shape = tuple(
        d if b.draw(st.booleans()) else 1 for d in xv.shape[len(xv.shape) - b.draw(st.integers(0, xv.ndim)) :]
    )
    mask = b.pick_or_fresh(
        lambda v: (
            v.dtype == BOOL and v.ndim <= xv.ndim and all(m in (1, d) for m, d in zip(v.shape[::-1], xv.shape[::-1]))
        ),
        shape,
        (BOOL,),
    )
    value = b.scalar(xv.dtype)
    if xv.dtype.kind in "iub" and isinstance(value, float) and not math.isfinite(value):
        return None  # NaN/inf into an int tensor: numpy's own cast is undefined there
    return Call((x, mask), (("value", value),))


def _masked_fill(x: np.ndarray, mask: np.ndarray, value: Any) -> Result:
    with np.errstate(all="ignore"):
        fill = np.array(value).astype(x.dtype)
    return Result(np.where(mask, fill, x), True)


def d_norm(rms: bool) -> Callable[[Builder], Call | None]:
    def draw(b: Builder) -> Call | None:
        x = operand(b, _NUM)
        xv = b.value(x)
        if xv.ndim == 0:
            return None
        n = xv.shape[-1]
        args: list[Arg] = [x]
        w = b.draw(st.booleans())
        if w:
            args.append(b.fresh((n,), F32))
        bias = not rms and b.draw(st.booleans())
        if bias:
            args.append(b.fresh((n,), F32))
        return Call(tuple(args), (("w", w), ("b", bias), ("eps", b.draw(st.sampled_from([1e-5, 1e-3])))))

    return draw


def _norm_ref(rms: bool) -> Callable[..., Result]:
    def ref(x: np.ndarray, *affine: np.ndarray, w: bool, b: bool, eps: float) -> Result:
        dt = to_float(x.dtype)
        a = x.astype(F32)
        if rms:
            scale = np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + np.float32(eps))
            y, mag = a / scale, np.abs(a) / scale
        else:
            mean = np.mean(a, axis=-1, keepdims=True)
            scale = np.sqrt(np.mean((a - mean) ** 2, axis=-1, keepdims=True) + np.float32(eps))
            y, mag = (a - mean) / scale, (np.abs(a) + np.abs(mean)) / scale
        rest = list(affine)
        if w:
            wt = rest.pop(0).astype(F32)
            y, mag = y * wt, mag * np.abs(wt)
        if b:
            bt = rest.pop(0).astype(F32)
            y, mag = y + bt, mag + np.abs(bt)
        return Result(y.astype(dt), False, mag)

    return ref


def d_index_select(b: Builder) -> Call | None:
    x = operand(b, _ANY)
    xv = b.value(x)
    if xv.ndim == 0:
        return None
    axis = b.draw(st.integers(-xv.ndim, xv.ndim - 1))
    ids_shape = tuple(b.draw(st.sampled_from([0, 1, 2, 3, 5])) for _ in range(b.draw(st.integers(0, 2))))
    if xv.shape[axis] == 0 and math.prod(ids_shape):
        return None
    if math.prod(ids_shape) * max(xv.size, 1) // max(xv.shape[axis], 1) > MAX_SIZE * 2:
        return None
    return Call((x, b.fresh_ids(ids_shape, xv.shape[axis])), (("axis", axis),))


def d_embedding(b: Builder) -> Call | None:
    t = b.pick(lambda v: v.ndim == 2 and v.shape[0] > 0)
    if t is None or b.draw(st.booleans()):
        t = b.fresh((b.draw(st.integers(1, 9)), b.draw(st.sampled_from([1, 3, 4, 8]))), b.dtype((F32, F16)))
    rows = b.value(t).shape[0]
    ids_shape = tuple(b.draw(st.sampled_from([1, 2, 3, 4])) for _ in range(b.draw(st.integers(0, 2))))
    return Call((t, b.fresh_ids(ids_shape, rows)))


def d_gather(b: Builder) -> Call | None:
    x = operand(b, _ANY)
    xv = b.value(x)
    if xv.ndim == 0:
        return None
    axis = b.draw(st.integers(-xv.ndim, xv.ndim - 1))
    if xv.shape[axis] == 0:
        return None
    shape = [d if b.draw(st.integers(0, 2)) else 1 for d in xv.shape]
    shape[axis] = b.draw(st.sampled_from([0, 1, 2, 3]))
    return Call((x, b.fresh_ids(tuple(shape), xv.shape[axis])), (("axis", axis),))


def d_linear(b: Builder) -> Call | None:
    x = operand(b, FLOATS)
    xv = b.value(x)
    if xv.ndim == 0:
        return None
    n = b.draw(st.sampled_from([1, 2, 3, 4, 8]))
    args: list[Arg] = [x, b.fresh((n, xv.shape[-1]), xv.dtype)]
    bias = b.draw(st.booleans())
    if bias:
        args.append(b.fresh((n,), xv.dtype))
    return Call(tuple(args), (("bias", bias),))


def _linear(x: np.ndarray, w: np.ndarray, *rest: np.ndarray, bias: bool) -> Result:
    dt = result_type(x, w, *rest)
    y = _up(x.astype(dt)) @ _up(w.astype(dt)).T
    mag = np.abs(x.astype(F64)) @ np.abs(w.astype(F64)).T
    if bias:
        y, mag = y + _up(rest[0].astype(dt)), mag + np.abs(rest[0].astype(F64))
    return Result(y.astype(dt), False, mag)


def d_conv1d(b: Builder) -> Call | None:
    groups = b.draw(st.sampled_from([1, 1, 2, 3]))
    cin, cout = groups * b.draw(st.integers(1, 3)), groups * b.draw(st.integers(1, 3))
    k, length = b.draw(st.integers(1, 4)), b.draw(st.integers(1, 12))
    batched = b.draw(st.booleans())
    dt = b.dtype(FLOATS)
    x = b.fresh(((b.draw(st.integers(1, 3)),) if batched else ()) + (cin, length), dt)
    args: list[Arg] = [x, b.fresh((cout, cin // groups, k), dt)]
    bias = b.draw(st.booleans())
    if bias:
        args.append(b.fresh((cout,), dt))
    stride, padding, dilation = b.draw(st.integers(1, 2)), b.draw(st.integers(0, 2)), b.draw(st.integers(1, 2))
    if length + 2 * padding - dilation * (k - 1) < 1:
        return None
    params = (("bias", bias), ("stride", stride), ("padding", padding), ("dilation", dilation), ("groups", groups))
    return Call(tuple(args), params)


def _conv1d(
    x: np.ndarray, w: np.ndarray, *rest: np.ndarray, bias: bool, stride: int, padding: int, dilation: int, groups: int
) -> Result:
    """torch's conv1d written as loops over outputs (independent of the interpreter's einsum).

    The products are float32 (float16 data too), as wgjit's: `1e30 * 1e30` overflows to inf there,
    so a -inf bias then gives NaN, not the -inf of wider products; the magnitude is float64."""
    dt = result_type(x, w, *rest)
    xs = x.astype(F32)[None] if x.ndim == 2 else x.astype(F32)
    wf = w.astype(F32)
    n, cin, length = xs.shape
    cout, cin_g, k = wf.shape
    lout = (length + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    xp = np.pad(xs, ((0, 0), (0, 0), (padding, padding)))
    out, mag = np.zeros((n, cout, lout), F32), np.zeros((n, cout, lout))
    for co in range(cout):
        g = co // (cout // groups)
        for j in range(lout):
            taps = xp[:, g * cin_g : (g + 1) * cin_g, j * stride : j * stride + dilation * (k - 1) + 1 : dilation]
            out[:, co, j] = np.sum(taps * wf[co], axis=(1, 2))
            mag[:, co, j] = np.sum(np.abs(taps.astype(F64) * wf[co].astype(F64)), axis=(1, 2))
    if bias:
        out, mag = out + rest[0].astype(F32)[:, None], mag + np.abs(rest[0].astype(F64))[:, None]
    if x.ndim == 2:
        out, mag = out[0], mag[0]
    return Result(out.astype(dt), False, mag)


def d_rope(b: Builder) -> Call | None:
    dt = b.dtype(FLOATS)
    shape = b.shape(b.draw(st.integers(1, 3)))[:-1] + (2 * b.draw(st.integers(1, 4)),)
    x = b.fresh(shape, dt)
    half = shape[-1] // 2
    angles = b.fresh(shape[:-1] + (half,), F32)  # cos and sin of one angle table
    cos, sin = b.add("cos", (angles,)), b.add("sin", (angles,))
    if cos is None or sin is None:
        return None
    return Call((x, cos, sin), (("interleaved", b.draw(st.booleans())),))


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> Result:
    dt = x.dtype  # rope keeps x's dtype (float16 activations with float32 angle tables stay float16)
    xf, c, s = x.astype(F64), cos.astype(F64), sin.astype(F64)
    h = x.shape[-1] // 2
    a, b_ = (xf[..., 0::2], xf[..., 1::2]) if interleaved else (xf[..., :h], xf[..., h:])
    first, second = a * c - b_ * s, b_ * c + a * s
    out = np.stack([first, second], -1).reshape(x.shape) if interleaved else np.concatenate([first, second], -1)
    mag = np.abs(a * c) + np.abs(b_ * s)
    mag = np.stack([mag, mag], -1).reshape(x.shape) if interleaved else np.concatenate([mag, mag], -1)
    return Result(out.astype(dt), False, mag)


# --- attention (tr.nn.scaled_dot_product_attention: one flash_attention dispatch) ----------------

ATTENTION_LAYOUTS = ("2d", "3d", "heads", "gqa", "mqa", "shared_kv")
LOG2E = 1.4426950408889634


def _fresh_with(b: Builder, data: np.ndarray) -> Ref:
    """A new input holding `data` (values the generator chose, not the style's)."""
    b.inputs.append(data)
    ref = b.add("input", (), (("index", len(b.inputs) - 1), ("realized", b.draw(st.integers(0, 3)) == 0)))
    assert ref is not None
    return ref


def _attention_heads(b: Builder) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The leading dims of q and of k/v for one head layout (ATTENTION_LAYOUTS)."""
    layout = b.draw(st.sampled_from(ATTENTION_LAYOUTS))
    batch = b.draw(st.sampled_from([1, 2]))
    if layout == "2d":
        return (), ()
    if layout == "3d":
        lead = (b.draw(st.sampled_from([1, 2, 3])),)
        return lead, lead
    if layout == "gqa":  # kv heads divide the query heads
        kv, group = b.draw(st.sampled_from([1, 2])), b.draw(st.sampled_from([2, 3]))
        return (batch, kv * group), (batch, kv)
    heads = b.draw(st.sampled_from([1, 2, 4]))
    if layout == "mqa":
        return (batch, heads), (batch, 1)
    return (batch, heads), ((batch, heads) if layout == "heads" else ())  # shared_kv: 2-D k, v over all


def d_attention(b: Builder) -> Call | None:
    """Every mask kind (none, bool, additive float32/float16 with -inf entries; each with or
    without causal), every head layout, masks broadcast over any dims, empty and length-1 sequences.

    v is finite: a key of weight 0 whose value is inf or NaN may or may not reach the result
    (tracer/nn.py documents it), so that case is not generated.
    """
    dt = b.dtype(FLOATS)
    qlead, klead = _attention_heads(b)
    lq, n = (b.draw(st.sampled_from([0, 1, 2, 3, 5, 8, 17])) for _ in range(2))
    e, ev = (b.draw(st.sampled_from([1, 3, 4, 8, 12])) for _ in range(2))
    target = np.broadcast_shapes(qlead, klead) + (lq, n) if len(qlead) < 2 else qlead + (lq, n)
    if max(math.prod(qlead) * lq * max(e, ev), math.prod(klead) * n * max(e, ev), math.prod(target)) > MAX_SIZE:
        return None
    q, k = b.fresh(qlead + (lq, e), dt), b.fresh(klead + (n, e), dt)
    with np.errstate(all="ignore"):
        vals = np.nan_to_num(b._data(klead + (n, ev), dt).astype(F64), nan=1.0, posinf=2.0, neginf=-2.0)
    args: list[Arg] = [q, k, _fresh_with(b, vals.astype(dt))]
    kind = b.draw(st.sampled_from(["none", "bool", "add", "add16"] if b.f16 else ["none", "bool", "add"]))
    if kind != "none":
        keep = b.draw(st.integers(0, len(target)))  # a suffix of the scores' shape, some dims 1
        shape = tuple(d if b.draw(st.integers(0, 2)) else 1 for d in target[len(target) - keep :])
        if kind == "bool":
            args.append(b.fresh(shape, BOOL))
        else:
            data = np.array(b._data(shape, F32), dtype=F64)  # an array even when shape is ()
            data[np.asarray(b.rng.random(shape) < 0.25)] = -np.inf
            with np.errstate(over="ignore"):
                args.append(_fresh_with(b, data.astype(F16 if kind == "add16" else F32)))
    # (B, H, Lq, Ev) outputs: the heads merged after, as a transformer layer does (passes.attention_layout
    # stores them so), or not
    merge = len(qlead) == 2 and b.draw(st.booleans())
    params = (
        ("mask", kind != "none"),
        ("causal", b.draw(st.booleans())),
        ("scale", b.draw(st.sampled_from([None, 0.5]))),
        ("merge", (qlead[0], lq, qlead[1] * ev) if merge else None),
    )
    return Call(tuple(args), params)


def _attention_code(s: list[str], p: dict[str, Any]) -> str:
    code = f"tr.nn.scaled_dot_product_attention({s[0]}, {s[1]}, {s[2]}, {_opt(s, p, 'mask', 3)}, is_causal={p['causal']}, scale={p['scale']!r})"
    merge = p.get("merge")
    return f"{code}.transpose(1, 2).reshape{merge}" if merge else code


def _attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *rest: np.ndarray,
    mask: bool,
    causal: bool,
    scale: float | None,
    merge: tuple[int, int, int] | None = None,
) -> Result:
    """softmax(q k^T * scale + mask) v as the flash kernel defines it: the scores a float32 dot
    product times scale * log2(e) in float32 (they overflow where the kernel's do), the rest in
    float64; a query that sees no key is NaN, no keys at all give 0. `merge`: the heads merged
    after, (B, H, Lq, Ev) -> (B, Lq, H * Ev)."""
    r = _attention_heads_first(q, k, v, *rest, mask=mask, causal=causal, scale=scale)
    if merge is None:
        return r
    value, mag = (None if a is None else np.swapaxes(a, 1, 2).reshape(merge) for a in (r.value, r.mag))
    return Result(value, r.exact, mag)


def _attention_heads_first(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *rest: np.ndarray, mask: bool, causal: bool, scale: float | None
) -> Result:
    dt = result_type(q, k, v)
    qf, kf, vf = (a.astype(F64) for a in (q, k, v))
    if q.ndim >= 3 and k.ndim >= 3 and q.shape[-3] != k.shape[-3]:  # grouped-query: kv head h // group
        kf, vf = (np.repeat(a, q.shape[-3] // k.shape[-3], axis=-3) for a in (kf, vf))
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    dot = np.matmul(qf, np.swapaxes(kf, -1, -2)).astype(F32)
    s = (dot * np.float32(sc * LOG2E)).astype(F64) / LOG2E
    lq, n = s.shape[-2:]
    out_shape = np.broadcast_shapes(s.shape[:-1] + (1,), vf.shape[:-2] + (1, 1))[:-1] + (v.shape[-1],)
    if n == 0:
        return Result(np.zeros(out_shape, dt), False, np.zeros(out_shape))
    seen = np.ones(s.shape, bool)
    if causal:
        seen = seen & (np.arange(n)[None, :] <= np.arange(lq)[:, None] + (n - lq))
    if mask and rest[0].dtype == BOOL:
        seen = seen & rest[0]
    elif mask:
        s = s + rest[0].astype(F64)
    s = np.where(seen, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    p = np.exp(s - m)
    p = p / p.sum(-1, keepdims=True)
    spread = np.where(np.isfinite(s), np.abs(s - m), 0).max(-1, keepdims=True) + 1
    return Result((p @ vf).astype(dt), False, (np.nan_to_num(np.abs(p)) @ np.abs(vf)) * spread)


# --- decode-step fragments (passes/fuse_gemv.py's groups, kernels/matmul/gemv_multi.py) ---------


def d_decode_block(b: Builder) -> Call | None:
    """A macro, not an op: it adds the steps of a decode layer's fragment itself (ordinary ops) and
    returns None. A row (1, K) (after an rms_norm or not) times two or three weights (q8_0 or q4_0
    ones, some of them, where K is whole blocks), then either SwiGLU (silu(gate) * up) or
    attention's first half: heads, rope on q and k, the one-hot cache update where(cond, k or v,
    cache), and attention over the updated caches."""
    dt = b.dtype(FLOATS)
    k = b.draw(st.sampled_from([4, 6, 8, 13, 16, 32, 64]))
    x = b.fresh(b.draw(st.sampled_from([(1, k), (1, 1, k)])), dt)
    if b.draw(st.booleans()):
        x = b.add("rms_norm", (x, b.fresh((k,), F32)), (("w", True), ("b", False), ("eps", 1e-5))) or x

    def linear(n: int) -> Ref | None:
        bias = b.draw(st.integers(0, 3)) == 0
        if k % 32 == 0 and b.draw(st.booleans()):  # a quantized weight (the qlinear op's arguments)
            args: tuple[Arg, ...] = (x, b.fresh((n, k), F32)) + ((b.fresh((n,), dt),) if bias else ())
            return b.add("qlinear", args, (("fmt", b.draw(st.sampled_from(QUANT_FORMATS))), ("bias", bias)))
        args = (x, b.fresh((n, k), dt))
        return b.add("linear", args + ((b.fresh((n,), dt),) if bias else ()), (("bias", bias),))

    if b.draw(st.booleans()):  # the MLP: gate and up share the row
        n = b.draw(st.sampled_from([2, 3, 8]))
        gate, up = linear(n), linear(n)
        act = gate and b.add("silu", (gate,))
        if act is not None and up is not None:
            b.add("mul", (act, up))
        return None
    heads, hd, ctx = (
        b.draw(st.sampled_from([1, 2, 4])),
        b.draw(st.sampled_from([2, 4, 8])),
        b.draw(st.sampled_from([3, 4])),
    )
    kv_heads = b.draw(st.sampled_from([1, heads]))
    interleaved = b.draw(st.booleans())
    angles = b.fresh((1, hd // 2), F32)
    cos, sin = b.add("cos", (angles,)), b.add("sin", (angles,))
    cond = b.fresh((1, 1, ctx, 1), BOOL)

    def heads_of(y: Ref | None, n: int) -> Ref | None:
        y = y and b.add("reshape", (y,), (("shape", (1, 1, n, hd)),))
        return y and b.add("permute", (y,), (("order", (0, 2, 1, 3)),))

    q, kk, v = heads_of(linear(heads * hd), heads), heads_of(linear(kv_heads * hd), kv_heads), None
    v = heads_of(linear(kv_heads * hd), kv_heads)
    if None in (q, kk, v, cos, sin):
        return None
    q = b.add("rope", (q, cos, sin), (("interleaved", interleaved),))
    kk = b.add("rope", (kk, cos, sin), (("interleaved", interleaved),))
    caches = [b.fresh((1, kv_heads, ctx, hd), dt) for _ in range(2)]
    new_k = kk and b.add("where", (cond, kk, caches[0]))
    new_v = b.add("where", (cond, v, caches[1]))
    if q is not None and new_k is not None and new_v is not None:
        b.add("sdpa", (q, new_k, new_v), (("mask", False), ("causal", False), ("scale", None)))
    return None


# --- quantized weights (q8_0, q4_0, and the k-quants q4_k, q6_k: tracer/gguf.py, kernels/quant/) --
#
# A fresh float input is quantized by tr.quantize (gguf.quants, llama.cpp's rounding) inside the
# program; the reference reads the same blocks back two ways that share no code, gguf.quants'
# dequantizer and `_dequantize_q` below (written from GGML's block definitions), and insists
# they agree before using the values.

QUANT_FORMATS = ("q8_0", "q4_0")


def _dequantize_q(blocks: np.ndarray, fmt: str) -> np.ndarray:
    """GGML blocks (uint8 rows) to float32: an f16 scale d, then int8 q (q8_0) or nibbles (q4_0; low
    nibbles are values 0..15 of the block, high ones 16..31), value = d * q (q4_0: d * (q - 8))."""
    size = 34 if fmt == "q8_0" else 18
    raw = blocks.reshape(-1, size)
    d = raw[:, :2].copy().view(F16).astype(F32)
    if fmt == "q8_0":
        q = raw[:, 2:].view(np.int8).astype(F32)
    else:
        q = np.concatenate([raw[:, 2:] & 15, raw[:, 2:] >> 4], axis=1).astype(F32) - 8
    return (d * q).reshape(blocks.shape[:-1] + (-1,))


def quantized_values(w: np.ndarray, fmt: str) -> np.ndarray:
    """What tr.quantize(w, fmt) holds, as float32, checked by both dequantizers."""
    import gguf

    qtype = gguf.GGMLQuantizationType[fmt.upper()]
    blocks = gguf.quants.quantize(np.ascontiguousarray(w, dtype=F32), qtype)
    ours, theirs = _dequantize_q(blocks, fmt), gguf.quants.dequantize(blocks, qtype).reshape(w.shape)
    assert np.array_equal(ours, theirs, equal_nan=True), f"the two {fmt} dequantizers disagree on {w!r}"
    blocks_in, blocks_out = w.reshape(-1, 32), ours.reshape(-1, 32)  # tr.quantize checks each block of 32
    if (np.isfinite(blocks_in).all(axis=1) & ~np.isfinite(blocks_out).all(axis=1)).any():
        raise OverflowError(f"tr.quantize refuses finite weights whose {fmt} scale overflows float16")
    return ours.reshape(w.shape)


def d_quantized_linear(
    widths: tuple[int, ...], rows: tuple[int, ...], formats: tuple[str, ...]
) -> Callable[[Builder], Call | None]:
    """x @ w.T with w (n, k) quantized to one of `formats`: k one of `widths` (whole blocks); x picked when it
    fits, else fresh (its leading dims of 1-3)."""

    biggest = MAX_SIZE * (4 if min(widths) >= 256 else 1)  # a row of 256 is past MAX_SIZE already

    def draw(b: Builder) -> Call | None:
        fits = lambda v: v.dtype in FLOATS and v.ndim >= 1 and v.shape[-1] in widths and v.size <= biggest  # noqa: E731
        x = b.pick(fits)
        if x is None or b.draw(st.booleans()):
            k = b.draw(st.sampled_from(list(widths)))
            lead = tuple(b.draw(st.sampled_from([1, 2, 3])) for _ in range(b.draw(st.integers(0, 2 if k < 256 else 1))))
            x = b.fresh(lead + (k,), b.dtype(FLOATS))
        k = b.value(x).shape[-1]
        n = b.draw(st.sampled_from(list(rows)))
        args: list[Arg] = [x, b.fresh((n, k), F32)]
        bias = b.draw(st.booleans())
        if bias:
            args.append(b.fresh((n,), b.value(x).dtype))
        return Call(tuple(args), (("fmt", b.draw(st.sampled_from(list(formats)))), ("bias", bias)))

    return draw


def _qlinear(x: np.ndarray, w: np.ndarray, *rest: np.ndarray, fmt: str, bias: bool) -> Result:
    wq = (kquant_values(w, fmt) if fmt in KQUANT_FORMATS else quantized_values(w, fmt)).astype(F64)
    y = _up(x).astype(F64) @ wq.T
    mag = np.abs(x.astype(F64)) @ np.abs(wq).T
    if bias:  # of x's dtype, which the product keeps
        y, mag = y + rest[0].astype(F64), mag + np.abs(rest[0].astype(F64))
    return Result(y.astype(x.dtype), False, mag)


KQUANT_FORMATS = ("q4_k", "q6_k")


def kquant_values(w: np.ndarray, fmt: str) -> np.ndarray:
    """What tr.quantize(w, fmt) holds for a k-quant, as float32: the blocks are wgjit's quantizer's (the
    definition of tr.quantize for these formats; the installed gguf package reads them but cannot make
    them), their values gguf.quants' dequantizer's, which shares no code with wgjit. Raises as
    tr.quantize refuses: inf or NaN, and finite weights whose scales overflow float16."""
    import gguf

    from ir import quant

    w = np.ascontiguousarray(w, dtype=F32)
    if not np.isfinite(w).all():
        raise ValueError(f"tr.quantize refuses inf or NaN as {fmt}")
    blocks = quant.quantize_q4_k(w) if fmt == "q4_k" else quant.quantize_q6_k(w)
    head = blocks[:, 208:210] if fmt == "q6_k" else blocks[:, :4]
    if not np.isfinite(head.copy().view(F16)).all():
        raise OverflowError(f"tr.quantize refuses finite weights whose {fmt} scales overflow float16")
    qtype = gguf.GGMLQuantizationType[fmt.upper()]
    return gguf.quants.dequantize(blocks, qtype).reshape(w.shape)


def d_qtable(b: Builder) -> Call | None:
    """A fresh (rows, 32 or 64) table, quantized; embedding rows at fresh ids, or the whole table."""
    table = b.fresh((b.draw(st.integers(1, 9)), b.draw(st.sampled_from([32, 64]))), F32)
    params = (("fmt", b.draw(st.sampled_from(QUANT_FORMATS))),)
    if b.draw(st.booleans()):
        return Call((table,), params)
    ids_shape = tuple(b.draw(st.sampled_from([1, 2, 3])) for _ in range(b.draw(st.integers(0, 2))))
    return Call((table, b.fresh_ids(ids_shape, b.value(table).shape[0])), params)


def _qtable(table: np.ndarray, *ids: np.ndarray, fmt: str) -> Result:
    values = quantized_values(table, fmt)
    return Result(values[ids[0]] if ids else values, True)


def _qtable_code(srcs: list[str], params: dict[str, Any]) -> str:
    q = f"tr.quantize({srcs[0]}, tr.{params['fmt']})"
    return f"tr.nn.embedding({srcs[1]}, {q})" if len(srcs) > 1 else f"{q}.astype(tr.float32)"


# --- the op table -------------------------------------------------------------------------


_ADD_MAG = lambda a, c: a + c  # noqa: E731
_ANY = (F32, I32, BOOL, F16)
_NUM = (F32, I32, F16)

OPS: dict[str, OpSpec] = {
    s.name: s
    for s in [
        OpSpec(
            "input",
            lambda b: None,
            lambda srcs, p: f"tr.tensor(IN[{p['index']}])" + (".realize()" if p["realized"] else ""),
            lambda: None,
            "always",
        ),
        # elementwise binary (python scalars on either side)
        OpSpec("add", d_binary(_NUM + (BOOL,)), "{0} + {1}", _elementwise(np.add, "representable", _ADD_MAG), eps=1e-6),
        OpSpec(
            "sub", d_binary(_NUM + (BOOL,)), "{0} - {1}", _elementwise(np.subtract, "representable", _ADD_MAG), eps=1e-6
        ),
        OpSpec("mul", d_binary(_NUM + (BOOL,)), "{0} * {1}", _elementwise(np.multiply, "representable"), eps=1e-6),
        OpSpec(
            "truediv",
            d_binary(_ANY, no_bool_result=False),
            "{0} / {1}",
            _elementwise(np.true_divide, "never", float_out=True),
        ),
        OpSpec(
            "floordiv",
            d_binary(_NUM, guard=small_quotient),
            "{0} // {1}",
            _elementwise(np.floor_divide, "quotient"),
            noise="input",
            eps=1e-6,
        ),
        OpSpec(
            "mod",
            d_binary(_NUM, guard=small_quotient),
            "{0} % {1}",
            _elementwise(np.mod, "quotient"),
            noise="input",
            eps=1e-6,
        ),
        OpSpec("pow", d_pow, "{0} ** {1}", _pow),
        OpSpec(
            "maximum", d_binary(_ANY, no_bool_result=False), "tr.maximum({0}, {1})", _elementwise(np.maximum, "always")
        ),
        OpSpec(
            "minimum", d_binary(_ANY, no_bool_result=False), "tr.minimum({0}, {1})", _elementwise(np.minimum, "always")
        ),
        OpSpec(
            "hypot",
            d_binary(_ANY, no_bool_result=False),
            "tr.hypot({0}, {1})",
            _elementwise(np.hypot, "never", float_out=True),
        ),
        OpSpec(
            "logaddexp",
            d_binary(_ANY, no_bool_result=False),
            "tr.logaddexp({0}, {1})",
            _elementwise(np.logaddexp, "never", float_out=True),
        ),
        OpSpec("lt", d_binary(_ANY, no_bool_result=False), "{0} < {1}", _elementwise(np.less, "always", cmp=True)),
        OpSpec(
            "le", d_binary(_ANY, no_bool_result=False), "{0} <= {1}", _elementwise(np.less_equal, "always", cmp=True)
        ),
        OpSpec("gt", d_binary(_ANY, no_bool_result=False), "{0} > {1}", _elementwise(np.greater, "always", cmp=True)),
        OpSpec(
            "ge", d_binary(_ANY, no_bool_result=False), "{0} >= {1}", _elementwise(np.greater_equal, "always", cmp=True)
        ),
        OpSpec("eq", d_binary(_ANY, no_bool_result=False), "{0} == {1}", _elementwise(np.equal, "always", cmp=True)),
        OpSpec(
            "ne", d_binary(_ANY, no_bool_result=False), "{0} != {1}", _elementwise(np.not_equal, "always", cmp=True)
        ),
        OpSpec(
            "and",
            d_binary((BOOL,), scalars=False, no_bool_result=False),
            "{0} & {1}",
            _elementwise(np.logical_and, "always", cmp=True),
        ),
        OpSpec(
            "or",
            d_binary((BOOL,), scalars=False, no_bool_result=False),
            "{0} | {1}",
            _elementwise(np.logical_or, "always", cmp=True),
        ),
        OpSpec("where", d_where, "tr.where({0}, {1}, {2})", _where, "always"),
        # elementwise unary
        OpSpec("neg", d_unary(_NUM), "-{0}", _unary(np.negative, floats=False), "always"),
        OpSpec("abs", d_unary(_NUM), "abs({0})", _unary(np.abs, floats=False), "always"),
        OpSpec("sign", d_unary(_NUM), "{0}.sign()", _unary(np.sign, floats=False), "always"),
        OpSpec("square", d_unary(_NUM), "{0}.square()", _unary(np.square, floats=False), eps=1e-6),
        OpSpec(
            "relu",
            d_unary(_NUM),
            "{0}.relu()",
            _unary(lambda a: np.maximum(a, a.dtype.type(0)), floats=False),
            "always",
        ),
        OpSpec("exp", d_unary(_NUM), "{0}.exp()", _unary(np.exp, mag=lambda a: np.exp(a) * np.abs(a))),
        OpSpec("expm1", d_unary(_NUM), "{0}.expm1()", _unary(np.expm1, mag=lambda a: np.exp(a) * np.abs(a))),
        OpSpec("log", d_unary(_NUM), "{0}.log()", _unary(np.log, mag=lambda a: np.ones_like(a))),
        OpSpec("log1p", d_unary(_NUM), "{0}.log1p()", _unary(np.log1p)),
        OpSpec("sqrt", d_unary(_NUM), "tr.sqrt({0})", _unary(np.sqrt)),
        OpSpec("rsqrt", d_unary(_NUM), "{0}.rsqrt()", _unary(lambda a: 1 / np.sqrt(a))),
        OpSpec("reciprocal", d_unary(_NUM), "{0}.reciprocal()", _unary(lambda a: 1 / a)),
        # WGSL bounds sin/cos by an absolute error (2**-11 on [-pi, pi]): NVIDIA gives sin(1e-30) = 0
        OpSpec("sin", d_unary(_NUM), "{0}.sin()", _unary(_trig(np.sin), mag=lambda a: np.maximum(np.abs(a), 0.1))),
        OpSpec("cos", d_unary(_NUM), "{0}.cos()", _unary(_trig(np.cos), mag=lambda a: np.maximum(np.abs(a), 0.1))),
        OpSpec("tanh", d_unary(_NUM), "{0}.tanh()", _unary(np.tanh, mag=lambda a: np.full_like(a, 1e-1))),
        OpSpec(
            "sigmoid",
            d_unary(_NUM),
            "tr.sigmoid({0})",
            _unary(lambda a: 1 / (1 + np.exp(-a)), mag=lambda a: np.full_like(a, 1e-1)),
        ),
        OpSpec(
            "gelu",
            d_unary(_NUM),
            "{0}.gelu()",
            _unary(lambda a: 0.5 * a * (1 + _erf(a / math.sqrt(2))), mag=lambda a: np.abs(a) * 0.1),
        ),
        OpSpec(
            "gelu_tanh",
            d_unary(_NUM),
            "{0}.gelu(approximate='tanh')",
            _unary(
                lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))),
                mag=lambda a: np.abs(a) * 0.1,
            ),
        ),
        OpSpec(
            "silu", d_unary(_NUM), "{0}.silu()", _unary(lambda a: a / (1 + np.exp(-a)), mag=lambda a: np.abs(a) * 0.1)
        ),
        OpSpec("floor", d_unary(_NUM), "{0}.floor()", _unary(np.floor, floats=False), "always"),
        OpSpec("ceil", d_unary(_NUM), "tr.ceil({0})", _unary(np.ceil, floats=False), "always"),
        OpSpec("trunc", d_unary(_NUM), "{0}.trunc()", _unary(np.trunc, floats=False), "always"),
        OpSpec("round", d_round, "{0}.round({decimals})", _round, eps=1e-6),
        OpSpec("isnan", d_unary(_ANY), "{0}.isnan()", np.isnan, "always"),
        OpSpec("isinf", d_unary(_ANY), "tr.isinf({0})", np.isinf, "always"),
        OpSpec("isfinite", d_unary(_ANY), "{0}.isfinite()", np.isfinite, "always"),
        OpSpec("not", d_unary((BOOL,)), "~{0}", np.logical_not, "always"),
        OpSpec("cast", d_cast, "{0}.astype(tr.{dtype})", _cast, "always"),
        OpSpec("contiguous", d_unary(_ANY), "{0}.contiguous()", lambda x: x.copy(), "always"),
        # reductions and row ops
        OpSpec("sum", d_reduce(_ANY), "{0}.sum(axis={axis!r}, keepdims={keepdims!r})", _sum, eps=1e-6),
        OpSpec("prod", d_reduce(_ANY), "{0}.prod(axis={axis!r}, keepdims={keepdims!r})", _prod, eps=1e-7),
        OpSpec("mean", d_reduce(_ANY), "tr.mean({0}, axis={axis!r}, keepdims={keepdims!r})", _mean, eps=1e-6),
        OpSpec(
            "max",
            d_reduce(_ANY, nonempty=True),
            "{0}.max(axis={axis!r}, keepdims={keepdims!r})",
            _extreme(np.max),
            "always",
        ),
        OpSpec(
            "min",
            d_reduce(_ANY, nonempty=True),
            "tr.min({0}, axis={axis!r}, keepdims={keepdims!r})",
            _extreme(np.min),
            "always",
        ),
        OpSpec("argmax", d_argreduce, "{0}.argmax(axis={axis!r}, keepdims={keepdims!r})", _arg(np.argmax), "always"),
        OpSpec(
            "argmin", d_argreduce, "tr.argmin({0}, axis={axis!r}, keepdims={keepdims!r})", _arg(np.argmin), "always"
        ),
        OpSpec("softmax", d_softmax, "{0}.softmax(axis={axis})", _softmax(False)),
        OpSpec("log_softmax", d_softmax, "tr.log_softmax({0}, axis={axis})", _softmax(True)),
        # contraction and joins
        OpSpec("matmul", d_matmul, "{0} @ {1}", _matmul, eps=1e-6),
        OpSpec("dot", d_dot, "{0}.dot({1})", _product(np.dot), eps=1e-6),
        OpSpec(
            "vdot", d_outer, "tr.vdot({0}, {1})", _product(lambda a, c: np.dot(a.reshape(-1), c.reshape(-1))), eps=1e-6
        ),
        OpSpec("outer", d_outer, "tr.outer({0}, {1})", _product(np.outer, summed=False), eps=1e-6),
        OpSpec("tensordot", d_tensordot, "tr.tensordot({0}, {1}, {axes})", _product(np.tensordot), eps=1e-6),
        OpSpec(
            "einsum",
            d_einsum,
            lambda s, p: f"tr.einsum({p['spec']!r}, {', '.join(s)})",
            _einsum_ref,
            eps=1e-6,
        ),
        OpSpec(
            "concat", d_concat(False), lambda s, p: f"tr.concat([{', '.join(s)}], axis={p['axis']})", _concat, "always"
        ),
        OpSpec(
            "concatenate",
            d_concat(False),
            lambda s, p: f"tr.concatenate([{', '.join(s)}], axis={p['axis']})",
            _concat,
            "always",
        ),
        OpSpec("stack", d_concat(True), lambda s, p: f"tr.stack([{', '.join(s)}], axis={p['axis']})", _stack, "always"),
        # movement
        OpSpec("reshape", d_reshape, "{0}.reshape({shape!r})", lambda x, shape: x.reshape(shape), "always"),
        OpSpec("permute", d_permute, "{0}.permute({order!r})", lambda x, order: np.transpose(x, order), "always"),
        OpSpec("swapaxes", d_swapaxes, "{0}.swapaxes({a0}, {a1})", lambda x, a0, a1: np.swapaxes(x, a0, a1), "always"),
        OpSpec("transpose", d_transpose, lambda s, p: f"{s[0]}.transpose{p['axes']!r}", _transpose, "always"),
        OpSpec("T", d_unary(_ANY), "{0}.T", lambda x: x.T, "always"),
        OpSpec(
            "expand",
            d_expand,
            "{0}.expand({shape!r})",
            lambda x, shape: np.broadcast_to(
                x, tuple(d if d != -1 else x.shape[i - len(shape) + x.ndim] for i, d in enumerate(shape))
            ),
            "always",
        ),
        OpSpec("squeeze", d_squeeze, "{0}.squeeze({axis!r})", lambda x, axis: np.squeeze(x, axis), "always"),
        OpSpec("unsqueeze", d_unsqueeze, "{0}.unsqueeze({axis})", lambda x, axis: np.expand_dims(x, axis), "always"),
        OpSpec(
            "flatten",
            d_flatten,
            "{0}.flatten({start}, {end})",
            lambda x, start, end: (
                x.reshape(x.shape[: start % max(x.ndim, 1)] + (-1,) + x.shape[end % max(x.ndim, 1) + 1 :])
                if x.ndim
                else x.reshape(1)
            ),
            "always",
        ),
        OpSpec("index", d_index, lambda s, p: f"{s[0]}[{_index_src(p['index'])}]", _getitem, "always"),
        OpSpec(
            "moveaxis",
            d_moveaxis,
            "tr.moveaxis({0}, {src}, {dst})",
            lambda x, src, dst: np.moveaxis(x, src, dst),
            "always",
        ),
        OpSpec("flip", d_flip, "{0}.flip({axis!r})", lambda x, axis: np.flip(x, axis), "always"),
        OpSpec(
            "roll", d_roll, "tr.roll({0}, {shift}, {axis!r})", lambda x, shift, axis: np.roll(x, shift, axis), "always"
        ),
        OpSpec("tile", d_tile, "tr.tile({0}, {reps!r})", lambda x, reps: np.tile(x, reps), "always"),
        OpSpec(
            "repeat",
            d_repeat,
            "{0}.repeat({repeats!r}, {axis!r})",
            lambda x, repeats, axis: np.repeat(x, repeats, axis),
            "always",
        ),
        OpSpec(
            "split",
            d_split("split"),
            "tr.split({0}, {parts!r}, {axis})[{part}]",
            lambda x, parts, axis, part: np.split(x, parts, axis)[part],
            "always",
        ),
        OpSpec(
            "array_split",
            d_split("array_split"),
            "tr.array_split({0}, {parts!r}, {axis})[{part}]",
            lambda x, parts, axis, part: np.array_split(x, parts, axis)[part],
            "always",
        ),
        OpSpec("chunk", d_split("chunk"), "{0}.chunk({parts}, {axis})[{part}]", _chunk, "always"),
        OpSpec("tril", d_tri, "tr.tril({0}, {k})", lambda x, k: np.tril(x, k), "always"),
        OpSpec("triu", d_tri, "tr.triu({0}, {k})", lambda x, k: np.triu(x, k), "always"),
        # factories
        OpSpec("arange", d_factory("arange"), "tr.arange({start!r}, {stop!r}, {step!r})", _arange, "always"),
        OpSpec("full", d_factory("full"), "tr.full({shape!r}, {value!r})", _full, "always"),
        OpSpec("full_like", d_like, "tr.full_like({0}, {value!r})", _full_like, "always"),
        OpSpec(
            "eye",
            d_eye,
            "tr.eye({n}, {m}, k={k}, dtype=tr.{dtype})",
            lambda n, m, k, dtype: np.eye(n, m, k, dtype),
            "always",
        ),
        OpSpec("linspace", d_linspace, "tr.linspace({start}, {stop}, {num}, endpoint={end})", _linspace, eps=1e-6),
        # transformer ops (tracer/nn.py)
        OpSpec("erf", d_unary(_NUM), "tr.erf({0})", _unary(lambda a: _erf(a), mag=lambda a: np.full_like(a, 0.05))),
        OpSpec("clamp", d_clamp, "tr.clamp({0}, {lo!r}, {hi!r})", _clamp, "always"),
        # numpy's everyday API (tracer/reductions.py, numeric.py)
        OpSpec("clip", d_clamp, "{0}.clip({lo!r}, {hi!r})", _clamp, "always"),
        OpSpec(
            "nan_to_num",
            d_nan_to_num,
            "tr.nan_to_num({0}, nan={nan!r})",
            lambda x, nan: np.nan_to_num(x, nan=nan),
            "always",
        ),
        OpSpec("var", d_var, "{0}.var(axis={axis!r}, ddof={ddof}, keepdims={keepdims!r})", _var(False), eps=1e-5),
        OpSpec("std", d_var, "tr.std({0}, axis={axis!r}, ddof={ddof}, keepdims={keepdims!r})", _var(True), eps=1e-5),
        OpSpec(
            "any",
            d_reduce(_ANY),
            "{0}.any(axis={axis!r}, keepdims={keepdims!r})",
            lambda x, axis, keepdims: np.any(x, axis=axis, keepdims=keepdims),
            "always",
        ),
        OpSpec(
            "all",
            d_reduce(_ANY),
            "tr.all({0}, axis={axis!r}, keepdims={keepdims!r})",
            lambda x, axis, keepdims: np.all(x, axis=axis, keepdims=keepdims),
            "always",
        ),
        OpSpec("cumsum", d_scan, "{0}.cumsum({axis!r})", _scan(np.cumsum), eps=1e-6),
        OpSpec("cumprod", d_scan, "tr.cumprod({0}, {axis!r})", _scan(np.cumprod), eps=1e-6),
        OpSpec("argsort", d_sort, "{0}.argsort({axis!r}, descending={descending!r})", _argsort, "always"),
        OpSpec("sort", d_sort, "tr.sort({0}, {axis!r}, descending={descending!r})", _sort, "always"),
        OpSpec("topk", d_topk, "{0}.topk({k!r}, {axis!r}, largest={largest!r}).values", _topk("values"), "always"),
        OpSpec(
            "topk_indices", d_topk, "tr.topk({0}, {k!r}, {axis!r}, {largest!r}).indices", _topk("indices"), "always"
        ),
        OpSpec("logsumexp", d_reduce(_ANY), "tr.logsumexp({0}, axis={axis!r}, keepdims={keepdims!r})", _logsumexp),
        OpSpec("masked_fill", d_masked_fill, "{0}.masked_fill({1}, {value!r})", _masked_fill, "always"),
        OpSpec(
            "layer_norm",
            d_norm(False),
            lambda s, p: (
                f"tr.nn.layer_norm({s[0]}, {_opt(s, p, 'w', 1)}, {_opt(s, p, 'b', 1 + p['w'])}, eps={p['eps']})"
            ),
            _norm_ref(False),
        ),
        OpSpec(
            "rms_norm",
            d_norm(True),
            lambda s, p: f"tr.nn.rms_norm({s[0]}, {_opt(s, p, 'w', 1)}, eps={p['eps']})",
            _norm_ref(True),
        ),
        OpSpec(
            "index_select",
            d_index_select,
            "tr.index_select({0}, {1}, {axis})",
            lambda x, ids, axis: np.take(x, ids, axis),
            "always",
        ),
        OpSpec("embedding", d_embedding, "tr.nn.embedding({1}, {0})", lambda table, ids: table[ids], "always"),
        OpSpec(
            "gather",
            d_gather,
            "tr.gather({0}, {1}, {axis})",
            lambda x, ids, axis: np.take_along_axis(x, ids, axis),
            "always",
        ),
        OpSpec(
            "linear", d_linear, lambda s, p: f"tr.nn.linear({s[0]}, {s[1]}, {_opt(s, p, 'bias', 2)})", _linear, eps=1e-6
        ),
        OpSpec(
            "conv1d",
            d_conv1d,
            lambda s, p: (
                f"tr.nn.conv1d({s[0]}, {s[1]}, {_opt(s, p, 'bias', 2)}, stride={p['stride']}, padding={p['padding']}, dilation={p['dilation']}, groups={p['groups']})"
            ),
            _conv1d,
            eps=1e-6,
        ),
        OpSpec("sdpa", d_attention, _attention_code, _attention),
        OpSpec("rope", d_rope, "tr.nn.rope({0}, {1}, {2}, interleaved={interleaved})", _rope),
        # a macro that adds the steps of a decode-layer fragment (d_decode_block); never a step itself
        OpSpec("decode_block", d_decode_block, "", lambda: None),
        # quantized weights (the section above)
        OpSpec(
            "qlinear",
            d_quantized_linear((32, 64, 96), (1, 2, 3, 5, 17, 70), QUANT_FORMATS),
            lambda s, p: f"tr.nn.linear({s[0]}, tr.quantize({s[1]}, tr.{p['fmt']}), {_opt(s, p, 'bias', 2)})",
            _qlinear,
            eps=1e-6,
        ),
        OpSpec("qtable", d_qtable, _qtable_code, _qtable, "always"),
        OpSpec(
            "kqlinear",
            d_quantized_linear((256, 512), (1, 2, 3, 17), KQUANT_FORMATS),
            lambda s, p: f"tr.nn.linear({s[0]}, tr.quantize({s[1]}, tr.{p['fmt']}), {_opt(s, p, 'bias', 2)})",
            _qlinear,
            eps=1e-6,
        ),
    ]
}

# ops the generator draws (weights by repetition: elementwise ops and views are most of real programs)
DRAWN: list[str] = [n for n in OPS if n != "input"]


@st.composite
def attention_programs(draw: Callable[[st.SearchStrategy], Any], f16: bool = True) -> Program:
    """Programs of one or two attention steps (each on fresh inputs), for tests/test_attention.py."""
    b = Builder(draw, draw(st.integers(0, 2**32 - 1)), f16, draw(st.sampled_from(["dyadic", "normal", "special"])))
    for _ in range(draw(st.integers(1, 2))):
        while b.apply(OPS["sdpa"]) is None:
            pass
    sdpa = [i for i, step in enumerate(b.steps) if step.op == "sdpa"]
    return Program(b.inputs, b.steps, tuple(sdpa), (), draw(st.sampled_from(["together", "each"])))


@st.composite
def programs(
    draw: Callable[[st.SearchStrategy], Any], max_steps: int = 8, f16: bool = True, ops: Sequence[str] | None = None
) -> Program:
    """A random well-typed program over the op table (or the `ops` named), with its inputs and outputs."""
    seed = draw(st.integers(0, 2**32 - 1))
    style = draw(st.sampled_from(["dyadic", "dyadic", "dyadic", "normal", "special", "large"]))
    b = Builder(draw, seed, f16, style)
    b.fresh(b.shape(), b.dtype())
    n = draw(st.integers(1, max_steps))
    for _ in range(n):
        b.apply(OPS[draw(st.sampled_from(list(ops) if ops else DRAWN))])
    last = len(b.values) - 1
    extra = draw(st.lists(st.integers(0, last), max_size=2, unique=True))
    outputs = tuple(dict.fromkeys([last, *extra]))
    keep = tuple(k for k in draw(st.lists(st.integers(0, last), max_size=2, unique=True)) if k not in outputs)
    realize = draw(st.sampled_from(["together", "together", "each", "keep_first"]))
    return Program(b.inputs, b.steps, outputs, keep, realize)


# --- values entering wgjit (NUMERICS.md "Values entering wgjit") -------------------------------

ENTRY_DTYPES = ("float32", "float16", "int32", "uint32", "bool")
# the edges of every stored type: where a wrapping or saturating conversion would show
ENTRY_EDGES = (
    0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32 - 1, 2**32, 2**40, -(2**40), 2**63 - 1,
    0.5, -0.5, 2.7, -2.7, 2147483647.5, 2147483648.0, -2147483648.9, 4294967295.5, 3e9, -3e9, 1e30,
    65504.0, 65519.0, 65520.0, -65520.0, 3.4028234663852886e38, 3.5e38, 1e300, float("nan"), float("inf"),
    float("-inf"), True, False,
)  # fmt: skip


@st.composite
def entry_values(draw: Callable[[st.SearchStrategy], Any]) -> tuple[Any, str, str]:
    """(data, form, dtype): host data as python scalars, lists or numpy arrays, aimed at a stored dtype's edges."""
    dtype = draw(st.sampled_from(ENTRY_DTYPES))
    values = draw(
        st.lists(
            st.one_of(
                st.sampled_from(ENTRY_EDGES),
                st.integers(-(2**33), 2**33),
                st.floats(allow_nan=True, allow_infinity=True, width=64),
            ),
            min_size=1,
            max_size=4,
        )
    )
    form = draw(st.sampled_from(["scalar", "list", "float64", "float32", "int64", "uint64", "int32", "float16"]))
    if form == "scalar":
        return values[0], form, dtype
    if form == "list":
        kinds = {type(v) for v in values}
        return (
            (values if kinds <= {int} or kinds <= {float} or kinds <= {bool} else [float(v) for v in values]),
            form,
            dtype,
        )
    if form in ("int64", "uint64", "int32"):
        info = np.iinfo(form)  # values clipped into the source array's own range
        ints = [max(int(info.min), min(int(info.max), int(v) if math.isfinite(v) else 0)) for v in values]
        return np.array(ints, dtype=form), form, dtype
    with np.errstate(all="ignore"):
        return np.array([float(v) for v in values]).astype(form), form, dtype


def entry_expected(data: Any, dtype: str) -> np.ndarray | None:
    """What wgjit must store for `data` entering `dtype`, or None when it must refuse (DTypeError).

    Integers enter integer dtypes when inside the range; floats are truncated toward zero first
    and must be finite; finite values must stay finite in a float dtype; bool takes x != 0.
    """
    vals = np.asarray(data, dtype=object).reshape(-1)
    target = np.dtype(dtype)
    out = []
    for v in vals:
        v = v.item() if isinstance(v, np.generic) else v
        if target == np.bool_:
            out.append(bool(v))
        elif target.kind in "iu":
            if isinstance(v, float):
                if not math.isfinite(v):
                    return None
                v = int(v)  # toward zero
            info = np.iinfo(target)
            if not info.min <= int(v) <= info.max:
                return None
            out.append(int(v))
        else:
            f = float(v) if not isinstance(v, int) or abs(v) < 2**1000 else math.inf
            with np.errstate(over="ignore"):
                stored = np.array(f).astype(target)
            if math.isfinite(f) and not np.isfinite(stored):
                return None
            out.append(stored)
    return np.array(out, dtype=target).reshape(np.shape(data))


# --- long rows: past lavapipe's loop budget (issue 16.1) ------------------------------------------

LONG_ROW = 1 << 24  # one workgroup of 256 threads walking it took 65,536 iterations each: one too many
LONG_ROW_OPS = ("sum", "mean", "max", "min", "argmax", "argmin", "softmax", "log_softmax", "matmul")


@st.composite
def long_rows(draw: Callable[[st.SearchStrategy], Any], f16: bool = True) -> Program:
    """One reduction, row op or vector-matrix product along LONG_ROW + a few elements.

    Far past MAX_SIZE, so `programs` never draws it; tests/test_loop_budget.py runs a few of
    these in a test marked slow (each moves 128 MiB or more through lavapipe).
    """
    seed = draw(st.integers(0, 2**32 - 1))
    b = Builder(draw, seed, f16, draw(st.sampled_from(["dyadic", "normal", "special", "large"])))
    n = LONG_ROW + draw(st.sampled_from([0, 1, 3]))
    dt = F16 if f16 and draw(st.integers(0, 3)) == 0 else F32
    op = draw(st.sampled_from(LONG_ROW_OPS))
    contiguous = draw(st.booleans())  # one contiguous row, or two strided ones down axis 0
    # 2**25 float32 elements are 128 MiB, lavapipe's largest binding: the strided rows are 2**24 long
    if op == "matmul":
        x = b.fresh((1, n), dt)
        y = b.fresh((n, 1) if dt == F32 else (n, draw(st.sampled_from([1, 2]))), dt)
        b.add("matmul", (x, y), any_size=True)
    else:
        x = b.fresh((n,) if contiguous else (LONG_ROW, 2), dt)
        axis = -1 if contiguous else 0
        params = (("axis", axis),) if "softmax" in op else (("axis", axis), ("keepdims", False))
        b.add(op, (x,), params, any_size=True)
    last = len(b.values) - 1
    return Program(b.inputs, b.steps, (last,), (), "together")


@st.composite
def decode_programs(draw: Callable[[st.SearchStrategy], Any], f16: bool = True) -> Program:
    """A decode-layer fragment (d_decode_block), a few random ops after it, some of its values read back."""
    b = Builder(draw, draw(st.integers(0, 2**32 - 1)), f16, draw(st.sampled_from(["dyadic", "normal"])))
    d_decode_block(b)
    if not b.values:
        b.fresh((1, 4), F32)
    for _ in range(draw(st.integers(0, 2))):
        b.apply(OPS[draw(st.sampled_from(DRAWN))])
    last = len(b.values) - 1
    extra = draw(st.lists(st.integers(0, last), max_size=2, unique=True))
    return Program(b.inputs, b.steps, tuple(dict.fromkeys([last, *extra])), (), "together")


# --- runtime integers (tr.dynamic: tracer/runtime_ints.py) ------------------------------------------
#
# Positions and lengths that programs read from their uniform: an index, a slice's start, an
# index_write's offsets (tr.dynamic, or plain ints into a tensor that owns its values) and
# attention over keys sliced to a runtime length (stored at a bucket). The steps name their
# integer (`p := tr.dynamic(3)`), so one variable serves both bounds of `x[p : p + n]`.


def d_dyn_index(b: Builder) -> Call | None:
    """x[p] or x[..., p : p + n, ...] at a runtime start p on one axis."""
    x = b.pick(lambda v: v.ndim >= 1 and v.size > 0) or b.fresh(b.shape(b.draw(st.integers(1, 3))), b.dtype())
    v = b.value(x)
    axis = b.draw(st.integers(0, v.ndim - 1))
    d = v.shape[axis]
    if d == 0:
        return None
    if b.draw(st.booleans()):
        return Call((x,), (("axis", axis), ("start", b.draw(st.integers(0, d - 1))), ("length", None)))
    n = b.draw(st.integers(0, d))
    return Call((x,), (("axis", axis), ("start", b.draw(st.integers(0, d - n))), ("length", n)))


def _dyn_index_code(s: list[str], p: dict[str, Any]) -> str:
    pre = "".join([":, "] * p["axis"])
    item = "p" if p["length"] is None else f"p : p + {p['length']}"
    return f"(p := tr.dynamic({p['start']}), {s[0]}[{pre}{item}])[1]"


def _dyn_index(x: np.ndarray, axis: int, start: int, length: int | None) -> Result:
    item = start if length is None else slice(start, start + length)
    return Result(np.array(x[(slice(None),) * axis + (item,)]), True)


def d_dyn_write(b: Builder) -> Call | None:
    """A copy of x with src written at offsets, some of them runtime integers (or plain ints: runtime too)."""
    x = b.pick(lambda v: v.ndim >= 1 and v.size > 0) or b.fresh(b.shape(b.draw(st.integers(1, 3))), b.dtype())
    v = b.value(x)
    if v.size == 0:
        return None
    box = tuple(b.draw(st.integers(1, d)) for d in v.shape)
    offsets = tuple(b.draw(st.integers(0, d - n)) for d, n in zip(v.shape, box, strict=True))
    runtime = tuple(b.draw(st.booleans()) for _ in box)
    src = b.fresh(box, v.dtype)
    return Call((x, src), (("offsets", offsets), ("runtime", runtime)))


def _dyn_write_code(s: list[str], p: dict[str, Any]) -> str:
    items = [f"tr.dynamic({o})" if r else str(o) for o, r in zip(p["offsets"], p["runtime"], strict=True)]
    return f"{s[0]}.copy().index_write({s[1]}, ({', '.join(items)},))"


def _dyn_write(x: np.ndarray, src: np.ndarray, offsets: tuple[int, ...], runtime: tuple[bool, ...]) -> Result:
    out = x.copy()
    out[tuple(slice(o, o + n) for o, n in zip(offsets, src.shape, strict=True))] = src
    return Result(out, True)


def d_dyn_attention(b: Builder) -> Call | None:
    """Attention over the first `length` keys of k and v (runtime length, stored at its bucket), causal or not."""
    dt = b.dtype(FLOATS)
    qlead, klead = _attention_heads(b)
    lq, n = b.draw(st.sampled_from([1, 1, 2, 5])), b.draw(st.sampled_from([1, 3, 17, 40]))
    e, ev = (b.draw(st.sampled_from([1, 4, 8])) for _ in range(2))
    if max(math.prod(qlead) * lq * max(e, ev), math.prod(klead) * n * max(e, ev)) > MAX_SIZE:
        return None
    q, k = b.fresh(qlead + (lq, e), dt), b.fresh(klead + (n, e), dt)
    with np.errstate(all="ignore"):
        vals = np.nan_to_num(b._data(klead + (n, ev), dt).astype(F64), nan=1.0, posinf=2.0, neginf=-2.0)
    v = _fresh_with(b, vals.astype(dt))
    params = (("length", b.draw(st.integers(0, n))), ("causal", b.draw(st.booleans())))
    return Call((q, k, v), params)


def _dyn_attention_code(s: list[str], p: dict[str, Any]) -> str:
    keys, values = f"{s[1]}[..., :n, :]", f"{s[2]}[..., :n, :]"
    sdpa = f"tr.nn.scaled_dot_product_attention({s[0]}, {keys}, {values}, is_causal={p['causal']})"
    return f"(n := tr.dynamic({p['length']}), {sdpa})[1]"


def _dyn_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, length: int, causal: bool) -> Result:
    return _attention(q, k[..., :length, :], v[..., :length, :], mask=False, causal=causal, scale=None)


RUNTIME_INT_OPS = ("dyn_index", "dyn_write", "dyn_attention")
OPS.update(
    {
        spec.name: spec
        for spec in [
            OpSpec("dyn_index", d_dyn_index, _dyn_index_code, _dyn_index, "always"),
            OpSpec("dyn_write", d_dyn_write, _dyn_write_code, _dyn_write, "always"),
            OpSpec("dyn_attention", d_dyn_attention, _dyn_attention_code, _dyn_attention),
        ]
    }
)  # after DRAWN: `programs` draws them only when asked (runtime_int_programs)


@st.composite
def runtime_int_programs(draw: Callable[[st.SearchStrategy], Any], f16: bool = True) -> Program:
    """Programs whose steps use runtime integers, between ordinary ops that read their results."""
    ops = list(RUNTIME_INT_OPS) * 4 + ["add", "mul", "sum", "reshape", "permute", "where", "cast", "index"]
    return draw(programs(max_steps=5, f16=f16, ops=[o for o in ops if o in OPS]))
