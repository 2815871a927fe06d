"""Greedy and beam-search decoding for `Seq2Seq`, batched over sentences (and beams).

Each search keeps its whole state in tensors of fixed shape, allocated once for a batch of source sentences, and
advances it in place: `restart` encodes the sources, `advance` takes one decoding step. Run eagerly, that is
`greedy_decode` and `beam_search`; replayed from CUDA graphs (`sparseprune.export.translation`), the same steps run
without the host launching each kernel, which would otherwise set the time of a small model's decoding.
"""

from __future__ import annotations

import torch

from sparseprune.models.seq2seq import DecoderState, Seq2Seq


def _copy_state(into: DecoderState, state: DecoderState) -> None:
    for (h, c), (new_h, new_c) in zip(into.layers, state.layers, strict=True):
        h.copy_(new_h)
        c.copy_(new_c)
    into.attentional.copy_(state.attentional)


class GreedySearch:
    """The arg-max at every step; a finished row continues with pad (0) tokens."""

    def __init__(self, model: Seq2Seq, src: torch.Tensor, bos_id: int, eos_id: int, max_length: int) -> None:
        self.model, self.bos_id, self.eos_id, self.max_length = model, bos_id, eos_id, max_length
        self.src = src.clone()  # the static input: `load` copies each batch of sentences into it
        state, self.keys, self.memory, self.mask = self._start()
        self.state = DecoderState([(h.clone(), c.clone()) for h, c in state.layers], state.attentional.clone())
        rows = self.keys.shape[0]
        self.tokens = torch.full((rows,), bos_id, dtype=torch.long, device=src.device)
        self.finished = torch.zeros(rows, dtype=torch.bool, device=src.device)
        self.history = torch.zeros((rows, max_length), dtype=torch.long, device=src.device)
        self.step = torch.zeros(1, dtype=torch.long, device=src.device)

    def load(self, src: torch.Tensor) -> None:
        self.src.copy_(src)

    def _start(self) -> tuple[DecoderState, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The encoded sources: the decoder's first state, attention keys, memory and its mask, one row per row."""
        return self.model.start(self.src)

    def restart(self) -> None:
        """Encode `src` and reset every buffer in place, ready for the first step."""
        state, keys, memory, mask = self._start()
        _copy_state(self.state, state)
        self.keys.copy_(keys)
        self.memory.copy_(memory)
        self.mask.copy_(mask)
        self.tokens.fill_(self.bos_id)
        self.finished.zero_()
        self.history.zero_()
        self.step.zero_()

    def _decode(self) -> torch.Tensor:
        """One decoder step from the current tokens; its logits over the target vocabulary."""
        model = self.model
        state = model.decoder.step(model.decoder.embedding(self.tokens), self.state, self.keys, self.memory, self.mask)
        _copy_state(self.state, state)
        return model.logits(self.state.attentional)

    def advance(self) -> None:
        tokens = self._decode().argmax(dim=-1).masked_fill(self.finished, 0)
        self._record(tokens)
        self.finished |= tokens == self.eos_id

    def _record(self, tokens: torch.Tensor) -> None:
        self.tokens.copy_(tokens)
        self.history.index_copy_(1, self.step, tokens.unsqueeze(1))
        self.step += 1

    def done(self) -> bool:
        """Whether every row has finished (waits for the GPU)."""
        return bool(self.finished.all())

    def result(self, steps: int) -> torch.Tensor:
        """Token ids (B, steps); rows end with eos then pad (0)."""
        return self.history[:, :steps].clone()


class BeamSearch(GreedySearch):
    """Best hypothesis per sentence by log-probability / length ** length_penalty.

    Beams live as B * beam_size rows; a finished beam only extends with a free pad step, so its score is frozen while
    the others continue.
    """

    def __init__(
        self,
        model: Seq2Seq,
        src: torch.Tensor,
        bos_id: int,
        eos_id: int,
        max_length: int,
        beam_size: int = 5,
        length_penalty: float = 1.0,
    ) -> None:
        self.sentences, self.beams, self.length_penalty = src.shape[0], beam_size, length_penalty
        self.beam_rows = torch.arange(src.shape[0], device=src.device).repeat_interleave(beam_size)
        self.first_row = torch.arange(src.shape[0], device=src.device) * beam_size
        super().__init__(model, src, bos_id, eos_id, max_length)
        self.scores = torch.zeros(self.tokens.shape, device=src.device)
        self.lengths = torch.zeros(self.tokens.shape, device=src.device)

    def restart(self) -> None:
        super().restart()
        self.scores.view(self.sentences, self.beams).copy_(self._initial_scores())
        self.lengths.zero_()

    def _initial_scores(self) -> torch.Tensor:
        scores = torch.full((self.sentences, self.beams), float("-inf"), device=self.scores.device)
        scores[:, 0] = 0.0  # all beams start identical: only one may expand at first
        return scores

    def _start(self) -> tuple[DecoderState, torch.Tensor, torch.Tensor, torch.Tensor]:
        state, keys, memory, mask = self.model.start(self.src)
        rows = self.beam_rows  # each sentence's beams
        return state.select(rows), keys[rows], memory[rows], mask[rows]

    def advance(self) -> None:
        log_probs = torch.log_softmax(self._decode().float(), dim=-1)
        frozen = torch.full_like(log_probs, float("-inf"))
        frozen[:, 0] = 0.0
        log_probs = torch.where(self.finished.unsqueeze(-1), frozen, log_probs)
        vocab = log_probs.shape[-1]
        candidates = (self.scores.unsqueeze(-1) + log_probs).view(self.sentences, self.beams * vocab)
        scores, flat = candidates.topk(self.beams, dim=-1)
        parent = (flat // vocab + self.first_row.unsqueeze(-1)).view(-1)
        tokens = (flat % vocab).view(-1)
        _copy_state(self.state, self.state.select(parent))
        self.history.copy_(self.history[parent])
        self.lengths.copy_(self.lengths[parent] + (~self.finished[parent]).float())
        self.finished.copy_(self.finished[parent] | (tokens == self.eos_id))
        self.scores.copy_(scores.view(-1))
        self._record(tokens)

    def result(self, steps: int) -> torch.Tensor:
        normalized = (self.scores / self.lengths.clamp(min=1) ** self.length_penalty).view(self.sentences, self.beams)
        best = normalized.argmax(dim=-1) + self.first_row
        return self.history[best, :steps]


def run_eagerly(search: GreedySearch) -> torch.Tensor:
    """Decode the loaded sentences step by step until every row has finished or the search's max_length steps."""
    search.restart()
    steps = 0
    while steps < search.max_length:
        search.advance()
        steps += 1
        if search.done():
            break
    return search.result(steps)


@torch.no_grad()
def search_for(
    model: Seq2Seq, src: torch.Tensor, bos_id: int, eos_id: int, max_length: int, beam_size: int, length_penalty: float
) -> GreedySearch:
    """The greedy search of src when beam_size is 1, else the beam search."""
    if beam_size == 1:
        return GreedySearch(model, src, bos_id, eos_id, max_length)
    return BeamSearch(model, src, bos_id, eos_id, max_length, beam_size, length_penalty)


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, bos_id: int, eos_id: int, max_length: int) -> torch.Tensor:
    """Token ids (B, <= max_length), the arg-max at every step; rows end with eos then pad (0)."""
    return run_eagerly(GreedySearch(model, src, bos_id, eos_id, max_length))


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
    """Best hypothesis per sentence (B, <= max_length); see BeamSearch."""
    return run_eagerly(BeamSearch(model, src, bos_id, eos_id, max_length, beam_size, length_penalty))
