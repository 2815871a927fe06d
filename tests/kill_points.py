"""Callbacks that SIGKILL a real training process at a chosen point, as a crash or an OOM kill would; tests add
them to train.py's command line with `+callbacks.kill._target_=kill_points.<name>`."""

from __future__ import annotations

import io
import os
import signal
from typing import Any

import lightning as L
import torch


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillAt(L.Callback):
    """Die at the start of epoch `epoch` (before it prunes, when `batch` is None) or of its training batch `batch`."""

    def __init__(self, epoch: int, batch: int | None = None) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch and self.batch is None:
            _die()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, index: int) -> None:
        if trainer.current_epoch == self.epoch and index == self.batch:
            _die()


class KillDuringSave(L.Callback):
    """Die part way through writing the `save`-th `last.ckpt` (1-based): `fraction` of its bytes are on disk."""

    def __init__(self, save: int, fraction: float = 0.5) -> None:
        self.save, self.fraction, self.saves = save, fraction, 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        original = torch.save

        def save(obj: Any, file: Any, *args: Any, **kwargs: Any) -> None:
            if ".last.ckpt." in str(getattr(file, "name", "")):
                self.saves += 1
                if self.saves == self.save:
                    buffer = io.BytesIO()
                    original(obj, buffer, *args, **kwargs)
                    file.write(buffer.getvalue()[: int(len(buffer.getvalue()) * self.fraction)])
                    file.flush()
                    _die()
            original(obj, file, *args, **kwargs)

        torch.save = save
