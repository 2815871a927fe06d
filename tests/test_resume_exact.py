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


def kill(base: Path, checkpoints: Path, kill: list[str]) -> Path:
    """Runs until the kill; the last.ckpt path it leaves (absent when it died in its first save)."""
    killed = train(base / "killed", f"callbacks.model_checkpoint.dirpath={checkpoints}", *kill, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    return checkpoints / "last.ckpt"


def kill_and_resume(base: Path, checkpoints: Path, kill_point: list[str]) -> Path:
    last = kill(base, checkpoints, kill_point)
    torch.load(last, weights_only=False)  # what the kill left is whole
    train(base / "resumed", f"ckpt_path={last}")
    assert not [path.name for path in checkpoints.iterdir() if path.name.startswith(".")], "temporary files left"
    return base / "resumed"


def kill_at(epoch: int, batch: int | None = None) -> list[str]:
    point = ["+callbacks.kill._target_=kill_points.KillAt", f"+callbacks.kill.epoch={epoch}"]
    return point + ([] if batch is None else [f"+callbacks.kill.batch={batch}"])


# In CI one kill mid-stage and one at a stage boundary; the slow run adds four more batches (five mid-stage points in
# all) and every other epoch start after the first checkpoint (epochs 1 and 3 start stages, 2 and 4 fine-tune).
KILLS = [
    pytest.param(kill_at(2, 1), id="mid_stage"),
    pytest.param(kill_at(3), id="stage_boundary"),
    *(pytest.param(kill_at(e, b), id=f"epoch{e}_batch{b}", marks=pytest.mark.slow) for e, b in [(1, 1), (1, 2), (3, 1),
                                                                                                 (4, 2)]),
    *(pytest.param(kill_at(e), id=f"epoch{e}_start", marks=pytest.mark.slow) for e in (1, 2, 4)),
]  # fmt: skip
CI_SAVE_KILL, SLOW = (2, 0.5), pytest.mark.slow
# Each of the run's five last.ckpt writes cut at four points; the slow run takes them all on each filesystem (20 kills).
SAVE_KILLS = [
    pytest.param(save, fraction, id=f"save{save}_{fraction}", marks=() if (save, fraction) == CI_SAVE_KILL else SLOW)
    for save in range(1, 6)
    for fraction in (0.0, 0.25, 0.5, 0.99)
]  # fmt: skip


@pytest.mark.parametrize("kill", KILLS)
def test_resume_after_a_kill_is_bit_identical(tmp_path: Path, reference: tuple, kill: list[str]) -> None:
    resumed = kill_and_resume(tmp_path, tmp_path / "checkpoints", kill)
    codes, weights = final_state(resumed)
    assert_identical(codes, reference[0])
    assert_identical(weights, reference[1])


@pytest.mark.parametrize(("save", "fraction"), SAVE_KILLS)
@pytest.mark.parametrize("filesystem", ["disk", "tmpfs"])
def test_kill_while_writing_last_ckpt(
    tmp_path: Path, reference: tuple, filesystem: str, save: int, fraction: float
) -> None:
    if filesystem == "tmpfs" and not TMPFS.is_dir():
        pytest.skip("no tmpfs at /dev/shm")
    checkpoints = Path(tempfile.mkdtemp(dir=TMPFS)) if filesystem == "tmpfs" else tmp_path / "checkpoints"
    point = ["+callbacks.kill._target_=kill_points.KillDuringSave", f"+callbacks.kill.save={save}",
             f"+callbacks.kill.fraction={fraction}"]  # fmt: skip
    try:
        if save == 1:  # no good last.ckpt yet: the kill must leave none at all, not a torn one
            assert not kill(tmp_path, checkpoints, point).exists()
            return
        resumed = kill_and_resume(tmp_path, checkpoints, point)
        assert_identical(final_state(resumed)[0], reference[0])
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)
