"""A tiny random BERT checkpoint with its own word-level vocabulary, saved like a real one (fast to load)."""

from __future__ import annotations

from pathlib import Path

WORDS = [
    "the",
    "a",
    "i",
    "it",
    "is",
    "not",
    "very",
    "cat",
    "dog",
    "day",
    "movie",
    "car",
    "good",
    "bad",
    "great",
    "awful",
    "love",
    "hate",
    "ok",
    "fine",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_tiny_bert(directory: Path, max_positions: int = 32, extra_tokenizer_words: int = 0) -> Path:
    """Save a 2-layer, hidden-32 BERT and a matching tokenizer; `extra_tokenizer_words` makes them disagree."""
    from transformers import BertConfig, BertModel, BertTokenizer

    words = SPECIALS + WORDS
    tokenizer_words = words + [f"extra{i}" for i in range(extra_tokenizer_words)]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(tokenizer_words)}, model_max_length=max_positions)
    tokenizer.save_pretrained(directory)
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_positions,
    )
    BertModel(config).save_pretrained(directory)
    return directory
