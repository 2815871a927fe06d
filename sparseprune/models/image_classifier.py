"""Image classification with VGG16: the task the TW paper prunes first.

`num_classes`, `in_channels` and `image_size` come from the datamodule's `model_kwargs()`, so one model
config serves every image dataset. The network lives under `net`, so its parameter names (and the default
`prune_exclude` patterns) read `net.features.<i>.weight` and `net.classifier.<i>.weight`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from sparseprune.errors import UserError
from sparseprune.models.base import PrunableTask
from sparseprune.models.vgg import build_vgg16, resolve_variant, vgg16_dense_layers


class ImageClassifier(PrunableTask):
    """VGG16 trained with cross entropy; reports plain (micro-averaged) accuracy on val and test."""

    def __init__(
        self,
        num_classes: int,
        in_channels: int,
        image_size: int,
        variant: str = "auto",
        width_multiplier: float = 1.0,
        batch_norm: bool = True,
        dropout: float = 0.5,
        optimizer: Any = None,
        scheduler: Any = None,
        prune_exclude: Sequence[str] | None = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, prune_exclude=prune_exclude)
        # Optimizer partials are not data; checkpoints rebuild the network from the rest.
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        if not 0.0 <= label_smoothing < 1.0:
            raise UserError(f"label_smoothing must lie in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.net = build_vgg16(
            num_classes=num_classes,
            in_channels=in_channels,
            variant=resolve_variant(variant, image_size),
            width_multiplier=width_multiplier,
            batch_norm=batch_norm,
            dropout=dropout,
        )
        if prune_exclude is None:
            self.prune_exclude = vgg16_dense_layers(self.net, prefix="net.")
        self.val_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def compute_loss(self, batch: Any) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(self(images), labels, label_smoothing=self.label_smoothing)

    def _evaluate(self, batch: Any, split: str, accuracy: MulticlassAccuracy) -> None:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        accuracy.update(logits, labels)
        batch_size = self.batch_size_of(batch)
        self.log(f"{split}/loss", loss, prog_bar=split == "val", batch_size=batch_size, sync_dist=True)
        self.log(f"{split}/acc", accuracy, prog_bar=True, batch_size=batch_size)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_acc)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_acc)
