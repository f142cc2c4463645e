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
  sin, cos ............................... 1e-5 times max(|x|, 0.1), absolute (WGSL bounds them absolutely)
  tanh, gelu, silu, rsqrt, reciprocal, / . 1e-5, plus `mag` where an approximation is absolute
  pow .................................... 1e-5 times (1 + |y log2 x|): exp2(y * log2 x) scales it
  sum, mean, matmul ...................... 1e-6 times the sum of |terms| (order of summation)
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
        self.style = style  # input values: "dyadic" (mostly exact), "normal", "special" (NaN/inf/0 sprinkled)
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
        else:
            a = r.integers(-32, 33, shape) / 8.0  # multiples of 1/8: arithmetic stays exact
        if self.style == "special" and a.size:
            k = r.integers(0, a.size, max(1, a.size // 4))
            a.reshape(-1)[k] = r.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e-30], k.size)
        with np.errstate(over="ignore"):
            return a.astype(dt)

    # steps ---------------------------------------------------------------------------------
    def add(self, op: str, args: tuple[Arg, ...], params: tuple[tuple[str, Any], ...] = ()) -> Ref | None:
        """Evaluate a step on the reference values; record it unless numpy refuses it."""
        step = Step(op, args, params)
        try:
            res = run_step(step, [self.value(a) for a in args], self.inputs)
        except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
            return None
        if res.value.size > MAX_SIZE * 4 and op != "input":
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


def _matmul(x: np.ndarray, y: np.ndarray) -> Result:
    dt = result_type(x, y)
    a, c = x.astype(dt), y.astype(dt)
    r = np.matmul(_up(a), _up(c)).astype(dt)
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
        y = b.add("transpose", (t,), (("a0", -1), ("a1", -2)))
    elif form == 2:
        # a broadcast constant (every stride 0): x @ ones((k, 1)) once found no GEMV width
        y = b.add("full", (), (("shape", shape), ("value", b.scalar(F32))))
    else:
        y = b.pick_or_fresh(lambda v: v.shape == shape and v.dtype in FLOATS, shape, (dt,))
    if y is None:
        return None
    return Call((y, x) if kind == "vec" and xv.ndim == 1 and b.draw(st.booleans()) else (x, y))


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


def d_transpose(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    nd = b.value(x).ndim
    if nd < 1:
        return None
    return Call((x,), (("a0", b.draw(st.integers(-nd, nd - 1))), ("a1", b.draw(st.integers(-nd, nd - 1)))))


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


def d_like(b: Builder) -> Call | None:
    x = operand(b, (F32, I32, BOOL, F16))
    return Call((x,), (("value", b.scalar(b.value(x).dtype)),))


def _full(shape: tuple[int, ...], value: Any) -> np.ndarray:
    dt = BOOL if isinstance(value, bool) else I32 if isinstance(value, int) else F32
    return np.full(shape, value, dtype=dt)


def _full_like(x: np.ndarray, value: Any) -> np.ndarray:
    return np.full(x.shape, value).astype(x.dtype)


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
    """torch's conv1d written as loops over outputs (independent of the interpreter's einsum)."""
    dt = result_type(x, w, *rest)
    xs = x.astype(F64)[None] if x.ndim == 2 else x.astype(F64)
    wf = w.astype(F64)
    n, cin, length = xs.shape
    cout, cin_g, k = wf.shape
    lout = (length + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    xp = np.pad(xs, ((0, 0), (0, 0), (padding, padding)))
    out, mag = np.zeros((n, cout, lout)), np.zeros((n, cout, lout))
    for co in range(cout):
        g = co // (cout // groups)
        for j in range(lout):
            taps = xp[:, g * cin_g : (g + 1) * cin_g, j * stride : j * stride + dilation * (k - 1) + 1 : dilation]
            out[:, co, j] = np.sum(taps * wf[co], axis=(1, 2))
            mag[:, co, j] = np.sum(np.abs(taps * wf[co]), axis=(1, 2))
    if bias:
        out, mag = out + rest[0].astype(F64)[:, None], mag + np.abs(rest[0].astype(F64))[:, None]
    if x.ndim == 2:
        out, mag = out[0], mag[0]
    return Result(out.astype(dt), False, mag)


def d_sdpa(b: Builder) -> Call | None:
    dt = b.dtype(FLOATS)
    batch = tuple(b.draw(st.sampled_from([1, 2, 3])) for _ in range(b.draw(st.integers(0, 2))))
    seq_q, seq_k, e, ev = (b.draw(st.sampled_from([1, 2, 3, 5, 8])) for _ in range(4))
    q, k, v = b.fresh(batch + (seq_q, e), dt), b.fresh(batch + (seq_k, e), dt), b.fresh(batch + (seq_k, ev), dt)
    args: list[Arg] = [q, k, v]
    causal = b.draw(st.booleans())
    mask = not causal and b.draw(st.booleans())
    if mask:
        args.append(b.fresh((seq_q, seq_k), BOOL))
    scale = b.draw(st.sampled_from([None, 0.5]))
    return Call(tuple(args), (("mask", mask), ("causal", causal), ("scale", scale)))


def _sdpa(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *rest: np.ndarray, mask: bool, causal: bool, scale: float | None
) -> Result:
    dt = result_type(q, k, v)
    vf = v.astype(F64)
    # the scores as wgjit makes them: q scaled in its own dtype, then a matmul in the working
    # dtype, so they overflow (to inf, or NaN for inf - inf) where float32 or float16 does
    qs = (_up(q) * np.float32(1 / math.sqrt(q.shape[-1]) if scale is None else scale)).astype(q.dtype)
    s = np.matmul(_up(qs.astype(dt)), np.swapaxes(_up(k.astype(dt)), -1, -2)).astype(dt).astype(F64)
    lq, lk = q.shape[-2], k.shape[-2]
    if causal:
        allowed = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
    elif mask:
        allowed = rest[0]
    else:
        allowed = np.ones((lq, lk), bool)
    s = np.where(allowed, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    p = np.exp(s - m)
    p = p / p.sum(-1, keepdims=True)  # a row that sees no key is NaN, as torch
    out = p @ vf
    spread = np.where(np.isfinite(s), np.abs(s - m), 0).max(-1, keepdims=True) + 1
    return Result(out.astype(dt), False, (np.nan_to_num(np.abs(p)) @ np.abs(vf)) * spread)


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


# --- quantized weights (q8_0, q4_0: tracer/gguf.py, backend_wgpu/kernels/quant/) ------------
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
    return ours.reshape(w.shape)


def d_qlinear(b: Builder) -> Call | None:
    """x @ w.T with w (n, k) quantized: k whole blocks; x picked when it fits, else fresh (1-3 dims)."""
    x = b.pick(lambda v: v.dtype in FLOATS and v.ndim >= 1 and v.shape[-1] in (32, 64, 96) and v.size <= MAX_SIZE)
    if x is None or b.draw(st.booleans()):
        k = b.draw(st.sampled_from([32, 64, 96]))
        lead = tuple(b.draw(st.sampled_from([1, 2, 3])) for _ in range(b.draw(st.integers(0, 2))))
        x = b.fresh(lead + (k,), b.dtype(FLOATS))
    k = b.value(x).shape[-1]
    n = b.draw(st.sampled_from([1, 2, 3, 5, 17, 70]))
    args: list[Arg] = [x, b.fresh((n, k), F32)]
    bias = b.draw(st.booleans())
    if bias:
        args.append(b.fresh((n,), b.value(x).dtype))
    return Call(tuple(args), (("fmt", b.draw(st.sampled_from(QUANT_FORMATS))), ("bias", bias)))


def _qlinear(x: np.ndarray, w: np.ndarray, *rest: np.ndarray, fmt: str, bias: bool) -> Result:
    wq = quantized_values(w, fmt).astype(F64)
    y = _up(x).astype(F64) @ wq.T
    mag = np.abs(x.astype(F64)) @ np.abs(wq).T
    if bias:  # of x's dtype, which the product keeps
        y, mag = y + rest[0].astype(F64), mag + np.abs(rest[0].astype(F64))
    return Result(y.astype(x.dtype), False, mag)


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
        OpSpec("square", d_unary(_NUM), "{0}.square()", _unary(np.square, floats=False), eps=1e-6),
        OpSpec(
            "relu",
            d_unary(_NUM),
            "{0}.relu()",
            _unary(lambda a: np.maximum(a, a.dtype.type(0)), floats=False),
            "always",
        ),
        OpSpec("exp", d_unary(_NUM), "{0}.exp()", _unary(np.exp, mag=lambda a: np.exp(a) * np.abs(a))),
        OpSpec("log", d_unary(_NUM), "{0}.log()", _unary(np.log, mag=lambda a: np.ones_like(a))),
        OpSpec("sqrt", d_unary(_NUM), "tr.sqrt({0})", _unary(np.sqrt)),
        OpSpec("rsqrt", d_unary(_NUM), "{0}.rsqrt()", _unary(lambda a: 1 / np.sqrt(a))),
        OpSpec("reciprocal", d_unary(_NUM), "{0}.reciprocal()", _unary(lambda a: 1 / a)),
        # WGSL bounds sin/cos by an absolute error (2**-11 on [-pi, pi]): NVIDIA gives sin(1e-30) = 0
        OpSpec("sin", d_unary(_NUM), "{0}.sin()", _unary(np.sin, mag=lambda a: np.maximum(np.abs(a), 0.1))),
        OpSpec("cos", d_unary(_NUM), "{0}.cos()", _unary(np.cos, mag=lambda a: np.maximum(np.abs(a), 0.1))),
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
        OpSpec("not", d_unary((BOOL,)), "~{0}", np.logical_not, "always"),
        OpSpec("cast", d_cast, "{0}.astype(tr.{dtype})", _cast, "always"),
        OpSpec("contiguous", d_unary(_ANY), "{0}.contiguous()", lambda x: x.copy(), "always"),
        # reductions and row ops
        OpSpec("sum", d_reduce(_ANY), "{0}.sum(axis={axis!r}, keepdims={keepdims!r})", _sum, eps=1e-6),
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
        OpSpec(
            "concat", d_concat(False), lambda s, p: f"tr.concat([{', '.join(s)}], axis={p['axis']})", _concat, "always"
        ),
        OpSpec("stack", d_concat(True), lambda s, p: f"tr.stack([{', '.join(s)}], axis={p['axis']})", _stack, "always"),
        # movement
        OpSpec("reshape", d_reshape, "{0}.reshape({shape!r})", lambda x, shape: x.reshape(shape), "always"),
        OpSpec("permute", d_permute, "{0}.permute({order!r})", lambda x, order: np.transpose(x, order), "always"),
        OpSpec(
            "transpose", d_transpose, "{0}.transpose({a0}, {a1})", lambda x, a0, a1: np.swapaxes(x, a0, a1), "always"
        ),
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
        # factories
        OpSpec("arange", d_factory("arange"), "tr.arange({start!r}, {stop!r}, {step!r})", _arange, "always"),
        OpSpec("full", d_factory("full"), "tr.full({shape!r}, {value!r})", _full, "always"),
        OpSpec("full_like", d_like, "tr.full_like({0}, {value!r})", _full_like, "always"),
        # transformer ops (tracer/nn.py)
        OpSpec("erf", d_unary(_NUM), "tr.erf({0})", _unary(lambda a: _erf(a), mag=lambda a: np.full_like(a, 0.05))),
        OpSpec("clamp", d_clamp, "tr.clamp({0}, {lo!r}, {hi!r})", _clamp, "always"),
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
        OpSpec(
            "sdpa",
            d_sdpa,
            lambda s, p: (
                f"tr.nn.scaled_dot_product_attention({s[0]}, {s[1]}, {s[2]}, {_opt(s, p, 'mask', 3)}, is_causal={p['causal']}, scale={p['scale']!r})"
            ),
            _sdpa,
        ),
        OpSpec("rope", d_rope, "tr.nn.rope({0}, {1}, {2}, interleaved={interleaved})", _rope),
        # quantized weights (the section above)
        OpSpec(
            "qlinear",
            d_qlinear,
            lambda s, p: f"tr.nn.linear({s[0]}, tr.quantize({s[1]}, tr.{p['fmt']}), {_opt(s, p, 'bias', 2)})",
            _qlinear,
            eps=1e-6,
        ),
        OpSpec("qtable", d_qtable, _qtable_code, _qtable, "always"),
    ]
}

# ops the generator draws (weights by repetition: elementwise ops and views are most of real programs)
DRAWN: list[str] = [n for n in OPS if n != "input"]


@st.composite
def programs(
    draw: Callable[[st.SearchStrategy], Any], max_steps: int = 8, f16: bool = True, ops: Sequence[str] | None = None
) -> Program:
    """A random well-typed program over the op table (or the `ops` named), with its inputs and outputs."""
    seed = draw(st.integers(0, 2**32 - 1))
    style = draw(st.sampled_from(["dyadic", "dyadic", "dyadic", "normal", "special"]))
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
