"""Parallel text for translation, in the IWSLT'15 layout the TF NMT tutorial uses.

A directory holds `<prefix>.<lang>` files, one pre-tokenized sentence per line, aligned line by line,
plus `vocab.<lang>` files. IWSLT'15 en-vi is `train`, `tst2012` (validation), `tst2013` (test); the
embedded Bible corpus (`sparseprune.data.bible`) is written in the same layout.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from sparseprune.data.split_loaders import SplitLoadersDataModule
from sparseprune.data.vocab import Vocab
from sparseprune.errors import UserError

log = logging.getLogger(__name__)


def read_parallel(src_path: Path, tgt_path: Path, hint: str) -> tuple[list[list[str]], list[list[str]]]:
    """Whitespace-tokenized sentence pairs; a missing file or differing line counts is a UserError."""
    for path in (src_path, tgt_path):
        if not path.is_file():
            raise UserError(f"corpus file not found: {path}. {hint}")
    src = src_path.read_text(encoding="utf-8", errors="replace").splitlines()
    tgt = tgt_path.read_text(encoding="utf-8", errors="replace").splitlines()
    if len(src) != len(tgt):
        raise UserError(f"misaligned corpus: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}")
    return [line.split() for line in src], [line.split() for line in tgt]


class PairDataset(Dataset):
    """Source ids, target ids and the target sentence as text (the BLEU reference)."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]], references: list[str]) -> None:
        self.src, self.tgt, self.references = src, tgt, references

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> tuple[list[int], list[int], str]:
        return self.src[index], self.tgt[index], self.references[index]


class ParallelTextDataModule(SplitLoadersDataModule):
    """Sentence pairs from a directory in the IWSLT layout; training pairs are truncated to `max_length` words."""

    missing_hint = "Put the IWSLT'15 files (train / tst2012 / tst2013 .en/.vi and vocab.en/.vi) there."

    def __init__(
        self,
        data_dir: str,
        src_lang: str = "en",
        tgt_lang: str = "vi",
        train_prefix: str = "train",
        val_prefix: str = "tst2012",
        test_prefix: str = "tst2013",
        vocab_prefix: str = "vocab",
        max_length: int = 50,
        batch_size: int = 64,
        num_workers: int = 0,
        train_subset: int | None = None,
        val_subset: int | None = None,
    ) -> None:
        super().__init__()
        if max_length < 1:
            raise UserError(f"data.max_length must be positive, got {max_length}")
        self.data_dir = Path(data_dir)
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.prefixes = {"train": train_prefix, "val": val_prefix, "test": test_prefix}
        self.vocab_prefix = vocab_prefix
        self.max_length = max_length
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.subsets = {"train": train_subset, "val": val_subset, "test": val_subset}
        self.datasets: dict[str, PairDataset] = {}

    def corpus_dir(self) -> Path:
        """Where the `<prefix>.<lang>` files live (builders of embedded corpora make sure they exist)."""
        return self.data_dir

    def vocab_path(self, lang: str) -> Path:
        return self.corpus_dir() / f"{self.vocab_prefix}.{lang}"

    def vocabs(self) -> tuple[Vocab, Vocab]:
        return Vocab.from_file(self.vocab_path(self.src_lang)), Vocab.from_file(self.vocab_path(self.tgt_lang))

    def model_kwargs(self) -> dict[str, Any]:
        src_vocab, tgt_vocab = self.vocabs()
        return {
            "src_vocab_size": len(src_vocab),
            "tgt_vocab_size": len(tgt_vocab),
            "tgt_vocab_path": str(self.vocab_path(self.tgt_lang).resolve()),
        }

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        src_vocab, tgt_vocab = self.vocabs()
        for split, prefix in self.prefixes.items():
            base = self.corpus_dir() / prefix
            src, tgt = read_parallel(
                Path(f"{base}.{self.src_lang}"), Path(f"{base}.{self.tgt_lang}"), self.missing_hint
            )
            limit = self.subsets[split]
            src, tgt = src[:limit], tgt[:limit]
            references = [" ".join(t) for t in tgt]
            if split == "train":
                src, tgt = self._clean(src, tgt)
            self.datasets[split] = PairDataset(
                [src_vocab.encode(s) for s in src], [tgt_vocab.encode(t) for t in tgt], references
            )
        log.info("parallel corpus %s: %s pairs", self.corpus_dir(), {k: len(v) for k, v in self.datasets.items()})

    def _clean(self, src: list[list[str]], tgt: list[list[str]]) -> tuple[list[list[str]], list[list[str]]]:
        """Training pairs with an empty side are dropped; sentences over max_length words are cut (one warning)."""
        kept = [(s, t) for s, t in zip(src, tgt, strict=True) if s and t]
        src, tgt = [s for s, _ in kept], [t for _, t in kept]
        too_long = sum(len(s) > self.max_length or len(t) > self.max_length for s, t in zip(src, tgt, strict=True))
        if too_long:
            log.warning(
                "train: %d of %d pairs exceed max_length=%d words and are truncated",
                too_long,
                len(src),
                self.max_length,
            )
        return [s[: self.max_length] for s in src], [t[: self.max_length] for t in tgt]

    def collate(self, examples: list[tuple[list[int], list[int], str]]) -> dict[str, Any]:
        """src (B, S) and tgt_in / tgt_out (B, T) = <s> y / y </s>, padded with 0; src comes first."""
        batch = len(examples)
        src_width = max(max(len(s) for s, _, _ in examples), 1)
        tgt_width = max(len(t) for _, t, _ in examples) + 1
        src = torch.full((batch, src_width), Vocab.pad_id, dtype=torch.long)
        tgt_in = torch.full((batch, tgt_width), Vocab.pad_id, dtype=torch.long)
        tgt_out = torch.full((batch, tgt_width), Vocab.pad_id, dtype=torch.long)
        for row, (s, t, _) in enumerate(examples):
            src[row, : len(s)] = torch.tensor(s, dtype=torch.long)
            tgt_in[row, : len(t) + 1] = torch.tensor([Vocab.bos_id, *t], dtype=torch.long)
            tgt_out[row, : len(t) + 1] = torch.tensor([*t, Vocab.eos_id], dtype=torch.long)
        return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "references": [r for _, _, r in examples]}
