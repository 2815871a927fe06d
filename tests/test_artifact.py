"""The exported directory runs on its own: `sparseprune.load_packed` in a fresh process gives outputs bit-identical to
export's twin for each model family, imports none of the training code, and refuses a corrupt or partial artifact with
one clear line."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG, compose_config
from safetensors.torch import load_file, save_file
from test_text_e2e import QUIET, STAGED, tiny_bert_overrides, tiny_nmt_overrides
from text_fixtures import make_tiny_bert

import sparseprune
from sparseprune.app.training import train
from sparseprune.errors import UserError
from sparseprune.export.artifact import FORMAT_VERSION, MANIFEST_FILE, TENSORS_FILE
from sparseprune.export.pipeline import build_twin, export, rebuild
from sparseprune.files import TEMP_SUFFIX

ROOT = Path(__file__).resolve().parents[1]
VGG_RUN = ["schedule.dense_epochs=0", "schedule.stages=1", "trainer.limit_train_batches=2",
           "trainer.limit_val_batches=1", "importance=magnitude"]  # fmt: skip

# Loads the artifact with nothing of the project imported before, runs the network on the saved inputs, and saves
# its outputs and the training modules that loading pulled in.
LOAD_SCRIPT = """
import sys, torch, sparseprune
directory, inputs_path, outputs_path = sys.argv[1:]
net = sparseprune.load_packed(directory)
inputs = torch.load(inputs_path)
with torch.inference_mode():
    out = net(*inputs["args"], **inputs["kwargs"])
modules = ("lightning", "hydra", "sparseprune.app.training", "sparseprune.models.base")
training = sorted(m for m in modules if m in sys.modules)
torch.save({"output": getattr(out, "logits", out), "training": training, "is_training": net.training}, outputs_path)
"""


def _overrides(family: str, root: Path) -> list[str]:
    if family == "vgg16":
        return TINY_VGG + PATTERN_OVERRIDES["tw"] + VGG_RUN
    make_tiny_bert(root / "bert")
    text = tiny_bert_overrides(root) if family == "bert" else tiny_nmt_overrides(root)
    return [*text, *QUIET, *STAGED, "pattern=tw"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """(checkpoint, export directory) of one tiny pruned run per model family, made on first use."""
    made: dict[str, tuple[Path, Path]] = {}

    def make(family: str) -> tuple[Path, Path]:
        if family not in made:
            root = tmp_path_factory.mktemp(f"artifact-{family}")
            summary = train(compose_config("train", _overrides(family, root), root / "run"))
            out_dir = root / "export"
            export(compose_config("export", [f"ckpt={summary['checkpoint']}", f"out_dir={out_dir}", "repeats=1",
                                             "warmup=0", "batch_size=4"], root))  # fmt: skip
            made[family] = Path(summary["checkpoint"]), out_dir
        return made[family]

    return make


def _inputs(family: str, architecture: dict) -> dict:
    """A fixed input of the network's own signature."""
    generator = torch.Generator().manual_seed(0)
    config = architecture["config"]
    if family == "vgg16":
        return {"args": [torch.randn(3, config["in_channels"], 32, 32, generator=generator)], "kwargs": {}}
    if family == "bert":
        ids = torch.randint(5, config["vocab_size"], (2, 8), generator=generator)
        mask = torch.ones_like(ids)
        mask[1, 5:] = 0
        kwargs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        return {"args": [], "kwargs": kwargs}
    src = torch.randint(4, config["src_vocab_size"], (2, 6), generator=generator)
    src[1, 4:] = 0  # padded
    return {"args": [src, torch.randint(4, config["tgt_vocab_size"], (2, 5), generator=generator)], "kwargs": {}}


@pytest.mark.parametrize("family", ["vgg16", "bert", "lstm_nmt"])
def test_fresh_process_load_is_bit_identical_to_exports_twin(family: str, exported, tmp_path: Path) -> None:
    ckpt, out_dir = exported(family)
    manifest = json.loads((out_dir / MANIFEST_FILE).read_text())
    assert manifest["format_version"] == FORMAT_VERSION and manifest["architecture"]["family"] == family
    assert not list(out_dir.glob(f"*{TEMP_SUFFIX}")), "a temporary file of the atomic writes was left"
    inputs = _inputs(family, manifest["architecture"])
    torch.save(inputs, tmp_path / "inputs.pt")
    command = [sys.executable, "-c", LOAD_SCRIPT, str(out_dir), str(tmp_path / "inputs.pt"), str(tmp_path / "out.pt")]
    subprocess.run(command, cwd=tmp_path, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    loaded = torch.load(tmp_path / "out.pt")
    assert loaded["training"] == [] and loaded["is_training"] is False

    reference, weights, _, state, _ = rebuild(ckpt, batch_size=4)
    twin = build_twin(reference, weights, state, fold=True).twin
    with torch.inference_mode():
        expected = getattr(twin, manifest["architecture"]["module"])(*inputs["args"], **inputs["kwargs"])
    expected = getattr(expected, "logits", expected)
    assert loaded["output"].dtype == expected.dtype and torch.equal(loaded["output"], expected)


def _rewrite_manifest(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(directory: Path) -> None:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
        edit(manifest)
        (directory / MANIFEST_FILE).write_text(json.dumps(manifest))

    return damage


def _truncate(directory: Path) -> None:
    path = directory / TENSORS_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _reshape_dense_tensor(directory: Path) -> None:
    """A consistent but wrong file: one dense tensor of another shape, the checksum updated to match."""
    tensors = load_file(directory / TENSORS_FILE)
    key = next(k for k in tensors if k.startswith("dense::") and k.endswith("bias"))
    tensors[key] = torch.zeros(tensors[key].numel() + 1)
    save_file(tensors, directory / TENSORS_FILE)
    sha = hashlib.sha256((directory / TENSORS_FILE).read_bytes()).hexdigest()
    _rewrite_manifest(lambda manifest: manifest.update(sha256=sha))(directory)


def _first_layer(manifest: dict) -> dict:
    return next(iter(manifest["layers"].values()))


DAMAGE = {
    "no manifest": (lambda d: (d / MANIFEST_FILE).unlink(), "holds no packed.json"),
    "no tensors": (lambda d: (d / TENSORS_FILE).unlink(), "cannot read .*packed.safetensors"),
    "truncated tensors": (_truncate, "does not match packed.json"),
    "corrupt manifest": (lambda d: (d / MANIFEST_FILE).write_text("{not json"), "packed.json is corrupt"),
    "wrong version": (_rewrite_manifest(lambda m: m.update(format_version=99)), "format_version 99"),
    "manifest key missing": (_rewrite_manifest(lambda m: m.pop("architecture")), r"lacks \['architecture'\]"),
    "layer shape tampered": (
        _rewrite_manifest(lambda m: _first_layer(m)["metadata"].update(shape=[8, 8])),
        r"is \(8, 8\), the architecture has",
    ),
    "unknown format": (_rewrite_manifest(lambda m: _first_layer(m).update(format="dia")), "unknown packed format"),
    "dense shape tampered": (_reshape_dense_tensor, "weights do not match the architecture"),
    "unknown family": (_rewrite_manifest(lambda m: m["architecture"].update(family="resnet")), "unknown model family"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_corrupt_or_partial_artifact_is_one_clear_error(case: str, exported, tmp_path: Path) -> None:
    _, out_dir = exported("vgg16")
    damaged = tmp_path / "export"
    shutil.copytree(out_dir, damaged)
    damage, message = DAMAGE[case]
    damage(damaged)
    with pytest.raises(UserError, match=message) as error:
        sparseprune.load_packed(damaged)
    assert "\n" not in str(error.value)


def test_missing_directory_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is not a directory"):
        sparseprune.load_packed(tmp_path / "nowhere")
