"""Latency-aware pruning through the real Hydra configs: composition of the new keys, a tiny VGG pruned to a
predicted speedup, the predictions in the summary, and the one-line refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG, compose_config
from omegaconf import DictConfig

from sparseprune.app.callbacks import StagedPruning, check_same_settings
from sparseprune.app.training import train
from sparseprune.errors import UserError
from sparseprune.latency.geometry import record_geometry
from sparseprune.latency.table import LatencyTable, LayerTimes, kernel_build
from sparseprune.pruning.gemm_view import find_prunable
from sparseprune.pruning.schedule import Schedule

ROOT = Path(__file__).resolve().parents[1]
LATENCY = ["callbacks.staged_pruning.allocation=latency"]
DEBUG = ["trainer=debug", "importance=magnitude"]


def test_new_keys_compose_and_configure_the_callback(tmp_path: Path) -> None:
    overrides = [*LATENCY, "schedule.target_speedup=2.0", "callbacks.staged_pruning.latency.batch_size=256"]
    cfg = compose_config("train", TINY_VGG + PATTERN_OVERRIDES["tw"] + overrides, tmp_path)
    assert cfg.schedule.target_speedup == 2.0
    assert cfg.callbacks.staged_pruning.latency == {"table": None, "batch_size": 256}
    pruning = instantiate(cfg.callbacks.staged_pruning)
    assert isinstance(pruning, StagedPruning) and pruning.allocation == "latency"
    assert pruning.schedule.stage_speedups == pytest.approx([1 + 19 / 27, 1 + 26 / 27, 2.0])  # cubic, 3 stages
    default = compose_config("train", TINY_VGG, tmp_path)
    assert default.callbacks.staged_pruning.allocation == "importance" and default.schedule.target_speedup is None
    calibration = compose_config("calibrate", ["model=vgg16", "data.batch_size=64"], tmp_path)
    assert calibration.data.batch_size == 64 and list(calibration.sparsities)[-1] == 0.95
    assert calibration.model.width_multiplier == 0.25  # the same demo preset train.py applies


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": "list", "targets": [0.5], "target": 0.5, "target_speedup": 2.0}, "use kind linear or cubic"),
        ({"target_speedup": 1.0}, "schedule.target_speedup must be above 1"),
        ({"target_speedup": "fast"}, "schedule.target_speedup must be a number or null, got 'fast'"),
    ],
)
def test_schedule_refuses_bad_speed_targets(options: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        Schedule(**options)


def test_resume_refuses_another_allocation() -> None:
    saved = {"allocation": {"kind": "latency", "table": None, "batch_size": None}}
    with pytest.raises(UserError, match="callbacks.staged_pruning.allocation='latency' in the checkpoint, None now"):
        check_same_settings(saved, {}, "last.ckpt")
    check_same_settings({}, {}, "old.ckpt")  # written before allocation existed, resumed importance-only


def _tiny_vgg_table(cfg: DictConfig, path: Path) -> list[str]:
    """A table for the tiny VGG's layers: sparse time 1 + dense * density, dense time proportional to the weights,
    except the classifier's hidden layer, whose sparse call always takes twice its dense one; returns its layers."""
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, **datamodule.model_kwargs())
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    prunable = {w.name for w in find_prunable(model, model.prune_exclude)}
    geometry = record_geometry(model, lambda: model.predict_batch(batch))
    layers = {}
    for name in sorted(prunable):
        dense = geometry[name].k * geometry[name].n / 100.0
        sparse = [2 * dense] * 2 if name == LOSING else [1 + dense, 1 + dense / 2, 1 + dense / 10]
        layers[name] = LayerTimes(geometry[name], dense, [0.0, 0.5, 0.9][: len(sparse)], sparse)
    table = LatencyTable("NVIDIA H200", kernel_build(), {"name": "tw", "granularity": 32}, 32, "float16", 0.0, layers)
    path.write_text(table.to_json())
    return sorted(prunable)


LOSING = "net.classifier.0.weight"


def test_tiny_vgg_reaches_its_predicted_speedup(tmp_path: Path) -> None:
    table = tmp_path / "table.json"
    speed = ["schedule.target_speedup=2.0", "schedule.stages=2", f"callbacks.staged_pruning.latency.table={table}"]
    overrides = [*LATENCY, *speed, *DEBUG, "pattern.apriori_top=0", "pattern.apriori_last=0"]  # apriori: time
    cfg = compose_config("train", TINY_VGG + PATTERN_OVERRIDES["tw"] + overrides, tmp_path)
    layers = _tiny_vgg_table(cfg, table)
    summary = train(cfg)
    final = summary["stages"][-1]
    assert final["stage"] == 1  # fast_dev_run: every stage pruned, the last one validated
    assert final["target_speedup"] == 2.0
    assert 2.0 <= final["predicted_speedup"] < 2.02  # the lowest sparsity that reaches it, to one unit
    dense, speedups = final["dense_layers"], final["predicted_layer_speedup"]
    assert LOSING in dense and set(speedups) == set(layers)
    assert all(summary["layer_sparsity"][name] == 0.0 and speedups[name] == 1.0 for name in dense)
    assert all(speedups[name] > 1.0 for name in layers if name not in dense)  # every sparse layer beats dense
    written = json.loads((tmp_path / "summary.json").read_text())["stages"][-1]
    assert written["predicted_speedup"] == final["predicted_speedup"]


def test_importance_run_reports_its_predicted_speedup(tmp_path: Path) -> None:
    summary = train(compose_config("train", TINY_VGG + PATTERN_OVERRIDES["tw"] + DEBUG, tmp_path))
    final = summary["stages"][-1]
    assert final["sparsity"] == pytest.approx(0.75, abs=0.02)
    assert final["predicted_speedup"] > 1.0 and "dense_layers" not in final


def test_out_of_reach_speed_target_is_one_line_before_training(tmp_path: Path) -> None:
    overrides = [*LATENCY, "schedule.target_speedup=9", *DEBUG]
    with pytest.raises(UserError, match=r"^schedule.target_speedup=9 cannot be reached: .* the time left is mostly in"):
        train(compose_config("train", TINY_VGG + PATTERN_OVERRIDES["tw"] + overrides, tmp_path))
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_calibration_on_a_cpu_is_one_error_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "sparseprune.calibrate", "model=vgg16", "data.batch_size=64"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env={"CUDA_VISIBLE_DEVICES": "",
                          "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: calibration times the sparse kernels on a CUDA GPU and none is visible; run it on the GPU the "
        "model will serve on (without a table, training predicts from the analytic model)"
    ]


def test_stage_table_shows_predictions_of_latency_aware_runs_only() -> None:
    from rich.console import Console

    from sparseprune.app.training import _stage_table

    def rendered(rows: list[dict]) -> str:
        console = Console(record=True, width=200)
        console.print(_stage_table(rows, "val/acc"))
        return console.export_text()

    dense = {"stage": -1, "target": 0.0, "sparsity": 0.0, "val/acc": 0.9, "predicted_speedup": 1.0}
    stage = {"stage": 0, "target": 0.5, "sparsity": 0.5, "val/acc": 0.8, "predicted_speedup": 1.31}
    assert "predicted" not in rendered([dense, stage])  # importance-only: the summary keeps it, the table does not
    latency = [dense | {"dense_layers": []}, stage | {"dense_layers": ["a"], "target_speedup": 1.3}]
    text = rendered(latency)
    assert "predicted ×dense" in text and "target ×dense" in text and "1.31" in text and "1.30" in text
