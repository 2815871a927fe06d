"""ImageNet (ILSVRC-2012) from class folders, with torchvision's standard training and evaluation transforms.

Expected layout: `data_dir/train/<wnid>/*.JPEG` and `data_dir/val/<wnid>/*.JPEG` (the validation images
sorted into class folders). The official validation set serves as the test split; validation during training
is a seeded fraction of the training images seen through the evaluation transforms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import Dataset

from sparseprune.data.image_common import ImageDataModule, absent_dataset_error, first_line
from sparseprune.errors import UserError

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
RESIZE = 256  # shorter side before the evaluation centre crop (the 0.875 crop ratio)
LAYOUT = "expected train/<class>/*.JPEG and val/<class>/*.JPEG"
HOW_TO_GET = (
    f"{LAYOUT} (download ILSVRC2012 from https://image-net.org, which needs an account, and sort the "
    "validation images into class folders); it cannot be downloaded automatically"
)


class TransformedView(Dataset):
    """One scanned ImageFolder seen through a transform, so train and val views share a single scan."""

    def __init__(self, folder: Any, transform: Callable) -> None:
        self.folder = folder
        self.transform = transform

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image, label = self.folder[index]
        return self.transform(image), label


def imagenet_transforms(image_size: int, train: bool) -> Callable:
    """RandomResizedCrop + flip for training; resize + centre crop for evaluation; both normalised."""
    from torchvision import transforms

    if train:
        geometry = [transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip()]
    else:
        geometry = [transforms.Resize(round(image_size * RESIZE / 224)), transforms.CenterCrop(image_size)]
    return transforms.Compose([*geometry, transforms.ToTensor(), transforms.Normalize(MEAN, STD)])


class ImageNetDataModule(ImageDataModule):
    """ImageNet at 224x224 (or `image_size`), three channels, `num_classes` class folders (1000 usually)."""

    in_channels = 3

    def __init__(self, data_dir: str, num_classes: int = 1000, image_size: int = 224, **kwargs: Any) -> None:
        super().__init__(data_dir, **kwargs)
        self.num_classes = num_classes
        self.image_size = image_size

    def _folder(self, split: str) -> Any:
        from torchvision.datasets import ImageFolder

        root = self.data_dir / split
        if not root.is_dir():
            raise absent_dataset_error("ImageNet", root, HOW_TO_GET)
        try:
            folder = ImageFolder(str(root))
        except FileNotFoundError as error:
            raise UserError(f"ImageNet folder {root} holds no images ({first_line(error)}); {LAYOUT}") from error
        if len(folder.classes) != self.num_classes:
            raise UserError(f"{root} has {len(folder.classes)} class folders but data.num_classes={self.num_classes}")
        return folder

    def load_splits(self) -> tuple[Dataset, Dataset, Dataset]:
        train, test = self._folder("train"), self._folder("val")
        if train.classes != test.classes:
            raise UserError(f"{self.data_dir}/train and {self.data_dir}/val hold different class folders")
        train_tf = imagenet_transforms(self.image_size, train=self.augment)
        eval_tf = imagenet_transforms(self.image_size, train=False)
        return TransformedView(train, train_tf), TransformedView(train, eval_tf), TransformedView(test, eval_tf)
