"""Patterns whose pruning units are fixed before ranking (EW elements, BW blocks): rank, prune, expand."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping

import torch

from sparseprune.pruning.patterns.base import Pattern
from sparseprune.pruning.ranking import Scope, Units, prune_by_scope


class UnitPattern(Pattern):
    """A pattern defined by `units` (score -> Units) and `expand` (pruned units -> keep mask)."""

    @abstractmethod
    def units(self, score: torch.Tensor) -> Units:
        """The layer's units in a fixed order."""

    @abstractmethod
    def expand(self, pruned: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
        """Boolean keep mask (K x N, like `score`) from per-unit `pruned` flags."""

    def keep_codes(
        self,
        scores: Mapping[str, torch.Tensor],
        sparsity: float,
        scope: Scope | str = "global",
        final_sparsity: float | None = None,
    ) -> dict[str, torch.Tensor]:
        units = {name: self.units(score) for name, score in scores.items()}
        numel = {name: score.numel() for name, score in scores.items()}
        pruned = prune_by_scope(units, numel, sparsity, scope)
        return {name: self.expand(pruned[name], score).to(torch.uint8) for name, score in scores.items()}
