"""Task metrics in one place: GLUE-style classification scores and corpus BLEU, all reducible across ranks."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from sacrebleu.metrics import BLEU
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    BinaryF1Score,
    MulticlassAccuracy,
    MulticlassF1Score,
    MulticlassMatthewsCorrCoef,
)

from sparseprune.errors import UserError

CLASSIFICATION_METRICS = ("acc", "f1", "mcc")


def classification_metrics(names: Sequence[str], num_classes: int, prefix: str) -> MetricCollection:
    """Accuracy, F1 (of class 1 for binary tasks as GLUE reports it, macro otherwise) and Matthews correlation."""
    unknown = sorted(set(names) - set(CLASSIFICATION_METRICS))
    if unknown:
        raise UserError(f"unknown metric(s) {unknown}; choose from {list(CLASSIFICATION_METRICS)}")
    factories = {
        "acc": lambda: MulticlassAccuracy(num_classes=num_classes, average="micro"),
        "f1": lambda: (
            BinaryF1Score() if num_classes == 2 else MulticlassF1Score(num_classes=num_classes, average="macro")
        ),
        "mcc": lambda: MulticlassMatthewsCorrCoef(num_classes=num_classes),
    }
    return MetricCollection({name: factories[name]() for name in names}, prefix=prefix)


class CorpusBleu(Metric):
    """Corpus BLEU exactly as sacrebleu computes it, from n-gram statistics summed over batches and ranks.

    Corpus BLEU is not a mean of batch scores, but its sufficient statistics (matched and total n-grams,
    hypothesis and reference lengths) add up, so they are the metric's state.
    """

    full_state_update = False

    def __init__(self, tokenize: str = "13a", lowercase: bool = False) -> None:
        super().__init__()
        # force: the corpora come tokenized (IWSLT as shipped, the Bible by our tokenizer), as in the TF NMT
        # tutorial's BLEU; sacrebleu's detokenization warning on every batch would only bury the logs.
        self.bleu = BLEU(tokenize=tokenize, lowercase=lowercase, force=True)
        order = self.bleu.max_ngram_order
        self.add_state("correct", torch.zeros(order, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(order, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("sys_len", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("ref_len", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, hypotheses: Sequence[str], references: Sequence[str]) -> None:
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
        stats = self.bleu.corpus_score(list(hypotheses), [list(references)])
        self.correct += torch.tensor(stats.counts, dtype=torch.float64, device=self.correct.device)
        self.total += torch.tensor(stats.totals, dtype=torch.float64, device=self.total.device)
        self.sys_len += stats.sys_len
        self.ref_len += stats.ref_len

    def compute(self) -> torch.Tensor:
        score = BLEU.compute_bleu(
            correct=[int(c) for c in self.correct.tolist()],
            total=[int(t) for t in self.total.tolist()],
            sys_len=int(self.sys_len),
            ref_len=int(self.ref_len),
            smooth_method=self.bleu.smooth_method,
            smooth_value=self.bleu.smooth_value,
            effective_order=self.bleu.effective_order,
            max_ngram_order=self.bleu.max_ngram_order,
        )
        return torch.tensor(score.score, dtype=torch.float32)
