"""Shuffled block-wise (Shfl-BW) sparsity: the columns (output channels) of B are permuted into groups of `block`
that matter along the same K (`column_groups`), then whole rows of each group, 1 x block units, are pruned, ranked
across layers like every other pattern's units.

A group is a TW tile whose columns need not be adjacent: the TW format packs it as one, and the TW kernels write its
outputs through their column index, so the permutation changes neither the layer's outputs nor the next layer.
Unlike TW no column is pruned whole and every group is exactly `block` wide.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparseprune.errors import UserError
from sparseprune.pruning.patterns.base import TW_TILE_WIDTHS, Pattern, require_multiple, require_positive
from sparseprune.pruning.patterns.column_groups import group_columns
from sparseprune.pruning.patterns.tw import expand_tile_rows, tile_row_units
from sparseprune.pruning.ranking import Scope, check_sparsity, prune_by_scope

K_ALIGN = 8  # the TW kernels read rows of x in 16-byte runs


class ShuffledBlockWise(Pattern):
    name = "shflbw"

    def __init__(self, block: int = 64, iterations: int = 10) -> None:
        require_positive(block=block)
        if not isinstance(iterations, int) or iterations < 0:
            raise UserError(f"iterations must be a non-negative integer, got {iterations!r}")
        self.block, self.iterations = block, iterations

    def check_kernel_options(self) -> None:
        """Each group runs as one TW tile."""
        if self.block not in TW_TILE_WIDTHS:
            raise UserError(f"shflbw block={self.block} must be one of {TW_TILE_WIDTHS}: each block is one TW tile")

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        self.check_kernel_options()
        for layer, (k, n) in shapes.items():
            if k % K_ALIGN:
                raise UserError(
                    f"shflbw runs layer {layer!r} on the TW kernels, which need K a multiple of {K_ALIGN}, and its K "
                    f"is {k}; keep the layer dense (model.prune_exclude) or pick another pattern"
                )
            require_multiple(n, self.block, "block", layer)

    def groups(self, score: torch.Tensor) -> torch.Tensor:
        """The layer's column groups, (N / block, block): the permutation, one group per row."""
        return group_columns(score, self.block, self.iterations)

    def keep_codes(
        self,
        scores: Mapping[str, torch.Tensor],
        sparsity: float,
        scope: Scope | str = "global",
        final_sparsity: float | None = None,
    ) -> dict[str, torch.Tensor]:
        check_sparsity(sparsity)
        groups = {name: self.groups(score) for name, score in scores.items()}
        units = {name: tile_row_units(score, groups[name]) for name, score in scores.items()}
        numel = {name: score.numel() for name, score in scores.items()}
        pruned = prune_by_scope(units, numel, sparsity, scope)
        return {
            name: expand_tile_rows(pruned[name], groups[name], score.shape).to(torch.uint8)
            for name, score in scores.items()
        }
