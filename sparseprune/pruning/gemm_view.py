"""One view of every prunable weight: the GEMM matrix B (K x N) with y = x @ B.

Linear (out, in) -> B = W^T; Conv2d (Cout, Cin, kh, kw) -> im2col, K = Cin*kh*kw, N = Cout; LSTM gate
matrices (4H, in) and (4H, H) -> B = W^T. Patterns, importance, packing and kernels all speak this view,
so each of them is written once.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class PrunableWeight:
    """A weight tensor taking part in pruning, named by its parameter path in the model."""

    name: str
    module: nn.Module
    param_name: str

    @property
    def param(self) -> nn.Parameter:
        return getattr(self.module, self.param_name)

    @property
    def gemm_shape(self) -> tuple[int, int]:
        """(K, N) of the GEMM view."""
        weight = self.param
        return int(weight[0].numel()), int(weight.shape[0])


def to_gemm(weight: torch.Tensor) -> torch.Tensor:
    """Weight in its module layout (out, ...) -> B (K x N); a view, no copy."""
    return weight.reshape(weight.shape[0], -1).t()


def from_gemm(matrix_kn: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Inverse of `to_gemm`: B (K x N) back to the module layout `shape`."""
    return matrix_kn.t().reshape(tuple(shape))


def _gemm_params(module: nn.Module) -> Iterable[str]:
    if isinstance(module, nn.Linear | nn.Conv2d):
        yield "weight"
    elif isinstance(module, nn.LSTM | nn.LSTMCell):
        for param_name, _ in module.named_parameters(recurse=False):
            if param_name.startswith(("weight_ih", "weight_hh")):
                yield param_name


def find_prunable(model: nn.Module, exclude: Sequence[str] = ()) -> list[PrunableWeight]:
    """Every GEMM weight of `model` whose parameter name matches none of the fnmatch `exclude` patterns."""
    found = []
    for module_name, module in model.named_modules():
        for param_name in _gemm_params(module):
            name = f"{module_name}.{param_name}" if module_name else param_name
            if not any(fnmatch.fnmatchcase(name, pattern) for pattern in exclude):
                found.append(PrunableWeight(name, module, param_name))
    return found
