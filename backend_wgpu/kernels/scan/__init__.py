"""Scans: running sums and products along the last axis (cumsum, cumprod)."""
