"""A callback the DDP test adds on the command line: each rank saves the keep codes it trained with."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from sparseprune.app.callbacks import StagedPruning


class SaveRankMasks(L.Callback):
    """At the end of fit, <out_dir>/rank<r>.pt holds rank r's keep codes (the run itself writes rank zero's only)."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pruning = next(c for c in trainer.callbacks if isinstance(c, StagedPruning))
        self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.cpu() for k, v in pruning.codes.items()}, self.out_dir / f"rank{trainer.global_rank}.pt")
