"""Layer norm and RMS norm over the last axis (norm.py)."""
