"""N:M sparsity: in every group of M consecutive K entries of a column, N are kept.

Element-wise (vector=1) picks each column's own N; vector-wise (vector=V) lets V adjacent columns share
one index set, so tensor cores run dense MMAs on the gathered K. Block-wise (block=b, nmSPARSE's BW N:M) makes
the unit a b x b block: of every M consecutive blocks along K in a block column, N are kept, so each block column
is one TW tile. The pattern fixes the final sparsity at 1 - N/M; earlier stages of a gradual schedule keep more per
group (never fewer than N).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from sparseprune.errors import UserError
from sparseprune.pruning.patterns.base import TW_TILE_WIDTHS, Pattern, require_multiple, require_positive
from sparseprune.pruning.ranking import Scope, check_sparsity


class NM(Pattern):
    name = "nm"

    def __init__(self, n: int = 1, m: int = 4, vector: int = 1, block: int = 1) -> None:
        require_positive(n=n, m=m, vector=vector, block=block)
        if n >= m:
            raise UserError(f"N:M needs N < M, got {n}:{m}")
        if vector > 1 and block > 1:
            raise UserError(f"N:M takes vector or block, not both: got vector={vector}, block={block}")
        self.n, self.m, self.vector, self.block = n, m, vector, block

    def check_kernel_options(self) -> None:
        """Block N:M runs each block column as one TW tile."""
        if self.block > 1 and self.block not in TW_TILE_WIDTHS:
            raise UserError(
                f"N:M block={self.block} must be 1 or one of {TW_TILE_WIDTHS}: each block column runs as a TW tile"
            )

    def fixed_sparsity(self) -> float:
        return 1.0 - self.n / self.m

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        self.check_kernel_options()
        for layer, (k, n) in shapes.items():
            require_multiple(k, self.m * self.block, "M x block" if self.block > 1 else "M", layer)
            require_multiple(n, self.vector * self.block, "block" if self.block > 1 else "vector", layer)

    def kept_per_group(self, sparsity: float) -> int:
        """Entries kept per group at an intermediate `sparsity` (rounded toward keeping more)."""
        check_sparsity(sparsity)
        if sparsity > self.fixed_sparsity() + 1e-9:
            raise UserError(f"{self.n}:{self.m} cannot go past sparsity {self.fixed_sparsity():g}, asked {sparsity}")
        return max(self.n, math.ceil(self.m * (1.0 - sparsity) - 1e-9))

    def keep_codes(
        self,
        scores: Mapping[str, torch.Tensor],
        sparsity: float,
        scope: Scope | str = "global",
        final_sparsity: float | None = None,
    ) -> dict[str, torch.Tensor]:
        kept = self.kept_per_group(sparsity)
        return {name: self._layer_keep(score, kept).to(torch.uint8) for name, score in scores.items()}

    def _layer_keep(self, score: torch.Tensor, kept: int) -> torch.Tensor:
        k, n = score.shape
        b, columns = self.block, self.vector * self.block  # rows and columns sharing one choice
        units = score.double().reshape(k // (self.m * b), self.m, b, n // columns, columns).sum((2, 4))
        order = torch.sort(units, dim=1, descending=True, stable=True).indices  # ties: lower K kept
        keep = torch.zeros_like(units, dtype=torch.bool).scatter_(1, order[:, :kept], True)
        return keep.repeat_interleave(b, 1).repeat_interleave(columns, 2).reshape(k, n)
