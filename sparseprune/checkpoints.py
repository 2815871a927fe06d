"""Reading training checkpoints with clear errors: missing, corrupt, or without pruning masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from sparseprune.errors import UserError
from sparseprune.files import atomic_write

PRUNING_STATE_KEY = "StagedPruning"
RESUME_KEYS = ("pytorch-lightning_version", "loops", "optimizer_states")  # what Lightning's resume reads


def check_checkpoint_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"checkpoint {path} does not exist")
    if not path.is_file():
        raise UserError(f"checkpoint {path} is not a file")


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint dict, on CPU. Checkpoints are the user's own training output, so full unpickling is allowed."""
    check_checkpoint_file(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch raises many types for truncated or foreign files
        raise UserError(f"checkpoint {path} is corrupt or not a torch checkpoint ({type(error).__name__})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise UserError(f"{path} is not a Lightning checkpoint (no state_dict)")
    return checkpoint


def pruning_state(checkpoint: dict[str, Any], path: Path) -> dict[str, Any]:
    """The StagedPruning callback's saved state: keep codes per layer, pattern, schedule."""
    state = checkpoint.get("callbacks", {}).get(PRUNING_STATE_KEY)
    if not state or not state.get("codes"):
        raise UserError(f"checkpoint {path} has no pruning masks: it was saved before the first pruning stage")
    return state


def run_config(checkpoint: dict[str, Any], path: Path) -> dict[str, Any]:
    config = checkpoint.get("run_config")
    if not config:
        raise UserError(f"checkpoint {path} carries no run config; it was not written by train.py")
    return config


def load_weights(model: torch.nn.Module, checkpoint: dict[str, Any], path: Path, key: str) -> None:
    """The checkpoint's weights into `model`; a checkpoint of another model or width names `key` and the first
    mismatch."""
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except (RuntimeError, TypeError, AttributeError) as error:
        first = str(error).strip().splitlines()
        raise UserError(f"{key} {path} does not match the model: {' '.join(first[:2])[:300]}") from None


def load_initial_weights(model: torch.nn.Module, path: Path) -> None:
    """Start from a (dense, pre-trained) checkpoint's weights: the usual way to prune a trained model."""
    load_weights(model, load_checkpoint(path), path, "init_ckpt")


def load_resumable(path: Path) -> dict[str, Any]:
    """A checkpoint `ckpt_path` can continue: Lightning's loop and optimizer state beside the weights."""
    checkpoint = load_checkpoint(path)
    if any(key not in checkpoint for key in RESUME_KEYS):
        raise UserError(
            f"ckpt_path {path} holds weights but no training state to resume; start from its weights with "
            f"init_ckpt={path}"
        )
    return checkpoint


def completed_epochs(checkpoint: dict[str, Any], path: Path) -> int:
    """Epochs the checkpointed run had trained through (a checkpoint saved at an epoch's end counts it, though
    Lightning marks the epoch completed only after its checkpoint callbacks ran)."""
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError, ValueError):
        raise UserError(f"ckpt_path {path} has no fit loop progress: it was not written by a Lightning fit") from None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, each checkpoint written with `atomic_write`."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options}")
        atomic_write(Path(path), lambda file: torch.save(checkpoint, file))
