"""Rotary position embedding (rope.py)."""
