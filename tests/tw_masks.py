"""Random tile-wise masks for the TW tests: whole columns pruned, then each tile of G kept columns keeps its own
row set, so tiles differ in kept K (some may keep none)."""

from __future__ import annotations

import torch


def random_tw_mask(
    k: int,
    n: int,
    granularity: int,
    col_keep: float,
    row_keep: tuple[float, float],
    generator: torch.Generator,
    empty_tiles: int = 0,
) -> torch.Tensor:
    """Boolean K x N TW mask; each tile keeps a fraction of rows drawn from `row_keep`, the first
    `empty_tiles` tiles keep no row at all."""
    mask = torch.zeros(k, n, dtype=torch.bool)
    n_cols = max(1, round(col_keep * n))
    kept_cols = torch.randperm(n, generator=generator)[:n_cols].sort().values
    for t, cols in enumerate(kept_cols.split(granularity)):
        if t < empty_tiles:
            continue
        lo, hi = row_keep
        frac = lo + (hi - lo) * float(torch.rand(1, generator=generator))
        n_rows = max(1, round(frac * k))
        rows = torch.randperm(k, generator=generator)[:n_rows]
        mask[rows.unsqueeze(1), cols.unsqueeze(0)] = True
    return mask
