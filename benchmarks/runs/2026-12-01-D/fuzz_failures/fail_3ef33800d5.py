import numpy as np
import tracer as tr

nan, inf = float("nan"), float("inf")
IN = [
    np.array(4, dtype=np.int32).reshape(()),
    np.array(-7, dtype=np.int32).reshape(()),
    np.array(
        [[-1.875, 2.125, 0.0, -1.625, 0.375], [-0.0, 3.875, 2.875, 3.5, -2.0], [nan, -2.75, 1.75, 1.625, 1.25]],
        dtype=np.float16,
    ).reshape((3, 5)),
    np.array(
        [[3.5, 0.625, -0.875], [2.625, -inf, 0.0], [-0.0, 0.5, -2.75], [-2.125, 1.0, 1.375], [-1.625, -0.0, 2.375]],
        dtype=np.float16,
    ).reshape((5, 3)),
    np.array([[-2.125, 3.125], [-4.0, inf], [2.0, 3.875]], dtype=np.float16).reshape((3, 2)),
]
v0 = tr.tensor(IN[0])
v1 = v0.permute(())
v2 = v0.prod(axis=None, keepdims=True)
v3 = tr.tensor(IN[1]).realize()
v4 = v2 < v3
v5 = tr.tensor(IN[2])
v6 = tr.tensor(IN[3])
v7 = tr.tensor(IN[4])
v8 = tr.einsum("ij,jk,kl->il", v5, v6, v7)
v9 = tr.tile(v8, (3, 1))
v10 = v9.swapaxes(-2, 0)
# outputs ['v10', 'v6', 'v7'], keep [], realize=together

"""
interpret(traced graph) v10: 6 of 18 elements differ; first at (0, 1): got np.float16(-inf), expected np.float16(nan), tolerance nan
 got=array([[ inf, -inf],
       [ inf, -inf],
       [ nan,  nan],
       [ inf, -inf],
       [ inf, -inf],
       [ nan,  nan],
       [ inf, -inf],
       [ inf, -inf],
       [ nan,  nan]], dtype=float16)
want=array([[inf, nan],
       [inf, nan],
       [nan, nan],
       [inf, nan],
       [inf, nan],
       [nan, nan],
       [inf, nan],
       [inf, nan],
       [nan, nan]], dtype=float16)

Traceback (most recent call last):
  File "/work/main/tests/fuzz_run.py", line 84, in run
    check_program(program)
  File "/work/main/tests/test_fuzz.py", line 116, in check_program
    compare(v, ref.plain[vi], noisy, f"interpret(traced graph) v{vi}")
  File "/work/main/tests/strategies.py", line 461, in compare
    raise AssertionError(_report(what, got, want, bad, tol))
AssertionError: interpret(traced graph) v10: 6 of 18 elements differ; first at (0, 1): got np.float16(-inf), expected np.float16(nan), tolerance nan
 got=array([[ inf, -inf],
       [ inf, -inf],
       [ nan,  nan],
       [ inf, -inf],
       [ inf, -inf],
       [ nan,  nan],
       [ inf, -inf],
       [ inf, -inf],
       [ nan,  nan]], dtype=float16)
want=array([[inf, nan],
       [inf, nan],
       [nan, nan],
       [inf, nan],
       [inf, nan],
       [nan, nan],
       [inf, nan],
       [inf, nan],
       [nan, nan]], dtype=float16)

"""
