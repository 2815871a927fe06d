"""Latency-aware allocation: sparsity goes where it saves the most time per unit of importance lost.

A pattern ranks units across layers by their mean score per element. Scaling every score of layer l by
numel_l / slope_l, where slope_l is the layer's predicted microseconds per forward pass saved per unit of density
removed, turns that key into importance per microsecond saved, so every pattern's own ranking (TW's columns and tile
rows, TEW, VW levels, BW blocks) becomes latency-aware unchanged. The slope is a secant of the layer's predicted
time: over the whole density range first, then, where the time is not linear, around the density the first pass
reached. A layer whose sparse call would still be no faster than its dense call at the sparsity it reached stays
dense (its pruned weights come back) and the others reach the target among themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from sparseprune.errors import UserError
from sparseprune.latency.predictor import LatencyModel
from sparseprune.pruning.patterns.base import KEPT, Pattern, keep_mask
from sparseprune.pruning.ranking import Scope

ALLOCATIONS = ("importance", "latency")
RANKED_PATTERNS = ("tw", "tew", "vw", "bw")  # sparsity ranked across layers: latency-aware ranking applies
LATENCY_PATTERNS = (*RANKED_PATTERNS, "nm")  # N:M fixes its sparsity: only the dense-or-sparse choice per layer
PASSES = 2  # the whole-range secant, then one refinement around the reached density
SLOPE_TOLERANCE = 0.05  # a refinement pass runs only where a layer's local slope differs more from the one used
SECANT_HALF_WIDTH = 0.1  # density either side of the reached one
MIN_SLOPE_US = 1e-6  # a layer that pruning does not speed up ranks last, not infinitely last
SPEEDUP_TOLERANCE = 0.005  # a speed target is met at up to 0.5% above it
SEARCH_STEPS = 12  # rankings per speed target at most
SEARCH_RESOLUTION = 1 / 1024  # or until the sparsity bracket is this narrow


def check_allocation(allocation: str, pattern: str, scope: Scope, target_speedup: float | None) -> None:
    """One clear line for settings latency-aware allocation cannot honour, before any model exists."""
    if allocation not in ALLOCATIONS:
        raise UserError(f"callbacks.staged_pruning.allocation must be one of {list(ALLOCATIONS)}, got {allocation!r}")
    if allocation == "importance":
        if target_speedup is not None:
            raise UserError("schedule.target_speedup needs callbacks.staged_pruning.allocation=latency")
        return
    if pattern not in LATENCY_PATTERNS:
        raise UserError(f"allocation=latency needs a pattern with a fast sparse kernel "
                        f"({', '.join(LATENCY_PATTERNS)}); {pattern} has none, so pruning it saves no predictable "
                        "time")  # fmt: skip
    if scope.kind != "global":
        raise UserError("allocation=latency ranks units across layers; set callbacks.staged_pruning.scope=global")
    if target_speedup is not None and pattern not in RANKED_PATTERNS:
        raise UserError(f"schedule.target_speedup needs a pattern whose sparsity the ranking chooses "
                        f"({', '.join(RANKED_PATTERNS)}); {pattern} fixes it")  # fmt: skip


def code_sparsity(codes: Mapping[str, torch.Tensor]) -> dict[str, float]:
    return {name: 1.0 - float(keep_mask(c).float().mean()) for name, c in codes.items()}


@dataclass(frozen=True)
class Allocation:
    """Keep codes of every layer (all kept in the dense ones), the layers that stay dense, the overall sparsity
    asked of the ranking, each layer's sparsity and the predicted speedup."""

    codes: dict[str, torch.Tensor]
    dense_layers: list[str]
    sparsity: float
    layer_sparsity: dict[str, float]
    speedup: float


def slope_us(model: LatencyModel, name: str, density: float | None) -> float:
    """Predicted microseconds saved per unit of density removed, around `density` (None: over the whole range)."""
    if density is None:
        low, high = 0.05, 1.0
    else:
        low, high = max(density - SECANT_HALF_WIDTH, 0.01), min(density + SECANT_HALF_WIDTH, 1.0)
    saved = model.sparse_us(name, 1.0 - high) - model.sparse_us(name, 1.0 - low)
    return max(saved / (high - low), MIN_SLOPE_US)


class LatencyAllocator:
    """A pattern's keep codes ranked by importance per microsecond saved under a latency model."""

    def __init__(self, pattern: Pattern, model: LatencyModel, scope: Scope) -> None:
        self.pattern, self.model, self.scope = pattern, model, scope
        self.cap = min(scope.max_layer_sparsity, 0.999)  # the highest sparsity a ranking is asked for

    def ranked(
        self, scores: Mapping[str, torch.Tensor], sparsity: float, final: float | None
    ) -> dict[str, torch.Tensor]:
        if self.pattern.fixed_sparsity() is not None:  # N:M: every group alike, nothing to rank across layers
            return self.pattern.keep_codes(scores, sparsity, self.scope, final)
        slopes = {n: slope_us(self.model, n, None) for n in scores}
        codes: dict[str, torch.Tensor] = {}
        for _ in range(PASSES):
            factors = {n: s.numel() / slopes[n] for n, s in scores.items()}
            top = max(factors.values())
            codes = self.pattern.keep_codes({n: s * (factors[n] / top) for n, s in scores.items()}, sparsity,
                                            self.scope, final)  # fmt: skip
            local = {n: slope_us(self.model, n, 1.0 - s) for n, s in code_sparsity(codes).items()}
            if all(abs(local[n] - slopes[n]) <= SLOPE_TOLERANCE * slopes[n] for n in scores):
                break  # the time is as linear there as the slope assumed: ranking again changes nothing
            slopes = local
        return codes

    def allocate(
        self, scores: Mapping[str, torch.Tensor], sparsity: float, final: float | None, redistribute: bool = True
    ) -> Allocation:
        """Codes at `sparsity` of all prunable elements, the layers that would lose to dense kept dense; with
        `redistribute` the other layers are ranked again until they hold the whole target."""
        total = sum(s.numel() for s in scores.values())
        dense: list[str] = []
        codes: dict[str, torch.Tensor] = {}
        while len(dense) < len(scores):
            active = {n: s for n, s in scores.items() if n not in dense}
            share = min(sparsity * total / sum(s.numel() for s in active.values()), self.cap)
            codes = self.ranked(active, sparsity if self.pattern.fixed_sparsity() is not None else share, final)
            losers = [n for n, s in code_sparsity(codes).items() if self.model.loses(n, s)]
            dense += losers
            if not losers or not redistribute:
                break
        full = {n: codes[n] if n in codes and n not in dense else torch.full(s.shape, KEPT, dtype=torch.uint8)
                for n, s in scores.items()}  # fmt: skip
        ordered = [n for n in scores if n in dense]
        reached = code_sparsity(full)
        return Allocation(full, ordered, sparsity, reached, self.model.speedup(reached, ordered))

    def for_speedup(self, scores: Mapping[str, torch.Tensor], speedup: float, final: float | None) -> Allocation:
        """The allocation at about the lowest overall sparsity whose predicted speedup reaches `speedup`, within
        SPEEDUP_TOLERANCE above it: regula falsi on the predicted time ratio, which falls about linearly with the
        sparsity, since each evaluation ranks every unit again. The bisection's bracket keeps it converging."""
        best = self.allocate(scores, self.cap, final, redistribute=False)
        if best.speedup < speedup:
            raise UserError(unreachable_message(self.model, speedup, best))
        low, high, ratio_low, ratio_high = 0.0, self.cap, 1.0, 1.0 / best.speedup
        for _ in range(SEARCH_STEPS):
            if best.speedup <= speedup * (1 + SPEEDUP_TOLERANCE) or high - low < SEARCH_RESOLUTION:
                break
            guess = low + (ratio_low - 1.0 / speedup) * (high - low) / max(ratio_low - ratio_high, 1e-12)
            margin = (high - low) / 8  # never next to an end, so the bracket shrinks every step
            candidate = self.allocate(scores, min(max(guess, low + margin), high - margin), final, redistribute=False)
            if candidate.speedup >= speedup:
                high, ratio_high, best = candidate.sparsity, 1.0 / candidate.speedup, candidate
            else:
                low, ratio_low = candidate.sparsity, 1.0 / candidate.speedup
        return best


def best_case(model: LatencyModel, shapes: Mapping[str, Sequence[int]], max_sparsity: float) -> Allocation:
    """Every layer at `max_sparsity`, or dense where that still loses: no allocation predicts more speedup."""
    cap = min(max_sparsity, 0.999)
    dense = [n for n in model.dense if model.loses(n, cap)]
    sparsity = {n: 0.0 if n in dense else cap for n in model.dense}
    codes = {n: torch.full(tuple(s), KEPT, dtype=torch.uint8) for n, s in shapes.items()}
    return Allocation(codes, dense, cap, sparsity, model.speedup(sparsity, dense))


def unreachable_message(model: LatencyModel, target: float, reached: Allocation) -> str:
    """Which layers cap the speedup: the largest shares of the predicted time left at the highest sparsity."""
    sparsity = reached.layer_sparsity
    times = {n: model.layer_us(n, sparsity.get(n, 0.0), n in reached.dense_layers) for n in model.dense}
    if model.other_us > 0:
        times["the layers that are never pruned"] = model.other_us
    left = sum(times.values())
    top = sorted(times.items(), key=lambda item: -item[1])[:3]
    named = ", ".join(
        f"{n} {100 * t / left:.0f}%"
        + (" (stays dense: its sparse call is slower)" if n in reached.dense_layers else "")
        for n, t in top
    )
    return (f"schedule.target_speedup={target:g} cannot be reached: pruned as far as max_layer_sparsity "
            f"{reached.sparsity:g} allows, the predicted speedup is {reached.speedup:.2f}x ({model.source}); "
            f"the time left is mostly in {named}")  # fmt: skip
