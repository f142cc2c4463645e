"""Elementwise kernels: one op or a fused group per thread (elementwise.py), and the renderer of fused groups that every fusing kernel uses (fused.py)."""
