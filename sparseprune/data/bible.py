"""The embedded translation corpus: two Bibles from Debian's SWORD packages, aligned by verse key.

`sword-text-web` (World English Bible) and `sword-text-sparv` (Reina-Valera 1909, Spanish) are exported
with `mod2imp` (package `libsword-utils`), stripped of their OSIS markup and footnotes, paired by verse key
(about 31k verses present in both), kept when both sides have at most `max_words` words, tokenized
(words and punctuation apart) and split with a fixed seed. The result is written once under
`data_dir/bible/<src>-<tgt>-<settings hash>/` in the IWSLT layout, so `ParallelTextDataModule` reads it like IWSLT'15.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from sparseprune.data.parallel import ParallelTextDataModule
from sparseprune.data.vocab import Vocab
from sparseprune.errors import UserError

log = logging.getLogger(__name__)

INSTALL_HINT = "apt-get install sword-text-web sword-text-sparv libsword-utils"
NOTE = re.compile(r"<note\b.*?</note>", re.DOTALL)
TAG = re.compile(r"<[^>]*>")
TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
VERSE_KEY = re.compile(r"^\$\$\$(.+ \d+:\d+)$")


def export_module(module: str, cache: Path) -> Path:
    """The module's raw text as mod2imp writes it (cached: the export takes seconds per Bible)."""
    path = cache / f"{module}.imp"
    if path.is_file():
        return path
    if shutil.which("mod2imp") is None:
        raise UserError(f"mod2imp not found; the Bible corpus needs: {INSTALL_HINT}")
    result = subprocess.run(["mod2imp", module], capture_output=True, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise UserError(f"SWORD module {module} not installed (mod2imp found nothing); {INSTALL_HINT}")
    cache.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_bytes(result.stdout)
    path.with_suffix(".tmp").replace(path)
    return path


def clean_verse(markup: str) -> str:
    """Plain verse text: footnotes dropped, tags removed, entities decoded, spaces normalized."""
    text = html.unescape(TAG.sub("", NOTE.sub(" ", markup)))
    return " ".join(text.split())


def read_verses(path: Path) -> dict[str, str]:
    """Verse key ("Genesis 1:1") -> plain text; headings (chapter or verse 0) and empty verses are skipped."""
    verses: dict[str, str] = {}
    key, lines = None, []
    for line in [*path.read_text(encoding="utf-8", errors="replace").splitlines(), "$$$end"]:
        if line.startswith("$$$"):
            if key is not None:
                text = clean_verse(" ".join(lines))
                if text:
                    verses[key] = text
            match = VERSE_KEY.match(line)
            key = match.group(1) if match and not re.search(r"(^| )0:|:0$", match.group(1)) else None
            lines = []
        else:
            lines.append(line)
    return verses


def tokenize(text: str) -> list[str]:
    """Words (with inner apostrophes) and punctuation marks as separate tokens."""
    return TOKEN.findall(text)


def build_bible_corpus(out_dir: Path, settings: dict[str, Any]) -> None:
    """Write train/dev/test.<lang> and vocab.<lang> under out_dir, unless built with the same settings."""
    meta = out_dir / "meta.json"
    if meta.is_file() and json.loads(meta.read_text()) == settings:
        return
    src = read_verses(export_module(settings["src_module"], out_dir.parent / "raw"))
    tgt = read_verses(export_module(settings["tgt_module"], out_dir.parent / "raw"))
    keys = [k for k in src if k in tgt]
    pairs = [
        (tokenize(src[k]), tokenize(tgt[k]))
        for k in keys
        if len(src[k].split()) <= settings["max_words"] and len(tgt[k].split()) <= settings["max_words"]
    ]
    if len(pairs) < settings["val_size"] + settings["test_size"] + 1:
        raise UserError(
            f"only {len(pairs)} aligned verses; are {settings['src_module']} and "
            f"{settings['tgt_module']} complete Bibles?"
        )
    random.Random(settings["split_seed"]).shuffle(pairs)
    n_val, n_test = settings["val_size"], settings["test_size"]
    splits = {"dev": pairs[:n_val], "test": pairs[n_val : n_val + n_test], "train": pairs[n_val + n_test :]}
    out_dir.mkdir(parents=True, exist_ok=True)
    for side, lang in enumerate((settings["src_lang"], settings["tgt_lang"])):
        for name, rows in splits.items():
            (out_dir / f"{name}.{lang}").write_text("".join(" ".join(r[side]) + "\n" for r in rows), encoding="utf-8")
        vocab = Vocab.build((r[side] for r in splits["train"]), settings["vocab_size"], settings["min_count"])
        vocab.save(out_dir / f"vocab.{lang}")
    meta.write_text(json.dumps(settings, indent=2))
    log.info("Bible corpus: %d verse pairs of %d shared keys written to %s", len(pairs), len(keys), out_dir)


class BibleDataModule(ParallelTextDataModule):
    """English-Spanish verse pairs from the SWORD Bibles, built on first use and cached under data_dir."""

    missing_hint = f"Delete the folder to rebuild it; the export needs: {INSTALL_HINT}"

    def __init__(
        self,
        data_dir: str,
        src_module: str = "engWEB2015eb",
        tgt_module: str = "spaRV1909eb",
        src_lang: str = "en",
        tgt_lang: str = "es",
        max_words: int = 30,
        val_size: int = 1000,
        test_size: int = 1000,
        split_seed: int = 0,
        vocab_size: int = 16000,
        min_count: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            data_dir=data_dir,
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            train_prefix="train",
            val_prefix="dev",
            test_prefix="test",
            vocab_prefix="vocab",
            **kwargs,
        )
        self.settings = {
            "src_module": src_module,
            "tgt_module": tgt_module,
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
            "max_words": max_words,
            "val_size": val_size,
            "test_size": test_size,
            "split_seed": split_seed,
            "vocab_size": vocab_size,
            "min_count": min_count,
        }

    def corpus_dir(self) -> Path:
        """One folder per build settings, so switching presets never rebuilds over another's corpus."""
        digest = hashlib.sha1(json.dumps(self.settings, sort_keys=True).encode()).hexdigest()[:8]
        return self.data_dir / "bible" / f"{self.settings['src_module']}-{self.settings['tgt_module']}-{digest}"

    def prepare_data(self) -> None:
        build_bible_corpus(self.corpus_dir(), self.settings)

    def vocabs(self) -> tuple[Vocab, Vocab]:
        self.prepare_data()
        return super().vocabs()
