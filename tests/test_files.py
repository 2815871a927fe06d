"""Crash-safe writes and run directories: no half file, no half export, never two runs in one directory."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sparseprune.app.run_dirs import ClaimRunDir, claim_new_dir
from sparseprune.files import atomic_write, replaced_on_success, write_text


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    write_text(target, "good")

    def half_then_crash(file) -> None:
        file.write(b"ha")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "good" and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_an_export_replaces_the_old_one_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "export"
    with replaced_on_success(target, "out_dir") as staging:
        (staging / "report.json").write_text("first")
    with pytest.raises(RuntimeError), replaced_on_success(target, "out_dir") as staging:
        (staging / "report.json").write_text("broken")
        raise RuntimeError("tolerance exceeded")
    assert (target / "report.json").read_text() == "first"
    with replaced_on_success(target, "out_dir") as staging:
        (staging / "report.json").write_text("second")
    assert (target / "report.json").read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_runs_started_in_the_same_second_get_their_own_dirs(tmp_path: Path) -> None:
    same_second = tmp_path / "runs" / "2025-01-01_12-00-00"
    with ProcessPoolExecutor(max_workers=4) as pool:
        claimed = list(pool.map(claim_new_dir, [same_second] * 10))
    assert len(set(claimed)) == 10 and all(path.is_dir() for path in claimed)
    assert same_second in claimed and same_second.with_name(f"{same_second.name}_9") in claimed


def test_the_default_run_dir_is_claimed_and_a_chosen_one_kept(tmp_path: Path) -> None:
    default = str(tmp_path / "runs" / "2025-01-01_12-00-00")

    def run_dir(*overrides: str) -> str:
        config = OmegaConf.create({"hydra": {"run": {"dir": default}, "overrides": {"hydra": list(overrides)}}})
        ClaimRunDir().on_run_start(config)
        return config.hydra.run.dir

    assert [run_dir(), run_dir()] == [default, f"{default}_1"]
    assert run_dir(f"hydra.run.dir={default}") == default  # a DDP rank joining rank zero, a sweep point
