"""The contract between a task's LightningModule and the pruning machinery.

The pruning callback never knows which model it prunes: it asks the module for a loss on a batch (for
Taylor importance) and for the names of weights that stay dense (`prune_exclude`, fnmatch patterns on
parameter names), and tells it once when pruning starts (`on_pruning_start`). Everything else is found
generically in the GEMM view (`sparseprune.pruning.gemm_view`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch


class PrunableTask(L.LightningModule):
    """Base of every task module: optimizer wiring and the hooks the pruning callback uses."""

    default_prune_exclude: tuple[str, ...] = ()  # weights left dense when the config says prune_exclude: null

    def __init__(
        self,
        optimizer: Any = None,
        scheduler: Any = None,
        prune_exclude: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.prune_exclude = list(self.default_prune_exclude if prune_exclude is None else prune_exclude)
        self.run_config: dict[str, Any] | None = None  # the resolved Hydra config, set by train.py

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store the run's resolved config so export.py rebuilds the same model and data from the file alone."""
        if self.run_config is not None:
            checkpoint["run_config"] = self.run_config

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.run_config = checkpoint.get("run_config", self.run_config)

    def on_pruning_start(self) -> None:
        """Called by the pruning callback just before its first stage prunes, the last moment the network is
        as dense training (or `init_ckpt`) left it; never again, not even after a resume. Tasks that keep a dense
        copy (a distillation teacher) take it here."""

    def compute_loss(self, batch: Any) -> torch.Tensor:
        """Training loss of one batch, without logging: the Taylor importance backpropagates it."""
        raise NotImplementedError

    def predict_batch(self, batch: Any) -> torch.Tensor:
        """The model's outputs for a batch, labels left out: what export compares and times.

        Tuple batches feed their first element; dict batches feed every key but `labels`. Tasks whose forward
        takes something else override this.
        """
        if isinstance(batch, list | tuple):
            return self(batch[0])
        outputs = self(**{key: value for key, value in batch.items() if key != "labels"})
        return outputs.logits if hasattr(outputs, "logits") else outputs

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.compute_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=self.batch_size_of(batch))
        return loss

    @staticmethod
    def batch_size_of(batch: Any) -> int:
        """Leading dimension of the first tensor in the batch, for correct metric averaging."""
        first = batch[0] if isinstance(batch, list | tuple) else next(iter(batch.values()))
        return int(first.shape[0])

    def configure_optimizers(self) -> Any:
        """Optimizers come from Hydra as partials (`_partial_: true`) and are finished here."""
        if self.optimizer_factory is None:
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)
        optimizer = self.optimizer_factory(params=self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer=optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
