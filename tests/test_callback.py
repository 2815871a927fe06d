"""StagedPruning in a real Lightning fit: masks enforced through every step, stages, checkpoint resume."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sparseprune.app.callbacks import StagedPruning
from sparseprune.errors import UserError
from sparseprune.models.base import PrunableTask
from sparseprune.pruning.gemm_view import to_gemm
from sparseprune.pruning.patterns import keep_mask


class TinyTask(PrunableTask):
    def __init__(self) -> None:
        super().__init__(
            optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3),
            prune_exclude=["head.*"],
        )
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def compute_loss(self, batch) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        self.log("val/acc", (self(x).argmax(1) == y).float().mean())


def loaders() -> tuple[DataLoader, DataLoader]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=generator)
    y = (x[:, :4].argmax(1)).long()
    data = TensorDataset(x, y)
    return DataLoader(data, batch_size=32, shuffle=True), DataLoader(data, batch_size=64)


def pruning(pattern: dict | None = None, **schedule) -> StagedPruning:
    plan = {"target": 0.75, "stages": 2, "kind": "linear", "dense_epochs": 1, "finetune_epochs": 2} | schedule
    return StagedPruning(
        pattern=pattern or {"name": "tw", "granularity": 8, "column_share": 0.25},
        schedule=plan,
        importance={"kind": "taylor", "num_batches": 2},
    )


def trainer(callbacks: list, max_epochs: int, root: Path) -> L.Trainer:
    return L.Trainer(
        max_epochs=max_epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=root, accelerator="cpu", num_sanity_val_steps=0,
    )  # fmt: skip


class StepProbe(L.Callback):
    """After every optimizer step, every pruned weight must be exactly zero."""

    def __init__(self, pruner: StagedPruning) -> None:
        self.pruner, self.checked_steps = pruner, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        for weight in self.pruner.weights:
            if weight.name in self.pruner.codes:
                pruned = ~keep_mask(self.pruner.codes[weight.name])
                assert bool((to_gemm(weight.param.detach())[pruned] == 0).all())
                self.checked_steps += 1


def test_stages_reach_targets_and_masks_hold_every_step(tmp_path: Path) -> None:
    L.seed_everything(0)
    pruner = pruning()
    probe = StepProbe(pruner)
    train, val = loaders()
    trainer(([pruner, probe]), 5, tmp_path).fit(TinyTask(), train, val)
    assert pruner.completed_stage == 1
    assert [round(r["target"], 3) for r in pruner.stage_results] == [0.0, 0.375, 0.75]
    assert abs(pruner.stage_results[-1]["sparsity"] - 0.75) <= 8 / (16 * 32 + 32 * 32)
    assert probe.checked_steps > 0
    assert (tmp_path / "plots" / "layer_sparsity_stage1.png").is_file()


def test_pruning_start_hook_runs_once_before_the_first_masks(tmp_path: Path) -> None:
    pruner, task, seen = pruning(), TinyTask(), []
    task.on_pruning_start = lambda: seen.append((pruner.completed_stage, dict(pruner.codes)))
    trainer([pruner], 5, tmp_path).fit(task, *loaders())
    assert seen == [(-1, {})] and pruner.completed_stage == 1


def test_resume_mid_stage_keeps_masks_bit_identical(tmp_path: Path) -> None:
    L.seed_everything(0)
    first = pruning()
    checkpoints = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1, filename="e{epoch}", auto_insert_metric_name=False
    )
    train, val = loaders()
    trainer([first, checkpoints], 2, tmp_path).fit(TinyTask(), train, val)  # stops mid stage 0 (epochs 1-2)
    saved = torch.load(tmp_path / "ckpt" / "e1.ckpt", weights_only=False)["callbacks"]["StagedPruning"]["codes"]

    resumed = pruning()
    probe = StepProbe(resumed)
    loaded: dict[str, torch.Tensor] = {}

    class CaptureAtStart(L.Callback):
        def on_train_epoch_start(self, trainer, pl_module) -> None:
            loaded.update({k: v.clone() for k, v in resumed.codes.items()})

    trainer([resumed, probe, CaptureAtStart()], 3, tmp_path).fit(
        TinyTask(), train, val, ckpt_path=tmp_path / "ckpt" / "e1.ckpt"
    )
    assert resumed.completed_stage == 0, "a resumed stage must not prune again"
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[name], saved[name]) for name in saved)
    assert probe.checked_steps > 0


def test_fast_dev_run_runs_every_stage(tmp_path: Path) -> None:
    pruner = pruning({"name": "nm", "n": 1, "m": 4})
    train, val = loaders()
    L.Trainer(
        fast_dev_run=True, callbacks=[pruner], logger=False, enable_progress_bar=False, accelerator="cpu",
        default_root_dir=tmp_path,
    ).fit(TinyTask(), train, val)  # fmt: skip
    assert pruner.completed_stage == 1
    for codes in pruner.codes.values():
        assert (keep_mask(codes).view(-1, 4, codes.shape[1]).sum(1) == 1).all()


def test_schedule_longer_than_trainer_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    train, val = loaders()
    trainer([pruning()], 1, tmp_path).fit(TinyTask(), train, val)
    assert "needs 5 epochs" in caplog.text


def test_nm_target_must_match_its_sparsity() -> None:
    with pytest.raises(UserError, match="set schedule.target=0.5"):
        pruning({"name": "nm", "n": 2, "m": 4})


def test_resume_takes_a_pattern_option_added_since_as_its_default() -> None:
    from sparseprune.app.callbacks import check_same_settings

    saved = {"pattern": {"name": "nm", "n": 2, "m": 4, "vector": 1}}  # written before `block` existed
    check_same_settings(saved, {"pattern": {"name": "nm", "n": 2, "m": 4, "vector": 1, "block": 1}}, "old.ckpt")
    with pytest.raises(UserError, match=r"pattern.block=1 in the checkpoint, 32 now"):
        check_same_settings(saved, {"pattern": {"name": "nm", "n": 2, "m": 4, "vector": 1, "block": 32}}, "old.ckpt")
