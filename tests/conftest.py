"""Test kinds told apart by marker: `e2e` for the modules that train or export through the real Hydra configs
(most of the suite's time), `gpu` for those that need CUDA; `make test-fast` runs the rest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

E2E_MODULES = {"test_train_e2e", "test_text_e2e", "test_export", "test_sweeps", "test_resume_exact",
               "test_latency_runs", "test_artifact", "test_wandb", "test_ddp"}  # fmt: skip
ROOT = Path(__file__).resolve().parents[1]
RUN_OUTPUTS = ("plots", "wandb", "logs", "lightning_logs", "outputs", "multirun", "checkpoints")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def outputs_stay_out_of_the_repository() -> Iterator[None]:
    """Every test writes under its tmp_path: a run's folder appearing in the repository root is a test that forgot."""
    before = {name for name in RUN_OUTPUTS if (ROOT / name).exists()}
    yield
    appeared = sorted(name for name in RUN_OUTPUTS if (ROOT / name).exists() and name not in before)
    assert not appeared, f"the test wrote {appeared} into {ROOT}; give it a tmp_path (default_root_dir, dir=, cwd=)"
