"""Real train.py processes killed (SIGKILL) mid-stage, at a stage boundary and in the middle of writing last.ckpt,
then resumed: the final masks and weights equal an uninterrupted run's bit for bit, and every checkpoint a kill
left behind loads."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG

ROOT = Path(__file__).resolve().parents[1]
# Epoch 0 dense, stage 0 prunes at epoch 1 (Taylor scores), stage 1 at epoch 3; augmentation and shuffling on.
STAGED = [*TINY_VGG, *PATTERN_OVERRIDES["tw"], "importance.num_batches=2", "schedule.dense_epochs=1",
          "schedule.stages=2", "schedule.finetune_epochs=2", "trainer.limit_train_batches=3",
          "trainer.limit_val_batches=1", "data.train_subset=128"]  # fmt: skip
TMPFS = Path("/dev/shm")


def train(run_dir: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(ROOT / "tests"), "HYDRA_FULL_ERROR": "1"}
    command = [sys.executable, str(ROOT / "train.py"), *STAGED, *extra, f"hydra.run.dir={run_dir}"]
    result = subprocess.run(command, cwd=run_dir.parent, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def final_state(run_dir: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    return checkpoint["callbacks"]["StagedPruning"]["codes"], checkpoint["state_dict"]


def assert_identical(found: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert found.keys() == expected.keys()
    differing = {name: int((found[name] != expected[name]).sum()) for name in expected}
    assert not any(differing.values()), {name: count for name, count in differing.items() if count}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    train(run_dir)
    return final_state(run_dir)


def kill_and_resume(base: Path, checkpoints: Path, kill: list[str]) -> Path:
    killed = train(base / "killed", f"callbacks.model_checkpoint.dirpath={checkpoints}", *kill, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    last = checkpoints / "last.ckpt"
    torch.load(last, weights_only=False)  # what the kill left is whole
    train(base / "resumed", f"ckpt_path={last}")
    assert not [path.name for path in checkpoints.iterdir() if path.name.startswith(".")], "temporary files left"
    return base / "resumed"


@pytest.mark.parametrize(
    "kill",
    [
        ["+callbacks.kill._target_=kill_points.KillAt", "+callbacks.kill.epoch=2", "+callbacks.kill.batch=1"],
        ["+callbacks.kill._target_=kill_points.KillAt", "+callbacks.kill.epoch=3"],
    ],
    ids=["mid_stage", "stage_boundary"],
)
def test_resume_after_a_kill_is_bit_identical(tmp_path: Path, reference: tuple, kill: list[str]) -> None:
    resumed = kill_and_resume(tmp_path, tmp_path / "checkpoints", kill)
    codes, weights = final_state(resumed)
    assert_identical(codes, reference[0])
    assert_identical(weights, reference[1])


@pytest.mark.parametrize("filesystem", ["disk", "tmpfs"])
def test_kill_while_writing_last_ckpt(tmp_path: Path, reference: tuple, filesystem: str) -> None:
    if filesystem == "tmpfs" and not TMPFS.is_dir():
        pytest.skip("no tmpfs at /dev/shm")
    checkpoints = Path(tempfile.mkdtemp(dir=TMPFS)) if filesystem == "tmpfs" else tmp_path / "checkpoints"
    kill = ["+callbacks.kill._target_=kill_points.KillDuringSave", "+callbacks.kill.save=2"]
    try:
        resumed = kill_and_resume(tmp_path, checkpoints, kill)
        assert_identical(final_state(resumed)[0], reference[0])
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)
