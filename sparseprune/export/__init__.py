"""Packing pruned weights, sparse modules that compute from the packed form, and inference timing."""

from sparseprune.export import ops as ops  # registers torch.ops.sparseprune.* before any packed format runs
