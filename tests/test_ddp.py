"""Two CPU ranks (Lightning DDP over gloo) build the same masks, and write the run's files once.

Each rank scores Taylor importance on its own shard of the batches, and the scores are averaged across ranks before
any mask is built (importance.reduce_scores), so the ranks' masks must be bit-identical. Against one process the
trained weights differ (each rank normalizes its own half batch, and fine-tuning follows those gradients: 9.9% of
the keep codes differed after a dense epoch and two stages), so the comparison with one process prunes the initial
weights by magnitude, where two ranks must build exactly the masks one process builds: the model starts from the
same seed on every rank, and nothing rank-dependent reaches the masks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG

ROOT = Path(__file__).resolve().parents[1]
PER_RANK_BATCH = 16
RUN = [*TINY_VGG, *PATTERN_OVERRIDES["tw"], "schedule.finetune_epochs=1", "trainer.limit_train_batches=2",
       "trainer.limit_val_batches=1"]  # fmt: skip
TAYLOR = ["importance=taylor", "importance.num_batches=2", "schedule.dense_epochs=1", "schedule.stages=2"]
MAGNITUDE_AT_START = ["importance=magnitude", "schedule.dense_epochs=0", "schedule.stages=1"]
TWO_RANKS = ["trainer.devices=2", "trainer.strategy=ddp"]


def train(run_dir: Path, *overrides: str) -> tuple[list[dict[str, torch.Tensor]], str]:
    """Runs train.py; returns the keep codes each rank saved, and what the run printed."""
    masks = run_dir / "rank_masks"
    saver = ["+callbacks.rank_masks._target_=rank_masks.SaveRankMasks", f"+callbacks.rank_masks.out_dir={masks}"]
    command = [sys.executable, str(ROOT / "train.py"), *RUN, *overrides, f"hydra.run.dir={run_dir}", *saver]
    env = os.environ | {"PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                        "SPARSEPRUNE_DATA_DIR": str(run_dir.parent / "data")}  # fmt: skip
    result = subprocess.run(command, cwd=run_dir.parent, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [torch.load(path) for path in sorted(masks.glob("rank*.pt"))], result.stdout + result.stderr


def test_two_ranks_build_identical_masks_and_write_once(tmp_path: Path) -> None:
    ddp = tmp_path / "ddp"
    ranks, printed = train(ddp, *TAYLOR, *TWO_RANKS, f"data.batch_size={PER_RANK_BATCH}")
    assert len(ranks) == 2
    assert ranks[0].keys() == ranks[1].keys()
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), f"{name} differs between the ranks"
    assert [s["stage"] for s in json.loads((ddp / "summary.json").read_text())["stages"]] == [-1, 0, 1]
    assert printed.count("summary: ") == 1, "the stage table and summary are printed by rank zero alone"


def test_two_ranks_build_the_masks_of_one_process(tmp_path: Path) -> None:
    ranks, _ = train(tmp_path / "ddp", *MAGNITUDE_AT_START, *TWO_RANKS, f"data.batch_size={PER_RANK_BATCH}")
    (single,), _ = train(tmp_path / "single", *MAGNITUDE_AT_START, f"data.batch_size={2 * PER_RANK_BATCH}")
    for rank in ranks:
        assert rank.keys() == single.keys()
        assert all(torch.equal(rank[name], single[name]) for name in single)
