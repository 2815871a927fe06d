"""Every W&B sweep file parses and every run it makes composes; bad sweeps are refused, naming the key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from sparseprune.errors import UserError
from sparseprune.sweeps import (
    CONF_DIR,
    LocalRun,
    check_sweep,
    grid_runs,
    load_sweep,
    main,
    run_locally,
    sample_runs,
)

SWEEPS = sorted((CONF_DIR / "sweep").glob("*.yaml"))


def test_there_are_sweep_files() -> None:
    assert {p.stem for p in SWEEPS} >= {"patterns", "tw_granularity", "tew_random"}


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_file_runs_compose(path: Path) -> None:
    runs = check_sweep(path)
    sweep = load_sweep(path)
    assert runs and all(len(run) == len(sweep["parameters"]) for run in runs)


def test_grid_is_the_cross_product() -> None:
    sweep = {"parameters": {"pattern": {"values": ["ew", "tw"]}, "schedule.target": {"values": [0.5, 0.9]}}}
    assert grid_runs(sweep) == [
        ["pattern=ew", "schedule.target=0.5"],
        ["pattern=ew", "schedule.target=0.9"],
        ["pattern=tw", "schedule.target=0.5"],
        ["pattern=tw", "schedule.target=0.9"],
    ]


def write_sweep(tmp_path: Path, parameters: dict, method: str = "grid") -> Path:
    path = tmp_path / "sweep.yaml"
    command = ["${env}", "python", "${program}", "${args_no_hyphens}", "logger.wandb.offline=false"]  # as the shipped
    path.write_text(
        yaml.safe_dump({"program": "train.py", "method": method, "parameters": parameters, "command": command})
    )
    return path


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"schedule.tarrget": {"values": [0.5]}}, "schedule.tarrget"),
        ({"schedule.target": {"values": [0.5, 1.2]}}, "sparsity must lie in [0, 1), got 1.2"),
        ({"pattern": {"value": "tew"}, "pattern.delta": {"distribution": "uniform", "min": 0.0, "max": 1.5}}, "delta"),
        ({"pattern": {"value": "nm"}, "schedule.target": {"value": 0.5}}, "fixes sparsity at 0.75"),
        ({"pattern.granularity": {"distribution": "uniform", "min": 64, "max": 32}}, "min 64 is above max 32"),
        ({"pattern": {"values": []}}, "needs value, values"),
    ],
)
def test_bad_sweeps_are_refused_naming_the_key(tmp_path: Path, parameters: dict, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace(")", r"\)").replace("(", r"\(")):
        check_sweep(write_sweep(tmp_path, parameters))


def test_sweep_must_pass_overrides_and_use_a_known_method(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, {"pattern": {"value": "ew"}}, method="hyperband")
    with pytest.raises(UserError, match="method"):
        load_sweep(path)
    path.write_text(yaml.safe_dump({"method": "grid", "parameters": {"pattern": {"value": "ew"}}, "command": ["x"]}))
    with pytest.raises(UserError, match="args_no_hyphens"):
        load_sweep(path)


def test_random_sweeps_sample_inside_their_ranges() -> None:
    sweep = load_sweep(CONF_DIR / "sweep" / "tew_random.yaml")
    runs = sample_runs(sweep, seed=1)
    assert len(runs) == sweep["run_cap"] and runs == sample_runs(sweep, seed=1)
    for run in runs:
        values = dict(item.split("=") for item in run)
        assert 0.005 <= float(values["pattern.delta"]) <= 0.05
        assert 0.001 <= float(values["model.optimizer.lr"]) <= 0.1
        assert values["schedule.stages"] in {"1", "2", "3", "4"}


TINY = (
    "trainer=debug",
    "logger=none",
    "importance=magnitude",
    "model.width_multiplier=0.25",
    "data.train_subset=64",
)


def test_local_run_resumes_and_refuses_another_sweep(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, {"pattern": {"values": ["ew", "nm"]}, "schedule.target": {"value": 0.75}})
    out = tmp_path / "results"
    results = run_locally(sweep, out, LocalRun(TINY))
    assert [r["pattern"]["name"] for r in results] == ["ew", "nm"]
    first_summary = (out / "run000" / "summary.json").stat().st_mtime_ns
    again = run_locally(sweep, out, LocalRun(TINY))
    assert (out / "run000" / "summary.json").stat().st_mtime_ns == first_summary, "a finished run was rerun"
    assert [r["stages"] for r in again] == [r["stages"] for r in results]
    other = tmp_path / "other.yaml"
    other.write_text(sweep.read_text().replace("nm", "vw"))
    with pytest.raises(UserError, match="another sweep"):
        run_locally(other, out, LocalRun(TINY))


def test_parallel_jobs_export_every_point_and_log_per_run(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, {"pattern": {"values": ["ew", "tw"]}, "schedule.target": {"value": 0.5}})
    out = tmp_path / "results"
    options = LocalRun((*TINY, "pattern.granularity=8"), export=True, jobs=2)
    with pytest.raises(UserError, match="pattern.granularity"):
        run_locally(sweep, out, options)  # EW has no granularity: refused before anything runs
    options = LocalRun(TINY, export=True, jobs=2)
    results = run_locally(sweep, out, options)
    assert [r["pattern"]["name"] for r in results] == ["ew", "tw"]
    for run in ("run000", "run001"):
        report = json.loads((out / run / "export" / "export_report.json").read_text())
        assert report["speedup"] > 0
        assert (out / run / "train.console.log").read_text() and (out / run / "export.console.log").exists()
    exported = (out / "run001" / "export" / "export_report.json").stat().st_mtime_ns
    run_locally(sweep, out, options)
    assert (out / "run001" / "export" / "export_report.json").stat().st_mtime_ns == exported, "re-exported"


def test_failed_points_are_reported_and_jobs_must_be_positive(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, {"pattern": {"value": "ew"}, "schedule.target": {"value": 0.5}})
    with pytest.raises(UserError, match="at least 1"):
        run_locally(sweep, tmp_path / "out", LocalRun(TINY, jobs=0))
    with pytest.raises(UserError, match=r"1 of 1 sweep runs failed.*run 0 train.*train.console.log"):
        run_locally(sweep, tmp_path / "out", LocalRun((*TINY, f"init_ckpt={tmp_path}/missing.ckpt"), jobs=2))
    assert json.loads((tmp_path / "out" / "results.json").read_text()) == [], "results.json lists only trained points"


def test_command_line_error_is_one_line_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path = write_sweep(tmp_path, {"schedule.tarrget": {"values": [0.5]}})
    monkeypatch.setattr(sys, "argv", ["sweeps", str(path)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: sweep run schedule.tarrget=0.5:")
