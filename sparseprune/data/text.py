"""Shared machinery of sentence (pair) classification data: tokenize once, cache, pad per batch.

Subclasses only say where raw text comes from (`read_splits`) and what identifies it (`source_id`); the
base class tokenizes with the model's own tokenizer, caches the ids under `data_dir/cache`, and pads each
batch to its longest member so short tweets do not pay for the longest sequence in the corpus.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from sparseprune.data.split_loaders import SplitLoadersDataModule
from sparseprune.errors import UserError
from sparseprune.pretrained import load_tokenizer

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


@dataclass
class TextSplit:
    """Raw examples of one split: first (and optional second) sentences with integer labels."""

    text_a: list[str]
    text_b: list[str] | None
    labels: list[int]


class EncodedDataset(Dataset):
    """Token ids of one split, kept as unpadded lists."""

    def __init__(self, encoded: dict[str, list[Any]]) -> None:
        self.encoded = encoded

    def __len__(self) -> int:
        return len(self.encoded["labels"])

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {key: values[index] for key, values in self.encoded.items()}


class TextClassificationDataModule(SplitLoadersDataModule):
    """Base of the text classification datasets; `model_kwargs` tells the classifier what it needs."""

    label_names: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ("acc",)

    def __init__(
        self,
        tokenizer: str,
        data_dir: str,
        max_length: int = 128,
        batch_size: int = 32,
        num_workers: int = 0,
        train_subset: int | None = None,
        val_subset: int | None = None,
    ) -> None:
        super().__init__()
        if max_length < 8:
            raise UserError(f"data.max_length must be at least 8 tokens, got {max_length}")
        self.tokenizer_name = tokenizer
        self.data_dir = Path(data_dir)
        self.requested_max_length = max_length
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.train_subset = train_subset
        self.val_subset = val_subset
        self.datasets: dict[str, EncodedDataset] = {}

    def source_id(self) -> dict[str, Any]:
        """What identifies the raw data and its split (part of the cache key)."""
        raise NotImplementedError

    def read_splits(self) -> dict[str, TextSplit]:
        """Raw train / val / test examples."""
        raise NotImplementedError

    @cached_property
    def tokenizer(self) -> Any:
        return load_tokenizer(self.tokenizer_name)

    @cached_property
    def max_length(self) -> int:
        """The requested length, clamped to what the model's position embeddings allow."""
        limit = int(getattr(self.tokenizer, "model_max_length", self.requested_max_length))
        if self.requested_max_length > limit:
            log.warning(
                "data.max_length=%d exceeds the tokenizer's %d; using %d", self.requested_max_length, limit, limit
            )
            return limit
        return self.requested_max_length

    def model_kwargs(self) -> dict[str, Any]:
        return {
            "num_labels": len(self.label_names),
            "metrics": list(self.metrics),
            "tokenizer_vocab_size": len(self.tokenizer),
            "max_length": self.max_length,
        }

    def cache_path(self) -> Path:
        tokenizer = self.tokenizer
        key = {
            "source": self.source_id(),
            "tokenizer": type(tokenizer).__name__,
            "vocab": hashlib.sha1(json.dumps(sorted(tokenizer.get_vocab().items())).encode()).hexdigest(),
            "max_length": self.max_length,
        }
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return self.data_dir / "cache" / f"{type(self).__name__.lower()}-{digest}.pt"

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        path = self.cache_path()
        if path.is_file():
            encoded = torch.load(path, weights_only=True)
        else:
            encoded = {name: self.encode(split, name) for name, split in self.read_splits().items()}
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            torch.save(encoded, tmp)
            tmp.replace(path)
            log.info("tokenized %s and cached it at %s", type(self).__name__, path)
        subsets = {"train": self.train_subset, "val": self.val_subset, "test": self.val_subset}
        for name in SPLITS:
            limit = subsets[name]
            split = encoded[name] if limit is None else {k: v[:limit] for k, v in encoded[name].items()}
            self.datasets[name] = EncodedDataset(split)

    def encode(self, split: TextSplit, name: str) -> dict[str, list[Any]]:
        """Token ids of a split; sequences over max_length are truncated with one warning per split."""
        full = self.tokenizer(split.text_a, split.text_b, truncation=False, verbose=False)
        too_long = [i for i, ids in enumerate(full["input_ids"]) if len(ids) > self.max_length]
        if too_long:
            log.warning(
                "%s: %d of %d examples exceed max_length=%d tokens and are truncated",
                name,
                len(too_long),
                len(split.labels),
                self.max_length,
            )
            cut = self.tokenizer(
                [split.text_a[i] for i in too_long],
                None if split.text_b is None else [split.text_b[i] for i in too_long],
                truncation=True,
                max_length=self.max_length,
            )
            for j, i in enumerate(too_long):
                for key in full:
                    full[key][i] = cut[key][j]
        encoded = {"input_ids": list(full["input_ids"]), "labels": list(split.labels)}
        if "token_type_ids" in full:
            encoded["token_type_ids"] = list(full["token_type_ids"])
        return encoded

    def collate(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad to the longest sequence of the batch; input_ids come first (their length is the batch size)."""
        width = max(len(e["input_ids"]) for e in examples)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.full((len(examples), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
        token_type_ids = torch.zeros((len(examples), width), dtype=torch.long)
        for row, example in enumerate(examples):
            n = len(example["input_ids"])
            input_ids[row, :n] = torch.tensor(example["input_ids"])
            attention_mask[row, :n] = 1
            if "token_type_ids" in example:
                token_type_ids[row, :n] = torch.tensor(example["token_type_ids"])
        labels = torch.tensor([e["labels"] for e in examples], dtype=torch.long)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "labels": labels,
        }
