"""Moving a batch to a device the way Lightning does, so code outside the fit loop sees identical batches."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch


def transfer_batch(batch: Any, module: L.LightningModule, datamodule: L.LightningDataModule | None) -> Any:
    """Before-transfer hook, device transfer, after-transfer hook; the datamodule's hooks where it has them
    (Lightning's own rule), else the module's."""
    owner = datamodule if datamodule is not None else module
    batch = owner.on_before_batch_transfer(batch, 0)
    batch = owner.transfer_batch_to_device(batch, module.device, 0)
    return owner.on_after_batch_transfer(batch, 0)


def to_dtype(batch: Any, dtype: torch.dtype) -> Any:
    """Floating tensors of a batch cast to `dtype`; token ids and labels untouched."""
    if isinstance(batch, torch.Tensor):
        return batch.to(dtype) if batch.is_floating_point() else batch
    if isinstance(batch, list | tuple):
        return type(batch)(to_dtype(item, dtype) for item in batch)
    if isinstance(batch, dict):
        return {key: to_dtype(value, dtype) for key, value in batch.items()}
    return batch
