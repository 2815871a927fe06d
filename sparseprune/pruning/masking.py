"""Keeping pruned weights at exactly zero, and measuring how sparse the model is."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from sparseprune.errors import UserError
from sparseprune.pruning.gemm_view import PrunableWeight, from_gemm
from sparseprune.pruning.patterns import Pattern, keep_mask


class MaskedWeights:
    """Keep masks laid out like each parameter and living on its device, applied in place."""

    def __init__(self, weights: list[PrunableWeight], codes: Mapping[str, torch.Tensor]) -> None:
        self.weights = [w for w in weights if w.name in codes]
        self.masks = {
            w.name: from_gemm(keep_mask(codes[w.name]), w.param.shape).to(w.param.device) for w in self.weights
        }

    @torch.no_grad()
    def apply(self) -> None:
        for weight in self.weights:
            weight.param.mul_(self.masks[weight.name])

    @torch.no_grad()
    def mask_gradients(self) -> None:
        """Zero gradients of pruned weights so momentum and Adam states never build up behind the mask."""
        for weight in self.weights:
            if weight.param.grad is not None:
                weight.param.grad.mul_(self.masks[weight.name])


def check_codes(
    codes: Mapping[str, torch.Tensor], weights: list[PrunableWeight], pattern: Pattern, source: str
) -> None:
    """Masks read from a file name the model's prunable weights, match their GEMM shapes and hold only codes the
    pattern makes; anything else is a file altered by hand or of another model."""
    shapes = {weight.name: weight.gemm_shape for weight in weights}
    unknown = sorted(set(codes) - set(shapes))
    if unknown:
        raise UserError(f"{source} has masks for weights the model lacks: {unknown[:3]}")
    for name, layer_codes in codes.items():
        if not isinstance(layer_codes, torch.Tensor) or layer_codes.dtype != torch.uint8:
            raise UserError(f"{source}: the mask of {name} is not a uint8 tensor of keep codes")
        if tuple(layer_codes.shape) != tuple(shapes[name]):
            raise UserError(
                f"{source}: the mask of {name} has shape {list(layer_codes.shape)}, the layer's GEMM view "
                f"{list(shapes[name])}; the masks were altered or belong to another model"
            )
        outside = sorted(set(torch.unique(layer_codes).tolist()) - pattern.code_values)
        if outside:
            raise UserError(
                f"{source}: the mask of {name} holds codes {outside}, which pattern {pattern.name} never makes "
                f"(it makes {sorted(pattern.code_values)})"
            )


def layer_sparsity(codes: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """Fraction of each layer the mask prunes (kept weights that happen to be zero do not count)."""
    return {name: 1.0 - float(keep_mask(layer_codes).float().mean()) for name, layer_codes in codes.items()}


def overall_sparsity(codes: Mapping[str, torch.Tensor]) -> float:
    pruned = sum(int((~keep_mask(layer_codes)).sum()) for layer_codes in codes.values())
    return pruned / max(sum(layer_codes.numel() for layer_codes in codes.values()), 1)


MASK_FILE = "mask.safetensors"  # beside a run's summary.json


def save_largest_mask(codes: Mapping[str, torch.Tensor], path: Path) -> None:
    """The keep mask (uint8) of the largest pruned layer, so sweep reports can draw it without loading (or still
    having) the checkpoint."""
    if codes:
        layer = max(codes, key=lambda name: codes[name].numel())
        save_file({layer: keep_mask(codes[layer]).to(torch.uint8).cpu().contiguous()}, str(path))
