"""The exported model as a directory that runs on its own: `load_packed(dir)` gives back the sparse twin export timed.

    packed.safetensors  packed::<layer>::<array> for every packed layer, dense::<name> for every other parameter and
                        buffer (batch norms folded into their convolutions are absent)
    packed.json         format_version, the network as data (`architectures`), the pattern, the folded norms, each
                        layer's format and metadata, and the SHA-256 of packed.safetensors

Both are written atomically, packed.json last: a directory without it is a partial export. Loading checks everything
before it builds anything (version, checksum, every layer against the architecture's shapes), so a corrupt or partial
artifact is one clear error and never a half-loaded model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import nn

from sparseprune.errors import UserError
from sparseprune.export.architectures import build
from sparseprune.export.feature_major_bert import with_feature_major_encoders
from sparseprune.export.fold import fold_batch_norms
from sparseprune.export.formats.base import PackedWeight
from sparseprune.export.packing import packed_from_tensors
from sparseprune.export.swap import sparsify
from sparseprune.files import atomic_write, write_text
from sparseprune.pruning.gemm_view import find_prunable

FORMAT_VERSION = 1
TENSORS_FILE = "packed.safetensors"
MANIFEST_FILE = "packed.json"
MANIFEST_KEYS = ("format_version", "architecture", "pattern", "folded_batch_norms", "layers", "sha256")


def write_artifact(
    directory: Path,
    model: nn.Module,
    packed: Mapping[str, PackedWeight],
    pattern: Mapping[str, Any],
    folded: list[str],
    architecture: dict[str, Any],
) -> Path:
    """Write packed.safetensors, then packed.json, into `directory`; `model` is the (folded) masked dense task whose
    `packed` weights are stored packed and everything else as it is. Returns the tensors file."""
    tensors = {f"packed::{name}::{key}": t.contiguous() for name, p in packed.items() for key, t in p.tensors().items()}
    tensors |= {f"dense::{k}": v.contiguous() for k, v in model.state_dict().items() if k not in packed}
    payload = save(tensors)
    atomic_write(directory / TENSORS_FILE, lambda file: file.write(payload))
    manifest = {
        "format_version": FORMAT_VERSION,
        "architecture": architecture,
        "pattern": dict(pattern),
        "folded_batch_norms": folded,
        "layers": {
            name: {"format": p.format_name, "metadata": p.metadata(), "packed_bytes": p.nbytes()}
            for name, p in packed.items()
        },
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    write_text(directory / MANIFEST_FILE, json.dumps(manifest, indent=2))
    return directory / TENSORS_FILE


def read_manifest(directory: Path) -> dict[str, Any]:
    """packed.json, checked for its version and keys."""
    path = directory / MANIFEST_FILE
    if not directory.is_dir():
        raise UserError(f"{directory} is not a directory; pass the folder export.py wrote (out_dir)")
    if not path.is_file():
        raise UserError(f"{directory} holds no {MANIFEST_FILE}: not an export, or a partial one; run export.py again")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is corrupt ({type(error).__name__}); run export.py again") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{path} is corrupt (not a JSON object); run export.py again")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise UserError(f"{path} has format_version {version!r}; this sparseprune reads {FORMAT_VERSION}: "
                        "export the checkpoint again with this version")  # fmt: skip
    missing = [key for key in MANIFEST_KEYS if key not in manifest]
    if missing:
        raise UserError(f"{path} lacks {missing}; run export.py again")
    return manifest


def read_tensors(directory: Path, sha256: str) -> dict[str, torch.Tensor]:
    """packed.safetensors, on the CPU, after its checksum matched packed.json's."""
    path = directory / TENSORS_FILE
    try:
        payload = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read {path} ({error.strerror or error}); run export.py again") from None
    if hashlib.sha256(payload).hexdigest() != sha256:
        raise UserError(f"{path} does not match {MANIFEST_FILE} (truncated or modified); run export.py again")
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise UserError(f"{path} is corrupt ({error}); run export.py again") from None


def _strip(name: str, prefix: str, directory: Path) -> str:
    if not name.startswith(prefix):
        raise UserError(f"{directory / MANIFEST_FILE}: {name} lies outside the network {prefix!r}")
    return name.removeprefix(prefix)


def _packed_layers(
    manifest: dict[str, Any], tensors: Mapping[str, torch.Tensor], net: nn.Module, prefix: str, directory: Path
) -> dict[str, PackedWeight]:
    """Every packed layer rebuilt from its arrays, named inside `net`, each checked against the architecture's shape."""
    shapes = {w.name: w.gemm_shape for w in find_prunable(net)}
    layers = {}
    for name, layer in manifest["layers"].items():
        inner = _strip(name, prefix, directory)
        parts = {key.split("::")[2]: t for key, t in tensors.items() if key.startswith(f"packed::{name}::")}
        try:
            packed = packed_from_tensors(layer["format"], parts, layer["metadata"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise UserError(
                f"{directory}: packed layer {name} does not rebuild ({type(error).__name__}: {error})"
            ) from None
        if inner not in shapes or tuple(packed.shape) != shapes[inner]:
            raise UserError(f"{directory}: packed layer {name} is {tuple(packed.shape)}, the architecture has "
                            f"{shapes.get(inner, 'no such layer')}")  # fmt: skip
        if packed.nbytes() != layer["packed_bytes"]:
            raise UserError(f"{directory}: packed layer {name} holds {packed.nbytes()} bytes, "
                            f"{MANIFEST_FILE} says {layer['packed_bytes']}")  # fmt: skip
        layers[inner] = packed
    return layers


def _load_dense(net: nn.Module, tensors: Mapping[str, torch.Tensor], packed: Mapping[str, PackedWeight],
                prefix: str, directory: Path) -> None:  # fmt: skip
    """The dense parameters and buffers into `net`: exactly the packed weights may be missing, nothing else."""
    dense = {_strip(key.removeprefix("dense::"), prefix, directory): t for key, t in tensors.items()
             if key.startswith("dense::")}  # fmt: skip
    try:
        result = net.load_state_dict(dense, strict=False)
    except RuntimeError as error:
        first = " ".join(str(error).strip().splitlines()[:2])[:300]
        raise UserError(f"{directory}: weights do not match the architecture: {first}") from None
    missing = sorted(set(result.missing_keys) - set(packed))
    if missing or result.unexpected_keys:
        raise UserError(f"{directory}: weights do not match the architecture: missing {missing[:3]}, "
                        f"unexpected {result.unexpected_keys[:3]}")  # fmt: skip


def load_packed(
    directory: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> nn.Module:
    """The sparse network export.py packed into `directory`, in eval mode on `device` (values cast to `dtype` if
    given): its packed layers, its feature-major BERT encoders and storage-order pools as export timed them."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    tensors = read_tensors(directory, manifest["sha256"])
    architecture = manifest["architecture"]
    prefix = f"{architecture.get('module', '')}." if architecture.get("module") else ""
    net = build(architecture)
    folded = [_strip(name, prefix, directory) for name in manifest["folded_batch_norms"]]
    if folded and fold_batch_norms(net) != folded:  # the structure only: the folded values come from the file
        raise UserError(f"{directory}: folded batch norms {folded[:3]} do not match the architecture's")
    packed = _packed_layers(manifest, tensors, net, prefix, directory)
    _load_dense(net, tensors, packed, prefix, directory)
    twin, _ = with_feature_major_encoders(sparsify(net, find_prunable(net), packed))
    return twin.to(device=device, dtype=dtype).eval()
