"""Packed weight formats, one module per pattern family, all speaking the GEMM view y = x @ B (B is K x N)."""
