"""Train/val/test loaders over a dict of named datasets with a shared collate function."""

from __future__ import annotations

from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Dataset

from sparseprune.epoch_seeds import loader_options


class SplitLoadersDataModule(L.LightningDataModule):
    """Subclasses fill `self.datasets` ("train", "val", "test") in `setup` and define `collate`."""

    datasets: dict[str, Dataset]
    batch_size: int
    num_workers: int

    def collate(self, examples: list[Any]) -> Any:
        raise NotImplementedError

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        dataset = self.datasets[split]
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            collate_fn=self.collate,
            persistent_workers=self.num_workers > 0,
            **loader_options(self, len(dataset), getattr(self, "seed", 0), shuffle),  # type: ignore[arg-type]
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
