"""Build the sparse twin of a model: every packed layer replaced by a module computing from its packed form, and its
max-poolings by ones that read the layout sparse convolutions return."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from torch import nn

from sparseprune.export.chains import chain_feed_forward, release_dense_consumers
from sparseprune.export.formats.base import PackedWeight
from sparseprune.export.sparse_modules import SparseConv2d, SparseLinear, StorageOrderMaxPool2d
from sparseprune.pruning.gemm_view import PrunableWeight


def _sparse_module(dense: nn.Module, packed: PackedWeight) -> nn.Module:
    if isinstance(dense, nn.Conv2d):
        return SparseConv2d(packed, dense.bias, dense)
    if isinstance(dense, nn.Linear):
        return SparseLinear(packed, dense.bias)
    raise TypeError(f"no sparse module for {type(dense).__name__}")


def _replace(model: nn.Module, module_name: str, module: nn.Module) -> None:
    parent_name, _, child = module_name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def swapped_modules(weights: list[PrunableWeight], packed: Mapping[str, PackedWeight]) -> dict[str, str]:
    """{module name: weight name} of the layers `sparsify` replaces: those whose packed weight is their `weight`."""
    return {w.name.removesuffix(".weight"): w.name for w in weights if w.name in packed and w.param_name == "weight"}


def sparsify(
    model: nn.Module, weights: list[PrunableWeight], packed: Mapping[str, PackedWeight], chain: bool = True
) -> nn.Module:
    """A deep copy of `model` with each Linear/Conv2d whose weight is in `packed` swapped for its sparse twin, each
    MaxPool2d for a StorageOrderMaxPool2d (same values for any input), and with `chain` each sparse feed-forward
    layer that feeds another through an activation left feature-major (`chain_feed_forward`; off only to measure
    what that saves)."""
    sparse = copy.deepcopy(model)
    for module_name, weight_name in swapped_modules(weights, packed).items():
        _replace(sparse, module_name, _sparse_module(sparse.get_submodule(module_name), packed[weight_name]))
    for module_name, module in list(sparse.named_modules()):
        if type(module) is nn.MaxPool2d:
            pool = StorageOrderMaxPool2d(module.kernel_size, module.stride, module.padding, module.dilation,
                                         module.return_indices, module.ceil_mode)  # fmt: skip
            _replace(sparse, module_name, pool)
    if chain:
        chain_feed_forward(sparse)
    return sparse


def with_dense_layers(sparse: nn.Module, dense: nn.Module, module_names: Iterable[str]) -> nn.Module:
    """A deep copy of the sparse twin with the named layers taken back from the (masked) dense model; a sparse layer
    chained into one of them writes row-major again, which the dense layer reads faster."""
    mixed = copy.deepcopy(sparse)
    for name in module_names:
        _replace(mixed, name, copy.deepcopy(dense.get_submodule(name)))
    release_dense_consumers(mixed)
    return mixed


def unpacked_layers(weights: list[PrunableWeight], packed: Mapping[str, PackedWeight]) -> list[str]:
    """Pruned weights the swap could not replace (e.g. LSTM gates without a sparse cell): reported, not hidden."""
    return [w.name for w in weights if w.name in packed and w.param_name != "weight"]
