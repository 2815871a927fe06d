"""What the image datamodules share: argument checks, the seeded train/val split, loaders, augmentation.

Small datasets (Fashion-MNIST, CIFAR-10) live in memory as normalised float tensors: a CPU epoch then costs
only the model, and augmentation runs on whole batches on the training device (`on_after_batch_transfer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from sparseprune.epoch_seeds import loader_options
from sparseprune.errors import UserError

CROP_PADDING = 4  # pixels of padding before the random crop, the usual CIFAR recipe


def check_loader_args(batch_size: int, num_workers: int, val_fraction: float, train_subset: int | None) -> None:
    if batch_size < 1:
        raise UserError(f"batch_size must be at least 1, got {batch_size}")
    if num_workers < 0:
        raise UserError(f"num_workers must be 0 or more, got {num_workers}")
    if not 0.0 <= val_fraction < 1.0:
        raise UserError(f"val_fraction must lie in [0, 1), got {val_fraction}")
    if train_subset is not None and train_subset < 1:
        raise UserError(f"train_subset must be at least 1 (or null for all), got {train_subset}")


def split_indices(
    n_examples: int, val_fraction: float, seed: int, train_subset: int | None
) -> tuple[list[int], list[int]]:
    """Seeded split of the official train set into (train, val) indices.

    The validation part is `round(val_fraction * n)` examples whatever `train_subset` is, so accuracy stays
    comparable between a CPU demo and a full run; `train_subset` only caps the training part.
    """
    order = torch.randperm(n_examples, generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = round(val_fraction * n_examples)
    train = order[n_val:]
    if train_subset is not None:
        train = train[:train_subset]
    return train, order[:n_val]


def normalize_images(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 normalised per channel."""
    mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (images.float().div_(255.0) - mean_t) / std_t


def random_crop_flip(images: torch.Tensor, fill: torch.Tensor, padding: int = CROP_PADDING) -> torch.Tensor:
    """Per-example random crop after `padding` pixels of `fill` (per channel), and a horizontal flip with
    probability 1/2, done for the whole batch at once by index arithmetic."""
    batch, channels, height, width = images.shape
    padded = fill.view(1, channels, 1, 1).expand(batch, channels, height + 2 * padding, width + 2 * padding)
    padded = padded.clone()
    padded[:, :, padding : padding + height, padding : padding + width] = images
    offset_y = torch.randint(0, 2 * padding + 1, (batch, 1), device=images.device)
    offset_x = torch.randint(0, 2 * padding + 1, (batch, 1), device=images.device)
    rows = offset_y + torch.arange(height, device=images.device)
    cols = offset_x + torch.arange(width, device=images.device)
    flip = torch.rand(batch, 1, device=images.device) < 0.5
    cols = torch.where(flip, cols.flip(1), cols)
    batch_index = torch.arange(batch, device=images.device).view(batch, 1, 1)
    cropped = padded.permute(0, 2, 3, 1)[batch_index, rows.unsqueeze(2), cols.unsqueeze(1)]
    return cropped.permute(0, 3, 1, 2).contiguous()


def absent_dataset_error(name: str, data_dir: Path, how_to_get: str) -> UserError:
    return UserError(f"{name} not found under {data_dir}; {how_to_get}")


def first_line(error: BaseException) -> str:
    """A download error's gist: torchvision's messages span several lines, a UserError is one."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class ImageDataModule(L.LightningDataModule):
    """Train/val split off the official train set with a fixed seed; test is the official test split.

    Subclasses set `num_classes`, `in_channels`, `image_size` and implement `load_splits`.
    """

    num_classes: int
    in_channels: int
    image_size: int

    def __init__(
        self,
        data_dir: str,
        batch_size: int = 128,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        seed: int = 0,
        augment: bool = True,
        train_subset: int | None = None,
        download: bool = True,
    ) -> None:
        super().__init__()
        check_loader_args(batch_size, num_workers, val_fraction, train_subset)
        self.data_dir = Path(data_dir).expanduser()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.val_fraction = val_fraction
        self.seed = seed
        self.augment = augment
        self.train_subset = train_subset
        self.download = download
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    def model_kwargs(self) -> dict[str, int]:
        """What the model must know about the inputs; available before `setup`."""
        return dict(num_classes=self.num_classes, in_channels=self.in_channels, image_size=self.image_size)

    def load_splits(self) -> tuple[Dataset, Dataset, Dataset]:
        """(official train seen with training transforms, the same examples with eval transforms, test)."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train_view, eval_view, test = self.load_splits()
        train_idx, val_idx = split_indices(len(train_view), self.val_fraction, self.seed, self.train_subset)
        self.train_set = Subset(train_view, train_idx)
        self.val_set = Subset(eval_view, val_idx)
        self.test_set = test

    def _loader(self, dataset: Dataset | None, shuffle: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError("setup() must run before the dataloaders are requested")
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
            **loader_options(self, len(dataset), self.seed, shuffle),  # type: ignore[arg-type]
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)


class TensorImageDataModule(ImageDataModule):
    """In-memory uint8 images, normalised once; augmentation on training batches after device transfer.

    Subclasses set `mean`, `std` and implement `load_uint8(train)` returning ((N, C, H, W) uint8, labels).
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def load_uint8(self, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _tensor_dataset(self, train: bool) -> TensorDataset:
        images, labels = self.load_uint8(train)
        return TensorDataset(normalize_images(images, self.mean, self.std), labels.long())

    def load_splits(self) -> tuple[Dataset, Dataset, Dataset]:
        train = self._tensor_dataset(train=True)
        return train, train, self._tensor_dataset(train=False)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if not (self.augment and self.trainer is not None and self.trainer.training):
            return batch
        images, labels = batch
        return random_crop_flip(images, self._background(images)), labels

    def _background(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised value of a black pixel: crops pad with what the images' borders hold."""
        mean = torch.tensor(self.mean, dtype=images.dtype, device=images.device)
        std = torch.tensor(self.std, dtype=images.dtype, device=images.device)
        return -mean / std
