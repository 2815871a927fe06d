"""Fashion-MNIST, the embedded default: 70 000 28x28 grey images of clothes in 10 classes.

The Debian package `dataset-fashion-mnist` installs the original gzipped IDX files under
/usr/share/datasets/fashion-mnist; they are read from there when present, so the default run needs no
network. Otherwise torchvision downloads the same files into `data_dir`. Images are padded to 32x32 so
VGG16's five poolings end on a 1x1 map.
"""

from __future__ import annotations

import gzip
import logging
import struct
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sparseprune.data.image_common import TensorImageDataModule, absent_dataset_error, first_line
from sparseprune.errors import UserError

log = logging.getLogger(__name__)

SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
NUM_CLASSES = 10
RAW_SIZE = 28
PADDED_SIZE = 32
# Per-pixel statistics of the 28x28 training images.
MEAN = (0.2860,)
STD = (0.3530,)

# IDX type byte -> big-endian numpy dtype (the format of LeCun's MNIST files).
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as error:
        raise UserError(f"cannot read IDX file {path}: {error}; delete it and fetch it again") from error


def parse_idx(data: bytes, source: str = "IDX data") -> np.ndarray:
    """Decode an IDX buffer (magic 0 0 type ndim, ndim big-endian int32 sizes, then the values)."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        raise UserError(f"{source} is not an IDX file (bad magic number {data[:4].hex()})")
    dtype = np.dtype(IDX_DTYPES[data[2]])
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise UserError(f"{source} is truncated inside its IDX header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise UserError(f"{source} holds {len(data) - header} bytes of values, but its header {shape} needs {expected}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


def read_idx(path: Path) -> np.ndarray:
    return parse_idx(_read_bytes(path), source=str(path))


def _find_file(directory: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def find_split_files(directories: list[Path], train: bool) -> tuple[Path, Path] | None:
    """(images, labels) from the first directory that holds both, gzipped or not."""
    for directory in directories:
        found = [_find_file(directory, stem) for stem in FILES[train]]
        if found[0] is not None and found[1] is not None:
            return found[0], found[1]
    return None


def load_idx_pair(images_path: Path, labels_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 1, 28, 28) uint8 and labels (N,) int64, checked against each other."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8 or images.shape[1:] != (RAW_SIZE, RAW_SIZE):
        raise UserError(f"{images_path} should hold uint8 {RAW_SIZE}x{RAW_SIZE} images, got {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise UserError(f"{labels_path} should hold {len(images)} labels, got shape {labels.shape}")
    if labels.size and int(labels.max()) >= NUM_CLASSES:
        raise UserError(f"{labels_path} holds label {int(labels.max())}, beyond the {NUM_CLASSES} classes")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


class FashionMNISTDataModule(TensorImageDataModule):
    """Fashion-MNIST padded to 32x32, one channel, 10 classes; 60 000 train (minus val), 10 000 test."""

    num_classes = NUM_CLASSES
    in_channels = 1
    image_size = PADDED_SIZE
    mean = MEAN
    std = STD

    def _directories(self) -> list[Path]:
        return [SYSTEM_DIR, self.data_dir / "FashionMNIST" / "raw"]

    def prepare_data(self) -> None:
        if all(find_split_files(self._directories(), train) for train in (True, False)) or not self.download:
            return
        from torchvision.datasets import FashionMNIST

        log.info("Fashion-MNIST not found locally; downloading into %s", self.data_dir)
        try:
            FashionMNIST(str(self.data_dir), train=True, download=True)
        except (RuntimeError, OSError) as error:  # torchvision's "Error downloading" or a network error
            raise self._absent(f"the download failed ({first_line(error)}); ") from error

    def _absent(self, reason: str = "") -> UserError:
        return absent_dataset_error(
            "Fashion-MNIST",
            self.data_dir / "FashionMNIST" / "raw",
            f"{reason}install the Debian package dataset-fashion-mnist (files under {SYSTEM_DIR}), run with "
            "data.download=true, or place train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
            "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz there",
        )

    def load_uint8(self, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        self.prepare_data()  # a no-op when the files are there; covers callers that skip the Trainer's hook
        paths = find_split_files(self._directories(), train)
        if paths is None:
            raise self._absent()
        log.info("reading Fashion-MNIST %s split from %s", "train" if train else "test", paths[0].parent)
        images, labels = load_idx_pair(*paths)
        border = (PADDED_SIZE - RAW_SIZE) // 2
        return F.pad(images, (border, border, border, border)), labels
