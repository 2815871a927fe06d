"""baseline=tensorrt runs only where torch-tensorrt and TensorRT's libraries load for this torch release, and says in
one line what is missing everywhere else. TensorRT's libraries come from NVIDIA's own index, which CI does not reach,
so only the check is tested."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from hydra_runs import compose_config

from sparseprune.errors import UserError
from sparseprune.export import baselines
from sparseprune.export.baselines import check_baseline, tensorrt_missing
from sparseprune.export.pipeline import export

CUDA = torch.device("cuda")
RELEASE = ".".join(torch.__version__.split(".")[:2])


def _fake_modules(monkeypatch: pytest.MonkeyPatch, torch_tensorrt_version: str | None, tensorrt: Exception | None):
    """torch_tensorrt of that version (None: not installed) and tensorrt importing or raising `tensorrt`."""

    def import_module(name: str) -> types.ModuleType:
        if name == "torch_tensorrt" and torch_tensorrt_version is not None:
            return types.SimpleNamespace(__version__=torch_tensorrt_version)
        if name == "tensorrt" and tensorrt is None:
            return types.SimpleNamespace()
        raise tensorrt if name == "tensorrt" else ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(baselines.importlib, "import_module", import_module)


@pytest.mark.parametrize(
    ("torch_tensorrt_version", "tensorrt", "message"),
    [
        (None, None, "needs torch_tensorrt, which does not import \\(No module named 'torch_tensorrt'\\)"),
        (f"{RELEASE}.0", ModuleNotFoundError("No module named 'tensorrt'"), "TensorRT's libraries, which do not load"),
        (f"{RELEASE}.0", OSError("libnvinfer.so.10: cannot open shared object file"), "libnvinfer.so.10"),
        ("2.1.0", None, "torch_tensorrt 2.1.0 is built for torch 2.1, this is torch "),
    ],
)
def test_missing_pieces_are_named(monkeypatch: pytest.MonkeyPatch, torch_tensorrt_version, tensorrt, message) -> None:
    _fake_modules(monkeypatch, torch_tensorrt_version, tensorrt)
    missing = tensorrt_missing(CUDA)
    assert missing is not None and "\n" not in missing
    assert "pip install 'sparseprune[tensorrt]'" in missing
    with pytest.raises(UserError, match=message):
        check_baseline("tensorrt", CUDA)


def test_a_matching_install_passes_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_modules(monkeypatch, f"{RELEASE}.0", None)
    assert tensorrt_missing(CUDA) is None
    check_baseline("tensorrt", CUDA)


def test_this_machine_is_refused_in_one_line() -> None:
    """Here: no torch_tensorrt (or no TensorRT libraries behind it); on the CPU the device is named first."""
    assert "use device=cuda" in tensorrt_missing(torch.device("cpu"))
    if "torch_tensorrt" not in sys.modules:
        assert "torch_tensorrt" in tensorrt_missing(CUDA) or "TensorRT" in tensorrt_missing(CUDA)
    check_baseline(None, torch.device("cpu"))
    with pytest.raises(UserError, match="baseline must be null or tensorrt, got 'onnx'"):
        check_baseline("onnx", torch.device("cpu"))


def test_export_stops_before_any_work(tmp_path: Path) -> None:
    """The check runs before the checkpoint is read: a missing checkpoint is not what the user hears about."""
    cfg = compose_config("export", [f"ckpt={tmp_path / 'missing.ckpt'}", "baseline=tensorrt", "device=cpu"], tmp_path)
    with pytest.raises(UserError, match="baseline=tensorrt runs TensorRT engines on a CUDA GPU"):
        export(cfg)
    assert not (tmp_path / "export").exists()
