"""Greedy and beam-search decoding for `Seq2Seq`, batched over sentences (and beams)."""

from __future__ import annotations

import torch

from sparseprune.models.seq2seq import Seq2Seq


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, bos_id: int, eos_id: int, max_length: int) -> torch.Tensor:
    """Token ids (B, <= max_length), the arg-max at every step; rows end with eos then pad (0)."""
    state, keys, memory, mask = model.start(src)
    tokens = torch.full((src.shape[0],), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros_like(tokens, dtype=torch.bool)
    output = []
    for _ in range(max_length):
        state = model.decoder.step(model.decoder.embedding(tokens), state, keys, memory, mask)
        tokens = model.logits(state.attentional).argmax(dim=-1).masked_fill(finished, 0)
        output.append(tokens)
        finished |= tokens == eos_id
        if finished.all():
            break
    return torch.stack(output, dim=1)


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_length: int,
    beam_size: int = 5,
    length_penalty: float = 1.0,
) -> torch.Tensor:
    """Best hypothesis per sentence (B, <= max_length) by log-probability / length ** length_penalty.

    Beams live as B * beam_size rows; a finished beam only extends with a free pad step, so its score is
    frozen while the others continue.
    """
    batch, beams = src.shape[0], beam_size
    state, keys, memory, mask = model.start(src)
    rows = torch.arange(batch, device=src.device).repeat_interleave(beams)
    state, keys, memory, mask = state.select(rows), keys[rows], memory[rows], mask[rows]
    tokens = torch.full((batch * beams,), bos_id, dtype=torch.long, device=src.device)
    scores = torch.full((batch, beams), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # all beams start identical: only one may expand at first
    scores = scores.view(-1)
    lengths = torch.zeros(batch * beams, device=src.device)
    finished = torch.zeros(batch * beams, dtype=torch.bool, device=src.device)
    history = torch.zeros((batch * beams, 0), dtype=torch.long, device=src.device)
    for _ in range(max_length):
        state = model.decoder.step(model.decoder.embedding(tokens), state, keys, memory, mask)
        log_probs = torch.log_softmax(model.logits(state.attentional).float(), dim=-1)
        frozen = torch.full_like(log_probs, float("-inf"))
        frozen[:, 0] = 0.0
        log_probs = torch.where(finished.unsqueeze(-1), frozen, log_probs)
        vocab = log_probs.shape[-1]
        candidates = (scores.unsqueeze(-1) + log_probs).view(batch, beams * vocab)
        scores, flat = candidates.topk(beams, dim=-1)
        parent = (flat // vocab + torch.arange(batch, device=src.device).unsqueeze(-1) * beams).view(-1)
        tokens, scores = (flat % vocab).view(-1), scores.view(-1)
        state, history = state.select(parent), torch.cat([history[parent], tokens.unsqueeze(-1)], dim=1)
        lengths = lengths[parent] + (~finished[parent]).float()
        finished = finished[parent] | (tokens == eos_id)
        if finished.all():
            break
    normalized = (scores / lengths.clamp(min=1) ** length_penalty).view(batch, beams)
    best = normalized.argmax(dim=-1) + torch.arange(batch, device=src.device) * beams
    return history[best]
