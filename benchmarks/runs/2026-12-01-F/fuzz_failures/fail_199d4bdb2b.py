import numpy as np
import tracer as tr
nan, inf = float('nan'), float('inf')
IN = [
    np.array([[[[100000000.0, 100000000.0], [100000000.0, 100000000.0]]], [[[100000000.0, 100000000.0], [100000000.0, 100000000.0]]], [[[100000000.0, 100000000.0], [100000000.0, 100000000.0]]], [[[100000000.0, 100000000.0], [100000000.0, 100000000.0]]], [[[100000000.0, 100000000.0], [100000000.0, 100000000.0]]]], dtype=np.float32).reshape((5, 1, 2, 2)),
    np.array([[43872.0, -44896.0], [-5772.0, 53344.0], [43776.0, 15008.0], [-18128.0, 28320.0], [46208.0, 52992.0]], dtype=np.float16).reshape((5, 2)),
    np.array([[30752.0, -41728.0, 42720.0, -62912.0, 35872.0], [-57632.0, -61472.0, -9496.0, -32112.0, -46080.0]], dtype=np.float16).reshape((2, 5)),
    np.array([[41472.0, 10632.0], [17248.0, -32832.0], [-14944.0, 56608.0], [-16976.0, 64864.0], [-58496.0, -44032.0]], dtype=np.float16).reshape((5, 2)),
    np.array([-99970112.0, -99928704.0], dtype=np.float32).reshape((2,)),
    np.array([], dtype=np.float32).reshape((0,)),
    np.array([], dtype=np.float32).reshape((0,)),
]
v0 = tr.tensor(IN[0]).realize()
v1 = tr.tensor(IN[1])
v2 = tr.tensor(IN[2]).realize()
v3 = tr.tensor(IN[3])
v4 = tr.einsum('ij,jk,kl->il', v1, v2, v3)
v5 = tr.tensor(IN[4])
v6 = tr.tensor(IN[5])
v7 = tr.tensor(IN[6])
v8 = tr.concatenate([v5, v6, v7], axis=0)
v9 = v6 % -1.5
# outputs ['v9', 'v4'], keep ['v8'], realize=keep_first

'''
interpret(traced graph) v4: 10 of 10 elements differ; first at (0, 0): got np.float16(nan), expected np.float16(-inf), tolerance inf
 got=array([[nan, nan],
       [nan, nan],
       [nan, nan],
       [nan, nan],
       [nan, nan]], dtype=float16)
want=array([[-inf, -inf],
       [ inf,  inf],
       [-inf, -inf],
       [ inf,  inf],
       [-inf, -inf]], dtype=float16)

Traceback (most recent call last):
  File "/work/main/tests/fuzz_run.py", line 84, in run
    check_program(program)
  File "/work/main/tests/test_fuzz.py", line 116, in check_program
    compare(v, ref.plain[vi], noisy, f"interpret(traced graph) v{vi}")
  File "/work/main/tests/strategies.py", line 461, in compare
    raise AssertionError(_report(what, got, want, bad, tol))
AssertionError: interpret(traced graph) v4: 10 of 10 elements differ; first at (0, 0): got np.float16(nan), expected np.float16(-inf), tolerance inf
 got=array([[nan, nan],
       [nan, nan],
       [nan, nan],
       [nan, nan],
       [nan, nan]], dtype=float16)
want=array([[-inf, -inf],
       [ inf,  inf],
       [-inf, -inf],
       [ inf,  inf],
       [-inf, -inf]], dtype=float16)

'''
