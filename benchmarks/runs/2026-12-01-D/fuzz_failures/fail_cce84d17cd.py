import numpy as np
import tracer as tr

nan, inf = float("nan"), float("inf")
IN = [
    np.array(
        [
            [inf, -3.5, -3.125],
            [-0.0, -3.0, -1.125],
            [inf, -2.75, 3.875],
            [-2.625, 3.5, -0.0],
            [0.0, 0.25, -1.25],
            [-3.75, 3.75, -3.25],
            [inf, -3.5, 3.625],
        ],
        dtype=np.float16,
    ).reshape((7, 3)),
    np.array([[5], [7], [-1]], dtype=np.int32).reshape((3, 1)),
]
v0 = tr.tensor(IN[0]).realize()
v1 = tr.tensor(IN[1])
v2 = v1 == v1
v3 = v2.squeeze(None)
v4 = v0.flip(-2)
v5 = ~v2
v6 = v0**-1
# outputs ['v6', 'v2'], keep ['v1'], realize=keep_first

"""
GPU v6: 2 of 21 elements differ; first at (1, 0): got np.float16(inf), expected np.float16(-inf), tolerance inf
 got=array([[ 0.    , -0.2856, -0.32  ],
       [    inf, -0.3333, -0.8887],
       [ 0.    , -0.3635,  0.258 ],
       [-0.3809,  0.2856,     inf],
       [    inf,  4.    , -0.8   ],
       [-0.2666,  0.2666, -0.3076],
       [ 0.    , -0.2856,  0.276 ]], dtype=float16)
want=array([[ 0.    , -0.2856, -0.32  ],
       [   -inf, -0.3333, -0.8887],
       [ 0.    , -0.3635,  0.258 ],
       [-0.3809,  0.2856,    -inf],
       [    inf,  4.    , -0.8   ],
       [-0.2666,  0.2666, -0.3

Traceback (most recent call last):
  File "/work/main/tests/fuzz_run.py", line 84, in run
    check_program(program)
  File "/work/main/tests/test_fuzz.py", line 132, in check_program
    compare(got, ref.plain[i], noisy, f"GPU v{i}")
  File "/work/main/tests/strategies.py", line 461, in compare
    raise AssertionError(_report(what, got, want, bad, tol))
AssertionError: GPU v6: 2 of 21 elements differ; first at (1, 0): got np.float16(inf), expected np.float16(-inf), tolerance inf
 got=array([[ 0.    , -0.2856, -0.32  ],
       [    inf, -0.3333, -0.8887],
       [ 0.    , -0.3635,  0.258 ],
       [-0.3809,  0.2856,     inf],
       [    inf,  4.    , -0.8   ],
       [-0.2666,  0.2666, -0.3076],
       [ 0.    , -0.2856,  0.276 ]], dtype=float16)
want=array([[ 0.    , -0.2856, -0.32  ],
       [   -inf, -0.3333, -0.8887],
       [ 0.    , -0.3635,  0.258 ],
       [-0.3809,  0.2856,    -inf],
       [    inf,  4.    , -0.8   ],
       [-0.2666,  0.2666, -0.3076],
       [ 0.    , -0.2856,  0.276 ]], dtype=float16)

"""
