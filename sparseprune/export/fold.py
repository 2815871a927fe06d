"""Folding inference-mode batch norms into the convolutions before them, as inference engines do before they run a
model.

A BatchNorm2d in eval mode is a per-channel affine map, so conv -> norm equals one convolution whose output channels
are scaled and shifted. Folding before packing keeps every pattern's zeros (a scaled zero is zero) and spares the
sparse model a norm over the channel-major layout its convolutions return for several images, which torch runs about
3x slower than over NCHW (H200). Export folds both twins, so the dense model is timed folded too.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def fold_into_conv(conv: nn.Conv2d, norm: nn.BatchNorm2d) -> None:
    """conv := norm(conv(.)) with norm's running statistics, in place."""
    scale = (norm.running_var + norm.eps).rsqrt()
    if norm.weight is not None:
        scale = scale * norm.weight
    shift = -norm.running_mean * scale
    if norm.bias is not None:
        shift = shift + norm.bias
    conv.weight.mul_(scale.reshape(-1, 1, 1, 1).to(conv.weight.dtype))
    if conv.bias is None:
        conv.bias = nn.Parameter(shift.to(conv.weight.dtype))
    else:
        conv.bias.copy_(conv.bias * scale + shift)


def foldable(conv: nn.Module, norm: nn.Module) -> bool:
    return (
        isinstance(conv, nn.Conv2d)
        and isinstance(norm, nn.BatchNorm2d)
        and norm.running_mean is not None
        and norm.num_features == conv.out_channels
    )


def foldable_pairs(model: nn.Module) -> list[tuple[str, nn.Sequential, str, nn.Conv2d, nn.BatchNorm2d]]:
    """(sequence name, sequence, norm's child name, conv, norm) for every BatchNorm2d that directly follows a Conv2d
    inside an nn.Sequential, the one place the order of two modules is known without tracing."""
    pairs = []
    for prefix, sequence in model.named_modules():
        if isinstance(sequence, nn.Sequential):
            children = list(sequence.named_children())
            for (_, conv), (name, norm) in zip(children, children[1:], strict=False):
                if foldable(conv, norm):
                    pairs.append((prefix, sequence, name, conv, norm))
    return pairs


def fold_batch_norms(model: nn.Module) -> list[str]:
    """Folds every norm of `foldable_pairs` into its convolution and puts nn.Identity in its place; returns the
    folded norms' names. The model must be in eval mode: training-mode norms use batch statistics."""
    if model.training:
        raise ValueError("batch norms fold only in eval mode; call model.eval() first")
    folded = []
    for prefix, sequence, name, conv, norm in foldable_pairs(model):
        fold_into_conv(conv, norm)
        setattr(sequence, name, nn.Identity())
        folded.append(f"{prefix}.{name}" if prefix else name)
    return folded
