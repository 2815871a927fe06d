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

from sparseprune.config_types import check_fields, dataclass_hints
from sparseprune.errors import UserError


@dataclass(frozen=True)
class Scope:
    """Where units compete: across all layers ("global") or within each ("layer"). Globally, no layer is pruned
    beyond `max_layer_sparsity` of its elements (earlier phases of a pattern included): without that floor,
    layers whose scores run low are pruned away entirely and the network stops passing signal."""

    kind: Literal["global", "layer"] = "global"
    max_layer_sparsity: float = 1.0

    def __post_init__(self) -> None:
        check_fields(
            {"max_layer_sparsity": self.max_layer_sparsity}, dataclass_hints(Scope), "callbacks.staged_pruning."
        )
        if self.kind not in ("global", "layer"):
            raise UserError(f"pruning scope must be 'global' or 'layer', got {self.kind!r}")
        if not 0.0 < self.max_layer_sparsity <= 1.0:
            raise UserError(f"max_layer_sparsity must lie in (0, 1], got {self.max_layer_sparsity}")


def as_scope(scope: Scope | str) -> Scope:
    """A Scope from itself or from its kind's name."""
    return scope if isinstance(scope, Scope) else Scope(scope)  # type: ignore[arg-type]


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


def protected_units(units: Units, prunable: float) -> torch.Tensor:
    """Flags of the highest-scored units to keep so that the others hold at most `prunable` elements."""
    sizes = units.sizes.long().flatten()
    need = float(sizes.sum()) - prunable  # elements that must stay
    order = torch.sort(units.scores.double().flatten(), descending=True, stable=True).indices
    before = torch.cumsum(sizes[order], 0) - sizes[order]  # size protected before each unit in this order
    protected = torch.zeros_like(sizes, dtype=torch.bool)
    protected[order[before < need]] = True
    return protected


def prune_by_scope(
    units: Mapping[str, Units],
    numel: Mapping[str, int],
    sparsity: float,
    scope: Scope | str,
    already_pruned: Mapping[str, int] | None = None,
) -> dict[str, torch.Tensor]:
    """`prune_lowest` until `sparsity` of all elements is pruned, ranked across layers ("global", each layer
    keeping its protected units) or in each layer ("layer"); `already_pruned` counts elements an earlier phase
    of the same pattern removed."""
    check_sparsity(sparsity)
    scope = as_scope(scope)
    done = already_pruned or {}
    if scope.kind == "layer":
        return {
            name: prune_lowest({name: layer_units}, max(round(sparsity * numel[name]) - done.get(name, 0), 0))[name]
            for name, layer_units in units.items()
        }
    n_prune = max(round(sparsity * sum(numel.values())) - sum(done.values()), 0)
    if scope.max_layer_sparsity >= 1.0:
        return prune_lowest(units, n_prune)
    # The floor is on the whole layer: what earlier phases pruned counts against it.
    keep = {
        name: protected_units(u, max(scope.max_layer_sparsity * numel[name] - done.get(name, 0), 0.0))
        for name, u in units.items()
    }
    candidates = {
        name: Units(u.scores.flatten()[~keep[name]], u.sizes.flatten()[~keep[name]]) for name, u in units.items()
    }
    chosen = prune_lowest(candidates, n_prune)
    pruned = {}
    for name, layer_units in units.items():
        flags = torch.zeros(layer_units.scores.numel(), dtype=torch.bool, device=layer_units.scores.device)
        flags[~keep[name]] = chosen[name]
        pruned[name] = flags
    return pruned
