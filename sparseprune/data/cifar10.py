"""CIFAR-10: 60 000 32x32 colour images in 10 classes, held in memory like Fashion-MNIST.

torchvision reads (and, with `download`, fetches) the python pickles under `data_dir/cifar-10-batches-py`.
"""

from __future__ import annotations

import logging

import torch

from sparseprune.data.image_common import TensorImageDataModule, absent_dataset_error, first_line
from sparseprune.errors import UserError

log = logging.getLogger(__name__)

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
# Per-channel statistics of the training images.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


class CIFAR10DataModule(TensorImageDataModule):
    """CIFAR-10, three channels, 10 classes; 50 000 train (minus val), 10 000 test."""

    num_classes = 10
    in_channels = 3
    image_size = 32
    mean = MEAN
    std = STD

    def prepare_data(self) -> None:
        if not self.download or (self.data_dir / FOLDER).is_dir():
            return
        from torchvision.datasets import CIFAR10

        try:
            CIFAR10(str(self.data_dir), train=True, download=True)
        except (RuntimeError, OSError) as error:
            raise self._absent(f"the download from {URL} failed ({first_line(error)})") from error

    def _absent(self, reason: str) -> UserError:
        return absent_dataset_error(
            "CIFAR-10",
            self.data_dir / FOLDER,
            f"{reason}; run with data.download=true where {URL} is reachable, or download that archive and "
            f"extract it into {self.data_dir} (giving {self.data_dir / FOLDER}/data_batch_1 ... test_batch)",
        )

    def load_uint8(self, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        from torchvision.datasets import CIFAR10

        self.prepare_data()  # a no-op once the files are there; covers callers that skip the Trainer's hook
        try:
            dataset = CIFAR10(str(self.data_dir), train=train, download=False)
        except RuntimeError as error:
            raise self._absent("the files are missing or fail their checksums") from error
        log.info("read CIFAR-10 %s split from %s", "train" if train else "test", self.data_dir / FOLDER)
        images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()
        return images, torch.tensor(dataset.targets, dtype=torch.long)
