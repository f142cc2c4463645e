"""Kernels that move or place elements rather than compute them: gather, concat, index_write, arange."""
