"""Build the sparse twin of a model: every packed layer replaced by a module computing from its packed form."""

from __future__ import annotations

import copy
from collections.abc import Mapping

from torch import nn

from sparseprune.export.formats.base import PackedWeight
from sparseprune.export.sparse_modules import SparseConv2d, SparseLinear
from sparseprune.gemm_view import PrunableWeight


def _sparse_module(dense: nn.Module, packed: PackedWeight) -> nn.Module:
    if isinstance(dense, nn.Conv2d):
        return SparseConv2d(packed, dense.bias, dense)
    if isinstance(dense, nn.Linear):
        return SparseLinear(packed, dense.bias)
    raise TypeError(f"no sparse module for {type(dense).__name__}")


def sparsify(model: nn.Module, weights: list[PrunableWeight], packed: Mapping[str, PackedWeight]) -> nn.Module:
    """A deep copy of `model` with each Linear/Conv2d whose weight is in `packed` swapped for its sparse twin."""
    sparse = copy.deepcopy(model)
    for weight in weights:
        if weight.name not in packed or weight.param_name != "weight":
            continue
        module_name = weight.name.removesuffix(".weight")
        parent_name, _, child = module_name.rpartition(".")
        parent = sparse.get_submodule(parent_name) if parent_name else sparse
        setattr(parent, child, _sparse_module(getattr(parent, child), packed[weight.name]))
    return sparse


def unpacked_layers(weights: list[PrunableWeight], packed: Mapping[str, PackedWeight]) -> list[str]:
    """Pruned weights the swap could not replace (e.g. LSTM gates without a sparse cell): reported, not hidden."""
    return [w.name for w in weights if w.name in packed and w.param_name != "weight"]
