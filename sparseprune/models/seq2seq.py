"""Attention LSTM encoder-decoder in the style of the TF NMT tutorial (Luong et al., 2015).

Every LSTM layer computes its gates with two plain `nn.Linear` GEMMs, `ih` (K = input size) and `hh`
(K = hidden size), both with N = 4H, instead of a fused `nn.LSTM`. Pruning therefore finds the gate
matrices as ordinary Linear weights, and export swaps each `ih` / `hh` for a packed sparse linear
(x @ B + bias) without touching the recurrence. The encoder runs `ih` once over the whole sequence (one
large GEMM) and only `hh` per step; the decoder feeds the previous attentional vector back into its
first layer (input feeding), so it runs both per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sparseprune.errors import UserError


def lstm_cell(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, c) from pre-activation gates laid out [input, forget, candidate, output] along the last dim."""
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


State = tuple[torch.Tensor, torch.Tensor]


class LSTMLayer(nn.Module):
    """One LSTM layer; its gate GEMMs are the replaceable modules `ih` and `hh` (always called on 2-D input)."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size, bias=False)

    def step(self, input_gates: torch.Tensor, state: State) -> State:
        """One time step from precomputed `ih(x_t)`."""
        h, c = state
        return lstm_cell(input_gates + self.hh(h), c)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, reverse: bool = False) -> tuple[torch.Tensor, State]:
        """Run over x (T, B, in); padded steps (mask False) leave the state unchanged, so the final state is
        each sequence's own last (or, reversed, first) real step."""
        steps, batch, _ = x.shape
        input_gates = self.ih(x.reshape(steps * batch, -1)).view(steps, batch, -1)
        h = x.new_zeros(batch, self.hidden_size)
        state = (h, h)
        outputs = [h] * steps
        keep = mask.unsqueeze(-1)
        for t in reversed(range(steps)) if reverse else range(steps):
            new_h, new_c = self.step(input_gates[t], state)
            state = (torch.where(keep[t], new_h, state[0]), torch.where(keep[t], new_c, state[1]))
            outputs[t] = state[0]
        return torch.stack(outputs), state


class Encoder(nn.Module):
    """Embedding + stacked LSTM; with `bidirectional`, num_layers / 2 bidirectional layers (as the tutorial)."""

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool,
        dropout: float,
    ) -> None:
        super().__init__()
        if bidirectional and num_layers % 2:
            raise UserError(f"a bidirectional encoder needs an even num_layers, got {num_layers}")
        directions = 2 if bidirectional else 1
        depth = num_layers // directions
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        self.layers = nn.ModuleList(
            nn.ModuleList(
                LSTMLayer(embedding_size if d == 0 else hidden_size * directions, hidden_size)
                for _ in range(directions)
            )
            for d in range(depth)
        )
        self.dropout = nn.Dropout(dropout)
        self.output_size = hidden_size * directions

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor) -> tuple[torch.Tensor, list[State]]:
        """Memory (B, S, output_size) and one final state per decoder layer ([fw, bw] per depth if bidirectional)."""
        x = self.embedding(src).transpose(0, 1)
        mask = src_mask.transpose(0, 1)
        states: list[State] = []
        for directions in self.layers:
            x = self.dropout(x)
            outputs = []
            for reverse, layer in enumerate(directions):
                out, state = layer(x, mask, reverse=bool(reverse))
                outputs.append(out)
                states.append(state)
            x = torch.cat(outputs, dim=-1)
        return x.transpose(0, 1), states


class LuongAttention(nn.Module):
    """Luong's "general" score h^T W m and the attentional vector tanh(W_c [context; h])."""

    def __init__(self, query_size: int, memory_size: int) -> None:
        super().__init__()
        self.key = nn.Linear(memory_size, query_size, bias=False)
        self.combine = nn.Linear(memory_size + query_size, query_size, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """W m for every memory position, computed once per sentence."""
        batch, steps, size = memory.shape
        return self.key(memory.reshape(batch * steps, size)).view(batch, steps, -1)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor
    ) -> torch.Tensor:
        scores = torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1)
        scores = scores.masked_fill(~memory_mask, torch.finfo(scores.dtype).min)
        context = torch.bmm(torch.softmax(scores, dim=-1).unsqueeze(1), memory).squeeze(1)
        return torch.tanh(self.combine(torch.cat([context, query], dim=-1)))


@dataclass
class DecoderState:
    """Per-layer (h, c) and the last attentional vector; `select` reorders rows for beam search."""

    layers: list[State]
    attentional: torch.Tensor

    def select(self, index: torch.Tensor) -> DecoderState:
        return DecoderState(
            [(h.index_select(0, index), c.index_select(0, index)) for h, c in self.layers],
            self.attentional.index_select(0, index),
        )


class Decoder(nn.Module):
    """Embedding + stacked LSTM with input feeding + Luong attention."""

    def __init__(
        self, vocab_size: int, embedding_size: int, hidden_size: int, num_layers: int, memory_size: int, dropout: float
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        self.layers = nn.ModuleList(
            LSTMLayer(embedding_size + hidden_size if i == 0 else hidden_size, hidden_size) for i in range(num_layers)
        )
        self.attention = LuongAttention(hidden_size, memory_size)
        self.dropout = nn.Dropout(dropout)
        self.hidden_size = hidden_size

    def step(
        self,
        embedded: torch.Tensor,
        state: DecoderState,
        keys: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
    ) -> DecoderState:
        """Consume one embedded target token per row (B, E); the new state's `attentional` feeds the output.

        Callers embed whole sequences at once where they can: a lookup per step would build a dense
        vocabulary-sized embedding gradient at every step.
        """
        x = torch.cat([embedded, state.attentional], dim=-1)
        layers = []
        for layer, layer_state in zip(self.layers, state.layers, strict=True):
            h, c = layer.step(layer.ih(self.dropout(x)), layer_state)
            layers.append((h, c))
            x = h
        return DecoderState(layers, self.attention(self.dropout(x), keys, memory, memory_mask))


class Seq2Seq(nn.Module):
    """Encoder, decoder and the output projection to target-vocabulary logits."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embedding_size: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool,
        dropout: float,
        init_range: float = 0.1,
    ) -> None:
        super().__init__()
        self.encoder = Encoder(src_vocab_size, embedding_size, hidden_size, num_layers, bidirectional, dropout)
        self.decoder = Decoder(
            tgt_vocab_size, embedding_size, hidden_size, num_layers, self.encoder.output_size, dropout
        )
        self.generator = nn.Linear(hidden_size, tgt_vocab_size)
        for param in self.parameters():  # the tutorial's uniform initialisation
            nn.init.uniform_(param, -init_range, init_range)

    def start(self, src: torch.Tensor) -> tuple[DecoderState, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode; return the initial decoder state, attention keys, memory and its mask."""
        src_mask = src != 0
        memory, states = self.encoder(src, src_mask)
        attentional = memory.new_zeros(src.shape[0], self.decoder.hidden_size)
        return DecoderState(states, attentional), self.decoder.attention.keys(memory), memory, src_mask

    def logits(self, attentional: torch.Tensor) -> torch.Tensor:
        shape = attentional.shape
        return self.generator(attentional.reshape(-1, shape[-1])).view(*shape[:-1], -1)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, V) for target inputs tgt_in (B, T)."""
        state, keys, memory, mask = self.start(src)
        embedded = self.decoder.embedding(tgt_in)
        outputs = []
        for t in range(tgt_in.shape[1]):
            state = self.decoder.step(embedded[:, t], state, keys, memory, mask)
            outputs.append(state.attentional)
        return self.logits(torch.stack(outputs, dim=1))
