"""Sparse layers that feed one another through an activation: the feed-forward block of BERT-style encoders.

Where a sparse layer's output goes through an activation into another layer (`intermediate.dense` → GELU →
`output.dense`), the first layer keeps its output feature-major, the storage the kernels compute in: the activation,
an elementwise torch op, keeps that storage, and the second layer reads it without a transpose. On an H200, BERT-base's
feed-forward block at 75% TW over 4096 tokens took 95.4 µs with both transposes and 71.3 µs without, dense 74.8
(bench/results/bert_ffn_chain_h200.md). The activation stays a torch op: fused into the kernel's epilogue it cost more
than torch's separate pass (23 against 17 µs there). The outputs are the same; a dense layer reads the feature-major
tensor as a transposed operand (there 34.0 against 26.1 µs row-major).
"""

from __future__ import annotations

from torch import nn

from sparseprune.export.sparse_modules import SparseLinear


def chain_feed_forward(model: nn.Module) -> list[str]:
    """Leave the output of each feed-forward intermediate's sparse layer (a submodule with a sparse `dense` and an
    `intermediate_act_fn`, as BERT's) feature-major, in place; returns the names of those layers."""
    chained = []
    for name, module in model.named_modules():
        dense = getattr(module, "dense", None)
        if type(dense) is SparseLinear and isinstance(getattr(module, "intermediate_act_fn", None), nn.Module):
            dense.feature_major_out = True
            chained.append(f"{name}.dense" if name else "dense")
    return chained
