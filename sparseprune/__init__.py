"""sparseprune: prune networks into tensor-core friendly sparsity patterns and run them on packed kernels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__version__ = "0.1.0"


def load_packed(directory: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> Any:
    """The sparse network export.py wrote into `directory`, in eval mode (sparseprune.export.artifact.load_packed);
    imported on first use, so `import sparseprune` stays light."""
    from sparseprune.export.artifact import load_packed as load

    return load(directory, device, dtype)
