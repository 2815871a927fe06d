"""Block-wise (BW) sparsity: whole bk x bn blocks of B are pruned together."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparseprune.pruning.patterns.base import require_multiple, require_positive
from sparseprune.pruning.patterns.unit_pattern import UnitPattern
from sparseprune.pruning.ranking import Units


class BlockWise(UnitPattern):
    name = "bw"

    def __init__(self, block_k: int = 32, block_n: int = 32) -> None:
        require_positive(block_k=block_k, block_n=block_n)
        self.block_k, self.block_n = block_k, block_n

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        for layer, (k, n) in shapes.items():
            require_multiple(k, self.block_k, "block_k", layer)
            require_multiple(n, self.block_n, "block_n", layer)

    def _blocks(self, matrix: torch.Tensor) -> torch.Tensor:
        k, n = matrix.shape
        return matrix.reshape(k // self.block_k, self.block_k, n // self.block_n, self.block_n)

    def units(self, score: torch.Tensor) -> Units:
        block_scores = self._blocks(score).mean(dim=(1, 3)).flatten()
        return Units(block_scores, torch.full_like(block_scores, self.block_k * self.block_n, dtype=torch.long))

    def expand(self, pruned: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
        k, n = score.shape
        keep = ~pruned.view(k // self.block_k, n // self.block_n)
        return keep.repeat_interleave(self.block_k, 0).repeat_interleave(self.block_n, 1)
