import numpy as np
import tracer as tr

nan, inf = float("nan"), float("inf")
IN = [
    np.array(
        [
            [0.5, -inf, -3.125, -1.125, -3.0, -1.125, 2.375],
            [-2.75, 3.875, -2.625, 3.5, inf, nan, 0.25],
            [-inf, -3.75, -inf, -3.25, 0.0, 0.0, inf],
            [-2.875, -1.625, 3.0, 0.25, -4.0, 1.125, 2.875],
            [1.75, 1.25, -2.0, 2.125, 3.125, -0.5, -3.875],
            [3.75, -0.0, -1.375, 1.0, -0.25, 2.0, inf],
            [-3.0, inf, 3.25, 0.0, -3.75, -1.125, 3.625],
        ],
        dtype=np.float16,
    ).reshape((7, 7)),
    np.array([[8], [-7], [-2]], dtype=np.int32).reshape((3, 1)),
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
GPU v6: 1 of 49 elements differ; first at (5, 1): got np.float16(inf), expected np.float16(-inf), tolerance inf
 got=array([[ 2.    , -0.    , -0.32  , -0.8887, -0.3333, -0.8887,  0.4211],
       [-0.3635,  0.258 , -0.3809,  0.2856,  0.    ,     nan,  4.    ],
       [-0.    , -0.2666, -0.    , -0.3076,     inf,     inf,  0.    ],
       [-0.348 , -0.615 ,  0.3333,  4.    , -0.25  ,  0.8887,  0.348 ],
       [ 0.5713,  0.8   , -0.5   ,  0.4707,  0.32  , -2.    , -0.258 ],
       [ 0.2666,     inf, -0.727 ,  1.    , -4.    ,  0.5   ,  0.    ],
       [-0.3333,  0.    ,  0.3076,     inf, -0.2666

Traceback (most recent call last):
  File "/work/main/tests/fuzz_run.py", line 84, in run
    check_program(program)
  File "/work/main/tests/test_fuzz.py", line 132, in check_program
    compare(got, ref.plain[i], noisy, f"GPU v{i}")
  File "/work/main/tests/strategies.py", line 461, in compare
    raise AssertionError(_report(what, got, want, bad, tol))
AssertionError: GPU v6: 1 of 49 elements differ; first at (5, 1): got np.float16(inf), expected np.float16(-inf), tolerance inf
 got=array([[ 2.    , -0.    , -0.32  , -0.8887, -0.3333, -0.8887,  0.4211],
       [-0.3635,  0.258 , -0.3809,  0.2856,  0.    ,     nan,  4.    ],
       [-0.    , -0.2666, -0.    , -0.3076,     inf,     inf,  0.    ],
       [-0.348 , -0.615 ,  0.3333,  4.    , -0.25  ,  0.8887,  0.348 ],
       [ 0.5713,  0.8   , -0.5   ,  0.4707,  0.32  , -2.    , -0.258 ],
       [ 0.2666,     inf, -0.727 ,  1.    , -4.    ,  0.5   ,  0.    ],
       [-0.3333,  0.    ,  0.3076,     inf, -0.2666, -0.8887,  0.276 ]],
      dtype=float16)
want=array([[ 2.    , -0.    , -0.32  , -0.8887, -0.3333, -0.8887,  0.4211],
       [-0.3635,  0.258 , -0.3809,  0.2856,  0.    ,     nan,  4.    ],
       [-0.    , -0.2666, -0.    , -0.3076,     inf,     inf,  0.    ],
       [-0.348 , -0.615 ,  0.3333,  4.    , -0.25  ,  0.8887,  0.348 ],
       [ 0.5713,  0.8   , -0.5   ,  0.4707,  0.32  , -2.    , -0.258 ],
       [ 0.2666,    -inf, -0.727 ,  1.    , -4.    ,  0.5   ,  0.    ],
       [-0.3333,  0.    ,  0.3076,     inf, -0.2666, -0.8887,  0.276 ]],
      dtype=float16)

"""
