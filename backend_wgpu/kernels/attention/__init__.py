"""Attention: flash attention in one dispatch (flash.py); decoding over a long cache (decode.py, decode_combine.py)."""
