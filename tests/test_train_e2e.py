"""train.py end to end on CPU through the real Hydra configs: every pattern, fast_dev_run and a tiny real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG, compose_config
from safetensors.torch import load_file

from sparseprune.app.training import train

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("pattern", sorted(PATTERN_OVERRIDES))
def test_fast_dev_run_every_pattern(pattern: str, tmp_path: Path) -> None:
    overrides = TINY_VGG + PATTERN_OVERRIDES[pattern] + ["trainer=debug", "importance=magnitude"]
    cfg = compose_config("train", overrides, tmp_path)
    summary = train(cfg)
    final = summary["stages"][-1]
    assert final["stage"] == 2 and final["sparsity"] == pytest.approx(0.75, abs=0.02)


def test_taylor_staged_run_writes_checkpoint_and_summary(tmp_path: Path) -> None:
    overrides = (
        TINY_VGG
        + PATTERN_OVERRIDES["tw"]
        + [
            "importance.num_batches=2",
            "schedule.dense_epochs=1",
            "schedule.stages=2",
            "trainer.limit_train_batches=3",
            "trainer.limit_val_batches=2",
        ]
    )
    summary = train(compose_config("train", overrides, tmp_path))
    assert [row["stage"] for row in summary["stages"]] == [-1, 0, 1]
    assert summary["stages"][-1]["sparsity"] == pytest.approx(0.75, abs=0.01)
    assert Path(summary["checkpoint"]).is_file()
    assert json.loads((tmp_path / "summary.json").read_text())["target"] == 0.75
    assert (tmp_path / "plots" / "layer_sparsity_stage1.png").is_file()
    (layer, mask), *others = load_file(str(tmp_path / "mask.safetensors")).items()
    assert not others and mask.dtype == torch.uint8 and layer in summary["layer_sparsity"]
    assert 1 - float(mask.float().mean()) == pytest.approx(summary["layer_sparsity"][layer])


def test_wandb_offline_run_holds_config_metrics_and_chart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    overrides = (
        [o for o in TINY_VGG if o != "logger=none"]
        + PATTERN_OVERRIDES["tw"]
        + [
            "logger=wandb",
            "importance=magnitude",
            "schedule.dense_epochs=0",
            "schedule.stages=1",
            "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1",
        ]
    )
    train(compose_config("train", overrides, tmp_path))
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    charts = list((runs[0] / "files" / "media" / "images" / "sparsity").glob("per_layer_*.png"))
    assert len(charts) == 1
    assert list(runs[0].glob("*.wandb"))


def test_multirun_sweeps_every_combination(tmp_path: Path) -> None:
    """`train.py -m` as the README runs it: Hydra makes the sweep dir before any job, so it must resolve then."""
    tiny = [o for o in TINY_VGG if o != "test=false"] + ["trainer=debug", "importance=magnitude"]
    command = [sys.executable, str(ROOT / "train.py"), "-m", "pattern=ew,vw", "schedule.target=0.5,0.75", *tiny]
    env = os.environ | {"SPARSEPRUNE_DATA_DIR": str(tmp_path / "data")}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (sweep_dir,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    summaries = [json.loads((sweep_dir / str(job) / "summary.json").read_text()) for job in range(4)]
    assert [(s["pattern"]["name"], s["target"]) for s in summaries] == [
        ("ew", 0.5),
        ("ew", 0.75),
        ("vw", 0.5),
        ("vw", 0.75),
    ]
