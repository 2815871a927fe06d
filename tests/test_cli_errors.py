"""Bad input on the command line gives one clear line, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model.width_multiplier=0.25", "logger=none", "trainer=debug", "data.train_subset=64"]


def run(script: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"SPARSEPRUNE_DATA_DIR": str(tmp_path / "data"), "HYDRA_FULL_ERROR": "0"}
    command = [sys.executable, str(ROOT / script), *args, f"hydra.run.dir={tmp_path / 'run'}"]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def assert_clear_error(result: subprocess.CompletedProcess, message: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert message in output, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=resnet9000"], "Could not find 'model/resnet9000'"),
        (["pattern=diagonal"], "Could not find 'pattern/diagonal'"),
        (["data=mnist3d"], "Could not find 'data/mnist3d'"),
        (["schedule.target=1.5"], "error: sparsity must lie in [0, 1), got 1.5"),
        (["pattern.granularity=12"], "error: granularity G=12 must be a multiple of 8"),
        (["pattern=vw", "pattern.vector=7"], "error: vector=7 does not fit layer"),
        (["pattern=bw"], "error: block_k=32 does not fit layer"),
        (["pattern=nm", "pattern.n=4", "pattern.m=4"], "error: N:M needs N < M, got 4:4"),
        (["pattern=nm", "schedule.target=0.5"], "error: pattern nm fixes sparsity at 0.75"),
        (["importance.kind=hessian"], "error: importance.kind must be one of"),
        (["data=cifar10", "data.download=false"], "error: CIFAR-10"),
        (["ckpt_path=/nonexistent/last.ckpt"], "error: checkpoint /nonexistent/last.ckpt does not exist"),
    ],
)
def test_train_bad_input(args: list[str], message: str, tmp_path: Path) -> None:
    assert_clear_error(run("train.py", *TINY, *args, tmp_path=tmp_path), message)


def test_export_bad_input(tmp_path: Path) -> None:
    assert_clear_error(run("export.py", tmp_path=tmp_path), "error: ckpt is required: add ckpt=... to the command line")
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"\x00garbage")
    assert_clear_error(run("export.py", f"ckpt={corrupt}", tmp_path=tmp_path), "error: checkpoint")
    unpruned = tmp_path / "dense.ckpt"
    torch.save({"state_dict": {}, "callbacks": {}}, unpruned)
    assert_clear_error(run("export.py", f"ckpt={unpruned}", tmp_path=tmp_path), "has no pruning masks")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown on machines without a GPU")
def test_export_asks_for_a_missing_gpu(tmp_path: Path) -> None:
    unpruned = tmp_path / "dense.ckpt"
    torch.save({"state_dict": {}, "callbacks": {}}, unpruned)
    assert_clear_error(run("export.py", f"ckpt={unpruned}", "device=cuda", tmp_path=tmp_path), "no CUDA GPU")
