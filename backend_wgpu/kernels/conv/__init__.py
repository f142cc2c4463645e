"""Convolutions: direct 1-D convolution (conv1d.py)."""
