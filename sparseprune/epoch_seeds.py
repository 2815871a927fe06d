"""Randomness that depends only on (seed, epoch), so a run resumed from an epoch's checkpoint draws exactly what
the uninterrupted run drew: the shuffled order, augmentation, dropout and the batches that score importance.

Lightning restores weights, optimizer and loop state but no random-number state, and it creates the first training
iterator of a process before the epoch's hooks run, so "reseed at each epoch" alone is not enough: the shuffle
order comes from its own (seed, epoch) generator, loaders draw their worker seeds from a private generator, and
every global generator is reseeded from (seed, epoch, rank) when an epoch starts.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import Sampler


def derived_seed(*parts: int) -> int:
    """A 63-bit seed from integers, far apart for neighbouring inputs (unlike seed + epoch)."""
    digest = hashlib.sha256(":".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class EpochShuffle(Sampler[int]):
    """A random order of `size` indices fixed by (seed, the epoch `epoch()` reports when iteration starts)."""

    def __init__(self, size: int, seed: int, epoch: Callable[[], int]) -> None:
        self.size, self.seed, self.epoch = size, seed, epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(derived_seed(self.seed, self.epoch()))
        return iter(torch.randperm(self.size, generator=generator).tolist())


def loader_options(module: L.LightningDataModule, size: int, seed: int, shuffle: bool) -> dict[str, object]:
    """DataLoader arguments that keep loading off the global generators: a (seed, epoch) order when shuffled, and a
    private generator for the worker base seed every new iterator draws."""
    options: dict[str, object] = {"generator": torch.Generator().manual_seed(seed)}
    if shuffle:
        options["sampler"] = EpochShuffle(size, seed, lambda: module.trainer.current_epoch if module.trainer else 0)
    return options


class EpochSeeding(L.Callback):
    """Reseed torch (CPU and CUDA), numpy and `random` from (seed, epoch, rank) at the start of every epoch; listed
    first so the pruning callback's scoring at an epoch's start already draws from the epoch's seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seed = derived_seed(self.seed, trainer.current_epoch, trainer.global_rank)
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
