"""Softmax and log-softmax over the last axis: streaming (softmax.py) and the row in registers (softmax_regs.py)."""
