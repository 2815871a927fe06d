"""Tile-element-wise (TEW) sparsity: TW at sparsity s + delta, then the delta most important pruned
elements are restored. The restored elements run as a small sparse residual beside the tile GEMMs."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparseprune.errors import UserError
from sparseprune.pruning.patterns.base import KEPT, PRUNED, RESIDUAL, Pattern
from sparseprune.pruning.patterns.tw import TileWise
from sparseprune.pruning.ranking import Scope, Units, check_sparsity, prune_by_scope


class TileElementWise(Pattern):
    name = "tew"
    code_values = frozenset({PRUNED, KEPT, RESIDUAL})

    def __init__(
        self,
        delta: float = 0.015,
        granularity: int = 128,
        column_share: float = 0.25,
        apriori_top: float = 0.0,
        apriori_last: float = 0.0,
    ) -> None:
        if not 0.0 <= delta < 1.0:
            raise UserError(f"TEW delta must lie in [0, 1), got {delta}")
        self.delta = delta
        self.tile_wise = TileWise(granularity, column_share, apriori_top, apriori_last)

    def check_kernel_options(self) -> None:
        self.tile_wise.check_kernel_options()

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        self.tile_wise.check_fits(shapes)

    def keep_codes(
        self,
        scores: Mapping[str, torch.Tensor],
        sparsity: float,
        scope: Scope | str = "global",
        final_sparsity: float | None = None,
    ) -> dict[str, torch.Tensor]:
        check_sparsity(sparsity)
        if sparsity + self.delta >= 1.0:
            raise UserError(f"TEW needs sparsity + delta < 1, got {sparsity} + {self.delta}")
        final = None if final_sparsity is None else min(final_sparsity + self.delta, 1.0 - 1e-9)
        codes = self.tile_wise.keep_codes(scores, sparsity + self.delta, scope, final)
        # Restoring the highest-scored pruned elements = pruning the lowest of their negated scores.
        candidates = {}
        for name, score in scores.items():
            negated = -score[codes[name] == PRUNED].double()
            candidates[name] = Units(negated, torch.ones_like(negated, dtype=torch.long))
        numel = {name: score.numel() for name, score in scores.items()}
        restored = prune_by_scope(candidates, numel, self.delta, scope)
        for name, layer_codes in codes.items():
            pruned_positions = torch.nonzero(layer_codes.flatten() == PRUNED).flatten()
            layer_codes.view(-1)[pruned_positions[restored[name]]] = RESIDUAL
        return codes
