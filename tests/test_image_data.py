"""Image datamodules: IDX parsing, exact split sizes, augmentation, absent datasets, the Hydra configs."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
import torchvision
from hydra.utils import instantiate
from omegaconf import OmegaConf

from sparseprune.data import fashion_mnist, image_common
from sparseprune.data.cifar10 import CIFAR10DataModule
from sparseprune.data.fashion_mnist import FashionMNISTDataModule, parse_idx, read_idx
from sparseprune.data.image_common import random_crop_flip, split_indices
from sparseprune.data.imagenet import ImageNetDataModule
from sparseprune.errors import UserError
from sparseprune.models.image_classifier import ImageClassifier

CONF_DIR = Path(__file__).resolve().parents[1] / "conf" / "data"


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as IDX: magic 0 0 8 ndim, big-endian sizes, values."""
    return bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_fake_fashion_mnist(raw_dir: Path, n_train: int, n_test: int) -> None:
    raw_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) % 10).astype(np.uint8)
        (raw_dir / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images)))
        (raw_dir / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(labels))  # uncompressed works too


@pytest.fixture
def no_system_copy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIR", tmp_path / "absent-system-dir")


def test_parse_idx_round_trips_a_tiny_file(tmp_path: Path) -> None:
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "tiny-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(array)))
    np.testing.assert_array_equal(read_idx(path), array)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x00\x08", "bad magic number"),
        (b"\x01\x00\x08\x01" + struct.pack(">I", 2) + b"ab", "bad magic number"),
        (b"\x00\x00\x07\x01" + struct.pack(">I", 2) + b"ab", "bad magic number"),
        (b"\x00\x00\x08\x03" + struct.pack(">I", 2), "truncated"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 3) + b"ab", "needs 3"),
    ],
)
def test_parse_idx_rejects_corrupt_data(data: bytes, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_idx(data)


def test_broken_gzip_gives_user_error(tmp_path: Path) -> None:
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.zeros((2, 28, 28), np.uint8)))[:-12])
    with pytest.raises(UserError, match="cannot read IDX file"):
        read_idx(path)


def test_split_is_seeded_disjoint_and_exact() -> None:
    train, val = split_indices(100, 0.2, seed=3, train_subset=None)
    assert (len(train), len(val)) == (80, 20)
    assert sorted(train + val) == list(range(100))
    assert split_indices(100, 0.2, seed=3, train_subset=None) == (train, val)
    capped, same_val = split_indices(100, 0.2, seed=3, train_subset=7)
    assert capped == train[:7] and same_val == val


def test_fake_fashion_mnist_sizes_padding_and_labels(no_system_copy: None, tmp_path: Path) -> None:
    write_fake_fashion_mnist(tmp_path / "FashionMNIST" / "raw", n_train=50, n_test=20)
    module = FashionMNISTDataModule(str(tmp_path), batch_size=8, val_fraction=0.2, train_subset=15, download=False)
    module.setup("fit")
    assert (len(module.train_set), len(module.val_set), len(module.test_set)) == (15, 10, 20)
    images, labels = next(iter(module.test_dataloader()))
    assert images.shape == (8, 1, 32, 32) and images.dtype == torch.float32
    assert labels.tolist() == list(range(8))
    black = (0.0 - fashion_mnist.MEAN[0]) / fashion_mnist.STD[0]
    assert torch.allclose(images[:, :, :2, :], torch.tensor(black)) and torch.allclose(
        images[..., -2:], torch.tensor(black)
    )


def test_absent_fashion_mnist_says_how_to_get_it(no_system_copy: None, tmp_path: Path) -> None:
    module = FashionMNISTDataModule(str(tmp_path), download=False)
    with pytest.raises(UserError, match="dataset-fashion-mnist.*data.download=true"):
        module.setup("fit")


def test_labels_disagreeing_with_images_give_user_error(no_system_copy: None, tmp_path: Path) -> None:
    raw_dir = tmp_path / "FashionMNIST" / "raw"
    write_fake_fashion_mnist(raw_dir, n_train=5, n_test=5)
    (raw_dir / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(UserError, match="should hold 5 labels"):
        FashionMNISTDataModule(str(tmp_path), download=False).setup("test")


@pytest.mark.skipif(not fashion_mnist.SYSTEM_DIR.is_dir(), reason="Debian package dataset-fashion-mnist absent")
def test_real_fashion_mnist_from_the_system_copy(tmp_path: Path) -> None:
    module = FashionMNISTDataModule(str(tmp_path), val_fraction=0.1, download=False)
    module.setup("fit")
    assert (len(module.train_set), len(module.val_set), len(module.test_set)) == (54_000, 6_000, 10_000)
    train_labels = module.train_set.dataset.tensors[1]
    assert len(train_labels) == 60_000 and train_labels.unique().tolist() == list(range(10))
    assert module.test_set.tensors[1].bincount().tolist() == [1000] * 10
    assert module.model_kwargs() == {"num_classes": 10, "in_channels": 1, "image_size": 32}


def test_crop_flip_moves_pixels_only() -> None:
    torch.manual_seed(0)
    images = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6)
    fill = torch.tensor([-1.0, -2.0, -3.0])
    out = random_crop_flip(images, fill, padding=2)
    assert out.shape == images.shape
    padded = fill.view(1, 3, 1, 1).repeat(2, 1, 10, 10)
    padded[:, :, 2:8, 2:8] = images
    for example in range(2):
        crops = [
            crop
            for y in range(5)
            for x in range(5)
            for crop in (padded[example, :, y : y + 6, x : x + 6], padded[example, :, y : y + 6, x : x + 6].flip(-1))
        ]
        assert any(torch.equal(out[example], crop) for crop in crops)


def test_augmentation_only_touches_training_batches(no_system_copy: None, tmp_path: Path) -> None:
    module = FashionMNISTDataModule(str(tmp_path), augment=True, download=False)
    batch = (torch.randn(4, 1, 32, 32), torch.zeros(4, dtype=torch.long))
    assert module.on_after_batch_transfer(batch, 0) is batch  # no trainer attached: evaluation path
    module.trainer = SimpleNamespace(training=False)
    assert module.on_after_batch_transfer(batch, 0) is batch
    module.trainer = SimpleNamespace(training=True)
    images, labels = module.on_after_batch_transfer(batch, 0)
    assert images.shape == batch[0].shape and not torch.equal(images, batch[0]) and labels is batch[1]


def test_trainer_augments_training_batches_only(
    no_system_copy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fake_fashion_mnist(tmp_path / "FashionMNIST" / "raw", n_train=40, n_test=8)
    calls = []

    def counting_crop_flip(images: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
        calls.append(images.shape[0])
        return random_crop_flip(images, fill)

    monkeypatch.setattr(image_common, "random_crop_flip", counting_crop_flip)
    module = FashionMNISTDataModule(str(tmp_path), batch_size=8, val_fraction=0.2, download=False)
    model = ImageClassifier(**module.model_kwargs(), width_multiplier=0.125)
    trainer = L.Trainer(fast_dev_run=True, accelerator="cpu", logger=False, enable_progress_bar=False)
    trainer.fit(model, datamodule=module)
    assert calls == [8]  # the one training batch; the validation batch went through untouched


def test_failed_download_gives_one_line_with_the_ways_out(
    no_system_copy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried http://..., got: timed out")

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", unreachable)
    with pytest.raises(UserError, match="download failed") as caught:
        FashionMNISTDataModule(str(tmp_path), download=True).setup("fit")
    assert "\n" not in str(caught.value) and "dataset-fashion-mnist" in str(caught.value)


def test_absent_cifar10_without_download_names_the_url(tmp_path: Path) -> None:
    module = CIFAR10DataModule(str(tmp_path), download=False)
    with pytest.raises(UserError, match=r"CIFAR-10 not found.*data.download=true.*cifar-10-python\.tar\.gz"):
        module.setup("fit")
    assert module.model_kwargs() == {"num_classes": 10, "in_channels": 3, "image_size": 32}


def test_absent_imagenet_describes_the_layout(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"ImageNet not found.*train/<class>/\*\.JPEG and val/<class>"):
        ImageNetDataModule(str(tmp_path), download=False).setup("fit")


def write_fake_imagenet(root: Path, classes: list[str], per_class: int) -> None:
    from PIL import Image

    for split in ("train", "val"):
        for cls in classes:
            (root / split / cls).mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (40, 36), (i * 40, 0, 0)).save(root / split / cls / f"{i}.JPEG")


def test_imagenet_folders_load_with_standard_transforms(tmp_path: Path) -> None:
    write_fake_imagenet(tmp_path, ["n01", "n02"], per_class=5)
    module = ImageNetDataModule(str(tmp_path), num_classes=2, image_size=32, batch_size=4, val_fraction=0.2)
    module.setup("fit")
    assert (len(module.train_set), len(module.val_set), len(module.test_set)) == (8, 2, 10)
    images, labels = next(iter(module.train_dataloader()))
    assert images.shape == (4, 3, 32, 32) and set(labels.tolist()) <= {0, 1}
    with pytest.raises(UserError, match="2 class folders but data.num_classes=1000"):
        ImageNetDataModule(str(tmp_path)).setup("fit")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"batch_size": 0}, "batch_size"),
        ({"train_subset": 0}, "train_subset"),
        ({"num_workers": -1}, "num_workers"),
    ],
)
def test_bad_loader_arguments_give_user_error(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        FashionMNISTDataModule(str(tmp_path), **kwargs)


@pytest.mark.parametrize(
    ("name", "cls"),
    [("fashion_mnist", FashionMNISTDataModule), ("cifar10", CIFAR10DataModule), ("imagenet", ImageNetDataModule)],
)
def test_data_configs_instantiate(tmp_path: Path, name: str, cls: type) -> None:
    root = OmegaConf.create({"paths": {"data_dir": str(tmp_path)}, "data": OmegaConf.load(CONF_DIR / f"{name}.yaml")})
    module = instantiate(root.data)
    assert isinstance(module, cls)
    assert module.data_dir.is_relative_to(tmp_path)
    assert set(module.model_kwargs()) == {"num_classes", "in_channels", "image_size"}
