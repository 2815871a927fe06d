"""train.py and export.py end to end for the text tasks: BERT and LSTM-NMT, fast_dev_run with every pattern,
and tiny staged runs whose checkpoints export to packed layers matching the masked dense model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra_runs import compose_config
from text_fixtures import make_tiny_bert, write_parallel_corpus, write_tweets_csv

from sparseprune.app.training import train
from sparseprune.distill import TEACHER_KEY
from sparseprune.export.pipeline import export

QUIET = [
    "logger=none",
    "~callbacks.progress_bar",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "importance=magnitude",
]
# Every pattern's default G, V and block size fit the tiny models (BERT hidden 128; LSTM N = 4H = 128, K >= 32).
PATTERNS = ["ew", "vw", "bw", "tw", "tew", "nm", "shflbw"]


def tiny_bert_overrides(root: Path) -> list[str]:
    return [
        "model=bert",
        "experiment=bert_demo",
        f"model.pretrained={root / 'bert'}",
        f"data.csv_path={write_tweets_csv(root / 'tweets.csv')}",
        "data.max_length=16",
        "data.batch_size=4",
        "data.val_fraction=0.2",
        "data.test_fraction=0.2",
        f"paths.data_dir={root / 'data'}",
    ]


def tiny_nmt_overrides(root: Path) -> list[str]:
    return [
        "model=lstm_nmt",
        "experiment=lstm_nmt_demo",
        "data=iwslt15",
        f"data.data_dir={write_parallel_corpus(root / 'corpus')}",
        "data.batch_size=3",
        "model.hidden_size=32",
        "model.test_beam_size=2",
    ]


@pytest.fixture(scope="module")
def tiny_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("text-inputs")
    make_tiny_bert(root / "bert")
    return root


@pytest.mark.parametrize("model", ["bert", "lstm_nmt"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_fast_dev_run_every_pattern(model: str, pattern: str, tiny_inputs: Path, tmp_path: Path) -> None:
    overrides = tiny_bert_overrides(tiny_inputs) if model == "bert" else tiny_nmt_overrides(tiny_inputs)
    cfg = compose_config("train", [*overrides, *QUIET, f"pattern={pattern}", "trainer=debug"], tmp_path)
    summary = train(cfg)
    final = summary["stages"][-1]
    assert final["stage"] == 2 and final["sparsity"] == pytest.approx(0.75, abs=0.02)


DISTILL = ["model.distill.weight=0.5", "model.distill.hidden_weight=1.0"]


def test_fast_dev_run_with_distillation(tiny_inputs: Path, tmp_path: Path) -> None:
    overrides = [*tiny_bert_overrides(tiny_inputs), *QUIET, *DISTILL, "pattern=tw", "trainer=debug"]
    summary = train(compose_config("train", overrides, tmp_path))
    assert summary["stages"][-1]["sparsity"] == pytest.approx(0.75, abs=0.02)


STAGED = ["schedule.dense_epochs=1", "schedule.stages=1", "schedule.finetune_epochs=1", "trainer.limit_train_batches=2"]


def test_staged_nmt_run_reports_ppl_and_bleu_saves_gate_masks_and_exports(tiny_inputs: Path, tmp_path: Path) -> None:
    overrides = tiny_nmt_overrides(tiny_inputs) + QUIET + STAGED + ["pattern=tw"]
    summary = train(compose_config("train", overrides, tmp_path))
    assert [row["stage"] for row in summary["stages"]] == [-1, 0]
    assert all(row["val/ppl"] > 1.0 for row in summary["stages"])  # the demo's stage metric: it falls in minutes
    assert "test/bleu" in summary["test"]
    checkpoint = torch.load(summary["checkpoint"], weights_only=False, map_location="cpu")
    pruning = next(state for key, state in checkpoint["callbacks"].items() if "StagedPruning" in key)
    gates = [f"net.encoder.layers.{i}.0.{g}.weight" for i in (0, 1) for g in ("ih", "hh")]
    gates += [f"net.decoder.layers.{i}.{g}.weight" for i in (0, 1) for g in ("ih", "hh")]
    assert sorted(pruning["codes"]) == sorted(gates)
    timing = ["translation.sentences=6", "translation.batch_sizes=[1,4]", "translation.beam_sizes=[1,3]"]
    export_overrides = [f"ckpt={summary['checkpoint']}", "repeats=1", "warmup=0", *timing]
    report = export(compose_config("export", export_overrides, tmp_path))
    assert sorted(report["layers"]) == sorted(gates)
    assert report["check"]["fp32_rel_error"] <= 1e-5
    rows = report["translation"]  # fp32 on the CPU: the sparse twin translates as the masked dense model
    first = [(r["decoding"], r["batch_size"], r["model"]) for r in rows[:2]]
    assert first == [("greedy", 1, "dense"), ("greedy", 1, "sparse")]
    assert len(rows) == 8 and all(r["sentences"] == 6 and r["same_as_dense"] == 1.0 for r in rows)


@pytest.mark.parametrize("pattern", ["tew", "shflbw"])
def test_staged_bert_run_exports_packed_linears(pattern: str, tiny_inputs: Path, tmp_path: Path) -> None:
    overrides = tiny_bert_overrides(tiny_inputs) + QUIET + STAGED + [f"pattern={pattern}"]
    summary = train(compose_config("train", overrides, tmp_path))
    assert [p.name for p in Path(summary["checkpoint"]).parent.iterdir()] == ["last.ckpt"]  # the demo keeps one
    report = export(compose_config("export", [f"ckpt={summary['checkpoint']}", "repeats=1", "warmup=0"], tmp_path))
    assert len(report["layers"]) == 12  # 2 layers x (Q, K, V, attention output, FFN in, FFN out)
    assert report["check"]["fp32_rel_error"] <= 1e-5


def test_staged_distilled_bert_run_saves_its_teacher_and_exports(tiny_inputs: Path, tmp_path: Path) -> None:
    overrides = tiny_bert_overrides(tiny_inputs) + QUIET + STAGED + DISTILL + ["pattern=tw"]
    summary = train(compose_config("train", overrides, tmp_path))
    checkpoint = torch.load(summary["checkpoint"], weights_only=False, map_location="cpu")
    assert set(checkpoint[TEACHER_KEY]) == {name.removeprefix("model.") for name in checkpoint["state_dict"]}
    report = export(compose_config("export", [f"ckpt={summary['checkpoint']}", "repeats=1", "warmup=0"], tmp_path))
    assert len(report["layers"]) == 12 and report["check"]["fp32_rel_error"] <= 1e-5
