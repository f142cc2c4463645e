"""A small script to inspect: `wgjit dump examples/small_mlp.py -o /tmp/dump` or `wgjit explain examples/small_mlp.py --profile`.

Two layers of an MLP, run for a few steps: the second step reuses the first step's program.
"""

import sys

import numpy as np

import tracer as tr

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
w1 = tr.randn(32, 64, seed=1)
w2 = tr.randn(64, 16, seed=2)
b1 = tr.zeros(64)
for step in range(steps):
    x = tr.randn(8, 32, seed=10 + step)
    h = (x @ w1 + b1).relu()
    y = (h @ w2).softmax(axis=-1)
    out = y.numpy()
    assert np.allclose(out.sum(axis=-1), 1.0, atol=1e-5)
print("rows sum to one:", out.shape)
