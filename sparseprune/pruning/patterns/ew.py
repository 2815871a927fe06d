"""Element-wise (EW) sparsity: every weight is its own unit; the accuracy reference for every other pattern."""

from __future__ import annotations

import torch

from sparseprune.pruning.patterns.unit_pattern import UnitPattern
from sparseprune.pruning.ranking import Units


class ElementWise(UnitPattern):
    name = "ew"

    def units(self, score: torch.Tensor) -> Units:
        return Units(score.flatten(), torch.ones(score.numel(), dtype=torch.long))

    def expand(self, pruned: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
        return ~pruned.view(score.shape)
