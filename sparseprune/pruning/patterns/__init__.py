"""Sparsity patterns: scores (K x N per layer) -> keep codes at an exact target sparsity."""

from sparseprune.pruning.patterns import bw, ew, nm, shflbw, tew, tw, vw  # noqa: F401  (registers each pattern)
from sparseprune.pruning.patterns.base import KEPT, PATTERNS, PRUNED, RESIDUAL, Pattern, build_pattern, keep_mask

__all__ = ["KEPT", "PATTERNS", "PRUNED", "RESIDUAL", "Pattern", "build_pattern", "keep_mask"]
