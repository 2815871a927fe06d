"""Random masks for the packing and kernel tests: tile-wise (whole columns pruned, then each tile of G kept columns
keeps its own row set, so tiles differ in kept K, some may keep none) and N:M (element- or vector-wise)."""

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


def random_nm_mask(k: int, n: int, kept: int, m: int, vector: int, generator: torch.Generator) -> torch.Tensor:
    """Boolean K x N mask keeping `kept` random entries of every group of m, shared by blocks of `vector` columns."""
    scores = torch.rand(k // m, m, n // vector, generator=generator)
    top = scores.topk(kept, dim=1).indices
    keep = torch.zeros(scores.shape, dtype=torch.bool).scatter_(1, top, True)
    return keep.repeat_interleave(vector, dim=2).reshape(k, n)
