"""Packing pruned weights, sparse modules that compute from the packed form, and inference timing."""
