"""Apriori tuning (Algorithm 2 of the TW paper): let the element-wise result guide column pruning.

EW pruning at the run's final target leaves some columns of B almost empty and others nearly full. The
sparsest columns are forced to go first (score -inf), the densest are never pruned (score +inf).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparseprune.errors import UserError
from sparseprune.pruning.ranking import Scope, Units, as_scope


def _tune_columns(
    column_scores: torch.Tensor, ew_keep: torch.Tensor, top_fraction: float, last_fraction: float
) -> torch.Tensor:
    """Scores of columns (concatenated over the ranked layers) after forcing the extremes."""
    column_sparsity = 1.0 - ew_keep.double()
    n_top = round(top_fraction * column_scores.numel())
    n_last = round(last_fraction * column_scores.numel())
    sparsest_first = torch.sort(column_sparsity, descending=True, stable=True).indices
    tuned = column_scores.double().clone()
    tuned[sparsest_first[:n_top]] = -torch.inf
    if n_last:
        tuned[sparsest_first[-n_last:]] = torch.inf
    return tuned


def apriori_tune(
    column_units: Mapping[str, Units],
    ew_keep: Mapping[str, torch.Tensor],
    top_fraction: float,
    last_fraction: float,
    scope: Scope | str = "global",
) -> dict[str, Units]:
    """Column units with the `top_fraction` EW-sparsest columns set to -inf and the `last_fraction`
    EW-densest set to +inf, ranked across all layers or within each, like the pruning itself."""
    if not (0.0 <= top_fraction <= 1.0 and 0.0 <= last_fraction <= 1.0 and top_fraction + last_fraction <= 1.0):
        raise UserError(
            f"apriori fractions must lie in [0, 1] and sum to at most 1, got top={top_fraction}, last={last_fraction}"
        )
    density = {name: keep.float().mean(0) for name, keep in ew_keep.items()}
    groups = [list(column_units)] if as_scope(scope).kind == "global" else [[name] for name in column_units]
    tuned: dict[str, Units] = {}
    for names in groups:
        scores = _tune_columns(
            torch.cat([column_units[n].scores for n in names]),
            torch.cat([density[n] for n in names]),
            top_fraction,
            last_fraction,
        )
        for name, part in zip(names, torch.split(scores, [column_units[n].scores.numel() for n in names]), strict=True):
            tuned[name] = Units(part, column_units[name].sizes)
    return tuned
