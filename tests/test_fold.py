"""Folding batch norms into the convolutions before them: exact values, the model's outputs, kept zeros."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sparseprune.export.fold import fold_batch_norms, fold_into_conv, foldable_pairs


def norm_with_statistics(channels: int, gen: torch.Generator) -> nn.BatchNorm2d:
    norm = nn.BatchNorm2d(channels)
    with torch.no_grad():
        norm.running_mean.copy_(torch.randn(channels, generator=gen))
        norm.running_var.copy_(torch.rand(channels, generator=gen) + 0.5)
        norm.weight.copy_(torch.randn(channels, generator=gen))
        norm.bias.copy_(torch.randn(channels, generator=gen))
    return norm.eval()


def test_fold_into_conv_by_hand() -> None:
    """w = 2, b = 1; mean 1, var 3, eps 1 (sigma 2), gamma 4, beta 5: scale 2, so w' = 4 and b' = (1 - 1) * 2 + 5."""
    conv = nn.Conv2d(1, 1, 1)
    norm = nn.BatchNorm2d(1, eps=1.0).eval()
    with torch.no_grad():
        conv.weight.fill_(2.0)
        conv.bias.fill_(1.0)
        norm.running_mean.fill_(1.0)
        norm.running_var.fill_(3.0)
        norm.weight.fill_(4.0)
        norm.bias.fill_(5.0)
    fold_into_conv(conv, norm)
    assert conv.weight.item() == 4.0 and conv.bias.item() == 5.0


def test_fold_batch_norms_keeps_outputs_and_zeros() -> None:
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        norm_with_statistics(8, gen),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(8, 4, 3, padding=1, bias=False), norm_with_statistics(4, gen)),
        nn.Conv2d(4, 4, 1),
        nn.ReLU(),
        norm_with_statistics(4, gen),  # after a ReLU, not a convolution: stays
    ).eval()
    with torch.no_grad():
        model[0].weight[:, :, 0, 0] = 0.0  # pruned weights
    x = torch.randn(2, 3, 6, 6, generator=gen)
    expected = model(x)
    folded = fold_batch_norms(model)
    assert folded == ["1", "3.1"]
    assert isinstance(model[1], nn.Identity) and isinstance(model[3][1], nn.Identity)
    assert isinstance(model[6], nn.BatchNorm2d)
    assert model[3][0].bias is not None
    assert bool((model[0].weight[:, :, 0, 0] == 0).all())
    torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_nothing_to_fold_without_conv_then_norm() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Sequential(nn.ReLU(), nn.BatchNorm2d(4))).eval()
    assert foldable_pairs(model) == [] and fold_batch_norms(model) == []


def test_fold_batch_norms_refuses_training_mode() -> None:
    with pytest.raises(ValueError, match="eval mode"):
        fold_batch_norms(nn.Sequential(nn.Conv2d(1, 1, 1), nn.BatchNorm2d(1)))
