"""LSTM neural machine translation: the TW paper's recurrent workload, scored with corpus BLEU.

The network (`sparseprune.models.seq2seq`) computes every LSTM gate through `nn.Linear` modules named
`...layers.<i>.ih` / `...layers.<i>.hh` (K = input or hidden size, N = 4H); those are what is pruned by
default. Attention and the vocabulary projection stay dense. Validation decodes the sentences and
reports `val/bleu` (sacrebleu) beside the teacher-forced `val/loss` and `val/ppl`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from sparseprune.data.vocab import Vocab
from sparseprune.errors import UserError
from sparseprune.metrics import CorpusBleu
from sparseprune.models.base import PrunableTask
from sparseprune.models.decoding import GreedySearch, run_eagerly, search_for
from sparseprune.models.seq2seq import Seq2Seq

DENSE_BY_DEFAULT = ("*embedding*", "*attention*", "*generator*")


class TranslationTask(PrunableTask):
    """Attention encoder-decoder trained with cross entropy; `val/bleu` is the stage metric."""

    monitor = "val/bleu"
    default_prune_exclude = DENSE_BY_DEFAULT

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        tgt_vocab_path: str,
        hidden_size: int = 512,
        embedding_size: int | None = None,
        num_layers: int = 2,
        bidirectional: bool = False,
        dropout: float = 0.2,
        label_smoothing: float = 0.0,
        val_beam_size: int = 1,
        test_beam_size: int = 10,
        length_penalty: float = 1.0,
        max_decode_length: int = 80,
        bleu_tokenize: str = "13a",
        optimizer: Any = None,
        scheduler: Any = None,
        prune_exclude: Sequence[str] | None = None,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, prune_exclude=prune_exclude)
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        if hidden_size < 1 or num_layers < 1:
            raise UserError(f"hidden_size and num_layers must be positive, got {hidden_size}, {num_layers}")
        if val_beam_size < 1 or test_beam_size < 1:
            raise UserError("val_beam_size and test_beam_size must be at least 1 (1 = greedy)")
        if not 0.0 <= label_smoothing < 1.0:
            raise UserError(f"label_smoothing must lie in [0, 1), got {label_smoothing}")
        self.net = Seq2Seq(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            embedding_size=embedding_size or hidden_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
        )
        self.tgt_vocab_path = Path(tgt_vocab_path)
        self.val_bleu = CorpusBleu(tokenize=bleu_tokenize)
        self.test_bleu = CorpusBleu(tokenize=bleu_tokenize)

    @cached_property
    def tgt_vocab(self) -> Vocab:
        """Read only when decoding to text, so a checkpoint loads (and exports) without the corpus."""
        vocab = Vocab.from_file(self.tgt_vocab_path)
        if len(vocab) != self.hparams.tgt_vocab_size:
            raise UserError(f"{self.tgt_vocab_path} has {len(vocab)} tokens, the model {self.hparams.tgt_vocab_size}")
        return vocab

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.net(src, tgt_in)

    def predict_batch(self, batch: dict[str, Any]) -> torch.Tensor:
        """Teacher-forced logits: every encoder and decoder gate GEMM runs once per step, so export checks
        the packed recurrence against the masked dense one on exactly the same inputs."""
        return self(batch["src"], batch["tgt_in"])

    def _loss(self, logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
        return F.cross_entropy(
            logits.flatten(0, 1), target.flatten(), ignore_index=Vocab.pad_id, label_smoothing=smoothing
        )

    def compute_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        return self._loss(self(batch["src"], batch["tgt_in"]), batch["tgt_out"], self.hparams.label_smoothing)

    def search(self, src: torch.Tensor, beam_size: int = 1) -> GreedySearch:
        """The decoding of src (greedy when beam_size is 1) as a search that steps in place (models.decoding)."""
        max_length = min(self.hparams.max_decode_length, 2 * src.shape[1] + 10)
        return search_for(self.net, src, Vocab.bos_id, Vocab.eos_id, max_length, beam_size, self.hparams.length_penalty)

    def texts(self, ids: torch.Tensor) -> list[str]:
        """Space-joined target words per row of token ids."""
        return [" ".join(self.tgt_vocab.decode(row)) for row in ids.tolist()]

    @torch.no_grad()
    def translate(self, src: torch.Tensor, beam_size: int = 1) -> list[str]:
        """Space-joined target words per source row (greedy when beam_size is 1)."""
        return self.texts(run_eagerly(self.search(src, beam_size)))

    def _evaluate(self, batch: dict[str, Any], split: str, bleu: CorpusBleu, beam_size: int) -> None:
        batch_size = self.batch_size_of(batch)
        loss = self._loss(self(batch["src"], batch["tgt_in"]), batch["tgt_out"], 0.0)
        bleu.update(self.translate(batch["src"], beam_size), batch["references"])
        self.log(f"{split}/loss", loss, prog_bar=split == "val", batch_size=batch_size, sync_dist=True)
        self.log(f"{split}/ppl", loss.exp(), batch_size=batch_size, sync_dist=True)
        self.log(f"{split}/bleu", bleu, prog_bar=True, batch_size=batch_size)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_bleu, self.hparams.val_beam_size)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_bleu, self.hparams.test_beam_size)
