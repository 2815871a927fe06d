"""Sparse layers that feed one another through an activation: the feed-forward block of BERT-style encoders.

Where a sparse layer's output goes through an activation into another sparse layer (`intermediate.dense` → GELU →
`output.dense`), the first layer keeps its output feature-major, the storage the kernels compute in: the activation,
an elementwise torch op, keeps that storage, and the second layer reads it without a transpose. On an H200,
BERT-base's feed-forward block at 75% TW over 4096 tokens took 95.4 µs with both transposes and 71.3 µs without,
dense 74.8 (bench/results/bert_ffn_chain_h200.md). The activation stays a torch op: fused into the kernel's epilogue
it cost more than torch's separate pass (23 against 17 µs there). The outputs are the same either way, but a dense
second layer reads a feature-major tensor as a transposed operand (there 34.0 against 26.1 µs row-major), so a chain
ends where the per-layer choice takes the second layer back to dense.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch import nn

from sparseprune.export.sparse_modules import SparseLinear


def _feed_forward_pairs(model: nn.Module) -> Iterator[tuple[str, SparseLinear, nn.Module | None]]:
    """(name, sparse producer, consumer) of each feed-forward block: a module whose `intermediate` has a sparse `dense`
    and an `intermediate_act_fn` and whose `output.dense` reads it, as in BERT's layers."""
    for name, module in model.named_modules():
        intermediate = getattr(module, "intermediate", None)
        producer = getattr(intermediate, "dense", None)
        if type(producer) is SparseLinear and isinstance(getattr(intermediate, "intermediate_act_fn", None), nn.Module):
            prefix = f"{name}." if name else ""
            yield f"{prefix}intermediate.dense", producer, getattr(getattr(module, "output", None), "dense", None)


def chain_feed_forward(model: nn.Module) -> list[str]:
    """Leave each feed-forward intermediate's sparse output feature-major where the layer that reads it is sparse too,
    in place; returns the names of those producers. A dense consumer would read it as a transposed operand."""
    chained = []
    for name, producer, consumer in _feed_forward_pairs(model):
        if type(consumer) is SparseLinear:
            producer.feature_major_out = True
            chained.append(name)
    return chained


def release_dense_consumers(model: nn.Module) -> list[str]:
    """Turn off the chain of each producer whose consumer is no longer sparse (taken back by the per-layer choice), in
    place; returns their names."""
    released = []
    for name, producer, consumer in _feed_forward_pairs(model):
        if producer.feature_major_out and type(consumer) is not SparseLinear:
            producer.feature_major_out = False
            released.append(name)
    return released
