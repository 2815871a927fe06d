"""A config option that does not exist is one `error:` line and exit status 2, before Hydra composes anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparseprune.app.choices import unknown_choice

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=vgg16", "pattern=tw"],
        ["pattern=ew,vw,tw", "schedule.target=0.5,0.75"],
        ["experiment=paper/bert_ew", "+trainer=debug"],
        ["experiment=null", "model.width_multiplier=0.25", "hydra.run.dir=x", "~logger"],
        ["pattern=choice(ew,nope)"],  # sweep functions are Hydra's to read
    ],
)
def test_existing_choices_pass(overrides: list[str]) -> None:
    assert unknown_choice(CONF, overrides) is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=resnet9000"], "Could not find 'model/resnet9000': model is one of bert, lstm_nmt, vgg16"),
        (["-m", "pattern=ew,diag"], "Could not find 'pattern/diag': pattern is one of bw, ew, nm, shflbw, tew, tw, vw"),
        (["++trainer=tpu"], "Could not find 'trainer/tpu': trainer is one of cpu, debug, gpu"),
    ],
)
def test_unknown_choice_is_named_with_the_options(overrides: list[str], message: str) -> None:
    assert unknown_choice(CONF, overrides) == message


def test_train_py_exits_2_with_one_line() -> None:
    command = [sys.executable, str(ROOT / "train.py"), "model=resnet9000"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: Could not find 'model/resnet9000': model is one of bert, lstm_nmt, vgg16"
    ]
