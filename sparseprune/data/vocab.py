"""Word vocabularies in the IWSLT'15 file layout: one token per line, `<unk>`, `<s>`, `</s>` first.

Ids are `<pad>`=0, `<unk>`=1, `<s>`=2, `</s>`=3, then the file's other tokens in order, so the data
module and the translation model (which reads the same file to turn ids back into words) always agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from sparseprune.errors import UserError

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)


class Vocab:
    """Token <-> id mapping with the four specials at fixed ids."""

    pad_id, unk_id, bos_id, eos_id = range(4)

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos = list(SPECIALS) + [t for t in dict.fromkeys(tokens) if t not in SPECIALS]
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def from_file(cls, path: Path) -> Vocab:
        if not path.is_file():
            raise UserError(f"vocabulary file not found: {path}")
        tokens = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not tokens:
            raise UserError(f"vocabulary file is empty: {path}")
        return cls(tokens)

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], max_size: int, min_count: int = 1) -> Vocab:
        """The most frequent tokens (ties broken by first appearance), at most `max_size` ids in all."""
        counts = Counter(token for sentence in sentences for token in sentence)
        kept = [t for t, c in counts.most_common() if c >= min_count][: max(0, max_size - len(SPECIALS))]
        return cls(kept)

    def save(self, path: Path) -> None:
        """IWSLT layout: `<unk>`, `<s>`, `</s>` then the words (`<pad>` is implicit)."""
        path.write_text("\n".join(self.itos[1:]) + "\n", encoding="utf-8")

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(token, self.unk_id) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to (not including) the first `</s>`, specials other than `<unk>` dropped."""
        words = []
        for i in ids:
            if i == self.eos_id:
                break
            if i > self.bos_id or i == self.unk_id:
                words.append(self.itos[i])
        return words
