"""Dense baselines from outside the project, timed beside export's own rows: `baseline=tensorrt` is the dense model
compiled by torch-tensorrt, the engine a deployment on NVIDIA GPUs would otherwise use.

torch-tensorrt loads TensorRT's libraries (the `tensorrt` package) at import; where either is missing, or built for
another torch release, export stops before any work with one line saying what is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from sparseprune.errors import UserError

BASELINES = (None, "tensorrt")
INSTALL = "pip install 'sparseprune[tensorrt]' (torch-tensorrt for this torch release, and TensorRT's libraries)"


def _import(name: str) -> tuple[Any, str | None]:
    """(module, None), or (None, why it does not import): a missing shared library raises OSError, not ImportError."""
    try:
        return importlib.import_module(name), None
    except (ImportError, OSError) as error:
        return None, (str(error).strip().splitlines() or [type(error).__name__])[0]


def tensorrt_missing(device: torch.device) -> str | None:
    """What keeps `baseline=tensorrt` from running here, or None."""
    if device.type != "cuda":
        return f"baseline=tensorrt runs TensorRT engines on a CUDA GPU; export runs on {device}: use device=cuda"
    torch_tensorrt, why = _import("torch_tensorrt")
    if torch_tensorrt is None:
        return f"baseline=tensorrt needs torch_tensorrt, which does not import ({why}): {INSTALL}"
    _, why = _import("tensorrt")
    if why is not None:
        return f"baseline=tensorrt needs TensorRT's libraries, which do not load ({why}): {INSTALL}"
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    built_for = ".".join(str(torch_tensorrt.__version__).split(".")[:2])
    if built_for != release:
        return (f"baseline=tensorrt: torch_tensorrt {torch_tensorrt.__version__} is built for torch {built_for}, "
                f"this is torch {torch.__version__}: {INSTALL}")  # fmt: skip
    return None


def check_baseline(baseline: Any, device: torch.device) -> None:
    """export.yaml's `baseline`, refused with one line before export rebuilds anything."""
    if baseline not in BASELINES:
        raise UserError(f"baseline must be null or tensorrt, got {baseline!r}")
    if baseline == "tensorrt" and (missing := tensorrt_missing(device)) is not None:
        raise UserError(missing)


def tensorrt_call(net: Any, batch: Any, dtype: torch.dtype) -> Callable[[], object]:
    """The dense model's predict_batch as a torch-tensorrt engine in `dtype`, built here by a first call so that no
    engine build runs inside a timing."""
    import torch_tensorrt  # noqa: F401  registers the torch.compile backend

    compiled = torch.compile(net.predict_batch, backend="torch_tensorrt", dynamic=False,
                             options={"enabled_precisions": {dtype}, "min_block_size": 1})  # fmt: skip
    compiled(batch)
    return lambda: compiled(batch)
