"""train.py and export.py as a user meets them: `--help` with examples and only what each takes, a console without
the libraries' chatter, and export's log beside its files."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra_runs import CONF_DIR
from rich.console import Console

from export import export_log_file
from sparseprune.app.console import PIPED_COLUMNS, quiet_console
from sparseprune.app.run_cleanup import holds_only_hydra_files
from sparseprune.loggers import QuietWandbLogger

ROOT = Path(__file__).resolve().parents[1]
LISTED_IN_FULL = ("model", "data", "pattern", "schedule", "importance", "trainer", "logger")


def help_text(script: str) -> str:
    result = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def train_help() -> str:
    return help_text("train.py")


def test_train_help_lists_every_option_of_its_groups(train_help: str) -> None:
    for group in LISTED_IN_FULL:
        line = re.search(rf"^  {group} +(.+)$", train_help, re.MULTILINE)
        assert line, f"no {group} line in train.py --help"
        listed = set(re.split(r",\s*", re.split(r"\s{2,}", line.group(1))[0]))
        assert listed == {path.stem for path in (ROOT / "conf" / group).glob("*.yaml")}, group


def test_train_help_has_examples_and_no_config_dump(train_help: str) -> None:
    assert "python train.py -m pattern=ew,vw,tw schedule.target=0.5,0.75" in train_help
    assert "_target_" not in train_help


def test_export_help_shows_its_keys_not_the_training_groups() -> None:
    text = help_text("export.py")
    assert "python export.py ckpt=" in text and "ckpt: ???" in text and "layer_choice:" in text
    assert not re.search(r"^\s*(pattern|schedule|trainer)\b", text, re.MULTILINE)


def export_log_of(overrides: list[str]) -> str:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="export", overrides=overrides, return_hydra_config=True)
    return cfg.hydra.job_logging.handlers.file.filename


def test_export_log_goes_beside_the_export_folder(tmp_path: Path) -> None:
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert export_log_of([f"ckpt={ckpt}"]) == str(tmp_path / "run" / "export.log")
    out_dir = tmp_path / "exports" / "tw75"
    assert export_log_of([f"ckpt={ckpt}", f"out_dir={out_dir}"]) == str(out_dir.parent / "tw75.log")
    assert export_log_file(None, None) == os.devnull  # `ckpt is required` leaves no log anywhere


def test_quiet_console_drops_tips_strips_ansi_and_widens_piped_output(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    quiet_console()  # under pytest stdout and stderr are pipes
    lightning, transformers = "lightning.pytorch.utilities.rank_zero", "transformers.modeling_utils"
    caplog.set_level(logging.INFO, logger=lightning)
    # transformers' records stop short of the root logger, where caplog listens
    monkeypatch.setattr(logging.getLogger(transformers), "handlers", [caplog.handler])
    monkeypatch.setattr(logging.getLogger(transformers), "propagate", False)  # as transformers sets it
    logging.getLogger(lightning).info("💡 Tip: try installing litlogger")
    logging.getLogger(lightning).info("GPU available: False")
    logging.getLogger(transformers).warning("\x1b[1mBertModel LOAD REPORT\x1b[0m from: x")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False", "BertModel LOAD REPORT from: x"]
    assert Console().width == PIPED_COLUMNS and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"


def test_wandb_logger_passes_no_anonymous_and_is_quiet(tmp_path: Path) -> None:
    logger = QuietWandbLogger(save_dir=str(tmp_path), offline=True)
    assert "anonymous" not in logger._wandb_init and logger._wandb_init["settings"].quiet


def test_a_run_failing_before_it_writes_leaves_no_run_folder(tmp_path: Path) -> None:
    env = os.environ | {"SPARSEPRUNE_DATA_DIR": str(tmp_path / "data")}
    command = [sys.executable, str(ROOT / "train.py"), "schedule.target=1.5", "trainer=debug", "logger=none"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert list((tmp_path / "logs" / "train" / "runs").iterdir()) == []


def test_a_run_folder_with_results_is_kept(tmp_path: Path) -> None:
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 0")
    (tmp_path / "train.log").write_text("started")
    (tmp_path / "plots").mkdir()
    assert holds_only_hydra_files(tmp_path, "train")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    assert not holds_only_hydra_files(tmp_path, "train")
