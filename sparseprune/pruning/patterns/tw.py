"""Tile-wise (TW) sparsity, Algorithm 1 of the TW paper.

1. Column pruning: whole columns of B (K x 1 units) go, ranked across layers, until `column_share` of
   the target is reached (apriori tuning may force the EW-sparsest columns first).
2. The kept columns, in ascending order, are regrouped into tiles of G columns (the last may be narrower).
3. Row pruning: inside each tile whole rows (1 x G units) go, ranked across layers, until the target.
Each tile is then a dense (kept K) x G block: a tensor-core GEMM on gathered rows of x.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparseprune.errors import UserError
from sparseprune.pruning.apriori import apriori_tune
from sparseprune.pruning.patterns.base import Pattern, require_positive
from sparseprune.pruning.patterns.ew import ElementWise
from sparseprune.pruning.ranking import Scope, Units, check_sparsity, prune_by_scope


def tile_columns(kept_columns: torch.Tensor, granularity: int) -> torch.Tensor:
    """Indices of kept columns grouped into tiles: (T, G) with -1 padding the last tile."""
    n_tiles = -(-kept_columns.numel() // granularity)
    tiles = torch.full((n_tiles * granularity,), -1, dtype=torch.long)
    tiles[: kept_columns.numel()] = kept_columns
    return tiles.view(n_tiles, granularity)


def tile_row_units(score: torch.Tensor, tiles: torch.Tensor) -> Units:
    """One unit per (tile, row), tile-major, scored by the row's mean over the tile's columns (-1 pads `tiles`)."""
    valid = tiles >= 0
    gathered = score[:, tiles.clamp(min=0)] * valid  # (K, T, G)
    widths = valid.sum(1)  # (T,)
    means = gathered.sum(2).double() / widths
    return Units(means.t().flatten(), widths.repeat_interleave(score.shape[0]))


def expand_tile_rows(pruned_rows: torch.Tensor, tiles: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Keep mask (K x N) from per-(tile, row) `pruned` flags in `tile_row_units`' order."""
    k, n = shape
    keep = torch.zeros(k, n + 1, dtype=torch.bool)  # the extra column swallows the -1 padding
    row_keep = ~pruned_rows.view(tiles.shape[0], k)  # (T, K)
    keep[:, tiles.flatten()] = row_keep.t().repeat_interleave(tiles.shape[1], 1)
    return keep[:, :n]


class TileWise(Pattern):
    name = "tw"

    def __init__(
        self,
        granularity: int = 128,
        column_share: float = 0.25,
        apriori_top: float = 0.0,
        apriori_last: float = 0.0,
    ) -> None:
        require_positive(granularity=granularity)
        if not 0.0 <= column_share <= 1.0:
            raise UserError(f"column_share must lie in [0, 1], got {column_share}")
        self.granularity, self.column_share = granularity, column_share
        self.apriori_top, self.apriori_last = apriori_top, apriori_last

    def check_kernel_options(self) -> None:
        """Tiles feed tensor-core MMAs 8 columns wide."""
        if self.granularity % 8:
            raise UserError(f"granularity G={self.granularity} must be a multiple of 8 (tensor-core MMA width)")

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        """A layer narrower than G forms one narrower tile, but a G wider than every layer means no layer is tiled
        at all."""
        self.check_kernel_options()
        widest = max((n for _, n in shapes.values()), default=self.granularity)
        if self.granularity > widest:
            raise UserError(f"granularity G={self.granularity} is wider than every pruned layer (largest N={widest})")

    def keep_codes(
        self,
        scores: Mapping[str, torch.Tensor],
        sparsity: float,
        scope: Scope | str = "global",
        final_sparsity: float | None = None,
    ) -> dict[str, torch.Tensor]:
        check_sparsity(sparsity)
        numel = {name: score.numel() for name, score in scores.items()}
        column_units = {
            name: Units(score.double().mean(0), torch.full((score.shape[1],), score.shape[0], dtype=torch.long))
            for name, score in scores.items()
        }
        if self.apriori_top or self.apriori_last:
            ew_keep = ElementWise().keep_codes(scores, final_sparsity or sparsity, scope)
            column_units = apriori_tune(column_units, ew_keep, self.apriori_top, self.apriori_last, scope)
        pruned_columns = prune_by_scope(column_units, numel, sparsity * self.column_share, scope)
        tiles = {
            name: tile_columns(torch.nonzero(~pruned).flatten(), self.granularity)
            for name, pruned in pruned_columns.items()
        }
        row_units = {name: tile_row_units(scores[name], tiles[name]) for name in scores}
        already = {name: int(pruned.sum()) * scores[name].shape[0] for name, pruned in pruned_columns.items()}
        pruned_rows = prune_by_scope(row_units, numel, sparsity, scope, already)
        return {
            name: expand_tile_rows(pruned_rows[name], tiles[name], score.shape).to(torch.uint8)
            for name, score in scores.items()
        }
