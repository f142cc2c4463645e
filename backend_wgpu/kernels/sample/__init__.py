"""Sampling one id per row of logits (sample.py)."""
