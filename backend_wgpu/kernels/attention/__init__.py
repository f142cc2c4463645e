"""Attention: flash attention in one dispatch (flash.py)."""
