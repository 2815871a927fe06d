"""Sparse twins of tiny VGG16, BERT and LSTM-NMT models, as export builds them (every prunable layer pruned by
magnitude to a pattern's structure, packed and swapped), with an input batch: what the compile and export tests trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from bench.model_bench import prune_in_place
from sparseprune.export.feature_major_bert import with_feature_major_encoders
from sparseprune.export.fold import fold_batch_norms
from sparseprune.export.swap import sparsify
from sparseprune.models.lstm_nmt import DENSE_BY_DEFAULT
from sparseprune.models.seq2seq import Seq2Seq
from sparseprune.models.vgg import build_vgg16, vgg16_dense_layers
from sparseprune.pruning.gemm_view import PrunableWeight, find_prunable

# Patterns by the op their layers reach on a CPU: TW and TEW the TW op, N:M (element-wise, 2:4, vector-wise) the N:M
# op's reference. Vectors fit every tiny model's N (VGG16 at width 1/4 has 16 channels).
PATTERNS = {
    "tw": {"name": "tw", "granularity": 32},
    "tew": {"name": "tew", "granularity": 32, "delta": 0.03},
    "nm-2:8": {"name": "nm", "n": 2, "m": 8},
    "nm-2:4": {"name": "nm", "n": 2, "m": 4},
    "nm-2:8-v16": {"name": "nm", "n": 2, "m": 8, "vector": 16},
}


def tiny_vgg() -> tuple[nn.Module, list[PrunableWeight]]:
    """VGG16 at width 1/4 (16-128 channels), batch norms folded."""
    model = build_vgg16(num_classes=10, width_multiplier=0.25).eval()
    fold_batch_norms(model)
    return model, find_prunable(model, vgg16_dense_layers(model))


def tiny_bert() -> tuple[nn.Module, list[PrunableWeight]]:
    """A 2-layer BertForSequenceClassification (hidden 128, FFN 256), its 12 encoder GEMMs pruned."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=30, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=256, max_position_embeddings=32)  # fmt: skip
    model = BertForSequenceClassification(config).eval()
    return model, find_prunable(model, ("*embeddings*", "*pooler*", "*classifier*"))


def tiny_nmt() -> tuple[nn.Module, list[PrunableWeight]]:
    """A 2-layer LSTM translator (hidden 32, gates N = 128), its 8 gate GEMMs pruned."""
    model = Seq2Seq(40, 40, 32, 32, num_layers=2, bidirectional=False, dropout=0.0).eval()
    return model, find_prunable(model, DENSE_BY_DEFAULT)


MODELS: dict[str, Callable[[], tuple[nn.Module, list[PrunableWeight]]]] = {
    "vgg16": tiny_vgg, "bert": tiny_bert, "lstm_nmt": tiny_nmt,
}  # fmt: skip
# A batch for each: two 32 x 32 images; 2 x 8 tokens; 2 x 4 source tokens and 2 x 3 target inputs.
INPUTS: dict[str, Callable[[torch.Generator], tuple[torch.Tensor, ...]]] = {
    "vgg16": lambda gen: (torch.randn(2, 3, 32, 32, generator=gen),),
    "bert": lambda gen: (torch.randint(0, 30, (2, 8), generator=gen),),
    "lstm_nmt": lambda gen: (torch.randint(1, 40, (2, 4), generator=gen), torch.randint(1, 40, (2, 3), generator=gen)),
}


def sparse_twin(model: str, pattern: str, streamed: bool = False) -> nn.Module:
    """The sparse twin of `model` pruned to `pattern` (random weights of seed 0); `streamed` swaps a BERT encoder for
    the feature-major one, as export does where the TW kernels run every sparse layer."""
    torch.manual_seed(0)
    dense, weights = MODELS[model]()
    packed, _ = prune_in_place(weights, PATTERNS[pattern], 0.5)
    twin = sparsify(dense, weights, packed)
    if streamed:
        twin, replaced = with_feature_major_encoders(twin)
        assert replaced, "the encoder was not streamed"
    return twin


def model_inputs(model: str, seed: int) -> tuple[torch.Tensor, ...]:
    """A fresh input batch for `model`."""
    return INPUTS[model](torch.Generator().manual_seed(seed))


def output_tensor(output: Any) -> torch.Tensor:
    """The logits of a transformers output, or the tensor itself."""
    return output.logits if hasattr(output, "logits") else output
