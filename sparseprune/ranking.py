"""Choosing which pruning units go: the lowest-scored first, across all layers or within each layer.

Every pattern reduces its layers to *units* (an element, a block, a tile row, ...) with a score (mean
importance per element, so units of different sizes compare fairly) and a size in elements. Pruning the
lowest-scored prefix of the sorted units reaches a target element count to within one unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from sparseprune.errors import UserError

Scope = Literal["global", "layer"]


@dataclass(frozen=True)
class Units:
    """One layer's pruning units: flat score and size tensors of equal length."""

    scores: torch.Tensor
    sizes: torch.Tensor


def check_sparsity(sparsity: float) -> None:
    if not 0.0 <= sparsity < 1.0:
        raise UserError(f"sparsity must lie in [0, 1), got {sparsity}")


def prune_lowest(units: Mapping[str, Units], n_prune: int) -> dict[str, torch.Tensor]:
    """Boolean `pruned` flags per layer: the lowest-scored units whose sizes add up to at most `n_prune`.

    Ties break by position (layer order, then unit index) so every rank and every resume picks the same units.
    """
    names = list(units)
    if not names:
        return {}
    scores = torch.cat([units[n].scores.double().flatten() for n in names])
    sizes = torch.cat([units[n].sizes.long().flatten() for n in names])
    order = torch.sort(scores, stable=True).indices
    cumulative = torch.cumsum(sizes[order], 0)
    n_units = int(torch.searchsorted(cumulative, torch.tensor(n_prune, dtype=cumulative.dtype), right=True))
    pruned = torch.zeros_like(scores, dtype=torch.bool)
    pruned[order[:n_units]] = True
    return dict(zip(names, torch.split(pruned, [units[n].scores.numel() for n in names]), strict=True))


def prune_by_scope(
    units: Mapping[str, Units],
    numel: Mapping[str, int],
    sparsity: float,
    scope: Scope,
    already_pruned: Mapping[str, int] | None = None,
) -> dict[str, torch.Tensor]:
    """`prune_lowest` until `sparsity` of all elements is pruned, ranked across layers ("global") or in each
    layer ("layer"); `already_pruned` counts elements an earlier phase of the same pattern removed."""
    check_sparsity(sparsity)
    done = already_pruned or {}
    if scope == "global":
        n_prune = round(sparsity * sum(numel.values())) - sum(done.values())
        return prune_lowest(units, max(n_prune, 0))
    if scope == "layer":
        return {
            name: prune_lowest({name: layer_units}, max(round(sparsity * numel[name]) - done.get(name, 0), 0))[name]
            for name, layer_units in units.items()
        }
    raise UserError(f"unknown pruning scope {scope!r}; choose 'global' or 'layer'")
