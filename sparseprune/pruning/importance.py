"""Importance scores in the GEMM view: weight magnitude, or first-order Taylor |w * dL/dw| (TW paper, Eq. 3)
averaged over batches. Scores are reduced across ranks so every rank builds identical masks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from typing import Any

import torch

from sparseprune.errors import UserError
from sparseprune.pruning.gemm_view import PrunableWeight, to_gemm

KINDS = ("magnitude", "taylor")


def magnitude_scores(weights: Iterable[PrunableWeight]) -> dict[str, torch.Tensor]:
    return {w.name: to_gemm(w.param.detach()).abs().float().cpu() for w in weights}


def taylor_scores(
    weights: list[PrunableWeight],
    loss_of_batch: Callable[[Any], torch.Tensor],
    batches: Iterable[Any],
    num_batches: int,
) -> dict[str, torch.Tensor]:
    """Mean over `num_batches` batches of |w * dL/dw|, one backward pass per batch.

    Existing gradients are saved and restored so scoring never disturbs an optimizer step in progress.
    """
    if num_batches < 1:
        raise UserError(f"importance.num_batches must be >= 1, got {num_batches}")
    params = [w.param for w in weights]
    saved_grads = [p.grad for p in params]
    totals = [torch.zeros_like(p, dtype=torch.float32) for p in params]
    seen = 0
    for batch in islice(batches, num_batches):
        grads = torch.autograd.grad(loss_of_batch(batch), params, allow_unused=True)
        for total, param, grad in zip(totals, params, grads, strict=True):
            if grad is not None:
                total += (param.detach() * grad).abs().float()
        seen += 1
    for param, grad in zip(params, saved_grads, strict=True):
        param.grad = grad
    if seen == 0:
        raise UserError("Taylor importance needs at least one training batch, the loader gave none")
    return {w.name: to_gemm(total / seen).cpu() for w, total in zip(weights, totals, strict=True)}


def reduce_scores(scores: Mapping[str, torch.Tensor], reduce_mean: Callable[[torch.Tensor], torch.Tensor]) -> dict:
    """Average scores across ranks with one collective over a flat buffer (`reduce_mean` is the strategy's)."""
    names = list(scores)
    flat = torch.cat([scores[n].flatten() for n in names])
    flat = reduce_mean(flat).cpu()
    parts = torch.split(flat, [scores[n].numel() for n in names])
    return {n: part.view_as(scores[n]) for n, part in zip(names, parts, strict=True)}
