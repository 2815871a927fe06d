"""The sweep report builds its table and figures from a small results directory made here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from sparseprune.errors import UserError
from sparseprune.pruning.masking import MASK_FILE, save_largest_mask
from sparseprune.pruning.patterns import build_pattern
from sparseprune.report import build_report, main
from sparseprune.timing_notes import busy_machine_warning


def export_report(speedup: float, dense_ms: float = 20.0, device: str = "cpu", spread: float = 1.1) -> dict:
    """What export.py writes, as far as the report reads it."""
    timing = {
        model: {"median_ms": ms, "p10_ms": ms / spread**0.5, "p90_ms": ms * spread**0.5, "cuda_graph": False}
        for model, ms in (("dense", dense_ms), ("sparse", dense_ms / speedup))
    }
    return {"speedup": speedup, "device": device, "timing": timing}


def fabricate(results_dir: Path) -> None:
    scores = {"features.3.weight": torch.rand(64, 32), "classifier.0.weight": torch.rand(32, 16)}
    runs = []
    for index, (name, options, target, acc) in enumerate(
        [
            ("ew", {}, 0.5, 0.93),
            ("ew", {}, 0.75, 0.92),
            ("tw", {"granularity": 8}, 0.5, 0.925),
            ("tw", {"granularity": 8}, 0.75, 0.91),
        ]
    ):
        run_dir = results_dir / f"run{index:03d}"
        (run_dir / "export").mkdir(parents=True)
        codes = build_pattern(name, **options).keep_codes(scores, target)
        checkpoint = run_dir / "last.ckpt"
        torch.save({"state_dict": {}, "callbacks": {"StagedPruning": {"codes": codes}}}, checkpoint)
        (run_dir / "export" / "export_report.json").write_text(json.dumps(export_report(1.0 + target + index / 10)))
        runs.append({
            "run": index, "overrides": [f"pattern={name}"], "pattern": {"name": name, **options}, "target": target,
            "stages": [{"stage": 0, "target": target, "sparsity": target, "val/acc": acc}],
            "layer_sparsity": {layer: target for layer in scores}, "test": {"test/acc": acc - 0.01},
            "checkpoint": str(checkpoint),
        })  # fmt: skip
    (results_dir / "results.json").write_text(json.dumps(runs))


def test_report_table_and_figures(tmp_path: Path) -> None:
    fabricate(tmp_path)
    report = build_report(tmp_path).read_text()
    assert "| 3 | tw(granularity=8) | 0.75 | 0.7500 | 0.9000 | 2.05× |" in report
    assert "| 0 | ew | 0.5 | 0.5000 | 0.9200 | 1.50× |" in report
    for figure in ("accuracy_vs_sparsity", "speedup_vs_accuracy", "layers", "masks"):
        assert (tmp_path / "figures" / f"{figure}.png").stat().st_size > 1000
        assert f"figures/{figure}.png" in report


def test_report_needs_results(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no results.json"):
        build_report(tmp_path)


def test_report_draws_masks_from_mask_files_without_checkpoints(tmp_path: Path) -> None:
    fabricate(tmp_path)
    for run in sorted(tmp_path.glob("run*")):
        codes = torch.load(run / "last.ckpt", weights_only=True)["callbacks"]["StagedPruning"]["codes"]
        save_largest_mask(codes, run / MASK_FILE)
        (run / "last.ckpt").unlink()
    report = build_report(tmp_path).read_text()
    assert "figures/masks.png" in report and (tmp_path / "figures" / "masks.png").stat().st_size > 1000


def test_report_says_where_speedups_were_timed(tmp_path: Path) -> None:
    fabricate(tmp_path)
    report = build_report(tmp_path).read_text()
    assert "Speedups timed on: cpu." in report and "torch reference ops, not the GPU kernels" in report
    assert "warning" not in report


def test_report_warns_of_timings_from_a_loaded_machine(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fabricate(tmp_path)
    loaded = export_report(0.9, dense_ms=1327.0, spread=3.0)
    (tmp_path / "run002" / "export" / "export_report.json").write_text(json.dumps(loaded))
    report = build_report(tmp_path).read_text()
    assert "warning: run 2: timings spread wide (dense p90/p10 3.0, sparse p90/p10 3.0)" in report
    assert "from 20.00 ms (run 0) to 1327.00 ms (run 2)" in report
    assert "timings were taken under varying load" in caplog.text


def test_report_wandb_files_stay_in_the_results_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    results, elsewhere = tmp_path / "results", tmp_path / "cwd"
    results.mkdir()
    elsewhere.mkdir()
    fabricate(results)
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setattr(sys, "argv", ["report", str(results), "--wandb"])
    main()
    assert list(elsewhere.iterdir()) == []
    assert list((results / "wandb").glob("offline-run-*"))
    assert capsys.readouterr().out.strip() == str(results / "report.md")


def test_report_error_is_one_line_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(sys, "argv", ["report", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path} has no results.json; run a sweep into it with `python -m sparseprune.sweeps`"
    )


def test_busy_machine_warning_only_under_load() -> None:
    assert busy_machine_warning(load_per_core=0.2) is None
    assert "the machine is busy" in busy_machine_warning(load_per_core=1.5)
