"""Reductions over the last k axes: the general kernel (reduce.py) and the one for contiguous float rows (row_reduce.py)."""
