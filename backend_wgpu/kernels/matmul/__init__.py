"""Matrix products: gemm_blocked, gemm_tiled, gemv and gemv_split, on the shared base in base.py."""
