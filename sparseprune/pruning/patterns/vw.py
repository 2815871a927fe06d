"""Vector-wise (VW, balanced) sparsity: each column of B is cut into vectors of V consecutive K entries,
and every vector of a layer keeps the same count, so a kernel splits work evenly.

Ranking across layers still works: a unit is one *level* of a layer (removing the j-th smallest element
of every vector) scored by the mean of those elements. Levels of one layer score in ascending order, so
the globally lowest prefix always prunes a whole number of levels per layer: the per-layer sparsity
adapts to the layer, the per-vector count stays balanced.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparseprune.pruning.patterns.base import require_multiple, require_positive
from sparseprune.pruning.patterns.unit_pattern import UnitPattern
from sparseprune.pruning.ranking import Units


class VectorWise(UnitPattern):
    name = "vw"

    def __init__(self, vector: int = 16) -> None:
        require_positive(vector=vector)
        self.vector = vector

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        for layer, (k, _) in shapes.items():
            require_multiple(k, self.vector, "vector", layer)

    def _vectors(self, matrix: torch.Tensor) -> torch.Tensor:
        """(K, N) -> (K/V * N vectors, V)."""
        k, n = matrix.shape
        return matrix.reshape(k // self.vector, self.vector, n).permute(0, 2, 1).reshape(-1, self.vector)

    def units(self, score: torch.Tensor) -> Units:
        vectors = self._vectors(score)
        level_scores = torch.sort(vectors, dim=1).values.double().mean(0)
        return Units(level_scores, torch.full((self.vector,), vectors.shape[0], dtype=torch.long))

    def expand(self, pruned: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
        """Prune the `levels` lowest-scored elements of every vector (ties: lower K first)."""
        levels = int(pruned.sum())
        k, n = score.shape
        ranks = torch.argsort(torch.argsort(self._vectors(score), dim=1, stable=True), dim=1)
        keep = ranks >= levels
        return keep.reshape(k // self.vector, n, self.vector).permute(0, 2, 1).reshape(k, n)
