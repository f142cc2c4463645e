"""Quantized weights (q8_0, q4_0, q4_k): qgemv, qgemm, dequant and qgather, on the block readers in formats.py."""
