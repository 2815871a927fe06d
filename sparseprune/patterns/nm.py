"""N:M sparsity: in every group of M consecutive K entries of a column, N are kept.

Element-wise (vector=1) picks each column's own N; vector-wise (vector=V) lets V adjacent columns share
one index set, so tensor cores run dense MMAs on the gathered K. The pattern fixes the final sparsity at
1 - N/M; earlier stages of a gradual schedule keep more per group (never fewer than N).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from sparseprune.errors import UserError
from sparseprune.patterns.base import Pattern, require_multiple, require_positive
from sparseprune.ranking import Scope, check_sparsity


class NM(Pattern):
    name = "nm"

    def __init__(self, n: int = 1, m: int = 4, vector: int = 1) -> None:
        require_positive(n=n, m=m, vector=vector)
        if n >= m:
            raise UserError(f"N:M needs N < M, got {n}:{m}")
        self.n, self.m, self.vector = n, m, vector

    def fixed_sparsity(self) -> float:
        return 1.0 - self.n / self.m

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        for layer, (k, n) in shapes.items():
            require_multiple(k, self.m, "M", layer)
            require_multiple(n, self.vector, "vector", layer)

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
        groups = score.double().reshape(k // self.m, self.m, n // self.vector, self.vector).sum(3)
        order = torch.sort(groups, dim=1, descending=True, stable=True).indices  # ties: lower K kept
        keep = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, order[:, :kept], True)
        return keep.repeat_interleave(self.vector, 2).reshape(k, n)
