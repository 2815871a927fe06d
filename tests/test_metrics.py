"""Metrics equal hand-computed values on fixed predictions; BLEU equals sacrebleu's."""

from __future__ import annotations

import pytest
import sacrebleu
import torch

from sparseprune.errors import UserError
from sparseprune.metrics import CorpusBleu, classification_metrics

# Binary: TP = 3, FP = 1, FN = 1, TN = 3.
BINARY_PREDS = torch.tensor([1, 0, 1, 1, 0, 1, 0, 0])
BINARY_TARGET = torch.tensor([1, 0, 0, 1, 0, 1, 1, 0])


def test_binary_accuracy_f1_and_matthews_by_hand() -> None:
    metrics = classification_metrics(["acc", "f1", "mcc"], num_classes=2, prefix="val/")
    metrics.update(BINARY_PREDS[:5], BINARY_TARGET[:5])
    metrics.update(BINARY_PREDS[5:], BINARY_TARGET[5:])
    result = {k: v.item() for k, v in metrics.compute().items()}
    tp, fp, fn, tn = 3, 1, 1, 3
    assert result["val/acc"] == pytest.approx((tp + tn) / 8)
    assert result["val/f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    mcc = (tp * tn - fp * fn) / ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    assert result["val/mcc"] == pytest.approx(mcc) == pytest.approx(0.5)


def test_three_class_macro_f1_by_hand() -> None:
    metrics = classification_metrics(["acc", "f1"], num_classes=3, prefix="test/")
    metrics.update(torch.tensor([0, 1, 2, 2, 1, 0]), torch.tensor([0, 1, 1, 2, 2, 0]))
    result = {k: v.item() for k, v in metrics.compute().items()}
    assert result["test/acc"] == pytest.approx(4 / 6)
    assert result["test/f1"] == pytest.approx((1.0 + 0.5 + 0.5) / 3)  # per class: 2/2, 1 of 2, 1 of 2


def test_unknown_metric_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown metric"):
        classification_metrics(["acc", "auc"], num_classes=2, prefix="val/")


HYPOTHESES = ["the cat sat on the mat .", "there is a dog in the garden", "hello", ""]
REFERENCES = ["the cat is on the mat .", "a dog is in the garden", "hello world", "nothing here"]


@pytest.mark.parametrize("tokenize", ["13a", "none"])
def test_bleu_equals_sacrebleu_across_batches(tokenize: str) -> None:
    bleu = CorpusBleu(tokenize=tokenize)
    bleu.update(HYPOTHESES[:2], REFERENCES[:2])
    bleu.update(HYPOTHESES[2:], REFERENCES[2:])
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize=tokenize).score
    assert bleu.compute().item() == pytest.approx(expected, abs=1e-4)
    assert 0 < expected < 100


def test_bleu_of_exact_copies_is_100() -> None:
    bleu = CorpusBleu()
    bleu.update(REFERENCES, REFERENCES)
    assert bleu.compute().item() == pytest.approx(100.0)
