"""Taylor scores against an autograd reference; magnitude; the cross-rank reduction."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sparseprune.errors import UserError
from sparseprune.pruning.gemm_view import find_prunable, from_gemm, to_gemm
from sparseprune.pruning.importance import magnitude_scores, reduce_scores, taylor_scores


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 2 * 2, 4))


def make_batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(5, 2, 4, 4, generator=generator), torch.randint(0, 4, (5,), generator=generator)) for _ in range(n)
    ]


def test_taylor_equals_autograd_reference() -> None:
    model = tiny_model()
    weights = find_prunable(model)
    batches = make_batches(3)

    def loss_of(batch):
        images, labels = batch
        return nn.functional.cross_entropy(model(images), labels)

    expected = {w.name: torch.zeros_like(w.param) for w in weights}
    for batch in batches:
        model.zero_grad()
        loss_of(batch).backward()
        for w in weights:
            expected[w.name] += (w.param.detach() * w.param.grad).abs() / len(batches)
    model.zero_grad()
    scores = taylor_scores(weights, loss_of, iter(batches), num_batches=3)
    for w in weights:
        assert scores[w.name].shape == to_gemm(w.param).shape
        torch.testing.assert_close(from_gemm(scores[w.name], w.param.shape), expected[w.name], rtol=1e-6, atol=1e-9)


def test_taylor_restores_existing_gradients_and_counts_batches() -> None:
    model = tiny_model()
    weights = find_prunable(model)
    marker = [torch.full_like(w.param, 7.0) for w in weights]
    for w, g in zip(weights, marker, strict=True):
        w.param.grad = g
    taylor_scores(weights, lambda b: nn.functional.cross_entropy(model(b[0]), b[1]), iter(make_batches(1)), 4)
    assert all(w.param.grad is g for w, g in zip(weights, marker, strict=True))
    with pytest.raises(UserError, match="num_batches"):
        taylor_scores(weights, lambda b: b, iter([]), 0)


def test_magnitude_is_absolute_weight_in_gemm_view() -> None:
    model = tiny_model()
    weights = find_prunable(model)
    scores = magnitude_scores(weights)
    conv = model[0].weight.detach()
    assert torch.equal(scores["0.weight"], conv.reshape(3, -1).t().abs())


def test_reduce_scores_keeps_shapes_and_applies_the_reduction() -> None:
    scores = {"a": torch.ones(2, 3), "b": torch.full((4,), 2.0)}
    reduced = reduce_scores(scores, lambda flat: flat * 0.5)
    assert torch.equal(reduced["a"], torch.full((2, 3), 0.5)) and torch.equal(reduced["b"], torch.ones(4))


def test_find_prunable_excludes_by_pattern_and_sees_lstm_gates() -> None:
    model = nn.ModuleDict({"rnn": nn.LSTM(4, 8, num_layers=2), "head": nn.Linear(8, 2), "embed": nn.Embedding(5, 4)})
    names = [w.name for w in find_prunable(model, exclude=["head.*"])]
    assert names == ["rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.weight_ih_l1", "rnn.weight_hh_l1"]
    gate = find_prunable(model)[0]
    assert gate.gemm_shape == (4, 32)
